"""Zero-shot placement of graphs a policy has never seen, from its greedy episodes.

A greedy episode starts from the environment's initial placement (drawn with a fixed evaluation
key, so evaluations are comparable across updates, or each graph's given start in improve mode),
takes the argmax device at every step, and returns the best placement it visited (which
includes the initial one). `place_graphs` can add K sampled episodes per graph (same start, at a
sampling temperature: logits divided by T, 1 the policy's own distribution) and the best
placement the training episodes visited on each graph (`found_placements`), and ranks every
distinct visited placement by an exact simulation of the op graph (the grouped graph the policy
sees is an approximation of it), so the placement it returns is never worse than the initial
one (fitting memory first; when none fits, the one that overflows least).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.env.core import EnvParams
from placeto_jax.rl.train import Train, TrainState, compiled_run
from placeto_jax.sim.api import simulate, single_device
from placeto_jax.sim.ranking import first_ranked, memory_overflow, rank_key


@dataclasses.dataclass(frozen=True)
class Placement:
    """A policy's placement of one graph, simulated exactly (host, float64) on its op graph."""

    graph: str
    placement: np.ndarray  # [N_ops] int64 device per op of the op graph
    makespan: float  # µs
    single_device_makespan: float  # µs
    initial_makespan: float  # µs, the episode's initial placement (the start in improve mode)
    peak_memory: np.ndarray  # [D] bytes
    fits_memory: bool
    n_nodes: int  # nodes the policy placed (groups when coarsened)
    n_units: int  # decisions per pass (nodes, those tied by co-location counted once)
    evaluations: int  # distinct placements simulated on the op graph to choose the returned one
    start: str = "random"  # the initial placement: the env's kind, or the given start's name
    episodes: int = 1  # episodes whose visited placements were ranked (greedy + sampled)
    episode_steps: int = 0  # grouped-graph simulations those episodes made (one per step)
    temperature: float = 1.0  # of the sampled episodes (logits divided by it)
    polish_steps: int = 0  # op-graph simulations of the policy-guided search after them
    squeeze_steps: int = 0  # op-graph simulations of the memory squeeze after those
    overflow: float = 0.0  # `memory_overflow` of peak_memory (0: it fits)


def place_graphs(
    config: Config,
    params: Any,
    graphs: list[PlacementGraph],
    cluster: Cluster,
    samples: int = 0,
    key: jax.Array | None = None,
    temperature: float = 1.0,
    found: list[np.ndarray | None] | None = None,
) -> list[Placement]:
    """Greedy placements of `graphs` (all in one bank: one compiled program), each also ranked
    with the placements of `samples` sampled episodes on it, drawn with `key` at `temperature`,
    and with `found`'s (`place_with`)."""
    run, env_params = compiled_run(config, build_bank(graphs, config.run.buckets), cluster)
    return place_with(run, params, env_params, graphs, cluster, samples, key, temperature, found)


def best_of_groupings(per_grouping: list[list[Placement]]) -> list[Placement]:
    """Per graph, the best of its placements at several coarsenings (one list per coarsening,
    graphs in the same order), in `rank_key` order of their exact op-graph simulations, the
    earlier coarsening on a tie. Its `evaluations`, `episodes` and `episode_steps` add up
    every coarsening's: all of them were played and simulated."""
    out = []
    kept_of = kept_groupings(per_grouping)
    for options, kept in zip(zip(*per_grouping, strict=True), kept_of, strict=True):
        out.append(
            dataclasses.replace(
                options[kept],
                evaluations=sum(p.evaluations for p in options),
                episodes=sum(p.episodes for p in options),
                episode_steps=sum(p.episode_steps for p in options),
            )
        )
    return out


def kept_groupings(per_grouping: list[list[Placement]]) -> list[int]:
    """Per graph, the index of the coarsening whose placement `best_of_groupings` keeps."""
    if not per_grouping:
        raise ValueError("no placements to choose from")
    keys = [[rank_key(p.makespan, p.fits_memory, p.overflow) for p in options]
            for options in zip(*per_grouping, strict=True)]  # fmt: skip
    return [min(range(len(k)), key=k.__getitem__) for k in keys]


def found_placements(state: TrainState) -> list[np.ndarray | None]:
    """Per graph of the state's bank, the best placement its training episodes visited [N_pad]
    (`TrainState.found_placement`), or None for a graph no episode played."""
    runtime, placement = jax.device_get((state.found_runtime, state.found_placement))
    return [row if np.isfinite(r) else None for r, row in zip(runtime, placement, strict=True)]


def found_on_ops(state: TrainState, graphs: list[PlacementGraph]) -> tuple[np.ndarray | None, ...]:
    """`found_placements` of the state's bank (`graphs`, in its order), each expanded to its op
    graph [N_ops]: the form `pipeline.Policy.found` takes, whatever coarsening places later."""
    rows = found_placements(state)
    return tuple(
        None if row is None else pg.expand(row[: pg.graph.n_ops])
        for pg, row in zip(graphs, rows, strict=True)
    )


