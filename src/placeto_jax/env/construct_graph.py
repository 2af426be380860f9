"""Host-side preparation of the constructive placement MDP (`env/construct.py`): an op graph
renumbered in its visiting order and padded into the arrays one compiled rollout reads.

The episode visits the ops in decreasing HEFT upward rank (ties in topological order), which is a
topological order, so that step t places op t of the renumbered graph and every parent of op t
was placed before it. A co-location class is one decision: its first op in that order (its
leader) chooses the device, the later members follow it. Times are divided by `scale` (µs): the
graph's total busy time (cost plus `delta1` per op) spread evenly over the devices.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.timeline import downward_rank, upward_rank
from placeto_jax.sim.api import simulate
from placeto_jax.sim.padded import fine_bucket
from placeto_jax.sim.ranking import fits_memory

N_STATIC = 9  # static node features, `static_features`
MIN_PARENTS = 4  # the parent table is at least this wide


@dataclasses.dataclass(frozen=True)
class ConstructGraph:
    """One op graph in visiting order, padded to `n_pad` ops and `k_pad` parents per op."""

    name: str
    op_index: np.ndarray  # [N] int64: the original op index of visiting position i
    cost: np.ndarray  # [Np] float32 µs at speed 1 (0 on padding)
    out_bytes: np.ndarray  # [Np] float32 bytes
    own_bytes: np.ndarray  # [Np] float32 bytes charged on placing (a class's all at its leader)
    param_bytes: np.ndarray  # [Np] float32 parameter bytes charged on placing (likewise)
    need_bytes: np.ndarray  # [Np] float32 bytes live while the op runs: its output and every
    #                         input (a class's largest at its leader)
    parents: np.ndarray  # [Np, K] int32 visiting positions of the parents (0 on padding)
    parent_mask: np.ndarray  # [Np, K] bool
    n_children: np.ndarray  # [Np] int32 consumers of each op's output (0 on padding)
    leader: np.ndarray  # [Np] int32 position of the op that decides this op's device
    real: np.ndarray  # [Np] bool, false on padding
    static: np.ndarray  # [Np, N_STATIC] float32 static node features
    senders: np.ndarray  # [Ep] int32 edge producers (positions)
    receivers: np.ndarray  # [Ep] int32 edge consumers (positions)
    edge_mask: np.ndarray  # [Ep] bool
    hint: np.ndarray  # [Np] int32 a declared start's device per position, -1 where none
    hint_fits: bool  # the hint fits every device's memory by exact simulation (False: none)
    reserve: bool  # each device keeps room for the parameters the hint puts on it later
    scale: float  # µs: (sum of cost + delta1 per op) / D

    @property
    def n_ops(self) -> int:
        return int(self.op_index.size)

    def placement(self, by_position: np.ndarray) -> np.ndarray:
        """[N] int64 device per original op from a device per visiting position [>= N]."""
        out = np.empty(self.n_ops, dtype=np.int64)
        out[self.op_index] = np.asarray(by_position)[: self.n_ops]
        return out

    def by_position(self, placement: np.ndarray) -> np.ndarray:
        """[Np] int32 device per visiting position from a device per original op [N]."""
        out = np.zeros(self.cost.size, dtype=np.int32)
        out[: self.n_ops] = np.asarray(placement)[self.op_index]
        return out


def visiting_order(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] ops by decreasing upward rank, ties by topological position: a topological order."""
    rank = upward_rank(graph, cluster)
    position = np.empty(graph.n_ops, dtype=np.int64)
    position[graph.topological_order] = np.arange(graph.n_ops)
    return np.lexsort((position, -rank))


@dataclasses.dataclass(frozen=True)
class Padding:
    """Array sizes shared by graphs that run in one compiled program."""

    n_pad: int  # positions
    k_pad: int  # parents per op
    e_pad: int  # edges

    @classmethod
    def covering(cls, graphs: list[Graph]) -> Padding:
        """The smallest padding that holds every graph of `graphs`."""
        return cls(
            n_pad=max(fine_bucket(g.n_ops) for g in graphs),
            k_pad=max(max(MIN_PARENTS, int(_in_degree(g).max(initial=0))) for g in graphs),
            e_pad=max(fine_bucket(max(1, len(g.edges))) for g in graphs),
        )


