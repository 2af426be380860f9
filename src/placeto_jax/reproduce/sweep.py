"""`placeto-jax sweep`: train an agent over a grid of scalar settings and seeds.

Grid points whose configs differ only in the `Hyper` fields (`lr` = `train.learning_rate`,
`entropy` = `train.entropy`) run together with their seeds as one `jax.jit(jax.vmap(train))`
program; points that differ in anything else (shapes, static branches) compile one program per
distinct static config, run one after another. Sweeping `lr` scales the whole learning-rate
schedule (the final rate keeps the base config's final / initial ratio), which is what a vmapped
`Hyper.learning_rate` does; with `train.final_learning_rate` in the grid too, `lr` is static.

Each point is scored by the exact op-graph makespan of a greedy episode of every seed's trained
policy (visited placements ranked on the op graph, as `rl.evaluate.place_graphs` does) and by
the sampled episodes' final runtime over the last updates.

The construct agent (`config.agent` "construct") trains each point and seed on its own
(`construct_point`: its teachers and imitation updates, as `placeto-jax train` runs them), and
is scored by its own placements (the `sampled` pipeline) and its imitation loss.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import tempfile
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, apply, make_config, own_pipeline, to_dict
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.pipeline import Policy, place_many
from placeto_jax.plotting import draw_sweep_curves
from placeto_jax.reproduce import construct
from placeto_jax.reproduce.output import EVALUATIONS, Recorder
from placeto_jax.reproduce.placeto import simulations
from placeto_jax.rl import construct_loop
from placeto_jax.rl.evaluate import Placement, rank_visited
from placeto_jax.rl.loop import load_graphs
from placeto_jax.rl.train import Hyper, Train, make_train
from placeto_jax.stages.teachers import config_teachers

ALIASES = {"lr": "train.learning_rate", "entropy": "train.entropy"}
SECTIONS = ("env", "policy", "train", "run")
TAIL_FRACTION = 0.1  # the last updates whose train/final_runtime scores a run
MS = 1e3  # µs
# Quick (CPU) sizes under any grid: the tiny preset on a graph coarsened to 24 groups.
QUICK = ("run.group_target=24", "train.episodes=16", "train.iterations=40")
# What each agent's curves and rows hold: (curve metric, its column, its label, start column).
SCORES = {
    "paper": ("train/final_runtime", "final_runtime", "sampled final runtime / initial",
              "initial_ms"),
    "construct": ("train/imitation_loss", "final_imitation_loss", "imitation loss",
                  "teacher_ms"),
}  # fmt: skip
COUNTED = {  # what an agent's evaluations hold beyond `EVALUATIONS`
    "paper": "",
    "construct": "Construct: its teachers' simulations, its training's (self-imitation "
    "episodes, greedy evaluations) and its placements' (greedy + sampled episodes).",
}


@dataclasses.dataclass(frozen=True)
class Point:
    """One grid point: its swept values and the config they give."""

    settings: tuple[tuple[str, Any], ...]  # (key as given on the command line, typed value)
    config: Config

    @property
    def label(self) -> str:
        return ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.settings
        )


@dataclasses.dataclass(frozen=True)
class Runs:
    """Every seed of some grid points, trained: arrays [P, S, ...] (points, seeds), or
    [S, ...] for one point."""

    params: Any  # policy parameters, leaves [P, S, ...]
    curves: np.ndarray  # [P, S, updates] the agent's `SCORES` metric per update (paper:
    #                     train/final_runtime, a fraction of the initial; construct: imitation loss)
    makespans: np.ndarray  # [P, S, G] µs, exact op-graph makespan of the greedy placement
    #                        (construct: of the `sampled` pipeline's placement)
    initial: np.ndarray  # [P, S, G] µs, that of the greedy episode's initial placement
    #                      (construct: of the teacher it imitated)
    single: np.ndarray  # [P, S, G] µs, that of every op on one device
    evaluations: np.ndarray  # [P, S] int64 simulations each seed ran: its training episodes'
    #                          (`training_simulations`) and its greedy placements' (`simulations`)

    def point(self, j: int) -> Runs:
        """Point j's runs: arrays [S, ...]."""
        params = jax.tree.map(lambda x: x[j], self.params)
        return Runs(
            params, self.curves[j], self.makespans[j], self.initial[j], self.single[j],
            self.evaluations[j],
        )  # fmt: skip


