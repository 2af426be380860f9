"""The matched-budget experiment: on every Table 1 cell and benchmark file, Placeto trained on
the graph (improve mode, from the best fast heuristic's placement) and then placed by a named
pipeline (`placeto_jax.pipeline`: by default "search", the configuration of record), against
the best fast heuristic on the same graph and against local search and the cross-entropy method
given Placeto's own number of simulator evaluations.

Placeto here is the benchmark experiment's quick budget (tiny preset, 10 updates x 16 episodes,
32 groups) with episodes from the best heuristic's placement (the graph regrouped within it, so
the start is kept exactly), the op-graph reward unless `--set env.reward_graph=grouped`. The
trained policy then places the graph through `place_many` like `place` does: the pipeline's
greedy and sampled episodes (`pipeline.samples` at `pipeline.temperature`), ranked with the best
placement training visited (`Policy.found`), then its search stages. Evaluations count every
simulator call: training as the efficiency experiment charges it (`efficiency.placeto_cost`)
and every stage's simulations as `place` reports them (the start's heuristics, the episodes'
steps and exact rankings, the searches). The same search stages from uniformly random proposals
are run as an ablation (reported, not charged).

Run: `python experiments/matched_budget.py --data ../shared/benchmarks/msr-fiddle` (`--only
table1`, `benchmarks`, `latency` or `dev` for one part); prints a table and writes
results/matched/matched.json atomically, with the resolved pipeline and its provenance.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.config import PIPELINES, Pipeline, apply, make_config, make_pipeline
from placeto_jax.env.bank import prepare
from placeto_jax.files import write_result
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import Policy, pipeline_json, place_many, starting_graphs
from placeto_jax.placers import fast_heuristics, fastest_fitting, run_method
from placeto_jax.report import format_table
from placeto_jax.reproduce.benchmarks import benchmark_cases
from placeto_jax.reproduce.efficiency import placeto_cost
from placeto_jax.reproduce.placeto import PlacetoBench
from placeto_jax.reproduce.programs import release_compiled_programs
from placeto_jax.reproduce.table1 import GRAPHS as TABLE1_GRAPHS
from placeto_jax.sim.ranking import rank_key

MS = 1e3  # µs
SEARCHES = ("local-search", "cross-entropy")
PLACETO = ("train.iterations=10", "train.episodes=16", "run.group_target=32")
DEV_GRAPHS = ("zoo:resnet50", "zoo:transformer", "zoo:gnmt", "zoo:bert_base", "family:cifar10/24")
FITS = ("best_heuristic_fits", "placeto_fits", "local-search_fits", "cross-entropy_fits")
OVERFLOWS = tuple(k.replace("_fits", "_overflow") for k in FITS)
SEARCH_STAGES = ("search-groups", "search-ops", "random", "second-start", "squeeze")


@dataclasses.dataclass(frozen=True)
class Case:
    label: str
    graph: object  # Graph
    cluster: Cluster


def table1_cases() -> list[Case]:
    """Table 1's quick cells: the zoo graphs (about 500 nodes) on 2 and 4 placeto-k80s."""
    return [
        Case(f"{spec} d{d}", resolve_graph(spec), Cluster.preset("placeto-k80", d))
        for d in (2, 4)
        for spec in TABLE1_GRAPHS
    ]


def dev_cases() -> list[Case]:
    """Graphs outside the scope to measure a lever on before it is kept: four zoo models at op
    level and a cifar10 family test graph, on 4 placeto-k80s."""
    cluster = Cluster.preset("placeto-k80", 4)
    return [Case(f"{spec} d4", resolve_graph(spec), cluster) for spec in DEV_GRAPHS]


def spec_cases(specs: str, devices: int) -> list[Case]:
    """Graphs named on the command line (built-in names or graph files, comma-separated) on
    `devices` placeto-k80s."""
    cluster = Cluster.preset("placeto-k80", devices)
    return [Case(f"{spec} d{devices}", resolve_graph(spec), cluster) for spec in specs.split(",")]


def file_cases(data: str, folder: str = "throughput-inputs") -> list[Case]:
    """The benchmark files under `folder` (default: the benchmark experiment's quick files), on
    each file's own accelerators."""
    return [Case(c.file, c.graph, c.cluster) for c in benchmark_cases(data, (folder,))]


