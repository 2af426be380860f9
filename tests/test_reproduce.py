"""Experiment plumbing: output files and provenance, learning curves, relative makespans, the
benchmark folder reader, Placeto trained per graph without recompiling, the `reproduce` CLI, and
(slow) each experiment end to end on tiny settings."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import jax
import numpy as np
import pytest
from matplotlib.figure import Figure

from placeto_jax import Graph
from placeto_jax.cli import main
from placeto_jax.config import make_config
from placeto_jax.env import prepare
from placeto_jax.graphs.io import save_graph
from placeto_jax.plotting import draw_learning_curves
from placeto_jax.reproduce import ablations, benchmarks, generalization, improve, sweep, table1
from placeto_jax.reproduce.output import (
    Recorder,
    cell,
    fastest,
    git_commit,
    markdown_table,
    to_csv,
)
from placeto_jax.reproduce.placeto import Curve, PlacetoBench, simulations
from placeto_jax.rl.loop import cluster_of

TWO_CHAINS = Graph.from_edges([100.0] * 6, [1e3] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)])
CHAIN = Graph.from_edges([50.0] * 4, [1e3] * 4, [(0, 1), (1, 2), (2, 3)])


# ---------------------------------------------------------------------- output
def test_cells_tables_and_csv():
    assert [cell(None), cell(True), cell(1234.5678), cell(3), cell(float("inf"))] == [
        "",
        "yes",
        "1235",
        "3",
        "inf",
    ]
    rows = [{"graph": "a", "ms": 1.0}, {"graph": "b", "ms": None}]
    assert markdown_table(rows, ["graph", "ms"]).splitlines() == [
        "| graph | ms |",
        "|---|---|",
        "| a | 1 |",
        "| b |  |",
    ]
    assert to_csv(rows, ["graph", "ms"]) == "graph,ms\na,1.0\nb,\n"


def test_recorder_writes_tables_plots_and_a_provenance_header(tmp_path):
    recorder = Recorder(tmp_path, "demo", "quick")
    recorder.table("t", "A table", [{"x": np.int64(1), "y": np.float32(0.5)}], note="why")
    recorder.figure("p", "A plot", lambda fig: fig.add_subplot().plot([0, 1], [1, 0]))
    readme = recorder.finish({"lr": 0.1}, [0, 1], notes="Notes here.")
    out = tmp_path / "demo"
    assert readme == out / "README.md"
    text = readme.read_text()
    assert "# demo (quick)" in text and "Notes here." in text and "![A plot](p.png)" in text
    assert "| 1 | 0.5 |" in text and "why" in text
    header = json.loads((out / "header.json").read_text())
    assert header["seeds"] == [0, 1] and header["config"] == {"lr": 0.1}
    assert set(header["versions"]) >= {"jax", "flax", "optax", "numpy"}
    assert header["hardware"]["jax_backend"] == "cpu" and header["wall_s"] >= 0
    assert json.loads((out / "t.json").read_text()) == [{"x": 1, "y": 0.5}]
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------- curves
def test_curve_keeps_the_best_so_far_and_finds_the_first_point_within_tolerance():
    scores = [100.0, 120.0, 104.0, 100.0]
    curve = Curve.of([0, 10, 20, 30], [0.0, 1.0, 2.0, 3.0], scores, scores, [True] * 4)
    np.testing.assert_array_equal(curve.makespan, [100.0, 100.0, 100.0, 100.0])
    assert curve.to_reach() == (0, 0.0)
    scores = [200.0, 150.0, 104.0, 100.0]
    curve = Curve.of([0, 10, 20, 30], [0.0, 1.0, 2.0, 3.0], scores, scores, [True] * 4)
    assert curve.to_reach(0.05) == (20, 2.0)  # 104 <= 1.05 * 100, 150 is not
    assert curve.to_reach(0.0) == (30, 3.0)


def test_curve_ranks_by_penalised_makespan_and_keeps_the_best_placements_raw_makespan():
    # the second placement (raw 2.5, does not fit) scores 3: best until the fourth (2, fits);
    # the third (4) never is the best, so its raw 4 and its fitting are not drawn
    penalised, raw, fits = [5.0, 3.0, 4.0, 2.0], [5.0, 2.5, 4.0, 1.0], [True, False, True, True]
    curve = Curve.of([0, 1, 2, 3], [0.0] * 4, penalised, raw, fits)
    np.testing.assert_array_equal(curve.makespan, [5.0, 3.0, 3.0, 2.0])
    np.testing.assert_array_equal(curve.raw, [5.0, 2.5, 2.5, 1.0])
    np.testing.assert_array_equal(curve.fits, [True, False, False, True])
    # equal scores: the first placement to reach it stays the best
    first = Curve.of([0, 1], [0.0, 0.0], [3.0, 3.0], [3.0, 1.0], [True, False])
    np.testing.assert_array_equal(first.raw, [3.0, 3.0])
    np.testing.assert_array_equal(first.fits, [True, True])


def test_a_table1_curve_figure_shows_every_method_of_its_row():
    cell = {"graph": "g", "devices": 2}
    methods = (*table1.BASELINES, table1.CONSTRUCT)
    quality = [cell | {m: float(k + 1) for k, m in enumerate(methods)}]  # ms
    memory = [cell | {m: m != "single" for m in methods}]
    one = Curve.of([0, 8], [0.0, 1.0], [900.0, 800.0], [900.0, 800.0], [True, True])
    curves = {("g", 2, m): one for m in table1.LEARNED} | {("h", 2, "rnn"): one}
    single, others = table1._levels_of(quality, memory, "g", 2)
    assert single == (1000.0, False) and list(others) == list(methods[1:])
    assert others["expert"] == (2000.0, True)
    figure = Figure()
    draw_learning_curves(figure, table1._curves_of(curves, "g", 2), "g", single, others)
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels[:3] == list(table1.LEARNED) and labels[3] == "single device 1 ms (does not fit)"
    assert [label.split()[0] for label in labels[4:]] == list(methods[1:])


def test_relative_makespans_divide_by_the_best_baseline_of_each_graph():
    rows = [
        {"family": "f", "graph": "g", "zero-shot": 90.0, "from-scratch": 100.0,
         "fine-tuned": 80.0, "construct zero-shot": 95.0, "construct per-graph": 70.0,
         "zero-shot untrained": 150.0, "construct untrained": 120.0, "construct uniform": 300.0,
         "single": 200.0, "heft": 100.0},
    ]  # fmt: skip
    (out,) = generalization.relative_to_best_baseline(rows, ("single", "heft"))
    assert out == {
        "family": "f",
        "graph": "g",
        "zero-shot": 0.9,
        "from-scratch": 1.0,
        "fine-tuned": 0.8,
        "construct zero-shot": 0.95,
        "construct per-graph": 0.7,
        "zero-shot untrained": 1.5,
        "construct untrained": 1.2,
        "construct uniform": 3.0,
        "single": 2.0,
        "heft": 1.0,
    }


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_the_generalization_presets_test_every_test_graph(monkeypatch, preset):
    monkeypatch.setattr(generalization, "load", lambda name: name)  # names, not graphs
    settings = generalization.PRESETS[preset]
    tests = generalization._split("ptb", "test", settings.test_graphs)
    assert [name for name, _ in tests] == [f"family:ptb/{i}" for i in range(24, 32)]


# ---------------------------------------------------------------------- benchmark folder
def _layer_file(path, fpgas: int, memory: float, training: bool = False) -> None:
    # training: nodes 3 and 4 are backward, and 4 (an update) is co-located with 0 (its weight)
    # with a path between them, so the class stays two tied nodes.
    nodes = [
        {"id": i, "supportedOnFpga": 1, "cpuLatency": 1.0, "fpgaLatency": 0.1 * (i + 1),
         "isBackwardNode": training and i >= 3, "size": 1e6, "name": f"layer{i}",
         "colorClass": 7 if training and i in (0, 4) else None}
        for i in range(5)
    ]  # fmt: skip
    edges = [{"sourceId": a, "destId": b, "cost": 0.0, "size": 1e5} for a, b in
             [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]]  # fmt: skip
    doc = {"maxSizePerFPGA": memory, "maxFPGAs": fpgas, "maxCPUs": 1, "nodes": nodes,
           "edges": edges}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _data_folder(root):
    _layer_file(root / "latency" / "LayerGraphs" / "tiny_inference.json", 2, 1e9)
    _layer_file(root / "throughput" / "LayerGraphs" / "tiny_training.json", 3, 2e9)
    _layer_file(root / "throughput" / "OperatorGraphs" / "ops_training.json", 2, 1e9, True)
    experts = root / "human-experts"
    experts.mkdir()
    split = {"fpgas": [{"nodes": [0, 1, 2]}, {"nodes": [3, 4]}]}
    (experts / "tiny_inference_expert.json").write_text(json.dumps(split))
    return root


def test_benchmark_cases_take_hardware_and_expert_splits_from_the_files(tmp_path):
    cases = benchmarks.benchmark_cases(_data_folder(tmp_path))
    assert [c.file for c in cases] == [
        "latency/LayerGraphs/tiny_inference.json",
        "throughput/LayerGraphs/tiny_training.json",
        "throughput/OperatorGraphs/ops_training.json",
    ]  # expert files are not graphs
    assert [c.kind for c in cases] == [
        "layer, inference", "layer, inference", "operator, training"
    ]  # fmt: skip
    assert [c.cluster.n_devices for c in cases] == [2, 3, 2]
    assert [float(c.cluster.memory_array[0]) for c in cases] == [1e9, 2e9, 1e9]
    np.testing.assert_array_equal(cases[0].expert, [0, 0, 0, 1, 1])
    # the training graph has no split of its own and uses its inference split's rule
    assert [c.expert_source for c in cases] == ["own", "inference", "none"]
    only = benchmarks.benchmark_cases(tmp_path, folders=("throughput",), kinds=("LayerGraphs",))
    assert [c.file for c in only] == ["throughput/LayerGraphs/tiny_training.json"]
    with pytest.raises(ValueError, match="in elsewhere"):
        benchmarks.benchmark_cases(tmp_path, folders=("elsewhere",))


def test_an_expert_split_that_does_not_fit_its_graph_is_reported_not_used(tmp_path):
    data = _data_folder(tmp_path)
    bad = {"fpgas": [{"nodes": [0]}, {"nodes": [1]}, {"nodes": [2]}]}  # 3 accelerators of 2
    (data / "human-experts" / "tiny_inference_expert.json").write_text(json.dumps(bad))
    case = benchmarks.benchmark_cases(data)[0]
    assert case.expert is None
    assert case.expert_source.startswith("invalid (") and "accelerator 2" in case.expert_source


def test_changed_results_do_not_make_the_checkout_dirty(tmp_path):
    def git(*argv):
        subprocess.run(["git", "-C", str(tmp_path), *argv], check=True, capture_output=True)

    (tmp_path / "results").mkdir()
    for name in ("code.py", "results/table.csv"):
        (tmp_path / name).write_text("1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "results" / "table.csv").write_text("2\n")
    assert git_commit(tmp_path)["modified"] == []
    (tmp_path / "code.py").write_text("2\n")
    assert git_commit(tmp_path)["modified"] == [" M code.py"]


def test_the_fastest_method_is_one_whose_placement_fits():
    results = {"expert": (None, None), "single": (5.0, False), "metis": (7.0, True)}
    assert fastest({**results, "heft": (6.0, True)}) == ("heft", True)
    overflowing = {m: (t, False if t else None) for m, (t, _) in results.items()}
    assert fastest(overflowing) == ("single", False)
    with pytest.raises(ValueError, match="no method"):
        fastest({"expert": (None, None)})


def test_a_folder_without_benchmark_graphs_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"no benchmark graphs \(\*/LayerGraphs/\*.json or"):
        benchmarks.benchmark_cases(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        benchmarks.benchmark_cases(tmp_path / "missing")


# ---------------------------------------------------------------------- Placeto per graph
@pytest.mark.slow  # about 35 s of CPU
def test_placeto_trains_each_graph_of_a_bench_with_one_compiled_program():
    config = make_config(
        None,
        ["train.iterations=2", "train.episodes=4", "policy.rounds=1", "run.eval_every=1"],
        n_devices=2,
    )
    cluster = cluster_of(config)
    bench = PlacetoBench(config, [prepare("two", TWO_CHAINS), prepare("chain", CHAIN)], cluster)
    fits = [bench.fit(i, jax.random.key(0)) for i in range(2)]
    assert bench.run.updates._cache_size() == 1  # one compile for both graphs
    for fit, graph in zip(fits, (TWO_CHAINS, CHAIN), strict=True):
        assert fit.best.placement.shape == (graph.n_ops,)
        assert fit.curve.makespan[-1] == pytest.approx(bench.score(fit.best))
        assert np.all(np.diff(fit.curve.makespan) <= 0)
        # the curve ends at the best placement: its raw makespan and fitting
        assert (fit.curve.raw[-1], fit.curve.fits[-1]) == (fit.best.makespan, fit.best.fits_memory)
    # evaluations: episodes x (one simulation per step + one at reset) per update
    np.testing.assert_array_equal(fits[0].curve.evaluations, [0, 28, 56])  # 4 x (6 + 1)
    np.testing.assert_array_equal(fits[1].curve.evaluations, [0, 20, 40])  # 4 x (4 + 1)
    # fine-tuning from known parameters starts at their known greedy placement
    start = bench.place(fits[0].params, 0)
    tuned = bench.fit(0, jax.random.key(1), init_params=fits[0].params, init_placement=start)
    assert tuned.curve.makespan[0] == pytest.approx(bench.score(start))
    assert bench.run.updates._cache_size() == 1
    # every simulation counts: one update's 28, then each greedy evaluation's episode steps (6:
    # one per node) and exact rankings; a given start's were spent before the fit
    first = bench.place(bench.run.init(jax.random.key(0), bench.graph_env_params(0)).params, 0)
    one = bench.fit(0, jax.random.key(0), iterations=1)
    assert first.episode_steps == one.placement.episode_steps == 6
    assert one.evaluations == 28 + simulations(first) + simulations(one.placement)
    tuned = bench.fit(0, jax.random.key(1), iterations=1, init_params=fits[0].params,
                      init_placement=start)  # fmt: skip
    assert tuned.evaluations == 28 + simulations(tuned.placement)
    with pytest.raises(ValueError, match="not in this bench"):
        bench.index("nope")


# ---------------------------------------------------------------------- CLI
def test_reproduce_benchmarks_without_data_is_a_usage_error(capsys, tmp_path):
    assert main(["reproduce", "benchmarks", "--out", str(tmp_path)]) == 2
    assert "needs --data DIR" in capsys.readouterr().err
    assert main(["reproduce", "all", "--data", str(tmp_path / "no")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    data = _data_folder(tmp_path / "data")  # has no throughput-inputs folder, which quick reads
    assert main(["reproduce", "all", "--data", str(data), "--out", str(tmp_path / "out")]) == 2
    assert "no benchmark graphs" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # nothing written


def test_reproduce_improve_takes_its_start_and_other_experiments_refuse_one(
    capsys, tmp_path, monkeypatch
):
    assert main(["reproduce", "table1", "--start", "best-op", "--out", str(tmp_path)]) == 2
    assert "--start is for `reproduce improve`, not table1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown improve start 'worst'"):
        improve.run_improve(tmp_path, start="worst")
    calls = []
    monkeypatch.setattr(improve, "run_improve", lambda *args: calls.append(args) or tmp_path)
    assert main(["reproduce", "improve", "--start", "best-op", "--out", str(tmp_path)]) == 0
    assert main(["reproduce", "improve", "--out", str(tmp_path), "--no-progress"]) == 0
    assert calls == [(str(tmp_path), "quick", True, None, "best-op"),
                     (str(tmp_path), "quick", False, None, "best")]  # fmt: skip
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_ablations_write_every_variants_evaluations_over_its_seeds(tmp_path, monkeypatch):
    graph = tmp_path / "g.json"
    save_graph(TWO_CHAINS, graph)
    monkeypatch.setattr(
        ablations, "QUICK", ablations.Settings(str(graph), 2, 2, ("run.buckets=8",))
    )
    monkeypatch.setattr(ablations, "VARIANTS", ablations.VARIANTS[:2])
    trained = iter([np.array([90, 91]), np.array([100, 103])])  # per seed (`sweep.Runs`)

    def fake_train_points(config, points, seeds, graphs, cluster):
        ones = np.ones((1, seeds, len(graphs)))
        return sweep.Runs(None, np.ones((1, seeds, 4)), ones, ones, 2 * ones, next(trained)[None])

    monkeypatch.setattr(ablations, "train_points", fake_train_points)
    readme = ablations.run_ablations(tmp_path / "results", quick=True, progress=False)
    evals = json.loads((readme.parent / "evaluations.json").read_text())
    assert evals == [{"graph": str(graph), "full Placeto": 181, "no message passing": 203}]
    assert "## Simulator evaluations per method" in readme.read_text()


# ---------------------------------------------------------------------- end to end (slow)
TINY_PLACETO = (
    "train.iterations=2",
    "train.episodes=4",
    "run.eval_every=1",
    "policy.rounds=1",
    "run.group_target=8",
)
TINY_CONSTRUCT = ("train.imitation=2", "train.iterations=2", "run.eval_every=1")


@pytest.mark.slow
def test_table1_end_to_end_on_tiny_settings(tmp_path, monkeypatch):
    settings = dataclasses.replace(
        table1.PRESETS["quick"],
        graphs=("layered:12", "layered:16:1"),
        devices=(2,),
        search_budget=64,
        learned_budget=64,
        placeto=TINY_PLACETO,
        construct=TINY_CONSTRUCT,
    )
    monkeypatch.setitem(table1.PRESETS, "quick", settings)
    # no naming rules know layered graphs: the expert refuses them (table1's zoo graphs have rules)
    monkeypatch.setattr(table1, "BASELINES", tuple(b for b in table1.BASELINES if b != "expert"))
    readme = table1.run_table1(tmp_path, "quick", progress=False)
    rows = json.loads((tmp_path / "table1" / "makespan.json").read_text())
    assert [(r["graph"], r["devices"]) for r in rows] == [("layered:12", 2), ("layered:16:1", 2)]
    methods = (*table1.BASELINES, *table1.LEARNED, table1.CONSTRUCT)
    for row in rows:
        assert all(0 < row[m] < np.inf for m in methods)
    cost = json.loads((tmp_path / "table1" / "training_cost.json").read_text())
    assert {r["method"] for r in cost} == set(table1.LEARNED)
    assert all(0 <= r["evaluations_to_5pct"] <= r["evaluations"] for r in cost)
    for r in cost:  # the headline ratio only where both the RNN and the method improved
        if not r["improved"]:
            assert r["rnn_over_this_evals_to_5pct"] is None
    fits = json.loads((tmp_path / "table1" / "fits_memory.json").read_text())
    assert all(isinstance(f[m], bool) for f in fits for m in methods)
    walls = json.loads((tmp_path / "table1" / "wall_s.json").read_text())
    assert all(w[m] >= 0 for w in walls for m in methods)
    evals = json.loads((tmp_path / "table1" / "evaluations.json").read_text())
    assert [(r["graph"], r["devices"]) for r in evals] == [(r["graph"], r["devices"]) for r in rows]
    for r in evals:  # rules and list schedulers simulate nothing
        assert r["single"] == r["heft"] == r["m-etf"] == r["m-sct"] == 0
        assert 0 < r["local-search"] <= 64  # its budget
        assert r["cross-entropy"] == 256  # at least one round of 256, past the budget of 64
        spent = {c["method"]: c["evaluations"] for c in cost if c["graph"] == r["graph"]}
        assert {m: r[m] for m in table1.LEARNED} == spent
        assert r["construct"] > 17  # its training's simulations and its 17 episodes
    assert "## Training cost of the learned methods" in readme.read_text()
    assert (tmp_path / "table1" / "curve_layered_12_d2.png").is_file()
    assert (tmp_path / "table1" / "gantt_layered_16_1_d2.png").is_file()


@pytest.mark.slow
def test_benchmarks_end_to_end_on_a_tiny_folder(tmp_path, monkeypatch):
    settings = dataclasses.replace(
        benchmarks.PRESETS["quick"],
        search_budget=64,
        learned_budget=64,
        placeto=TINY_PLACETO,
        folders=(),
    )
    monkeypatch.setitem(benchmarks.PRESETS, "quick", settings)
    data = _data_folder(tmp_path / "data")
    benchmarks.run_benchmarks(tmp_path / "out", data, "quick", progress=False)
    out = tmp_path / "out" / "benchmarks"
    rows = json.loads((out / "makespan.json").read_text())
    fits = json.loads((out / "fits_memory.json").read_text())
    assert len(rows) == 3 and rows[0]["expert (file)"] > 0 and rows[1]["accelerators"] == 3
    assert rows[2]["kind"] == "operator, training"
    methods = ["expert (file)", *benchmarks.BASELINES, "rnn", "hierarchical", "placeto"]
    for row, fit in zip(rows, fits, strict=True):
        fitting = [m for m in methods if fit[m]]
        assert fitting, "the tiny graphs fit memory on one device"
        assert row[row["best"]] == min(row[m] for m in fitting)
    walls = json.loads((out / "wall_s.json").read_text())
    assert all(w[m] >= 0 for w in walls for m in methods[1:])
    evals = json.loads((out / "evaluations.json").read_text())
    assert [e["expert (file)"] for e in evals] == [0, 0, None]  # the third file has no split
    assert all(e["single"] == e["heft"] == 0 < e["placeto"] for e in evals)
    assert len(list(out.glob("gantt_*.png"))) == 3


@pytest.mark.slow
def test_generalization_end_to_end_on_tiny_settings(tmp_path, monkeypatch):
    settings = dataclasses.replace(
        generalization.PRESETS["quick"],
        families=("cifar10",),
        train_graphs=4,
        test_graphs=2,
        family_training=TINY_PLACETO,
        per_graph_iterations=2,
        baselines=("single", "heft"),
        construct_preset="construct",
        construct_training=TINY_CONSTRUCT,
        construct_per_graph=TINY_CONSTRUCT,
    )
    monkeypatch.setitem(generalization.PRESETS, "quick", settings)
    generalization.run_generalization(tmp_path, "quick", progress=False)
    out = tmp_path / "generalization"
    rows = json.loads((out / "makespan.json").read_text())
    assert [r["graph"] for r in rows] == ["family:cifar10/24", "family:cifar10/25"]
    relative = json.loads((out / "relative.json").read_text())
    for row, rel in zip(rows, relative, strict=True):
        best = min(row["single"], row["heft"])
        assert rel["zero-shot"] == pytest.approx(row["zero-shot"] / best)
        assert rel["construct per-graph"] == pytest.approx(row["construct per-graph"] / best)
        assert min(rel["single"], rel["heft"]) == pytest.approx(1.0)
    evals = json.loads((out / "evaluations.json").read_text())
    assert [r["graph"] for r in evals] == [r["graph"] for r in rows]
    for r in evals:
        assert r["single"] == r["heft"] == 0
        # at most 8 nodes: one greedy episode <= 8 steps + 9 ranked; two updates of 4 episodes
        # alone are 2 x 4 x (nodes + 1) > that
        assert 0 < r["zero-shot"] <= 17 < r["from-scratch"] and r["fine-tuned"] > 17
        assert 0 < r["zero-shot untrained"] <= 17
        assert r["construct zero-shot"] == 17 < r["construct per-graph"]
        assert r["construct untrained"] == r["construct uniform"] == 17
    assert (out / "cdf.png").is_file() and (out / "runs" / "cifar10-d4-quick").is_dir()
    assert (out / "runs" / "cifar10-construct-d4-quick").is_dir()
    assert (out / "gantt_family_cifar10_25.png").is_file()