# ---------------------------------------------------------------------- the grid
def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """{key: [value texts]} from `KEY=V1,V2,...` items (the `--set` arguments)."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"bad --set {item!r}: expected KEY=V1,V2,..., e.g. lr=1e-3,1e-2")
        values = [v.strip() for v in text.split(",")]
        if not text.strip():
            raise ValueError(f"--set {key}: empty value list")
        if not all(values):
            raise ValueError(f"--set {key}: empty value in {text!r}")
        if key in grid:
            raise ValueError(f"--set {key} is given twice")
        grid[key] = values
    return grid


def grid_points(base: Config, grid: Mapping[str, Sequence[Any]]) -> list[Point]:
    """Every combination of the grid's values (the first key varies slowest), each a valid
    config; ValueError naming the first bad key or value."""
    for key, values in grid.items():
        _check_key(key)
        if not values:
            raise ValueError(f"sweep key {key}: empty value list")
    if len({_canonical(k) for k in grid}) < len(grid):
        raise ValueError(f"sweep keys {', '.join(grid)} name one setting twice")
    scaled = lr_is_hyper(grid)
    points = []
    for combo in itertools.product(*grid.values()):
        settings = {_canonical(k): str(v) for k, v in zip(grid, combo, strict=True)}
        config = apply(base, settings)
        if scaled:
            ratio = base.train.final_learning_rate / base.train.learning_rate
            config = apply(
                config, {"train.final_learning_rate": config.train.learning_rate * ratio}
            )
        typed = tuple((k, _value(config, _canonical(k))) for k in grid)
        points.append(Point(typed, config))
    return points


def _canonical(key: str) -> str:
    return ALIASES.get(key, key)


def lr_is_hyper(keys: Sequence[str] | Mapping[str, Any]) -> bool:
    """Whether a grid over `keys` vmaps the learning rate: it is swept and the final learning
    rate is not (then the base's final / initial ratio holds for every point)."""
    canonical = {_canonical(k) for k in keys}
    return "train.learning_rate" in canonical and "train.final_learning_rate" not in canonical


def _check_key(key: str) -> None:
    """ValueError unless `key` names a scalar field of a config section (or is an alias)."""
    section, dot, field = _canonical(key).partition(".")
    if not dot or section not in SECTIONS:
        raise ValueError(
            f"unknown sweep key {key!r}: use {', '.join(ALIASES)} or SECTION.FIELD with "
            f"SECTION one of {', '.join(SECTIONS)} (seeds: --seeds, devices: --devices)"
        )
    hints = typing.get_type_hints(type(getattr(Config(), section)))
    if field not in hints:
        raise ValueError(f"unknown sweep key {key!r}: {section} has no field {field!r}")
    if typing.get_origin(hints[field]) is tuple:
        raise ValueError(f"sweep key {key!r} is a tuple field; only scalar fields can be swept")


def _value(config: Config, key: str) -> Any:
    section, _, field = key.partition(".")
    return getattr(getattr(config, section), field)


def static_config(point: Point, base: Config) -> Config:
    """The point's config with its vmapped (`Hyper`) fields set back to the base's: points
    with equal static configs share one compiled program."""
    train = point.config.train
    reset = {"entropy": base.train.entropy}
    if lr_is_hyper([k for k, _ in point.settings]):
        reset |= {
            "learning_rate": base.train.learning_rate,
            "final_learning_rate": base.train.final_learning_rate,
        }
    return dataclasses.replace(point.config, train=dataclasses.replace(train, **reset))


def group_points(points: Sequence[Point], base: Config) -> dict[Config, list[int]]:
    """{static config: indices of its points}, in the order of first appearance."""
    groups: dict[Config, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(static_config(point, base), []).append(i)
    return groups


# ---------------------------------------------------------------------- training
def seed_keys(seeds: int, points: int = 1) -> jax.Array:
    """[P x S] keys of seeds 0..S-1 for each of P points (point-major), the keys
    `placeto-jax train --seed s` starts from."""
    return jax.vmap(jax.random.key)(jnp.tile(jnp.arange(seeds), points))


def point_hypers(points: Sequence[Point], seeds: int) -> Hyper:
    """`Hyper` fields [P x S], each point's values repeated for its seeds (point-major)."""

    def column(field: str) -> jax.Array:
        values = [getattr(p.config.train, field) for p in points]
        return jnp.repeat(jnp.array(values, jnp.float32), seeds)

    return Hyper(learning_rate=column("learning_rate"), entropy=column("entropy"))


def train_points(
    static: Config,
    points: Sequence[Point],
    seeds: int,
    graphs: list[PlacementGraph],
    cluster: Cluster,
) -> Runs:
    """Train every (point, seed) of one static config as one vmapped program on `cluster`;
    evaluate."""
    run = make_train(static, build_bank(graphs, static.run.buckets), cluster)
    n_points = len(points)
    states, metrics = jax.jit(jax.vmap(run.run))(
        seed_keys(seeds, n_points), point_hypers(points, seeds)
    )
    placements = greedy_placements(run, states.params, graphs, cluster)
    greedy = np.array([sum(simulations(p) for p in row) for row in placements], np.int64)

    def field(name: str) -> np.ndarray:
        values = [[getattr(p, name) for p in row] for row in placements]
        return np.array(values).reshape(n_points, seeds, len(graphs))

    return Runs(
        params=jax.tree.map(lambda x: x.reshape(n_points, seeds, *x.shape[1:]), states.params),
        curves=np.asarray(metrics["train/final_runtime"]).reshape(n_points, seeds, -1),
        makespans=field("makespan"),
        initial=field("initial_makespan"),
        single=field("single_device_makespan"),
        evaluations=(training_simulations(run, graphs) + greedy).reshape(n_points, seeds),
    )


def training_simulations(run: Train, graphs: list[PlacementGraph]) -> int:
    """Simulations one seed's training ran: per update, each episode's initial placement and
    one per step (`env.passes` x the units of the graph it plays, `Trainer.episode_graphs`)."""
    config = run.trainer.config
    updates = jnp.arange(config.train.iterations, dtype=jnp.int32)
    played = np.asarray(jax.vmap(lambda t: run.trainer.episode_graphs(t, run.env_params))(updates))
    per_episode = np.array([config.env.passes * pg.n_units + 1 for pg in graphs], np.int64)
    return int(per_episode[played].sum())


def greedy_placements(
    run: Train, params: Any, graphs: list[PlacementGraph], cluster: Cluster
) -> list[list[Placement]]:
    """[K][G]: for each of K stacked parameter sets (leaves [K, ...]), the greedy placement of
    every graph of `run`'s bank, ranked on the op graph by `rank_visited` as `place_graphs`
    does, with one compiled greedy program for all K (`place_graphs` compiles one per call)."""
    visit = jax.jit(jax.vmap(lambda p: run.greedy(p, run.env_params)["visited"]))
    visited = np.asarray(visit(params))  # [K, T + 1, G, N] int8
    passes = run.trainer.config.env.passes
    steps = [passes * pg.n_units + 1 for pg in graphs]
    ranked = [
        [rank_visited(pg, cluster, one[: steps[i], i]) for i, pg in enumerate(graphs)]
        for one in visited
    ]  # with the episode's steps, as `place_with` counts them:
    return [
        [dataclasses.replace(p, episode_steps=p.n_units * passes) for p in row] for row in ranked
    ]


def run_grid(
    base: Config,
    points: Sequence[Point],
    seeds: int,
    graphs_of: Callable[[Config], list[PlacementGraph]],
    cluster: Cluster,
    progress: bool = True,
) -> list[Runs]:
    """[P] the trained runs of every point, on `graphs_of(its config)` and `cluster`: the paper
    agent's as one compiled program per static config, the construct agent's one run per point
    and seed (`construct_point`)."""
    if base.agent == "construct":
        bar = tqdm(points, desc="sweep", unit="point", disable=not progress)
        return [construct_point(p.config, seeds, graphs_of(p.config), cluster) for p in bar]
    found: dict[int, Runs] = {}
    with tqdm(total=len(points), desc="sweep", unit="point", disable=not progress) as bar:
        for static, members in group_points(points, base).items():
            chosen = [points[i] for i in members]
            runs = train_points(static, chosen, seeds, graphs_of(static), cluster)
            for j, i in enumerate(members):
                found[i] = runs.point(j)
            bar.update(len(members))
    return [found[i] for i in range(len(points))]


def construct_point(
    config: Config, seeds: int, graphs: list[PlacementGraph], cluster: Cluster
) -> Runs:
    """The construct agent's runs of `config` from seeds 0..seeds-1, each trained on its own (no
    vmap: a run's cost is its teachers' and updates') on the op graphs of `graphs`."""
    named = [(pg.name, pg.op_graph or pg.graph) for pg in graphs]
    per_seed = [construct_run(dataclasses.replace(config, seed=s), named, cluster)
                for s in range(seeds)]  # fmt: skip
    fields = zip(*per_seed, strict=True)  # each field over the seeds
    return Runs(*(jax.tree.map(lambda *x: np.stack(x), *f) for f in fields))


def construct_run(config: Config, named: list[tuple[str, Any]], cluster: Cluster) -> tuple:
    """One construct run of `config` (in a temporary workdir) as `Runs` fields without the seed
    axis: its parameters, imitation loss per update, its own placements' makespans (the
    `config.own_pipeline`, key `config.seed`), its teachers', the single device's, and every
    simulation of its teachers, training and placing."""
    taught = config_teachers(config, named, cluster)
    with tempfile.TemporaryDirectory(prefix="sweep-construct-") as workdir:
        state = construct_loop.train_in(config, named, cluster, workdir, taught, progress=False)
        with open(Path(workdir) / "metrics.jsonl", encoding="utf-8") as lines:
            curve = [json.loads(line)[SCORES["construct"][0]] for line in lines]
    policy = Policy(config, state.params, target=cluster)
    placed = place_many(named, cluster, own_pipeline(config), policy, jax.random.key(config.seed),
                        compare=False)  # fmt: skip
    spent = sum(t.evaluations for t in taught) + sum(p.evaluations for p in placed)
    spent += construct.training_simulations(config, len(named))
    spent += construct.lookahead_simulations(config, [g for _, g in named], cluster.n_devices)
    return (
        state.params,
        np.asarray(curve, np.float32),
        np.array([p.result.makespan for p in placed]),
        np.array([t.makespan for t in taught]),
        np.array([p.result.single_device_makespan for p in placed]),
        np.int64(spent),
    )


# ---------------------------------------------------------------------- results
def summary_rows(points: Sequence[Point], runs: Sequence[Runs]) -> list[dict[str, Any]]:
    """One row per point, best (lowest mean makespan) first; columns by the agent (`SCORES`)."""
    _, column, _, start = SCORES[points[0].config.agent]
    rows = []
    for point, run in zip(points, runs, strict=True):
        per_seed = run.makespans.mean(axis=1)  # [S] mean over graphs, µs
        speedup = (run.single / run.makespans).mean(axis=1)  # [S]
        tail = max(1, round(TAIL_FRACTION * run.curves.shape[1]))
        final = run.curves[:, -tail:].mean(axis=1)  # [S]
        rows.append(
            {
                "setting": point.label or "(base config)",
                **dict(point.settings),
                "makespan_ms": float(per_seed.mean() / MS),
                "makespan_std_ms": float(per_seed.std() / MS),
                start: float(run.initial.mean() / MS),
                "speedup_vs_single": float(speedup.mean()),
                column: float(final.mean()),
                f"{column}_std": float(final.std()),
            }
        )
    rows.sort(key=lambda r: r["makespan_ms"])
    return [{"rank": i + 1, **r} for i, r in enumerate(rows)]


def evaluation_row(
    row: dict[str, Any], names: Sequence[str], runs: Sequence[Runs]
) -> dict[str, Any]:
    """`row` with, per method (a grid point or a variant), the simulations of all its seeds."""
    return row | {n: int(r.evaluations.sum()) for n, r in zip(names, runs, strict=True)}


def base_config(preset: str | None, cluster: Cluster, quick: bool) -> Config:
    """The sweep's base on `cluster`: the preset (tiny when quick and none is given), with the
    quick sizes."""
    where = {"n_devices": cluster.n_devices, "cluster_preset": cluster.preset_name()}
    if not quick:
        return make_config(preset, [], **where)
    config = make_config(preset or "tiny", list(QUICK), **where)
    if config.agent != "paper":
        raise ValueError(
            f"--quick sizes the paper agent ({' '.join(QUICK)}); preset {preset!r} is the "
            f"{config.agent} agent's, CPU-sized already"
        )
    return config


def run_sweep(
    graphs: str,
    cluster: Cluster,
    grid: Mapping[str, Sequence[Any]],
    seeds: int,
    preset: str | None,
    out_root: str | Path,
    name: str | None = None,
    progress: bool = True,
    quick: bool = False,
) -> Path:
    """Train every grid point x seed on `graphs` placed on `cluster`, write
    results/<name or sweep>/, return the README's path. Every input is checked before any
    training."""
    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    base = base_config(preset, cluster, quick)
    points = grid_points(base, grid)
    prepared = {  # coarsened once per run.group_target in the grid
        p.config.run.group_target: load_graphs(graphs, p.config, cluster) for p in points
    }
    recorder = Recorder(out_root, name or "sweep", "quick" if quick else "full")
    runs = run_grid(base, points, seeds, lambda c: prepared[c.run.group_target], cluster, progress)
    rows = summary_rows(points, runs)
    _, column, label, _ = SCORES[base.agent]
    placed = "greedy placement" if base.agent == "paper" else "own placement (`sampled` pipeline)"
    recorder.table(
        "sweep",
        "Grid points, best first",
        rows,
        note=f"Best: **{rows[0]['setting']}**. makespan: exact op-graph makespan of the "
        f"policy's {placed} (mean over graphs, then mean and std over seeds); {column}: "
        f"{label} over the last {TAIL_FRACTION:.0%} of the updates.",
    )
    recorder.table(
        "evaluations",
        "Simulator evaluations per method",
        [evaluation_row({"graphs": graphs}, [p.label or "(base config)" for p in points], runs)],
        note=f"{EVALUATIONS} {COUNTED[base.agent]} Per grid point: its {seeds} seeds' "
        "together, on every graph.",
    )
    recorder.figure(
        "curves",
        "Learning curves (mean over seeds)",
        lambda fig: draw_sweep_curves(
            fig, [p.label or "(base config)" for p in points], [r.curves for r in runs], label
        ),
    )
    return recorder.finish(
        {
            "graphs": graphs,
            "devices": cluster.n_devices,
            "cluster": cluster.document(),
            "preset": preset,
            "quick": quick,
            "grid": {k: list(v) for k, v in grid.items()},
            "agent": base.agent,
            "programs": len(group_points(points, base)) if base.agent == "paper" else None,
            "base": to_dict(base),
        },
        list(range(seeds)),
        notes=_NOTES,
    )


_NOTES = """\
Points that differ only in `lr`/`entropy` ran vmapped with their seeds in one compiled program;
`lr` scales the whole learning-rate schedule (final rate = lr x the base's final / initial).
Seed s trains from `jax.random.key(s)`, as `placeto-jax train --seed s` does."""
