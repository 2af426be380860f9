"""The simulator on real, wide graphs: the scan loop (`sim/core.py`) against the wide-graph loop
(`sim/wide.py`) and the Python reference, side by side in one process.

    python experiments/bench_wide.py                # operator graphs, families, zoo op graphs
    python experiments/bench_wide.py --graphs family:nmt/24 --batch 256 --dtype float64

For each graph: N ops, E edges, W chain slots; placements per CPU-second (all threads) of
`simulate_batch` with each loop (calls alternated, best of `--repeats`), of the reference (one
placement at a time), and the ratios. Both loops' outputs are checked equal. Prints a table and
writes every number, with the machine, to results/bench/wide.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import placeto_jax as pj
from bench_simulator import machine, write_json
from placeto_jax import precision
from placeto_jax.graphs.registry import load
from placeto_jax.graphs.zoo import zoo_op_graph
from placeto_jax.report import format_table
from placeto_jax.sim import api, core, wide

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "benchmarks" / "msr-fiddle"
FAMILIES = ["family:cifar10/24", "family:ptb/24", "family:nmt/24"]
# Zoo models traced at op level (ungrouped): `zoo-ops:MODEL[:SIZE=VALUE,...]`.
ZOO_OPS = [f"zoo-ops:bert_base:layers={n}" for n in (3, 6, 12)] + ["zoo-ops:nmt"]
SYNTHETIC = ["layered:2000"]


def default_graphs() -> list[str]:
    files = sorted(str(p) for p in DATA.glob("throughput-inputs/OperatorGraphs/*.json"))
    return files + FAMILIES + ZOO_OPS + SYNTHETIC


def graph_of(spec: str) -> pj.Graph:
    """A graph by registry name or file, or a zoo model's ungrouped op graph (`zoo-ops:...`)."""
    if not spec.startswith("zoo-ops:"):
        return load(spec)
    name, _, sizes = spec.removeprefix("zoo-ops:").partition(":")
    pairs = (item.split("=") for item in sizes.split(",") if item)
    return zoo_op_graph(name, sizes={k: int(v) for k, v in pairs})[0]


def cpu_seconds(fn) -> float:
    tic = time.process_time()
    jax.block_until_ready(fn())
    return time.process_time() - tic


def measure(spec: str, batch: int, devices: int, dtype, repeats: int) -> dict:
    graph = graph_of(spec)
    cluster = pj.Cluster(devices)
    pg = api.padded(graph)
    rows = np.zeros((batch, pg.n_pad), np.int32)
    placements = np.random.default_rng(0).integers(0, devices, size=(batch, graph.n_ops))
    rows[:, : graph.n_ops] = placements
    lanes = api.chunk_size()
    with precision.scope(dtype):
        sim_graph, sim_cluster = api.device_graph(graph, dtype), api.sim_cluster(cluster, dtype)
        chunks = jnp.asarray(rows).reshape(-1, min(lanes, batch), pg.n_pad)
        loops = {}
        for name, loop in (("scan", core.simulate_lanes), ("wide", wide.simulate_lanes_wide)):
            run = jax.jit(lambda g, c, r, loop=loop: jax.lax.map(lambda x: loop(g, c, x), r))
            loops[name] = lambda run=run: run(sim_graph, sim_cluster, chunks)
        outs = {name: jax.block_until_ready(fn()) for name, fn in loops.items()}  # compile
        best = {name: float("inf") for name in loops}
        for _ in range(repeats):
            for name, fn in loops.items():
                best[name] = min(best[name], cpu_seconds(fn))
    same = all(
        np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        for a, b in zip(outs["scan"], outs["wide"], strict=True)
    )
    n_ref = max(1, min(8, batch))
    tic = time.process_time()
    for p in placements[:n_ref]:
        pj.simulate_reference(graph, cluster, p)
    reference = n_ref / (time.process_time() - tic)
    scan, wide_rate = batch / best["scan"], batch / best["wide"]
    return {
        "graph": spec,
        "n_ops": graph.n_ops,
        "n_edges": graph.n_edges,
        "chain_slots": pg.width,
        "max_children": int(pg.children.shape[1]),
        "batch": batch,
        "dtype": np.dtype(dtype).name,
        "scan_per_cpu_s": scan,
        "wide_per_cpu_s": wide_rate,
        "reference_per_cpu_s": reference,
        "wide_over_scan": wide_rate / scan,
        "outputs_equal": same,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=None, help="graphs (default: see above)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/wide.json")
    args = parser.parse_args(argv)
    rows = []
    for spec in args.graphs or default_graphs():
        rows.append(measure(spec, args.batch, args.devices, np.dtype(args.dtype), args.repeats))
        print(f"  {spec}: done", file=sys.stderr, flush=True)
        write_json(args.out, {"machine": machine(), "rows": rows})  # so far
    table = [("graph", "N", "E", "W", "K", "scan/s", "wide/s", "ref/s", "wide/scan", "wide/ref")]
    for r in rows:
        table.append(
            (
                Path(r["graph"]).name if r["graph"].endswith(".json") else r["graph"],
                str(r["n_ops"]),
                str(r["n_edges"]),
                str(r["chain_slots"]),
                str(r["max_children"]),
                f"{r['scan_per_cpu_s']:,.0f}",
                f"{r['wide_per_cpu_s']:,.0f}",
                f"{r['reference_per_cpu_s']:,.1f}",
                f"{r['wide_over_scan']:.2f}x",
                f"{r['wide_per_cpu_s'] / r['reference_per_cpu_s']:.1f}x",
            )
        )
    print(f"placements per CPU-second, B = {args.batch}, {args.dtype}, {args.devices} devices")
    print(format_table(table))
    if not all(r["outputs_equal"] for r in rows):
        print("WARNING: the two loops' outputs differ", file=sys.stderr)
    write_json(args.out, {"machine": machine(), "rows": rows})
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
