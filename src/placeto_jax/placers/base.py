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
