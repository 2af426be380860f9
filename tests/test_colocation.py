"""Co-location as a constraint, on the benchmark folder's graphs: Placeto trains, places and
evaluates every file (layer and operator graphs, inference and training, latency and throughput)
with every class on one device; every baseline keeps the same classes; placement files name
their ops and read back onto the graph by name."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.cli import main
from placeto_jax.graphs.placements import colocation_split
from placeto_jax.placers import METHODS

MSR_FIDDLE = Path("/work/shared/benchmarks/msr-fiddle")
FILES = sorted(MSR_FIDDLE.glob("*-inputs/*Graphs/*.json"))
TRAINING = [
    MSR_FIDDLE / "throughput-inputs/OperatorGraphs/bert_l-3_training.json",
    MSR_FIDDLE / "throughput-inputs/LayerGraphs/resnet50_training.json",
]  # every baseline on the first in the default suite, on every file in `make test-slow`
TINY_RUN = [
    "--devices", "4", "--preset", "tiny", "--no-progress",
    "--set", "train.iterations=2", "--set", "train.episodes=4",
    "--set", "run.eval_every=2", "--set", "run.checkpoint_every=2",
]  # fmt: skip

needs_data = pytest.mark.skipif(not MSR_FIDDLE.is_dir(), reason=f"{MSR_FIDDLE} is not here")


def classes_on_one_device(graph: pj.Graph, placement: np.ndarray) -> bool:
    """Every co-location class of `graph` on a single device (checked class by class)."""
    if graph.colocation is None:
        return True
    ids = graph.colocation
    return all(np.unique(placement[ids == c]).size == 1 for c in np.unique(ids[ids >= 0]))


def test_the_checks_see_a_split_class():
    graph = pj.Graph.from_edges(
        [1.0] * 3, [1.0] * 3, [(0, 1), (1, 2)], names=["w", "f", "u"], colocation=[0, -1, 0]
    )
    assert classes_on_one_device(graph, np.array([1, 0, 1]))
    assert not classes_on_one_device(graph, np.array([1, 0, 0]))
    assert colocation_split(graph, np.array([1, 0, 1])) is None
    assert colocation_split(graph, np.array([1, 0, 0])) == (0, 2)


SOME_FILES = [
    *TRAINING,
    MSR_FIDDLE / "throughput-inputs/OperatorGraphs/resnet50_inference.json",
    MSR_FIDDLE / "latency-inputs/LayerGraphs/inceptionv3_inference.json",
]  # the default suite's bank: operator and layer, training and inference, throughput and latency


@needs_data
@pytest.mark.slow  # about 60 s of CPU; the default suite keeps the baselines' classes below
def test_placeto_trains_places_and_evaluates_benchmark_files(tmp_path, capsys):
    assert all(path in FILES for path in SOME_FILES)
    train_place_and_evaluate(SOME_FILES, tmp_path, capsys)


@needs_data
@pytest.mark.slow
def test_placeto_trains_places_and_evaluates_every_benchmark_file(tmp_path, capsys):
    assert len(FILES) == 21  # 8 latency and 13 throughput graphs
    train_place_and_evaluate(FILES, tmp_path, capsys)


def train_place_and_evaluate(files: list[Path], tmp_path: Path, capsys) -> None:
    """`train` on one bank of `files`, `eval` every one (each class on one device), `place -o`
    the training operator graph and simulate the file by name."""
    graphs = {str(path): pj.graphs.load(path) for path in files}
    assert sum(g.colocation is not None for g in graphs.values()) >= min(10, len(files) // 2)
    workdir = tmp_path / "run"
    argv = ["--graphs", ",".join(graphs), "--no-heuristics"]  # classes, not quality, here
    assert main(["train", *argv, "--workdir", str(workdir), *TINY_RUN]) == 0
    capsys.readouterr()
    assert main(["eval", *argv, "--checkpoint", str(workdir), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["graph"] for r in records] == list(graphs)
    for record in records:
        graph = graphs[record["graph"]]
        placement = np.asarray(record["placement"])
        assert placement.shape == (graph.n_ops,)
        assert classes_on_one_device(graph, placement), record["graph"]
        assert record["decisions"] <= record["nodes"]
    # place -o writes op names; the file reads back by name and simulates from the CLI.
    training = str(TRAINING[0])
    out = tmp_path / "placement.json"
    assert main(["place", training, "--checkpoint", str(workdir), "-o", str(out), "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    assert list(doc["placement"]) == list(graphs[training].names)
    read = pj.load_placement(out, graphs[training], 4)
    np.testing.assert_array_equal(read, placed["placement"])
    assert main(["simulate", training, "--devices", "4", "--placement", str(out), "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["makespan_us"] == pytest.approx(placed["makespan_us"], rel=1e-12)


def _methods_keep_classes(path: Path) -> None:
    graph = pj.graphs.load(path)
    cluster = pj.Cluster.preset("placeto-k80", 4)
    for name, method in METHODS.items():
        if name == "expert":  # its rules read zoo op names; a benchmark file has none
            with pytest.raises(ValueError, match="no naming rules know this graph"):
                method.place(graph, cluster, jax.random.key(0), budget=32)
            continue
        placement = method.place(graph, cluster, jax.random.key(0), budget=32)
        assert classes_on_one_device(graph, placement), (path.name, name)


@pytest.mark.slow
@needs_data
def test_every_baseline_keeps_the_classes_of_a_training_operator_graph():
    _methods_keep_classes(TRAINING[0])


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_baseline_keeps_the_classes_of_every_file(path):
    _methods_keep_classes(path)


def test_a_named_placement_reads_onto_a_reordered_graph(tmp_path):
    # The same model with its ops in another order: the file matches them by name.
    graph = pj.Graph.from_edges(
        [1.0, 2.0, 3.0], [1.0] * 3, [("w", "f"), ("f", "u")], names=["w", "f", "u"],
        colocation=[0, -1, 0],
    )  # fmt: skip
    reordered = pj.Graph.from_edges(
        [3.0, 2.0, 1.0], [1.0] * 3, [("w", "f"), ("f", "u")], names=["u", "f", "w"],
        colocation=[0, -1, 0],
    )  # fmt: skip
    path = tmp_path / "p.json"
    pj.save_placement(path, graph, [1, 0, 1], n_devices=2)
    np.testing.assert_array_equal(pj.load_placement(path, reordered, 2), [1, 0, 1])
    with pytest.raises(ValueError, match=r"are co-located .* but placed on different devices"):
        pj.save_placement(path, graph, [1, 0, 0], n_devices=2)
    path.write_text(json.dumps({"w": 1, "f": 0, "u": 0}))
    with pytest.raises(ValueError, match=r"ops 'w' \(device 1\) and 'u' \(device 0\)"):
        pj.load_placement(path, graph, 2)


def test_classes_named_by_op():
    graph = pj.Graph.from_edges(
        [1.0] * 4, [1.0] * 4, [("w", "f"), ("f", "b"), ("b", "u"), ("w", "u")],
        names=["w", "f", "b", "u"],
    )  # fmt: skip
    tied = graph.colocated([["w", "u"]])
    np.testing.assert_array_equal(tied.colocation, [0, -1, -1, 0])
    # a class sharing an op with one the graph has joins it
    np.testing.assert_array_equal(tied.colocated([["u", "b"]]).colocation, [0, -1, 0, 0])
    np.testing.assert_array_equal(tied.colocated([["f", "b"]]).colocation, [0, 1, 1, 0])
    assert graph.colocated([]).colocation is None
    with pytest.raises(ValueError, match="co-location class 1 names 'x', which is not an op"):
        graph.colocated([["w", "u"], ["f", "x"]])
    with pytest.raises(ValueError, match="class 0 must be a list of op names, got 'wu'"):
        graph.colocated(["wu"])
