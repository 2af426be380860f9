"""Placeto trained on one graph at a time, in memory, with a learning curve: the experiments'
way to train many short runs without a compile per graph.

All graphs of a `PlacetoBench` are padded into one bank, so training on any one of them (the
bank's environment parameters playing only that graph: data, not a shape) runs the same
compiled programs: one compile per config, not per graph.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.env.core import EnvParams
from placeto_jax.placers.base import best_so_far
from placeto_jax.rl.evaluate import Placement, found_placements, place_with
from placeto_jax.rl.train import TrainState, make_train
from placeto_jax.sim.ranking import penalised_makespan


@dataclasses.dataclass(frozen=True)
class Curve:
    """Best placement found so far (by penalised makespan) against training cost, one point
    per evaluation."""

    evaluations: np.ndarray  # [K] int64 simulator calls spent on training so far
    wall_s: np.ndarray  # [K] float64 s since training started (compilation included)
    makespan: np.ndarray  # [K] float64 µs, best penalised makespan so far (running minimum)
    raw: np.ndarray  # [K] float64 µs, exact makespan of that best placement, no memory penalty
    fits: np.ndarray  # [K] bool, that best placement fits device memory

    def to_reach(self, tolerance: float = 0.05) -> tuple[int, float]:
        """(evaluations, wall s) at the first point within `tolerance` of the final makespan."""
        goal = self.makespan[-1] * (1.0 + tolerance)
        first = int(np.argmax(self.makespan <= goal))
        return int(self.evaluations[first]), float(self.wall_s[first])

    @staticmethod
    def of(evaluations, wall_s, penalised, raw, fits) -> Curve:
        """The curve of the placements evaluated at each point [K]: their penalised and raw
        makespans (µs) and whether they fit memory (`placers.base.best_so_far`)."""
        return Curve(
            np.asarray(evaluations, np.int64),
            np.asarray(wall_s, np.float64),
            *best_so_far(penalised, raw, fits),
        )


@dataclasses.dataclass(frozen=True)
class Fit:
    """A Placeto run on one graph."""

    params: Any  # policy parameters after training
    placement: Placement  # greedy placement of the final policy, exact op-graph makespan
    best: Placement  # best seen at any evaluation or in training (what the curve ends at)
    curve: Curve
    evaluations: int  # every simulation the run made: the curve's training simulations and
    #                   each greedy evaluation's (a given start's not counted: run before)


def simulations(placement: Placement) -> int:
    """The simulations behind a greedy placement: its episode's steps and the exact rankings of
    what it visited (the place pipeline's "episodes" stage)."""
    return placement.episode_steps + placement.evaluations


class PlacetoBench:
    """Compiled Placeto programs (init, a chunk of updates, greedy episode) shared by `graphs`."""

    def __init__(self, config: Config, graphs: list[PlacementGraph], cluster: Cluster):
        self.config = config
        self.graphs = graphs
        self.cluster = cluster
        self.run = make_train(config, build_bank(graphs, config.run.buckets), cluster)

    def index(self, name: str) -> int:
        names = [pg.name for pg in self.graphs]
        if name not in names:
            raise ValueError(f"graph {name!r} is not in this bench ({', '.join(names)})")
        return names.index(name)

    def graph_env_params(self, i: int) -> EnvParams:
        """The environment playing only graph `i` (same shapes for every graph)."""
        return self.run.env_params.playing([i])

    def place(self, params: Any, i: int, found: TrainState | None = None) -> Placement:
        """Greedy episode on graph `i`, ranked on the op graph (as `placeto-jax place` does),
        with the best placement that `found`'s training episodes visited on it as a candidate."""
        rows = None if found is None else [found_placements(found)[i]]
        (placed,) = place_with(
            self.run, params, self.graph_env_params(i), [self.graphs[i]], self.cluster, found=rows
        )
        return placed

    def fit(
        self,
        i: int,
        key: jax.Array,
        eval_every: int | None = None,
        init_params: Any = None,
        init_placement: Placement | None = None,
        iterations: int | None = None,
    ) -> Fit:
        """Train on graph `i` for `iterations` updates (default `config.train.iterations`) from
        fresh parameters (or `init_params`, with a fresh optimizer: fine-tuning, where
        `init_placement` can give their greedy placement if already known); evaluate greedily
        every `eval_every` updates (default `config.run.eval_every`)."""
        eval_every = eval_every or self.config.run.eval_every
        total = iterations or self.config.train.iterations
        env_params = self.graph_env_params(i)
        n = self.graphs[i].graph.n_ops
        per_update = self.config.train.episodes * (self.config.env.passes * n + 1)
        began = time.perf_counter()
        state = self.run.init(key, env_params)
        if init_params is not None:
            state = dataclasses.replace(
                state, params=init_params, opt_state=self.run.trainer.optimizer.init(init_params)
            )
        start = init_placement if init_params is not None else None
        points = [(0, time.perf_counter() - began, start or self.place(state.params, i))]
        done = 0
        while done < total:
            count = min(eval_every, total - done)
            state, _ = self.run.updates(state, self.run.hyper, env_params, count=count)
            done += count
            placed = self.place(state.params, i, found=state)
            points.append((done * per_update, time.perf_counter() - began, placed))
        placements = [p for _, _, p in points]
        greedy = placements if start is None else placements[1:]  # the evaluations run here
        scores = [self.score(p) for p in placements]
        best = placements[int(np.argmin(scores))]
        curve = Curve.of(
            [e for e, _, _ in points],
            [w for _, w, _ in points],
            scores,
            [p.makespan for p in placements],
            [p.fits_memory for p in placements],
        )
        evaluations = done * per_update + sum(simulations(p) for p in greedy)
        return Fit(state.params, placements[-1], best, curve, evaluations)

    def score(self, placement: Placement) -> float:
        """µs: the placement's penalised makespan (`sim.ranking.penalised_makespan`)."""
        score = penalised_makespan([placement.makespan], placement.peak_memory[None], self.cluster)
        return float(score[0])
