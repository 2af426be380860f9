"""Benchmark graph JSON (msr-fiddle format): mapping, expert splits, errors, `pj.graphs.load`."""

from __future__ import annotations

import copy
import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.graphs import generators, load, load_benchmark, load_expert_split, resolve_graph
from placeto_jax.graphs.benchmark import TRANSFER_BANDWIDTH
from placeto_jax.graphs.io import save_graph

MSR_FIDDLE = Path("/work/shared/benchmarks/msr-fiddle")


def _node(node_id, fpga_ms, **extra) -> dict:
    node = {
        "id": node_id,
        "supportedOnFpga": 1,
        "cpuLatency": 10 * fpga_ms,
        "fpgaLatency": fpga_ms,
        "isBackwardNode": False,
        "size": 0.0,
    }
    return {**node, **extra}


def _edge(src, dst, size=None, cost=0.0) -> dict:
    edge = {"sourceId": src, "destId": dst, "cost": cost}
    return edge if size is None else {**edge, "size": size}


def _doc(nodes, edges, fpgas=2, memory=1e9) -> dict:
    return {
        "maxSizePerFPGA": memory,
        "maxFPGAs": fpgas,
        "maxCPUs": 1,
        "nodes": nodes,
        "edges": edges,
    }


# Nodes listed out of id order, ids negative and sparse, a missing name, a shared name, a shared
# colorClass, an edge without size, two sizes out of one node, a duplicate edge.
MIXED = _doc(
    nodes=[
        _node(30, 0.25, name="MatMul7", cpuLatency=2.0, colorClass=5, size=1000.0),
        _node(10, 1.5, name="Relu", cpuLatency=3.0, colorClass=9),
        _node(-4, 0.002, cpuLatency=0.01, supportedOnFpga=0, isBackwardNode=True, size=4096),
        _node(25, 0, name="Relu", cpuLatency=0, isBackwardNode=1, colorClass=5, size=8),
    ],
    edges=[
        _edge(10, 30, size=3000.0, cost=0.5),
        _edge(10, 25, size=5000.0, cost=0.5),
        _edge(-4, 10, cost=0.001),
        _edge(30, 25, size=0.0),
        _edge(10, 30, size=3000.0, cost=0.5),
    ],
)


