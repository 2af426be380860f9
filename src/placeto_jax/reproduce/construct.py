"""The construct agent in the paper's experiments: its config, a run on some op graphs with
the simulations it spends, and its placements through its own pipeline (`config.own_pipeline`;
generalization, table1 and efficiency share them)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence

import jax

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, make_config, own_pipeline
from placeto_jax.graphs.core import Graph
from placeto_jax.pipeline import Placed, Policy, place_many
from placeto_jax.rl.construct_loop import lookahead_evaluations, train_in
from placeto_jax.stages.teachers import config_teachers


def construct_config(
    overrides: Sequence[str], devices: int, cluster: str, seed: int, preset: str = "construct"
) -> Config:
    """Construct preset `preset` with `overrides`, on `devices` devices of cluster preset
    `cluster`."""
    return make_config(preset, list(overrides), n_devices=devices, cluster_preset=cluster,
                       seed=seed)  # fmt: skip


def training_simulations(config: Config, n_graphs: int) -> int:
    """Exact simulations a construct run of `config` on `n_graphs` graphs runs
    (`construct_loop.train_in`): `train.episodes` per drawn graph in each self-imitation
    update, and one greedy episode per graph at each evaluation (imitation simulates none)."""
    train = config.train
    drawn = min(train.graphs_per_update or n_graphs, n_graphs)
    return train.iterations * train.episodes * drawn + _evaluations(config) * n_graphs


def lookahead_simulations(config: Config, graphs: list[Graph], n_devices: int) -> int:
    """Simulations the lookahead of a construct run of `config` on `graphs` adds: one episode
    per graph for the lookahead teacher, and one scoring it (`construct_loop.Run.make`), and at
    each greedy evaluation (`construct_loop.lookahead_evaluations`); 0 without it."""
    if not config.env.construct_lookahead:
        return 0
    teacher = int(config.train.teacher == "lookahead")
    looked = sum(lookahead_evaluations(g, n_devices) for g in graphs)
    return (teacher + _evaluations(config)) * looked + teacher * len(graphs)


def _evaluations(config: Config) -> int:
    """Greedy evaluations a construct run of `config` makes (`construct_loop.train_in`)."""
    total = config.train.imitation + config.train.iterations
    every = config.run.eval_every
    return sum(1 for i in range(1, total + 1) if every and (i % every == 0 or i == total))


def train_construct(
    config: Config,
    named: list[tuple[str, Graph]],
    cluster: Cluster,
    workdir: str | os.PathLike,
    progress: bool = False,
) -> tuple[Policy, int]:
    """A construct policy trained on the op graphs `named` in `workdir` (resumed if there), and
    the simulations its run spends: teachers, self-imitation and greedy evaluations, and the
    lookahead's (`lookahead_simulations`)."""
    taught = config_teachers(config, named, cluster)
    state = train_in(config, named, cluster, workdir, taught, progress)
    spent = sum(t.evaluations for t in taught) + training_simulations(config, len(named))
    spent += lookahead_simulations(config, [g for _, g in named], cluster.n_devices)
    return Policy(config, state.params, target=cluster), spent


def place_construct(
    policy: Policy, name: str, graph: Graph, cluster: Cluster, key: jax.Array
) -> Placed:
    """`graph` placed by `policy` alone (`config.own_pipeline`: greedy + 16 samples, or with
    the lookahead, greedy)."""
    (placed,) = place_many([(name, graph)], cluster, own_pipeline(policy.config), policy, key,
                           compare=False)  # fmt: skip
    return placed


def per_graph_construct(
    config: Config, name: str, graph: Graph, cluster: Cluster, key: jax.Array
) -> tuple[Placed, int, float]:
    """A construct policy of `config` trained on `graph` alone (in a temporary workdir, so
    always from scratch) and placed by `place_construct`: (its placement, the simulations
    of training and placing, their wall seconds)."""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="construct-") as workdir:
        policy, spent = train_construct(config, [(name, graph)], cluster, workdir)
    placed = place_construct(policy, name, graph, cluster, key)
    return placed, spent + placed.evaluations, time.perf_counter() - began
