"""Zero-shot test of the constructive policy (`rl/construct_loop.py`) on one graph family:
train on the family's train split, place its test split (and test graphs drawn with other
seeds) with the policy's own episodes, next to the same pipeline with the untrained policy and
with uniformly random episodes, and the best fast heuristic on each op graph.

Run: `python experiments/construct_zero_shot.py --family cifar10 --out results/construct/c.json`
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import jax

from placeto_jax.cluster import Cluster
from placeto_jax.files import write_json, write_result
from placeto_jax.graphs.families import SPLITS
from placeto_jax.graphs.io import read_json
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import best_heuristic
from placeto_jax.report import format_table
from placeto_jax.rl import construct_loop as cl

CACHE = os.environ.get("HEURISTIC_CACHE", "/tmp/best_heuristic_cache.json")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", required=True)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--train", type=int, default=24, help="train graphs used (first N)")
    parser.add_argument("--seeds", default="0", help="test-graph seeds, comma-separated")
    parser.add_argument("--imitation", type=int, default=300)
    parser.add_argument("--rl", type=int, default=0)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--entropy", type=float, default=0.01)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    cluster = Cluster.preset("placeto-k80", args.devices)
    settings = cl.Settings(
        imitation_updates=args.imitation,
        rl_updates=args.rl,
        samples=args.samples,
        temperature=args.temperature,
        learning_rate=args.lr,
        episodes=args.episodes,
        entropy=args.entropy,
    )
    train_names = [f"family:{args.family}/{i}" for i in list(SPLITS["train"])[: args.train]]
    began = time.perf_counter()
    bank = cl.Bank.of([(n, resolve_graph(n)) for n in train_names], cluster)
    learner, params, log = cl.train(bank, cluster, settings)
    train_s = time.perf_counter() - began
    untrained = cl.initial(bank, settings)[1]
    test_names = [
        f"family:{args.family}/{i}" + ("" if seed == "0" else f":{seed}")
        for seed in args.seeds.split(",")
        for i in SPLITS["test"]
    ]
    rows = []
    for name in test_names:
        graph = resolve_graph(name)
        test_bank = cl.Bank.of([(name, graph)], cluster)
        key = jax.random.key(7)
        runs = {
            "policy": cl.place(
                learner, params, test_bank, cluster, key, args.samples, args.temperature
            )[0],
            "untrained": cl.place(
                learner, untrained, test_bank, cluster, key, args.samples, args.temperature
            )[0],
            "uniform": cl.place(
                learner, params, test_bank, cluster, key, args.samples, mode="uniform"
            )[0],
        }
        best = cached_best(name, graph, cluster)
        row = {
            "graph": name,
            "ops": graph.n_ops,
            "heuristic": best["method"],
            "heuristic_ms": best["makespan_us"] / 1e3,
        }
        for label, placed in runs.items():
            row[f"{label}_ms"] = placed.makespan / 1e3
            row[f"{label}_ratio"] = placed.makespan / best["makespan_us"]
        row["greedy_ratio"] = runs["policy"].greedy / best["makespan_us"]
        row["evaluations"] = runs["policy"].evaluations
        row["place_s"] = runs["policy"].wall_s
        rows.append(row)
        print(json.dumps(row), flush=True)
    geo = {
        label: math.exp(sum(math.log(r[f"{label}_ratio"]) for r in rows) / len(rows))
        for label in ("policy", "greedy", "untrained", "uniform")
    }
    worst = max(r["policy_ratio"] for r in rows)
    columns = [
        "graph",
        "ops",
        "heuristic",
        "heuristic_ms",
        "policy_ratio",
        "greedy_ratio",
        "untrained_ratio",
        "uniform_ratio",
    ]
    print(format_table([columns] + [[_cell(r[c]) for c in columns] for r in rows]))
    print(
        "geomean",
        {k: round(v, 4) for k, v in geo.items()},
        "worst",
        round(worst, 4),
        f"train {train_s:.0f}s",
    )
    if args.out:
        write_result(
            args.out,
            {
                "family": args.family,
                "settings": dataclasses.asdict(settings),
                "train_s": train_s,
                "rows": rows,
                "geomean": geo,
                "worst_policy_ratio": worst,
                "log": log,
            },
            sys.argv,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
