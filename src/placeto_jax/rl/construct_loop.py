"""Host side of the construct agent (`config.agent = "construct"`): the bank of graphs, the
teachers' placements, exact scoring of episodes by the simulator, the training run in a work
directory (checkpoints, metrics, resume) and placing.

Training: `train.imitation` updates imitate each training graph's teacher (given by the caller:
`stages.teachers`, the best fast heuristic on its op graph; devices renamed in order of first
use on a homogeneous cluster, so that the labels are ones a device-equivariant policy can
produce), then `train.iterations`
self-imitation updates: `train.episodes` episodes per graph sampled at `train.temperature`,
each scored by one exact simulation of its op graph (penalised makespan); each graph's best
placement known so far (the teacher's to start with, kept in the checkpoint) is imitated.
Update u draws its graphs and episodes from the run key folded with u, so a resumed run is the
uninterrupted one. Placing: the greedy episode and `samples` sampled ones, the best
by exact simulation; each episode is one evaluation.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.construct import GraphArrays, Lookahead, Machine, Trajectory
from placeto_jax.env.construct_graph import (
    ConstructGraph,
    Padding,
    build,
    in_label_order,
)
from placeto_jax.graphs.core import Graph
from placeto_jax.rl import construct as device
from placeto_jax.rl.checkpoint import (
    Checkpointer,
    Provenance,
    config_digest,
    workdir_lock,
    write_run,
)
from placeto_jax.sim.api import padded, simulate_rows
from placeto_jax.sim.core import SimGraph
from placeto_jax.sim.padded import stack_padded
from placeto_jax.sim.ranking import penalised_makespan

DEFAULT_WIDTH = 64  # policy.width 0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ConstructState:
    """What a checkpoint holds."""

    params: Any  # the policy's parameters
    opt_state: Any  # Adam's moments
    iteration: jax.Array  # [] int32 updates done (imitation and policy-gradient together)
    elite: jax.Array  # [G, Np] int32 the best placement known per training graph, by position
    elite_runtime: jax.Array  # [G] µs its penalised makespan (exact simulation)


def _kept_best(state: ConstructState, ids, devices, runtime: np.ndarray) -> ConstructState:
    """`state` with each graph's elite replaced by its best episode of `devices` [G, B, Np]
    (`runtime` [G, B] µs) where that is faster."""
    best = runtime.argmin(axis=1)
    rows = np.arange(runtime.shape[0])
    faster = runtime[rows, best] < np.asarray(state.elite_runtime)[np.asarray(ids)]
    elite, elite_runtime = np.array(state.elite), np.array(state.elite_runtime)
    chosen = np.asarray(devices)[rows, best]
    for row, index in enumerate(np.asarray(ids).tolist()):
        if faster[row]:
            elite[index], elite_runtime[index] = chosen[row], runtime[row, best[row]]
    return dataclasses.replace(state, elite=jnp.asarray(elite),
                               elite_runtime=jnp.asarray(elite_runtime, jnp.float32))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Bank:
    """Graphs prepared for one compiled program."""

    names: tuple[str, ...]
    graphs: tuple[Graph, ...]  # op graphs
    built: tuple[ConstructGraph, ...]
    arrays: GraphArrays  # [G, ...]
    machine: Machine

    @classmethod
    def of(
        cls,
        named: list[tuple[str, Graph]],
        cluster: Cluster,
        hints: list | None = None,
        reserve: bool = True,
        lookahead: bool = False,
    ) -> Bank:
        """The op graphs `named`, with `hints` (one placement [N] per graph) observed and, with
        `reserve`, their later parameters kept room for (`build`); with `lookahead`, padded for
        the simulator too (`env.construct.Lookahead`)."""
        pad = Padding.covering([g for _, g in named])
        hints = [None] * len(named) if hints is None else hints
        built = tuple(
            build(name, g, cluster, pad, h, reserve)
            for (name, g), h in zip(named, hints, strict=True)
        )
        graphs = tuple(g for _, g in named)
        return cls(
            names=tuple(n for n, _ in named),
            graphs=graphs,
            built=built,
            arrays=GraphArrays.stack(list(built), _lookahead(graphs, built) if lookahead else None),
            machine=Machine.of(cluster),
        )


def _lookahead(graphs: tuple[Graph, ...], built: tuple[ConstructGraph, ...]) -> Lookahead:
    """The graphs padded for the simulator to the bank's positions, and each op's position.
    ValueError where a graph has no hint (`build` refuses one that splits a co-location
    class, as the lookahead assumes)."""
    n_pad = built[0].cost.size
    op_position = np.zeros((len(built), n_pad), np.int32)
    for row, b in enumerate(built):
        if np.any(b.hint[: b.n_ops] < 0):
            raise ValueError(f"{b.name}: the lookahead needs a hint (env.construct_hint=best)")
        op_position[row, b.op_index] = np.arange(b.n_ops)
    sim = SimGraph.from_padded(stack_padded(list(graphs), n_pad), jnp.float32)
    return Lookahead(sim, jnp.asarray(op_position))


def learner_of(config: Config) -> device.Learner:
    width = config.policy.width or DEFAULT_WIDTH
    return device.Learner.make(width, config.policy.rounds, config.train.learning_rate,
                               config.train.grad_clip)  # fmt: skip


def initial_state(
    config: Config, bank: Bank, elite: np.ndarray | None = None, runtime: np.ndarray | None = None
) -> ConstructState:
    """The state a run of `config` starts from: its untrained policy, and `elite` [G, Np]
    with `runtime` [G] µs as each graph's best known placement (default: none known)."""
    learner = learner_of(config)
    params = learner.init(jax.random.key(config.seed), bank.arrays.at(0))
    n_graphs, n_pad = bank.arrays.cost.shape
    elite = np.zeros((n_graphs, n_pad), np.int32) if elite is None else elite
    runtime = np.full(n_graphs, np.inf) if runtime is None else runtime
    elite, runtime = jnp.asarray(elite, jnp.int32), jnp.asarray(runtime, jnp.float32)
    return ConstructState(
        params, learner.optimizer.init(params), jnp.zeros((), jnp.int32), elite, runtime
    )


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A placement the agent imitates first (`stages.teachers`: the best fast heuristic, or it
    improved by search)."""

    placement: np.ndarray  # [N] device per op
    makespan: float  # µs, exact simulation
    evaluations: int = 0  # simulations choosing it (each candidate heuristic's own, one scoring)
    start: np.ndarray | None = None  # [N] the declared start it improved (None: itself)

    @property
    def hint(self) -> np.ndarray:
        """[N] the placement a hinted agent observes: the declared start."""
        return self.placement if self.start is None else self.start


def teacher_rows(
    bank: Bank, cluster: Cluster, taught: list[Teacher]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([G, Np] int32 by position, the same of their hints, [G] µs): each graph's teacher and
    hint, renamed alike in order of first use in the hint on a homogeneous cluster, and the
    teacher's makespan."""
    rows, hints = [], []
    for built, teacher in zip(bank.built, taught, strict=True):
        n = built.n_ops
        row, hint = built.by_position(teacher.placement), built.by_position(teacher.hint)
        both = in_label_order(np.concatenate([hint[:n], row[:n]]), cluster)
        hint[:n], row[:n] = both[:n], both[n:]
        rows.append(row)
        hints.append(hint)
    return np.stack(rows), np.stack(hints), np.asarray([t.makespan for t in taught])


