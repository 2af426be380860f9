"""The list schedulers' model of the simulator: device timelines, outgoing buses, memory.

`Timeline` is the mutable host-side state a list scheduler builds one op at a time. It uses the
simulator's communication model (docs/simulator.md): op v on device d runs `cost[v] / speed[d]`
µs and keeps d busy `delta1` longer (when that is nonzero); v's output reaches another device
through one transfer on the outgoing bus of v's device, `out_bytes[v] / bandwidth` µs, after
which that bus stays busy `delta2`; with `broadcast` one transfer serves every remote device.

Where it differs from the simulator (so the estimate can differ; docs/baselines.md):
* a bus sends in the order transfers are *committed* (when the first remote consumer is
  scheduled), the simulator in the order the producing ops *started*;
* a device runs its ops in the order the scheduler commits them (or inserts them into idle gaps),
  the simulator starts the ready op with the smallest ready time whenever the device is idle.

Memory is a conservative bound: a device is charged the parameters and outputs of every op on it
and one copy of every remote input, never freed, so a schedule that fits this bound fits the
simulator's peak memory.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph

Transfer = tuple[int, int, float, float]  # (op, bus device, start µs, arrival µs)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A list scheduler's placement with its own start/end estimate."""

    placement: np.ndarray  # [N] int64 device per op
    start: np.ndarray  # [N] µs, estimated
    end: np.ndarray  # [N] µs, estimated
    overflowing: int = 0  # ops placed where they did not fit the memory bound (no device had room)

    @property
    def makespan(self) -> float:  # µs, the scheduler's estimate
        return float(self.end.max())


class Timeline:
    """Partial schedule: which ops are placed where and when, bus and memory state."""

    def __init__(self, graph: Graph, cluster: Cluster, insertion: bool = False) -> None:
        n, n_dev = graph.n_ops, cluster.n_devices
        self.n_devices = n_dev
        self.insertion = insertion
        self.broadcast = cluster.broadcast
        self.delta1, self.delta2 = cluster.delta1, cluster.delta2
        self.parents = [graph.parents(v).tolist() for v in range(n)]
        self.out_bytes = graph.out_bytes.tolist()
        self.duration = (graph.cost[:, None] / cluster.speed_array[None, :]).tolist()  # [N][D]
        self.bandwidth = list(cluster.bandwidth)
        self.capacity = list(cluster.memory)
        self.own_memory = _own_memory(graph)
        self.max_need = [  # bytes, memory_need when every input is a new remote copy
            own + sum(self.out_bytes[u] for u in ps)
            for own, ps in zip(self.own_memory, self.parents, strict=True)
        ]
        self.group = [-1] * n if graph.colocation is None else graph.colocation.tolist()
        self.pinned: dict[int, int] = {}  # co-location group -> device
        self.place = [-1] * n
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.device_free = [0.0] * n_dev  # µs, without insertion
        self.busy_starts: list[list[float]] = [[] for _ in range(n_dev)]  # with insertion
        self.busy_ends: list[list[float]] = [[] for _ in range(n_dev)]
        self.bus_free = [0.0] * n_dev
        self.arrival: dict[tuple[int, int], float] = {}  # (op, device or -1 broadcast) -> µs
        self.copies: set[tuple[int, int]] = set()  # (op, device) holding a copy of its output
        self.memory = [0.0] * n_dev  # bytes charged so far
        self.overflowing = 0  # ops reserved on a device without room for them

    # ------------------------------------------------------------------ queries
    def devices(self, v: int) -> list[int]:
        """Devices v may go to: its co-location group's device if pinned, else those with memory
        for it (every device when none has)."""
        pinned = self.pinned.get(self.group[v])
        if pinned is not None:
            return [pinned]
        fits = [d for d in range(self.n_devices) if self.fits(v, d)]
        return fits or list(range(self.n_devices))

    def fits(self, v: int, d: int) -> bool:
        room = self.capacity[d] - self.memory[d]
        return self.max_need[v] <= room or self.memory_need(v, d) <= room

    def memory_need(self, v: int, d: int) -> float:
        """Bytes charged to d if v goes there: its own share plus new copies of remote inputs."""
        need = self.own_memory[v]
        for u in self.parents[v]:
            if self.place[u] != d and (u, d) not in self.copies:
                need += self.out_bytes[u]
        return need

    def probe(self, v: int, d: int) -> tuple[float, list[Transfer]]:
        """(start µs, new transfers) if v were scheduled on d now; parents must be placed."""
        ready, transfers = self.inputs_ready(v, d)
        return self._device_start(d, ready, self.duration[v][d]), transfers

    def inputs_ready(self, v: int, d: int) -> tuple[float, list[Transfer]]:
        """(µs when v's last input would be on d, new transfers) if v were scheduled on d now.
        Changes only when a bus of one of v's parents' devices sends (parents placed)."""
        ready = 0.0
        pending: dict[int, list[int]] = {}
        for u in self.parents[v]:
            bus = self.place[u]
            if bus == d:
                ready = max(ready, self.end[u])
                continue
            known = self._known_arrival(u, d)
            if known is None:
                pending.setdefault(bus, []).append(u)
            else:
                ready = max(ready, known)
        transfers: list[Transfer] = []
        for bus, ops in pending.items():
            free = self.bus_free[bus]
            for u in sorted(ops, key=lambda u: (self.start[u], u)):
                begin = max(free, self.end[u])
                arrive = begin + self.out_bytes[u] / self.bandwidth[bus]
                free = arrive + self.delta2
                transfers.append((u, bus, begin, arrive))
                ready = max(ready, arrive)
        return ready, transfers

    def finish(self, v: int, d: int, start: float) -> float:
        return start + self.duration[v][d]

    def _known_arrival(self, u: int, d: int) -> float | None:
        if self.broadcast:
            return self.arrival.get((u, -1))
        return self.arrival.get((u, d))

    def _device_start(self, d: int, ready: float, duration: float) -> float:
        """µs when d can start a job of `duration` µs whose inputs are there at `ready`."""
        if not self.insertion:
            return max(ready, self.device_free[d])
        busy = duration + (self.delta1 if duration > 0 else 0.0)
        starts, ends = self.busy_starts[d], self.busy_ends[d]
        i = bisect.bisect_right(ends, ready)  # ends are sorted too: intervals do not overlap
        t = ready if i == 0 else max(ready, ends[i - 1])
        while i < len(starts):
            if t + busy <= starts[i] and (busy > 0 or t < starts[i]):
                return t
            t = max(t, ends[i])
            i += 1
        return t

    # ------------------------------------------------------------------ update
    def commit(self, v: int, d: int, start: float, transfers: list[Transfer]) -> None:
        """Schedule v on d at `start` with the transfers `probe` returned."""
        self.reserve(v, d)
        for u, bus, _, arrive in transfers:
            self.bus_free[bus] = arrive + self.delta2
            self.arrival[(u, -1 if self.broadcast else d)] = arrive
        duration = self.duration[v][d]
        end = start + duration
        self.start[v], self.end[v] = start, end
        free = end + self.delta1 if duration > 0 else end
        if self.insertion:
            i = bisect.bisect_right(self.busy_starts[d], start)
            self.busy_starts[d].insert(i, start)
            self.busy_ends[d].insert(i, free)
        else:
            self.device_free[d] = max(self.device_free[d], free)

    def reserve(self, v: int, d: int) -> None:
        """Place v on d without timing it: memory, input copies, co-location pin."""
        self.overflowing += not self.fits(v, d)
        self.memory[d] += self.memory_need(v, d)
        self.copies.update((u, d) for u in self.parents[v] if self.place[u] != d)
        self.place[v] = d
        if self.group[v] >= 0:
            self.pinned.setdefault(self.group[v], d)

    def schedule(self) -> Schedule:
        return Schedule(
            placement=np.asarray(self.place, dtype=np.int64),
            start=np.asarray(self.start),
            end=np.asarray(self.end),
            overflowing=self.overflowing,
        )


