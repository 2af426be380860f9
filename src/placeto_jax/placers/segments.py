"""Steepest descent over segment moves (host-side NumPy, batched exact simulation).

A segment is a set of ops moved to one device in one step: a run of consecutive ops of the
topological order, or a linear chain (an op, then its only child while that child has no other
parent), closed over co-location classes. Moving a branch whole pays its two boundary transfers
once, where moving its ops one at a time pays a transfer per op and each single move may lose.
Each step simulates every segment on every device it does not already fill and keeps the
best-ranked placement (`sim.ranking`: fitting memory first, then penalised makespan) when it
ranks before the current one. A step costs about segments x (D - 1) simulations, so the descent
suits graphs of up to about 1,000 ops (a per-graph teacher), not batches of family graphs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.guided import Searched
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import first_ranked, memory_overflow, rank_key

RUN_LENGTHS = (1, 2, 3, 4, 6, 8)  # ops per run of the topological order
MAX_CHAIN_OPS = 8  # ops per linear chain
BATCH = 4096  # placements per simulation call


def segments(graph: Graph) -> list[np.ndarray]:
    """The op sets a step may move (increasing op indices, each closed over co-location
    classes), without repeats: runs of `RUN_LENGTHS` ops of the topological order, and linear
    chains of 2 to `MAX_CHAIN_OPS` ops."""
    classes = graph.colocation_classes
    members: dict[int, list[int]] = {}
    for v, c in enumerate(classes.tolist()):
        members.setdefault(c, []).append(v)

    def closed(ops) -> tuple[int, ...]:
        return tuple(sorted({u for v in ops for u in members[classes[v]]}))

    order = graph.topological_order.tolist()
    found = {closed(order[i : i + n]) for n in RUN_LENGTHS for i in range(len(order) - n + 1)}
    for v in range(graph.n_ops):
        chain = [v]
        while len(chain) < MAX_CHAIN_OPS:
            children = graph.children(chain[-1])
            if children.size != 1 or graph.parents(children[0]).size != 1:
                break
            chain.append(int(children[0]))
            found.add(closed(chain))
    return [np.array(s, dtype=np.int64) for s in sorted(found)]


def segment_descent(
    graph: Graph, cluster: Cluster, start: Searched, max_steps: int = 64
) -> Searched:
    """`start` (simulated as given) improved by at most `max_steps` steps of steepest descent
    over `segments` (module docstring); `kept` and `evaluations` add the descent's."""
    if max_steps < 0:
        raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    moves = segments(graph)
    current = start
    kept, evaluations = start.kept, start.evaluations
    for _ in range(max_steps):
        rows = _moved(current.placement, moves, cluster.n_devices)
        if rows.shape[0] == 0:
            break
        best = _best_of(graph, cluster, rows)
        evaluations += rows.shape[0]
        if rank_key(best.makespan, best.fits_memory, best.overflow) >= rank_key(
            current.makespan, current.fits_memory, current.overflow
        ):
            break
        current, kept = best, kept + 1
    return dataclasses.replace(current, kept=kept, evaluations=evaluations)


def _moved(placement: np.ndarray, moves: list[np.ndarray], n_devices: int) -> np.ndarray:
    """[M, N] int64: `placement` with each segment moved whole to each device it does not
    already fill."""
    rows = []
    for ops in moves:
        for device in range(n_devices):
            if np.all(placement[ops] == device):
                continue
            row = placement.copy()
            row[ops] = device
            rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(len(rows), placement.size)


def _best_of(graph: Graph, cluster: Cluster, rows: np.ndarray) -> Searched:
    """The best-ranked of placements `rows` [M, N] (the first of equals), simulated exactly in
    batches of `BATCH`."""
    makespan, peak = [], []
    for i in range(0, rows.shape[0], BATCH):
        out = simulate(graph, cluster, rows[i : i + BATCH])
        makespan.append(out.makespan)
        peak.append(out.peak_memory)
    makespan, peak = np.concatenate(makespan), np.concatenate(peak)
    b = first_ranked(makespan, peak, cluster)
    overflow = float(memory_overflow(peak[b][None], cluster)[0])
    return Searched(rows[b], float(makespan[b]), peak[b], overflow == 0, overflow)
