"""The construct agent's columns in `reproduce generalization` and `reproduce table1`, on tiny
graphs: each makespan is its placement's exact simulation, each evaluation count is the
simulations its training and placing ran, an untrained family policy places as the untrained
control does, and the uniform control draws uniformly random episodes."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from placeto_jax.cluster import Cluster
from placeto_jax.config import PIPELINES
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import place_many, untrained
from placeto_jax.placers import run_method
from placeto_jax.reproduce import construct, generalization, table1
from placeto_jax.rl import construct_loop
from placeto_jax.sim.api import simulate
from placeto_jax.stages.teachers import best_teacher, teachers

MS = 1e3  # µs
TINY_CONSTRUCT = ("train.imitation=2", "train.iterations=2", "run.eval_every=1")
# 2 self-imitation updates of 8 episodes on the one graph, 4 greedy evaluations of it
TINY_TRAINING_SIMULATIONS = 2 * 8 + 4
SAMPLED_EPISODES = 17  # greedy + 16 sampled
TINY_PLACETO = ("train.iterations=2", "train.episodes=4", "run.eval_every=1",
                "policy.rounds=1", "run.group_target=8")  # fmt: skip


def _recording(monkeypatch) -> tuple[list, list]:
    """([(policy, name, graph, Placed)] of every construct placement the experiments make,
    [rows each exact scoring of construct training simulated])."""
    placed, simulated = [], []
    place, scores = construct.place_many, construct_loop.scores

    def recorded_place(named, cluster, pipeline, policy, key, **how):
        out = place(named, cluster, pipeline, policy, key, **how)
        placed.append((policy, *named[0], out[0]))
        return out

    def recorded_scores(bank, cluster, ids, devices):
        simulated.append(int(np.prod(np.asarray(devices).shape[:2])))
        return scores(bank, cluster, ids, devices)

    monkeypatch.setattr(construct, "place_many", recorded_place)
    monkeypatch.setattr(construct_loop, "scores", recorded_scores)
    return placed, simulated


def _teacher_simulations(graph, cluster: Cluster) -> int:
    """Simulations choosing a graph's teacher: each fast heuristic's own and one scoring it."""
    return sum(r.evaluations + 1 for r in best_teacher(graph, cluster, jax.random.key(0)))


def _exact_ms(graph, cluster: Cluster, placed) -> float:
    return float(simulate(graph, cluster, placed.result.placement).makespan) / MS


def test_teachers_carry_the_simulations_that_chose_them():
    cluster = Cluster.preset("placeto-k80", 2)
    named = [("a", resolve_graph("layered:12")), ("b", resolve_graph("layered:12:1"))]
    taught = teachers(named, cluster, 0)
    for mine, (_, graph) in zip(taught, named, strict=True):
        theirs = best_teacher(graph, cluster, jax.random.key(0))[0]
        np.testing.assert_array_equal(mine.placement, theirs.placement)
        assert mine.makespan == theirs.makespan
    spent = sum(t.evaluations for t in taught)
    assert spent == sum(_teacher_simulations(g, cluster) for _, g in named)


def _generalization_on_layered(tmp_path, monkeypatch, **construct) -> tuple:
    """`reproduce generalization` on 2 devices, cifar10's graphs stood in by `layered:12`
    graphs (2 train, 2 test), Placeto's columns by the single device, the construct agent's
    settings `construct`: (its settings, its tables' rows, the recorded placements and
    training scorings (`_recording`), its output folder)."""
    small = {f"family:cifar10/{i}": f"layered:12:{k}" for k, i in enumerate((0, 1, 24, 25))}
    monkeypatch.setattr(generalization, "load", lambda name: resolve_graph(small[name]))

    def single_device_placeto(settings, train, tests, cluster, workdir, progress):
        """Placeto's columns stood in by the single device (tests/test_reproduce.py trains it)."""
        return lambda i, key: {
            m: (run_method("single", tests[i][1], cluster, key), 0)
            for m in (*generalization.PLACETO, "zero-shot untrained")
        }

    monkeypatch.setattr(generalization, "_placeto", single_device_placeto)
    settings = dataclasses.replace(
        generalization.PRESETS["quick"],
        families=("cifar10",),
        devices=2,
        train_graphs=2,
        test_graphs=2,
        baselines=("single", "heft"),
        **construct,
    )
    monkeypatch.setitem(generalization.PRESETS, "quick", settings)
    placed, simulated = _recording(monkeypatch)
    generalization.run_generalization(tmp_path, "quick", progress=False)
    out = tmp_path / "generalization"
    tables = [json.loads((out / f"{t}.json").read_text())
              for t in ("makespan", "evaluations", "relative")]  # fmt: skip
    return settings, *tables, placed, simulated, out


