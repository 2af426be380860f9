"""The simulator on real graphs: `pj.simulate` with a user's defaults (float64, the
implementation it picks: the native CPU kernel where built), the JAX loop it would run
otherwise, and the Python reference, side by side in one process.

    python experiments/bench_wide.py                # operator graphs, families, zoo op graphs
    python experiments/bench_wide.py --graphs family:nmt/24 --batch 256

For each graph: N ops, E edges, W chain slots, K padded out-degree; placements per CPU-second
(all threads) and per wall-second of `pj.simulate` on a batch of B (calls alternated with the
JAX loop's, best of `--repeats`; outputs checked equal), of `simulate_batch` with the JAX loop
(`loop="wide"` from `api.WIDE_SLOTS` chain slots, else `"scan"`) on the same padded batch, and
of the reference (one placement at a time, single-threaded, so its two rates are equal); the
ratios, and how many real graphs of 1,000 ops or more reach 30x. Then the growth of time per
placement against N over the BERT op graphs, and (`--memory`) the peak RSS of one `pj.simulate`
call at B = 4,096 on `family:nmt/24`, in a fresh process. Prints the tables and writes every
number, with the machine, to results/bench/wide.json. `--search` also times local search with
4,096 evaluations on `family:nmt/24` with the native kernel and with the JAX loop
(`PLACETO_JAX_NATIVE=0`), each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import placeto_jax as pj
from bench_simulator import machine
from placeto_jax import precision
from placeto_jax.files import write_result
from placeto_jax.graphs.registry import load
from placeto_jax.graphs.zoo import zoo_op_graph
from placeto_jax.placers.simple import colocate
from placeto_jax.report import format_table
from placeto_jax.sim import api, native

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "benchmarks" / "msr-fiddle"
FAMILIES = ["family:cifar10/24", "family:ptb/24", "family:nmt/24"]
# Zoo models traced at op level (ungrouped): `zoo-ops:MODEL[:SIZE=VALUE,...]`.
BERT = [f"zoo-ops:bert_base:layers={n}" for n in (3, 6, 12)]
ZOO_OPS = [*BERT, "zoo-ops:nmt"]
SYNTHETIC = ["layered:2000"]
MEMORY = ("family:nmt/24", 4096)
REFERENCE_S = 2.0  # CPU seconds of reference placements per graph (at least two placements)


def real_graphs(data: Path = DATA) -> list[str]:
    """The benchmark's operator graphs under `data`, one test graph per family, the zoo op
    graphs: the real graphs every simulator benchmark measures first."""
    files = sorted(str(p) for p in data.glob("*/OperatorGraphs/*.json"))
    return files + FAMILIES + ZOO_OPS


def default_graphs() -> list[str]:
    return real_graphs() + SYNTHETIC


def graph_of(spec: str) -> pj.Graph:
    """A graph by registry name or file, or a zoo model's ungrouped op graph (`zoo-ops:...`)."""
    if not spec.startswith("zoo-ops:"):
        return load(spec)
    name, _, sizes = spec.removeprefix("zoo-ops:").partition(":")
    pairs = (item.split("=") for item in sizes.split(",") if item)
    return zoo_op_graph(name, sizes={k: int(v) for k, v in pairs})[0]


def label(spec: str) -> str:
    """A graph file as `set/stem` (`throughput/bert_l-3_training`), other specs as they are."""
    if not spec.endswith(".json"):
        return spec
    path = Path(spec)
    return f"{path.parent.parent.name.removesuffix('-inputs')}/{path.stem}"