def _write(tmp_path: Path, doc, name: str = "g.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


# ---------------------------------------------------------------------- mapping
def test_mapping_of_every_field(tmp_path):
    bench = load_benchmark(_write(tmp_path, MIXED))
    g = bench.graph
    assert bench.node_ids.tolist() == [-4, 10, 25, 30]
    assert g.names == ("node-4", "Relu#10", "Relu#25", "MatMul7")
    assert g.op_types == ("node", "Relu", "Relu", "MatMul")
    np.testing.assert_allclose(g.cost, [2.0, 1500.0, 0.0, 250.0], rtol=1e-12)  # ms -> µs
    np.testing.assert_allclose(bench.cpu_cost_us, [10.0, 3000.0, 0.0, 2000.0], rtol=1e-12)
    # node -4: 0.001 ms at 2 GiB/s; node 10: the larger of its two edge sizes; sinks send nothing
    np.testing.assert_allclose(g.out_bytes, [2**31 * 1e-6, 5000.0, 0.0, 0.0], rtol=1e-12)
    assert g.param_bytes.tolist() == [4096.0, 0.0, 8.0, 1000.0]
    assert g.edges.tolist() == [[0, 1], [1, 2], [1, 3], [3, 2]]
    assert g.colocation.tolist() == [-1, -1, 0, 0]
    assert bench.supported_on_accelerator.tolist() == [False, True, True, True]
    assert bench.is_backward.tolist() == [True, False, True, False]
    assert (bench.max_accelerators, bench.max_cpus) == (2, 1)
    assert bench.accelerator_memory_bytes == 1e9
    assert bench.op_index(25) == 2
    assert TRANSFER_BANDWIDTH == 2147.483648  # bytes/µs


def test_colour_classes_become_dense_groups_and_layer_names_give_no_types(tmp_path):
    nodes = [_node(i, 1.0, name=f"node{i}", colorClass=c) for i, c in [(1, 40), (2, 7), (3, 40)]]
    nodes += [_node(4, 1.0, name="node4", colorClass=7), _node(5, 1.0, name="node5", colorClass=9)]
    g = load_benchmark(_write(tmp_path, _doc(nodes, []))).graph
    assert g.colocation.tolist() == [1, 0, 1, 0, -1]
    assert g.op_types is None


def test_name_clashing_with_a_disambiguated_name_stays_unique(tmp_path):
    nodes = [_node(1, 1.0, name="a"), _node(2, 1.0, name="a"), _node(3, 1.0, name="a#2")]
    g = load_benchmark(_write(tmp_path, _doc(nodes, []))).graph
    assert g.names == ("a#1", "a#2#2", "a#2")


def test_unknown_fields_are_ignored_and_gzip_is_read(tmp_path):
    doc = copy.deepcopy(MIXED)
    doc["debug"] = {"anything": 1}
    doc["nodes"][0]["layerId"] = 3
    path = tmp_path / "g.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert load_benchmark(path).graph.n_ops == 4


# ---------------------------------------------------------------------- expert splits
def _rule_graph(s2: float, s3: float) -> dict:
    """1 -> 2, 1 -> 3, 2 -> 4 (s2 bytes), 3 -> 4 (s3 bytes), 4 -> 5, 4 -> 7; 6 alone; 3 and 5
    share colorClass 7."""
    nodes = [_node(i, 1.0, colorClass=7 if i in (3, 5) else None) for i in range(1, 8)]
    edges = [_edge(1, 2, 10), _edge(1, 3, 10), _edge(2, 4, s2), _edge(3, 4, s3)]
    edges += [_edge(4, 5, 1), _edge(4, 7, 1)]
    return _doc(nodes, edges, fpgas=3)


@pytest.mark.parametrize(
    ("s2", "s3", "expected"),
    [
        (50.0, 100.0, [0, 0, 2, 2, 2, 0, 2]),  # 4 follows 3 (larger output), 7 follows 4
        (100.0, 50.0, [0, 0, 2, 0, 2, 0, 0]),  # 4 follows 2
        (70.0, 70.0, [0, 0, 2, 0, 2, 0, 0]),  # tie: the producer with the lower op index
    ],
)
def test_unmentioned_nodes_follow_group_then_largest_producer_else_zero(tmp_path, s2, s3, expected):
    bench = load_benchmark(_write(tmp_path, _rule_graph(s2, s3)))
    split = _write(tmp_path, {"fpgas": [{"nodes": [1, 2]}, {"nodes": []}, {"nodes": [5]}]}, "e")
    placement = load_expert_split(split, bench)
    assert placement.dtype == np.int64
    assert placement.tolist() == expected


def test_full_split_maps_ids_to_op_order(tmp_path):
    bench = load_benchmark(_write(tmp_path, MIXED))
    doc = {
        "cpus": [{"load": 0.0, "nodes": []}],
        "fpgas": [{"nodes": [10]}, {"nodes": [30, 25, -4]}],
    }
    assert load_expert_split(_write(tmp_path, doc, "e.json"), bench).tolist() == [1, 0, 1, 1]


def test_inference_split_extends_to_backward_nodes(tmp_path):
    """Forward 1 -> 2, backward 3 (of 2) -> 4 (of 1); colorClass pairs a node with its gradient."""
    nodes = [_node(1, 1.0, colorClass=1), _node(2, 1.0, colorClass=2)]
    nodes += [_node(i, 1.0, isBackwardNode=True, colorClass=c) for i, c in [(3, 2), (4, 1)]]
    edges = [_edge(1, 2, 8), _edge(2, 3, 8), _edge(3, 4, 8)]
    bench = load_benchmark(_write(tmp_path, _doc(nodes, edges)))
    split = _write(tmp_path, {"fpgas": [{"nodes": [1]}, {"nodes": [2]}]}, "e.json")
    assert load_expert_split(split, bench).tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"fpgas": [{"nodes": [99]}]}, "fpgas[0].nodes[0]: node 99 is not in the graph"),
        (
            {"fpgas": [{"nodes": [10]}, {"nodes": [30, 10]}]},
            "fpgas[1].nodes[1]: node 10 is already on accelerator 0",
        ),
        (
            {"fpgas": [{"nodes": []}, {"nodes": []}, {"nodes": [10]}]},
            "fpgas[2].nodes[0] puts node 10 on accelerator 2, but the graph has maxFPGAs 2",
        ),
        (
            {"cpus": [{"nodes": [-4]}], "fpgas": []},
            "cpus[0].nodes lists node -4; this project places ops on accelerators only",
        ),
        (
            {"fpgas": [{"nodes": [30]}, {"nodes": [25]}]},
            "nodes 25 and 30 share a colorClass but are on accelerators 1 and 0",
        ),
        ({"cpus": []}, 'missing field "fpgas"'),
        (
            {"fpgas": {"nodes": [1]}},
            "\"fpgas\" must be a list of {nodes: [ids]}, got {'nodes': [1]}",
        ),
        ({"fpgas": [[10]]}, 'fpgas[0] must be an object with a "nodes" list, got [10]'),
        ({"fpgas": [{"nodes": "10"}]}, "fpgas[0]: \"nodes\" must be a list of node ids, got '10'"),
        (
            {"fpgas": [{"nodes": ["10"]}]},
            "fpgas[0].nodes[0] must be a node id (an integer), got '10'",
        ),
        ([1, 2], "expected a JSON object at the top level, got [1, 2]"),
    ],
)
def test_malformed_expert_splits(tmp_path, doc, problem):
    bench = load_benchmark(_write(tmp_path, MIXED))
    path = _write(tmp_path, doc, "expert.json")
    with pytest.raises(ValueError) as info:
        load_expert_split(path, bench)
    assert str(info.value) == f"{path}: {problem}"


