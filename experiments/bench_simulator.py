"""Simulator throughput: the jit-compiled JAX simulator on batches vs the Python reference.

    python experiments/bench_simulator.py [--sizes 250,500,2000] [--batches 1,64,256,1024]
        [--variants f32:1,f64:1,f32:all] [--devices 4] [--out results/bench/simulator.json]
        [--extra 2000:4096] [--quick]

Graphs are `layered(n, seed=0)` (random layered DAGs, average out-degree about 2), the cluster is
`Cluster(devices)`, placements are uniform random from a seeded NumPy Generator.

Each JAX configuration (N, B, dtype, cores) runs in a fresh subprocess (`--one N B --x64 0|1
--cores 1|all`) so that compile caches and peak memory do not leak between rows. A variant `f32:1`
is float32 pinned to one core (`os.sched_setaffinity` before JAX starts), so its CPU time equals
its wall time and it compares like for like with the single-threaded reference; `f32:all` lets XLA
use every core, which on small kernels spends CPU time on synchronisation. Each reports, as one
JSON line: the first call's time, the steady-state median wall and process-CPU seconds per call
(the call repeated until `--min-time` seconds have accumulated, at least twice), compile time
(first call minus steady state: tracing, XLA compilation and the host-side padding of the graph),
peak RSS, and a check of its makespans against the reference (float64: exactly equal; float32:
within a relative 1e-5). CPU time (`time.process_time`, all threads) is the fair cost measure: it
does not reward using more cores. The reference runs once per N, in this process, on as many
placements as take about `--ref-time` seconds (at most the largest batch); its cost per placement
does not depend on B. The reference is pinned to one core too.

`--extra` rows (default N = 2000, B = 4096) run with the first variant only, to record peak
memory at scale. Prints a table, the issue's targets (>= 30x at N = 500, B = 1024 and at N = 2000,
B = 256, per CPU-second; time per placement at N = 2000 <= 10x that at N = 250, B = 256; peak RSS
< 8 GB at N = 2000, B = 4096) and writes every raw number, with a description of the machine, to
`--out`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "bench" / "simulator.json"
SEED = 0
N_CHECK = 3  # placements per configuration compared against the reference
FLOAT32_RTOL = 1e-5
DTYPES = {0: "float32", 1: "float64"}
FLOORS = {(500, 1024): 30.0, (2000, 256): 30.0}  # (N, B) -> required ratio per CPU-second
SCALING = (250, 2000, 256, 10.0)  # time per placement at N = 2000 <= 10x that at N = 250, B = 256
MEMORY = (2000, 4096, 8.0)  # N, B, peak RSS limit in GB (an `--extra` row)


# ---------------------------------------------------------------------- command line
def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def pair_list(text: str) -> list[tuple[int, int]]:
    """'2000:4096,500:64' -> [(2000, 4096), (500, 64)]."""
    return [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item]


def variant_list(text: str) -> list[tuple[int, str]]:
    """'f32:1,f64:all' -> [(0, '1'), (1, 'all')] as (x64, cores)."""
    out = []
    for item in text.split(","):
        dtype, _, cores = item.partition(":")
        if dtype not in ("f32", "f64") or cores not in ("1", "all"):
            raise argparse.ArgumentTypeError(f"bad variant {item!r}; use f32|f64 ':' 1|all")
        out.append((int(dtype == "f64"), cores))
    return out


def pin_to_one_core() -> None:
    """Restrict this process (and XLA's thread pool, sized from it) to one CPU."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int_list, default=[250, 500, 2000], help="ops per graph")
    p.add_argument(
        "--batches", type=int_list, default=[1, 64, 256, 1024], help="placements per call"
    )
    p.add_argument(
        "--variants",
        type=variant_list,
        default=variant_list("f32:1,f64:1,f32:all"),
        help="dtype:cores pairs, dtype f32|f64, cores 1|all",
    )
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--extra",
        type=pair_list,
        default=[MEMORY[:2]],
        help="N:B rows run with the first variant only (default: the memory row 2000:4096)",
    )
    p.add_argument("--quick", action="store_true", help="sizes 250,500, batches 1,64, no extra")
    p.add_argument("--min-time", type=float, default=1.0, help="s of steady-state calls to time")
    p.add_argument("--ref-time", type=float, default=3.0, help="s to spend on the reference")
    p.add_argument("--one", type=int, nargs=2, metavar=("N", "B"), help=argparse.SUPPRESS)
    p.add_argument("--x64", type=int, choices=[0, 1], default=0, help=argparse.SUPPRESS)
    p.add_argument("--cores", choices=["1", "all"], default="all", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.batches, args.extra = [250, 500], [1, 64], []
    return args


# ---------------------------------------------------------------------- shared helpers
def random_placements(n_ops: int, batch: int, n_devices: int) -> np.ndarray:
    """[batch, n_ops] device indices; the same rows for the same (n_ops, n_devices)."""
    return np.random.default_rng([SEED, n_ops]).integers(0, n_devices, size=(batch, n_ops))


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(fn(), wall seconds, process CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def steady_state(fn: Callable[[], Any], min_time: float) -> dict[str, Any]:
    """Median wall and CPU seconds per call over >= 2 calls and >= `min_time` s of wall time."""
    walls: list[float] = []
    cpus: list[float] = []
    while len(walls) < 2 or sum(walls) < min_time:
        _, wall, cpu = timed(fn)
        walls.append(wall)
        cpus.append(cpu)
    return {
        "repeats": len(walls),
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "wall_samples_s": walls,
        "cpu_samples_s": cpus,
    }


def benchmark_graph(n_ops: int):
    from placeto_jax.graphs.generators import layered

    return layered(n_ops, seed=SEED)


def graph_digest(graph) -> str:
    """A short hash of the graph's edges and costs (rows measured on different graphs differ)."""
    h = hashlib.sha256()
    for arr in (graph.edges, graph.cost, graph.out_bytes):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:12]


# ---------------------------------------------------------------------- one JAX configuration
def run_one(
    n_ops: int, batch: int, n_devices: int, x64: int, min_time: float, cores: str = "all"
) -> dict[str, Any]:
    """Time `pj.simulate` on one batch in this (fresh) process; see the module docstring."""
    if cores == "1":
        pin_to_one_core()
    import jax

    import placeto_jax as pj

    graph, cluster = benchmark_graph(n_ops), pj.Cluster(n_devices)
    placements = random_placements(n_ops, batch, n_devices)
    dtype = np.float64 if x64 else np.float32

    def run():
        return pj.simulate(graph, cluster, placements, dtype=dtype)

    first, first_wall, first_cpu = timed(run)
    steady = steady_state(run, min_time)
    return {
        "n_ops": n_ops,
        "n_edges": graph.n_edges,
        "graph_digest": graph_digest(graph),
        "batch": batch,
        "dtype": DTYPES[x64],
        "cores": cores,
        "backend": jax.default_backend(),
        "first_call_wall_s": first_wall,
        "first_call_cpu_s": first_cpu,
        "compile_s": first_wall - steady["wall_s"],
        **steady,
        "placements_per_wall_s": batch / steady["wall_s"],
        "placements_per_cpu_s": batch / steady["cpu_s"],
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "check": agreement(graph, cluster, placements, np.asarray(first.makespan), x64),
    }


def agreement(graph, cluster, placements, makespan, x64: int) -> dict[str, Any]:
    """Compare the first `N_CHECK` makespans with the reference's (float64: exact)."""
    import placeto_jax as pj

    k = min(N_CHECK, placements.shape[0])
    expected = np.asarray(pj.simulate_reference(graph, cluster, placements[:k]).makespan)
    got = makespan[:k].astype(np.float64)
    rel = float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-300)))
    ok = bool(np.array_equal(got, expected)) if x64 else rel <= FLOAT32_RTOL
    return {"placements": k, "max_rel_err": rel, "exact": bool(x64), "ok": ok}


