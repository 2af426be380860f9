"""The learned per-graph baselines (RNN placer, hierarchical planner) with their learning
curves in the experiments' `Curve` form."""

from __future__ import annotations

import time

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult
from placeto_jax.placers.hierarchical import train_hierarchical
from placeto_jax.placers.rnn import train_rnn
from placeto_jax.reproduce.placeto import Curve
from placeto_jax.sim.api import simulate

TRAINERS = {"rnn": train_rnn, "hierarchical": train_hierarchical}


def train(
    name: str, graph: Graph, cluster: Cluster, key: jax.Array, budget: int
) -> tuple[PlacerResult, Curve]:
    """Train learned placer `name` on `graph` for `budget` simulator evaluations: its best
    placement, scored by the simulator, and its curve (best penalised score so far)."""
    began = time.perf_counter()
    solution, curve = TRAINERS[name](graph, cluster, key, budget)
    wall = time.perf_counter() - began
    result = simulate(graph, cluster, solution.placement)
    peak = np.asarray(result.peak_memory, dtype=np.float64)
    placed = PlacerResult(
        method=name,
        placement=np.asarray(solution.placement, dtype=np.int64),
        makespan=float(result.makespan),
        peak_memory=peak,
        fits_memory=bool(np.all(peak <= cluster.memory_array)),
        evaluations=solution.evaluations,
        wall_s=wall,
    )
    return placed, Curve.of(curve.evaluations, curve.wall_s, curve.best)
