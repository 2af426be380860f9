"""Every placement method on the same simulator: makespan, evaluations, wall time.

    python experiments/bench_baselines.py --graphs layered:2000 --devices 8
    python experiments/bench_baselines.py --graphs zoo:inception_v3 zoo:nmt --devices 2 4
    python experiments/bench_baselines.py --methods rnn hierarchical --learned-budget 1024

Prints one table per (graph, devices), then one Markdown table per graph, and writes every row
to results/bench/baselines.json (written to a temporary file, then renamed). Wall time includes
any JIT compilation the method triggers (search methods and METIS compile the batched simulator
once per graph size; the learned methods also compile their policy). `--budget` caps the
simulator evaluations of the search methods, `--learned-budget` those of the learned ones
(`rnn`, `hierarchical`; default: `--budget`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax

from placeto_jax import Cluster, resolve_graph
from placeto_jax.files import write_result
from placeto_jax.placers import METHODS, run_method

LEARNED = ("rnn", "hierarchical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["layered:2000"])
    parser.add_argument("--devices", nargs="+", type=int, default=[8])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--budget", type=int, default=None, help="simulator evaluations")
    parser.add_argument("--learned-budget", type=int, default=None, help="for rnn, hierarchical")
    parser.add_argument("--cluster", default="placeto-k80")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/bench/baselines.json")
    args = parser.parse_args()

    rows = []
    for spec in args.graphs:
        graph = resolve_graph(spec)
        for n_devices in args.devices:
            cluster = Cluster.preset(args.cluster, n_devices)
            print(f"\n{spec} ({graph.n_ops} ops), {n_devices} x {args.cluster}")
            print(f"{'method':15s} {'makespan ms':>12s} {'estimate ms':>12s} {'evals':>6s} "
                  f"{'fits':>5s} {'wall s':>7s}")  # fmt: skip
            for name in args.methods:
                budget = args.learned_budget if name in LEARNED else None
                result = run_method(
                    name, graph, cluster, jax.random.key(args.seed), budget=budget or args.budget
                )
                print(
                    f"{name:15s} {result.makespan / 1e3:12.3f} {result.estimate / 1e3:12.3f} "
                    f"{result.evaluations:6d} {result.fits_memory!s:>5s} {result.wall_s:7.2f}"
                )
                rows.append(
                    dict(
                        graph=spec,
                        n_ops=graph.n_ops,
                        devices=n_devices,
                        cluster=args.cluster,
                        method=name,
                        makespan_us=result.makespan,
                        estimate_us=None if result.estimate != result.estimate else result.estimate,
                        evaluations=result.evaluations,
                        fits_memory=result.fits_memory,
                        peak_memory_bytes=result.peak_memory.tolist(),
                        wall_s=result.wall_s,
                    )
                )
    doc = {
        "budget": args.budget,
        "learned_budget": args.learned_budget or args.budget,
        "seed": args.seed,
        "rows": rows,
    }
    write_result(Path(args.out), doc)
    print(f"\nwrote {args.out}")
    for spec in args.graphs:
        print(f"\n{markdown([r for r in rows if r['graph'] == spec])}")


def markdown(rows: list[dict]) -> str:
    """One graph's rows as a Markdown table: a column group per device count; makespans of
    placements that overflow memory are marked with *."""
    devices = sorted({r["devices"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cell = {(r["method"], r["devices"]): r for r in rows}
    head = "| method | " + " | ".join(f"{d} dev: ms | evals | wall s" for d in devices) + " |"
    lines = [f"{rows[0]['graph']} ({rows[0]['n_ops']} ops)", "", head]
    lines.append("|---|" + "---:|---:|---:|" * len(devices))
    for name in methods:
        cells = []
        for d in devices:
            r = cell[name, d]
            ms = f"{r['makespan_us'] / 1e3:.1f}" + ("" if r["fits_memory"] else "*")
            cells.append(f"{ms} | {r['evaluations']} | {r['wall_s']:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