def scores(bank: Bank, cluster: Cluster, graph_ids, devices) -> np.ndarray:
    """[G, B] penalised makespans (µs, exact simulation) of placements by position [G, B, Np]."""
    devices = np.asarray(devices)
    out = np.empty(devices.shape[:2])
    for row, index in enumerate(np.asarray(graph_ids).tolist()):
        built, graph = bank.built[index], bank.graphs[index]
        placements = np.stack([built.placement(p) for p in devices[row]])
        batch = np.zeros((placements.shape[0], padded(graph).n_pad), np.int32)
        batch[:, : graph.n_ops] = placements
        sim = simulate_rows(graph, cluster, batch)
        out[row] = penalised_makespan(sim.makespan, sim.peak_memory, cluster)
    return out


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run's fixed pieces."""

    config: Config
    bank: Bank
    cluster: Cluster
    learner: device.Learner
    teacher: jax.Array  # [G, Np] int32 teachers' devices by position
    reference: np.ndarray  # [G] µs the teachers' makespans
    taught: Trajectory | None = None  # [G, 1, ...] the teachers' own episodes, where they are
    #                                   episodes of the environment (the lookahead teacher)

    @classmethod
    def make(
        cls,
        config: Config,
        named: list[tuple[str, Graph]],
        cluster: Cluster,
        taught: list,
        progress: bool = False,
    ) -> Run:
        """The run on the op graphs `named`, each with its `Teacher` of `taught` (for the
        lookahead teacher, its hint: the lookahead episode from it is played here)."""
        bank = Bank.of(named, cluster)
        rows, hint_rows, reference = teacher_rows(bank, cluster, taught)
        env = config.env
        if env.construct_hint == "best":
            hints = [b.placement(r) for b, r in zip(bank.built, hint_rows, strict=True)]
            bank = Bank.of(named, cluster, hints, env.construct_reserve, env.construct_lookahead)
        learner = learner_of(config)
        if config.train.teacher != "lookahead":
            return cls(config, bank, cluster, learner, jnp.asarray(rows), reference)
        played = lookahead_episodes(learner, bank, progress)
        reference = scores(bank, cluster, np.arange(len(named)), played.device)[:, 0]
        return cls(config, bank, cluster, learner, played.device[:, 0], reference, played)

    def update(self, state: ConstructState) -> tuple[ConstructState, dict[str, float]]:
        """Update number `state.iteration`: imitate each drawn graph's teacher (the first
        `train.imitation` updates), or its best placement known so far after sampling
        `train.episodes` episodes of the policy on it (self-imitation)."""
        config, train = self.config, self.config.train
        step = int(state.iteration)
        draw, roll = jax.random.split(jax.random.fold_in(jax.random.key(config.seed), step))
        n_graphs = len(self.bank.names)
        per_update = min(train.graphs_per_update or n_graphs, n_graphs)
        ids = jax.random.permutation(draw, n_graphs)[:per_update]
        arrays, machine = self.bank.arrays, self.bank.machine
        record, target = {}, self.teacher[ids]
        if step >= train.imitation:
            played = device.episodes(self.learner, state.params, arrays, machine, ids, roll,
                                     "sample", train.episodes, train.temperature)  # fmt: skip
            runtime = scores(self.bank, self.cluster, ids, played.device)
            state = _kept_best(state, ids, played.device, runtime)
            target = state.elite[ids]
            record["train/final_runtime"] = float(
                (runtime / self.reference[np.asarray(ids)][:, None]).mean()
            )
            record["train/best_runtime"] = float(
                (np.asarray(state.elite_runtime) / self.reference).mean()
            )
        if self.taught is not None and step < train.imitation:
            forced = jax.tree.map(lambda a: a[ids], self.taught)
        else:
            forced = device.episodes(self.learner, state.params, arrays, machine, ids, roll,
                                     "teacher", 1, teacher=target)  # fmt: skip
        params, opt_state, loss = device.imitation_update(
            self.learner, state.params, state.opt_state, arrays, ids, forced
        )
        record["train/imitation_loss"] = float(loss)
        return dataclasses.replace(state, params=params, opt_state=opt_state,
                                   iteration=state.iteration + 1), record  # fmt: skip

    def greedy_ratios(self, params: Any) -> np.ndarray:
        """[G] each training graph's greedy episode over its teacher's makespan (one graph at
        a time with the lookahead, whose episodes run unbatched: `device.episodes`)."""
        ids = jnp.arange(len(self.bank.names))
        arrays, machine = self.bank.arrays, self.bank.machine
        groups = ids[:, None] if arrays.lookahead is not None else ids[None]
        played = jnp.concatenate([
            device.episodes(self.learner, params, arrays, machine, group, jax.random.key(0),
                            "greedy", 1).device for group in groups
        ])  # fmt: skip
        return scores(self.bank, self.cluster, ids, played)[:, 0] / self.reference