def _in_degree(graph: Graph) -> np.ndarray:
    return np.bincount(graph.edges[:, 1], minlength=graph.n_ops)


def build(
    name: str,
    graph: Graph,
    cluster: Cluster,
    pad: Padding | None = None,
    hint: np.ndarray | None = None,
    reserve: bool = True,
) -> ConstructGraph:
    """`graph` as a `ConstructGraph` (module docstring), padded to `pad` (default: its own
    `Padding.covering`); `hint` [N] a placement every op observes (devices renamed in order
    of first use on a homogeneous cluster), or none; `reserve`: the mask keeps room for the
    hint's later parameters on each device (`env.construct`)."""
    n = graph.n_ops
    order = visiting_order(graph, cluster)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    pad = Padding.covering([graph]) if pad is None else pad
    n_pad, k_pad = pad.n_pad, pad.k_pad
    src, dst = position[graph.edges[:, 0]], position[graph.edges[:, 1]]
    if np.any(src >= dst):
        raise AssertionError("the visiting order is not topological")  # upward rank guarantees it
    if n_pad < n or k_pad < _in_degree(graph).max(initial=0) or pad.e_pad < dst.size:
        raise ValueError(f"{name}: {n} ops, {dst.size} edges exceed the padding {pad}")
    parents = np.zeros((n_pad, k_pad), dtype=np.int32)
    mask = np.zeros((n_pad, k_pad), dtype=bool)
    by_dst = np.lexsort((src, dst))
    slot = np.arange(dst.size) - np.searchsorted(dst[by_dst], dst[by_dst])
    parents[dst[by_dst], slot] = src[by_dst]
    mask[dst[by_dst], slot] = True
    senders, receivers = np.zeros(pad.e_pad, np.int32), np.zeros(pad.e_pad, np.int32)
    senders[: src.size], receivers[: dst.size] = src, dst
    edge_mask = np.arange(pad.e_pad) < dst.size
    scale = float(graph.cost.sum() / cluster.speed_array.mean() + cluster.delta1 * n)
    scale /= cluster.n_devices
    return ConstructGraph(
        name=name,
        op_index=order,
        cost=_padded(graph.cost[order], n_pad),
        out_bytes=_padded(graph.out_bytes[order], n_pad),
        own_bytes=_padded(_charged(graph.param_bytes + graph.out_bytes, graph, order), n_pad),
        param_bytes=_padded(_charged(graph.param_bytes, graph, order), n_pad),
        need_bytes=_padded(_charged(_live_bytes(graph), graph, order, np.maximum), n_pad),
        parents=parents,
        parent_mask=mask,
        n_children=_padded(np.bincount(src, minlength=n), n_pad).astype(np.int32),
        leader=_leaders(graph, order, n_pad),
        real=np.arange(n_pad) < n,
        static=_padded(static_features(graph, cluster, order), n_pad),
        senders=senders,
        receivers=receivers,
        edge_mask=edge_mask,
        hint=_hint(hint, order, n_pad, cluster),
        hint_fits=hint is not None and _fits(graph, cluster, np.asarray(hint)),
        reserve=reserve,
        scale=max(scale, 1e-9),
    )


def _hint(hint: np.ndarray | None, order: np.ndarray, n_pad: int, cluster: Cluster):
    out = np.full(n_pad, -1, dtype=np.int32)
    if hint is not None:
        out[: order.size] = in_label_order(np.asarray(hint)[order], cluster)
    return out


def _fits(graph: Graph, cluster: Cluster, placement: np.ndarray) -> bool:
    """Whether `placement` fits every device's memory (one exact simulation)."""
    return bool(fits_memory(simulate(graph, cluster, placement).peak_memory[None], cluster)[0])


def in_label_order(by_position: np.ndarray, cluster: Cluster) -> np.ndarray:
    """Devices by position renamed in order of first use on a homogeneous cluster (the labels a
    device-equivariant policy can produce), as they are otherwise."""
    return first_use_labels(by_position) if homogeneous(cluster) else by_position


