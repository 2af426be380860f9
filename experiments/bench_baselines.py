"""Every placement method on the same simulator: makespan, evaluations, wall time.

    python experiments/bench_baselines.py --graphs layered:2000 --devices 8
    python experiments/bench_baselines.py --graphs zoo:inception_v3 zoo:nmt --devices 2 4

Prints one table per (graph, devices) and writes every row to results/bench/baselines.json
(written to a temporary file, then renamed). Wall time includes any JIT compilation the method
triggers (search methods and METIS compile the batched simulator once per graph size).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

from placeto_jax import Cluster, resolve_graph  # noqa: E402
from placeto_jax.placers import METHODS, run_method  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["layered:2000"])
    parser.add_argument("--devices", nargs="+", type=int, default=[8])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--budget", type=int, default=None, help="simulator evaluations")
    parser.add_argument("--preset", default="placeto-k80")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/bench/baselines.json")
    args = parser.parse_args()

    rows = []
    for spec in args.graphs:
        graph = resolve_graph(spec)
        for n_devices in args.devices:
            cluster = Cluster.preset(args.preset, n_devices)
            print(f"\n{spec} ({graph.n_ops} ops), {n_devices} x {args.preset}")
            print(f"{'method':15s} {'makespan ms':>12s} {'estimate ms':>12s} {'evals':>6s} "
                  f"{'fits':>5s} {'wall s':>7s}")  # fmt: skip
            for name in args.methods:
                result = run_method(
                    name, graph, cluster, jax.random.key(args.seed), budget=args.budget
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
                        preset=args.preset,
                        method=name,
                        makespan_us=result.makespan,
                        estimate_us=None if result.estimate != result.estimate else result.estimate,
                        evaluations=result.evaluations,
                        fits_memory=result.fits_memory,
                        peak_memory_bytes=result.peak_memory.tolist(),
                        wall_s=result.wall_s,
                    )
                )
    _write_json(Path(args.out), {"budget": args.budget, "seed": args.seed, "rows": rows})
    print(f"\nwrote {args.out}")


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