def lookahead_episodes(learner: device.Learner, bank: Bank, progress: bool) -> Trajectory:
    """[G, 1, ...] each graph's lookahead episode (`device.episodes` mode "lookahead"), one
    graph at a time."""
    played, params = [], learner.init(jax.random.key(0), bank.arrays.at(0))  # (not read)
    for index in tqdm(range(len(bank.names)), desc="lookahead teacher", unit="graph",
                      disable=not progress, dynamic_ncols=True):  # fmt: skip
        played.append(
            device.episodes(
                learner,
                params,
                bank.arrays,
                bank.machine,
                jnp.asarray([index]),
                jax.random.key(0),
                "lookahead",
                1,
            )
        )
    return jax.tree.map(lambda *a: jnp.concatenate(a), *played)


def lookahead_evaluations(graph: Graph, n_devices: int) -> int:
    """Simulations the lookahead of one episode on `graph` runs: one per device other than the
    hint's at each decision (an op outside any co-location class, or a class), and the hint's
    own once."""
    classes = np.full(graph.n_ops, -1) if graph.colocation is None else graph.colocation
    decisions = int(np.sum(classes < 0)) + np.unique(classes[classes >= 0]).size
    return (n_devices - 1) * decisions + 1


def train_in(
    config: Config,
    named: list[tuple[str, Graph]],
    cluster: Cluster,
    workdir: str | os.PathLike,
    taught: list[Teacher],
    progress: bool = True,
    stop_at: int | None = None,
) -> ConstructState:
    """Train the construct agent on the op graphs `named` in `workdir` (run.json, orbax
    checkpoints every `run.checkpoint_every` updates and at the end, metrics.jsonl and
    TensorBoard), each graph imitating its `Teacher` of `taught` first, resuming from the newest
    intact checkpoint; `stop_at` ends after that many
    updates in total without a final checkpoint (how tests stand in for a killed run)."""
    from placeto_jax.rl.loop import MetricsLog  # the paper agent's host loop shares its logs

    run = Run.make(config, named, cluster, taught, progress)
    provenance = Provenance(config_digest(config), tuple(g.digest for _, g in named))
    total = config.train.imitation + config.train.iterations
    end = total if stop_at is None else min(stop_at, total)
    with workdir_lock(workdir):
        write_run(workdir, config, list(run.bank.names), provenance.graphs, cluster)
        checkpointer = Checkpointer(workdir)
        fresh = initial_state(config, run.bank, np.asarray(run.teacher), run.reference)
        state = checkpointer.restore_state(fresh, provenance) or fresh
        start = int(state.iteration)
        log = MetricsLog(workdir, start)
        try:
            if checkpointer.latest_step() is None and total == 0:
                checkpointer.save(0, state, provenance)  # the untrained policy, as a checkpoint
            bar = tqdm(total=total, initial=start, desc="train", unit="update",
                       disable=not progress, dynamic_ncols=True)  # fmt: skip
            with bar:
                for iteration in range(start + 1, end + 1):
                    began = time.perf_counter()
                    state, record = run.update(state)
                    record["train/seconds"] = time.perf_counter() - began
                    every = config.run.eval_every
                    if every and (iteration % every == 0 or iteration == total):
                        ratios = run.greedy_ratios(state.params)
                        record["eval/best_runtime"] = float(np.exp(np.log(ratios).mean()))
                        bar.set_postfix(greedy_vs_teacher=f"{record['eval/best_runtime']:.3f}x")
                    log.write(iteration, record)
                    if iteration % config.run.checkpoint_every == 0 or iteration == total:
                        checkpointer.save(iteration, state, provenance)
                    bar.update(1)
        finally:
            log.close(draw=sys.exc_info()[0] is None)  # no picture after a failure
            checkpointer.close()
    return state