def test_truncated_expert_split(tmp_path):
    bench = load_benchmark(_write(tmp_path, MIXED))
    path = _write(tmp_path, '{"fpgas": [{"nodes": [1', "expert.json")
    with pytest.raises(ValueError, match=r"expert\.json: not valid JSON"):
        load_expert_split(path, bench)


# ---------------------------------------------------------------------- malformed graphs
def _mutated(change) -> dict:
    doc = copy.deepcopy(MIXED)
    change(doc)
    return doc


MALFORMED = [
    (lambda d: d.pop("maxFPGAs"), 'missing field "maxFPGAs"'),
    (lambda d: d.update(maxFPGAs=0), '"maxFPGAs" must be an integer >= 1, got 0'),
    (lambda d: d.update(maxCPUs=True), '"maxCPUs" must be an integer >= 0, got True'),
    (
        lambda d: d.update(maxSizePerFPGA="16GB"),
        "\"maxSizePerFPGA\" must be a number > 0 (bytes), got '16GB'",
    ),
    (lambda d: d.update(nodes={}), '"nodes" must be a list of node objects, got {}'),
    (lambda d: d.update(nodes=[]), '"nodes" is empty; a graph needs at least one node'),
    (lambda d: d.update(edges=None), '"edges" must be a list of edge objects, got null'),
    (lambda d: d["nodes"].__setitem__(0, 5), "nodes[0] must be an object, got 5"),
    (lambda d: d["nodes"][1].pop("id"), 'nodes[1]: missing field "id"'),
    (
        lambda d: d["nodes"][1].update(id="10"),
        "nodes[1]: \"id\" must be a 64-bit integer, got '10'",
    ),
    (
        lambda d: d["nodes"][1].update(id=2**64),
        'nodes[1]: "id" must be a 64-bit integer, got 18446744073709551616',
    ),
    (lambda d: d["nodes"][1].pop("fpgaLatency"), 'nodes[1] (id 10): missing field "fpgaLatency"'),
    (
        lambda d: d["nodes"][1].update(cpuLatency=-1.0),
        'nodes[1] (id 10): "cpuLatency" must be a number >= 0, got -1.0',
    ),
    (
        lambda d: d["nodes"][1].update(fpgaLatency=float("nan")),
        'nodes[1] (id 10): "fpgaLatency" must be a number >= 0, got nan',
    ),
    (
        lambda d: d["nodes"][1].update(supportedOnFpga=2),
        'nodes[1] (id 10): "supportedOnFpga" must be a boolean or 0/1, got 2',
    ),
    (lambda d: d["nodes"][1].pop("size"), 'nodes[1] (id 10): missing field "size"'),
    (
        lambda d: d["nodes"][1].update(colorClass=1.5),
        'nodes[1] (id 10): "colorClass" must be an integer, got 1.5',
    ),
    (lambda d: d["nodes"][1].update(name=7), 'nodes[1] (id 10): "name" must be a string, got 7'),
    (lambda d: d["nodes"][3].update(id=30), 'node id 30 appears more than once in "nodes"'),
    (lambda d: d["edges"].__setitem__(2, [1, 2]), "edges[2] must be an object, got [1, 2]"),
    (lambda d: d["edges"][1].pop("cost"), 'edges[1]: missing field "cost"'),
    (
        lambda d: d["edges"][1].update(destId=99),
        'edges[1]: "destId" 99 is not the id of any node',
    ),
    (
        lambda d: d["edges"][1].update(sourceId=None),
        'edges[1]: "sourceId" must be a node id (an integer), got null',
    ),
    (
        lambda d: d["edges"][0].update(size=-3),
        'edges[0]: "size" must be a number >= 0 (bytes), got -3',
    ),
    (
        lambda d: d["edges"].append(_edge(25, 10)),
        "graph has a cycle: Relu#25 -> Relu#10 -> Relu#25",
    ),
    (lambda d: d["edges"].append(_edge(30, 30)), "edge (MatMul7, MatMul7) is a self-loop"),
]


