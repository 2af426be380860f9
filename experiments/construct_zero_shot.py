"""Zero-shot test of the constructive policy (`rl/construct_loop.py`) on one graph family:
train on the family's train split, place its test split (and test graphs drawn with other
seeds) with the policy's own episodes, next to the same pipeline with the untrained policy and
with uniformly random episodes, and the best fast heuristic on each op graph.

Run: `python experiments/construct_zero_shot.py --family cifar10 --out results/construct/c.json`
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import make_config, to_dict
from placeto_jax.files import write_json, write_result
from placeto_jax.graphs.families import SPLITS
from placeto_jax.graphs.io import read_json
from placeto_jax.graphs.measure import median_time_us
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import Policy
from placeto_jax.placers import best_heuristic, run_method, simulations
from placeto_jax.placers.guided import Units, guided_search
from placeto_jax.report import format_table
from placeto_jax.reproduce.construct import train_construct
from placeto_jax.rl import construct_loop as cl
from placeto_jax.stages.teachers import best_teacher, searched_from

CACHE = os.environ.get("HEURISTIC_CACHE", "/tmp/best_heuristic_cache.json")
WARM_CALLS = 3  # each side's time is the median of this many warm calls: one slow call is noise


def cached_best(name: str, graph, cluster: Cluster) -> dict:
    """The best fast heuristic on `graph` (cached on disk by graph name and cluster)."""
    key = f"{name}|{cluster.name}|{cluster.n_devices}"
    cache = read_json(CACHE) if os.path.exists(CACHE) else {}
    if key not in cache:
        best = best_heuristic(graph, cluster, jax.random.key(0))
        cache = read_json(CACHE) if os.path.exists(CACHE) else {}
        cache[key] = {"method": best.method, "makespan_us": best.makespan}
        write_json(CACHE, cache)
    return cache[key]


def _cell(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def placed_ratio(config, params, name, graph, cluster, args, mode="policy"):
    """The best of the pipeline's episodes (exact simulation) on `graph` and its greedy
    episode's, in µs, and the simulations spent (the hint's heuristics, when it observes one)."""
    hints, spent = None, 0
    if config.env.construct_hint == "best":
        results = best_teacher(graph, cluster, jax.random.key(0))
        hints, spent = [results[0].placement], simulations(results)
    env = config.env
    bank = cl.Bank.of([(name, graph)], cluster, hints, env.construct_reserve,
                      env.construct_lookahead)  # fmt: skip
    key = jax.random.fold_in(jax.random.key(7), int(graph.digest[:8], 16))
    rows = cl.candidates(config, params, bank, 0, key, args.samples, args.temperature, mode)
    by_position = np.stack([bank.built[0].by_position(r) for r in rows])[None]
    runtime = cl.scores(bank, cluster, [0], by_position)[0]
    looked = 0
    if env.construct_lookahead and mode != "uniform":
        looked = len(rows) * cl.lookahead_evaluations(graph, cluster.n_devices)
    return float(runtime.min()), float(runtime[0]), spent + len(rows) + looked


def from_start(graph, cluster, evaluations: int, wall_s: float) -> dict:
    """Local search from the hinted policy's declared start (the best of `TEACHERS`) with
    uniformly random proposals (`searched_from`'s passes, as many as the budget holds, the last
    one cut) given `evaluations` in all (the start's included), and given at most about `wall_s`
    seconds (its start's time included; budgets doubled as `searched` does): makespans (µs) and
    evaluations."""
    start = (graph, cluster, jax.random.key(0))
    results = best_teacher(*start)  # also warms it, as the policy's timed calls are
    start_s = median_time_us(best_teacher, start, repeats=WARM_CALLS, warmup=0) / 1e6
    spent = simulations(results)
    units = Units.of_ops(graph)

    def run(budget: int) -> tuple[float, int, float]:
        passes, part = divmod(max(0, budget - spent), len(units.order))
        cut = Units(units.of_op, units.order[:part])  # the last pass: the first `part` units
        began = time.perf_counter()
        if passes == 0:
            found = searched_from(graph, cluster, results[0], jax.random.key(0), cut)
        else:
            found = searched_from(graph, cluster, results[0], jax.random.key(0), units, passes)
            if part:
                proposals = jax.random.randint(jax.random.key(1), (1, part), 0, cluster.n_devices)
                found = guided_search(graph, cluster, cut, found, np.asarray(proposals))
        return found.makespan, spent + found.evaluations, start_s + time.perf_counter() - began

    same, timed = equal_and_timed(run, evaluations, wall_s)
    return {"start-search_same_evals": same[0], "start-search_same_evals_n": same[1],
            "start-search_same_wall": timed[0], "start-search_same_wall_n": timed[1]}  # fmt: skip


def equal_and_timed(run, evaluations: int, wall_s: float, last: int = 1 << 16):
    """`run(budget)` -> (makespan, evaluations, seconds) at `evaluations`, and at the largest
    budget doubled from it (at most `last`) whose warm runs took at most `wall_s` (the median
    of `WARM_CALLS`, as the policy's time is; `evaluations`' run when none did)."""
    same = run(evaluations)
    timed, budget = same, 2 * evaluations
    while budget <= min(last, 1 << 16):
        run(budget)  # compiles this budget's shapes
        runs, over = [], 0
        while over <= WARM_CALLS // 2 and len(runs) - over <= WARM_CALLS // 2:
            runs.append(run(budget))  # stops once most runs are over, or under: so is the median
            over += runs[-1][2] > wall_s
        found = (*runs[-1][:2], float(np.median([r[2] for r in runs])))
        if found[2] > wall_s:
            break
        timed, budget = found, 2 * budget
    return same, timed


def searched(graph, cluster, method: str, evaluations: int, wall_s: float) -> dict:
    """`method` (local search or the cross-entropy method) on `graph` given `evaluations`, and
    given at most about `wall_s` seconds (`equal_and_timed`): makespans (µs) and evaluations."""

    def run(budget: int) -> tuple[float, int, float]:
        found = run_method(method, graph, cluster, jax.random.key(0), budget)
        return found.makespan, found.evaluations, found.wall_s

    same, timed = equal_and_timed(run, evaluations, wall_s)
    return {
        f"{method}_same_evals": same[0],
        f"{method}_same_evals_n": same[1],
        f"{method}_same_wall": timed[0],
        f"{method}_same_wall_n": timed[1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", required=True)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--train", type=int, default=24, help="train graphs used (first N)")
    parser.add_argument("--seeds", default="0", help="test-graph seeds, comma-separated")
    parser.add_argument("--set", action="append", default=[], help="config KEY=VALUE")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    parser.add_argument("--checkpoint", default=None, help="place with this trained run instead")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--search",
        action="store_true",
        help="also local search and CEM at the policy's evaluations and time",
    )
    args = parser.parse_args(argv)
    cluster = Cluster.preset("placeto-k80", args.devices)
    config = make_config("construct", args.set, n_devices=args.devices)
    train_names = [f"family:{args.family}/{i}" for i in list(SPLITS["train"])[: args.train]]
    began = time.perf_counter()
    named = [(n, resolve_graph(n)) for n in train_names]
    if args.checkpoint:  # trained before: its run's config, its parameters
        policy = Policy.load(args.checkpoint)
        config, params = policy.config, policy.params
    else:
        workdir = args.workdir or tempfile.mkdtemp(prefix="construct-")
        params = train_construct(config, named, cluster, workdir, progress=True)[0].params
    train_s = time.perf_counter() - began
    untrained = cl.untrained_params(config)
    test_names = [
        f"family:{args.family}/{i}" + ("" if seed == "0" else f":{seed}")
        for seed in args.seeds.split(",")
        for i in SPLITS["test"]
    ]
    rows = []
    for name in test_names:
        graph = resolve_graph(name)
        began = time.perf_counter()
        policy, greedy, spent = placed_ratio(config, params, name, graph, cluster, args)
        place_s = time.perf_counter() - began  # compilation for this graph's shape included
        placing = (config, params, name, graph, cluster, args)
        warm_s = median_time_us(placed_ratio, placing, repeats=WARM_CALLS, warmup=0) / 1e6
        untrained_ms, _, _ = placed_ratio(config, untrained, name, graph, cluster, args)
        uniform_ms, _, _ = placed_ratio(config, untrained, name, graph, cluster, args, "uniform")
        if config.env.construct_lookahead:  # the rule its teacher follows, without a policy
            rule_ms, _, _ = placed_ratio(config, untrained, name, graph, cluster, args,
                                         "lookahead")  # fmt: skip
        best = cached_best(name, graph, cluster)
        ref = best["makespan_us"]
        row = {"graph": name, "ops": graph.n_ops, "heuristic": best["method"],
               "heuristic_ms": ref / 1e3, "policy_ratio": policy / ref,
               "greedy_ratio": greedy / ref, "untrained_ratio": untrained_ms / ref,
               "uniform_ratio": uniform_ms / ref, "evaluations": spent,
               "place_s": place_s, "place_warm_s": warm_s}  # fmt: skip
        if config.env.construct_lookahead:
            row["lookahead_rule_ratio"] = rule_ms / ref
        if args.search:  # the time of a compiled placement: what a user placing many pays
            found = {}
            for method in ("local-search", "cross-entropy"):
                found.update(searched(graph, cluster, method, spent, warm_s))
            if config.env.construct_hint == "best":  # the same search from the same start
                found.update(from_start(graph, cluster, spent, warm_s))
            row.update({k: v / ref if not k.endswith("_n") else v for k, v in found.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
    labels = ["policy", "greedy", "untrained", "uniform"]
    labels += ["lookahead_rule"] if config.env.construct_lookahead else []
    geo = {
        label: math.exp(sum(math.log(r[f"{label}_ratio"]) for r in rows) / len(rows))
        for label in labels
    }
    worst = max(r["policy_ratio"] for r in rows)
    columns = ["graph", "ops", "heuristic", "heuristic_ms"] + [f"{x}_ratio" for x in labels]
    print(format_table([columns] + [[_cell(r[c]) for c in columns] for r in rows]))
    print("geomean", {k: round(v, 4) for k, v in geo.items()}, "worst", round(worst, 4),
          f"train {train_s:.0f}s")  # fmt: skip
    if args.out:
        write_result(args.out, {"family": args.family, "config": to_dict(config),
                                "train_s": train_s, "rows": rows, "geomean": geo,
                                "worst_policy_ratio": worst}, sys.argv)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
