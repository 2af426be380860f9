"""Host side (NumPy) of the environment: a bank of graphs padded to one static size bucket.

Every graph of a bank shares the same padded shapes, so one compiled environment and policy
serve them all; `env.core.DeviceBank.of(bank)` moves the arrays to the device.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.grouping import Grouping, group
from placeto_jax.sim.padded import PaddedGraph, bucket, fine_bucket, stack_padded


@dataclasses.dataclass(frozen=True)
class Start:
    """A placement that episodes start from (`env.initial_placement="given"`, env/start.py)."""

    name: str  # where it came from: a heuristic's name, "single", a file's path
    placement: np.ndarray  # [N] int64 device per node of the grouped graph (ties kept)
    evaluations: int = 0  # simulations run to find it not counted elsewhere


@dataclasses.dataclass(frozen=True)
class PlacementGraph:
    """A graph as the agent places it: `graph` (grouped) and, when it was coarsened, the op graph
    and the op-to-group map that expands a placement of `graph` onto the ops; `start`: where
    its episodes start in improve mode (`env.start.with_start`)."""

    name: str
    graph: Graph
    op_graph: Graph | None = None
    op_to_group: np.ndarray | None = None  # [N_ops] int64 node of `graph` holding each op
    start: Start | None = None

    @property
    def n_units(self) -> int:
        """Decisions per pass: the nodes of `graph`, tied nodes counted once."""
        return int(self.graph.colocation_classes.max()) + 1

    def expand(self, placement: np.ndarray) -> np.ndarray:
        """[N_ops] device per op of the op graph (the placement itself if not coarsened)."""
        placement = np.asarray(placement)
        return placement if self.op_to_group is None else placement[self.op_to_group]


def prepare(
    name: str, graph: Graph, group_target: int = 0, op_overhead_us: float = 0.0
) -> PlacementGraph:
    """Coarsen `graph` to at most `group_target` nodes (0: keep every op), always merging
    co-located ops where that keeps a DAG; the pieces of a class that cannot be one node stay
    tied (the grouped graph's `colocation`), and the agent places them with one decision.

    A group of k ops runs as k kernels, each followed by the cluster's per-op overhead (its
    `delta1`); the group pays the k - 1 overheads inside it in its cost (`op_overhead_us` each),
    so that the grouped graph on one device takes exactly as long as the op graph."""
    colocated = graph.colocation is not None and len(np.unique(graph.colocation)) < graph.n_ops
    if not group_target and not colocated:
        return PlacementGraph(name, graph)
    grouping: Grouping = group(graph, target=group_target or None)
    if grouping.n_groups == graph.n_ops:
        return PlacementGraph(name, graph)
    op_to_group = np.asarray(grouping.op_to_group)
    inside = np.bincount(op_to_group, minlength=grouping.n_groups) - 1
    grouped = dataclasses.replace(
        grouping.graph, cost=grouping.graph.cost + inside * op_overhead_us
    )
    return PlacementGraph(name, grouped, graph, op_to_group)


@dataclasses.dataclass(frozen=True)
class Bank:
    """G graphs padded to N nodes; array fields are NumPy, stacked over graphs."""

    names: tuple[str, ...]  # [G]
    graphs: tuple[PlacementGraph, ...]  # [G]
    sim: PaddedGraph  # fields stacked: [G, ...], the graph the agent places
    op_sim: PaddedGraph | None  # fields stacked over the op graphs, when present for all
    op_to_group: np.ndarray | None  # [G, N_ops_pad] int32 node per op (0 for padding ops)
    cost: np.ndarray  # [G, N] float µs
    out_bytes: np.ndarray  # [G, N] float bytes
    memory: np.ndarray  # [G, N] float bytes, parameters + output
    unit: np.ndarray  # [G, N] int32 decision unit of each node (padding node i: unit i)
    n_units: np.ndarray  # [G] int32 decision units (the agent's steps per pass)
    order: np.ndarray  # [G, N] int32 units in topological order of their first node, then the
    #                    ids n_units..N-1 (unit ids of padding nodes, or of no node)
    senders: np.ndarray  # [G, E] int32 producer of each edge (0 for padding edges)
    receivers: np.ndarray  # [G, E] int32 consumer
    edge_mask: np.ndarray  # [G, E] bool, real edges
    depth: np.ndarray  # [G, N] int32 longest path from a source (0 for padding nodes)
    height: np.ndarray  # [G, N] int32 longest path to a sink (0 for padding nodes)
    ancestors: np.ndarray  # [G, N, N/8] uint8 packed, row u: the nodes outside unit u that
    #                        reach one of its nodes (NumPy `packbits` order)
    descendants: np.ndarray  # [G, N, N/8] uint8 packed, row u: the nodes outside unit u that
    #                          one of its nodes reaches
    start: np.ndarray | None = None  # [G, N] int32 device per node of each graph's `Start`
    #                                  (0 for padding nodes), when every graph has one
    seed: np.ndarray | None = None  # [G] uint32 from each graph's content digest: its greedy
    #                                 episode's random start, whatever else the bank holds

    @property
    def n_graphs(self) -> int:
        return len(self.names)

    @property
    def n_pad(self) -> int:
        return int(self.cost.shape[1])

    @property
    def n_nodes(self) -> np.ndarray:  # [G] int
        return np.asarray(self.sim.n_ops)

    @property
    def max_level(self) -> int:
        """Deepest depth or height over the bank (levels of the "sweep" message passing)."""
        return int(max(self.depth.max(), self.height.max()))


def choose_bucket(n_nodes: int, buckets: tuple[int, ...] | None) -> int:
    """The smallest bucket holding `n_nodes` (None: the power of two); ValueError if none does."""
    if buckets is None:
        return bucket(n_nodes)
    fitting = [b for b in sorted(buckets) if b >= n_nodes]
    if not fitting:
        raise ValueError(
            f"a graph of {n_nodes} nodes is larger than every bucket (largest {max(buckets)}); "
            f"coarsen it (--set run.group_target=N) or add a bucket (--set run.buckets=...)"
        )
    return fitting[0]


def build_bank(graphs: list[PlacementGraph], buckets: tuple[int, ...] | None = None) -> Bank:
    """Pad `graphs` to one shared shape: the smallest bucket holding the largest graph."""
    if not graphs:
        raise ValueError("a bank needs at least one graph")
    largest = max(graphs, key=lambda p: p.graph.n_ops)
    n_pad = choose_bucket(largest.graph.n_ops, buckets)
    sim = stack_padded([p.graph for p in graphs], n_pad)
    # Op graphs once any graph was coarsened; one too small to coarsen is its own op graph.
    with_ops = any(p.op_graph is not None for p in graphs)
    op_sim = stack_padded([p.op_graph or p.graph for p in graphs], None) if with_ops else None
    op_to_group = None
    if with_ops:
        op_to_group = np.zeros((len(graphs), op_sim.cost.shape[1]), dtype=np.int32)
        for i, p in enumerate(graphs):
            ops = p.op_to_group if p.op_to_group is not None else np.arange(p.graph.n_ops)
            op_to_group[i, : ops.size] = ops
    # The policy's time is mostly per edge value (docs/agent.md): a finer bucket than for nodes.
    n_edges = fine_bucket(max(p.graph.n_edges for p in graphs))
    per_graph = [_graph_arrays(p.graph, n_pad, n_edges) for p in graphs]
    stacked = {k: np.stack([a[k] for a in per_graph]) for k in per_graph[0]}
    if all(p.start is not None for p in graphs):
        stacked["start"] = np.zeros((len(graphs), n_pad), dtype=np.int32)
        for i, p in enumerate(graphs):
            stacked["start"][i, : p.graph.n_ops] = p.start.placement
    return Bank(
        names=tuple(p.name for p in graphs),
        graphs=tuple(graphs),
        sim=sim,
        op_sim=op_sim,
        op_to_group=op_to_group,
        **stacked,
        seed=np.array([int(p.graph.digest[:8], 16) for p in graphs], dtype=np.uint32),
    )


def _graph_arrays(graph: Graph, n_pad: int, n_edges: int) -> dict[str, np.ndarray]:
    n = graph.n_ops

    def pad(values: np.ndarray, dtype) -> np.ndarray:
        out = np.zeros(n_pad, dtype=dtype)
        out[:n] = values
        return out

    unit = graph.colocation_classes  # nodes tied by co-location: one decision
    n_units = int(unit.max()) + 1
    first_seen = np.unique(unit[graph.topological_order], return_index=True)[1]
    unit_order = unit[graph.topological_order][np.sort(first_seen)]
    order = np.concatenate([unit_order, np.arange(n_units, n_pad)]).astype(np.int32)
    senders = np.zeros(n_edges, dtype=np.int32)
    receivers = np.zeros(n_edges, dtype=np.int32)
    senders[: graph.n_edges] = graph.edges[:, 0]
    receivers[: graph.n_edges] = graph.edges[:, 1]
    return {
        "cost": pad(graph.cost, np.float64),
        "out_bytes": pad(graph.out_bytes, np.float64),
        "memory": pad(graph.param_bytes + graph.out_bytes, np.float64),
        "unit": np.concatenate([unit, np.arange(n, n_pad)]).astype(np.int32),
        "n_units": np.int32(n_units),
        "order": order,
        "senders": senders,
        "receivers": receivers,
        "edge_mask": np.arange(n_edges) < graph.n_edges,
        "depth": pad(graph.depth, np.int32),
        "height": pad(_height(graph), np.int32),
        "ancestors": _pad_packed(_unit_rows(graph.ancestors_packed, unit), n_pad),
        "descendants": _pad_packed(_unit_rows(graph.descendants_packed, unit), n_pad),
    }


def _unit_rows(rows: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """[U, ceil(N/8)] packed rows per unit from per-node rows [N, ceil(N/8)]: the union over the
    unit's nodes, without the unit's own nodes (which may reach each other)."""
    n_units = int(unit.max()) + 1
    if n_units == unit.size:
        return rows
    n = unit.size
    dense = np.unpackbits(rows, axis=1, count=n).astype(bool)
    out = np.zeros((n_units, n), dtype=bool)
    np.logical_or.at(out, unit, dense)
    out[unit, np.arange(n)] = False
    return np.packbits(out, axis=1)


def _height(graph: Graph) -> np.ndarray:
    """[N] longest path (in edges) from each node to a sink."""
    height = np.zeros(graph.n_ops, dtype=np.int64)
    for v in graph.topological_order[::-1]:
        kids = graph.children(v)
        if kids.size:
            height[v] = height[kids].max() + 1
    return height


def _pad_packed(rows: np.ndarray, n_pad: int) -> np.ndarray:
    out = np.zeros((n_pad, n_pad // 8), dtype=np.uint8)
    out[: rows.shape[0], : rows.shape[1]] = rows
    return out