def timed(fn) -> tuple[object, float, float]:
    """(result, CPU s, wall s) of fn()."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.process_time() - cpu, time.perf_counter() - wall


def measure(spec: str, batch: int, devices: int, repeats: int) -> dict:
    graph = graph_of(spec)
    cluster = pj.Cluster(devices)
    pg = api.padded(graph)
    draws = np.random.default_rng(0).integers(0, devices, size=(batch, graph.n_ops))
    placements = colocate(graph, draws)  # weights with their updates, as every placer does
    rows = np.zeros((batch, pg.n_pad), np.int32)
    rows[:, : graph.n_ops] = placements
    dtype = precision.EXACT
    jax_loop = "wide" if pg.width >= api.WIDE_SLOTS else "scan"

    def on_jax_loop():
        with precision.scope(dtype):
            return api.simulate_batch(
                api.device_graph(graph, dtype),
                api.sim_cluster(cluster, dtype),
                jnp.asarray(rows),
                cluster.broadcast,
                loop=jax_loop,
            )

    calls = {"simulate": lambda: pj.simulate(graph, cluster, placements), "jax_loop": on_jax_loop}
    first = {name: timed(fn)[0] for name, fn in calls.items()}  # compiles
    best = {name: (np.inf, np.inf) for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            _, cpu, wall = timed(fn)
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    equal = np.array_equal(
        first["simulate"].start, np.asarray(first["jax_loop"].start)[:, : graph.n_ops]
    )
    done, spent, exact = 0, 0.0, True
    while done < batch and (done < 2 or spent < REFERENCE_S):  # placements one at a time
        tic = time.process_time()
        want = pj.simulate_reference(graph, cluster, placements[done])
        spent += time.process_time() - tic
        exact &= bool(np.array_equal(first["simulate"][done].start, want.start))
        done += 1
    reference = done / spent
    return {
        "graph": spec,
        "n_ops": graph.n_ops,
        "n_edges": graph.n_edges,
        "chain_slots": pg.width,
        "max_children": int(pg.children.shape[1]),
        "batch": batch,
        "loop": "native" if native.in_use() else jax_loop,  # what pj.simulate ran
        "jax_loop": jax_loop,
        "simulate_per_cpu_s": batch / best["simulate"][0],
        "simulate_per_wall_s": batch / best["simulate"][1],
        "jax_loop_per_cpu_s": batch / best["jax_loop"][0],
        "jax_loop_per_wall_s": batch / best["jax_loop"][1],
        "reference_per_cpu_s": reference,
        "outputs_equal": bool(equal),
        "exact_against_reference": exact,
    }


def results_table(rows: list[dict]) -> str:
    head = ("graph", "N", "E", "W", "K", "sim", "sim/cpu-s", "sim/wall-s", "jax loop")
    table = [(*head, "loop/cpu-s", "ref/s", "sim/ref cpu", "sim/ref wall", "sim/loop")]
    for r in rows:
        ref = r["reference_per_cpu_s"]
        table.append(
            (
                label(r["graph"]),
                str(r["n_ops"]),
                str(r["n_edges"]),
                str(r["chain_slots"]),
                str(r["max_children"]),
                r["loop"],
                f"{r['simulate_per_cpu_s']:,.0f}",
                f"{r['simulate_per_wall_s']:,.0f}",
                r["jax_loop"],
                f"{r['jax_loop_per_cpu_s']:,.0f}",
                f"{ref:,.1f}",
                f"{r['simulate_per_cpu_s'] / ref:.1f}x",
                f"{r['simulate_per_wall_s'] / ref:.1f}x",
                f"{r['simulate_per_cpu_s'] / r['jax_loop_per_cpu_s']:.2f}x",
            )
        )
    return format_table(table)


def growth_summary(rows: list[dict], rate: str = "simulate_per_cpu_s") -> str | None:
    """Time per placement (1 / `rate`, placements per second) against N from the smallest to
    the largest BERT op graph."""
    bert = sorted((r for r in rows if r["graph"] in BERT), key=lambda r: r["n_ops"])
    if len(bert) < 2:
        return None
    small, large = bert[0], bert[-1]
    n_growth = large["n_ops"] / small["n_ops"]
    t_growth = small[rate] / large[rate]
    verdict = "meets" if t_growth <= 1.3 * n_growth else "BELOW"
    return (
        f"growth {label(small['graph'])} -> {label(large['graph'])}: N x{n_growth:.2f}, time "
        f"per placement x{t_growth:.2f} ({t_growth / n_growth:.2f} x N's, <= 1.3 required): "
        f"{verdict}"
    )


def target_summary(rows: list[dict], min_ops: int = 1000, ratio: float = 30.0) -> str | None:
    """How many real graphs of at least `min_ops` ops `pj.simulate` runs at least `ratio` times
    as many placements per CPU-second as the reference."""
    big = [r for r in rows if r["n_ops"] >= min_ops and r["graph"] not in SYNTHETIC]
    if not big:
        return None
    ratios = [r["simulate_per_cpu_s"] / r["reference_per_cpu_s"] for r in big]
    met = sum(x >= ratio for x in ratios)
    return (
        f"real graphs of >= {min_ops:,} ops at >= {ratio:.0f}x the reference per CPU-second: "
        f"{met} of {len(big)} (lowest {min(ratios):.1f}x)"
    )


def memory_row() -> dict:
    """Peak RSS of one pj.simulate call at MEMORY's size, in a fresh process."""
    spec, batch = MEMORY
    code = (
        "import json, resource, numpy as np, placeto_jax as pj\n"
        "from placeto_jax.graphs.registry import load\n"
        "from placeto_jax.placers.simple import colocate\n"
        f"g = load({spec!r}); c = pj.Cluster(4)\n"
        f"p = colocate(g, np.random.default_rng(0).integers(0, 4, size=({batch}, g.n_ops)))\n"
        "r = pj.simulate(g, c, p)\n"
        "print(json.dumps({'n_ops': g.n_ops, 'peak_rss_gb': "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}))\n"
    )
    return fresh_process(code, {"graph": spec, "batch": batch})


