"""Policy-guided search and the memory squeeze from a placement: the search stages of the place
pipeline (`placeto_jax.pipeline`).

Policy-guided search visits every decision unit in turn, proposes one move (the policy's most
likely other device, its p-th most likely on pass p with `proposer="ranked"`, or a uniformly
random one) and keeps it only when the exact simulation ranks it first. The jitted steps are the
trainer's programs (`rl.train.Trainer.polish_steps`); this module builds their bank from the
placements to improve and ranks the results on the op graph. The squeeze adapter runs
`placers.squeeze` on each placement that overflows a device's memory.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, apply
from placeto_jax.env.bank import PlacementGraph, build_bank, prepare
from placeto_jax.env.core import EnvParams
from placeto_jax.env.start import with_start
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, scored
from placeto_jax.placers.base import Solution
from placeto_jax.placers.squeeze import squeeze
from placeto_jax.rl.evaluate import Placement, rank_visited, start_name
from placeto_jax.rl.train import Train, compiled_run
from placeto_jax.sim.padded import fine_bucket


def polish_placements(
    config: Config,
    params: Any,
    graphs: list[PlacementGraph],
    placed: list[Placement],
    cluster: Cluster,
    passes: int,
    proposer: str = "policy",
    progress: bool = False,
    on_groups: bool = False,
) -> list[Placement]:
    """`placed` (one per graph of `graphs`) improved by `passes` passes of policy-guided search
    on each op graph (co-located ops stay tied), all in one bank: one compiled program;
    `on_groups`: on each graph as given instead, moving whole groups (a placement that splits
    a group, which the policy's episodes on that graph never do, is regrouped within it as in
    improve mode), every move still judged on the op graph (`Train.polish`); `progress`: a
    bar over the search's steps. Each result is
    the better of its placement and the search's, by exact simulation; its start and initial
    makespan stay the first placement's, its `evaluations` add the ranking's and
    `polish_steps` counts the search's simulations."""
    if passes < 1:
        raise ValueError(f"polishing needs passes >= 1, got {passes}")
    overhead = cluster.delta1
    config = apply(
        config,
        {"env.passes": passes, "env.initial_placement": "given", "env.reward_graph": "ops"},
    )
    started = [
        with_start(pg if on_groups else prepare(pg.name, pg.op_graph or pg.graph, 0, overhead),
                   p.placement, p.start, cluster.n_devices, overhead)
        for pg, p in zip(graphs, placed, strict=True)
    ]  # fmt: skip
    run, env_params = compiled_run(config, build_bank(started, polish_buckets(config, started)),
                                   cluster)  # fmt: skip
    polished = polish_with(run, params, env_params, started, cluster, proposer, progress)
    return [
        improved(p, q, q.evaluations, polish_steps=q.polish_steps)
        for p, q in zip(placed, polished, strict=True)
    ]


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


def polish_buckets(config: Config, graphs: list[PlacementGraph]) -> tuple[int, ...]:
    """The run's buckets, and one that holds the largest op graph of `graphs` when none does
    (the run trained on groups; polishing searches the ops themselves)."""
    largest = max(pg.graph.n_ops for pg in graphs)
    if largest <= max(config.run.buckets):
        return config.run.buckets
    return (*config.run.buckets, fine_bucket(largest))


def polish_with(
    run: Train,
    params: Any,
    env_params: EnvParams,
    graphs: list[PlacementGraph],
    cluster: Cluster,
    proposer: str = "policy",
    progress: bool = False,
) -> list[Placement]:
    """Each graph that `env_params` plays (`graphs`, in that order) improved from its initial
    placement by `run`'s policy-guided search (`Train.polish`), the better of its start and
    its result by an exact simulation of the op graph (`rank_visited`). `polish_steps` counts
    the search's simulations: one per step, and the initial one."""
    config = run.trainer.config
    out = jax.device_get(run.polish(params, env_params, proposer=proposer, progress=progress))
    placements = []
    for i, pg in enumerate(graphs):
        candidates = np.stack([out["initial_placement"][i], out["placement"][i]])
        ranked = rank_visited(pg, cluster, candidates, start_name(config, pg))
        steps = config.env.passes * pg.n_units
        placements.append(dataclasses.replace(ranked, polish_steps=steps + 1))
    return placements


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
