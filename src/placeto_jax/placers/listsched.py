"""Memory-aware list schedulers on the simulator's communication model (`Timeline`).

* `heft`: HEFT (Topcuoglu, Hariri, Wu, IEEE TPDS 2002): ops by decreasing upward rank, each to
  the device where it finishes earliest, inserted into idle gaps.
* `critical_path`: CPOP, the critical-path list scheduler of the same paper: the ops of one
  critical path (largest upward + downward rank) all go to the device that runs that path
  fastest; the others, by decreasing priority as they become ready, to their earliest finish.
* `m_etf`: ETF (Hwang, Chow, Anger, Lee, SIAM J. Comput. 1989) as in Baechi (Jeon et al., SoCC
  2020): repeatedly schedule the (ready op, device) pair that can start earliest.
* `m_sct`: SCT (Hanen and Munier 1995) as in Baechi: a linear program picks for each op at most
  one favourite child; ETF then keeps a favourite child on its parent's device.
* `m_topo`: Baechi's m-TOPO: contiguous blocks of the topological order, each device taking a
  share of the compute proportional to its speed, moving on when its memory is full.

"Memory-aware": a device is a candidate only while the `Timeline`'s conservative memory bound
fits; when no device fits, every device is a candidate.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
import scipy.optimize
import scipy.sparse

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.timeline import Schedule, Timeline, downward_rank, upward_rank

ROUNDING_MARGIN = 1e-6  # SCT rounds x_ij < 0.5 - margin to 0 (a favourite child)
# ETF's device rule: (ready ops [R], devices the timeline allows them [R, D] bool, device of
# each committed op [N] (-1 for none)) -> the devices each may take [R, D] bool
Restrict = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def heft(graph: Graph, cluster: Cluster) -> Schedule:
    """HEFT: decreasing upward rank (a topological order), earliest finish, insertion-based."""
    rank = upward_rank(graph, cluster)
    position = _position(graph)
    timeline = Timeline(graph, cluster, insertion=True)
    for v in sorted(range(graph.n_ops), key=lambda v: (-rank[v], position[v])):
        _earliest_finish(timeline, v, timeline.devices(v))
    return timeline.schedule()


def critical_path(graph: Graph, cluster: Cluster) -> Schedule:
    """CPOP: critical-path ops on one device, the rest to their earliest finish (insertion)."""
    priority = upward_rank(graph, cluster) + downward_rank(graph, cluster)
    on_path = _critical_path(graph, priority)
    total = graph.cost[on_path].sum()
    path_device = int(np.argmin(total / cluster.speed_array))  # lowest index on ties
    timeline = Timeline(graph, cluster, insertion=True)
    for v in _priority_order(graph, priority):
        devices = timeline.devices(v)
        if on_path[v] and path_device in devices:
            devices = [path_device]
        _earliest_finish(timeline, v, devices)
    return timeline.schedule()


def m_etf(graph: Graph, cluster: Cluster) -> Schedule:
    """m-ETF: the ready (op, device) pair with the earliest start; ties to the larger upward
    rank, then the lower device and op index."""
    return _etf(graph, cluster, _any_allowed)


def m_sct(graph: Graph, cluster: Cluster) -> Schedule:
    """m-SCT: ETF that puts each op with a favourite parent on that parent's device (when its
    memory allows)."""
    favourite_parent = favourite_parents(graph, cluster)

    def restrict(ops: np.ndarray, allowed: np.ndarray, place: np.ndarray) -> np.ndarray:
        parent = favourite_parent[ops]
        preferred = np.where(parent >= 0, place[parent], -1)  # [R] device, -1 for none
        rows = np.flatnonzero(preferred >= 0)
        rows = rows[allowed[rows, preferred[rows]]]
        allowed[rows] = False
        allowed[rows, preferred[rows]] = True
        return allowed

    return _etf(graph, cluster, restrict)


def m_topo(graph: Graph, cluster: Cluster) -> Schedule:
    """m-TOPO: topological order cut into contiguous per-device blocks of compute proportional
    to device speed; a device that cannot hold the next op is skipped. The estimate schedules
    the resulting placement with ETF."""
    speed = cluster.speed_array
    share = graph.cost.sum() * speed / speed.sum()  # [D] µs of cost (at speed 1) per device
    timeline = Timeline(graph, cluster)
    device, load = 0, 0.0
    for v in graph.topological_order.tolist():
        allowed = timeline.devices(v)
        if timeline.group[v] not in timeline.pinned:
            if load > 0 and load + graph.cost[v] > share[device] and device + 1 < len(share):
                device, load = device + 1, 0.0
            while device not in allowed and device + 1 < len(share):
                device, load = device + 1, 0.0
            load += graph.cost[v]
        timeline.reserve(v, device if device in allowed else allowed[0])
    placement = np.asarray(timeline.place, dtype=np.int64)
    return estimate(graph, cluster, placement)


def estimate(graph: Graph, cluster: Cluster, placement: np.ndarray) -> Schedule:
    """The ETF schedule of a fixed placement: the scheduler-side estimate of its makespan."""
    fixed = np.asarray(placement, dtype=np.int64)

    def restrict(ops: np.ndarray, allowed: np.ndarray, place: np.ndarray) -> np.ndarray:
        allowed[:] = False
        allowed[np.arange(ops.size), fixed[ops]] = True
        return allowed

    return _etf(graph, cluster, restrict)


# ---------------------------------------------------------------------- shared loops
def _earliest_finish(timeline: Timeline, v: int, devices: list[int]) -> None:
    """Commit v on the device of `devices` where it finishes earliest (lowest index on ties)."""
    best = None
    for d in devices:
        start, transfers = timeline.probe(v, d)
        finish = timeline.finish(v, d, start)
        if best is None or finish < best[0]:
            best = (finish, d, start, transfers)
    _, d, start, transfers = best
    timeline.commit(v, d, start, transfers)


def _any_allowed(ops: np.ndarray, allowed: np.ndarray, place: np.ndarray) -> np.ndarray:
    """ETF's own rule: every device the timeline allows."""
    return allowed


