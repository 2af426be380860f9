"""Benchmark graphs (msr-fiddle format): size, compute, hardware, and single-device vs expert.

    python experiments/benchmark_graphs.py --data DIR [--out results/benchmark_graphs/summary.json]

DIR is a copy of `msr-fiddle/dnn-partitioning` (or any folder of benchmark graph JSON files);
every `*.json` outside `human-experts/` is loaded with `placeto_jax.graphs.load_benchmark`. The
expert splits are of the layer graphs: a graph in a `LayerGraphs` folder uses
`human-experts/<stem>_expert.json`, or, for a training graph without one, its inference split,
extended to the backward nodes by their colorClass (as the upstream README advises). Both
placements are simulated with `pj.simulate` on `pj.Cluster(n_devices=maxFPGAs,
memory=maxSizePerFPGA)`, i.e. the placeto-k80 timing constants (speed 1, 7.6 GB/s per device
bus, delta1 5.7 µs, delta2 25 µs). Peak memory is reported, not enforced: "peak GB" above
"GB/acc" means the placement does not fit. Prints a table and writes every number as JSON.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import placeto_jax as pj
from placeto_jax.cluster import GBPS
from placeto_jax.files import write_result
from placeto_jax.graphs import BenchmarkGraph, load_benchmark, load_expert_split
from placeto_jax.graphs.benchmark import benchmark_files, expert_split_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "benchmark_graphs" / "summary.json"
US_PER_MS = 1e3
BYTES_PER_GB = 1e9
COLUMNS = (
    ("file", "{}"),
    ("ops", "{}"),
    ("edges", "{}"),
    ("compute_ms", "{:.1f}"),
    ("accelerators", "{}"),
    ("memory_per_accelerator_gb", "{:.2f}"),
    ("expert", "{}"),
    ("single_makespan_ms", "{:.1f}"),
    ("expert_makespan_ms", "{:.1f}"),
    ("single_peak_gb", "{:.2f}"),
    ("expert_peak_gb", "{:.2f}"),
)
HEADERS = (
    "file",
    "ops",
    "edges",
    "compute ms",
    "acc",
    "GB/acc",
    "expert",
    "1-dev ms",
    "expert ms",
    "1-dev peak GB",
    "expert peak GB",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="folder of benchmark graph files")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON summary to write")
    return p.parse_args(argv)


def summarise(data: Path, path: Path) -> dict:
    """One row: the graph's size and hardware, and the simulated placements."""
    start = time.perf_counter()
    bench = load_benchmark(path)
    load_seconds = time.perf_counter() - start
    g = bench.graph
    row = {
        "file": str(path.relative_to(data)),
        "ops": g.n_ops,
        "edges": g.n_edges,
        "compute_ms": float(g.cost.sum()) / US_PER_MS,
        "accelerators": bench.max_accelerators,
        "cpus": bench.max_cpus,
        "memory_per_accelerator_gb": bench.accelerator_memory_bytes / BYTES_PER_GB,
        "load_seconds": load_seconds,
    }
    placements = [np.zeros(g.n_ops, dtype=np.int64)]
    split_path, source = expert_split_file(data, path)
    row.update(expert_split=None if split_path is None else split_path.name, expert_source=source)
    row["expert_error"] = None
    if split_path is not None:
        try:
            placements.append(load_expert_split(split_path, bench))
        except ValueError as err:
            row["expert_error"] = str(err)
    row.update(simulated(bench, np.stack(placements)))
    return row


def simulated(bench: BenchmarkGraph, placements: np.ndarray) -> dict:
    """Makespans (ms) and largest per-device peak memory (GB) of [single, expert?]."""
    cluster = pj.Cluster(n_devices=bench.max_accelerators, memory=bench.accelerator_memory_bytes)
    result = pj.simulate(bench.graph, cluster, placements)
    makespan = (result.makespan / US_PER_MS).tolist()
    peak = (result.peak_memory.max(axis=1) / BYTES_PER_GB).tolist()
    has_expert = len(makespan) == 2
    return {
        "single_makespan_ms": makespan[0],
        "expert_makespan_ms": makespan[1] if has_expert else None,
        "single_peak_gb": peak[0],
        "expert_peak_gb": peak[1] if has_expert else None,
        "expert_ops_per_accelerator": (
            np.bincount(placements[1], minlength=bench.max_accelerators).tolist()
            if has_expert
            else None
        ),
    }


def expert_label(row: dict) -> str:
    if row["expert_error"] is not None:
        return "invalid"
    return {"own": "yes", "inference": "from inference", "none": "-"}[row["expert_source"]]


def table(rows: list[dict]) -> str:
    cells = [HEADERS]
    for row in rows:
        shown = {**row, "expert": expert_label(row)}
        cells.append(tuple("-" if shown[k] is None else fmt.format(shown[k]) for k, fmt in COLUMNS))
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADERS))]
    lines = ["  ".join(_pad(line, widths)) for line in cells]
    notes = [f"{r['file']}: {r['expert_error']}" for r in rows if r["expert_error"]]
    return "\n".join(lines + notes)


def _pad(line: tuple[str, ...], widths: list[int]) -> list[str]:
    """The first column left-aligned, the others right-aligned."""
    return [line[0].ljust(widths[0])] + [
        c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
    ]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.data.is_dir():
        raise SystemExit(f"--data {args.data} is not a folder")
    files = benchmark_files(args.data)
    if not files:
        raise SystemExit(f"no graph files (*.json) under {args.data}")
    rows = [summarise(args.data, path) for path in files]
    print(table(rows))
    cluster = pj.Cluster(n_devices=1)
    write_result(
        args.out,
        {
            "data": str(args.data),
            "cluster": {
                "preset": "placeto-k80",
                "bandwidth_gb_per_s": cluster.bandwidth[0] / GBPS,
                "delta1_us": cluster.delta1,
                "delta2_us": cluster.delta2,
            },
            "rows": rows,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