def with_candidate(
    placed: Placement, pg: PlacementGraph, cluster: Cluster, candidate: np.ndarray | None
) -> Placement:
    """`placed` (of `pg`), or op-graph placement `candidate` [N_ops] where an exact simulation
    ranks it strictly first (`rank_key`); either way one more evaluation when there is one."""
    if candidate is None:
        return placed
    op_graph = PlacementGraph(pg.name, pg.op_graph or pg.graph)
    other = rank_visited(op_graph, cluster, np.asarray(candidate)[None], placed.start)
    counted = dataclasses.replace(placed, evaluations=placed.evaluations + 1)
    if rank_key(other.makespan, other.fits_memory, other.overflow) >= rank_key(
        placed.makespan, placed.fits_memory, placed.overflow
    ):
        return counted
    fields = ("placement", "makespan", "peak_memory", "fits_memory", "overflow")
    return dataclasses.replace(counted, **{f: getattr(other, f) for f in fields})


def place_with(
    run: Train,
    params: Any,
    env_params: EnvParams,
    graphs: list[PlacementGraph],
    cluster: Cluster,
    samples: int = 0,
    key: jax.Array | None = None,
    temperature: float = 1.0,
    found: list[np.ndarray | None] | None = None,
) -> list[Placement]:
    """The placement of each graph that `env_params` plays (`graphs`, in that order) by `run`'s
    compiled programs: every placement of its greedy episode, with `samples` sampled episodes
    (actions from softmax(logits / `temperature`)) the `SCREENED` distinct ones of theirs with
    the lowest runtime in the episodes' own simulation, and the placement `found` gives the
    graph (`found_placements`, in `graphs`' order; None: none), ranked exactly on the op graph
    (`rank_visited`)."""
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    if samples and key is None:
        raise ValueError("sampled episodes need a key")
    config = run.trainer.config
    greedy = jax.device_get(run.greedy(params, env_params)["visited"])  # [T + 1, G, N]
    if samples:
        sampled = run.sample(key, params, env_params, count=samples, temperature=temperature)
        sampled = jax.device_get(sampled)
    out = []
    for i, pg in enumerate(graphs):
        steps = config.env.passes * pg.n_units
        candidates = greedy[: steps + 1, i]
        if samples:
            mine = slice(i * samples, (i + 1) * samples)
            visited = sampled["visited"][: steps + 1, mine].reshape(-1, candidates.shape[1])
            runtime = sampled["runtime"][: steps + 1, mine].ravel()
            candidates = np.concatenate([candidates, screened(visited, runtime, SCREENED)])
        if found is not None and found[i] is not None:
            n = pg.graph.n_ops
            candidates = np.concatenate([candidates[:, :n], found[i][None, :n]])
        ranked = rank_visited(pg, cluster, candidates, start_name(config, pg))
        episodes = 1 + samples
        out.append(
            dataclasses.replace(
                ranked, episodes=episodes, episode_steps=episodes * steps, temperature=temperature
            )
        )
    return out


SCREENED = 64  # sampled placements per graph simulated exactly (the episodes' best distinct)


def screened(visited: np.ndarray, runtime: np.ndarray, count: int) -> np.ndarray:
    """[<= count, N]: the distinct rows of `visited` [S, N] with the lowest `runtime` [S]."""
    order = np.argsort(runtime, kind="stable")
    distinct, first = np.unique(visited[order], axis=0, return_index=True)
    return distinct[np.argsort(first)][:count]


def start_name(config: Config, pg: PlacementGraph) -> str:
    """What the episodes on `pg` start from: the given start's name, or the env's kind."""
    kind = config.env.initial_placement
    return pg.start.name if kind == "given" and pg.start is not None else kind


def rank_visited(
    pg: PlacementGraph, cluster: Cluster, visited: np.ndarray, start: str = "random"
) -> Placement:
    """The best of the distinct placements [S, >= N] that episodes visited (the first row: the
    initial one), by an exact simulation of the op graph (one batch with the single-device
    placement), in `rank_key` order (fitting first, then the least memory overflow). `start`
    names the initial placement."""
    n = pg.graph.n_ops
    visited = np.asarray(visited[:, :n], dtype=np.int64)
    distinct, inverse = np.unique(visited, axis=0, return_inverse=True)
    op_graph = pg.op_graph or pg.graph
    alone = single_device(op_graph, cluster)
    runs = simulate(op_graph, cluster, np.stack([pg.expand(p) for p in distinct] + [alone]))
    best = first_ranked(runs.makespan[:-1], runs.peak_memory[:-1], cluster)
    overflow = float(memory_overflow(runs.peak_memory[best][None], cluster)[0])
    return Placement(
        graph=pg.name,
        placement=pg.expand(distinct[best]),
        makespan=float(runs.makespan[best]),
        single_device_makespan=float(runs.makespan[-1]),
        initial_makespan=float(runs.makespan[inverse.ravel()[0]]),
        peak_memory=np.asarray(runs.peak_memory[best]),
        fits_memory=overflow == 0,
        overflow=overflow,
        n_nodes=n,
        n_units=pg.n_units,
        evaluations=len(distinct),
        start=start,
    )
