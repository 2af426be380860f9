"""Importer for the benchmark graph JSON of Tarnawski et al. (NeurIPS 2020, `msr-fiddle/
dnn-partitioning`): `load_benchmark` for graphs, `load_expert_split` for human-expert splits.

A benchmark file is one JSON object: `maxSizePerFPGA` (bytes of one accelerator), `maxFPGAs`,
`maxCPUs`, `nodes[]` and `edges[]`. Required node fields: `id`, `supportedOnFpga` and
`isBackwardNode` (boolean or 0/1), `cpuLatency`, `fpgaLatency`, `size`; optional: `colorClass`,
`name`, `layerId`. Required edge fields: `sourceId`, `destId`, `cost`; optional: `size`. Other
fields are ignored (the format allows debug fields). A name ending in `.gz` means gzip.

Mapping to a `Graph` (ops in increasing node id order, whatever the ids are):

| Graph field   | from the file                                                                  |
|---------------|--------------------------------------------------------------------------------|
| `cost`        | `fpgaLatency` in milliseconds x 1000 (µs)                                      |
| `out_bytes`   | largest `size` over the node's out-edges; an edge without `size` counts         |
|               | `cost` ms x 1000 x `TRANSFER_BANDWIDTH` bytes; 0 for a node with no out-edge     |
| `param_bytes` | node `size` (bytes the node takes on an accelerator)                           |
| `names`       | `name`, or `node<id>` when missing; a name shared by several nodes becomes      |
|               | `<name>#<id>` on each of them                                                  |
| `op_types`    | the name's leading run of letters (`"MatMul26_Grad/Gemm_7"` -> `"MatMul"`,      |
|               | `"other"` when there is none), or None when that gives one type for all nodes  |
| `colocation`  | one group per `colorClass` shared by two or more nodes, numbered in increasing |
|               | `colorClass` order; -1 for the rest                                            |

Units. Latencies are milliseconds in every file: the format's README says so for the layer
graphs, and in the operator graphs (a) edge costs are exactly `size / 2**31` seconds expressed in
ms (2 GiB/s), the same relation as in the latency layer graphs, and (b) output bytes per ms of
fpgaLatency peak at 64.4 GB/s, a plausible accelerator memory bandwidth (64 TB/s if µs).
Edge costs in `throughput-inputs/LayerGraphs` are 1000x smaller (`size / 2**31` in ms); those
files, like all published ones, give edge sizes, so the fallback through `cost` is not used there.
In training layer graphs a few nodes send different sizes to different consumers; the graph keeps
the largest (one output tensor per op, broadcast to remote consumers).

Expert splits (`human-experts/*.json`): `{"fpgas": [{"nodes": [ids...]}, ...], "cpus": [...]}`;
entry k of `fpgas` lists the node ids on accelerator k. See `load_expert_split` for the rules.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
import reprlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.io import parse_json_file

MS_TO_US = 1e3
TRANSFER_BANDWIDTH = 2**31 / 1e6  # bytes/µs: the 2 GiB/s host link behind the files' edge costs
OTHER_OP_TYPE = "other"
_REQUIRED = object()


@dataclasses.dataclass(frozen=True, eq=False)
class BenchmarkGraph:
    """A benchmark file: its `Graph` (ops in increasing node id order) and its hardware."""

    graph: Graph
    node_ids: np.ndarray  # [N] int64 the file's node id of each op, increasing
    max_accelerators: int  # maxFPGAs
    max_cpus: int  # maxCPUs
    accelerator_memory_bytes: float  # maxSizePerFPGA, bytes of one accelerator
    supported_on_accelerator: np.ndarray  # [N] bool supportedOnFpga
    cpu_cost_us: np.ndarray  # [N] float64 µs, cpuLatency on one CPU core
    is_backward: np.ndarray  # [N] bool isBackwardNode

    def op_index(self, node_id: int) -> int:
        """The op index of the file's node `node_id`."""
        i = _find(self.node_ids, node_id)
        if i < 0:
            raise ValueError(f"no node with id {node_id}")
        return i


def load_benchmark(path: str | os.PathLike) -> BenchmarkGraph:
    """Read a benchmark graph file. Raises ValueError naming the file and the field or node."""
    return parse_json_file(path, benchmark_from_dict)