def _own_memory(graph: Graph) -> list[float]:
    """[N] bytes charged when an op is placed: its parameters and output, or, for the first op
    of a co-location group in topological order, the whole group's (later members are free)."""
    own = graph.param_bytes + graph.out_bytes
    if graph.colocation is None:
        return own.tolist()
    order = graph.topological_order
    groups = graph.colocation[order]
    out = own.copy()
    grouped = order[groups >= 0]
    ids, first = np.unique(graph.colocation[grouped], return_index=True)
    totals = np.zeros(ids.size)
    np.add.at(totals, np.searchsorted(ids, graph.colocation[grouped]), own[grouped])
    out[grouped] = 0.0
    out[grouped[first]] = totals
    return out.tolist()


def upward_rank(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] µs, HEFT's upward rank: mean duration over devices (plus delta1 when nonzero) plus the
    largest (mean transfer time + rank) over consumers; the longest remaining path from v."""
    mean = _mean_busy(graph, cluster)
    comm = graph.out_bytes / cluster.bandwidth_array.mean()
    rank = np.zeros(graph.n_ops)
    for v in graph.topological_order[::-1]:
        kids = graph.children(v)
        rank[v] = mean[v] + (comm[v] + rank[kids].max() if kids.size else 0.0)
    return rank


def downward_rank(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] µs, the longest path from a root to v's start (mean durations and transfer times)."""
    mean = _mean_busy(graph, cluster)
    comm = graph.out_bytes / cluster.bandwidth_array.mean()
    rank = np.zeros(graph.n_ops)
    for v in graph.topological_order:
        ps = graph.parents(v)
        if ps.size:
            rank[v] = (rank[ps] + mean[ps] + comm[ps]).max()
    return rank


def _mean_busy(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] µs: mean over devices of the op's duration, plus delta1 for ops of nonzero cost."""
    mean = graph.cost * (1.0 / cluster.speed_array).mean()
    return mean + np.where(graph.cost > 0, cluster.delta1, 0.0)