def _etf(graph: Graph, cluster: Cluster, restrict: Restrict) -> Schedule:
    """ETF: commit the ready (op, device) pair with the smallest (start, -rank, device, op).

    `restrict` narrows the devices the timeline allows the ready ops. A pair starts at
    max(inputs ready, device free) (ETF does not insert into idle gaps): the first part is cached
    per ready op and device and dropped when a bus of one of the op's parents' devices sends;
    the second is read fresh. The memory bound is kept per ready op and device
    and updated for the committed device only (the only one whose charge changes)."""
    n, n_dev = graph.n_ops, cluster.n_devices
    rank = upward_rank(graph, cluster)
    timeline = Timeline(graph, cluster)
    max_need = np.asarray(timeline.max_need)  # [N] bytes
    group = np.asarray(timeline.group, dtype=np.int64)  # [N] co-location group or -1
    group_pin = np.full(max(int(group.max(initial=0)) + 1, 1), -1, dtype=np.int64)  # [G] device
    place = np.full(n, -1, dtype=np.int64)  # [N] device per committed op
    parent_on = np.zeros((n, n_dev), dtype=bool)  # [N, D] a parent of the op is on the device
    fits = np.zeros((n, n_dev), dtype=bool)  # [N, D] the memory bound fits, ready ops
    inputs = np.full((n, n_dev), np.nan)  # [N, D] µs inputs ready, NaN when not cached
    transfers: dict[tuple[int, int], list] = {}
    waiting = graph.in_degree.copy()
    is_ready = waiting == 0

    def becomes_ready(ops: list[int]) -> None:
        for v in ops:
            parent_on[v, place[timeline.parents[v]]] = True
            fits[v] = [timeline.fits(v, d) for d in range(n_dev)]

    becomes_ready(np.flatnonzero(is_ready).tolist())
    while is_ready.any():
        ops = np.flatnonzero(is_ready)  # [R]
        allowed = restrict(ops, _timeline_allowed(fits[ops], group, group_pin, ops), place)
        for row, d in zip(*np.nonzero(allowed & np.isnan(inputs[ops])), strict=True):
            v = int(ops[row])
            inputs[v, d], transfers[v, d] = timeline.inputs_ready(v, int(d))
        start = np.where(allowed, np.maximum(inputs[ops], timeline.device_free), np.inf)
        tied = start == start.min()
        top_rank = np.where(tied, rank[ops, None], -np.inf)
        tied &= top_rank == top_rank.max()
        d = int(np.flatnonzero(tied.any(axis=0))[0])
        row = int(np.flatnonzero(tied[:, d])[0])
        v = int(ops[row])
        sent = transfers[v, d]
        timeline.commit(v, d, float(start[row, d]), sent)
        place[v] = d
        if group[v] >= 0:
            group_pin[group[v]] = timeline.pinned[group[v]]
        is_ready[v] = False
        ops = np.delete(ops, row)  # the ready ops left, still in index order
        if sent:
            stale = ops[parent_on[ops][:, [bus for _, bus, _, _ in sent]].any(axis=1)]
            inputs[stale] = np.nan
        room = timeline.capacity[d] - timeline.memory[d]
        fits[ops, d] = max_need[ops] <= room
        for w in ops[~fits[ops, d]].tolist():
            fits[w, d] = timeline.fits(w, d)
        children = graph.children(v)
        waiting[children] -= 1
        new = children[waiting[children] == 0]
        is_ready[new] = True
        becomes_ready(new.tolist())
    return timeline.schedule()