def test_generalization_adds_the_construct_agents_columns(tmp_path, monkeypatch):
    settings, rows, evals, relative, placed, simulated, out = _generalization_on_layered(
        tmp_path,
        monkeypatch,
        construct_preset="construct",
        construct_training=("train.imitation=0", "train.iterations=0"),  # the untrained policy
        construct_per_graph=TINY_CONSTRUCT,
    )
    cluster = Cluster.preset(settings.cluster, 2)
    assert [r["graph"] for r in rows] == ["family:cifar10/24", "family:cifar10/25"]
    assert len(placed) == 8  # per test graph: the family policy, its 2 controls, then its own
    for k, (row, ev, rel) in enumerate(zip(rows, evals, relative, strict=True)):
        (family, name, graph, zero), cold, chance, (_, _, _, own) = placed[4 * k : 4 * k + 4]
        assert name == row["graph"]
        assert not family.uniform and not cold[0].uniform and chance[0].uniform
        columns = {"construct zero-shot": zero, "construct untrained": cold[3],
                   "construct uniform": chance[3], "construct per-graph": own}  # fmt: skip
        for column, p in columns.items():
            assert row[column] == pytest.approx(_exact_ms(graph, cluster, p))
        assert ev["construct zero-shot"] == zero.evaluations == SAMPLED_EPISODES
        assert ev["construct untrained"] == ev["construct uniform"] == SAMPLED_EPISODES
        np.testing.assert_array_equal(cold[3].result.placement, zero.result.placement)
        assert ev["construct per-graph"] == (
            _teacher_simulations(graph, cluster) + TINY_TRAINING_SIMULATIONS + SAMPLED_EPISODES
        )
        (control,) = place_many([(name, graph)], cluster, PIPELINES["sampled"],
                                untrained(family), jax.random.key(0), compare=False)  # fmt: skip
        np.testing.assert_array_equal(zero.result.placement, control.result.placement)
        best = min(row["single"], row["heft"])
        for method in (*generalization.CONSTRUCT, "construct untrained", "construct uniform"):
            assert rel[method] == pytest.approx(row[method] / best)
    assert sum(simulated) == 2 * TINY_TRAINING_SIMULATIONS  # the untrained family policy: none
    assert (out / "runs" / "cifar10-construct-d2-quick" / "run.json").is_file()
    assert (out / "cdf.png").is_file()


def test_generalization_places_the_lookahead_preset_with_its_greedy_episode(tmp_path, monkeypatch):
    """The default construct columns: the lookahead preset, one greedy episode, its lookahead's
    simulations counted: on 12 ops without co-location on 2 devices, one a decision and the
    hint's own once, 12 + 1."""
    settings, rows, evals, _, placed, simulated, out = _generalization_on_layered(
        tmp_path, monkeypatch, construct_training=("train.imitation=2",),
        construct_per_graph=("train.imitation=2",),
    )  # fmt: skip
    assert settings.construct_preset == "construct-lookahead"
    cluster = Cluster.preset(settings.cluster, 2)
    assert len(placed) == 8  # per test graph: the family policy, its 2 controls, then its own
    for k, (row, ev) in enumerate(zip(rows, evals, strict=True)):
        (family, name, graph, zero), cold, chance, (_, _, _, own) = placed[4 * k : 4 * k + 4]
        assert name == row["graph"] and not cold[0].uniform and chance[0].uniform
        assert family.config.env.construct_lookahead and graph.colocation is None
        assert graph.n_ops == 12
        hint = _teacher_simulations(graph, cluster)  # the heuristics that make the hint
        looked = 12 + 1
        assert ev["construct zero-shot"] == ev["construct untrained"] == hint + 1 + looked
        assert ev["construct uniform"] == hint + 1  # a uniform episode reads no lookahead
        # trained on the graph alone: its teacher (the hint, the lookahead's episode and one
        # scoring it), then its own greedy episode
        assert ev["construct per-graph"] == (hint + looked + 1) + (hint + 1 + looked)
        columns = {"construct zero-shot": zero, "construct untrained": cold[3],
                   "construct uniform": chance[3], "construct per-graph": own}  # fmt: skip
        for column, p in columns.items():
            assert row[column] == pytest.approx(_exact_ms(graph, cluster, p))
            assert p.result.episodes == 1
    # the lookahead teacher's scorings: the family's 2 train graphs, then each test graph's own;
    # imitation scores nothing
    assert simulated == [2, 1, 1]
    header = json.loads((out / "header.json").read_text())
    assert header["config"]["construct_config"]["env"]["construct_lookahead"]


def test_table1_adds_the_construct_agent(tmp_path, monkeypatch):
    settings = dataclasses.replace(
        table1.PRESETS["quick"],
        graphs=("layered:12:2", "layered:12:3"),
        devices=(2,),
        placeto=TINY_PLACETO,
        construct=TINY_CONSTRUCT,
    )
    monkeypatch.setitem(table1.PRESETS, "quick", settings)
    monkeypatch.setattr(table1, "BASELINES", ("single", "heft"))
    monkeypatch.setattr(table1, "LEARNED", ())  # tests/test_reproduce.py trains them
    placed, simulated = _recording(monkeypatch)
    readme = table1.run_table1(tmp_path, "quick", progress=False)
    out = tmp_path / "table1"
    tables = {n: json.loads((out / f"{n}.json").read_text())
              for n in ("makespan", "evaluations", "wall_s", "fits_memory")}  # fmt: skip
    cluster = Cluster.preset(settings.cluster, 2)
    assert [name for _, name, _, _ in placed] == list(settings.graphs)
    for k, (_, name, graph, own) in enumerate(placed):
        row, ev, wall, fit = (tables[n][k] for n in tables)
        assert row["graph"] == name and list(row)[-1] == "construct"
        assert row["construct"] == pytest.approx(_exact_ms(graph, cluster, own))
        assert ev["construct"] == (
            _teacher_simulations(graph, cluster) + TINY_TRAINING_SIMULATIONS + SAMPLED_EPISODES
        )
        assert wall["construct"] > own.wall_s > 0
        assert fit["construct"] == own.result.fits_memory
    assert sum(simulated) == 2 * TINY_TRAINING_SIMULATIONS
    assert "the construct agent" in readme.read_text()