def placeto_runs(
    cases: list[Case], overrides: list[str], pipeline: Pipeline, key: jax.Array, bar
) -> list[dict]:
    """Improve-mode Placeto trained on each case from its best heuristic's placement, then
    `pipeline`'s sampled episodes and search stages; one `PlacetoBench` (one compile) per
    cluster."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        kind = (case.cluster.n_devices, float(case.cluster.memory_array[0]))
        groups.setdefault(kind, []).append(case)
    rows = []
    for group in groups.values():
        cluster = group[0].cluster
        config = make_config("tiny", [*PLACETO, *overrides], n_devices=cluster.n_devices)
        config = apply(config, {"env.initial_placement": "given"})
        heuristics = [fast_heuristics(case.graph, cluster, key) for case in group]
        graphs = [prepare(c.label, c.graph, config.run.group_target, cluster.delta1) for c in group]
        graphs = starting_graphs(graphs, config, pipeline.start, key, cluster, heuristics)
        bench = PlacetoBench(config, graphs, cluster)
        for i, case in enumerate(group):
            rows.append(_placeto_row(case, bench, i, pipeline, heuristics[i], key))
            bar.update(1)
        release_compiled_programs()  # each compile holds memory mappings (docs/agent.md)
    return rows


def _placeto_row(case, bench, i, pipeline, heuristics, key) -> dict:
    """Case `i` of `bench`: trained, then placed by `pipeline` (`place_many`: its episodes with
    the best placement training found, then its search stages), with what each stage cost."""
    config, cluster, pg = bench.config, case.cluster, bench.graphs[i]
    began = time.perf_counter()
    fit = bench.fit(i, key)
    train = config.train
    steps = config.env.passes * pg.graph.n_ops + 1
    training = placeto_cost(train.iterations, train.episodes, steps, config.run.eval_every)
    named = [(case.label, case.graph)]
    policy = Policy(config, fit.params, found=(fit.best.placement,))
    (placed,) = place_many(named, cluster, pipeline, policy, key, compare=False,
                           heuristics=[heuristics])  # fmt: skip
    stages = [s for s in placed.stages if s.name in SEARCH_STAGES]
    extra = {}
    if stages:
        ablation = dataclasses.replace(pipeline, proposer="random", second_start=False,
                                       squeeze=False)  # fmt: skip
        (random,) = place_many(named, cluster, ablation, policy, key, compare=False,
                               heuristics=[heuristics])  # fmt: skip
        (episodes,) = [s for s in placed.stages if s.name == "episodes"]
        extra = {"unpolished_ms": episodes.makespan / MS,
                 "random_polish_ms": random.result.makespan / MS}  # fmt: skip
    searched = placed.result
    start = fastest_fitting(heuristics)
    return {
        "case": case,
        "nodes": case.graph.n_ops,
        "devices": cluster.n_devices,
        "decisions": pg.n_units,
        "heuristics": {r.method: (r.makespan / MS, r.fits_memory) for r in heuristics},
        "best_heuristic": start.method,
        "best_heuristic_ms": start.makespan / MS,
        "best_heuristic_fits": start.fits_memory,
        "best_heuristic_overflow": start.overflow,
        "placeto_ms": searched.makespan / MS,
        "placeto_fits": searched.fits_memory,
        "placeto_overflow": searched.overflow,
        "placeto_evaluations": training + placed.evaluations,
        "placeto_wall_s": time.perf_counter() - began,
        "stages": [s.to_json() for s in placed.stages],
        **extra,
    }


def add_searches(row: dict, key: jax.Array) -> None:
    """Local search and the cross-entropy method at Placeto's number of evaluations."""
    case = row["case"]
    for name in SEARCHES:
        result = run_method(name, case.graph, case.cluster, key, row["placeto_evaluations"])
        row[f"{name}_ms"] = result.makespan / MS
        row[f"{name}_fits"] = result.fits_memory
        row[f"{name}_overflow"] = result.overflow
        row[f"{name}_evaluations"] = result.evaluations
        row[f"{name}_wall_s"] = result.wall_s


def search_columns(row: dict) -> dict[str, str]:
    """The table's columns for search stages: Placeto before them, the same stages from random
    proposals, and each stage's evaluations ("-" where none ran)."""
    if "unpolished_ms" not in row:
        return dict.fromkeys(("unsearched", "random search", "stage evals"), "-")
    stages = {s["stage"]: s["evaluations"] for s in row["stages"]}
    return {
        "unsearched": f"{row['unpolished_ms']:.4g}",
        "random search": f"{row['random_polish_ms']:.4g}",
        "stage evals": " ".join(f"{stages.get(name, '-')}" for name in SEARCH_STAGES),
    }


def verdict(row: dict) -> bool:
    """Placeto at most every other method, in `rank_key` order (fitting memory first, then
    the least overflow), as `fastest_fitting` ranks."""

    def key(name: str, slack: float = 1.0) -> tuple[bool, float]:
        ms, fits, overflow = (row[f"{name}_{field}"] for field in ("ms", "fits", "overflow"))
        return rank_key(ms * MS * slack, fits, overflow * slack)

    mine = key("placeto")
    return all(mine <= key(n, 1 + 1e-9) for n in ("best_heuristic", *SEARCHES))