def _timeline_allowed(
    fits: np.ndarray, group: np.ndarray, group_pin: np.ndarray, ops: np.ndarray
) -> np.ndarray:
    """[R, D] bool, `Timeline.devices` for the ready ops: the co-location group's device when
    pinned, else the devices whose memory bound fits (every device when none does)."""
    allowed = np.where(fits.any(axis=1, keepdims=True), fits, True)
    pin = np.where(group[ops] >= 0, group_pin[np.maximum(group[ops], 0)], -1)
    rows = np.flatnonzero(pin >= 0)
    allowed[rows] = False
    allowed[rows, pin[rows]] = True
    return allowed


def _priority_order(graph: Graph, priority: np.ndarray) -> list[int]:
    """Ops as a list scheduler takes them: the ready op of largest priority (lowest index on
    ties) first."""
    waiting = graph.in_degree.copy()
    heap = [(-priority[v], v) for v in np.flatnonzero(waiting == 0).tolist()]
    heapq.heapify(heap)
    order = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for c in graph.children(v).tolist():
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(heap, (-priority[c], c))
    return order


def _critical_path(graph: Graph, priority: np.ndarray) -> np.ndarray:
    """[N] bool: CPOP's critical path, from the root of largest priority following the child of
    largest priority (lowest index on ties)."""
    on_path = np.zeros(graph.n_ops, dtype=bool)
    roots = np.flatnonzero(graph.in_degree == 0)
    v = int(roots[np.argmax(priority[roots])])
    while True:
        on_path[v] = True
        kids = graph.children(v)
        if kids.size == 0:
            return on_path
        v = int(kids[np.argmax(priority[kids])])


def _position(graph: Graph) -> np.ndarray:
    position = np.empty(graph.n_ops, dtype=np.int64)
    position[graph.topological_order] = np.arange(graph.n_ops)
    return position


# ---------------------------------------------------------------------- SCT's linear program
def favourite_parents(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] int64: each op's favourite parent (-1 for none) from SCT's linear program, solved
    with HiGHS. Variables: start s_v >= 0 per op, x_e in [0, 1] per edge (0: the consumer runs
    right after the producer on its device), makespan W. Minimise W subject to
        s_j >= s_i + t_i + delta1 + (c_ij - delta1) x_ij   for every edge (i, j)
        sum_j x_ij >= children(i) - 1,  sum_i x_ij >= parents(j) - 1,  W >= s_v + t_v
    with t the mean duration over devices and c_ij = out_bytes[i] / mean bandwidth. An edge with
    x_ij < 0.5 makes j the favourite child of i (at most one per op either way, by the
    constraints; `ROUNDING_MARGIN` keeps ties at 0.5 from making two)."""
    n, e = graph.n_ops, graph.n_edges
    if e == 0:
        return np.full(n, -1, dtype=np.int64)
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    t = graph.cost * (1.0 / cluster.speed_array).mean()
    gap = np.where(graph.cost > 0, cluster.delta1, 0.0)
    comm = graph.out_bytes / cluster.bandwidth_array.mean()
    edge_ids = np.arange(e)
    nodes = np.arange(n)
    # rows 0..e-1: s_i - s_j + (c - gap_i) x_ij <= -(t_i + gap_i)
    rows = [edge_ids, edge_ids, edge_ids]
    cols = [src, dst, n + edge_ids]
    vals = [np.ones(e), -np.ones(e), comm[src] - gap[src]]
    rhs = [-(t[src] + gap[src])]
    # rows e..e+n-1: -sum_j x_ij <= -(children(i) - 1); then the same over parents
    rows += [e + src, e + n + dst]
    cols += [n + edge_ids, n + edge_ids]
    vals += [-np.ones(e), -np.ones(e)]
    rhs += [-np.maximum(graph.out_degree - 1, 0), -np.maximum(graph.in_degree - 1, 0)]
    # rows e+2n..e+3n-1: s_v - W <= -t_v
    rows += [e + 2 * n + nodes, e + 2 * n + nodes]
    cols += [nodes, np.full(n, n + e)]
    vals += [np.ones(n), -np.ones(n)]
    rhs += [-t]
    a_ub = scipy.sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(e + 3 * n, n + e + 1),
    )
    objective = np.zeros(n + e + 1)
    objective[-1] = 1.0
    bounds = [(0, None)] * n + [(0, 1)] * e + [(None, None)]
    result = scipy.optimize.linprog(
        objective, A_ub=a_ub, b_ub=np.concatenate(rhs), bounds=bounds, method="highs"
    )
    if result.status != 0:
        raise RuntimeError(f"SCT's linear program failed: {result.message}")
    favourite = np.full(n, -1, dtype=np.int64)
    chosen = np.flatnonzero(result.x[n : n + e] < 0.5 - ROUNDING_MARGIN)
    favourite[dst[chosen]] = src[chosen]
    return favourite
