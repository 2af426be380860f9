"""Every method on the graphs of the benchmark folder (msr-fiddle format: layer and operator
graphs, inference and training), with the accelerator count and memory each file gives, next to
the files' expert splits (layer graphs only). Co-location classes (a training graph's weight and
its update) are kept by every method, Placeto included (docs/agent.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import make_config, to_dict
from placeto_jax.env.bank import prepare
from placeto_jax.graphs.benchmark import (
    benchmark_files,
    expert_split_file,
    load_benchmark,
    load_expert_split,
)
from placeto_jax.placers import run_method, scored
from placeto_jax.placers.base import Solution
from placeto_jax.reproduce import learned
from placeto_jax.reproduce.output import EVALUATIONS, SEARCH_METHODS, Recorder, fastest
from placeto_jax.reproduce.placeto import PlacetoBench

MS = 1e3  # µs
GRAPH_KINDS = ("LayerGraphs", "OperatorGraphs")
BASELINES = ("single", "metis", "heft", "m-etf", "m-sct", "local-search", "cross-entropy")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one preset runs."""

    search_budget: int  # simulator evaluations of local search and the cross-entropy method
    learned_budget: int  # simulator evaluations of the RNN placer and the hierarchical planner
    placeto: tuple[str, ...]  # config overrides (tiny preset) of Placeto trained per graph
    folders: tuple[str, ...] = ()  # top-level folders of the data folder to read (): all
    kinds: tuple[str, ...] = GRAPH_KINDS  # graph folders to read in each (LayerGraphs, ...)
    seed: int = 0


