"""Host side of the constructive policy: the bank of graphs, the teacher's placements, exact
scoring of episodes by the simulator, training (imitation, then policy gradient) and placing.

Training: `imitation_updates` updates imitate each training graph's teacher (the best of
`TEACHERS` on its op graph, devices renamed in order of first use so that the labels are the
ones a device-equivariant policy can produce), then `rl_updates` REINFORCE updates on
`episodes` sampled episodes per graph, each scored by one exact simulation of its op graph
(penalised makespan), advantage = (mean of the graph's batch - own) / mean.
Placing: the greedy episode and `samples` sampled ones, the best by exact simulation; each
episode is one evaluation.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.env.construct import GraphArrays, Machine
from placeto_jax.env.construct_graph import ConstructGraph, Padding, build
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import fastest_fitting, run_method
from placeto_jax.rl import construct as device
from placeto_jax.sim.api import padded, simulate_rows
from placeto_jax.sim.ranking import penalised_makespan

TEACHERS = ("metis", "heft", "critical-path", "m-etf", "m-sct")  # the fast heuristics that
# finish in a few seconds on 5,000 ops (fit-fastest and m-topo never won a family graph)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The constructive policy's training and placing settings."""

    width: int = 64  # hidden units
    rounds: int = 3  # message-passing rounds
    learning_rate: float = 1e-3
    imitation_updates: int = 300  # updates imitating the teachers
    rl_updates: int = 0  # REINFORCE updates after imitation
    episodes: int = 8  # sampled episodes per graph and REINFORCE update
    graphs_per_update: int = 2
    entropy: float = 0.01  # entropy weight of the REINFORCE loss
    samples: int = 16  # sampled episodes when placing, besides the greedy one
    temperature: float = 1.0  # of the sampled episodes
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Bank:
    """Graphs prepared for one compiled program."""

    names: tuple[str, ...]
    graphs: tuple[Graph, ...]
    built: tuple[ConstructGraph, ...]
    arrays: GraphArrays  # [G, ...]
    machine: Machine

    @classmethod
    def of(cls, named: list[tuple[str, Graph]], cluster: Cluster) -> Bank:
        pad = Padding.covering([g for _, g in named])
        built = tuple(build(name, g, cluster, pad) for name, g in named)
        return cls(
            names=tuple(n for n, _ in named),
            graphs=tuple(g for _, g in named),
            built=built,
            arrays=GraphArrays.stack(list(built)),
            machine=Machine.of(cluster),
        )


def homogeneous(cluster: Cluster) -> bool:
    """Every device alike: renaming devices changes no makespan."""
    return all(
        len(set(a.tolist())) == 1
        for a in (cluster.speed_array, cluster.memory_array, cluster.bandwidth_array)
    )


def first_use_labels(by_position: np.ndarray) -> np.ndarray:
    """Devices renamed 0, 1, ... in order of first appearance along the positions."""
    mapping, out = {}, np.empty_like(by_position)
    for i, d in enumerate(by_position.tolist()):
        out[i] = mapping.setdefault(d, len(mapping))
    return out


def teacher_placements(bank: Bank, cluster: Cluster, key: jax.Array) -> np.ndarray:
    """[G, Np] int32 by position: the best of `TEACHERS` on each graph of the bank (renamed in
    order of first use on a homogeneous cluster)."""
    rows = []
    for built, graph in zip(bank.built, bank.graphs, strict=True):
        best = fastest_fitting([run_method(m, graph, cluster, key) for m in TEACHERS])
        row = built.by_position(best.placement)
        if homogeneous(cluster):
            row[: built.n_ops] = first_use_labels(row[: built.n_ops])
        rows.append(row)
    return np.stack(rows)


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


def initial(bank: Bank, settings: Settings) -> tuple[device.Learner, Any]:
    """The learner and the parameters a training run of `settings` starts from (the untrained
    control)."""
    learner = device.Learner.make(settings.width, settings.rounds, settings.learning_rate)
    return learner, learner.init(jax.random.key(settings.seed), bank.arrays.at(0))