def fresh_process(code: str, row: dict, env: dict | None = None) -> dict:
    """`row` with the JSON object that `code` prints last, run in a fresh Python process (or
    with the error it ended with)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env or os.environ
    )
    if done.returncode:
        return {**row, "error": done.stderr.strip()[-300:]}
    return {**row, **json.loads(done.stdout.strip().splitlines()[-1])}


SEARCH = ("family:nmt/24", 4096)


def search_row(native_on: bool) -> dict:
    """Local search with SEARCH's evaluations on its graph (4 devices, float64), in a fresh
    process with the native kernel on or off: wall and CPU seconds, the placement's makespan."""
    spec, budget = SEARCH
    code = (
        "import json, time, jax, placeto_jax as pj\n"
        "from placeto_jax.graphs.registry import load\n"
        "from placeto_jax.placers.search import local_search\n"
        f"g = load({spec!r}); c = pj.Cluster(4)\n"
        "cpu, wall = time.process_time(), time.perf_counter()\n"
        f"s = local_search(g, c, jax.random.key(0), {budget})\n"
        "print(json.dumps({'wall_s': time.perf_counter() - wall, "
        "'cpu_s': time.process_time() - cpu, 'evaluations': s.evaluations, "
        "'makespan_us': float(pj.simulate(g, c, s.placement, allow_split=True).makespan)}))\n"
    )
    env = {**os.environ, "PLACETO_JAX_NATIVE": "1" if native_on else "0"}
    return fresh_process(code, {"graph": spec, "evaluations": budget, "native": native_on}, env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=None, help="graphs (default: see above)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--memory", action="store_true", help="also the B = 4,096 memory row")
    parser.add_argument("--search", action="store_true", help="also time local search")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/wide.json")
    args = parser.parse_args(argv)
    rows = []
    for spec in args.graphs or default_graphs():
        rows.append(measure(spec, args.batch, args.devices, args.repeats))
        print(f"  {label(spec)}: done", file=sys.stderr, flush=True)
        write_result(args.out, {"machine": machine(), "rows": rows})  # so far
    print(f"placements per second, B = {args.batch}, float64 (pj.simulate's default), ")
    print(f"{args.devices} devices; the reference is single-threaded (CPU s = wall s)")
    print(results_table(rows))
    summary = {"machine": machine(), "rows": rows}
    target = target_summary(rows)
    if target:
        print(target)
        summary["target"] = target
    growth = growth_summary(rows)
    if growth:
        print(growth)
        summary["growth"] = growth
    if args.memory:
        summary["memory"] = memory_row()
        print(f"memory: {summary['memory']}")
    if args.search:
        summary["search"] = [search_row(native_on) for native_on in (True, False)]
        for row in summary["search"]:
            print(f"local search: {row}")
    if not all(r["outputs_equal"] and r["exact_against_reference"] for r in rows):
        print("WARNING: outputs differ between the loops or from the reference", file=sys.stderr)
    summary["self_peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    write_result(args.out, summary)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
