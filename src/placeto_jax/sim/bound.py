"""Lower bounds on the makespan of every placement of a graph (host-side NumPy).

`exclusion(graph, cluster, target_us)` asks whether any placement can reach `target_us`, under
the simulator's semantics (docs/simulator.md), every device as fast as the fastest and every bus
as fast as the fastest:
- an op starts after each parent's end plus `delta1` when they share a device, plus the parent's
  transfer (`out_bytes / bandwidth`) when they do not;
- the parents an op shares its device with run one at a time before it, and the children a parent
  shares its device with run one at a time after it (single-machine bounds: by release time, and
  by Jackson's rule on what remains after each);
- the devices share the work: its busy time over the number of devices;
- if a placement reached `target_us`, every edge whose transfer alone would push a path past it
  keeps both ends on one device. Such edges (and co-location classes) tie ops into groups that
  run one at a time, which lengthens the paths; repeated until nothing more is tied.
If some path or group is then longer than `target_us`, no placement reaches it.
`makespan_lower_bound` bisects for the largest target so excluded.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph

ROUNDING = 1e-9  # relative: a bound or path must exceed the target by more to count as above it


@dataclasses.dataclass(frozen=True)
class Exclusion:
    """Whether any placement of a graph on a cluster can reach a target makespan."""

    target_us: float  # µs, the makespan asked about
    excluded: bool  # True: every placement's makespan is above target_us
    bound_us: float  # µs, every placement reaching target_us would take at least this
    tied_edges: int  # edges such a placement must keep on one device (co-location included)
    largest_group_ops: int  # ops that such a placement must run on one device, the most


@dataclasses.dataclass(frozen=True)
class _Times:
    """Per-op times on the fastest device and bus, µs, each [N] float64."""

    duration: np.ndarray  # cost / fastest speed, plus delta1 between an op's kernels
    gap: np.ndarray  # delta1 when the duration is nonzero: the device is busy that long after
    transfer: np.ndarray  # out_bytes / fastest bandwidth


def exclusion(graph: Graph, cluster: Cluster, target_us: float) -> Exclusion:
    """Whether any placement of `graph` on `cluster` can reach `target_us` (module docstring).
    `excluded` is a proof; when it is False the target may still be out of reach."""
    if isinstance(target_us, bool) or not isinstance(target_us, numbers.Real):
        raise ValueError(f"target_us must be a positive number of µs, got {target_us!r}")
    if not (target_us > 0 and not math.isnan(target_us)):
        raise ValueError(f"target_us must be a positive number of µs, got {target_us!r}")
    times = _times(graph, cluster)
    group = _initial_groups(graph, cluster)
    above = target_us * (1 + ROUNDING)
    while True:
        head = _heads(graph, times, group)
        tail = _tails(graph, times, group)
        bound = max(
            _path_bound(times, head, tail),
            _group_bound(times, group, head, tail),
            _load_bound(times, cluster),
        )
        tied = _tied_by(graph, times, group, head, tail, above)
        if bound > above or not tied.any():
            break
        group = _joined(group, graph.edges[tied])
    same = group[graph.edges[:, 0]] == group[graph.edges[:, 1]]
    return Exclusion(
        target_us=float(target_us),
        excluded=bool(bound > above),
        bound_us=float(bound),
        tied_edges=int(same.sum()),
        largest_group_ops=int(np.bincount(group).max()),
    )


def makespan_lower_bound(graph: Graph, cluster: Cluster, rel_tol: float = 1e-3) -> float:
    """µs: no placement of `graph` on `cluster` has a shorter makespan. The largest target that
    `exclusion` excludes, bisected to `rel_tol` between the bound with no edge tied and the
    serial time of every op on the fastest device (an achievable makespan)."""
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol!r}")
    times = _times(graph, cluster)
    low = exclusion(graph, cluster, math.inf).bound_us
    high = float(np.sum(times.duration + times.gap))
    while high - low > rel_tol * high:
        middle = (low + high) / 2
        if exclusion(graph, cluster, middle).excluded:
            low = middle
        else:
            high = middle
    return low


def _times(graph: Graph, cluster: Cluster) -> _Times:
    inner_gaps = np.maximum(graph.kernel_counts - 1, 0) * cluster.delta1
    duration = graph.cost / float(np.max(cluster.speed_array)) + inner_gaps
    return _Times(
        duration=duration,
        gap=np.where(duration > 0, cluster.delta1, 0.0),
        transfer=graph.out_bytes / float(np.max(cluster.bandwidth)),
    )


def _initial_groups(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] int64 group of each op: its co-location class; one group when there is one device."""
    if cluster.n_devices == 1:
        return np.zeros(graph.n_ops, dtype=np.int64)
    return np.unique(graph.colocation_classes, return_inverse=True)[1].astype(np.int64)


