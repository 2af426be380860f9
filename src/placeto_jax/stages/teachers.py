"""What the construct agent imitates first, and the hint it may observe: the best of a few fast
heuristics on each op graph (`rl/construct_loop.py` takes them as given: the agent does not
import the placers)."""

from __future__ import annotations

import jax

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, fastest_fitting, run_method
from placeto_jax.rl.construct_loop import Teacher

TEACHERS = ("metis", "heft", "critical-path", "m-etf", "m-sct")  # the fast heuristics that
# finish in seconds on 5,000 ops (fit-fastest and m-topo never won a family graph)


def best_teacher(graph: Graph, cluster: Cluster, key: jax.Array) -> list[PlacerResult]:
    """Every method of `TEACHERS` on `graph`, the fastest (`fastest_fitting`) first."""
    results = [run_method(m, graph, cluster, key) for m in TEACHERS]
    best = fastest_fitting(results)
    return [best, *(r for r in results if r is not best)]


def teachers(named: list[tuple[str, Graph]], cluster: Cluster, seed: int) -> list[Teacher]:
    """Each op graph's best of `TEACHERS`, drawn with key `seed`, with the simulations that
    chose it (each method's own and one scoring it)."""
    out = []
    for _, graph in named:
        results = best_teacher(graph, cluster, jax.random.key(seed))
        spent = sum(r.evaluations + 1 for r in results)
        out.append(Teacher(results[0].placement, results[0].makespan, spent))
    return out
