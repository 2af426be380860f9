"""Issue 20 item 1, measured on its own scope: on every Table 1 cell and every benchmark file,
Placeto's placement against the best non-learned heuristic on the same graph and against local
search and the cross-entropy method given Placeto's own number of simulator evaluations.

Placeto here is improve mode trained on each graph (the benchmark experiment's quick budget:
tiny preset, 10 updates x 16 episodes, 32 groups) with episodes from the best heuristic's
placement (the graph regrouped within it, as `--start best-op` does with the four fast
heuristics, so the start is kept exactly), the op-graph reward unless `--set
env.reward_graph=grouped`, and K = 32 sampled episodes at T = 8 (the per-graph setting's
held-out temperature, docs/agent.md); its placement is the best of those samples, the greedy
evaluations and the best placement any training episode visited. Its evaluations count every
simulator call: training as the efficiency experiment charges it (`efficiency.placeto_cost`: one
per training step, 2 x (nodes + 1) per greedy evaluation, one for training's best at each) and,
for the samples, K x (nodes + 1) steps plus the `SCREENED` exact simulations. `--refine G:U`
adds a second stage on G groups (`refined`), charged the same way; `--polish P` then a
policy-guided search on the op graph (`polished`: P visits of every op, one proposal each, a
move kept only if it helps; one evaluation per step; `--polish all`: D - 1 passes, and with
`--proposer ranked` pass p proposes each op's p-th most likely other device), with the same
search from uniformly random proposals as its ablation (reported, not charged);
`--then-random P`: P passes of random proposals after the op-level search (and after the second
start's), charged, since the policy's ranked proposals can settle in a basin that random ones
leave (docs/agent.md, "The memory squeeze", random passes); `--squeeze`
last, where Placeto's placement overflows a device's memory, the memory squeeze
(`placers.squeeze`, charged its simulations; column "squeeze": the overflow before and after).
Local search (from single device) and the cross-entropy method then get that many.

Run: `python experiments/matched_budget.py --data ../shared/benchmarks/msr-fiddle`
(`--only table1` or `--only benchmarks` for one part, `--only dev` for graphs outside the
scope); prints a table, writes results/matched/matched.json atomically.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cli.agent import squeeze_placements
from placeto_jax.cluster import Cluster
from placeto_jax.config import apply, make_config
from placeto_jax.env.bank import PlacementGraph, prepare
from placeto_jax.env.start import with_start
from placeto_jax.files import write_json
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import PlacerResult, fastest_fitting, run_method
from placeto_jax.report import format_table
from placeto_jax.reproduce.benchmarks import benchmark_cases
from placeto_jax.reproduce.efficiency import placeto_cost
from placeto_jax.reproduce.placeto import PlacetoBench
from placeto_jax.reproduce.programs import release_compiled_programs
from placeto_jax.reproduce.table1 import GRAPHS as TABLE1_GRAPHS
from placeto_jax.rl.evaluate import (
    SCREENED,
    Placement,
    place_with,
    polish_placements,
    rank_visited,
)
from placeto_jax.sim.ranking import rank_key

ROOT = Path(__file__).resolve().parents[1]
MS = 1e3  # µs
HEURISTICS = ("single", "metis", "heft", "critical-path", "m-topo", "m-etf", "m-sct", "fit-fastest")
SEARCHES = ("local-search", "cross-entropy")
PLACETO = ("train.iterations=10", "train.episodes=16", "run.group_target=32")
SAMPLES, TEMPERATURE = 32, 8.0
DEV_GRAPHS = ("zoo:resnet50", "zoo:transformer", "zoo:gnmt", "zoo:bert_base", "family:cifar10/24")
FITS = ("best_heuristic_fits", "placeto_fits", "local-search_fits", "cross-entropy_fits")
OVERFLOWS = tuple(k.replace("_fits", "_overflow") for k in FITS)


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
    """Graphs outside item 1's scope to measure a lever on before it is kept: four zoo models
    at op level and a cifar10 family test graph, on 4 placeto-k80s."""
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


@dataclasses.dataclass(frozen=True)
class Refine:
    """A second improve-mode stage on a finer grouping, from the first stage's placement and
    policy."""

    groups: int  # group target of the op graph, regrouped within the first stage's placement
    updates: int  # fine-tuning updates of the first stage's parameters

    @staticmethod
    def parse(text: str) -> Refine:
        try:
            groups, updates = (int(x) for x in text.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected GROUPS:UPDATES, got {text!r}") from None
        if groups < 1 or updates < 1:
            raise argparse.ArgumentTypeError(f"GROUPS and UPDATES must be >= 1, got {text!r}")
        return Refine(groups, updates)


def refined(
    case: Case, config, first: Placement, params, refine: Refine, key: jax.Array
) -> tuple[Placement, int]:
    """(placement, evaluations) of the refining stage: the op graph grouped to `refine.groups`
    within `first`'s placement, `first`'s policy fine-tuned there for `refine.updates` updates,
    then sampled as in the first stage; the best of `first` and everything it evaluated
    (`first` is the fine-tuning curve's first point)."""
    cluster = case.cluster
    config = apply(config, {"run.group_target": refine.groups, "train.iterations": refine.updates})
    pg = prepare(case.label, case.graph, refine.groups, cluster.delta1)
    pg = with_start(pg, first.placement, "first stage", cluster.n_devices, cluster.delta1)
    bench = PlacetoBench(config, [pg], cluster)
    fit = bench.fit(0, key, init_params=params, init_placement=first)
    (sampled,) = place_with(
        bench.run, fit.params, bench.graph_env_params(0), [pg], cluster, SAMPLES, key, TEMPERATURE
    )
    steps = config.env.passes * pg.graph.n_ops + 1
    evaluations = (
        placeto_cost(refine.updates, config.train.episodes, steps, config.run.eval_every)
        + SAMPLES * steps
        + SCREENED
    )
    return min((fit.best, sampled), key=bench.score), evaluations


ALL_DEVICES = -1  # `--polish all`: one pass per other device (D - 1)


def passes(text: str) -> int:
    """`--polish`'s value: visits of every op, >= 0 (0: no polishing), or "all" (one pass per
    other device: with `--proposer ranked`, every device tried for every op)."""
    if text == "all":
        return ALL_DEVICES
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of passes, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"passes must be >= 0, got {value}")
    return value


def polished(
    case: Case,
    config,
    first: Placement,
    params,
    passes: int,
    proposer: str = "policy",
    groups: PlacementGraph | None = None,
) -> tuple[Placement, int]:
    """(placement, evaluations) of policy-guided search on the op graph (`polish_placements`)
    from `first`'s placement with the first stage's policy, `passes` visits of every op
    (`groups`: of every group of that grouped graph, moved whole); the better of `first` and
    its result. Evaluations: one per step and the initial simulation, plus the exact ranking
    of the two."""
    pg = groups or PlacementGraph(case.label, case.graph)  # the op graph is prepared there
    (placed,) = polish_placements(config, params, [pg], [first], case.cluster, passes, proposer,
                                  on_groups=groups is not None)  # fmt: skip
    return placed, placed.polish_steps - first.polish_steps + placed.evaluations - first.evaluations


def second_start(
    case: Case, config, fastest: PlacerResult, params, passes: int, proposer: str,
    then_random: int = 0,
) -> tuple[Placement, int]:  # fmt: skip
    """(placement, evaluations) of the op-level search (`polished`) from the placement of the
    fastest heuristic other than the start, memory aside: where it overflows, relief can fit a
    fast placement that the start is far from; where it fits, it is a second basin. Evaluations:
    the start's simulation and the search's."""
    pg = PlacementGraph(case.label, case.graph)
    first = rank_visited(pg, case.cluster, fastest.placement[None], fastest.method)
    placed, spent = polished(case, config, first, params, passes, proposer)
    if then_random:
        placed, more = polished(case, config, placed, params, then_random, "random")
        spent += more
    return placed, first.evaluations + spent


def placeto_runs(
    cases: list[Case],
    overrides: list[str],
    key: jax.Array,
    bar,
    refine: Refine | None = None,
    polish: int = 0,
    polish_groups: int = 0,
    proposer: str = "policy",
    from_fastest: bool = False,
    squeeze: bool = False,
    then_random: int = 0,
) -> list[dict]:
    """Improve-mode Placeto trained on each case from its best heuristic's placement; one
    `PlacetoBench` (one compile) per cluster; `proposer` proposes the op-level search's moves
    (the group search's are the policy's most likely); `from_fastest`: the op-level search
    also runs from the fastest other heuristic, memory aside (`second_start`); `squeeze`: the
    memory squeeze last, where the placement overflows (`squeezed`)."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        kind = (case.cluster.n_devices, float(case.cluster.memory_array[0]))
        groups.setdefault(kind, []).append(case)
    rows = []
    for group in groups.values():
        cluster = group[0].cluster
        config = make_config("tiny", [*PLACETO, *overrides], n_devices=cluster.n_devices)
        config = apply(config, {"env.initial_placement": "given"})
        starts, graphs = [], []
        for case in group:
            heuristics = [run_method(m, case.graph, cluster, key) for m in HEURISTICS]
            start = fastest_fitting(heuristics)
            pg = prepare(case.label, case.graph, config.run.group_target, cluster.delta1)
            graphs.append(with_start(pg, start.placement, start.method, cluster.n_devices,
                                     cluster.delta1))  # fmt: skip
            starts.append((start, heuristics))
        bench = PlacetoBench(config, graphs, cluster)
        for i, (case, (start, heuristics)) in enumerate(zip(group, starts, strict=True)):
            began = time.perf_counter()
            fit = bench.fit(i, key)
            (sampled,) = place_with(
                bench.run, fit.params, bench.graph_env_params(i), [graphs[i]], cluster,
                SAMPLES, key, TEMPERATURE,
            )  # fmt: skip
            placed = min((fit.best, sampled), key=bench.score)
            steps = config.env.passes * graphs[i].graph.n_ops + 1
            train = config.train
            evaluations = (
                placeto_cost(train.iterations, train.episodes, steps, config.run.eval_every)
                + SAMPLES * steps
                + SCREENED
            )
            if refine is not None:
                placed, more = refined(case, config, placed, fit.params, refine, key)
                evaluations += more
            extra = {}
            if polish or polish_groups:
                op_passes = max(cluster.n_devices - 1, 1) if polish == ALL_DEVICES else polish
                stages = [(polish_groups, graphs[i], "policy"), (op_passes, None, proposer),
                          (then_random, None, "random")]  # fmt: skip
                ablation = searched = placed
                more = 0
                for count, on, how in (stage for stage in stages if stage[0]):
                    ablation, _ = polished(case, config, ablation, fit.params, count, "random", on)
                    searched, spent = polished(case, config, searched, fit.params, count, how,
                                               groups=on)  # fmt: skip
                    more += spent
                extra = {"unpolished_ms": placed.makespan / MS,
                         "random_polish_ms": ablation.makespan / MS,
                         "polish_evaluations": more}  # fmt: skip
                placed = searched
                evaluations += more
                others = [r for r in heuristics if r.method != start.method]
                fastest = min(others, key=lambda r: r.makespan) if others else None
                if from_fastest and op_passes and fastest is not None:
                    other, spent = second_start(case, config, fastest, fit.params, op_passes,
                                                proposer, then_random)  # fmt: skip
                    extra["second_start"] = f"{fastest.method} {other.makespan / MS:.4g}"
                    placed = min((placed, other), key=bench.score)
                    evaluations += spent
            if squeeze and not placed.fits_memory:
                placed, spent, extra["squeeze"] = squeezed(case, placed)
                evaluations += spent
            rows.append(
                {
                    "case": case,
                    "nodes": case.graph.n_ops,
                    "devices": cluster.n_devices,
                    "decisions": graphs[i].n_units,
                    "heuristics": {r.method: (r.makespan / MS, r.fits_memory) for r in heuristics},
                    "best_heuristic": start.method,
                    "best_heuristic_ms": start.makespan / MS,
                    "best_heuristic_fits": start.fits_memory,
                    "best_heuristic_overflow": start.overflow,
                    "placeto_ms": placed.makespan / MS,
                    "placeto_fits": placed.fits_memory,
                    "placeto_overflow": placed.overflow,
                    "placeto_evaluations": evaluations,
                    "placeto_wall_s": time.perf_counter() - began,
                    **extra,
                }
            )
            bar.update(1)
        release_compiled_programs()  # each compile holds memory mappings (docs/agent.md)
    return rows


def squeezed(case: Case, placed: Placement) -> tuple[Placement, int, str]:
    """(the memory squeeze's placement from `placed`, its simulations, "overflow before ->
    after")."""
    (out,) = squeeze_placements([PlacementGraph(case.label, case.graph)], [placed], case.cluster)
    change = f"{placed.overflow:.4g} -> {out.overflow:.4g}"
    return out, out.squeeze_steps - placed.squeeze_steps, change


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


def polish_columns(row: dict) -> dict[str, str]:
    """The table's columns for `--polish`: Placeto before it, the random-proposal ablation and
    the search from the fastest heuristic (`--from-fastest`, "-" where none ran)."""
    if "unpolished_ms" not in row:
        return {}
    return {
        "unpolished": f"{row['unpolished_ms']:.4g}",
        "random polish": f"{row['random_polish_ms']:.4g}",
        "second start": row.get("second_start", "-"),
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
    """The table (one line per graph), the count of graphs where Placeto is at most every
    other method, and its mean makespan gain over the best heuristic where both fit memory
    (elsewhere a makespan says little: the placement cannot run); a "squeeze" column where
    the memory squeeze ran."""
    squeezing = any("squeeze" in r for r in rows)
    table = [
        {
            "graph": r["graph"],
            "N": r["nodes"],
            "D": r["devices"],
            "decisions": r["decisions"],
            "best heuristic": f"{r['best_heuristic']} {r['best_heuristic_ms']:.4g}",
            "placeto": f"{r['placeto_ms']:.4g}",
            "evals": r["placeto_evaluations"],
            "local search": f"{r['local-search_ms']:.4g}",
            "CEM": f"{r['cross-entropy_ms']:.4g}",
            **polish_columns(r),
            **({"squeeze": r.get("squeeze", "-")} if squeezing else {}),
            "fits (h/p/ls/cem)": "".join("y" if r[k] else "n" for k in FITS),
            "overflow (h/p/ls/cem)": "/".join(f"{r[k]:.3g}" for k in OVERFLOWS),
            "placeto <= all": "yes" if r["placeto_at_most_all"] else "no",
        }
        for r in rows
    ]
    met = sum(r["placeto_at_most_all"] for r in rows)
    both_fit = [r for r in rows if r["placeto_fits"] and r["best_heuristic_fits"]]
    gains = [1 - r["placeto_ms"] / r["best_heuristic_ms"] for r in both_fit]
    gain = f"{np.mean(gains):+.2%}" if gains else "n/a"
    return "\n".join([
        format_table([list(table[0]), *([str(v) for v in row.values()] for row in table)]),
        f"placeto at most every other method on {met} of {len(rows)} graphs; mean makespan "
        f"gain over the best heuristic {gain} on the {len(gains)} where both fit memory",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/benchmarks/msr-fiddle"))
    parser.add_argument("--only", choices=("table1", "benchmarks", "latency", "dev"),
                        default=None, help="one part (latency: the latency-inputs files; dev: "
                        "graphs outside the scope)")  # fmt: skip
    parser.add_argument("--refine", type=Refine.parse, default=None, metavar="GROUPS:UPDATES",
                        help="a second stage on a finer grouping (see `refined`)")  # fmt: skip
    parser.add_argument("--polish", type=passes, default=0, metavar="PASSES",
                        help="then policy-guided search on the op graph (`polished`)")  # fmt: skip
    parser.add_argument("--proposer", choices=("policy", "ranked"), default="policy",
                        help="the op-level search's proposals: the policy's most likely other "
                        "device, or on pass p its p-th most likely (ranked)")  # fmt: skip
    parser.add_argument("--polish-groups", type=passes, default=0, metavar="PASSES",
                        help="before --polish: the same search over the groups, each moved "
                        "whole (not after --refine, whose groups differ)")  # fmt: skip
    parser.add_argument("--from-fastest", action="store_true",
                        help="with --polish: the op-level search also from the fastest "
                        "other heuristic, memory aside")  # fmt: skip
    parser.add_argument("--then-random", type=int, default=0, metavar="PASSES",
                        help="with --polish: that many passes of random proposals after the "
                        "op-level search (and after the second start's), charged")  # fmt: skip
    parser.add_argument("--squeeze", action="store_true",
                        help="last, where Placeto's placement overflows: the memory squeeze "
                        "(`placers.squeeze`), charged")  # fmt: skip
    parser.add_argument("--graphs", default=None, metavar="SPEC[,SPEC...]",
                        help="these graphs (names or files) instead of the scope, on --devices "
                        "placeto-k80s")  # fmt: skip
    parser.add_argument("--devices", type=int, default=4, help="with --graphs (default: 4)")
    parser.add_argument("--match", default=None, metavar="TEXT",
                        help="only the graphs whose label contains TEXT")  # fmt: skip
    parser.add_argument("--set", nargs="*", default=["env.reward_graph=ops"], metavar="KEY=VALUE",
                        help="Placeto config overrides (default: the ops reward)")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, help="only the first N graphs")
    parser.add_argument("--out", type=Path, default=ROOT / "results/matched/matched.json")
    args = parser.parse_args(argv)
    make_config("tiny", [*PLACETO, *args.set])  # bad overrides fail here, before any work
    if args.polish_groups == ALL_DEVICES:
        parser.error("--polish-groups takes a number of passes, not all")
    if args.refine and args.polish_groups:
        parser.error("--polish-groups searches the first stage's groups: not with --refine")
    if args.graphs is not None and args.only is not None:
        parser.error("--graphs replaces the scope: not with --only")
    if args.then_random < 0:
        parser.error(f"--then-random must be >= 0, got {args.then_random}")
    if args.then_random and not args.polish:
        parser.error("--then-random follows the op-level search (--polish)")
    if args.from_fastest and not args.polish:
        parser.error("--from-fastest runs the op-level search (--polish) from a second start")
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
        rows = placeto_runs(cases, args.set, key, bar, args.refine, args.polish, args.polish_groups,
                            args.proposer, args.from_fastest, args.squeeze,
                            args.then_random)  # fmt: skip
    for row in tqdm(rows, desc="searches", unit="graph"):
        add_searches(row, key)
    for row in rows:
        row["placeto_at_most_all"] = verdict(row)
        row["graph"] = row.pop("case").label
    print(report(rows))
    write_json(
        args.out,
        {"overrides": [*PLACETO, *args.set], "samples": SAMPLES, "temperature": TEMPERATURE,
         "refine": args.refine and dataclasses.asdict(args.refine), "polish": args.polish,
         "polish_groups": args.polish_groups, "proposer": args.proposer,
         "from_fastest": args.from_fastest, "squeeze": args.squeeze,
         "wall_s": time.perf_counter() - began, "rows": rows},
    )  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