def untrained_params(config: Config) -> Any:
    """The parameters a run of `config` starts from (they depend on neither the graphs nor the
    cluster's values: a two-op chain on placeto-k80s builds them)."""
    chain = Graph.from_edges(cost=[1.0, 1.0], out_bytes=[0, 0], edges=[(0, 1)])
    cluster = Cluster(n_devices=config.n_devices)
    hints = [np.zeros(2, np.int64)] if config.env.construct_lookahead else None
    bank = Bank.of([("template", chain)], cluster, hints, lookahead=config.env.construct_lookahead)
    return initial_state(config, bank).params


def candidates(
    config: Config,
    params: Any,
    bank: Bank,
    index: int,
    key: jax.Array,
    samples: int = 0,
    temperature: float = 1.0,
    mode: str = "policy",
) -> np.ndarray:
    """[1 + samples, N] placements of graph `index` of `bank`: the greedy episode and `samples`
    sampled ones at `temperature` (`mode` "policy"), or 1 + `samples` uniformly random episodes
    (`mode` "uniform": the control without a policy), or the lookahead episode (`mode`
    "lookahead": the rule the lookahead teacher follows, without a policy)."""
    learner, ids = learner_of(config), jnp.asarray([index])
    arrays, machine = bank.arrays, bank.machine
    if mode in ("uniform", "lookahead"):
        count = 1 + samples if mode == "uniform" else 1
        rows = device.episodes(learner, params, arrays, machine, ids, key, mode, count).device[0]
    else:
        rows = device.episodes(learner, params, arrays, machine, ids, key, "greedy", 1).device[0]
        if samples:
            drawn = device.episodes(learner, params, arrays, machine, ids, key, "sample",
                                    samples, temperature).device[0]  # fmt: skip
            rows = jnp.concatenate([rows, drawn])
    built = bank.built[index]
    return np.stack([built.placement(r) for r in np.asarray(rows)])
