"""Accelerator throughput: simulator placements per second and trainer decisions per second.

    python experiments/bench_gpu.py [--quick] [--out results/bench/gpu.json]

Prints the device, then placements per wall-clock second of the jitted simulator
(`sim.api.simulate_batch` on device-resident placements, outputs left on the device):

1. Real graphs first (`bench_wide.real_graphs`: the benchmark's throughput operator graphs
   under `--data`, one test graph per family, the zoo models at op level), B = 4,096 in float32
   and, for the user's default, float64, and B = 16,384 in float32, with weights colocated
   with their updates; each next to the Python reference timed on this machine's host CPU
   (ratio per wall-second), the first placements checked against it (float64 bit-equal,
   float32 makespans to 0.1%).
2. The synthetic `layered(n, seed=0)` graphs at N in {100, 500, 2000} and B in {1024, 16384}.
3. The trainer's decisions per second (`bench_training.measure`: 100 nodes of family:ptb/0,
   B = 256).

4 devices throughout. `--budget-s` stops starting new measurements after that many seconds
(those skipped are listed), so a leased accelerator's time is never overrun. On a CPU backend,
or with `--quick`, it runs a small version (no real graphs, N in {100, 500}, B in {64, 256}, a
20-node trainer at B = 8) so that CI can run it. Ends with Markdown tables of the rates and, for
the full sizes, the aims (at least 1,000,000 placements per second at N = 100 and 100,000 at
N = 500, best over B). Writes every number, with the machine, to `--out` atomically, after
every measurement.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

import placeto_jax as pj
from bench_simulator import (
    benchmark_graph,
    machine,
    random_placements,
    steady_state,
    timed,
)
from bench_training import measure
from bench_wide import DATA, graph_of, growth_summary, label, real_graphs
from placeto_jax import precision
from placeto_jax.files import write_result
from placeto_jax.placers.simple import colocate
from placeto_jax.sim import api

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "bench" / "gpu.json"
FULL = {
    "real": [(4096, "float32"), (4096, "float64"), (16384, "float32")],  # (B, dtype)
    "sizes": [100, 500, 2000],
    "batches": [1024, 16384],
    "trainer": (100, 256, 2),
}
QUICK = {"real": None, "sizes": [100, 500], "batches": [64, 256], "trainer": (20, 8, 1)}
REFERENCE_S = 1.0  # host CPU seconds of reference placements per real graph (at least two)
CHECKED = 2  # placements compared with the reference (`matches`)
F32_MAKESPAN_RTOL = 1e-3
DEVICES = 4
TRAINER_GRAPH = "family:ptb/0"
AIMS = {100: 1_000_000, 500: 100_000}  # placements per second, best over the batch sizes


def timed_batch(
    graph: pj.Graph, placements: np.ndarray, dtype: str, min_time: float
) -> tuple[dict, object]:
    """Wall seconds of `simulate_batch` on placements [B, N] (device-resident, compiled by a
    first call and then timed over >= 2 calls and >= `min_time` s), and the first call's
    output (on the device)."""
    cluster = pj.Cluster(DEVICES)
    rows = np.zeros((placements.shape[0], api.padded(graph).n_pad), dtype=np.int32)
    rows[:, : graph.n_ops] = placements
    with precision.scope(dtype):
        args = (
            api.device_graph(graph, dtype),
            api.sim_cluster(cluster, dtype),
            jax.device_put(rows),
        )

        def call():
            return jax.block_until_ready(api.simulate_batch(*args, cluster.broadcast))

        out, first_s, _ = timed(call)
        steady = steady_state(call, min_time)
    batch = placements.shape[0]
    timing = {
        "batch": batch,
        "dtype": dtype,
        "first_call_s": first_s,
        "wall_s": steady["wall_s"],
        "repeats": steady["repeats"],
        "placements_per_s": batch / steady["wall_s"],
    }
    return timing, out


def simulator_rate(n_ops: int, batch: int, min_time: float) -> dict:
    """Placements per wall second of `simulate_batch` on the synthetic layered graph, float32."""
    placements = random_placements(n_ops, batch, DEVICES)
    timing, _ = timed_batch(benchmark_graph(n_ops), placements, "float32", min_time)
    return {"n_ops": n_ops, **timing}


def reference_rate(graph: pj.Graph, placements: np.ndarray) -> tuple[float, list]:
    """(placements per host CPU-second of the Python reference over >= `REFERENCE_S` s, its
    results for the first `CHECKED` placements)."""
    cluster = pj.Cluster(DEVICES)
    done, spent, results = 0, 0.0, []
    while done < len(placements) and (done < CHECKED or spent < REFERENCE_S):
        tic = time.process_time()
        want = pj.simulate_reference(graph, cluster, placements[done])
        spent += time.process_time() - tic
        if done < CHECKED:
            results.append(want)
        done += 1
    return done / spent, results


def matches(out, want: list, n_ops: int, dtype: str) -> bool:
    """float64: every start bit-equal to the reference's. float32: makespans within
    `F32_MAKESPAN_RTOL` (rounding can reorder ops whose ready times are within a rounding
    error, which moves later starts by whole op durations, on CPU as on an accelerator)."""
    if dtype == "float64":
        got = np.asarray(out.start[: len(want), :n_ops])
        return all(np.array_equal(g, w.start) for g, w in zip(got, want, strict=True))
    got = np.asarray(out.makespan[: len(want)], np.float64)
    wanted = np.array([w.makespan for w in want])
    return bool(np.all(np.abs(got - wanted) <= F32_MAKESPAN_RTOL * wanted))


def real_graph_rows(spec: str, runs: list[tuple[int, str]], min_time: float) -> list[dict]:
    """One row per (B, dtype) of `runs` for a real graph: its size, the accelerator's rate, the
    reference's on the host CPU, and whether the first placements match the reference's
    (`matches`). Every batch is the first B rows of one draw."""
    graph = graph_of(spec)
    pg = api.padded(graph)
    largest = max(batch for batch, _ in runs)
    draws = np.random.default_rng(0).integers(0, DEVICES, size=(largest, graph.n_ops))
    placements = colocate(graph, draws)  # weights with their updates, as every placer does
    reference, want = reference_rate(graph, placements)
    rows = []
    for batch, dtype in runs:
        timing, out = timed_batch(graph, placements[:batch], dtype, min_time)
        rows.append(
            {
                "graph": spec,
                "n_ops": graph.n_ops,
                "n_edges": graph.n_edges,
                "chain_slots": pg.width,
                "loop": "wide" if pg.width >= api.WIDE_SLOTS else "scan",
                **timing,
                "reference_per_s": reference,
                "matches_reference": matches(out, want, graph.n_ops, dtype),
            }
        )
    return rows


def table(rows: list[dict], trainer: dict | None, device: str) -> str:
    """Markdown table: one row per (N, B) with its rate and first call, then the trainer's
    (None: not measured)."""
    lines = [
        f"| {device} | B | placements/s | first call (s) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| N = {row['n_ops']} | {row['batch']} | {row['placements_per_s']:,.0f} "
            f"| {row['first_call_s']:.1f} |"
        )
    if trainer is not None:
        lines.append(
            f"| trainer, {trainer['nodes']} nodes | {trainer['batch']} "
            f"| {trainer['decisions_per_s']:,.0f} decisions/s | |"
        )
    return "\n".join(lines)


def real_table(rows: list[dict], device: str) -> str:
    """Markdown table of the real graphs: size, rate, the host reference's and their ratio."""
    lines = [
        f"| graph | N | E | W | loop | B | dtype | {device} placements/s | first call (s) "
        "| reference/s (host CPU) | ratio | matches reference |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        exact = "bit-equal" if r["dtype"] == "float64" else "makespan to 0.1%"
        lines.append(
            f"| {label(r['graph'])} | {r['n_ops']:,} | {r['n_edges']:,} | {r['chain_slots']} "
            f"| {r['loop']} | {r['batch']} | {r['dtype']} | {r['placements_per_s']:,.0f} "
            f"| {r['first_call_s']:.1f} | {r['reference_per_s']:,.1f} "
            f"| {r['placements_per_s'] / r['reference_per_s']:,.0f}x "
            f"| {exact if r['matches_reference'] else 'NO'} |"
        )
    return "\n".join(lines)


def real_growth(rows: list[dict]) -> list[str]:
    """`bench_wide.growth_summary` over the BERT op graphs, one line per (B, dtype) measured."""
    lines = []
    for batch, dtype in dict.fromkeys((r["batch"], r["dtype"]) for r in rows):
        same = [r for r in rows if (r["batch"], r["dtype"]) == (batch, dtype)]
        line = growth_summary(same, rate="placements_per_s")
        if line:
            lines.append(f"B={batch} {dtype} {line}")
    return lines


def aims_summary(rows: list[dict]) -> str:
    """One line per aimed N: the best rate over the batch sizes against the aim."""
    lines = []
    for n_ops, aim in AIMS.items():
        rates = [r["placements_per_s"] for r in rows if r["n_ops"] == n_ops]
        if rates:
            verdict = "meets" if max(rates) >= aim else "BELOW"
            lines.append(f"aim N={n_ops}: {max(rates):,.0f} placements/s (>= {aim:,}): {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (automatic on CPU)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--min-time", type=float, default=1.0, help="s of steady-state calls to time")
    p.add_argument("--data", type=Path, default=DATA, help="the msr-fiddle benchmark folder")
    p.add_argument("--graphs", nargs="+", default=None, help="real graphs (default: see above)")
    p.add_argument("--budget-s", type=float, default=None, help="start nothing new after this")
    args = p.parse_args(argv)
    if args.budget_s is not None and args.budget_s <= 0:
        p.error(f"--budget-s must be positive, got {args.budget_s}")
    backend = jax.default_backend()
    plan = QUICK if args.quick or backend == "cpu" else FULL
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({backend})", flush=True)
    began = time.perf_counter()
    data = {
        "machine": machine(),
        "device": device.device_kind,
        "backend": backend,
        "quick": plan is QUICK,
        "real": [],
        "simulator": [],
        "trainer": None,
        "skipped": [],
    }

    def within_budget(what: str) -> bool:
        over = args.budget_s is not None and time.perf_counter() - began > args.budget_s
        if over:
            data["skipped"].append(what)
        return not over

    if plan["real"]:
        for spec in args.graphs or real_graphs(args.data):
            if within_budget(f"real {spec}"):
                data["real"] += real_graph_rows(spec, plan["real"], args.min_time)
                rates = ", ".join(f"B={r['batch']} {r['dtype']} {r['placements_per_s']:,.0f}"
                                  for r in data["real"][-len(plan["real"]):])  # fmt: skip
                print(f"{label(spec)}: {rates} placements/s", flush=True)
                write_result(args.out, data)
    for n in plan["sizes"]:
        for b in plan["batches"]:
            if within_budget(f"simulator N={n} B={b}"):
                data["simulator"].append(simulator_rate(n, b, args.min_time))
                rate = data["simulator"][-1]["placements_per_s"]
                print(f"simulator N={n} B={b}: {rate:,.0f} placements/s", flush=True)
                write_result(args.out, data)
    nodes, batch, updates = plan["trainer"]
    if within_budget("trainer"):
        data["trainer"] = measure(TRAINER_GRAPH, nodes, batch, updates, DEVICES)
        rate = data["trainer"]["decisions_per_s"]
        print(f"trainer {nodes} nodes B={batch}: {rate:,.0f} decisions/s", flush=True)
    if data["real"]:
        print(real_table(data["real"], device.device_kind))
        data["growth"] = real_growth(data["real"])
        print("\n".join(data["growth"]))
    print(table(data["simulator"], data["trainer"], device.device_kind))
    if plan is FULL:
        print(aims_summary(data["simulator"]))
    if data["skipped"]:
        print(f"skipped (over --budget-s {args.budget_s:g}): {', '.join(data['skipped'])}")
    data["wall_s"] = time.perf_counter() - began
    write_result(args.out, data)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