def run_one_in_subprocess(
    args: argparse.Namespace, n_ops: int, batch: int, x64: int, cores: str
) -> dict:
    """Run `--one` in a fresh interpreter; on failure, return the error instead of numbers."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n_ops), str(batch)]
    cmd += ["--x64", str(x64), "--devices", str(args.devices), "--min-time", str(args.min_time)]
    cmd += ["--cores", cores]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        error = (proc.stderr or proc.stdout).strip()[-2000:]
        row = {"n_ops": n_ops, "batch": batch, "dtype": DTYPES[x64], "cores": cores}
        return {**row, "error": error}
    return json.loads(lines[-1])


# ---------------------------------------------------------------------- reference
def run_reference(n_ops: int, n_devices: int, max_batch: int, target_s: float) -> dict[str, Any]:
    """Time the Python reference on about `target_s` seconds' worth of placements."""
    import placeto_jax as pj

    graph, cluster = benchmark_graph(n_ops), pj.Cluster(n_devices)
    placements = random_placements(n_ops, max_batch, n_devices)
    _, probe_wall, _ = timed(lambda: pj.simulate_reference(graph, cluster, placements[0]))
    k = max(1, min(max_batch, math.ceil(target_s / max(probe_wall, 1e-9))))
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pin_to_one_core()  # single-threaded anyway; pinned like the `:1` JAX variants
    try:
        _, wall, cpu = timed(lambda: pj.simulate_reference(graph, cluster, placements[:k]))
    finally:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return {
        "n_ops": n_ops,
        "n_edges": graph.n_edges,
        "graph_digest": graph_digest(graph),
        "placements": k,
        "wall_s": wall,
        "cpu_s": cpu,
        "placements_per_wall_s": k / wall,
        "placements_per_cpu_s": k / cpu,
    }


