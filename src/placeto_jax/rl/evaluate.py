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
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, apply
from placeto_jax.env.bank import PlacementGraph, build_bank, prepare
from placeto_jax.env.core import EnvParams
from placeto_jax.env.start import with_start
from placeto_jax.rl.train import EVAL_KEY, Train, TrainState, make_train
from placeto_jax.sim.api import simulate, single_device
from placeto_jax.sim.padded import fine_bucket
from placeto_jax.sim.ranking import memory_overflow, rank_key, rank_keys


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
    run = make_train(config, build_bank(graphs, config.run.buckets), cluster)
    return place_with(
        run, params, run.env_params, graphs, cluster, samples, key, temperature, found
    )


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


def polish_placements(
    config: Config,
    params: Any,
    graphs: list[PlacementGraph],
    placed: list[Placement],
    cluster: Cluster,
    passes: int,
    proposer: str = "policy",
    block: int = 1,
    progress: bool = False,
    on_groups: bool = False,
) -> list[Placement]:
    """`placed` (one per graph of `graphs`) improved by `passes` passes of policy-guided search
    on each op graph (co-located ops stay tied), all in one bank: one compiled program;
    `on_groups`: on each graph as given instead, moving whole groups (a placement that splits
    a group, which the policy's episodes on that graph never do, is regrouped within it as in
    improve mode), every move still judged on the op graph. `block`
    1: one proposal at a time (`Train.polish`); more: `block` proposals at a time, simulated
    together (`polish_in_blocks`); `progress`: a bar over the search's steps. Each result is
    the better of its placement and the search's, by exact simulation; its start and initial
    makespan stay the first placement's, its `evaluations` add the ranking's and
    `polish_steps` counts the search's simulations."""
    if passes < 1:
        raise ValueError(f"polishing needs passes >= 1, got {passes}")
    if block < 1:
        raise ValueError(f"polishing needs a block of >= 1 proposals, got {block}")
    if on_groups and block > 1:
        raise ValueError("polishing groups proposes one move at a time (block 1)")
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
    run = make_train(config, build_bank(started, polish_buckets(config, started)), cluster)
    if block == 1:
        polished = polish_with(run, params, run.env_params, started, cluster, proposer, progress)
    else:
        polished = polish_in_blocks(run, params, started, cluster, block, proposer, progress)
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


def polish_in_blocks(
    run: Train,
    params: Any,
    graphs: list[PlacementGraph],
    cluster: Cluster,
    block: int,
    proposer: str = "policy",
    progress: bool = False,
) -> list[Placement]:
    """Each graph of `run`'s bank (`graphs`, in that order, each its own op graph with a given
    start) improved by policy-guided search `block` proposals at a time, in the bank's unit
    order for `env.passes` passes: the next `block` units each get `polish`'s proposal from the
    current placement (`Train.propose`), the moves are simulated together (one batch, float64),
    and of the moves that help, the best alone and the best k together for every k (one more
    batch) are compared; the fastest, fitting memory first, becomes the current placement.
    So a block costs its moves plus the helpful ones less one, and a pass of N units costs
    about N simulations, as one-at-a-time polishing does, but in batches. `polish_steps`
    counts every simulation, the start's included; `progress`: a bar over the proposals."""
    config = run.trainer.config
    bank = jax.device_get(run.env_params.bank)
    n_pad = run.trainer.n_pad
    placements = []
    proposals = config.env.passes * int(np.sum(bank.n_units[: len(graphs)]))
    bar = tqdm(total=proposals, desc="polish", unit="step", disable=not progress)
    for i, pg in enumerate(graphs):
        op_graph, n = pg.graph, pg.graph.n_ops
        unit_of = np.asarray(bank.unit[i, :n])
        n_units = int(bank.n_units[i])
        order = np.asarray(bank.order[i, :n_units])
        current = np.asarray(pg.start.placement, dtype=np.int64)
        first_run = simulate(op_graph, cluster, current[None])
        (score,) = rank_keys(first_run.makespan, first_run.peak_memory, cluster)
        now, steps = first_run[0], 1
        total = config.env.passes * n_units
        for first in range(0, total, block):
            at = first + np.arange(block, dtype=np.int32)
            bar.update(min(block, total - first))
            proposed = run.propose(
                params, run.env_params, i, _padded(current, n_pad), _padded(now.start, n_pad),
                at, jax.random.fold_in(jax.random.key(EVAL_KEY), first), proposer=proposer,
            )  # fmt: skip
            moves = _moves(current, unit_of, order[at[at < total] % n_units],
                           np.asarray(proposed)[at < total])  # fmt: skip
            if not moves:
                continue
            trials = np.stack([_moved(current, unit_of, m) for m in moves])
            singles = simulate(op_graph, cluster, trials)
            scores = rank_keys(singles.makespan, singles.peak_memory, cluster)
            helpful = [j for j in sorted(range(len(moves)), key=lambda j: scores[j])
                       if scores[j] < score]  # fmt: skip
            steps += len(moves)
            if not helpful:
                continue
            # the best k helpful moves together, for k = 1 (simulated already) to all of them
            tried = []
            for j in helpful:
                tried.append(_moved(tried[-1] if tried else current, unit_of, moves[j]))
            runs, keys = [singles[helpful[0]]], [scores[helpful[0]]]
            if len(tried) > 1:
                combined = simulate(op_graph, cluster, np.stack(tried[1:]))
                runs += [combined[k] for k in range(len(tried) - 1)]
                keys += rank_keys(combined.makespan, combined.peak_memory, cluster)
                steps += len(tried) - 1
            best = min(range(len(tried)), key=keys.__getitem__)
            current, now, score = tried[best], runs[best], keys[best]
        ranked = rank_visited(pg, cluster, np.stack([pg.start.placement, current]),
                              start_name(config, pg))  # fmt: skip
        placements.append(dataclasses.replace(ranked, polish_steps=steps))
    bar.close()
    return placements


def _padded(x: np.ndarray, n_pad: int) -> np.ndarray:
    out = np.zeros(n_pad, dtype=np.int32 if x.dtype.kind in "iu" else np.float32)
    out[: x.size] = x
    return out


def _moves(current, unit_of, units, devices) -> list[tuple[int, int]]:
    """(unit, device) for each proposal that moves its unit somewhere else."""
    return [
        (int(u), int(d))
        for u, d in zip(units, devices, strict=True)
        if d != current[np.argmax(unit_of == u)]
    ]


def _moved(current: np.ndarray, unit_of: np.ndarray, move: tuple[int, int]) -> np.ndarray:
    """`current` with every op of the unit of `move` (unit, device) on that device."""
    unit, device = move
    return np.where(unit_of == unit, device, current)


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
    keys = rank_keys(runs.makespan[:-1], runs.peak_memory[:-1], cluster)
    best = min(range(len(keys)), key=keys.__getitem__)
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
