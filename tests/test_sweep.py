"""`placeto-jax sweep`: grid parsing and validation, vmapped grid points equal to separate
runs, grouping by static config, and the files a sweep writes."""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import Cluster, Graph, simulate, write_cluster
from placeto_jax.cli.sweep import add_sweep_command
from placeto_jax.config import make_config
from placeto_jax.env import prepare
from placeto_jax.env.bank import build_bank
from placeto_jax.graphs.io import save_graph
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import run_method
from placeto_jax.reproduce import sweep
from placeto_jax.rl.evaluate import place_with
from placeto_jax.rl.loop import cluster_of
from placeto_jax.rl.train import make_train
from placeto_jax.stages.teachers import TEACHERS

GRAPH = Graph.from_edges([100.0] * 6, [1e5] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)])
SMALL = ["train.iterations=3", "train.episodes=4", "policy.rounds=1", "run.buckets=8"]


K80S = Cluster.preset("placeto-k80", 2)


def base() -> object:
    return make_config(None, SMALL, n_devices=2)


def test_grid_parsing_resolves_aliases_and_types():
    grid = sweep.parse_grid(["lr=1e-3,1e-2", "policy.rounds=1,2", "env.traversal=random"])
    assert grid == {
        "lr": ["1e-3", "1e-2"],
        "policy.rounds": ["1", "2"],
        "env.traversal": ["random"],
    }
    points = sweep.grid_points(base(), grid)
    assert len(points) == 4
    assert points[1].settings == (("lr", 1e-3), ("policy.rounds", 2), ("env.traversal", "random"))
    assert points[1].config.policy.rounds == 2 and points[1].config.env.traversal == "random"
    assert points[1].label == "lr=0.001, policy.rounds=2, env.traversal=random"


def test_lr_scales_the_schedule_and_hyper_points_share_one_program():
    config = base()
    points = sweep.grid_points(config, {"lr": ["1e-3", "1e-2"], "entropy": ["0", "0.1"]})
    ratio = config.train.final_learning_rate / config.train.learning_rate
    for p in points:
        assert p.config.train.final_learning_rate == pytest.approx(
            p.config.train.learning_rate * ratio
        )
    assert len(sweep.group_points(points, config)) == 1
    static = sweep.grid_points(config, {"lr": ["1e-3"], "policy.rounds": ["1", "2"]})
    assert len(sweep.group_points(static, config)) == 2
    both = sweep.grid_points(
        config, {"lr": ["1e-3", "1e-2"], "train.final_learning_rate": ["1e-4"]}
    )
    assert len(sweep.group_points(both, config)) == 2  # lr is static then
    assert both[1].config.train.final_learning_rate == 1e-4


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["lr"], "expected KEY=V1,V2"),
        (["lr="], "empty value"),
        (["lr=1e-3,,1e-2"], "empty value"),
        (["lr=1", "lr=2"], "given twice"),
    ],
)
def test_bad_set_items_are_refused(items, message):
    with pytest.raises(ValueError, match=message):
        sweep.parse_grid(items)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"learning_rate": ["1"]}, "unknown sweep key 'learning_rate'"),
        ({"seed": ["1"]}, "unknown sweep key 'seed'"),
        ({"train.nope": ["1"]}, "train has no field 'nope'"),
        ({"run.buckets": ["32"]}, "tuple field"),
        ({"lr": []}, "empty value list"),
        ({"lr": ["fast"]}, "bad value 'fast' for config train.learning_rate"),
        ({"policy.rounds": ["1.5"]}, "bad value '1.5' for config policy.rounds"),
        ({"env.traversal": ["sideways"]}, "env.traversal='sideways' is not one of"),
        ({"lr": ["-1"]}, "train.learning_rate must be > 0"),
        ({"lr": ["1"], "train.learning_rate": ["2"]}, "name one setting twice"),
    ],
)
def test_bad_grids_are_refused(grid, message):
    with pytest.raises(ValueError, match=message):
        sweep.grid_points(base(), grid)


