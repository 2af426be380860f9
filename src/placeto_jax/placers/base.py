"""The placer interface: `Method` (name, one-line summary, solver) and the result records."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph


@dataclasses.dataclass(frozen=True)
class Solution:
    """What a solver returns: the placement and what it cost to find."""

    placement: np.ndarray  # [N] int64 device per op
    evaluations: int = 0  # simulator calls (placements simulated) used to choose it
    estimate: float = math.nan  # µs, the method's own makespan estimate (NaN: none)
    note: str = ""  # what the method could not do (e.g. respect memory), for the user


MEMORY_PENALTY = 1e9  # µs per unit of relative memory overflow


def memory_overflow(peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] float64: relative memory overflow of peak memory [B, D] bytes (bytes over capacity
    divided by capacity, summed over devices); 0 exactly when the placement fits."""
    capacity = cluster.memory_array
    return (np.maximum(np.asarray(peak_memory, np.float64) - capacity, 0.0) / capacity).sum(1)


def penalised_makespan(makespan, peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] µs: makespans [B] µs plus `MEMORY_PENALTY` µs per unit of `memory_overflow` for
    peak memory [B, D] bytes, so any placement that fits scores below one that does not. The
    score every search and learned placer ranks placements by."""
    overflow = memory_overflow(peak_memory, cluster)
    return np.asarray(makespan, dtype=np.float64) + MEMORY_PENALTY * overflow


def rank_key(makespan: float, fits: bool, overflow: float) -> tuple[bool, float]:
    """How two placements compare (the lower key wins): fitting memory first, by makespan
    (µs); among those that do not fit, the least `memory_overflow` (penalised makespan), not
    the shortest makespan."""
    return not fits, float(makespan) + MEMORY_PENALTY * float(overflow)


def rank_keys(makespan, peak_memory, cluster: Cluster) -> list[tuple[bool, float]]:
    """`rank_key` of each of B placements: makespans [B] µs, peak memory [B, D] bytes."""
    overflow = memory_overflow(peak_memory, cluster)
    return [rank_key(m, o == 0, o) for m, o in zip(np.asarray(makespan), overflow, strict=True)]


def fits_memory(peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] bool: peak memory [B, D] bytes within every device's memory."""
    return np.all(np.asarray(peak_memory, np.float64) <= cluster.memory_array, axis=1)


def best_so_far(penalised, makespan, fits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best placement so far along a sequence [K] of them, ranked by penalised makespan
    (µs; the first of equal scores kept): (its penalised makespan [K] float64 µs, its makespan
    without the penalty [K] float64 µs, whether it fits memory [K] bool)."""
    penalised = np.asarray(penalised, np.float64)
    best = np.minimum.accumulate(penalised)
    improves = penalised < np.r_[np.inf, best[:-1]]
    at = np.maximum.accumulate(np.where(improves, np.arange(len(penalised)), 0))
    return best, np.asarray(makespan, np.float64)[at], np.asarray(fits, bool)[at]


Solver = Callable[[Graph, Cluster, jax.Array, "int | None"], Solution]


@dataclasses.dataclass(frozen=True)
class Method:
    """A placer by name. `budget` caps simulator evaluations (search methods; others ignore it)."""

    name: str
    summary: str  # one line, for `--help`
    solve: Solver

    def place(
        self, graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None = None
    ) -> np.ndarray:
        """[N] int64: the device of every op."""
        return self.solve(graph, cluster, key, budget).placement


@dataclasses.dataclass(frozen=True)
class PlacerResult:
    """A method's placement scored by the simulator."""

    method: str
    placement: np.ndarray  # [N] int64
    makespan: float  # µs, simulated
    peak_memory: np.ndarray  # [D] bytes, simulated
    fits_memory: bool  # peak_memory <= cluster memory on every device
    evaluations: int  # simulator calls the method used (the final scoring call not counted)
    wall_s: float  # seconds the method took (including any JIT compilation it triggered)
    estimate: float = math.nan  # µs, the method's own makespan estimate (NaN: none)
    note: str = ""  # what the method could not do, from its Solution
    overflow: float = 0.0  # `memory_overflow` of peak_memory (0: it fits)