# ---------------------------------------------------------------------- report
def machine() -> dict[str, Any]:
    import jax
    import jaxlib

    return {
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "jax_backend": jax.default_backend(),
        "git_commit": git("rev-parse", "HEAD"),
        "git_modified": (git("status", "--porcelain", "--untracked-files=no") or "").splitlines(),
    }


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git(*argv: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip()


def table(jax_rows: list[dict], reference: dict[int, dict]) -> str:
    """The printed summary, one line per JAX configuration."""
    head = ["N", "B", "dtype", "cores", "jax pl/cpu-s", "ref pl/cpu-s", "ratio", "jax pl/wall-s"]
    head += ["compile s", "peak RSS GB", "check"]
    lines = [" ".join(f"{h:>13}" for h in head)]
    for row in jax_rows:
        ref = reference[row["n_ops"]]["placements_per_cpu_s"]
        cells = [row["n_ops"], row["batch"], row["dtype"], row["cores"]]
        if "error" in row:
            cells += ["failed"] + [""] * 6
        else:
            rate = row["placements_per_cpu_s"]
            check = "ok" if row["check"]["ok"] else "MISMATCH"
            cells += [f"{rate:.1f}", f"{ref:.1f}", f"{rate / ref:.2f}"]
            cells += [f"{row['placements_per_wall_s']:.1f}", f"{row['compile_s']:.2f}"]
            cells += [f"{row['peak_rss_gb']:.2f}", check]
        lines.append(" ".join(f"{c!s:>13}" for c in cells))
    return "\n".join(lines)


def checks_summary(jax_rows: list[dict], reference: dict[int, dict]) -> str:
    """One line per configuration: its agreement with the reference, or its error."""
    lines = []
    for row in jax_rows:
        label = f"N={row['n_ops']} B={row['batch']} {row['dtype']} cores={row['cores']}"
        if "error" in row:
            lines.append(f"{label}: FAILED\n{row['error']}")
            continue
        if row["graph_digest"] != reference[row["n_ops"]]["graph_digest"]:
            lines.append(f"{label}: WARNING not the reference's graph (changed during the run)")
        c = row["check"]
        rule = "exact" if c["exact"] else f"rel <= {FLOAT32_RTOL:g}"
        verdict = "ok" if c["ok"] else "MISMATCH"
        lines.append(
            f"{label}: {c['placements']} makespans vs reference, "
            f"max rel err {c['max_rel_err']:.2e} ({rule}): {verdict}"
        )
    return "\n".join(lines)


def floors_summary(jax_rows: list[dict], reference: dict[int, dict]) -> str:
    """The issue's floors: ratio per CPU-second at (N, B), for every variant measured there."""
    lines = []
    for (n, b), need in FLOORS.items():
        for row in jax_rows:
            if (row["n_ops"], row["batch"]) != (n, b) or "error" in row:
                continue
            ratio = row["placements_per_cpu_s"] / reference[n]["placements_per_cpu_s"]
            verdict = "meets" if ratio >= need else "BELOW"
            lines.append(
                f"floor N={n} B={b} {row['dtype']} cores={row['cores']}: {ratio:.1f}x "
                f"(>= {need:g}x required): {verdict}"
            )
    return "\n".join(lines)


def scaling_summary(jax_rows: list[dict]) -> str:
    """Time per placement at the large N over the small N (at one B), for every variant."""
    small, large, batch, limit = SCALING
    rates = {}
    for row in jax_rows:
        if row["batch"] == batch and "error" not in row:
            rates[row["n_ops"], row["dtype"], row["cores"]] = row["placements_per_cpu_s"]
    lines = []
    for (n, dtype, cores), rate in rates.items():
        if n == large and (small, dtype, cores) in rates:
            ratio = rates[small, dtype, cores] / rate
            verdict = "meets" if ratio <= limit else "ABOVE"
            lines.append(
                f"scaling N={large} vs N={small} B={batch} {dtype} cores={cores}: {ratio:.1f}x "
                f"time per placement (<= {limit:g}x required): {verdict}"
            )
    return "\n".join(lines)


def memory_summary(jax_rows: list[dict]) -> str:
    """Peak RSS of the memory row (N, B of `MEMORY`) against its limit."""
    n, batch, limit = MEMORY
    lines = []
    for row in jax_rows:
        if (row["n_ops"], row["batch"]) == (n, batch) and "error" not in row:
            gb = row["peak_rss_gb"]
            verdict = "meets" if gb < limit else "ABOVE"
            lines.append(
                f"memory N={n} B={batch} {row['dtype']} cores={row['cores']}: peak RSS "
                f"{gb:.2f} GB (< {limit:g} GB required): {verdict}"
            )
    return "\n".join(lines)


def write_json(path: Path, data: dict) -> None:
    """Write atomically (temp file, then rename), creating the directory."""
    from placeto_jax.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1)  # fails before anything is written
    with atomic_write(path) as f:
        f.write(text.encode())


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one, args.devices, args.x64, args.min_time, args.cores)))
        return 0
    reference = {}
    jax_rows = []
    for n in args.sizes:
        reference[n] = run_reference(n, args.devices, max(args.batches), args.ref_time)
        print(f"reference N={n}: {reference[n]['placements_per_cpu_s']:.1f} placements/cpu-s")
        for b in args.batches:
            for x64, cores in args.variants:
                jax_rows.append(run_one_in_subprocess(args, n, b, x64, cores))
                print(f"jax N={n} B={b} {DTYPES[x64]} cores={cores}: done", flush=True)
    for n, b in args.extra:
        if n not in reference:
            reference[n] = run_reference(n, args.devices, b, args.ref_time)
        x64, cores = args.variants[0]
        jax_rows.append(run_one_in_subprocess(args, n, b, x64, cores))
        print(f"jax N={n} B={b} {DTYPES[x64]} cores={cores}: done", flush=True)
    data = {
        "machine": machine(),
        "settings": {
            "sizes": args.sizes,
            "batches": args.batches,
            "extra": args.extra,
            "variants": [f"{DTYPES[x]}:{c}" for x, c in args.variants],
            "devices": args.devices,
            "seed": SEED,
            "min_time_s": args.min_time,
            "ref_time_s": args.ref_time,
            "graph": "placeto_jax.graphs.generators.layered(n, seed=0)",
        },
        "reference": list(reference.values()),
        "jax": jax_rows,
    }
    from placeto_jax.files import write_result

    write_result(args.out, data)
    print(table(jax_rows, reference))
    print(checks_summary(jax_rows, reference))
    print(floors_summary(jax_rows, reference))
    print(scaling_summary(jax_rows))
    print(memory_summary(jax_rows))
    print(f"wrote {args.out}")
    failed = [r for r in jax_rows if "error" in r or not r["check"]["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