def test_bad_seeds_fail_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="--seeds must be at least 1"):
        sweep.run_sweep("no-such-graph.json", K80S, {"lr": ["1e-3"]}, 0, None, tmp_path)
    with pytest.raises(ValueError, match="unknown sweep key"):
        sweep.run_sweep("no-such-graph.json", K80S, {"nope": ["1"]}, 1, None, tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_command_parses_into_run_sweep_arguments(monkeypatch, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_sweep_command(parser.add_subparsers())
    args = parser.parse_args(
        ["sweep", "--graphs", "g", "--devices", "2", "--set", "lr=1,2", "--seeds", "3", "--quick"]
    )
    readme = tmp_path / "README.md"
    readme.write_text("the report")
    seen = {}

    def fake_run_sweep(*a, **k):
        seen.update(args=a, kwargs=k)
        return readme

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    assert args.command(args) == 0
    assert seen["args"] == ("g", K80S, {"lr": ["1", "2"]}, 3, None, "results", None)
    assert seen["kwargs"] == {"progress": True, "quick": True}
    assert "the report" in capsys.readouterr().out


class Stop(Exception):
    pass


def test_each_group_target_of_a_grid_coarsens_the_graphs_again(tmp_path, monkeypatch):
    path = tmp_path / "g.json"
    save_graph(GRAPH, path)
    monkeypatch.setattr(sweep, "base_config", lambda *_: base())
    nodes = {}

    def fake_run_grid(base_config, points, seeds, graphs_of, cluster, progress):
        for point in points:
            nodes[point.config.run.group_target] = graphs_of(point.config)[0].graph.n_ops
        raise Stop

    monkeypatch.setattr(sweep, "run_grid", fake_run_grid)
    with pytest.raises(Stop):
        sweep.run_sweep(str(path), K80S, {"run.group_target": [0, 2, 3]}, 1, None, tmp_path)
    assert nodes == {0: 6, 2: 2, 3: 3}


@pytest.fixture(scope="module")
def grid_runs():
    config = base()
    points = sweep.grid_points(config, {"lr": ["1e-3", "3e-2"], "entropy": ["0.01"]})
    graphs = [prepare("g", GRAPH)]
    return (
        config,
        points,
        graphs,
        sweep.run_grid(config, points, 2, lambda _: graphs, K80S, progress=False),
    )


@pytest.mark.slow
def test_vmapped_grid_points_equal_separate_runs(grid_runs):
    _, points, graphs, runs = grid_runs
    point = points[1]
    train = jax.jit(make_train(point.config, build_bank(graphs), cluster_of(point.config)).run)
    alone, metrics = train(jax.random.key(1))
    for a, b in zip(jax.tree.leaves(runs[1].params), jax.tree.leaves(alone.params), strict=True):
        np.testing.assert_allclose(a[1], b, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(runs[1].curves[1], metrics["train/final_runtime"], rtol=1e-5)
    assert not np.allclose(jax.tree.leaves(runs[0].params)[0], jax.tree.leaves(runs[1].params)[0])


@pytest.mark.slow
def test_greedy_makespans_are_exact_and_never_worse_than_the_initial(grid_runs):
    runs = grid_runs[-1]
    for run in runs:
        assert run.makespans.shape == run.initial.shape == run.single.shape == (2, 1)
        assert np.all(run.makespans <= run.initial)
    assert np.all(runs[0].single > 600.0)  # six 100 µs ops, overheads on top
    assert np.all(runs[0].makespans >= 300.0)  # a chain of three ops at least


@pytest.mark.slow
def test_every_seed_counts_its_training_and_greedy_simulations(grid_runs):
    config, _, graphs, runs = grid_runs
    run = make_train(config, build_bank(graphs), cluster_of(config))
    for point_runs in runs:
        assert point_runs.evaluations.shape == (2,)
        for s in range(2):
            params = jax.tree.map(lambda x, s=s: x[s], point_runs.params)
            (greedy,) = place_with(run, params, run.env_params, graphs, cluster_of(config))
            assert greedy.episode_steps == 6  # one pass over six nodes
            # 3 updates x 4 episodes x (6 steps + the initial placement), then the greedy
            # episode's steps and its distinct placements ranked exactly
            assert point_runs.evaluations[s] == 3 * 4 * 7 + 6 + greedy.evaluations


@pytest.mark.slow  # about 50 s of compilation; the default suite's budget is 10 minutes
def test_a_sweep_writes_its_report_with_the_best_row_first(tmp_path, monkeypatch):
    path = tmp_path / "g.json"
    save_graph(GRAPH, path)
    monkeypatch.setattr(sweep, "base_config", lambda *_: base())
    grid = {"lr": ["1e-3", "3e-2"]}
    readme = sweep.run_sweep(str(path), K80S, grid, 2, None, tmp_path / "out", "s", progress=False)
    assert readme == tmp_path / "out" / "s" / "README.md"
    for name in ("sweep.csv", "sweep.json", "curves.png", "header.json"):
        assert (readme.parent / name).stat().st_size > 0
    rows = json.loads((readme.parent / "sweep.json").read_text())
    assert len(rows) == 2 and rows[0]["rank"] == 1
    assert rows[0]["makespan_ms"] == min(r["makespan_ms"] for r in rows)
    assert f"Best: **{rows[0]['setting']}**" in readme.read_text()
    (evals,) = json.loads((readme.parent / "evaluations.json").read_text())
    assert evals["graphs"] == str(path)
    for label in ("lr=0.001", "lr=0.03"):  # 2 seeds x (84 trained, 6 steps, 1 to 7 ranked)
        assert 2 * (84 + 6 + 1) <= evals[label] <= 2 * (84 + 6 + 7)
    header = json.loads((readme.parent / "header.json").read_text())
    assert header["config"]["programs"] == 1 and header["seeds"] == [0, 1]


def test_training_simulations_count_each_episode_on_the_graph_it_plays():
    # per episode: its initial placement and one step per node (one pass); 4 episodes an update
    three = Graph.from_edges([1.0] * 3, [1.0] * 3, [(0, 1), (1, 2)])
    graphs = [prepare("six", GRAPH), prepare("three", three)]
    for extra, expected in (([], 3 * (2 * 7 + 2 * 4)), (["train.graphs_per_update=1"], 72)):
        config = make_config(None, SMALL + extra, n_devices=2)  # 72: updates 0, 2 on six, 1 three
        run = make_train(config, build_bank(graphs, config.run.buckets), cluster_of(config))
        assert sweep.training_simulations(run, graphs) == expected


def test_the_command_reads_a_cluster_file_and_its_device_count(monkeypatch, tmp_path):
    rig = Cluster(n_devices=3, speed=(1.0, 2.0, 2.0), memory=8e9, name="rig")
    write_cluster(tmp_path / "rig.json", rig)
    parser = argparse.ArgumentParser()
    add_sweep_command(parser.add_subparsers())
    seen = {}

    def fake_run_sweep(graphs, cluster, *a, **k):
        seen["cluster"] = cluster
        raise Stop

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    args = parser.parse_args(["sweep", "--graphs", "g", "--cluster", str(tmp_path / "rig.json")])
    with pytest.raises(Stop):
        args.command(args)
    assert seen["cluster"] == rig
    for argv, message in (([], "sweep needs --devices"), (["--devices", "0"], "at least 1")):
        args = parser.parse_args(["sweep", "--graphs", "g", *argv])
        with pytest.raises(ValueError, match=message):
            args.command(args)


@pytest.mark.slow  # 20 s; train and place on a cluster file: tests/test_cluster_files.py
def test_a_sweep_on_a_custom_cluster_trains_and_scores_on_it(tmp_path, monkeypatch):
    # four times faster devices: every simulated makespan is the custom cluster's, which
    # `pj.simulate` gives independently for the single-device placement and the greedy one
    fast = Cluster(n_devices=2, speed=4.0, name="fast")
    path = tmp_path / "g.json"
    save_graph(GRAPH, path)
    monkeypatch.setattr(
        sweep, "base_config", lambda preset, cluster, quick: make_config(
            None, SMALL, n_devices=cluster.n_devices, cluster_preset=cluster.preset_name())
    )  # fmt: skip
    seen = {}
    real = sweep.train_points

    def spy(static, points, seeds, graphs, cluster):
        seen["static"], seen["cluster"] = static, cluster
        return real(static, points, seeds, graphs, cluster)

    monkeypatch.setattr(sweep, "train_points", spy)
    readme = sweep.run_sweep(str(path), fast, {"lr": ["1e-2"]}, 1, None, tmp_path, "s",
                             progress=False)  # fmt: skip
    assert seen["static"].cluster_preset == "custom" and seen["cluster"] == fast
    row = json.loads((readme.parent / "sweep.json").read_text())[0]
    single = simulate(GRAPH, fast, np.zeros(6, np.int64)).makespan
    assert single == pytest.approx(6 * 25.0 + 5 * 5.7)  # six 100 µs ops at speed 4, delta1
    assert row["makespan_ms"] * 1e3 * row["speedup_vs_single"] == pytest.approx(single)
    assert row["makespan_ms"] * 1e3 >= 3 * 25.0  # a chain of three ops at least
    header = json.loads((readme.parent / "header.json").read_text())
    assert Cluster.from_document(header["config"]["cluster"]) == fast


def test_a_construct_sweep_scores_each_seed_as_train_and_place_do(tmp_path):
    # seed s of the grid point is the run `pj.train(..., seed=s)` gives, placed by the
    # `sampled` pipeline with key s (the two seeds place this graph differently); the teacher
    # is the best of the teacher heuristics
    spec = "layered:60:1"
    graph = resolve_graph(spec)
    grid = {"train.imitation": ["5"]}
    readme = sweep.run_sweep(spec, K80S, grid, 2, "construct", tmp_path, "c", progress=False)
    (row,) = json.loads((readme.parent / "sweep.json").read_text())
    assert set(row) >= {"teacher_ms", "final_imitation_loss", "final_imitation_loss_std"}
    makespans = []
    for seed in (0, 1):
        policy = pj.train(graph, K80S, str(tmp_path / f"run{seed}"), "construct",
                          ["train.imitation=5"], seed=seed)  # fmt: skip
        placed = pj.place(graph, K80S, pj.PIPELINES["sampled"], policy, jax.random.key(seed),
                          compare=False)  # fmt: skip
        makespans.append(placed.result.makespan)
    assert makespans[0] != makespans[1]
    assert row["makespan_ms"] * 1e3 == pytest.approx(np.mean(makespans))
    assert row["makespan_std_ms"] * 1e3 == pytest.approx(np.std(makespans))
    single = simulate(graph, K80S, np.zeros(graph.n_ops, np.int64)).makespan
    assert row["speedup_vs_single"] == pytest.approx(np.mean([single / m for m in makespans]))
    best = min(run_method(m, graph, K80S, jax.random.key(0)).makespan for m in TEACHERS)
    assert row["teacher_ms"] * 1e3 == pytest.approx(best)
    header = json.loads((readme.parent / "header.json").read_text())
    assert header["config"]["agent"] == "construct" and header["seeds"] == [0, 1]


def test_quick_sizes_are_refused_for_the_construct_agent_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"--quick sizes the paper agent .* preset 'construct'"):
        sweep.run_sweep("g.json", K80S, {"lr": ["1e-3"]}, 1, "construct", tmp_path, quick=True)
    assert not any(tmp_path.iterdir())
    assert sweep.base_config(None, K80S, True).run.group_target == 24  # tiny, quick sizes