@pytest.mark.parametrize(("change", "problem"), MALFORMED)
def test_malformed_graph_names_file_and_field(tmp_path, change, problem):
    path = _write(tmp_path, _mutated(change))
    with pytest.raises(ValueError) as info:
        load_benchmark(path)
    assert str(info.value) == f"{path}: {problem}"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (json.dumps(MIXED)[:-40], "not valid JSON"),
        ("[]", "expected a JSON object at the top level, got []"),
    ],
)
def test_truncated_or_non_object_file(tmp_path, text, problem):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_benchmark(path)
    assert str(info.value).startswith(f"{path}: {problem}")


# ---------------------------------------------------------------------- one loader
def test_load_dispatches_on_all_three_kinds(tmp_path):
    own = tmp_path / "own.json"
    save_graph(generators.diamond(), own)
    bench = _write(tmp_path, MIXED, "bench.json")
    for spec in (own, str(own)):
        assert load(spec).names == ("a", "b", "c", "d")
    for spec in (bench, str(bench)):
        assert load(spec).names == load_benchmark(bench).graph.names
    assert load("example:diamond").cost.tolist() == [100.0, 50.0, 30.0, 10.0]
    assert resolve_graph(str(bench)).n_ops == 4
    assert pj.graphs.load is load


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"nodes": [], "edges": []}, 'missing field "maxSizePerFPGA"'),
        ({"edges": [], "ops": {}}, 'missing field "format"'),
        ({"format": "placeto-jax-graph", "nodes": []}, 'unknown field "nodes"'),
    ],
)
def test_load_errors_follow_the_detected_format(tmp_path, doc, problem):
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: {problem}")


