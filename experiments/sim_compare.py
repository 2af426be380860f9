"""Side-by-side timing of two versions of `sim/core.py` (a git revision vs the working tree).

    python experiments/sim_compare.py [--base HEAD] [--cases 500:1024,2000:256] [--repeats 3]

Both versions run in this process, pinned to one core, float32, on the benchmark's graphs and
placements (`bench_simulator.py`), batched like `sim.api.simulate_batch` (scan over vmapped
chunks). Calls alternate between the versions so that load from other processes hits both
alike; the printed ratio (base time / new time) is what to trust, not the absolute times. Also
times peak memory alone on the new version's schedule, and checks that both give bit-equal
outputs.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_simulator import benchmark_graph, pin_to_one_core, random_placements

ROOT = Path(__file__).resolve().parents[1]
CORE = "src/placeto_jax/sim/core.py"


def load_core(label: str, source: str):
    """Import a version of core.py from its source text as module `label`."""
    path = Path(tempfile.mkdtemp()) / f"{label}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(label, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[label] = module
    spec.loader.exec_module(module)
    return module


def batch_fn(core, chunk: int):
    import jax

    def run(graph, cluster, placements):
        if hasattr(core, "simulate_lanes"):  # one loop per chunk of lanes
            lanes = placements.reshape(-1, chunk, placements.shape[1])
            out = jax.lax.map(lambda p: core.simulate_lanes(graph, cluster, p), lanes)
            return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)
        one = lambda p: core.simulate_padded(graph, cluster, p)  # noqa: E731
        return jax.lax.map(one, placements, batch_size=chunk)

    return jax.jit(run)


def peak_fn(core, chunk: int):
    import jax

    takes_broadcast = "broadcast" in inspect.signature(core.peak_memory).parameters
    extra = {"broadcast": True} if takes_broadcast else {}

    def run(graph, placements, start, end, arrival):
        n_dev = arrival.shape[-1]
        return jax.lax.map(
            lambda a: core.peak_memory(graph, a[0], a[1], a[2], a[3], n_dev, **extra),
            (placements, start, end, arrival),
            batch_size=chunk,
        )

    return jax.jit(run)


def clock(fn, *args) -> float:
    import jax

    tic = time.process_time()
    jax.block_until_ready(fn(*args))
    return time.process_time() - tic


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="HEAD", help="git revision or file of the baseline core.py")
    p.add_argument("--new", type=Path, default=ROOT / CORE, help="the core.py to compare")
    p.add_argument("--cases", default="500:1024,2000:256", help="N:B pairs")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--devices", type=int, default=4)
    args = p.parse_args()
    pin_to_one_core()
    import jax
    import numpy as np

    import placeto_jax as pj
    from placeto_jax.sim import api

    base_src = (
        Path(args.base).read_text()
        if Path(args.base).is_file()
        else subprocess.run(
            ["git", "show", f"{args.base}:{CORE}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    base = load_core("core_base", base_src)
    new = load_core("core_new", args.new.read_text())
    for case in args.cases.split(","):
        n, b = (int(x) for x in case.split(":"))
        graph = benchmark_graph(n)
        pg = api.padded(graph)
        rows = np.zeros((b, pg.n_pad), np.int32)
        rows[:, :n] = random_placements(n, b, args.devices)
        rows = jax.numpy.asarray(rows)
        cluster = api.sim_cluster(pj.Cluster(args.devices), np.float32)
        chunk = api.chunk_size()
        fns = {}
        for label, core in (("base", base), ("new", new)):
            g = core.SimGraph.from_padded(pg, np.float32)
            fns[label] = (batch_fn(core, chunk), g)
        outs = {k: jax.block_until_ready(f(g, cluster, rows)) for k, (f, g) in fns.items()}
        differ = [
            f"{field} (max rel {np.nanmax(np.abs(x - y) / np.maximum(np.abs(x), 1e-30)):.1e})"
            for field, x, y in zip(
                outs["new"]._fields,
                map(np.asarray, outs["base"]),
                map(np.asarray, outs["new"]),
                strict=True,
            )
            if not np.array_equal(x, y)
        ]
        same = "yes" if not differ else "no: " + ", ".join(differ)
        out = outs["new"]
        peaks = {k: peak_fn(c, chunk) for k, c in (("base", base), ("new", new))}
        gs = {k: fns[k][1] for k in fns}
        peak_args = (rows, out.start, out.end, out.arrival)
        for k in peaks:
            jax.block_until_ready(peaks[k](gs[k], *peak_args))
        times: dict[str, list[float]] = {k: [] for k in ("base", "new", "peak_base", "peak_new")}
        for _ in range(args.repeats):
            for k, (f, g) in fns.items():
                times[k].append(clock(f, g, cluster, rows))
            for k in peaks:
                times[f"peak_{k}"].append(clock(peaks[k], gs[k], *peak_args))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"N={n} B={b} W={pg.width}: base {med['base']:.3f} s, new {med['new']:.3f} s, "
            f"speed-up {med['base'] / med['new']:.2f}x | peak memory base {med['peak_base']:.3f} "
            f"s, new {med['peak_new']:.3f} s | new {b / med['new']:.0f} pl/cpu-s | "
            f"bit-equal: {same}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
