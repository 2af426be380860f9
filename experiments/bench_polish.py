"""Policy-guided search one move at a time (`--polish P`) against the same search in blocks
(`--polish P --polish-block M`), side by side on the same graphs, starts and policy: wall and
process CPU seconds (compilation included: what a user waits for), simulations and the
makespan each reaches. The policy is the tiny preset's, freshly initialised (seed 0): the
timing does not depend on what it learned, and both searches use the same one.

Run: `python experiments/bench_polish.py [--graphs SPEC,...] [--block 64] [--passes 1]`;
prints a table, writes results/bench/polish.json atomically.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax

import placeto_jax as pj
from placeto_jax.config import make_config
from placeto_jax.env.bank import build_bank, prepare
from placeto_jax.files import write_result
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers.simple import random as random_placement
from placeto_jax.report import format_table
from placeto_jax.rl.evaluate import Placement
from placeto_jax.rl.train import make_train
from placeto_jax.stages.policy_search import polish_placements

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/benchmarks/msr-fiddle/throughput-inputs/OperatorGraphs"
GRAPHS = (str(DATA / "resnet50_inference.json"), str(DATA / "bert_l-12_inference.json"))


def start_of(name: str, graph: pj.Graph, cluster: pj.Cluster, seed: int) -> Placement:
    """A random placement of `graph`, co-located ops together (what a zero-shot episode starts
    from), simulated."""
    placement = random_placement(graph, cluster, jax.random.key(seed))
    run = pj.simulate(graph, cluster, placement)
    return Placement(graph=name, placement=placement, makespan=float(run.makespan),
                     single_device_makespan=0.0, initial_makespan=float(run.makespan),
                     peak_memory=run.peak_memory, fits_memory=True, n_nodes=graph.n_ops,
                     n_units=graph.n_ops, evaluations=1)  # fmt: skip


def timed(fn, *args, **kwargs):
    """(fn(*args, **kwargs), wall s, process CPU s)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/polish.json")
    args = parser.parse_args(argv)
    cluster = pj.Cluster.preset("placeto-k80", args.devices)
    config = make_config("tiny", n_devices=args.devices)
    rows = []
    for spec in args.graphs.split(","):
        graph = resolve_graph(spec)
        name = Path(spec).stem if spec.endswith(".json") else spec
        pg = prepare(name, graph, 0, cluster.delta1)
        run = make_train(config, build_bank([pg]), cluster)
        params = run.init(jax.random.key(0), run.env_params).params
        start = start_of(name, graph, cluster, seed=0)
        row = {"graph": name, "ops": graph.n_ops, "start_ms": start.makespan / 1e3}
        for label, block in (("one at a time", 1), (f"blocks of {args.block}", args.block)):
            (out,), wall, cpu = timed(
                polish_placements, config, params, [pg], [start], cluster, args.passes, block=block
            )
            row[label] = {"wall_s": wall, "cpu_s": cpu, "simulations": out.polish_steps,
                          "makespan_ms": out.makespan / 1e3}  # fmt: skip
        rows.append(row)
    labels = ("one at a time", f"blocks of {args.block}")
    table = [["graph", "ops", "start ms", *(f"{x} {c}" for x in labels
                                           for c in ("wall s", "CPU s", "sims", "ms")),
              "wall ratio"]]  # fmt: skip
    for r in rows:
        cells = [
            f"{r[x][k]:.{p}f}"
            for x in labels
            for k, p in (("wall_s", 1), ("cpu_s", 1), ("simulations", 0), ("makespan_ms", 3))
        ]
        ratio = r[labels[0]]["wall_s"] / r[labels[1]]["wall_s"]
        table.append([r["graph"], str(r["ops"]), f"{r['start_ms']:.3f}", *cells, f"{ratio:.2f}x"])
    print(format_table(table))  # fmt: skip
    write_result(args.out, {"passes": args.passes, "block": args.block, "devices": args.devices,
                            "rows": rows})  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