def train(
    bank: Bank, cluster: Cluster, settings: Settings, progress: bool = True
) -> tuple[device.Learner, Any, list[dict]]:
    """Train on every graph of `bank` (module docstring): (learner, params, one log row per
    update)."""
    learner, params = initial(bank, settings)
    key = jax.random.fold_in(jax.random.key(settings.seed), 1)
    opt_state = learner.optimizer.init(params)
    n_graphs = len(bank.names)
    per_update = min(settings.graphs_per_update, n_graphs)
    log: list[dict] = []
    if settings.imitation_updates:
        teachers = jnp.asarray(teacher_placements(bank, cluster, key))
    total = settings.imitation_updates + settings.rl_updates
    bar = tqdm(range(total), desc="train", unit="update", disable=not progress)
    for update in bar:
        key, draw, roll = jax.random.split(key, 3)
        ids = jnp.asarray(np.asarray(jax.random.permutation(draw, n_graphs))[:per_update])
        began = time.perf_counter()
        if update < settings.imitation_updates:
            forced = device.episodes(learner, params, bank.arrays, bank.machine, ids, roll,
                                     "teacher", 1, teacher=teachers[ids])  # fmt: skip
            params, opt_state, loss = device.imitation_update(
                learner, params, opt_state, bank.arrays, ids, forced
            )
            row = {"update": update, "phase": "imitation", "loss": float(loss)}
        else:
            played = device.episodes(learner, params, bank.arrays, bank.machine, ids, roll,
                                     "sample", settings.episodes, settings.temperature)  # fmt: skip
            runtime = scores(bank, cluster, ids, played.device)
            mean = runtime.mean(axis=1, keepdims=True)
            advantage = jnp.asarray((mean - runtime) / mean, jnp.float32)
            params, opt_state, loss = device.policy_gradient_update(
                learner, params, opt_state, bank.arrays, ids, played, advantage,
                settings.entropy, settings.temperature,
            )  # fmt: skip
            row = {"update": update, "phase": "reinforce", "loss": float(loss),
                   "runtime_ms": float(runtime.mean()) / 1e3}  # fmt: skip
        row["seconds"] = time.perf_counter() - began
        bar.set_postfix(loss=f"{row['loss']:.4f}")
        log.append(row)
    return learner, params, log


@dataclasses.dataclass(frozen=True)
class Placed:
    """The best episode on one graph."""

    name: str
    placement: np.ndarray  # [N] device per op
    makespan: float  # µs, penalised (exact simulation)
    greedy: float  # µs, the greedy episode's
    evaluations: int  # episodes simulated
    wall_s: float


def place(
    learner: device.Learner,
    params: Any,
    bank: Bank,
    cluster: Cluster,
    key: jax.Array,
    samples: int = 16,
    temperature: float = 1.0,
    mode: str = "policy",
) -> list[Placed]:
    """Each graph of `bank` placed by its greedy episode and `samples` sampled ones (`mode`
    "policy"), or by 1 + `samples` uniformly random episodes (`mode` "uniform", the control
    without a policy); the best by exact simulation."""
    out = []
    for index, name in enumerate(bank.names):
        began = time.perf_counter()
        ids = jnp.asarray([index])
        if mode == "uniform":
            rows = device.episodes(learner, params, bank.arrays, bank.machine, ids, key,
                                   "uniform", 1 + samples).device[0]  # fmt: skip
        else:
            greedy = device.episodes(learner, params, bank.arrays, bank.machine, ids, key,
                                     "greedy", 1).device[0]  # fmt: skip
            rows = greedy
            if samples:
                drawn = device.episodes(learner, params, bank.arrays, bank.machine, ids, key,
                                        "sample", samples, temperature).device[0]  # fmt: skip
                rows = jnp.concatenate([greedy, drawn])
        runtime = scores(bank, cluster, ids, rows[None])[0]
        best = int(np.argmin(runtime))
        out.append(
            Placed(name, bank.built[index].placement(np.asarray(rows[best])),
                   float(runtime[best]), float(runtime[0]), int(runtime.size),
                   time.perf_counter() - began)
        )  # fmt: skip
    return out
