"""The learned per-graph baselines (RNN placer, hierarchical planner) with their learning
curves in the experiments' `Curve` form."""

from __future__ import annotations

import time

import jax

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, scored
from placeto_jax.placers.hierarchical import train_hierarchical
from placeto_jax.placers.rnn import train_rnn
from placeto_jax.reproduce.placeto import Curve

TRAINERS = {"rnn": train_rnn, "hierarchical": train_hierarchical}


def train(
    name: str, graph: Graph, cluster: Cluster, key: jax.Array, budget: int
) -> tuple[PlacerResult, Curve]:
    """Train learned placer `name` on `graph` for `budget` simulator evaluations: its best
    placement, scored by the simulator, and its curve (best placement so far by penalised
    makespan, with its raw makespan and whether it fits memory)."""
    began = time.perf_counter()
    solution, curve = TRAINERS[name](graph, cluster, key, budget)
    placed = scored(name, graph, cluster, solution, time.perf_counter() - began)
    return placed, Curve.of(curve.evaluations, curve.wall_s, curve.best, curve.raw, curve.fits)
