"""Improve mode (issue 20, beyond the paper): Placeto started from a given placement, here the
best fast heuristic's (`stages.starts`), returns the best placement its episodes visit, by
exact simulation. The experiment measures, per graph, how much faster than its start
Placeto's placement is, for each lever (`VARIANTS`) next to the paper's own configuration, on
the test graphs of the families (a policy trained on each family's train split) and on the
benchmark files (Placeto trained on each file, as in the benchmarks experiment).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, Pipeline, apply, make_config, to_dict
from placeto_jax.env.bank import PlacementGraph, build_bank, prepare
from placeto_jax.pipeline import Policy, place_many
from placeto_jax.placers import PlacerResult, best_heuristic, fast_heuristics
from placeto_jax.reproduce.benchmarks import benchmark_cases
from placeto_jax.reproduce.output import EVALUATIONS, Recorder
from placeto_jax.reproduce.placeto import PlacetoBench
from placeto_jax.reproduce.programs import release_compiled_programs
from placeto_jax.rl.evaluate import Placement
from placeto_jax.rl.loop import cluster_of, load_graphs
from placeto_jax.rl.train import make_train
from placeto_jax.stages.starts import started

MS = 1e3  # µs
IMPROVE_STARTS = ("best", "best-op")  # the fastest fast heuristic on the grouped / op graph
TARGET_SHARE = 0.75  # of the graphs: strictly faster than the start
TARGET_GAIN = 0.03  # mean of 1 - placeto / start


# ---------------------------------------------------------------------- the experiment
@dataclasses.dataclass(frozen=True)
class Variant:
    """One way to place from the start: which policy, from where, with which levers."""

    name: str
    trained_from: str  # "random": the paper's training; "start": episodes from the starts
    start: str  # "random": the paper's placement (random start); "start": from the start
    samples: bool  # add `Settings.samples` sampled episodes per graph
    passes: int  # passes per episode at placement
    temperature: float = 1.0  # of the sampled episodes: logits divided by it


# Sampling temperatures of their own variants, chosen on cifar10 train graphs 12-23 (not in the
# target set; docs/agent.md): 8 best with Placeto trained on each graph (the benchmark files'
# setting), 512 with the family policy (its logits are hundreds apart).
TEMPERATURES = (8.0, 512.0)
VARIANTS = (
    Variant("paper", "random", "random", False, 1),
    Variant("paper policy, from start", "random", "start", False, 1),
    Variant("paper policy, from start, K sampled", "random", "start", True, 1),
    Variant("start-trained, greedy", "start", "start", False, 1),
    Variant("improve: start-trained, K sampled", "start", "start", True, 1),
    Variant("start-trained, K sampled, 2 passes", "start", "start", True, 2),
    *(Variant(f"start-trained, K sampled, T = {t:g}", "start", "start", True, 1, t)
      for t in TEMPERATURES),
)  # fmt: skip
IMPROVED = VARIANTS[4].name
BENCH_VARIANTS = (VARIANTS[0], VARIANTS[3], VARIANTS[4], *VARIANTS[6:])  # trained on each file


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one preset runs."""

    families: tuple[str, ...]  # trained on <family>/train, placed on <family>/test
    devices: int  # of the family policies
    family: tuple[str, ...]  # overrides of the tiny preset for the family policies
    bench: tuple[str, ...]  # overrides of the tiny preset for Placeto trained on each file
    samples: int  # K: sampled episodes per graph
    train_graphs: int = 24  # the first graphs of each family's train split that it trains on
    folders: tuple[str, ...] = ()  # top-level folders of the benchmark data to read; (): all
    seed: int = 0
    start: str = "best"  # the best fast heuristic on the grouped graph, or "best-op": op graph


