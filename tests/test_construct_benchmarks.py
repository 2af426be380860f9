"""experiments/construct_benchmarks.py end to end on a one-file benchmark folder."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import pytest

from conftest import experiment
from placeto_jax.cluster import Cluster
from placeto_jax.config import make_config
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.reproduce.construct import train_construct
from placeto_jax.rl import construct_loop as loop
from placeto_jax.stages.teachers import best_teacher, teachers


def _operator_file(path: Path) -> None:
    """A fork-join of 6 operators on 3 accelerators of 1 GB."""
    nodes = [
        {"id": i, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 0.1 * (i + 1),
         "isBackwardNode": False, "size": 1e6, "name": f"op{i}"}
        for i in range(6)
    ]  # fmt: skip
    edges = [{"sourceId": a, "destId": b, "cost": 0.01, "size": 1e5} for a, b in
             [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4), (4, 5)]]  # fmt: skip
    doc = {"maxSizePerFPGA": 1e9, "maxFPGAs": 3, "maxCPUs": 1, "nodes": nodes, "edges": edges}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))


@pytest.mark.slow
@pytest.mark.parametrize("level", ["OperatorGraphs", "LayerGraphs"])
def test_an_untrained_checkpoint_places_like_its_control_on_another_device_count(
    tmp_path, monkeypatch, level
):
    module = experiment("construct_benchmarks", monkeypatch)
    _operator_file(tmp_path / "data" / "throughput-inputs" / level / "fork.json")
    config = make_config("construct", ["train.imitation=0"], n_devices=2)  # no update at all
    named = [("chain", Graph.from_edges(cost=[1.0, 2.0], out_bytes=[8, 8], edges=[(0, 1)]))]
    cluster = Cluster.preset("placeto-k80", 2)
    loop.train_in(config, named, cluster, tmp_path / "run", teachers(named, cluster, 0), False)
    out = tmp_path / "out.json"
    argv = ["--data", str(tmp_path / "data"), "--checkpoint", str(tmp_path / "run"),
            "--per-graph", "--per-graph-set", "train.imitation=2", "--level", level,
            "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["devices"] == 3 and row["ops"] == 6 and row["evaluations"] == 17
    assert row["policy_ratio"] == row["untrained_ratio"]  # the same weights, the same pipeline
    assert row["policy_fits"] and row["heuristic_fits"]
    assert row["policy_ratio"] == pytest.approx(row["policy_raw_ratio"])  # fits: no penalty
    for label in ("uniform", "per_graph"):
        assert row[f"{label}_ratio"] > 0


@pytest.mark.slow
def test_named_graphs_are_placed_on_the_devices_asked_for(tmp_path, monkeypatch):
    module = experiment("construct_benchmarks", monkeypatch)
    config = make_config("construct", ["train.imitation=0"], n_devices=2)
    named = [("chain", Graph.from_edges(cost=[1.0, 2.0], out_bytes=[8, 8], edges=[(0, 1)]))]
    cluster = Cluster.preset("placeto-k80", 2)
    loop.train_in(config, named, cluster, tmp_path / "run", teachers(named, cluster, 0), False)
    out = tmp_path / "out.json"
    argv = ["--graphs", "example:diamond,layered:12", "--devices", "3", "--checkpoint",
            str(tmp_path / "run"), "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["graph"], r["ops"], r["devices"]) for r in rows] == [
        ("example:diamond", 4, 3), ("layered:12", 12, 3)
    ]  # fmt: skip
    assert all(r["policy_ratio"] == r["untrained_ratio"] for r in rows)  # the same weights


@pytest.mark.slow
def test_a_lookahead_policy_is_shown_beside_its_rule_which_never_loses_to_its_hint(
    tmp_path, monkeypatch
):
    module = experiment("construct_benchmarks", monkeypatch)
    config = make_config("construct-lookahead", ["train.imitation=1"], n_devices=3)
    cluster = Cluster.preset("placeto-k80", 3)
    named = [("layered:12", resolve_graph("layered:12"))]
    train_construct(config, named, cluster, tmp_path / "run")
    out = tmp_path / "out.json"
    argv = ["--graphs", "layered:12,example:diamond", "--devices", "3", "--checkpoint",
            str(tmp_path / "run"), "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["pipeline"]["samples"] == 0  # the greedy lookahead episode alone
    for row in doc["rows"]:
        graph = resolve_graph(row["graph"])
        hint = best_teacher(graph, cluster, jax.random.key(0))[0]
        assert row["heuristic_fits"] and hint.fits_memory
        rule_us = row["lookahead_rule_ratio"] * row["heuristic_ms"] * 1e3
        assert rule_us <= hint.makespan * (1 + 1e-6)  # moves only to strictly better devices
    assert "lookahead_rule" in doc["geomean"]