def homogeneous(cluster: Cluster) -> bool:
    """Every device alike: renaming devices changes no makespan."""
    return all(
        len(set(a.tolist())) == 1
        for a in (cluster.speed_array, cluster.memory_array, cluster.bandwidth_array)
    )


def first_use_labels(by_position: np.ndarray) -> np.ndarray:
    """Devices renamed 0, 1, ... in order of first appearance along the positions."""
    mapping, out = {}, np.empty_like(by_position)
    for i, d in enumerate(by_position.tolist()):
        out[i] = mapping.setdefault(d, len(mapping))
    return out


def _padded(values: np.ndarray, n_pad: int) -> np.ndarray:
    out = np.zeros((n_pad, *values.shape[1:]), dtype=np.float32)
    out[: values.shape[0]] = values
    return out


def _charged(per_op: np.ndarray, graph: Graph, order: np.ndarray, combine=np.add) -> np.ndarray:
    """[N] bytes charged at each visiting position: `per_op` [N] (by op index) of the op, a
    class's members combined (`combine`: summed, or their largest) at its leader, later members
    0, as the list schedulers' memory bound charges them."""
    own = np.asarray(per_op, np.float64)[order]
    if graph.colocation is None:
        return own
    classes = graph.colocation[order]
    out = np.where(classes >= 0, 0.0, own)
    grouped = np.flatnonzero(classes >= 0)
    ids, first = np.unique(classes[grouped], return_index=True)
    totals = np.zeros(ids.size)
    combine.at(totals, np.searchsorted(ids, classes[grouped]), own[grouped])
    out[grouped[first]] = totals
    return out


def _live_bytes(graph: Graph) -> np.ndarray:
    """[N] bytes on an op's device while it runs, wherever it is placed: its output (allocated
    when it starts) and each input (the producer's output or its copy, freed after it ends)."""
    inputs = np.zeros(graph.n_ops)
    np.add.at(inputs, graph.edges[:, 1], graph.out_bytes[graph.edges[:, 0]])
    return graph.out_bytes + inputs


def _leaders(graph: Graph, order: np.ndarray, n_pad: int) -> np.ndarray:
    """[Np] int32: each position's class leader (its first member in visiting order), itself
    for an op without a class and for padding."""
    leader = np.arange(n_pad, dtype=np.int32)
    if graph.colocation is None:
        return leader
    classes = graph.colocation[order]
    grouped = np.flatnonzero(classes >= 0)
    ids, first = np.unique(classes[grouped], return_index=True)
    leader[grouped] = grouped[first][np.searchsorted(ids, classes[grouped])]
    return leader


def static_features(graph: Graph, cluster: Cluster, order: np.ndarray) -> np.ndarray:
    """[N, N_STATIC] per op in visiting order: log cost and log output bytes relative to the
    graph's mean, log parameter bytes relative to the output mean, upward and downward rank
    over the critical path, in- and out-degree (log), position in the order, class flag."""
    cost, out = graph.cost[order], graph.out_bytes[order]
    up = upward_rank(graph, cluster)[order]
    down = downward_rank(graph, cluster)[order]
    critical = max(float((up + down).max(initial=0.0)), 1e-9)
    n = graph.n_ops
    in_degree = np.bincount(graph.edges[:, 1], minlength=n)[order]
    out_degree = np.bincount(graph.edges[:, 0], minlength=n)[order]
    classes = np.full(n, -1) if graph.colocation is None else graph.colocation[order]
    return np.stack(
        [
            np.log1p(cost / max(cost.mean(), 1e-9)),
            np.log1p(out / max(out.mean(), 1e-9)),
            np.log1p(graph.param_bytes[order] / max(out.mean(), 1e-9)),
            up / critical,
            down / critical,
            np.log1p(in_degree),
            np.log1p(out_degree),
            np.arange(n) / max(n - 1, 1),
            (classes >= 0).astype(np.float64),
        ],
        axis=1,
    )