PRESETS = {
    "quick": Settings(
        families=("cifar10", "ptb", "nmt"),
        devices=4,
        family=("train.iterations=30", "train.episodes=24"),
        bench=("train.iterations=10", "train.episodes=16", "run.group_target=32"),
        samples=32,
        train_graphs=12,
    ),
    "full": Settings(
        families=("cifar10", "ptb", "nmt"),
        devices=4,
        family=("train.iterations=200", "train.episodes=64"),
        bench=("train.iterations=100", "train.episodes=64", "run.group_target=64"),
        samples=64,
    ),
}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One graph placed by every variant from one start."""

    source: str  # the family, or "benchmarks"
    graph: str
    decisions: int  # the agent's decisions per pass
    start: str  # the start's method
    start_ms: float  # the start's exact makespan
    heuristic: str  # the best fast heuristic on the op graph (a reference, not the start)
    heuristic_ms: float
    placed: dict[str, Placement]  # variant name -> its placement
    evaluations: dict[str, int]  # variant name -> the simulations it ran (`output.EVALUATIONS`)


def run_improve(
    root: str | Path,
    preset: str = "quick",
    progress: bool = True,
    data: str | None = None,
    start: str = "best",
) -> Path:
    """The improve experiment from starts `start` (`IMPROVE_STARTS`), written to
    `root/improve/` (`root/improve-best-op/` for "best-op"): per graph, the start and every
    variant's makespan; per source and variant, the share of graphs strictly faster than the
    start and the mean gain. ValueError for another start."""
    if start not in IMPROVE_STARTS:
        raise ValueError(f"unknown improve start {start!r}: choose one of {IMPROVE_STARTS}")
    settings = dataclasses.replace(PRESETS[preset], start=start)
    cases = benchmark_cases(data, settings.folders) if data else []  # read before any work
    recorder = Recorder(root, "improve" if start == "best" else f"improve-{start}", preset)
    key = jax.random.key(settings.seed)
    header = {
        "data": data,
        **dataclasses.asdict(settings),
        "family_config": to_dict(family_config(settings)),
        "variants": [dataclasses.asdict(v) for v in VARIANTS],
    }
    outcomes = []
    parts = [settings.families[0], *(["benchmarks"] if cases else []), *settings.families[1:]]
    for part in parts:  # the tables are rewritten after every part: a killed run keeps them
        began = time.perf_counter()
        if part == "benchmarks":
            outcomes += bench_outcomes(cases, settings, key, progress)
        else:
            outcomes += family_outcomes(part, settings, key)
        found = summary([o for o in outcomes if o.source == part], IMPROVED)
        if progress:
            tqdm.write(f"improve: {part} in {time.perf_counter() - began:.0f} s: {found}")
        recorder.sections.clear()
        _write(recorder, outcomes, settings)
        path = recorder.finish({**header, "parts done": parts[: parts.index(part) + 1]},
                               [settings.seed], NOTES)  # fmt: skip
        release_compiled_programs()  # each part compiles its own: keep the process's mappings low
    return path


def family_config(settings: Settings) -> Config:
    return make_config("tiny", list(settings.family), n_devices=settings.devices)


def family_outcomes(family: str, settings: Settings, key: jax.Array) -> list[Outcome]:
    """A paper policy and a start-trained one on `family`/train, every variant on its test
    graphs through the place pipeline (`variant_pipeline`)."""
    config = family_config(settings)
    cluster = cluster_of(config)
    train = load_graphs(f"family:{family}/train", config)[: settings.train_graphs]
    train = started(train, cluster, settings.start, key)
    test = load_graphs(f"family:{family}/test", config)
    named = [(pg.name, pg.op_graph or pg.graph) for pg in test]
    heuristics = None  # the op-graph heuristics of `best-op` starts: run once, not per variant
    if settings.start == "best-op":
        heuristics = [fast_heuristics(graph, cluster, key) for _, graph in named]
    params = {
        origin: trained(_from(config, origin), train, cluster, key)
        for origin in ("random", "start")
    }
    placed: dict[str, list[Placement]] = {}
    evaluations: dict[str, list[int]] = {}  # every stage's simulations, as `place` counts them
    for v in VARIANTS:
        policy = Policy(apply(config, {"env.passes": v.passes}), params[v.trained_from])
        done = place_many(named, cluster, variant_pipeline(v, settings), policy, key,
                          compare=False, heuristics=heuristics)  # fmt: skip
        placed[v.name] = [p.result for p in done]
        evaluations[v.name] = [p.evaluations for p in done]
    both = (placed, evaluations)
    return [
        _outcome(family, pg, cluster, key, *({v: x[i] for v, x in d.items()} for d in both))
        for i, pg in enumerate(test)
    ]


def variant_pipeline(v: Variant, settings: Settings) -> Pipeline:
    """The episodes of variant `v`: from a random placement or the start, with
    `settings.samples` sampled ones at its temperature when it samples."""
    start = "random" if v.start == "random" else settings.start
    if not v.samples:
        return Pipeline(start=start)
    return Pipeline(start=start, samples=settings.samples, temperature=v.temperature)


def trained(config: Config, graphs: list[PlacementGraph], cluster: Cluster, key: jax.Array):
    """Policy parameters after `config.train.iterations` updates on `graphs` from fresh."""
    state, _ = make_train(config, build_bank(graphs, config.run.buckets), cluster).run(key)
    return state.params


def _from(config: Config, origin: str) -> Config:
    """`config` with episodes from random placements ("random") or the given starts."""
    kind = "random" if origin == "random" else "given"
    return apply(config, {"env.initial_placement": kind})


def bench_outcomes(cases, settings: Settings, key: jax.Array, progress: bool) -> list[Outcome]:
    """Placeto trained on each benchmark file from random placements (the paper) and from the
    file's start, one `PlacetoBench` (one compile) per cluster and origin."""
    by_cluster: dict[tuple[int, float], list] = {}
    for case in cases:
        kind = (case.cluster.n_devices, float(case.cluster.memory_array[0]))
        by_cluster.setdefault(kind, []).append(case)
    out = []
    bar = tqdm(total=len(cases), desc="benchmarks", disable=not progress)
    for (n_devices, _), group in by_cluster.items():
        config = make_config("tiny", list(settings.bench), n_devices=n_devices)
        cluster = group[0].cluster
        graphs = [prepare(c.file, c.graph, config.run.group_target, cluster.delta1) for c in group]
        graphs = started(graphs, cluster, settings.start, key)
        benches = {o: PlacetoBench(_from(config, o), graphs, cluster) for o in ("random", "start")}
        for i, pg in enumerate(graphs):
            placed, evaluations = _bench_placed(benches, i, settings, key)
            out.append(_outcome("benchmarks", pg, cluster, key, placed, evaluations))
            bar.update()
    bar.close()
    return out


