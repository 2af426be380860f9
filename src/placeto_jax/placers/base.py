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
    budgeted: bool = False  # a search: `budget` caps its simulator evaluations

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
