"""Policy-guided search and the memory squeeze from a placement: the search stages of the place
pipeline (`placeto_jax.pipeline`).

Policy-guided search is `placers.guided.guided_search` (pure JAX, ranked by exact simulation of
the op graph) with the policy's proposals: at the start of every pass the policy observes the
placement once per decision unit (`rl.train.Trainer.proposals`, batched over the units) and
proposes its most likely other device for each (its p-th most likely on pass p with
`proposer="ranked"`, a uniformly random one with `"random"`). This module builds the policy's
bank from the placements to improve and passes the proposals to the search, one pass at a time.
The squeeze adapter runs `placers.squeeze` on each placement that overflows a device's memory.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, apply
from placeto_jax.env.bank import Bank, PlacementGraph, build_bank, prepare
from placeto_jax.env.start import with_start
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, scored
from placeto_jax.placers.base import Solution
from placeto_jax.placers.guided import Searched, Units, guided_search
from placeto_jax.placers.squeeze import squeeze
from placeto_jax.rl.evaluate import Placement
from placeto_jax.rl.train import compiled_run
from placeto_jax.sim.padded import fine_bucket


def search_placements(
    config: Config,
    params: Any,
    graphs: list[PlacementGraph],
    placed: list[Placement],
    cluster: Cluster,
    passes: int,
    proposer: str = "policy",
    key: jax.Array | None = None,
    progress: bool = False,
    on_groups: bool = False,
) -> list[Placement]:
    """`placed` (one per graph of `graphs`) improved by `passes` passes of policy-guided search
    on each op graph, over its ops (co-located ops stay tied); `on_groups`: over the groups
    of each graph as given, each moved whole (a placement that splits a group, which the
    policy's episodes on that graph never do, is regrouped within it as in improve mode).
    The policy of `config` and `params` proposes for every graph in one bank (one compiled
    program); `key` (default: key 0) draws random proposals; `progress`: a bar over the
    passes. Never worse than its placement (`rank_key`); its start and initial makespan stay
    the first placement's and `polish_steps` adds the search's simulations, one per step."""
    if passes < 1:
        raise ValueError(f"the search needs passes >= 1, got {passes}")
    key = jax.random.key(0) if key is None else key
    overhead = cluster.delta1
    config = apply(config, {"env.passes": passes, "env.initial_placement": "given",
                            "env.reward_graph": "ops", "env.traversal": "topological"})  # fmt: skip
    started = [
        with_start(pg if on_groups else prepare(pg.name, pg.op_graph or pg.graph, 0, overhead),
                   p.placement, p.start, cluster.n_devices, overhead)
        for pg, p in zip(graphs, placed, strict=True)
    ]  # fmt: skip
    bank = build_bank(started, search_buckets(config, started))
    run, env_params = compiled_run(config, bank, cluster)
    units = [decision_units(bank, i, pg) for i, pg in enumerate(started)]
    current = [Searched(p.placement, p.makespan, p.peak_memory, p.fits_memory, p.overflow)
               for p in placed]  # fmt: skip
    for done in tqdm(range(passes), desc="search", unit="pass", disable=not progress):
        nodes = np.stack([node_placement(pg, c.placement, bank.n_pad)
                          for pg, c in zip(started, current, strict=True)])  # fmt: skip
        proposed = jax.device_get(
            run.proposals(params, env_params, nodes, done, key, proposer=proposer)
        )
        current = [
            guided_search(pg.op_graph or pg.graph, cluster, u, c, proposed[i, None, : len(u.order)])
            for i, (pg, u, c) in enumerate(zip(started, units, current, strict=True))
        ]
    return [improved(p, c, 0, polish_steps=c.evaluations)
            for p, c in zip(placed, current, strict=True)]  # fmt: skip


def decision_units(bank: Bank, i: int, pg: PlacementGraph) -> Units:
    """The decision units of graph `i` of `bank` (`pg`) on its op graph, in the bank's order."""
    unit = bank.unit[i, : pg.graph.n_ops]
    return Units(unit if pg.op_to_group is None else unit[pg.op_to_group],
                 bank.order[i, : bank.n_units[i]])  # fmt: skip


def node_placement(pg: PlacementGraph, op_placement: np.ndarray, n_pad: int) -> np.ndarray:
    """[n_pad] int32 device per node of `pg`'s graph from `op_placement` [N_ops], which keeps
    every node's ops together."""
    nodes = np.zeros(n_pad, np.int32)
    nodes[np.arange(op_placement.size) if pg.op_to_group is None else pg.op_to_group] = op_placement
    return nodes


def improved(p: Placement, q: Any, spent: int, **steps: int) -> Placement:
    """`p` moved to the placement of `q` (a `Placement` or `PlacerResult` of the same op
    graph) with its outcome (makespan, peak memory, fit, overflow); `spent` evaluations and
    each step counter of `steps` (a `Placement` field: the count to add) added to `p`'s."""
    return dataclasses.replace(
        p,
        placement=q.placement,
        makespan=q.makespan,
        peak_memory=q.peak_memory,
        fits_memory=q.fits_memory,
        overflow=q.overflow,
        evaluations=p.evaluations + spent,
        **{name: getattr(p, name) + count for name, count in steps.items()},
    )


def search_buckets(config: Config, graphs: list[PlacementGraph]) -> tuple[int, ...]:
    """The run's buckets, and one that holds the largest graph of `graphs` when none does
    (the run trained on groups; the search over ops observes the ops themselves)."""
    largest = max(pg.graph.n_ops for pg in graphs)
    if largest <= max(config.run.buckets):
        return config.run.buckets
    return (*config.run.buckets, fine_bucket(largest))


def squeeze_placements(
    graphs: list[PlacementGraph], placed: list[Placement], cluster: Cluster
) -> list[Placement]:
    """`placed` (one per graph of `graphs`), each that overflows a device's memory improved by
    the memory squeeze (`placers.squeeze`: chains of moves aimed at the tensors live at the
    fullest device's peak) on its op graph; one that fits is returned as it is. Its
    `evaluations` add the squeeze's, which `squeeze_steps` counts."""
    out = []
    for pg, p in zip(graphs, placed, strict=True):
        if p.fits_memory:
            out.append(p)
            continue
        op_graph = pg.op_graph or pg.graph
        found = squeeze(op_graph, cluster, p.placement)
        best = scored("squeeze", op_graph, cluster, found, 0.0)  # its simulations counted there
        out.append(improved(p, best, found.evaluations, squeeze_steps=found.evaluations))
    return out


def squeezed_method(graph: Graph, cluster: Cluster, result: PlacerResult) -> PlacerResult:
    """A method's placement that overflows, improved by the memory squeeze: named
    "METHOD+squeeze", its evaluations and wall time added to the method's."""
    began = time.perf_counter()
    found = squeeze(graph, cluster, result.placement)
    solution = Solution(found.placement, result.evaluations + found.evaluations)
    wall_s = result.wall_s + time.perf_counter() - began
    return scored(f"{result.method}+squeeze", graph, cluster, solution, wall_s)