PRESETS = {
    "quick": Settings(
        # one accelerator count (6) and so one Placeto compile; --full adds latency-inputs
        folders=("throughput-inputs",),
        search_budget=256,
        learned_budget=256,
        placeto=("train.iterations=10", "train.episodes=16", "run.group_target=32"),
    ),
    "full": Settings(
        search_budget=8192,
        learned_budget=20480,
        placeto=(
            "train.iterations=200",
            "train.episodes=64",
            "run.group_target=128",
            "policy.rounds=8",
        ),
    ),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark graph with its hardware and expert split."""

    file: str  # path relative to the data folder
    kind: str  # "layer" or "operator", then "inference" or "training" (has backward nodes)
    graph: object  # Graph
    cluster: Cluster
    expert: np.ndarray | None  # [N] int64 device per node, from the file's expert split
    expert_source: str  # "own", "inference", "none" or "invalid (why)"


def benchmark_cases(
    data: str | Path, folders: tuple[str, ...] = (), kinds: tuple[str, ...] = GRAPH_KINDS
) -> list[Case]:
    """The graphs under `data` in a folder named in `kinds` (only under the top-level `folders`
    if any are given) with their clusters: `maxFPGAs` devices of `maxSizePerFPGA` bytes,
    placeto-k80 timing."""
    data = Path(data)
    cases = []
    for path in benchmark_files(data):
        if not set(kinds) & set(path.parts):
            continue
        if folders and path.relative_to(data).parts[0] not in folders:
            continue
        bench = load_benchmark(path)
        split, source = expert_split_file(data, path)
        expert = None
        if split is not None:
            try:
                expert = load_expert_split(split, bench)
            except ValueError as err:  # a split that does not fit its graph: shown, not used
                source = f"invalid ({' '.join(str(err).split())})"
        level = "layer" if "LayerGraphs" in path.parts else "operator"
        cases.append(
            Case(
                file=str(path.relative_to(data)),
                kind=f"{level}, {'training' if bench.is_backward.any() else 'inference'}",
                graph=bench.graph,
                cluster=Cluster(
                    n_devices=bench.max_accelerators, memory=bench.accelerator_memory_bytes
                ),
                expert=expert,
                expert_source=source,
            )
        )
    if not cases:
        where = f" in {', '.join(folders)}" if folders else ""
        wanted = " or ".join(f"*/{k}/*.json" for k in kinds)
        raise ValueError(f"no benchmark graphs ({wanted}) under {str(data)!r}{where}")
    return cases


def run_benchmarks(
    root: str | Path, data: str | Path, preset: str = "quick", progress: bool = True
) -> Path:
    settings = PRESETS[preset]
    cases = benchmark_cases(data, settings.folders, settings.kinds)  # read before any work
    recorder = Recorder(root, "benchmarks", preset)
    benches = _placeto_benches(cases, settings)
    quality, memory, wall, evaluations = [], [], [], []
    for case in tqdm(cases, desc="benchmarks", unit="graph", disable=not progress):
        results = _run_case(case, settings, benches)
        best, fits = fastest({m: (r.makespan_ms, r.fits_memory) for m, r in results.items()})
        quality.append(
            {
                "file": case.file,
                "kind": case.kind,
                "nodes": case.graph.n_ops,
                "accelerators": case.cluster.n_devices,
                "expert split": case.expert_source,
                **{m: r.makespan_ms for m, r in results.items()},
                "best": best if fits else f"{best} (none fits)",
            }
        )
        memory.append({"file": case.file, **{m: r.fits_memory for m, r in results.items()}})
        wall.append({"file": case.file, **{m: r.wall_s for m, r in results.items()}})
        evaluations.append({"file": case.file, **{m: r.evaluations for m, r in results.items()}})
        recorder.gantt(
            "gantt_" + Path(case.file).with_suffix("").as_posix().replace("/", "_"),
            f"Best placement: {case.file}",
            case.graph,
            case.cluster,
            results[best].placement,
            best,
        )
    _write(recorder, quality, memory, wall, evaluations)
    header = {
        "data": str(data),
        **dataclasses.asdict(settings),
        "placeto_config": to_dict(make_config("tiny", list(settings.placeto))),
    }
    return recorder.finish(header, [settings.seed], NOTES)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One method's placement of one benchmark graph."""

    makespan_ms: float | None  # None: the method gave no placement (no valid expert split)
    fits_memory: bool | None
    wall_s: float | None  # s, compilation included
    placement: np.ndarray | None  # [N] int64 device per node
    evaluations: int | None  # simulations it ran (`output.EVALUATIONS`)


def _run_case(
    case: Case, settings: Settings, benches: dict[str, tuple[PlacetoBench, int]]
) -> dict[str, Outcome]:
    """Every method on one benchmark graph, in table order."""
    key = jax.random.key(settings.seed)
    out = {"expert (file)": _expert(case)}
    for name in BASELINES:
        budget = settings.search_budget if name in SEARCH_METHODS else None
        result = run_method(name, case.graph, case.cluster, key, budget)
        out[name] = _outcome(result, result.wall_s, result.evaluations)
    for name in learned.TRAINERS:
        result, _ = learned.train(name, case.graph, case.cluster, key, settings.learned_budget)
        out[name] = _outcome(result, result.wall_s, result.evaluations)
    bench, index = benches[case.file]
    fit = bench.fit(index, key)
    out["placeto"] = _outcome(fit.best, float(fit.curve.wall_s[-1]), fit.evaluations)
    return out


def _outcome(result, wall_s: float | None, evaluations: int | None) -> Outcome:
    """From a PlacerResult or a Placeto Placement (makespan µs)."""
    return Outcome(result.makespan / MS, result.fits_memory, wall_s, result.placement, evaluations)


def _expert(case: Case) -> Outcome:
    if case.expert is None:
        return Outcome(None, None, None, None, None)
    return _outcome(
        scored("expert (file)", case.graph, case.cluster, Solution(case.expert), 0.0), None, 0
    )


def _write(recorder: Recorder, quality: list, memory: list, wall: list, evaluations: list) -> None:
    recorder.table(
        "makespan",
        "Makespan (ms) per benchmark graph",
        quality,
        note="Each file's accelerator count and memory; placeto-k80 timing constants. `kind`: "
        "layer or operator graph, inference or training (the file has backward nodes). "
        "`expert (file)` is the human-expert split that comes with the data (layer graphs "
        "only). Every method keeps each co-location class on one device. `best` is the "
        "fastest placement that fits every accelerator's memory (see the next table).",
    )
    recorder.table(
        "fits_memory",
        "Does the placement fit accelerator memory?",
        memory,
        note="The files give each accelerator's memory; a placement that overflows it would not "
        "run, whatever its makespan above.",
    )
    recorder.wall_times(wall)
    recorder.table("evaluations", "Simulator evaluations per method", evaluations, EVALUATIONS)


def _placeto_benches(cases: list[Case], settings: Settings) -> dict[str, tuple[PlacetoBench, int]]:
    """One PlacetoBench per cluster (one compile each); file -> (bench, index)."""
    by_cluster: dict[tuple[int, float], list[Case]] = {}
    for case in cases:
        kind = (case.cluster.n_devices, float(case.cluster.memory_array[0]))
        by_cluster.setdefault(kind, []).append(case)
    found = {}
    for (n_devices, _), group in by_cluster.items():
        config = make_config("tiny", list(settings.placeto), n_devices=n_devices)
        config = dataclasses.replace(config, seed=settings.seed)
        cluster = group[0].cluster
        graphs = [prepare(c.file, c.graph, config.run.group_target, cluster.delta1) for c in group]
        bench = PlacetoBench(config, graphs, cluster)
        found.update({c.file: (bench, i) for i, c in enumerate(group)})
    return found


NOTES = """
The benchmark graphs (Tarnawski et al., NeurIPS 2020) are read from the data folder given with
`--data`; nothing is copied into the repository. Placeto is trained on each graph from scratch
(coarsened to `run.group_target` groups); the RNN placer and the hierarchical planner are
trained per graph with the budget above.
"""