def _bench_placed(
    benches: dict[str, PlacetoBench], i: int, settings: Settings, key: jax.Array
) -> tuple[dict[str, Placement], dict[str, int]]:
    """The benchmark variants on graph `i`: the best greedy placement seen while training (from
    random placements, from the start), and the start-trained policy placed by the sampled
    variants' pipelines (`place_many`, the training's best a candidate); with each variant's
    simulations (its training run's `Fit.evaluations` and every stage's after it)."""
    paper, start = benches["random"].fit(i, key), benches["start"].fit(i, key)
    bench = benches["start"]
    pg = bench.graphs[i]
    given = pg.start
    from_start = start.evaluations + (given.evaluations if given is not None else 0)
    policy = Policy(bench.config, start.params, found=(start.best.placement,))
    named = [(pg.name, pg.op_graph or pg.graph)]

    def kept(v: Variant) -> tuple[Placement, int]:
        if v.trained_from == "random":
            return paper.best, paper.evaluations
        if not v.samples:
            return start.best, from_start
        (placed,) = place_many(named, bench.cluster, variant_pipeline(v, settings), policy, key,
                               compare=False)  # fmt: skip
        return placed.result, start.evaluations + placed.evaluations

    found = {v.name: kept(v) for v in BENCH_VARIANTS}
    return {n: p for n, (p, _) in found.items()}, {n: e for n, (_, e) in found.items()}


def _outcome(
    source: str,
    pg: PlacementGraph,
    cluster: Cluster,
    key: jax.Array,
    placed: dict[str, Any],
    evaluations: dict[str, int],
) -> Outcome:
    start = placed[IMPROVED]
    reference: PlacerResult = best_heuristic(pg.op_graph or pg.graph, cluster, key)
    return Outcome(
        source=source,
        graph=pg.name,
        decisions=start.n_units,
        start=start.start,
        start_ms=start.initial_makespan / MS,
        heuristic=reference.method,
        heuristic_ms=reference.makespan / MS,
        placed=placed,
        evaluations=evaluations,
    )


def faster(p: Placement, start_ms: float) -> bool:
    """Strictly faster than a start of `start_ms` (beyond rounding)."""
    return p.makespan / MS < start_ms * (1 - 1e-9)


