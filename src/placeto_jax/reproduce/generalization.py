"""Generalisation: one Placeto policy per family (cifar10, ptb, nmt) trained on the train
split, then, on every test graph, the policy zero-shot, Placeto trained on that graph from
scratch, Placeto fine-tuned from the family policy, and the baselines; and the construct agent
(`rl/construct_loop.py`) trained on the same train graphs, zero-shot, and trained on that test
graph alone, both placed by their own pipeline (`config.own_pipeline`: with the lookahead
preset, the greedy episode). Each zero-shot column has its controls: the same placing with the
family run's untrained weights, and for the construct agent with uniformly random episodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, make_config, to_dict
from placeto_jax.env.bank import prepare
from placeto_jax.graphs import families
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.registry import load
from placeto_jax.pipeline import Policy, uniform_random, untrained
from placeto_jax.placers import run_method
from placeto_jax.plotting import draw_relative_cdf
from placeto_jax.reproduce.construct import (
    construct_config,
    per_graph_construct,
    place_construct,
    train_construct,
)
from placeto_jax.reproduce.output import EVALUATIONS, SEARCH_METHODS, Recorder, fastest
from placeto_jax.reproduce.placeto import PlacetoBench, simulations
from placeto_jax.rl.loop import train_and_evaluate

MS = 1e3  # µs
PLACETO = ("zero-shot", "from-scratch", "fine-tuned")
CONSTRUCT = ("construct zero-shot", "construct per-graph")
CONTROLS = ("zero-shot untrained", "construct untrained", "construct uniform")
Columns = dict[str, tuple]  # {method: (its placement, simulator evaluations it spent)}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one preset runs."""

    families: tuple[str, ...]
    devices: int
    train_graphs: int  # first K train graphs of each family the policy trains on (0: all)
    test_graphs: int  # first K test graphs of each family (0: all)
    family_training: tuple[str, ...]  # config overrides (tiny preset) of the family policy
    per_graph_iterations: int  # updates of the from-scratch and fine-tuning runs
    baselines: tuple[str, ...]
    search_budget: int  # simulator evaluations of the search baselines
    # config overrides (of `construct_preset`) of the family construct policy, and of the
    # construct policy trained on each test graph alone
    construct_training: tuple[str, ...] = ()
    construct_per_graph: tuple[str, ...] = ("train.imitation=100",)
    construct_preset: str = "construct-lookahead"  # `make run`'s
    cluster: str = "placeto-k80"
    seed: int = 0


PRESETS = {
    "quick": Settings(
        families=("cifar10", "ptb", "nmt"),
        devices=4,
        train_graphs=12,
        test_graphs=0,
        family_training=("train.iterations=30", "train.episodes=24", "run.group_target=32"),
        per_graph_iterations=10,
        baselines=("single", "random", "metis", "heft", "m-etf"),
        search_budget=256,
        construct_per_graph=("train.imitation=100",),
    ),
    "full": Settings(
        families=("cifar10", "ptb", "nmt"),
        devices=4,
        train_graphs=0,
        test_graphs=0,
        family_training=(
            "train.iterations=400",
            "train.episodes=128",
            "run.group_target=128",
            "policy.rounds=8",
        ),
        per_graph_iterations=100,
        baselines=(  # no expert: its naming rules know no family graph
            "single",
            "random",
            "metis",
            "heft",
            "m-etf",
            "m-sct",
            "local-search",
            "cross-entropy",
        ),
        search_budget=4096,
        construct_per_graph=("train.imitation=300",),
    ),
}


def family_config(settings: Settings) -> Config:
    config = make_config("tiny", list(settings.family_training), n_devices=settings.devices)
    return dataclasses.replace(config, cluster_preset=settings.cluster, seed=settings.seed)


