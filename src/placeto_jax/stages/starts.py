"""Where improve mode's episodes start (`env.initial_placement="given"`): `STARTS` by name.

A fast heuristic (or single device) is run on the grouped graph the agent places, so that it
keeps every decision unit on one device, then expanded onto the op graph and scored there;
`best` is the fastest of `placers.FAST_HEURISTICS` (fitting memory first). `best-op` runs those
heuristics on the op graph itself, where they are usually faster than on the grouped graph
(they may split its units), and a placement file is read onto the op graph: for both, the
graph is regrouped within the start when the start splits a unit (`env.start.with_start`), so
the start is kept exactly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import jax

from placeto_jax.cluster import Cluster
from placeto_jax.env.bank import PlacementGraph
from placeto_jax.env.start import with_start
from placeto_jax.graphs.placements import load_placement
from placeto_jax.placers import (
    FAST_HEURISTICS,
    METHODS,
    PlacerResult,
    fast_heuristics,
    fastest_fitting,
    scored,
    simulations,
)
from placeto_jax.placers.base import Solution

START_METHODS = FAST_HEURISTICS
STARTS = ("random", *START_METHODS, "best", "best-op")  # or a placement file


def heuristic_start(
    pg: PlacementGraph, cluster: Cluster, name: str, key: jax.Array
) -> PlacerResult:
    """Method `name` of `START_METHODS` on the grouped graph `pg.graph`, expanded onto the op
    graph and scored there (a `PlacerResult` of the op graph)."""
    began = time.perf_counter()
    solution = METHODS[name].solve(pg.graph, cluster, key, None)
    op_graph = pg.op_graph or pg.graph
    placement = Solution(pg.expand(solution.placement))
    return scored(name, op_graph, cluster, placement, time.perf_counter() - began)


def start_result(
    pg: PlacementGraph,
    cluster: Cluster,
    spec: str,
    key: jax.Array,
    heuristics: list[PlacerResult] | None = None,
) -> PlacerResult:
    """The start `spec` names for `pg` (a `PlacerResult` of its op graph): a method of
    `START_METHODS`, "best" (the fastest fast heuristic on the grouped graph, fitting memory
    first), "best-op" (the same on the op graph; `heuristics`: their results there, when
    already run), or a placement file. ValueError for anything else, or a file that does not
    place the op graph."""
    return start_and_cost(pg, cluster, spec, key, heuristics)[0]


def start_and_cost(
    pg: PlacementGraph,
    cluster: Cluster,
    spec: str,
    key: jax.Array,
    heuristics: list[PlacerResult] | None = None,
) -> tuple[PlacerResult, int]:
    """`start_result` and the simulations it ran: each heuristic's own and one to score it
    (none for `heuristics` already run), one to score a file."""
    if spec == "best":
        results = [heuristic_start(pg, cluster, m, key) for m in FAST_HEURISTICS]
        return fastest_fitting(results), simulations(results)
    if spec == "best-op" and heuristics is not None:
        return fastest_fitting(heuristics), 0
    if spec == "best-op":
        results = fast_heuristics(pg.op_graph or pg.graph, cluster, key)
        return fastest_fitting(results), simulations(results)
    if spec in START_METHODS:
        result = heuristic_start(pg, cluster, spec, key)
        return result, result.evaluations + 1
    check_start(spec)
    op_graph = pg.op_graph or pg.graph
    placement = load_placement(spec, op_graph, cluster.n_devices)
    return scored(spec, op_graph, cluster, Solution(placement), 0.0), 1


def check_start(spec: str) -> None:
    """ValueError unless `spec` is one of `STARTS` or an existing file."""
    if spec in STARTS or Path(spec).is_file():
        return
    if os.sep in spec or Path(spec).suffix:
        raise ValueError(f"no placement file {spec!r} (a start is one of {', '.join(STARTS)})")
    raise ValueError(
        f"unknown start {spec!r}: choose one of {', '.join(STARTS)} or a placement file"
    )


def started(
    graphs: list[PlacementGraph],
    cluster: Cluster,
    spec: str,
    key: jax.Array,
    heuristics: list[list[PlacerResult]] | None = None,
) -> list[PlacementGraph]:
    """`graphs` whose episodes start from `spec` (`start_result`; `heuristics`: per graph, the
    fast heuristics' results on its op graph when already run), each start named by the
    method that made it ("m-sct (best)" for `best`, "m-sct (best-op)" for `best-op`) and the
    simulations that found it (`Start.evaluations`)."""
    out = []
    for i, pg in enumerate(graphs):
        result, cost = start_and_cost(pg, cluster, spec, key, heuristics and heuristics[i])
        name = f"{result.method} ({spec})" if spec in ("best", "best-op") else result.method
        out.append(with_start(pg, result.placement, name, cluster.n_devices, cluster.delta1,
                              cost))  # fmt: skip
    return out