def summary(outcomes: list[Outcome], variant: str) -> dict[str, Any]:
    """Share of `outcomes` that `variant` placed strictly faster than the start, and its mean
    gain 1 - makespan / start makespan."""
    mine = [o for o in outcomes if variant in o.placed]
    gains = [1 - o.placed[variant].makespan / MS / o.start_ms for o in mine]
    wins = [faster(o.placed[variant], o.start_ms) for o in mine]
    return {
        "graphs": len(mine),
        "strictly faster": float(np.mean(wins)) if mine else None,
        "mean gain": float(np.mean(gains)) if mine else None,
        "worst gain": float(np.min(gains)) if mine else None,
    }


def _write(recorder: Recorder, outcomes: list[Outcome], settings: Settings) -> None:
    rows = [
        {
            "source": o.source,
            "graph": o.graph,
            "decisions": o.decisions,
            "start": o.start,
            "start ms": o.start_ms,
            "paper ms": o.placed[VARIANTS[0].name].makespan / MS,
            "improve ms": o.placed[IMPROVED].makespan / MS,
            "improve / start": o.placed[IMPROVED].makespan / MS / o.start_ms,
            **{f"T = {v.temperature:g} ms": o.placed[v.name].makespan / MS for v in VARIANTS[6:]},
            "strictly faster": faster(o.placed[IMPROVED], o.start_ms),
            "fits memory": o.placed[IMPROVED].fits_memory,
            "op-graph heuristic ms": f"{o.heuristic_ms:.4g} {o.heuristic}",
            "episodes": o.placed[IMPROVED].episodes,
            "exact evaluations": o.placed[IMPROVED].evaluations,
        }
        for o in outcomes
    ]
    recorder.table(
        "per_graph",
        f"Per graph: improve mode (start-trained policy, K = {settings.samples}) from the start",
        rows,
        note="`start`: the best fast heuristic (METIS, HEFT, m-ETF, m-SCT) run on the "
        + START_WHERE[settings.start]
        + ", scored exactly on the op graph (`start ms`); every number of the "
        "row starts from it except `paper ms` (the paper's configuration: a policy trained from "
        "random placements, one greedy episode from a random placement). `op-graph heuristic` "
        "is the best fast heuristic run on the full op graph (with `best-op` starts, the start "
        "itself; else a reference). "
        "`T = t ms`: the improve variant with its K episodes sampled at temperature t (logits "
        "divided by t), from the same start. "
        "Makespans are exact op-graph simulations; `exact evaluations`: distinct placements "
        "simulated exactly to choose the returned one.",
    )
    recorder.table(
        "evaluations",
        "Simulator evaluations per method",
        [{"source": o.source, "graph": o.graph, **o.evaluations} for o in outcomes],
        note=f"{EVALUATIONS} Family graphs: every stage of the place pipeline (the start's "
        "simulations included); the family policies' training, shared by the family's graphs, "
        "not counted. Benchmark files: Placeto's training on the file and its greedy "
        "evaluations (with the start's simulations for the variants trained from it), the "
        "sampled variants' K episodes and exact rankings added.",
    )
    sources = sorted({o.source for o in outcomes}, key=[o.source for o in outcomes].index)
    levers = []
    for v in VARIANTS:
        for source in [*sources, "all"]:
            mine = outcomes if source == "all" else [o for o in outcomes if o.source == source]
            found = summary(mine, v.name)
            if found["graphs"]:
                levers.append({"variant": v.name, "source": source, **found})
    recorder.table(
        "summary",
        f"Share strictly faster than the start and mean gain, per lever (targets: >= "
        f"{TARGET_SHARE:.0%} and >= {TARGET_GAIN:.0%})",
        levers,
        note="`mean gain`: mean over graphs of 1 - makespan / start makespan (negative: slower "
        "than the start, possible only where the variant does not start from it: `paper`). "
        "Benchmark files have the three variants trained on each file.",
    )


START_WHERE = {
    "best": "grouped graph Placeto places",
    "best-op": "op graph (the graph regrouped within its placement, so that Placeto can keep "
    "it exactly)",
}
NOTES = """
Improve mode (docs/agent.md, "Improve mode"): episodes start from a given placement, here the
best fast heuristic's, on the grouped graph (`improve/`) or on the op graph (`improve-best-op/`,
`reproduce improve --start best-op`), and the placement returned is the best that the
episodes visited, ranked by exact simulation of the op graph, the start included, so it is never
slower than the start (among placements that fit memory). The family policies are trained on
each family's train split (tiny preset) twice: from random placements (the paper) and from the
starts; the benchmark files train Placeto on each file with the benchmarks experiment's quick
budget, both ways.
"""
