"""Ablations: each variant changes the config field it names, and a tiny run writes every
output."""

from __future__ import annotations

import json

import pytest

from placeto_jax import Graph
from placeto_jax.config import apply
from placeto_jax.graphs.io import save_graph
from placeto_jax.reproduce import ablations

EXPECTED = {
    "full Placeto": {},
    "no message passing": {"policy.message_passing": "none"},
    "sweep message passing": {"policy.message_passing": "sweep"},
    "random traversal": {"env.traversal": "random"},
    "no per-step baseline": {"train.baseline": "none"},
    "per-device parallel pooling": {"policy.per_device_parallel": True},
}


@pytest.mark.parametrize("settings", [ablations.QUICK, ablations.FULL])
def test_each_variant_changes_only_its_field(settings):
    assert [v.name for v in ablations.VARIANTS] == list(EXPECTED)
    full = ablations.variant_config(settings, ablations.VARIANTS[0])
    assert full.policy.message_passing == "radial" and full.env.traversal == "topological"
    assert full.train.baseline == "per-step" and not full.policy.per_device_parallel
    for variant in ablations.VARIANTS:
        assert ablations.variant_config(settings, variant) == apply(full, EXPECTED[variant.name])


def test_quick_settings_are_cpu_sized_and_full_ones_larger():
    quick = ablations.variant_config(ablations.QUICK, ablations.VARIANTS[0])
    full = ablations.variant_config(ablations.FULL, ablations.VARIANTS[0])
    assert ablations.QUICK.seeds == 3 and ablations.FULL.seeds == 5
    assert (
        quick.train.iterations * quick.train.episodes < full.train.iterations * full.train.episodes
    )


@pytest.mark.slow
def test_a_tiny_ablation_run_writes_every_output(tmp_path, monkeypatch):
    graph = tmp_path / "g.json"
    save_graph(Graph.from_edges([100.0] * 6, [1e5] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)]), graph)
    tiny = ablations.Settings(
        str(graph),
        2,
        2,
        ("train.iterations=2", "train.episodes=4", "policy.rounds=1", "run.buckets=8"),
    )
    monkeypatch.setattr(ablations, "QUICK", tiny)
    monkeypatch.setattr(ablations, "VARIANTS", ablations.VARIANTS[:2])
    readme = ablations.run_ablations(tmp_path / "results", quick=True, progress=False)
    assert readme == tmp_path / "results" / "ablations" / "README.md"
    for name in ("ablations.csv", "ablations.json", "curves.png", "header.json"):
        assert (readme.parent / name).stat().st_size > 0
    rows = json.loads((readme.parent / "ablations.json").read_text())
    assert [r["variant"] for r in rows] == ["full Placeto", "no message passing"]
    assert rows[0]["vs_full"] == 1.0
    assert all(r["makespan_ms"] <= r["initial_ms"] for r in rows)
    header = json.loads((readme.parent / "header.json").read_text())
    assert header["preset"] == "quick" and header["seeds"] == [0, 1]
    assert header["config"]["overrides"] == list(tiny.overrides)
    assert "![Learning curves" in readme.read_text()
