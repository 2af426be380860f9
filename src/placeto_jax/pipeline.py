"""The place pipeline: the one function that chains placement stages (`place`, `place_many`).

A `config.Pipeline` names the stages. The first placement comes from the policy's episodes
(greedy, and sampled ones; several coarsenings, the best kept) or from the best fast heuristic.
Search stages follow, each on the op graph and each keeping a move only when the exact
simulation ranks it first: policy-guided search over the policy's groups, then over the ops,
then uniformly random proposals, optionally again from the fastest other heuristic, and the
memory squeeze where the placement overflows. Every stage reports the simulations it ran and
its wall time, so a result says what it cost. `place` and `eval`, `train`'s final report and
the matched-budget experiment all call it (docs/architecture.md, "The place pipeline").
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import CUSTOM, Cluster, is_cluster_file, resolve_cluster
from placeto_jax.config import EVERY_OTHER_DEVICE, Config, Pipeline, apply, make_config
from placeto_jax.env.bank import PlacementGraph, build_bank, prepare
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult, fast_heuristics, fastest_fitting, simulations
from placeto_jax.rl import construct_loop
from placeto_jax.rl.checkpoint import Checkpointer, load_cluster, load_run
from placeto_jax.rl.evaluate import (
    Placement,
    best_of_groupings,
    found_on_ops,
    kept_groupings,
    place_graphs,
    rank_visited,
    with_candidate,
)
from placeto_jax.rl.loop import train_and_evaluate
from placeto_jax.rl.train import make_train
from placeto_jax.sim.ranking import rank_key
from placeto_jax.stages.policy_search import search_placements, squeeze_placements
from placeto_jax.stages.starts import STARTS, check_start, started
from placeto_jax.stages.teachers import best_teacher, config_teachers


@dataclasses.dataclass(frozen=True)
class Policy:
    """A trained policy: the config of its run and its parameters, loaded once per command."""

    config: Config  # the run's config (its device count and, for placing, the cluster preset)
    params: Any  # the policy network's parameters (a pytree)
    found: tuple[np.ndarray | None, ...] | None = None  # per graph placed, a placement of its
    #   op graph [N_ops] ranked with the episodes' (training's best: `rl.evaluate.found_on_ops`)
    target: Cluster | None = None  # the cluster it places on; None: its config's preset
    uniform: bool = False  # True: its episodes draw each device uniformly among the allowed
    #   ones, ignoring the weights (the uniform-random control; construct agent only)

    @staticmethod
    def load(checkpoint: str, devices: int | None = None, cluster: str | None = None) -> Policy:
        """The policy in run directory `checkpoint`, placing on the cluster it trained for, or
        on `cluster` (a preset name or a cluster file, as `--cluster` takes) with `devices`
        devices (default: the run's count, or the file's); ValueError if the paper agent's run
        has another device count (the construct agent's weights place on any count)."""
        config, _ = load_run(checkpoint)
        target = _placing_cluster(checkpoint, config, devices, cluster)
        if config.agent == "construct":  # its weights fit any count
            config = dataclasses.replace(config, n_devices=target.n_devices)
        if target.n_devices != config.n_devices:
            raise ValueError(
                f"the policy in {checkpoint} places on {config.n_devices} devices, not "
                f"{target.n_devices}; train one for {target.n_devices} devices"
            )
        config = dataclasses.replace(config, cluster_preset=target.preset_name())
        return Policy(config, _restore_params(checkpoint, config), target=target)

    def cluster(self) -> Cluster:
        """The cluster the policy places on."""
        return self.target or Cluster.preset(self.config.cluster_preset, self.config.n_devices)


def _placing_cluster(
    checkpoint: str, config: Config, devices: int | None, spec: str | None
) -> Cluster:
    """The cluster `Policy.load` places on: the run's own (a preset's on `devices` devices
    when they differ), or `spec` (`resolve_cluster`) on `devices` or the run's count."""
    own = load_cluster(checkpoint, config)
    if spec is not None:
        count = devices if devices is not None or is_cluster_file(spec) else own.n_devices
        return resolve_cluster(spec, count)
    if devices is None or devices == own.n_devices:
        return own
    if own.preset_name() == CUSTOM:
        raise ValueError(
            f"the policy in {checkpoint} trained for a custom cluster of {own.n_devices} "
            f"devices; give a cluster (a preset or a cluster file) of {devices} devices"
        )
    return Cluster.preset(own.name, devices)


def train(
    graphs: Graph | Sequence[tuple[str, Graph]],
    cluster: Cluster,
    workdir: str,
    preset: str | None = "tiny",
    overrides: Sequence[str] = (),
    seed: int = 0,
    progress: bool = False,
) -> Policy:
    """A policy trained with REINFORCE on `graphs` (one op graph, or named ones) for `cluster`,
    config from `preset` and `section.field=value` `overrides`; checkpoints in `workdir`, and a
    run there is resumed (`placeto-jax train` from Python). Its `found` holds the best
    placement the training episodes visited on each graph, a candidate when they are placed."""
    named = [("graph", graphs)] if isinstance(graphs, Graph) else list(graphs)
    for name, graph in named:
        graph.check_has_compute(name)
    config = make_config(preset, list(overrides), n_devices=cluster.n_devices,
                         cluster_preset=cluster.preset_name(), seed=seed)  # fmt: skip
    if config.agent == "construct":
        taught = config_teachers(config, named, cluster)
        state = construct_loop.train_in(config, named, cluster, workdir, taught, progress)
        return Policy(config, state.params, target=cluster)
    prepared = [prepare(n, g, config.run.group_target, cluster.delta1) for n, g in named]
    result = train_and_evaluate(config, prepared, workdir, progress=progress, cluster=cluster)
    return Policy(config, result.state.params, found_on_ops(result.state, prepared), cluster)


def untrained(policy: Policy) -> Policy:
    """The policy a run of `policy.config` starts from (its seed's initial weights, which do not
    depend on the graphs): the control that shows what training added."""
    config = policy.config
    if config.agent == "construct":
        return Policy(config, construct_loop.untrained_params(config), target=policy.target)
    run = _template_run(config)
    params = run.init(jax.random.key(config.seed), run.env_params).params
    return Policy(config, params, target=policy.target)


def uniform_random(policy: Policy) -> Policy:
    """The uniform-random control of `policy` (the construct agent's): its run's untrained
    weights, with every episode drawing each device uniformly among the ones the mask allows.
    Through a pipeline it places as the policy would, hint included, but by chance: what the
    policy adds over a random choice. ValueError for the paper agent, whose episodes have no
    uniform mode."""
    if policy.config.agent != "construct":
        raise ValueError(
            "the uniform-random control draws the construct agent's episodes; the paper "
            "agent has none (compare with its untrained control)"
        )
    return dataclasses.replace(untrained(policy), uniform=True)


def _template_run(config: Config) -> Any:
    """The paper agent's trainer on a two-op chain of placeto-k80s: its parameters' shapes and
    initial values depend on neither the graph nor the cluster's values."""
    chain = Graph.from_edges(cost=[1.0, 1.0], out_bytes=[0, 0], edges=[(0, 1)])
    bank = build_bank([PlacementGraph("template", chain)], config.run.buckets)
    return make_train(config, bank, Cluster(n_devices=config.n_devices))


def _restore_params(checkpoint: str, config: Config) -> Any:
    """The parameters in `checkpoint`, restored against the shapes `config` gives."""
    if config.agent == "construct":
        template = construct_loop.untrained_params(config)
    else:
        run = _template_run(config)
        template = jax.eval_shape(run.init, jax.random.key(0), run.env_params).params
    checkpointer = Checkpointer(checkpoint, create=False)
    try:
        return checkpointer.restore_params(template)
    finally:
        checkpointer.close()


@dataclasses.dataclass(frozen=True)
class Stage:
    """What one stage of the pipeline did to one graph's placement."""

    name: str  # "heuristics", "start", "episodes", "search-groups", "search-ops", "random",
    #            "second-start" or "squeeze"
    evaluations: int  # simulations it ran (episode steps, search steps and exact rankings)
    wall_s: float  # s, the stage's wall time over the graphs it ran on, shared evenly
    makespan: float  # µs, of the placement after it

    def to_json(self) -> dict:
        return {
            "stage": self.name,
            "evaluations": self.evaluations,
            "wall_s": self.wall_s,
            "makespan_us": self.makespan,
        }


@dataclasses.dataclass(frozen=True)
class Placed:
    """One graph placed by the pipeline."""

    result: Placement  # the placement, simulated exactly on the op graph
    stages: tuple[Stage, ...]  # in the order they ran
    best_heuristic: PlacerResult | None  # the best fast heuristic on the op graph (compared)

    @property
    def evaluations(self) -> int:
        """Simulations every stage ran, together."""
        return sum(s.evaluations for s in self.stages)

    @property
    def wall_s(self) -> float:
        return sum(s.wall_s for s in self.stages)


def place(
    graph: Graph,
    cluster: Cluster,
    pipeline: Pipeline | None = None,
    policy: Policy | None = None,
    key: jax.Array | None = None,
    *,
    name: str = "graph",
    compare: bool = True,
    progress: bool = False,
) -> Placed:
    """Place `graph` (an op graph) on `cluster` with `pipeline`'s stages (`place_many`)."""
    (placed,) = place_many([(name, graph)], cluster, pipeline, policy, key, compare=compare,
                           progress=progress)  # fmt: skip
    return placed


def place_many(
    graphs: Sequence[tuple[str, Graph]],
    cluster: Cluster,
    pipeline: Pipeline | None = None,
    policy: Policy | None = None,
    key: jax.Array | None = None,
    *,
    compare: bool = True,
    heuristics: list[list[PlacerResult]] | None = None,
    progress: bool = False,
) -> list[Placed]:
    """Place each named op graph of `graphs` on `cluster` with `pipeline`'s stages, the policy's
    episodes of all graphs in one bank (one compiled program). `key` (default: key 0) draws the
    sampled episodes and the heuristics that need one; `compare`: run the fast heuristics on
    each op graph to report the best (`Placed.best_heuristic`); `heuristics`: per graph, their
    results when already run (`fast_heuristics` with `key`; their stage then logs no wall
    time); `progress`: bars over the heuristics, the construct agent's episodes and the search
    stages. ValueError before any work when a stage needs a policy and none is given, or the
    policy places for another device count."""
    pipeline = Pipeline() if pipeline is None else pipeline
    check(pipeline, policy, cluster)
    for name, graph in graphs:
        graph.check_has_compute(name)
    key = jax.random.key(0) if key is None else key
    named = list(graphs)
    need_heuristics = (
        compare or pipeline.source == "heuristics" or pipeline.start == "best-op"
        or pipeline.second_start
    )  # fmt: skip
    heuristics_s = 0.0
    if need_heuristics and heuristics is None:
        began = time.perf_counter()
        bar = tqdm(named, desc="heuristics", unit="graph", disable=not progress)
        heuristics = [fast_heuristics(g, cluster, key) for _, g in bar]
        heuristics_s = (time.perf_counter() - began) / len(named)
    log: list[list[Stage]] = [[] for _ in named]
    if pipeline.source == "heuristics":
        placed, graphs_placed = _from_heuristics(named, cluster, heuristics, heuristics_s, log)
    else:
        placed, graphs_placed = _episodes(named, cluster, pipeline, policy, key, heuristics,
                                          heuristics_s, log, progress)  # fmt: skip
    placed = _searches(named, cluster, pipeline, policy, placed, graphs_placed, heuristics, log,
                       key, progress)  # fmt: skip
    best = [fastest_fitting(h) for h in heuristics] if compare and heuristics else None
    return [
        Placed(p, tuple(stages), None if best is None else best[i])
        for i, (p, stages) in enumerate(zip(placed, log, strict=True))
    ]


def check(
    pipeline: Pipeline, policy: Policy | None, cluster: Cluster, episodes: bool = True
) -> None:
    """ValueError when `pipeline` needs a policy and `policy` is None (`episodes`: for the
    first placement too, else for its searches alone), or `policy` places for another device
    count than `cluster`'s, or the start names nothing."""
    searches = (pipeline.search_groups, pipeline.search_ops, pipeline.random_passes)
    needs = pipeline.uses_policy if episodes else any(searches)
    if needs and policy is None:
        raise ValueError(
            "this pipeline places with a policy: give one (--checkpoint), or use the "
            "heuristics pipeline"
        )
    if (
        policy is not None
        and policy.config.agent == "paper"
        and (policy.config.n_devices != cluster.n_devices)
    ):  # the construct agent places on any device count
        raise ValueError(
            f"the policy places on {policy.config.n_devices} devices, the cluster has "
            f"{cluster.n_devices}"
        )
    if policy is not None and policy.uniform and policy.config.agent != "construct":
        raise ValueError("uniformly random episodes are the construct agent's, not the paper's")
    if pipeline.start:
        check_start(pipeline.start)


def _from_heuristics(named, cluster, heuristics, heuristics_s, log):
    """The best fast heuristic's placement of each graph, as a `Placement`."""
    out = []
    for (name, graph), results, stages in zip(named, heuristics, log, strict=True):
        best = fastest_fitting(results)
        placed = rank_visited(PlacementGraph(name, graph), cluster, best.placement[None],
                              best.method)  # fmt: skip
        stages.append(Stage("heuristics", simulations(results), heuristics_s, placed.makespan))
        out.append(placed)
    return out, [PlacementGraph(name, graph) for name, graph in named]


def _episodes(named, cluster, pipeline, policy, key, heuristics, heuristics_s, log, progress):
    """The policy's placement of each graph: its greedy (and sampled) episodes at each
    coarsening, the best kept; (placements, the kept coarsening's graphs)."""
    if policy.config.agent == "construct":
        return _construct_episodes(named, cluster, pipeline, policy, key, heuristics, log,
                                   progress)  # fmt: skip
    config = episode_config(policy.config, pipeline)
    start = pipeline.start or None
    if start == "best-op":
        for stages, results in zip(log, heuristics, strict=True):
            best = fastest_fitting(results)
            stages.append(Stage("heuristics", simulations(results), heuristics_s, best.makespan))
    began = time.perf_counter()
    groupings = []  # (config, graphs) per coarsening: every graph coarsened before any work
    for target in pipeline.group_targets or (None,):
        at = config if target is None else apply(config, {"run.group_target": target})
        graphs = [prepare(n, g, at.run.group_target, cluster.delta1) for n, g in named]
        groupings.append((at, starting_graphs(graphs, at, start, key, cluster, heuristics)))
    start_s = (time.perf_counter() - began) / len(named)
    began = time.perf_counter()
    per_grouping = [
        place_graphs(at, policy.params, graphs, cluster, pipeline.samples, key,
                     pipeline.temperature)
        for at, graphs in groupings
    ]  # fmt: skip
    placed = best_of_groupings(per_grouping)
    kept = [groupings[k][1][i] for i, k in enumerate(kept_groupings(per_grouping))]
    if policy.found is not None:
        placed = [with_candidate(p, pg, cluster, row)
                  for p, pg, row in zip(placed, kept, policy.found, strict=True)]  # fmt: skip
    wall = (time.perf_counter() - began) / len(named)
    for i, (stages, p) in enumerate(zip(log, placed, strict=True)):
        found = sum(g[i].start.evaluations for _, g in groupings if g[i].start is not None)
        if found:  # the start's own simulations (best-op's are the heuristics stage's)
            stages.append(Stage("start", found, start_s, p.initial_makespan))
        stages.append(Stage("episodes", p.episode_steps + p.evaluations, wall, p.makespan))
    return placed, kept


def _construct_episodes(named, cluster, pipeline, policy, key, heuristics, log, progress):
    """The construct agent's placement of each op graph: the best of its greedy episode and
    `pipeline.samples` sampled ones by exact simulation; each graph's episodes draw from `key`
    folded with the graph's content, so a graph is placed alike alone or beside others. A
    hint's heuristics already in `heuristics` are not run again (their time still counts)."""
    if pipeline.start or pipeline.group_targets or pipeline.search_groups:
        raise ValueError(
            "the construct agent places each op once from nothing: pipeline.start, "
            "group_targets and search_groups are for the paper agent"
        )
    placed, graphs = [], []
    bar = tqdm(list(zip(named, log, strict=True)), desc="episodes", unit="graph",
               disable=not progress)  # fmt: skip
    for i, ((name, graph), stages) in enumerate(bar):
        began = time.perf_counter()
        hints = None
        if policy.config.env.construct_hint == "best":  # a declared start every op observes
            ran = heuristics[i] if heuristics else []
            hinted = best_teacher(graph, cluster, key, ran)
            hints = [hinted[0].placement]
            earlier = sum(r.wall_s for r in hinted if any(r is h for h in ran))
            stages.append(Stage("heuristics", simulations(hinted),
                                time.perf_counter() - began + earlier,
                                hinted[0].makespan))  # fmt: skip
            began = time.perf_counter()
        env = policy.config.env
        bank = construct_loop.Bank.of([(name, graph)], cluster, hints, env.construct_reserve,
                                      env.construct_lookahead)  # fmt: skip
        graph_key = jax.random.fold_in(key, int(graph.digest[:8], 16))
        mode = "uniform" if policy.uniform else "policy"
        rows = construct_loop.candidates(policy.config, policy.params, bank, 0, graph_key,
                                         pipeline.samples, pipeline.temperature, mode)  # fmt: skip
        pg = PlacementGraph(name, graph)
        ranked = rank_visited(pg, cluster, rows, "construct")
        p = dataclasses.replace(ranked, episodes=len(rows), temperature=pipeline.temperature)
        looked = 0
        if env.construct_lookahead and not policy.uniform:
            looked = len(rows) * construct_loop.lookahead_evaluations(graph, cluster.n_devices)
        stages.append(Stage("episodes", p.evaluations + looked, time.perf_counter() - began,
                            p.makespan))  # fmt: skip
        placed.append(p)
        graphs.append(pg)
    return placed, graphs


def episode_config(config: Config, pipeline: Pipeline) -> Config:
    """The run's `config` as `pipeline`'s episodes play it: from its start."""
    return starting_config(config, pipeline.start or None)


def starting_config(config: Config, start: str | None) -> Config:
    """`config` with episodes from random placements (`start` "random"), from given starts
    (any other start), or as it is (None)."""
    if start is None:
        return config
    check_start(start)
    kind = "random" if start == "random" else "given"
    return apply(config, {"env.initial_placement": kind})


def starting_graphs(
    graphs: list[PlacementGraph],
    config: Config,
    start: str | None,
    key: jax.Array,
    cluster: Cluster,
    heuristics: list[list[PlacerResult]] | None = None,
) -> list[PlacementGraph]:
    """`graphs` with the start `start` names (`stages.starts.started`) when `config` starts
    episodes from given starts; ValueError when it does and no start is named."""
    if config.env.initial_placement != "given":
        return graphs
    if start is None:
        raise ValueError(
            "this policy was trained from given starts (env.initial_placement=given); "
            f"name one with pipeline.start ({', '.join(STARTS[1:])} or a placement file)"
        )
    return started(graphs, cluster, start, key, heuristics)


def _searches(named, cluster, pipeline, policy, placed, groups, heuristics, log, key, progress):
    """`placed` improved by the pipeline's search stages, in order; stage i's random proposals
    drawn from `key` folded with i."""
    config = policy.config if policy is not None else None
    op_graphs = [PlacementGraph(n, g) for n, g in named]
    ops = pipeline.search_ops
    if ops == EVERY_OTHER_DEVICE:
        ops = max(cluster.n_devices - 1, 1)
    random = pipeline.proposer == "random"
    stages = [
        ("search-groups", pipeline.search_groups, groups,
         dict(proposer="random" if random else "policy", on_groups=True)),
        ("search-ops", ops, op_graphs,
         dict(proposer=pipeline.proposer)),
        ("random", pipeline.random_passes, op_graphs, dict(proposer="random")),
    ]  # fmt: skip
    first = placed
    for i, (name, passes, graphs, how) in enumerate(stages):
        if passes:
            search = functools.partial(
                search_placements, config, policy.params, graphs, cluster=cluster, passes=passes,
                key=jax.random.fold_in(key, i), progress=progress, **how,
            )  # fmt: skip
            placed = _stage(name, log, placed, search)
    if pipeline.second_start and ops:
        placed = _second_start(op_graphs, cluster, pipeline, policy, ops, first, placed,
                               heuristics, log, key, progress)  # fmt: skip
    if pipeline.squeeze:
        placed = _stage("squeeze", log, placed,
                        lambda p: squeeze_placements(op_graphs, p, cluster))  # fmt: skip
    return placed


def _stage(name, log, placed, run) -> list[Placement]:
    """`run(placed)`, logged as stage `name` per graph: its simulations and wall time."""
    began = time.perf_counter()
    after = run(placed)
    wall = (time.perf_counter() - began) / len(placed)
    for stages, p, q in zip(log, placed, after, strict=True):
        stages.append(Stage(name, _spent(p, q), wall, q.makespan))
    return after


def _spent(before: Placement, after: Placement) -> int:
    """Simulations run between two states of a placement: exact rankings and search steps."""
    return (
        after.evaluations - before.evaluations + after.polish_steps - before.polish_steps
        + after.episode_steps - before.episode_steps
    )  # fmt: skip


def _second_start(op_graphs, cluster, pipeline, policy, ops, first, placed, heuristics, log,
                  key, progress) -> list[Placement]:  # fmt: skip
    """Each placement of `placed`, or, when it ranks first, the op-level search (and random
    passes) from the fastest heuristic other than the one `first` started from, memory aside:
    where the start overflows, relief can fit a fast placement far from it."""
    began = time.perf_counter()
    config = policy.config
    out, spent = [], []
    for pg, p, q, results in zip(op_graphs, first, placed, heuristics, strict=True):
        others = [r for r in results if r.method != _method_of(p.start)]
        if not others:
            out.append(q)
            spent.append(0)
            continue
        fastest = min(others, key=lambda r: r.makespan)
        other = rank_visited(pg, cluster, fastest.placement[None], fastest.method)
        cost = other.evaluations
        stages = ((ops, pipeline.proposer, 1), (pipeline.random_passes, "random", 2))
        for passes, proposer, i in stages:
            if passes:
                (after,) = search_placements(config, policy.params, [pg], [other], cluster,
                                             passes, proposer, jax.random.fold_in(key, i),
                                             progress)  # fmt: skip
                cost += _spent(other, after)
                other = after
        key = (rank_key(q.makespan, q.fits_memory, q.overflow),
               rank_key(other.makespan, other.fits_memory, other.overflow))  # fmt: skip
        out.append(q if key[0] <= key[1] else other)
        spent.append(cost)
    wall = (time.perf_counter() - began) / len(placed)
    for stages, p, cost in zip(log, out, spent, strict=True):
        stages.append(Stage("second-start", cost, wall, p.makespan))
    return out


def _method_of(start: str) -> str:
    """The method behind a start's name ("m-sct (best-op)" -> "m-sct")."""
    return start.split(" (")[0]


def pipeline_json(pipeline: Pipeline) -> dict:
    """The resolved pipeline, every field."""
    doc = dataclasses.asdict(pipeline)
    doc["group_targets"] = list(pipeline.group_targets)
    return doc