def per_graph_config(settings: Settings) -> Config:
    """The family config with a short run: same policy, so fine-tuning starts from its params."""
    family = family_config(settings)
    iterations = settings.per_graph_iterations
    return dataclasses.replace(
        family,
        train=dataclasses.replace(family.train, iterations=iterations),
        run=dataclasses.replace(family.run, eval_every=max(1, iterations // 2)),
    )


def run_generalization(root: str | Path, preset: str = "quick", progress: bool = True) -> Path:
    settings = PRESETS[preset]
    recorder = Recorder(root, "generalization", preset)
    cluster = Cluster.preset(settings.cluster, settings.devices)
    runs = recorder.directory / "runs"
    rows, evaluations = [], []
    for name in settings.families:
        train = _split(name, "train", settings.train_graphs)
        tests = _split(name, "test", settings.test_graphs)
        run = f"d{settings.devices}-{preset}"
        placeto = _placeto(settings, train, tests, cluster, runs / f"{name}-{run}", progress)
        construct = _construct(settings, train, cluster, runs / f"{name}-construct-{run}", progress)
        for i, (graph_name, graph) in enumerate(
            tqdm(tests, desc=f"{name} test", unit="graph", disable=not progress)
        ):
            key = jax.random.key(settings.seed)
            columns = (
                placeto(i, key)
                | construct(graph_name, graph, key)
                | _baselines(settings, graph, cluster, key)
            )
            found = {m: r for m, (r, _) in columns.items()}
            row = {"family": name, "graph": graph_name, "ops": graph.n_ops}
            rows.append(row | {m: r.makespan / MS for m, r in found.items()})
            evaluations.append(row | {m: n for m, (_, n) in columns.items()})
            _gantt(recorder, settings, graph_name, graph, cluster, found)
    _write(recorder, settings, rows, evaluations)
    header = {
        **dataclasses.asdict(settings),
        "family_config": to_dict(family_config(settings)),
        "per_graph_config": to_dict(per_graph_config(settings)),
        "construct_config": to_dict(_construct_config(settings, settings.construct_training)),
        "construct_per_graph_config": to_dict(
            _construct_config(settings, settings.construct_per_graph)
        ),
    }
    return recorder.finish(header, [settings.seed], NOTES)


def _placeto(
    settings: Settings,
    train: list[tuple[str, Graph]],
    tests: list[tuple[str, Graph]],
    cluster: Cluster,
    workdir: Path,
    progress: bool,
) -> Callable[[int, jax.Array], Columns]:
    """Placeto's columns of test graph i (of `tests`): the family policy, trained on `train` in
    `workdir`, zero-shot, from scratch and fine-tuned."""
    family, short = family_config(settings), per_graph_config(settings)
    target = family.run.group_target
    prepared = [prepare(n, g, target, cluster.delta1) for n, g in train]
    trained = train_and_evaluate(family, prepared, workdir, progress=progress)
    bench = PlacetoBench(short, [prepare(n, g, target, cluster.delta1) for n, g in tests], cluster)
    initial = untrained(Policy(family, trained.state.params)).params

    def columns(i: int, key: jax.Array) -> Columns:
        zero_shot = bench.place(trained.state.params, i)
        control = bench.place(initial, i)
        scratch = bench.fit(i, key)
        tuned = bench.fit(i, key, init_params=trained.state.params, init_placement=zero_shot)
        return {
            "zero-shot": (zero_shot, simulations(zero_shot)),
            "zero-shot untrained": (control, simulations(control)),
            "from-scratch": (scratch.best, scratch.evaluations),
            "fine-tuned": (tuned.best, tuned.evaluations),
        }

    return columns


def _construct(
    settings: Settings,
    train: list[tuple[str, Graph]],
    cluster: Cluster,
    workdir: Path,
    progress: bool,
) -> Callable[[str, Graph, jax.Array], Columns]:
    """The construct agent's columns of a test graph: the policy trained on the op graphs
    `train` in `workdir`, zero-shot, its untrained and uniform-random controls, and one
    trained on that graph alone."""
    config = _construct_config(settings, settings.construct_training)
    family, _ = train_construct(config, train, cluster, workdir, progress)
    per_graph = _construct_config(settings, settings.construct_per_graph)
    policies = {
        "construct zero-shot": family,
        "construct untrained": untrained(family),
        "construct uniform": uniform_random(family),
    }

    def columns(name: str, graph: Graph, key: jax.Array) -> Columns:
        placed = {m: place_construct(p, name, graph, cluster, key) for m, p in policies.items()}
        own, spent, _ = per_graph_construct(per_graph, name, graph, cluster, key)
        return {m: (p.result, p.evaluations) for m, p in placed.items()} | {
            "construct per-graph": (own.result, spent)
        }

    return columns


def _construct_config(settings: Settings, overrides: Sequence[str]) -> Config:
    """`construct_config` of `settings.construct_preset` on the preset's devices, cluster and
    seed."""
    return construct_config(overrides, settings.devices, settings.cluster, settings.seed,
                            settings.construct_preset)  # fmt: skip


def _baselines(settings: Settings, graph: Graph, cluster: Cluster, key: jax.Array) -> Columns:
    """The baselines' columns of a test graph."""
    out = {}
    for method in settings.baselines:
        budget = settings.search_budget if method in SEARCH_METHODS else None
        result = run_method(method, graph, cluster, key, budget)
        out[method] = (result, result.evaluations)
    return out


def _gantt(recorder, settings, graph_name, graph, cluster, found) -> None:
    """The Gantt chart of the fastest placement that fits memory among `found`."""
    winner, _ = fastest({m: (r.makespan, r.fits_memory) for m, r in found.items()})
    recorder.gantt(
        f"gantt_{graph_name.replace(':', '_').replace('/', '_')}",
        f"Best placement: {graph_name}, {settings.devices} devices",
        graph,
        cluster,
        found[winner].placement,
        winner,
    )


def _split(family: str, split: str, k: int) -> list[tuple[str, Graph]]:
    """(name, graph) of the first `k` graphs of a family's split (all for k = 0)."""
    indices = families.SPLITS[split]
    return [(n, load(n)) for n in (f"family:{family}/{i}" for i in indices[: k or len(indices)])]


def relative_to_best_baseline(rows: list[dict], baselines: tuple[str, ...]) -> list[dict]:
    """Every method's makespan divided by the best baseline's on the same graph."""
    methods = PLACETO + CONSTRUCT + CONTROLS + baselines
    out = []
    for row in rows:
        best = min(row[m] for m in baselines)
        out.append(
            {"family": row["family"], "graph": row["graph"], **{m: row[m] / best for m in methods}}
        )
    return out


def _write(
    recorder: Recorder, settings: Settings, rows: list[dict], evaluations: list[dict]
) -> None:
    placing, counted = _construct_notes(_construct_config(settings, settings.construct_training))
    recorder.table(
        "makespan",
        "Makespan (ms) per test graph",
        rows,
        note=f"{settings.devices} devices of `{settings.cluster}`; Placeto columns are the "
        "exact op-graph makespans of the best placement found (zero-shot: one greedy episode); "
        f"construct columns ({settings.construct_preset}) of {placing}, each simulated exactly. "
        "Controls, placed the same way: `untrained`, the family run's initial weights; "
        "`construct uniform`, uniformly random episodes (as many).",
    )
    recorder.table(
        "evaluations",
        "Simulator evaluations per method",
        evaluations,
        note=f"{EVALUATIONS} Zero-shot and fine-tuned do not count the family policy's "
        "training (shared by the family's graphs); fine-tuned starts from the zero-shot "
        f"placement. Construct zero-shot and its controls: {counted} (not the family construct "
        "policy's training). Construct per-graph: its training's exact simulations (the 5 "
        "teacher heuristics' own and one scoring each, every self-imitation episode, each "
        "greedy evaluation, the lookahead's) and its placing's; its imitation updates and its "
        "episodes' list-schedule observations simulate nothing.",
    )
    relative = relative_to_best_baseline(rows, settings.baselines)
    recorder.table(
        "relative",
        "Makespan relative to the best baseline per graph",
        relative,
        note="1.0 = the best baseline on that graph; below 1 beats every baseline.",
    )
    recorder.figure(
        "cdf",
        "CDF of makespan relative to the best baseline",
        lambda fig: draw_relative_cdf(fig, relative, settings.families, _shown(settings)),
    )


def _construct_notes(config: Config) -> tuple[str, str]:
    """What the construct columns place with `config` (its own pipeline) and the simulations
    they count, in words."""
    if config.env.construct_lookahead:
        return (
            "the greedy episode, which observes each decision's lookahead (the class on every "
            "device, the best heuristic completing the rest)",
            "the 5 heuristics that make the hint (their own simulations and one scoring each), "
            "the lookahead's D - 1 simulations a decision (none for uniform episodes) and one "
            "scoring the episode",
        )
    return (
        "the best of the `sampled` pipeline's 17 episodes (greedy + 16 sampled at T = 0.6)",
        "17 episodes, each simulated once",
    )


def _shown(settings: Settings) -> list[str]:
    """The methods the CDF draws: Placeto's, the construct agent's (not the controls) and the
    baselines metis, heft, single if run."""
    baselines = (m for m in ("metis", "heft", "single") if m in settings.baselines)
    return [*PLACETO, *CONSTRUCT, *baselines]


NOTES = """
Families are generated from the paper's model families (`docs/graphs.md`): every graph of a
split is a different architecture. The family policy is trained on the train split with the
host loop (`placeto-jax train`, checkpointed under `runs/`); every test graph is then placed by
that policy zero-shot (one greedy episode), by Placeto trained on that graph alone from scratch,
and by the family policy fine-tuned on it (both runs the same short budget), and by the
baselines on the op graph. The construct agent (`agent=construct`, docs/agent.md) is trained on
the same train graphs' op graphs (checkpointed under `runs/`, `-construct-`) and places every
test graph zero-shot, and a construct policy trained on that test graph alone (imitation of its
best fast heuristic, then self-imitation: `construct_per_graph`) places it too; both through
the `sampled` pipeline on the op graph. The controls place every test graph as the zero-shot
columns do: with the family run's untrained weights (`zero-shot untrained`, `construct
untrained`), and with uniformly random episodes (`construct uniform`).
"""
