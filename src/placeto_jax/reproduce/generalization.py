"""Generalisation: one Placeto policy per family (cifar10, ptb, nmt) trained on the train
split, then, on every test graph, the policy zero-shot, Placeto trained on that graph from
scratch, Placeto fine-tuned from the family policy, and the baselines.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, make_config, to_dict
from placeto_jax.env.bank import prepare
from placeto_jax.graphs import families
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.registry import load
from placeto_jax.placers import run_method
from placeto_jax.plotting import draw_relative_cdf
from placeto_jax.reproduce.output import EVALUATIONS, SEARCH_METHODS, Recorder, fastest
from placeto_jax.reproduce.placeto import PlacetoBench, simulations
from placeto_jax.rl.loop import train_and_evaluate

MS = 1e3  # µs
PLACETO = ("zero-shot", "from-scratch", "fine-tuned")


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
    family, short = family_config(settings), per_graph_config(settings)
    target = family.run.group_target
    rows, evaluations = [], []
    for name in settings.families:
        train = [
            prepare(n, g, target, cluster.delta1)
            for n, g in _split(name, "train", settings.train_graphs)
        ]
        tests = _split(name, "test", settings.test_graphs)
        trained = train_and_evaluate(
            family,
            train,
            recorder.directory / "runs" / f"{name}-d{settings.devices}-{preset}",
            progress=progress,
        )
        bench = PlacetoBench(
            short, [prepare(n, g, target, cluster.delta1) for n, g in tests], cluster
        )
        for i, (graph_name, graph) in enumerate(
            tqdm(tests, desc=f"{name} test", unit="graph", disable=not progress)
        ):
            key = jax.random.key(settings.seed)
            zero_shot = bench.place(trained.state.params, i)
            scratch = bench.fit(i, key)
            tuned = bench.fit(i, key, init_params=trained.state.params, init_placement=zero_shot)
            found = {"zero-shot": zero_shot, "from-scratch": scratch.best, "fine-tuned": tuned.best}
            evals = {
                "zero-shot": simulations(zero_shot),
                "from-scratch": scratch.evaluations,
                "fine-tuned": tuned.evaluations,
            }
            for method in settings.baselines:
                budget = settings.search_budget if method in SEARCH_METHODS else None
                found[method] = run_method(method, graph, cluster, key, budget)
                evals[method] = found[method].evaluations
            row = {"family": name, "graph": graph_name, "ops": graph.n_ops}
            rows.append(row | {m: r.makespan / MS for m, r in found.items()})
            evaluations.append(row | evals)
            winner, _ = fastest({m: (r.makespan, r.fits_memory) for m, r in found.items()})
            recorder.gantt(
                f"gantt_{graph_name.replace(':', '_').replace('/', '_')}",
                f"Best placement: {graph_name}, {settings.devices} devices",
                graph,
                cluster,
                found[winner].placement,
                winner,
            )
    _write(recorder, settings, rows, evaluations)
    header = {
        **dataclasses.asdict(settings),
        "family_config": to_dict(family),
        "per_graph_config": to_dict(short),
    }
    return recorder.finish(header, [settings.seed], NOTES)


def _split(family: str, split: str, k: int) -> list[tuple[str, Graph]]:
    """(name, graph) of the first `k` graphs of a family's split (all for k = 0)."""
    indices = families.SPLITS[split]
    return [(n, load(n)) for n in (f"family:{family}/{i}" for i in indices[: k or len(indices)])]


def relative_to_best_baseline(rows: list[dict], baselines: tuple[str, ...]) -> list[dict]:
    """Every method's makespan divided by the best baseline's on the same graph."""
    methods = PLACETO + baselines
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
    recorder.table(
        "makespan",
        "Makespan (ms) per test graph",
        rows,
        note=f"{settings.devices} devices of `{settings.cluster}`; Placeto columns are the "
        "exact op-graph makespans of the best placement found (zero-shot: one greedy episode).",
    )
    recorder.table(
        "evaluations",
        "Simulator evaluations per method",
        evaluations,
        note=f"{EVALUATIONS} Zero-shot and fine-tuned do not count the family policy's "
        "training (shared by the family's graphs); fine-tuned starts from the zero-shot "
        "placement.",
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


def _shown(settings: Settings) -> list[str]:
    """The methods the CDF draws: Placeto's and the baselines metis, heft, single if run."""
    return [*PLACETO, *(m for m in ("metis", "heft", "single") if m in settings.baselines)]


NOTES = """
Families are generated from the paper's model families (`docs/graphs.md`): every graph of a
split is a different architecture. The family policy is trained on the train split with the
host loop (`placeto-jax train`, checkpointed under `runs/`); every test graph is then placed by
that policy zero-shot (one greedy episode), by Placeto trained on that graph alone from scratch,
and by the family policy fine-tuned on it (both runs the same short budget), and by the
baselines on the op graph.
"""
