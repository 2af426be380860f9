"""`placeto-jax simulate` (one placement, per-device load) and `placeto-jax demo` (the baseline
placers and a vectorised batch of random placements)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import numpy as np

import placeto_jax as pj
from placeto_jax.cli.format import DemoRow, batch_text, demo_text, report_json, report_text
from placeto_jax.cli.options import add_cluster_option, add_seed_option, cluster_of_args
from placeto_jax.graphs.placements import load_placement
from placeto_jax.graphs.registry import BUILTIN_GRAPHS, resolve_graph
from placeto_jax.placers import PLACERS, random_batch
from placeto_jax.plotting import gantt
from placeto_jax.report import summarize


def add_simulate_commands(commands) -> None:
    """Add `simulate` and `demo` to the `placeto-jax` subcommands."""
    simulate = commands.add_parser(
        "simulate",
        help="simulate one placement of a graph and report per-device load",
        description="Simulate one placement of GRAPH on a cluster and print makespan, per-device "
        "load, memory and transfers.",
        epilog=BUILTIN_GRAPHS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_argument("graph", metavar="GRAPH", help="graph file or built-in graph (below)")
    simulate.add_argument(
        "--devices", type=int, metavar="D", help="device count (a cluster file gives its own)"
    )
    source = simulate.add_mutually_exclusive_group()
    source.add_argument(
        "--placement",
        metavar="FILE",
        help="placement file: op name -> device (what `place -o` writes), or a list of N devices",
    )
    source.add_argument(
        "--placer",
        choices=list(PLACERS),
        default="single",
        help="baseline placer when no --placement is given (default: %(default)s)",
    )
    add_cluster_option(simulate)
    add_seed_option(simulate)
    simulate.add_argument(
        "--no-broadcast",
        action="store_true",
        help="send one transfer per remote consumer device instead of one per op",
    )
    simulate.add_argument("--json", action="store_true", help="print one JSON object")
    simulate.add_argument("--gantt", metavar="OUT.png", help="also write a Gantt chart (PNG)")
    simulate.set_defaults(command=_simulate)

    demo = commands.add_parser(
        "demo",
        help="compare baseline placers on a built-in graph",
        description="Simulate a graph under the single, round-robin and random placers, and the "
        "best of a batch of random placements evaluated in one vectorised simulator call.",
        epilog=BUILTIN_GRAPHS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--devices", type=int, metavar="D", help="device count (default: 4, or the cluster file's)"
    )
    demo.add_argument("--graph", default="cnn", help="graph (default: %(default)s)")
    demo.add_argument(
        "--batch", type=int, default=4096, help="random placements in the batch (default: 4096)"
    )
    add_cluster_option(demo)
    add_seed_option(demo)
    demo.set_defaults(command=_demo)


def _simulate(args: argparse.Namespace) -> int:
    cluster = cluster_of_args(args.cluster, args.devices, "simulate")  # before the graph
    if args.no_broadcast:
        cluster = dataclasses.replace(cluster, broadcast=False)
    graph = resolve_graph(args.graph)
    if args.placement:
        placement = load_placement(args.placement, graph, cluster.n_devices)
        source = f"file {args.placement}"
    else:
        placement = PLACERS[args.placer](graph, cluster, jax.random.key(args.seed))
        source = f"placer {args.placer}"
    result = pj.simulate(graph, cluster, placement)
    report = summarize(graph, cluster, placement, result)
    if args.gantt:
        gantt(graph, cluster, placement, result, args.gantt)
    if args.json:
        print(json.dumps(report_json(args.graph, graph, cluster, source, placement, report)))
    else:
        print(report_text(args.graph, graph, cluster, source, report))
        if args.gantt:
            print(f"wrote {args.gantt}")
    return 0


MAX_DEMO_BATCH = 1 << 20  # random placements `demo` simulates in one call
MAX_DEMO_CELLS = 1 << 26  # batch x ops: a few GB of simulator state at most


def _demo(args: argparse.Namespace) -> int:
    if not 1 <= args.batch <= MAX_DEMO_BATCH:
        raise ValueError(f"--batch must be in [1, {MAX_DEMO_BATCH:,}], got {args.batch}")
    graph = resolve_graph(args.graph)
    if args.batch * graph.n_ops > MAX_DEMO_CELLS:
        raise ValueError(
            f"--batch {args.batch} x {graph.n_ops} ops is more than the {MAX_DEMO_CELLS:,} "
            "placement entries one call simulates here; give a smaller --batch"
        )
    cluster = cluster_of_args(args.cluster, args.devices, "demo", default=4)
    key, batch_key = jax.random.split(jax.random.key(args.seed))
    rows = []
    for name in ("single", "round-robin", "random"):
        result = pj.simulate(graph, cluster, PLACERS[name](graph, cluster, key))
        rows.append(DemoRow(name, float(result.makespan), float(result.peak_memory.max())))
    placements = random_batch(graph, cluster, batch_key, args.batch)
    tic = time.perf_counter()
    pj.simulate(graph, cluster, placements)  # compiles for this batch shape
    compiled = time.perf_counter()
    batch = pj.simulate(graph, cluster, placements)
    done = time.perf_counter()
    best = int(np.argmin(batch.makespan))
    rows.append(
        DemoRow(
            f"best of {args.batch} random",
            float(batch.makespan[best]),
            float(batch.peak_memory[best].max()),
        )
    )
    print(demo_text(args.graph, graph, cluster, rows))
    print("\n" + batch_text(args.batch, done - compiled, compiled - tic, jax.default_backend()))
    return 0
