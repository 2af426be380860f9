"""Training throughput of both agents: placement decisions and episodes per second, and compile
time, for a real graph coarsened to a given node count. The paper agent: each decision includes
the policy's forward pass and a full simulation of the placement, plus its share of the
gradient step. The construct agent (`--agent construct`): one update samples the episodes,
simulates each final placement once and takes one gradient step (self-imitation), so an
episode's cost should grow linearly with its decisions.

    python experiments/bench_training.py                      # 100 and 300 nodes, B = 64, 256
    python experiments/bench_training.py --agent construct --nodes 100 300 1000 --batch 64

Prints a table and writes every number, with the machine, to results/bench/training.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

from bench_simulator import machine
from placeto_jax.config import make_config
from placeto_jax.env import build_bank, prepare
from placeto_jax.files import write_result
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.report import format_table
from placeto_jax.rl import construct_loop
from placeto_jax.rl.loop import cluster_of
from placeto_jax.rl.train import make_train
from placeto_jax.stages.teachers import teachers

ROOT = Path(__file__).resolve().parents[1]


def measure(graph_spec: str, nodes: int, batch: int, updates: int, devices: int) -> dict:
    config = make_config(
        None, [f"train.episodes={batch}", f"train.iterations={updates + 1}"], n_devices=devices
    )
    cluster = cluster_of(config)
    pg = prepare(graph_spec, resolve_graph(graph_spec), nodes, cluster.delta1)
    bank = build_bank([pg], config.run.buckets)
    run = make_train(config, bank, cluster)
    env_params, hyper = run.env_params, run.hyper
    state = run.init(jax.random.key(0), env_params)
    tic = time.perf_counter()
    update = run.updates.lower(state, hyper, env_params, count=1).compile()
    compile_s = time.perf_counter() - tic
    state, _ = jax.block_until_ready(update(state, hyper, env_params))  # warm-up
    times = []
    for _ in range(updates):
        tic = time.perf_counter()
        state, _ = jax.block_until_ready(update(state, hyper, env_params))
        times.append(time.perf_counter() - tic)
    per_update = statistics.median(times)
    decisions = batch * run.trainer.n_steps
    return {
        "agent": "paper",
        "graph": graph_spec,
        "nodes": pg.graph.n_ops,
        "padded": bank.n_pad,
        "batch": batch,
        "devices": devices,
        "decisions_per_update": decisions,
        "update_s": times,
        "compile_s": compile_s,
        "decisions_per_s": decisions / per_update,
    }


def measure_construct(graph_spec: str, nodes: int, batch: int, updates: int, devices: int) -> dict:
    """The construct agent's self-imitation updates on `graph_spec` coarsened to `nodes`."""
    settings = [f"train.episodes={batch}", "train.imitation=0",
                f"train.iterations={updates + 1}"]  # fmt: skip
    config = make_config("construct", settings, n_devices=devices)
    cluster = cluster_of(config)
    pg = prepare(graph_spec, resolve_graph(graph_spec), nodes, cluster.delta1)
    named = [("g", pg.graph)]
    run = construct_loop.Run.make(config, named, cluster, teachers(named, cluster, config.seed))
    state = construct_loop.initial_state(config, run.bank, np.asarray(run.teacher),
                                         run.reference)  # fmt: skip
    tic = time.perf_counter()
    state, _ = run.update(state)  # compiles
    compile_s = time.perf_counter() - tic
    times = []
    for _ in range(updates):
        tic = time.perf_counter()
        state, _ = run.update(state)
        jax.block_until_ready(state.params)
        times.append(time.perf_counter() - tic)
    per_update = statistics.median(times)
    built = run.bank.built[0]
    units = int(((built.leader == np.arange(built.leader.size)) & built.real).sum())
    return {
        "agent": "construct",
        "graph": graph_spec,
        "nodes": pg.graph.n_ops,
        "padded": int(built.cost.size),
        "batch": batch,
        "devices": devices,
        "decisions_per_update": batch * units,
        "update_s": times,
        "compile_s": compile_s,
        "decisions_per_s": batch * units / per_update,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="family:ptb/0", help="graph to coarsen")
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 300])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--agent", choices=("paper", "construct"), nargs="+", default=["paper"])
    parser.add_argument("--updates", type=int, default=2, help="timed updates per case")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/training.json")
    args = parser.parse_args(argv)
    rows = []
    cases = [(a, n, b) for a in args.agent for n in args.nodes for b in args.batch]
    for agent, nodes, batch in cases:
        bench = measure if agent == "paper" else measure_construct
        rows.append(bench(args.graph, nodes, batch, args.updates, args.devices))
        write_result(args.out, {"machine": machine(), "rows": rows})  # so far
        r = rows[-1]
        print(
            f"  {agent}: {r['nodes']} nodes, B={batch}: {r['decisions_per_s']:,.0f} decisions/s",
            file=sys.stderr,
            flush=True,
        )
    table = [("agent", "graph", "nodes", "padded", "batch", "decisions/s", "episodes/s",
              "update s", "compile s")]  # fmt: skip
    for r in rows:
        per_update = statistics.median(r["update_s"])
        table.append(
            (
                r["agent"],
                r["graph"],
                str(r["nodes"]),
                str(r["padded"]),
                str(r["batch"]),
                f"{r['decisions_per_s']:,.0f}",
                f"{r['batch'] / per_update:,.1f}",
                f"{per_update:.2f}",
                f"{r['compile_s']:.1f}",
            )
        )
    print(format_table(table))
    write_result(args.out, {"machine": machine(), "backend": jax.default_backend(), "rows": rows})
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
