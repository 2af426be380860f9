"""Measured against simulated step times: 20 placements of one zoo model on 4 host CPU devices.

    python experiments/bench_execute.py [--repeats 20] [--out results/bench/execute.json]

Traces a reduced zoo:transformer training step at the jaxpr level twice, with op costs timed on
this backend (`cost_model="measure"`) and with the roofline (K80 µs at speed 1.0), measures the
local cluster (`placeto_jax.execute.local_cluster`), and places the op graph with 8 baseline
methods, compute-balanced blocks (`blocks`) and 11 random placements (per op, and per block of 4
to 362 consecutive ops). Each
placement is run for real (`placeto_jax.execute.execute`: median of `--repeats` steps) and
simulated on the local cluster under both cost models. Prints a table and the Spearman rank
correlation of the measured times with the simulated ones (and, for reference, with the
transfer count); writes every number, with the machine, to `--out`
atomically. About 5 minutes on 2 CPU cores (compiling the pieces of the per-op placements).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np
from scipy.stats import spearmanr

from bench_simulator import machine
from placeto_jax.execute import execute, local_cluster, local_devices, op_graph, zoo_step
from placeto_jax.files import write_result
from placeto_jax.graphs.zoo import PARAM_ARGNUMS
from placeto_jax.placers import colocate, expert, run_method
from placeto_jax.report import format_table
from placeto_jax.sim.api import simulate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "bench" / "execute.json"
MODEL = "transformer"
SIZES = {"batch": 8, "seq": 32, "layers": 1, "d": 128, "heads": 4, "ff": 512, "vocab": 512}
DEVICES = 4
METHODS = ("single", "round-robin", "metis", "heft", "m-etf", "m-topo", "critical-path", "m-sct")
BLOCKS = (1, 4, 8, 16, 32, 48, 64, 96, 128, 256, 362)  # ops per random block (1: per op)


def placements(graph, cluster, key) -> dict[str, np.ndarray]:
    """The 20 placements by name: the methods', compute-balanced blocks of the topological order
    (the expert placer refuses this graph: its op names carry no zoo: prefix), then random per
    block of consecutive ops (each co-location class then moved onto the device of its first
    op)."""
    found = {m: run_method(m, graph, cluster, key).placement for m in METHODS}
    found["blocks"] = expert.blocks(graph, DEVICES)
    for k, block in enumerate(BLOCKS):
        blocks = -(-graph.n_ops // block)
        devices = jax.random.randint(jax.random.fold_in(key, k), (blocks,), 0, DEVICES)
        found[f"random/{block}"] = colocate(
            graph, np.repeat(np.asarray(devices), block)[: graph.n_ops]
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per placement")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    devices = local_devices(DEVICES)
    key, place_key = jax.random.split(jax.random.key(0))
    fn, step_args = zoo_step(MODEL, SIZES, key)
    graphs = {
        model: op_graph(fn, *step_args, cost_model=model, param_argnums=PARAM_ARGNUMS)
        for model in ("measure", "roofline")
    }
    cluster = local_cluster(devices)
    print(f"zoo:{MODEL} {SIZES}: {graphs['measure'].n_ops} ops; {cluster}")
    rows = []
    for name, placement in placements(graphs["measure"], cluster, place_key).items():
        tic = time.perf_counter()
        result = execute(fn, *step_args, placement=placement, devices=devices, repeats=args.repeats)
        sims = {m: float(simulate(g, cluster, placement).makespan) for m, g in graphs.items()}
        rows.append(
            {
                "placement": name,
                "n_pieces": result.n_pieces,
                "n_transfers": result.n_transfers,
                "transfer_bytes": result.transfer_bytes,
                "measured_us": result.step_us,
                "times_us": list(result.times_us),
                "unsplit_us": result.unsplit_us,
                "simulated_us": sims["measure"],
                "simulated_roofline_us": sims["roofline"],
                "equal": result.equal,
                "max_abs_diff": result.max_abs_diff,
                "wall_s": time.perf_counter() - tic,
            }
        )
        print(f"{name}: {result.step_us:.0f} µs measured, {sims['measure']:.0f} µs simulated")
    measured = [r["measured_us"] for r in rows]
    rhos = {
        against: spearmanr(measured, [r[against] for r in rows])
        for against in ("simulated_us", "simulated_roofline_us", "n_transfers")
    }
    print(table(rows))
    print(
        "Spearman rank correlation of the measured times with the simulated ones (measured op "
        f"costs): {_rho(rhos['simulated_us'])}; with roofline op costs: "
        f"{_rho(rhos['simulated_roofline_us'])}; with the transfer count: "
        f"{_rho(rhos['n_transfers'])}"
    )
    write_result(
        args.out,
        {
            "model": f"zoo:{MODEL}",
            "sizes": SIZES,
            "n_ops": graphs["measure"].n_ops,
            "cluster": dataclasses.asdict(cluster),
            "repeats": args.repeats,
            "spearman": {
                against: {"statistic": float(r.statistic), "pvalue": float(r.pvalue)}
                for against, r in rhos.items()
            },
            "rows": rows,
            "machine": machine(),
        },
    )
    print(f"wrote {args.out}")


def _rho(result) -> str:
    return f"{result.statistic:.3f} (p = {result.pvalue:.2g})"


def table(rows: list[dict]) -> str:
    header = ["placement", "pieces", "transfers", "measured µs", "simulated µs", "roofline µs"]
    body = [
        [
            r["placement"],
            str(r["n_pieces"]),
            str(r["n_transfers"]),
            f"{r['measured_us']:.0f}",
            f"{r['simulated_us']:.0f}",
            f"{r['simulated_roofline_us']:.0f}",
        ]
        for r in rows
    ]
    return format_table([header, *body])


if __name__ == "__main__":
    main()
