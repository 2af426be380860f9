"""What the construct agent imitates first, and the hint it may observe: the best of a few fast
heuristics on each op graph, or that placement improved by passes of local search
(`train.teacher` "searched"), then by steepest descent over segment moves from it and from the
heuristic, the better kept ("descent").
`rl/construct_loop.py` takes them as given: the agent does not import the placers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, fastest_fitting, run_method, simulations
from placeto_jax.placers.guided import Searched, Units, guided_search
from placeto_jax.placers.segments import segment_descent
from placeto_jax.rl.construct_loop import Teacher
from placeto_jax.sim.ranking import rank_key

TEACHERS = ("metis", "heft", "critical-path", "m-etf", "m-sct")  # the fast heuristics that
# finish in seconds on 5,000 ops (fit-fastest and m-topo never won a family graph)
FALLBACK = "fit-fastest"  # memory-aware, one simulated batch per op: run only when no method
# of `TEACHERS` fits memory


def best_teacher(
    graph: Graph, cluster: Cluster, key: jax.Array, ran: Sequence[PlacerResult] = ()
) -> list[PlacerResult]:
    """Every method of `TEACHERS` on `graph` (and `FALLBACK` when none of them fits memory),
    the fastest (`fastest_fitting`) first; a method already in `ran` (run with `key`) is not
    run again."""
    done = {r.method: r for r in ran}

    def result(method: str) -> PlacerResult:
        return done[method] if method in done else run_method(method, graph, cluster, key)

    results = [result(m) for m in TEACHERS]
    if not any(r.fits_memory for r in results):
        results.append(result(FALLBACK))
    best = fastest_fitting(results)
    return [best, *(r for r in results if r is not best)]


def searched_from(
    graph: Graph,
    cluster: Cluster,
    start: PlacerResult,
    key: jax.Array,
    units: Units | None = None,
    passes: int = 1,
) -> Searched:
    """`start` improved by `passes` passes of local search over `units` (default: the op
    graph's co-location classes, `Units.of_ops`), each unit proposed a uniformly random device
    per pass drawn from `key` (`placers.guided`)."""
    units = Units.of_ops(graph) if units is None else units
    proposals = jax.random.randint(key, (passes, len(units.order)), 0, cluster.n_devices)
    return guided_search(graph, cluster, units, _searched(start), np.asarray(proposals))


def descended_from(graph: Graph, cluster: Cluster, starts: Sequence[Searched]) -> Searched:
    """`segment_descent` from each of `starts`: the best-ranked end (the first of equals),
    with every descent's simulations counted."""
    ends = [segment_descent(graph, cluster, start) for start in starts]
    best = min(ends, key=lambda e: rank_key(e.makespan, e.fits_memory, e.overflow))
    return dataclasses.replace(best, evaluations=sum(e.evaluations for e in ends))


def _searched(result: PlacerResult) -> Searched:
    return Searched(result.placement, result.makespan, result.peak_memory, result.fits_memory,
                    result.overflow)  # fmt: skip


def teachers(
    named: list[tuple[str, Graph]],
    cluster: Cluster,
    seed: int,
    kind: str = "best",
    passes: int = 1,
) -> list[Teacher]:
    """Each op graph's best of `TEACHERS`, drawn with key `seed` (improved by `passes` passes
    of `searched_from` for `kind` "searched"; for "descent", `descended_from` that placement
    and the best heuristic; the best heuristic is then the declared start), with the
    simulations that chose it (each method's own, one scoring it, and the searches'). For
    "lookahead" the best heuristic too: the run improves it by its lookahead episode
    (`rl.construct_loop.Run.make`)."""
    out = []
    for _, graph in named:
        key = jax.random.key(seed)
        results = best_teacher(graph, cluster, key)
        best, spent = results[0], simulations(results)
        if kind in ("best", "lookahead"):
            out.append(Teacher(best.placement, best.makespan, spent))
            continue
        found = searched_from(graph, cluster, best, jax.random.fold_in(key, 1), passes=passes)
        if kind == "descent":
            found = descended_from(graph, cluster, (found, _searched(best)))
        out.append(Teacher(found.placement, found.makespan, spent + found.evaluations,
                           start=best.placement))  # fmt: skip
    return out


def config_teachers(config: Config, named: list[tuple[str, Graph]], cluster: Cluster):
    """`teachers` as a run of `config` draws them (its seed, `train.teacher` and
    `train.teacher_passes`)."""
    train = config.train
    return teachers(named, cluster, config.seed, train.teacher, train.teacher_passes)
