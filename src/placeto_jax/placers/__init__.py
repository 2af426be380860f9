"""Placers: every baseline behind one interface (docs/baselines.md).

`METHODS[name].place(graph, cluster, key, budget=None) -> [N] int64` places a graph;
`run_method(name, graph, cluster, key, budget=None)` also times it and scores the placement on
the simulator. `PLACERS` keeps the plain `place(graph, cluster, key)` functions of the simple
placers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import (
    expert,
    fitfastest,
    hierarchical,
    listsched,
    partition,
    rnn,
    search,
)
from placeto_jax.placers.base import Method, PlacerResult, Solution, Solver
from placeto_jax.placers.simple import colocate, random, random_batch, round_robin, single
from placeto_jax.placers.timeline import Schedule
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import memory_overflow, rank_key

Placer = Callable[[Graph, Cluster, jax.Array], np.ndarray]

PLACERS: dict[str, Placer] = {
    "single": single,
    "random": random,
    "round-robin": round_robin,
}


def _plain(placer: Placer) -> Solver:
    def solve(graph, cluster, key, budget=None) -> Solution:
        del budget
        return Solution(placer(graph, cluster, key))

    return solve


def _scheduler(scheduler: Callable[[Graph, Cluster], Schedule]) -> Solver:
    def solve(graph, cluster, key, budget=None) -> Solution:
        del key, budget
        schedule = scheduler(graph, cluster)
        note = ""
        if schedule.overflowing:
            note = (
                f"no device had memory left for {schedule.overflowing} of {graph.n_ops} ops "
                "(by the scheduler's memory bound); they were placed without it"
            )
        return Solution(schedule.placement, 0, schedule.makespan, note)

    return solve


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "single",
            "every op on the fastest device that holds the graph",
            _plain(single),
        ),
        Method(
            "random",
            "every op on a uniformly random device",
            _plain(random),
        ),
        Method(
            "round-robin",
            "op i of the topological order on device i mod D",
            _plain(round_robin),
        ),
        Method(
            "expert",
            "human-expert split from per-model naming rules (zoo models)",
            expert.expert,
        ),
        Method(
            "metis",
            "METIS partition (compute, bytes) into 1..D parts, best simulated",
            partition.metis,
        ),
        Method(
            "heft",
            "HEFT: upward rank, earliest finish, insertion-based",
            _scheduler(listsched.heft),
        ),
        Method(
            "critical-path",
            "CPOP: critical path on one device, rest earliest finish",
            _scheduler(listsched.critical_path),
        ),
        Method(
            "m-topo",
            "Baechi m-TOPO: topological order in speed-balanced blocks",
            _scheduler(listsched.m_topo),
        ),
        Method(
            "m-etf",
            "Baechi m-ETF: ready (op, device) pair with the earliest start",
            _scheduler(listsched.m_etf),
        ),
        Method(
            "m-sct",
            "Baechi m-SCT: ETF keeping LP-chosen favourite children together",
            _scheduler(listsched.m_sct),
        ),
        Method(
            "fit-fastest",
            "topological order, each op to its fastest device that simulated memory allows",
            fitfastest.fit_fastest,
        ),
        Method(
            "random-search",
            "best of BUDGET random placements (batched simulator)",
            search.random_search,
            budgeted=True,
        ),
        Method(
            "local-search",
            "greedy per-op device moves in topological order (batched)",
            search.local_search,
            budgeted=True,
        ),
        Method(
            "cross-entropy",
            "cross-entropy method over per-op device distributions",
            search.cross_entropy,
            budgeted=True,
        ),
        Method(
            "rnn",
            "RNN placer (ICML 2017): seq2seq LSTM over ops, REINFORCE",
            rnn.rnn,
            budgeted=True,
        ),
        Method(
            "hierarchical",
            "hierarchical planner (ICLR 2018): MLP grouper + seq2seq, REINFORCE",
            hierarchical.hierarchical,
            budgeted=True,
        ),
    )
}


MAX_BUDGET = 100_000_000  # simulator evaluations a search may be given


def run_method(
    name: str, graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None = None
) -> PlacerResult:
    """Place `graph` with method `name`, time it, and score the placement on the simulator."""
    if name not in METHODS:
        raise ValueError(f"unknown placement method {name!r}; choose one of {', '.join(METHODS)}")
    if budget is not None and not 1 <= budget <= MAX_BUDGET:
        raise ValueError(f"the budget must be in [1, {MAX_BUDGET:,}] evaluations, got {budget}")
    began = time.perf_counter()
    solution = METHODS[name].solve(graph, cluster, key, budget)
    return scored(name, graph, cluster, solution, time.perf_counter() - began)


# Every method that finishes in seconds on graphs of 1,000s of ops: what a user would run instead
# of a learned placer, so the one list behind every "best heuristic" reported.
FAST_HEURISTICS = (
    "single", "metis", "heft", "critical-path", "m-topo", "m-etf", "m-sct", "fit-fastest",
)  # fmt: skip


def simulations(results: list[PlacerResult]) -> int:
    """Simulations the methods of `results` ran: their own, and one scoring each."""
    return sum(r.evaluations + 1 for r in results)


def fastest_fitting(results: list[PlacerResult]) -> PlacerResult:
    """The shortest makespan among the results that fit memory; when none fits, the one that
    overflows memory least (`rank_key`). The first of equal results."""
    return min(results, key=lambda r: rank_key(r.makespan, r.fits_memory, r.overflow))


def best_heuristic(graph: Graph, cluster: Cluster, key: jax.Array) -> PlacerResult:
    """The best of `FAST_HEURISTICS` on `graph` (`fastest_fitting`): what every table compares
    a learned placement with."""
    return fastest_fitting(fast_heuristics(graph, cluster, key))


def fast_heuristics(graph: Graph, cluster: Cluster, key: jax.Array) -> list[PlacerResult]:
    """Every method of `FAST_HEURISTICS` on `graph`, in that order."""
    return [run_method(name, graph, cluster, key) for name in FAST_HEURISTICS]


def scored(
    name: str, graph: Graph, cluster: Cluster, solution: Solution, wall_s: float
) -> PlacerResult:
    """`solution` of method `name` (found in `wall_s` seconds) scored on the simulator."""
    result = simulate(graph, cluster, solution.placement)
    peak = np.asarray(result.peak_memory, dtype=np.float64)
    return PlacerResult(
        method=name,
        placement=np.asarray(solution.placement, dtype=np.int64),
        makespan=float(result.makespan),
        peak_memory=peak,
        fits_memory=bool(np.all(peak <= cluster.memory_array)),
        overflow=float(memory_overflow(peak[None], cluster)[0]),
        evaluations=solution.evaluations,
        wall_s=wall_s,
        estimate=solution.estimate,
        note=solution.note,
    )


__all__ = [
    "FAST_HEURISTICS",
    "METHODS",
    "PLACERS",
    "Method",
    "Placer",
    "PlacerResult",
    "Solution",
    "best_heuristic",
    "colocate",
    "fast_heuristics",
    "fastest_fitting",
    "random",
    "random_batch",
    "round_robin",
    "run_method",
    "scored",
    "single",
]