def test_makespan_of_a_three_node_benchmark_by_hand(tmp_path):
    """Chain 1 -> 2 -> 3 of 100, 50, 20 µs; outputs 76000 and 7600 bytes; placeto-k80 constants
    (7600 bytes/µs, delta1 5.7 µs). One device: 0-100, 105.7-155.7, 161.4-181.4. Node 2 on
    device 1: its input arrives at 110, it runs 110-160, its output arrives at 161, node 3 runs
    161-181."""
    nodes = [_node(1, 0.1), _node(2, 0.05), _node(3, 0.02)]
    doc = _doc(nodes, [_edge(1, 2, 76000.0), _edge(2, 3, 7600.0)], memory=2e9)
    bench = load_benchmark(_write(tmp_path, doc))
    cluster = pj.Cluster(n_devices=bench.max_accelerators, memory=bench.accelerator_memory_bytes)
    result = pj.simulate(bench.graph, cluster, np.array([[0, 0, 0], [0, 1, 0]]))
    np.testing.assert_allclose(result.makespan, [181.4, 181.0], rtol=1e-12)
    np.testing.assert_allclose(result.start[1], [0.0, 110.0, 161.0], rtol=1e-12)


# ---------------------------------------------------------------------- the published files
def _published_counts(path: Path) -> tuple[int, int]:
    doc = json.loads(path.read_text())
    return len(doc["nodes"]), len({(e["sourceId"], e["destId"]) for e in doc["edges"]})


@pytest.mark.slow
def test_every_published_graph_and_expert_split():
    if not MSR_FIDDLE.is_dir():
        pytest.skip(f"{MSR_FIDDLE} is not here")
    graphs = sorted(MSR_FIDDLE.glob("*-inputs/*Graphs/*.json"))
    assert graphs
    loaded = {}
    for path in graphs:
        start = time.perf_counter()
        bench = load_benchmark(path)
        seconds = time.perf_counter() - start
        g = bench.graph
        assert (g.n_ops, g.n_edges) == _published_counts(path)
        assert g.topological_order.shape == (g.n_ops,)
        assert np.all(np.diff(bench.node_ids) > 0)
        loaded[path.relative_to(MSR_FIDDLE)] = bench
        print(f"{path.relative_to(MSR_FIDDLE)}  ops {g.n_ops}  edges {g.n_edges}  {seconds:.4f} s")
    used = set()
    for rel, bench in loaded.items():
        split = _expert_for(rel)
        if split is None or "OperatorGraphs" in str(rel):
            continue
        used.add(split.name)
        n_used = 1 + max(
            i for i, f in enumerate(json.loads(split.read_text())["fpgas"]) if f["nodes"]
        )
        if n_used > bench.max_accelerators:
            with pytest.raises(ValueError, match="maxFPGAs"):
                load_expert_split(split, bench)
            print(f"{rel}  {split.name}: {n_used} accelerators > maxFPGAs {bench.max_accelerators}")
            continue
        placement = load_expert_split(split, bench)
        assert placement.shape == (bench.graph.n_ops,)
        assert placement.min() >= 0 and placement.max() < bench.max_accelerators
        groups = bench.graph.colocation
        for group in np.unique(groups[groups >= 0]):
            assert np.unique(placement[groups == group]).size == 1
        print(f"{rel}  {split.name}: ops per accelerator {np.bincount(placement).tolist()}")
    assert used == {path.name for path in (MSR_FIDDLE / "human-experts").glob("*.json")}


def _expert_for(rel: Path) -> Path | None:
    """The split named after the graph, else (training) the inference one."""
    for stem in (rel.stem, rel.stem.replace("_training", "_inference")):
        path = MSR_FIDDLE / "human-experts" / f"{stem}_expert.json"
        if path.is_file():
            return path
    return None
