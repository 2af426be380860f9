"""How far below the best fast heuristic could any placement go? For each operator graph of the
benchmark folder (on its file's own accelerators), or named graphs on `--cluster`: the best fast
heuristic, `makespan_lower_bound` over it, and whether `exclusion` proves that no placement
reaches `--ratio` of it (a target such as issue 45's 0.97).

Run: `python experiments/lower_bounds.py --out results/bounds/benchmarks.json`
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

from bench_wide import graph_of
from placeto_jax.cli.options import cluster_of_args
from placeto_jax.files import write_result
from placeto_jax.placers import fast_heuristics, fastest_fitting
from placeto_jax.report import format_table
from placeto_jax.reproduce.benchmarks import benchmark_cases
from placeto_jax.sim.bound import exclusion, makespan_lower_bound

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("graph", "ops", "devices", "heuristic", "heuristic_ms", "bound_ratio", "excluded",
           "tied_edges", "largest_group_ops", "bound_s")  # fmt: skip


def bound_row(name: str, graph, cluster, ratio: float) -> dict:
    """The best fast heuristic on `graph`, the lower bound over it, and the verdict on `ratio`."""
    best = fastest_fitting(fast_heuristics(graph, cluster, jax.random.key(0)))
    began = time.perf_counter()
    bound = makespan_lower_bound(graph, cluster)
    verdict = exclusion(graph, cluster, ratio * best.makespan)
    return {
        "graph": name,
        "ops": graph.n_ops,
        "devices": cluster.n_devices,
        "heuristic": best.method,
        "heuristic_ms": best.makespan / 1e3,
        "heuristic_fits": best.fits_memory,
        "bound_ratio": bound / best.makespan,
        "excluded": verdict.excluded,
        "tied_edges": verdict.tied_edges,
        "largest_group_ops": verdict.largest_group_ops,
        "bound_s": time.perf_counter() - began,
    }


def _cell(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/benchmarks/msr-fiddle"))
    parser.add_argument("--graphs", default=None, help="named graphs instead of the folder's")
    parser.add_argument("--devices", type=int, default=None, help="devices for --graphs (4)")
    parser.add_argument("--cluster", default="placeto-k80", help="preset or file for --graphs")
    parser.add_argument("--ratio", type=float, default=0.97, help="target over the heuristic")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not 0 < args.ratio <= 1:
        parser.error(f"--ratio must be in (0, 1], got {args.ratio}")
    cluster = cluster_of_args(args.cluster, args.devices, "--graphs", default=4)
    if args.graphs:
        cases = [(spec, graph_of(spec), cluster) for spec in args.graphs.split(",")]
    else:
        files = benchmark_cases(args.data, kinds=("OperatorGraphs",))
        cases = [(c.file, c.graph, c.cluster) for c in files]
    rows = []
    for name, graph, on in cases:
        rows.append(bound_row(name, graph, on, args.ratio))
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}
        print(shown, flush=True)
    cells = [[_cell(r[c]) for c in COLUMNS] for r in rows]
    print(format_table([list(COLUMNS), *cells]))
    print(f"excluded: no placement reaches {args.ratio} of the best heuristic")
    if args.out:
        write_result(args.out, {"ratio": args.ratio, "rows": rows}, sys.argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
