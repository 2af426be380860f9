"""Plain-Python discrete-event reference simulator, written from the spec (docs/simulator.md).

It is deliberately a different algorithm from the JAX simulator: an event heap processed instant by
instant, in rounds (all completions and arrivals at the current instant are applied, then every
idle device and bus chooses its next work; work that finishes at the same instant is applied in
the next round). The tests compare the two to the last bit under float64.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.result import SimResult
from placeto_jax.sim.validate import check_simulation

_COMPLETE, _ARRIVE, _WAKE = 0, 1, 2


def simulate_reference(
    graph: Graph, cluster: Cluster, placement, *, allow_split: bool = False
) -> SimResult:
    """Simulate one placement ([N] ints in [0, D)) event by event. Returns NumPy float64.
    Arguments are checked as `simulate` checks them."""
    placement = check_simulation(graph, cluster, placement, allow_split)
    if placement.ndim == 2:
        results = [simulate_reference(graph, cluster, p, allow_split=True) for p in placement]
        return SimResult(*(np.stack(x) for x in zip(*(_fields(r) for r in results), strict=True)))
    return _simulate_one(graph, cluster, [int(d) for d in placement])


def _fields(result: SimResult) -> tuple:
    return (
        result.makespan,
        result.start,
        result.end,
        result.peak_memory,
        result.transfer_start,
        result.arrival,
    )


def _simulate_one(graph: Graph, cluster: Cluster, place: list[int]) -> SimResult:
    n, n_dev = graph.n_ops, cluster.n_devices
    children = [[int(c) for c in graph.children(v)] for v in range(n)]
    n_parents = [int(k) for k in graph.in_degree]
    speed, bandwidth = cluster.speed, cluster.bandwidth
    cost, out_bytes = graph.cost.tolist(), graph.out_bytes.tolist()
    inner = (graph.kernel_counts - 1).clip(min=0).tolist()
    duration = [cost[v] / speed[place[v]] + inner[v] * cluster.delta1 for v in range(n)]
    remote_devices = [sorted({place[c] for c in children[v]} - {place[v]}) for v in range(n)]

    missing_inputs = list(n_parents)  # parents whose data is not yet on v's device
    ready_time = [0.0] * n
    ready: list[list[int]] = [[] for _ in range(n_dev)]  # data complete, not started
    for v in range(n):
        if n_parents[v] == 0:
            ready[place[v]].append(v)
    running: list[int | None] = [None] * n_dev
    device_free_at = [0.0] * n_dev
    bus_queue: list[deque] = [deque() for _ in range(n_dev)]  # (op, destination devices)
    bus_busy = [False] * n_dev
    bus_free_at = [0.0] * n_dev
    ended = [False] * n
    start = [0.0] * n
    end = [0.0] * n
    xfer_start = [[float("nan")] * n_dev for _ in range(n)]
    arrival = [[float("nan")] * n_dev for _ in range(n)]
    events: list[tuple] = []
    seq = 0
    now = 0.0

    def push(time: float, kind: int, *payload) -> None:
        nonlocal seq
        heapq.heappush(events, (time, seq, kind, payload))
        seq += 1

    def data_available(c: int, time: float) -> None:
        missing_inputs[c] -= 1
        if missing_inputs[c] == 0:
            ready_time[c] = time
            ready[place[c]].append(c)

    n_started = 0
    while True:
        # Choose: every idle device starts its ready op with the smallest (ready time, index).
        for d in range(n_dev):
            if running[d] is None and device_free_at[d] <= now and ready[d]:
                v = min(ready[d], key=lambda u: (ready_time[u], u))
                ready[d].remove(v)
                running[d] = v
                start[v] = now
                end[v] = now + duration[v]
                n_started += 1
                push(end[v], _COMPLETE, v)
        # Choose: every free bus starts its first queued transfer once that op has ended.
        for d in range(n_dev):
            if not bus_busy[d] and bus_free_at[d] <= now and bus_queue[d]:
                v, dests = bus_queue[d][0]
                if ended[v]:
                    bus_queue[d].popleft()
                    bus_busy[d] = True
                    done = now + out_bytes[v] / bandwidth[d]
                    for dest in dests:
                        xfer_start[v][dest] = now
                        arrival[v][dest] = done
                    push(done, _ARRIVE, v, d, dests)
        if not events:
            break
        # Apply every event of the next instant (which may be this one: a later round).
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, kind, payload = heapq.heappop(events)
            if kind == _COMPLETE:
                (v,) = payload
                d = place[v]
                ended[v] = True
                running[d] = None
                device_free_at[d] = end[v] + cluster.delta1 if duration[v] > 0 else end[v]
                if device_free_at[d] > now:
                    push(device_free_at[d], _WAKE)
                for c in children[v]:
                    if place[c] == d:
                        data_available(c, now)
                if remote_devices[v]:
                    if cluster.broadcast:
                        bus_queue[d].append((v, tuple(remote_devices[v])))
                    else:
                        bus_queue[d].extend((v, (dest,)) for dest in remote_devices[v])
            elif kind == _ARRIVE:
                v, bus, dests = payload
                bus_busy[bus] = False
                bus_free_at[bus] = now + cluster.delta2
                if bus_free_at[bus] > now:
                    push(bus_free_at[bus], _WAKE)
                for c in children[v]:
                    if place[c] in dests:
                        data_available(c, now)
    if n_started != n:
        raise AssertionError("reference simulator stalled; the graph must be a DAG")

    peak = _peak_memory(graph, place, n_dev, start, end, arrival, children)
    return SimResult(
        makespan=np.float64(max(end)),
        start=np.asarray(start),
        end=np.asarray(end),
        peak_memory=peak,
        transfer_start=np.asarray(xfer_start),
        arrival=np.asarray(arrival),
    )


def _peak_memory(graph, place, n_dev, start, end, arrival, children) -> np.ndarray:
    """Sweep each device's allocation and free events in time order, frees first at an instant."""
    events: list[list[tuple[float, int, float]]] = [[] for _ in range(n_dev)]
    for v in range(graph.n_ops):
        size = float(graph.out_bytes[v])
        home = place[v]
        last_use = {home: end[v]}
        for c in children[v]:
            d = place[c]
            last_use[d] = max(last_use.get(d, end[c]), end[c])
        arrivals = [a for a in arrival[v] if a == a]  # not NaN
        home_free = max([last_use[home], *arrivals])
        events[home] += [(start[v], 1, size), (home_free, 0, -size)]
        for d, free in last_use.items():
            if d != home:
                events[d] += [(arrival[v][d], 1, size), (free, 0, -size)]
    peak = np.zeros(n_dev)
    for d in range(n_dev):
        live = 0.0
        for _, _, delta in sorted(events[d], key=lambda e: (e[0], e[1])):
            live += delta
            peak[d] = max(peak[d], live)
    params = np.zeros(n_dev)
    np.add.at(params, np.asarray(place), graph.param_bytes)
    return peak + params
