"""Zero-shot placement of graphs a policy has never seen, from its greedy episodes.

A greedy episode starts from the environment's initial placement (drawn with a fixed evaluation
key, so evaluations are comparable across updates), takes the argmax device at every step, and
returns the best placement it visited (which includes the initial one). `place_graphs` ranks the
visited placements by an exact simulation of the op graph (the grouped graph the policy sees is
an approximation of it), so the placement it returns is never worse than the initial one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.rl.train import make_train
from placeto_jax.sim.api import simulate, single_device


@dataclasses.dataclass(frozen=True)
class Placement:
    """A policy's placement of one graph, simulated exactly (host, float64) on its op graph."""

    graph: str
    placement: np.ndarray  # [N_ops] int64 device per op of the op graph
    makespan: float  # µs
    single_device_makespan: float  # µs
    initial_makespan: float  # µs, the episode's initial placement
    peak_memory: np.ndarray  # [D] bytes
    fits_memory: bool
    n_nodes: int  # nodes the policy placed (groups when coarsened)
    n_units: int  # decisions per pass (nodes, those tied by co-location counted once)
    evaluations: int  # placements simulated on the op graph to choose the returned one


def place_graphs(
    config: Config, params: Any, graphs: list[PlacementGraph], cluster: Cluster
) -> list[Placement]:
    """Greedy placements of `graphs` (all in one bank: one compiled program)."""
    run = make_train(config, build_bank(graphs, config.run.buckets), cluster)
    out = jax.device_get(run.greedy(params, run.env_params))
    steps = config.env.passes
    return [
        rank_visited(pg, cluster, np.asarray(out["visited"][: steps * pg.n_units + 1, i]))
        for i, pg in enumerate(graphs)
    ]


def rank_visited(pg: PlacementGraph, cluster: Cluster, visited: np.ndarray) -> Placement:
    """The best of a greedy episode's visited placements [S, >= N] (the initial one first), by
    an exact simulation of the op graph (one batch with the single-device placement); fitting
    placements come first."""
    n = pg.graph.n_ops
    visited = np.asarray(visited[:, :n], dtype=np.int64)
    op_graph = pg.op_graph or pg.graph
    alone = single_device(op_graph, cluster)
    runs = simulate(op_graph, cluster, np.stack([pg.expand(p) for p in visited] + [alone]))
    fits = np.all(runs.peak_memory[:-1] <= cluster.memory_array, axis=1)
    best = (
        int(np.argmin(np.where(fits, runs.makespan[:-1], np.inf)))
        if fits.any()
        else int(np.argmin(runs.makespan[:-1]))
    )
    return Placement(
        graph=pg.name,
        placement=pg.expand(visited[best]),
        makespan=float(runs.makespan[best]),
        single_device_makespan=float(runs.makespan[-1]),
        initial_makespan=float(runs.makespan[0]),
        peak_memory=np.asarray(runs.peak_memory[best]),
        fits_memory=bool(fits[best]),
        n_nodes=n,
        n_units=pg.n_units,
        evaluations=len(visited),
    )