def report(rows: list[dict]) -> str:
    """The table (one line per graph; ratios: Placeto's makespan over the other's, lower is
    better), the count of graphs where Placeto is at most every other method, and its mean
    makespan ratio to the best heuristic where both fit memory (elsewhere a makespan says
    little: the placement cannot run)."""
    searching = any("unpolished_ms" in r for r in rows)
    table = [
        {
            "graph": r["graph"],
            "N": r["nodes"],
            "D": r["devices"],
            "decisions": r["decisions"],
            "best heuristic": f"{r['best_heuristic']} {r['best_heuristic_ms']:.4g}",
            "placeto": f"{r['placeto_ms']:.4g}",
            "placeto / best": f"{r['placeto_ms'] / r['best_heuristic_ms']:.4f}",
            "evals": r["placeto_evaluations"],
            "local search": f"{r['local-search_ms']:.4g}",
            "CEM": f"{r['cross-entropy_ms']:.4g}",
            **(search_columns(r) if searching else {}),
            "fits (h/p/ls/cem)": "".join("y" if r[k] else "n" for k in FITS),
            "overflow (h/p/ls/cem)": "/".join(f"{r[k]:.3g}" for k in OVERFLOWS),
            "placeto <= all": "yes" if r["placeto_at_most_all"] else "no",
        }
        for r in rows
    ]
    met = sum(r["placeto_at_most_all"] for r in rows)
    both_fit = [r for r in rows if r["placeto_fits"] and r["best_heuristic_fits"]]
    ratios = [r["placeto_ms"] / r["best_heuristic_ms"] for r in both_fit]
    ratio = f"{np.mean(ratios):.4f}" if ratios else "n/a"
    stages = " ".join(SEARCH_STAGES)
    return "\n".join([
        format_table([list(table[0]), *([str(v) for v in row.values()] for row in table)]),
        f"placeto at most every other method on {met} of {len(rows)} graphs; mean placeto / "
        f"best heuristic {ratio} on the {len(ratios)} where both fit memory "
        f"(stage evals: {stages})",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[3]
    parser.add_argument("--data", default=str(root.parent / "shared/benchmarks/msr-fiddle"))
    parser.add_argument("--only", choices=("table1", "benchmarks", "latency", "dev"),
                        default=None, help="one part (latency: the latency-inputs files; dev: "
                        "graphs outside the scope)")  # fmt: skip
    parser.add_argument("--pipeline", choices=sorted(PIPELINES), default="search",
                        help="the stages after training (default: %(default)s)")  # fmt: skip
    parser.add_argument("--graphs", default=None, metavar="SPEC[,SPEC...]",
                        help="these graphs (names or files) instead of the scope, on --devices "
                        "placeto-k80s")  # fmt: skip
    parser.add_argument("--devices", type=int, default=4, help="with --graphs (default: 4)")
    parser.add_argument("--match", default=None, metavar="TEXT",
                        help="only the graphs whose label contains TEXT")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=["env.reward_graph=ops"], metavar="KEY=VALUE",
                        help="config overrides of Placeto's training (default: the ops reward) "
                        "and pipeline.FIELD=VALUE ones")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, help="only the first N graphs")
    parser.add_argument("--out", type=Path, default=root / "results/matched/matched.json")
    args = parser.parse_args(argv)
    overrides = [s for s in args.set if not s.strip().startswith("pipeline.")]
    pipeline = make_pipeline(args.pipeline, [s for s in args.set if s not in overrides])
    make_config("tiny", [*PLACETO, *overrides])  # bad overrides fail here, before any work
    if pipeline.source != "policy" or not pipeline.start:
        parser.error("the pipeline must start Placeto's episodes from a start (pipeline.start)")
    if args.graphs is not None and args.only is not None:
        parser.error("--graphs replaces the scope: not with --only")
    if args.devices < 1:
        parser.error(f"--devices must be >= 1, got {args.devices}")
    if args.graphs is not None:
        cases = spec_cases(args.graphs, args.devices)
    elif args.only == "dev":
        cases = dev_cases()
    elif args.only == "latency":
        cases = file_cases(args.data, "latency-inputs")
    else:
        cases = [] if args.only == "benchmarks" else table1_cases()
        cases += [] if args.only == "table1" else file_cases(args.data)
    cases = [c for c in cases if args.match is None or args.match in c.label][: args.limit]
    key = jax.random.key(0)
    began = time.perf_counter()
    with tqdm(total=len(cases), desc="placeto", unit="graph") as bar:
        rows = placeto_runs(cases, overrides, pipeline, key, bar)
    for row in tqdm(rows, desc="searches", unit="graph"):
        add_searches(row, key)
    for row in rows:
        row["placeto_at_most_all"] = verdict(row)
        row["graph"] = row.pop("case").label
    print(report(rows))
    write_result(
        args.out,
        {"overrides": [*PLACETO, *overrides], "pipeline": pipeline_json(pipeline),
         "wall_s": time.perf_counter() - began, "rows": rows},
    )  # fmt: skip
    print(f"wrote {args.out}")
    return 0