def _joined(group: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """`group` with the groups of each pair of ops merged (union-find), renumbered from 0."""
    parent = np.arange(int(group.max()) + 1)

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in pairs:
        parent[root(group[u])] = root(group[v])
    roots = np.array([root(g) for g in group])
    return np.unique(roots, return_inverse=True)[1].astype(np.int64)


def _serial_end(ops: np.ndarray, times: _Times, head: np.ndarray) -> float:
    """µs: when one device is next free after running `ops`, each no earlier than its head
    (by release time, the optimal order for the last end)."""
    free = 0.0
    for u in ops[np.argsort(head[ops], kind="stable")]:
        free = max(free, head[u]) + times.duration[u] + times.gap[u]
    return free


def _serial_span(ops: np.ndarray, times: _Times, tail: np.ndarray, begin: float) -> float:
    """µs: the least time from `begin`'s origin to the end of the step when one device runs
    `ops` from `begin` on, each followed by its tail (Jackson's rule on tail minus gap)."""
    clock, span = begin, 0.0
    for c in ops[np.argsort(times.gap[ops] - tail[ops], kind="stable")]:
        clock += times.duration[c]
        span = max(span, clock + tail[c])
        clock += times.gap[c]
    return span


def _least_over_splits(
    local: np.ndarray, free: np.ndarray, remote: np.ndarray, serial: Callable[[np.ndarray], float]
) -> float:
    """µs: the least, over k, of the longer of `serial` (one device running `local` and the k
    ops of `free` with the largest `remote` times) and the largest `remote` time left over."""
    rank = np.argsort(-remote, kind="stable")
    free, remote = free[rank], remote[rank]
    return min(
        max(serial(np.concatenate([local, free[:k]])), remote[k] if k < free.size else 0.0)
        for k in range(free.size + 1)
    )


def _group_members(group: np.ndarray, packed_rows: np.ndarray, v: int) -> np.ndarray:
    """The ops of row v of a packed reachability matrix that share v's group."""
    reach = np.unpackbits(packed_rows[v], count=group.size).astype(bool)
    return np.flatnonzero(reach & (group == group[v]))


def _heads(graph: Graph, times: _Times, group: np.ndarray) -> np.ndarray:
    """[N] µs: no op starts earlier in any placement that keeps every group on one device."""
    head = np.zeros(graph.n_ops)
    shared = np.bincount(group)[group] > 1
    for v in graph.topological_order:
        parents = graph.parents(v)
        if parents.size == 0:
            continue
        local = parents[group[parents] == group[v]]
        free = parents[group[parents] != group[v]]
        arrival = head[free] + times.duration[free] + times.transfer[free]
        head[v] = _least_over_splits(
            local, free, arrival, functools.partial(_serial_end, times=times, head=head)
        )  # the latest-arriving parents share v's device, the rest send their output
        if shared[v]:
            before = _group_members(group, graph.ancestors_packed, v)
            head[v] = max(head[v], _serial_end(before, times, head))
    return head


def _tails(graph: Graph, times: _Times, group: np.ndarray) -> np.ndarray:
    """[N] µs: in any placement that keeps every group on one device, the step goes on at least
    this long after the op ends."""
    tail = np.zeros(graph.n_ops)
    shared = np.bincount(group)[group] > 1
    for u in graph.topological_order[::-1]:
        children = graph.children(u)
        if children.size == 0:
            continue
        local = children[group[children] == group[u]]
        free = children[group[children] != group[u]]
        rest = times.transfer[u] + times.duration[free] + tail[free]
        tail[u] = _least_over_splits(
            local,
            free,
            rest,
            functools.partial(_serial_span, times=times, tail=tail, begin=times.gap[u]),
        )  # the children with the longest remote paths share u's device, the rest receive
        if shared[u]:
            after = _group_members(group, graph.descendants_packed, u)
            tail[u] = max(tail[u], _serial_span(after, times, tail, times.gap[u]))
    return tail


def _path_bound(times: _Times, head: np.ndarray, tail: np.ndarray) -> float:
    return float(np.max(head + times.duration + tail, initial=0.0))


def _load_bound(times: _Times, cluster: Cluster) -> float:
    """µs: the devices share every op's busy time (each device's last gap not counted)."""
    busy = float(np.sum(times.duration + times.gap)) - cluster.n_devices * cluster.delta1
    return max(busy / cluster.n_devices, 0.0)


def _group_bound(times: _Times, group: np.ndarray, head: np.ndarray, tail: np.ndarray) -> float:
    """µs: each group runs one op at a time, from its earliest head to its shortest tail."""
    busy = np.bincount(group, weights=times.duration + times.gap)
    last_gap = np.zeros(busy.size)
    np.maximum.at(last_gap, group, times.gap)
    first = np.full(busy.size, np.inf)
    np.minimum.at(first, group, head)
    after = np.full(busy.size, np.inf)
    np.minimum.at(after, group, tail)
    return float(np.max(first + busy - last_gap + after, initial=0.0))


def _tied_by(
    graph: Graph,
    times: _Times,
    group: np.ndarray,
    head: np.ndarray,
    tail: np.ndarray,
    above_us: float,
) -> np.ndarray:
    """[E] bool: edges across groups whose transfer would make some path longer than
    `above_us` (so a placement reaching it keeps their ends on one device)."""
    u, v = graph.edges[:, 0], graph.edges[:, 1]
    through = head[u] + times.duration[u] + times.transfer[u] + times.duration[v] + tail[v]
    return (group[u] != group[v]) & (through > above_us)