def benchmark_from_dict(doc: object) -> BenchmarkGraph:
    """Validate a parsed benchmark file and build it; ValueError names the first problem."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object at the top level, got {_show(doc)}")
    memory = _get(doc, "maxSizePerFPGA", "", _is_positive, "a number > 0 (bytes)")
    n_acc = _get(doc, "maxFPGAs", "", lambda x: _is_int(x) and x >= 1, "an integer >= 1")
    n_cpu = _get(doc, "maxCPUs", "", lambda x: _is_int(x) and x >= 0, "an integer >= 0")
    nodes = _get(doc, "nodes", "", _is_list, "a list of node objects")
    edges = _get(doc, "edges", "", _is_list, "a list of edge objects")
    if not nodes:
        raise ValueError('"nodes" is empty; a graph needs at least one node')
    rows = sorted((_node(node, i) for i, node in enumerate(nodes)), key=lambda r: r["id"])
    ids = np.array([r["id"] for r in rows], dtype=np.int64)
    repeated = ids[1:][np.diff(ids) == 0]
    if repeated.size:
        raise ValueError(f'node id {repeated[0]} appears more than once in "nodes"')
    pairs, edge_bytes = _edges(edges, ids)
    out_bytes = np.zeros(len(rows))
    np.maximum.at(out_bytes, pairs[:, 0], edge_bytes)
    names = _unique_names([r["name"] for r in rows], ids)
    graph = Graph.from_edges(
        cost=[r["fpgaLatency"] * MS_TO_US for r in rows],
        out_bytes=out_bytes,
        edges=pairs,
        param_bytes=[r["size"] for r in rows],
        names=names,
        op_types=_op_types([r["name"] for r in rows]),
        colocation=_colocation([r["colorClass"] for r in rows]),
    )
    return BenchmarkGraph(
        graph=graph,
        node_ids=_frozen(ids),
        max_accelerators=n_acc,
        max_cpus=n_cpu,
        accelerator_memory_bytes=float(memory),
        supported_on_accelerator=_frozen(np.array([r["supportedOnFpga"] for r in rows], bool)),
        cpu_cost_us=_frozen(np.array([r["cpuLatency"] * MS_TO_US for r in rows])),
        is_backward=_frozen(np.array([r["isBackwardNode"] for r in rows], bool)),
    )


def load_expert_split(path: str | os.PathLike, benchmark: BenchmarkGraph) -> np.ndarray:
    """[N] int64: the accelerator of each op (in the graph's op order) under an expert split.

    Entry k of the file's `fpgas` list names the node ids on accelerator k. Nodes the split does
    not name are placed in topological order: with their co-location group when a member is
    placed, else on the accelerator of their producer with the largest output (ties: lowest op
    index), else (a root) on accelerator 0. This also derives a training graph's split from its
    inference split, as backward nodes share a colorClass with their forward node. ValueError,
    naming the file and entry, for: a node id not in the graph, a node named twice, a node on an
    accelerator >= maxFPGAs, nodes in `cpus` (this project places ops on accelerators only), or
    members of one co-location group on different accelerators."""
    return parse_json_file(path, lambda doc: expert_split_from_dict(doc, benchmark))


def expert_split_from_dict(doc: object, benchmark: BenchmarkGraph) -> np.ndarray:
    """`load_expert_split` on a parsed file."""
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object at the top level, got {_show(doc)}")
    for k, entry in enumerate(_get(doc, "cpus", "", _is_list, "a list", default=[])):
        cpu_nodes = _split_nodes(entry, f"cpus[{k}]")
        if cpu_nodes:
            raise ValueError(
                f"cpus[{k}].nodes lists node {_show(cpu_nodes[0])}; this project places ops on "
                "accelerators only"
            )
    placement = np.full(benchmark.graph.n_ops, -1, dtype=np.int64)
    for k, entry in enumerate(_get(doc, "fpgas", "", _is_list, "a list of {nodes: [ids]}")):
        for j, node_id in enumerate(_split_nodes(entry, f"fpgas[{k}]")):
            _assign(placement, benchmark, node_id, k, f"fpgas[{k}].nodes[{j}]")
    _check_groups(benchmark, placement)
    return _fill_unplaced(benchmark.graph, placement)


# ---------------------------------------------------------------------- nodes and edges
EXPERTS = "human-experts"  # folder of the expert splits in a benchmark data directory


def benchmark_files(data: str | os.PathLike) -> list[Path]:
    """Every benchmark graph (`*.json`) under `data`, outside the expert-split folder."""
    data = Path(data)
    if not data.is_dir():
        raise ValueError(f"benchmark data folder {str(data)!r} does not exist")
    return sorted(p for p in data.rglob("*.json") if EXPERTS not in p.relative_to(data).parts)


def expert_split_file(data: str | os.PathLike, graph_path: Path) -> tuple[Path | None, str]:
    """The expert split of a layer graph and where it comes from: "own", "inference" (a
    training graph without one uses its inference split, extended by colorClass) or "none"."""
    if "LayerGraphs" not in graph_path.parts:
        return None, "none"
    experts = Path(data) / EXPERTS
    own = experts / f"{graph_path.stem}_expert.json"
    if own.is_file():
        return own, "own"
    inference = experts / f"{graph_path.stem.replace('_training', '_inference')}_expert.json"
    if graph_path.stem.endswith("_training") and inference.is_file():
        return inference, "inference"
    return None, "none"


def _node(node: object, i: int) -> dict:
    """The fields of node i, validated (colorClass None and name `node<id>` when missing)."""
    if not isinstance(node, dict):
        raise ValueError(f"nodes[{i}] must be an object, got {_show(node)}")
    node_id = _get(node, "id", f"nodes[{i}]", _is_id, "a 64-bit integer")
    where = f"nodes[{i}] (id {node_id})"
    row = {"id": node_id}
    for key in ("supportedOnFpga", "isBackwardNode"):
        row[key] = bool(_get(node, key, where, _is_flag, "a boolean or 0/1"))
    for key in ("cpuLatency", "fpgaLatency", "size"):
        row[key] = float(_get(node, key, where, _is_amount, "a number >= 0"))
    row["colorClass"] = _get(node, "colorClass", where, _is_int, "an integer", default=None)
    row["name"] = _get(node, "name", where, _is_str, "a string", default=f"node{node_id}")
    return row


def _edges(edges: list, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[E, 2] int64 op index pairs and [E] float64 bytes each edge carries."""
    pairs = np.zeros((len(edges), 2), dtype=np.int64)
    sizes = np.zeros(len(edges))
    for i, edge in enumerate(edges):
        where = f"edges[{i}]"
        if not isinstance(edge, dict):
            raise ValueError(f"{where} must be an object, got {_show(edge)}")
        for col, key in enumerate(("sourceId", "destId")):
            node_id = _get(edge, key, where, _is_id, "a node id (an integer)")
            pairs[i, col] = _find(ids, node_id)
            if pairs[i, col] < 0:
                raise ValueError(f'{where}: "{key}" {node_id} is not the id of any node')
        cost = _get(edge, "cost", where, _is_amount, "a number >= 0 (ms)")
        size = _get(edge, "size", where, _is_amount, "a number >= 0 (bytes)", default=None)
        sizes[i] = cost * MS_TO_US * TRANSFER_BANDWIDTH if size is None else size
    return pairs, sizes


def _find(ids: np.ndarray, node_id: int) -> int:
    """Index of `node_id` in the sorted `ids`, -1 when absent."""
    if not _is_id(node_id):
        return -1
    i = int(np.searchsorted(ids, node_id))
    return i if i < len(ids) and ids[i] == node_id else -1


def _unique_names(names: list[str], ids: np.ndarray) -> list[str]:
    """Names shared by several nodes become `<name>#<id>` (again, should that clash)."""
    counts = collections.Counter(names)
    taken = {name for name in names if counts[name] == 1}
    out = []
    for name, node_id in zip(names, ids.tolist(), strict=True):
        if counts[name] > 1:
            name = f"{name}#{node_id}"
            while name in taken:
                name = f"{name}#{node_id}"
            taken.add(name)
        out.append(name)
    return out


def _op_types(names: list[str]) -> list[str] | None:
    types = [m.group() if (m := re.match(r"[A-Za-z]+", n)) else OTHER_OP_TYPE for n in names]
    return types if len(set(types)) > 1 else None


def _colocation(classes: list[int | None]) -> np.ndarray:
    """[N] int64: dense group ids of the colorClasses shared by two or more nodes, else -1."""
    counts = collections.Counter(c for c in classes if c is not None)
    shared = sorted(c for c, n in counts.items() if n > 1)
    group = {c: g for g, c in enumerate(shared)}
    return np.array([group.get(c, -1) for c in classes], dtype=np.int64)


# ---------------------------------------------------------------------- expert splits
def _split_nodes(entry: object, where: str) -> list:
    if not isinstance(entry, dict):
        raise ValueError(f'{where} must be an object with a "nodes" list, got {_show(entry)}')
    return _get(entry, "nodes", where, _is_list, "a list of node ids")


def _assign(placement: np.ndarray, bench: BenchmarkGraph, node_id: object, k: int, where: str):
    if not _is_id(node_id):
        raise ValueError(f"{where} must be a node id (an integer), got {_show(node_id)}")
    if k >= bench.max_accelerators:
        raise ValueError(
            f"{where} puts node {node_id} on accelerator {k}, but the graph has "
            f"maxFPGAs {bench.max_accelerators}"
        )
    i = _find(bench.node_ids, node_id)
    if i < 0:
        raise ValueError(f"{where}: node {node_id} is not in the graph")
    if placement[i] >= 0:
        raise ValueError(f"{where}: node {node_id} is already on accelerator {placement[i]}")
    placement[i] = k


def _check_groups(bench: BenchmarkGraph, placement: np.ndarray) -> None:
    groups = _groups(bench.graph)
    first: dict[int, int] = {}
    for v in np.flatnonzero((groups >= 0) & (placement >= 0)).tolist():
        u = first.setdefault(int(groups[v]), v)
        if placement[u] != placement[v]:
            raise ValueError(
                f"nodes {bench.node_ids[u]} and {bench.node_ids[v]} share a colorClass but are "
                f"on accelerators {placement[u]} and {placement[v]}"
            )


def _fill_unplaced(graph: Graph, placement: np.ndarray) -> np.ndarray:
    """Place the ops still at -1 by the rule of `load_expert_split`."""
    groups = _groups(graph)
    device = {int(groups[v]): int(placement[v]) for v in np.flatnonzero(placement >= 0)}
    device.pop(-1, None)
    for v in graph.topological_order.tolist():
        if placement[v] >= 0:
            continue
        parents = graph.parents(v)
        own = int(placement[parents[np.argmax(graph.out_bytes[parents])]]) if parents.size else 0
        group = int(groups[v])
        placement[v] = own if group < 0 else device.setdefault(group, own)
    return placement


def _groups(graph: Graph) -> np.ndarray:
    """[N] int64 co-location group of each op, -1 for none."""
    return graph.colocation if graph.colocation is not None else np.full(graph.n_ops, -1)


# ---------------------------------------------------------------------- field checks
def _get(
    obj: dict,
    key: str,
    where: str,
    check: Callable[[object], bool],
    expected: str,
    default: object = _REQUIRED,
):
    """obj[key] after `check`; `default` when missing or null (required when not given)."""
    prefix = f"{where}: " if where else ""
    if obj.get(key) is None and default is not _REQUIRED:
        return default
    if key not in obj:
        raise ValueError(f'{prefix}missing field "{key}"')
    value = obj[key]
    if not check(value):
        raise ValueError(f'{prefix}"{key}" must be {expected}, got {_show(value)}')
    return value


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_id(x: object) -> bool:
    return _is_int(x) and -(2**63) <= x < 2**63


def _is_flag(x: object) -> bool:
    return isinstance(x, bool) or (_is_int(x) and x in (0, 1))


def _is_amount(x: object) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x) and x >= 0
    except OverflowError:
        return False


def _is_positive(x: object) -> bool:
    return _is_amount(x) and x > 0


def _is_list(x: object) -> bool:
    return isinstance(x, list)


def _is_str(x: object) -> bool:
    return isinstance(x, str)


def _show(x: object) -> str:
    return "null" if x is None else reprlib.repr(x)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr
