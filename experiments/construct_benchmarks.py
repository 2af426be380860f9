"""The construct agent on the benchmark folder's operator graphs: one policy trained on the
families' train splits places every operator graph zero-shot, each on its file's own
accelerators, with its own episodes (`config.own_pipeline`: greedy + 16 sampled episodes, or
with the lookahead, the greedy one), next to the same pipeline with the untrained policy and
with uniformly random episodes, and the best fast heuristic on the same graph (`--graphs`:
named graphs instead, on `--devices` placeto-k80s; `zoo-ops:MODEL` is a zoo model's op graph,
ungrouped; `--level LayerGraphs`: the folder's layer graphs). `--per-graph` adds a policy
trained on each graph alone (imitation of its best teacher, then self-imitation, no hint
reservation), placed the same way.
Ratios are of makespans penalised for memory overflow (`sim.ranking.penalised_makespan`): a
placement that does not fit loses to one that does.

Run: `python experiments/construct_benchmarks.py --out results/construct/benchmarks.json`
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import jax

from bench_wide import graph_of
from construct_zero_shot import placed_ratio
from placeto_jax.cli.options import cluster_of_args
from placeto_jax.cluster import Cluster
from placeto_jax.config import make_config, own_pipeline, to_dict
from placeto_jax.files import write_result
from placeto_jax.graphs.families import SPLITS
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import Policy, pipeline_json, place_many, uniform_random, untrained
from placeto_jax.placers import fast_heuristics, fastest_fitting
from placeto_jax.report import format_table
from placeto_jax.reproduce.benchmarks import Case, benchmark_cases
from placeto_jax.reproduce.construct import train_construct
from placeto_jax.sim.ranking import penalised_makespan

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("policy", "per_graph", "untrained", "uniform", "lookahead_rule")


def family_policy(args) -> Policy:
    """The policy in `--checkpoint`, or one trained on the first `--train` graphs of each
    family's train split (`--train-devices` placeto-k80s)."""
    if args.checkpoint:
        return Policy.load(args.checkpoint)
    cluster = Cluster.preset("placeto-k80", args.train_devices)
    config = make_config("construct", args.set, n_devices=args.train_devices)
    named = [
        (f"family:{f}/{i}", resolve_graph(f"family:{f}/{i}"))
        for f in args.families.split(",")
        for i in list(SPLITS["train"])[: args.train]
    ]
    workdir = args.workdir or tempfile.mkdtemp(prefix="construct-families-")
    return train_construct(config, named, cluster, workdir, progress=True)[0]


def named_cases(specs: str, cluster: Cluster) -> list[Case]:
    """The graphs `specs` (comma-separated registry names, graph files or
    `zoo-ops:MODEL[:SIZE=VALUE,...]`, as `bench_wide.graph_of` reads them) on `cluster`."""
    return [Case(spec, "operator, unknown", graph_of(spec), cluster, None, "none")
            for spec in specs.split(",")]  # fmt: skip


def per_graph_policy(args, name: str, graph, cluster: Cluster) -> tuple[Policy, float]:
    """A policy trained on `graph` alone, and its training seconds. It places the graph whose
    teacher it imitated, so its mask keeps no room for the hint (`env.construct_reserve`):
    the teacher may repack memory the hint filled."""
    began = time.perf_counter()
    overrides = ["env.construct_reserve=false", *args.per_graph_set]
    config = make_config("construct", overrides, n_devices=cluster.n_devices,
                         cluster_preset=cluster.preset_name())  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="construct-graph-") as workdir:
        policy, _ = train_construct(config, [(name, graph)], cluster, workdir)
    return policy, time.perf_counter() - began


def lookahead_rule(policy: Policy, name: str, graph, cluster: Cluster) -> float:
    """µs: the penalised makespan of the lookahead episode that follows the rule alone
    (`construct_zero_shot.placed_ratio` mode "lookahead", which reads no weights), from the
    hint the policy observes."""
    rule = argparse.Namespace(samples=0, temperature=1.0)
    return placed_ratio(policy.config, policy.params, name, graph, cluster, rule, "lookahead")[0]


def score(placed, cluster: Cluster) -> float:
    """µs: a placement's makespan penalised for memory overflow (`penalised_makespan`): one
    that does not fit loses to one that does, whatever its makespan."""
    return float(penalised_makespan([placed.makespan], placed.peak_memory[None], cluster)[0])


def _cell(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/benchmarks/msr-fiddle"))
    parser.add_argument("--families", default="cifar10,ptb,nmt")
    parser.add_argument("--train", type=int, default=24, help="train graphs per family")
    parser.add_argument("--train-devices", type=int, default=4, help="placeto-k80s to train on")
    parser.add_argument("--set", action="append", default=[], help="config KEY=VALUE")
    parser.add_argument("--checkpoint", default=None, help="place with this trained run")
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    parser.add_argument("--per-graph", action="store_true", help="also train on each graph")
    parser.add_argument("--per-graph-set", action="append", default=[], metavar="KEY=VALUE",
                        help="config of the per-graph runs")  # fmt: skip
    parser.add_argument("--match", default=None, help="only files whose path contains this")
    parser.add_argument("--level", choices=("OperatorGraphs", "LayerGraphs"),
                        default="OperatorGraphs", help="the folder's graphs to place")  # fmt: skip
    parser.add_argument("--graphs", default=None, help="named graphs instead of the folder's")
    parser.add_argument("--devices", type=int, default=None, help="devices for --graphs (4)")
    parser.add_argument("--cluster", default="placeto-k80", help="preset or file for --graphs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    cluster = cluster_of_args(args.cluster, args.devices, "--graphs", default=4)
    cases = named_cases(args.graphs, cluster) if args.graphs else [
        c for c in benchmark_cases(args.data, kinds=(args.level,))
        if args.match is None or args.match in c.file
    ]  # fmt: skip
    began = time.perf_counter()
    family = family_policy(args)
    train_s = time.perf_counter() - began
    key = jax.random.key(0)
    rows = []
    for case in cases:
        name, graph, cluster = case.file, case.graph, case.cluster
        named = [(name, graph)]
        heuristics = [fast_heuristics(graph, cluster, key)]
        best = fastest_fitting(heuristics[0])
        policy = family

        def placed(p: Policy, named=named, cluster=cluster, heuristics=heuristics):
            (done,) = place_many(named, cluster, own_pipeline(p.config), p, key, compare=False,
                                 heuristics=heuristics)  # fmt: skip
            return done

        mine = placed(policy)
        ref = score(best, cluster)
        controls = (placed(untrained(policy)).result, placed(uniform_random(policy)).result)
        row = {"graph": name, "ops": graph.n_ops, "devices": cluster.n_devices,
               "heuristic": best.method, "heuristic_ms": best.makespan / 1e3,
               "heuristic_fits": best.fits_memory, "policy_fits": mine.result.fits_memory,
               "policy_ratio": score(mine.result, cluster) / ref,
               "policy_raw_ratio": mine.result.makespan / best.makespan,
               "untrained_ratio": score(controls[0], cluster) / ref,
               "uniform_ratio": score(controls[1], cluster) / ref,
               "evaluations": mine.evaluations, "place_s": mine.wall_s}  # fmt: skip
        if policy.config.env.construct_lookahead:  # the rule its teacher follows, no network
            row["lookahead_rule_ratio"] = lookahead_rule(policy, name, graph, cluster) / ref
        if args.per_graph:
            own, seconds = per_graph_policy(args, name, graph, cluster)
            done = placed(own)
            row |= {
                "per_graph_ratio": score(done.result, cluster) / ref,
                "per_graph_fits": done.result.fits_memory,
                "per_graph_train_s": seconds,
            }
        rows.append(row)
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    labels = [label for label in LABELS if f"{label}_ratio" in rows[0]]
    geo = {
        label: math.exp(sum(math.log(r[f"{label}_ratio"]) for r in rows) / len(rows))
        for label in labels
    }
    columns = ["graph", "ops", "devices", "heuristic", "heuristic_ms",
               *(f"{label}_ratio" for label in labels)]  # fmt: skip
    print(format_table([columns] + [[_cell(r[c]) for c in columns] for r in rows]))
    print("geomean", {k: round(v, 4) for k, v in geo.items()}, f"train {train_s:.0f}s")
    if args.out:
        doc = {"families": args.families, "config": to_dict(family.config),
               "pipeline": pipeline_json(own_pipeline(family.config)), "train_s": train_s,
               "rows": rows, "geomean": geo}  # fmt: skip
        write_result(args.out, doc, sys.argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
