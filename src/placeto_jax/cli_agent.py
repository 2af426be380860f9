"""The learning commands of `placeto-jax`: `train` a Placeto policy, `place` a graph with a
trained policy (zero-shot), `eval` a policy over graphs. Registered by `cli._parser`.

The policy runs in float32; the placements it returns are then simulated exactly (float64) on the
op graph for every number printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.config import PRESETS, Config, make_config
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.files import atomic_write
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import METHODS, run_method
from placeto_jax.report import format_table
from placeto_jax.rl.checkpoint import Checkpointer, load_run
from placeto_jax.rl.evaluate import Placement, place_graphs
from placeto_jax.rl.loop import cluster_of, load_graphs, train_and_evaluate
from placeto_jax.rl.sharding import episode_mesh
from placeto_jax.rl.train import make_train

MS = 1e3  # µs


def add_agent_commands(commands) -> None:
    """Add `train`, `place` and `eval` to the `placeto-jax` subcommands."""
    train = commands.add_parser(
        "train",
        help="train a Placeto policy on one or more graphs",
        description="Train a Placeto policy with REINFORCE on the given graphs (a family split "
        "trains one policy for the whole family). Re-running the same command resumes from "
        "the last checkpoint in --workdir.",
    )
    train.add_argument(
        "--graphs",
        required=True,
        metavar="NAME[,NAME...]",
        help="graphs, files or family splits, e.g. family:cifar10/train",
    )
    train.add_argument("--devices", type=int, required=True, metavar="D", help="device count")
    train.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="config preset: tiny (CPU-sized) or paper",
    )
    train.add_argument(
        "--cluster",
        default="placeto-k80",
        metavar="NAME",
        help="cluster preset (default: %(default)s)",
    )
    train.add_argument(
        "--workdir", metavar="DIR", help="run directory (default: runs/<graphs>-d<D>-s<SEED>)"
    )
    train.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. train.episodes=128 (repeatable)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="multi-host training: process 0's address (jax.distributed)",
    )
    train.add_argument("--num-processes", type=int, metavar="N", help="with --coordinator")
    train.add_argument("--process-id", type=int, metavar="I", help="with --coordinator")
    train.set_defaults(command=_train)

    place = commands.add_parser(
        "place",
        help="place a graph with a trained policy (zero-shot) or a baseline method",
        description="Place GRAPH with the policy in a checkpoint directory (without training), "
        "or with a baseline placement method.",
        epilog="methods:\n" + "\n".join(f"  {m.name:<14} {m.summary}" for m in METHODS.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    place.add_argument("graph", metavar="GRAPH", help="graph file or built-in graph")
    source = place.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", metavar="DIR", help="run directory of a trained policy")
    source.add_argument("--method", metavar="NAME", help="a baseline method (listed below)")
    place.add_argument(
        "--devices",
        type=int,
        metavar="D",
        help="device count (with --checkpoint: must match the checkpoint's)",
    )
    place.add_argument(
        "--cluster",
        default="placeto-k80",
        metavar="NAME",
        help="cluster preset for --method (default: %(default)s)",
    )
    place.add_argument(
        "--budget", type=int, metavar="N", help="simulator evaluations for the search methods"
    )
    place.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    place.add_argument("-o", "--output", metavar="FILE", help="write the placement (JSON)")
    place.add_argument("--json", action="store_true", help="print one JSON object")
    place.set_defaults(command=_place)

    evaluate = commands.add_parser(
        "eval",
        help="evaluate a trained policy on graphs (a table)",
        description="Greedy placements of every graph by the policy in a checkpoint directory.",
    )
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="run directory")
    evaluate.add_argument("--graphs", required=True, metavar="NAME[,NAME...]", help="graphs")
    evaluate.add_argument("--json", action="store_true", help="print a JSON list")
    evaluate.set_defaults(command=_eval)


# ---------------------------------------------------------------------- train
def _train(args: argparse.Namespace) -> int:
    if args.devices < 1:
        raise ValueError(f"--devices must be at least 1, got {args.devices}")
    Cluster.preset(args.cluster, args.devices)  # a bad preset fails before any work
    config = make_config(
        args.preset, args.set, n_devices=args.devices, cluster_preset=args.cluster, seed=args.seed
    )
    workdir = args.workdir or _default_workdir(args.graphs, args.devices, args.seed)
    graphs = load_graphs(args.graphs, config)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    mesh = episode_mesh() if jax.device_count() > 1 else None
    result = train_and_evaluate(config, graphs, workdir, progress=not args.no_progress, mesh=mesh)
    evaluation = result.evaluation
    rows = [("graph", "nodes", "initial", "placeto", "improvement")]
    for i, pg in enumerate(graphs):
        initial, best = evaluation["initial_runtime"][i], evaluation["best_runtime"][i]
        rows.append(
            (
                pg.name,
                str(pg.graph.n_ops),
                f"{initial:.4g}",
                f"{best:.4g}",
                f"{initial / best:.2f}x",
            )
        )
    unit = "relative to the initial placement" if config.env.normalize == "initial" else "s"
    print(f"greedy evaluation after {config.train.iterations} updates (runtime, {unit}):")
    print(format_table(rows))
    print(
        f"\nrun directory: {workdir}  (place a graph: placeto-jax place GRAPH "
        f"--checkpoint {workdir})"
    )
    return 0


def _default_workdir(graphs: str, devices: int, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", graphs).strip("_")[:60]
    return str(Path("runs") / f"{slug}-d{devices}-s{seed}")


# ---------------------------------------------------------------------- place / eval
def load_policy(checkpoint: str, graphs: list[PlacementGraph], devices: int | None):
    """(config, params) of the policy in `checkpoint`, checked against `devices`."""
    config, _ = load_run(checkpoint)
    if devices is not None and devices != config.n_devices:
        raise ValueError(
            f"the policy in {checkpoint} places on {config.n_devices} devices, not {devices}; "
            f"train one for {devices} devices"
        )
    run = make_train(config, build_bank(graphs[:1], config.run.buckets), cluster_of(config))
    template = jax.eval_shape(run.init, jax.random.key(0), run.env_params).params
    checkpointer = Checkpointer(checkpoint, create=False)
    try:
        params = checkpointer.restore_params(template)
    finally:
        checkpointer.close()
    return config, params


def _placements(checkpoint: str, spec: str, devices: int | None) -> tuple[Config, list]:
    config, _ = load_run(checkpoint)
    graphs = load_graphs(spec, config)
    config, params = load_policy(checkpoint, graphs, devices)
    results = place_graphs(config, params, graphs, cluster_of(config))
    return config, results


def _place(args: argparse.Namespace) -> int:
    if args.method:
        return _place_method(args)
    config, (result,) = _placements(args.checkpoint, args.graph, args.devices)
    _write_placement(args.output, result.placement)
    if args.json:
        print(json.dumps({"method": "placeto", **_placement_json(result)}))
        return 0
    print(
        f"graph    {result.graph}: placed as {result.n_nodes} nodes by the policy in "
        f"{args.checkpoint}"
    )
    print(f"devices  {config.n_devices} x {config.cluster_preset}\n")
    print(format_table(_placement_rows([result], with_graph=False)))
    _after_placing(result.fits_memory, args.output)
    return 0


def _place_method(args: argparse.Namespace) -> int:
    if args.devices is None:
        raise ValueError("--method needs --devices")
    graph = resolve_graph(args.graph)
    cluster = Cluster.preset(args.cluster, args.devices)
    result = run_method(args.method, graph, cluster, jax.random.key(args.seed), args.budget)
    _write_placement(args.output, result.placement)
    if args.json:
        print(
            json.dumps(
                {
                    "graph": args.graph,
                    "method": result.method,
                    "makespan": result.makespan,
                    "peak_memory": np.asarray(result.peak_memory).tolist(),
                    "fits_memory": result.fits_memory,
                    "evaluations": result.evaluations,
                    "wall_s": result.wall_s,
                    "placement": result.placement.tolist(),
                }
            )
        )
        return 0
    print(f"graph    {args.graph}: {graph.n_ops} ops; method {result.method}")
    print(f"devices  {args.devices} x {args.cluster}\n")
    print(
        format_table(
            [
                ("makespan ms", "peak memory GB", "evaluations", "wall s"),
                (
                    f"{result.makespan / MS:.3f}",
                    f"{np.max(result.peak_memory) / 1e9:.3f}",
                    str(result.evaluations),
                    f"{result.wall_s:.2f}",
                ),
            ]
        )
    )
    _after_placing(result.fits_memory, args.output)
    return 0


def _write_placement(path: str | None, placement: np.ndarray) -> None:
    if path:
        with atomic_write(path) as f:
            f.write(json.dumps({"placement": np.asarray(placement).tolist()}).encode())


def _after_placing(fits: bool, output: str | None) -> None:
    if not fits:
        print("\nwarning: the placement exceeds some device's memory", file=sys.stderr)
    if output:
        print(f"\nplacement written to {output}")


def _eval(args: argparse.Namespace) -> int:
    _, results = _placements(args.checkpoint, args.graphs, None)
    if args.json:
        print(json.dumps([_placement_json(r) for r in results]))
    else:
        print(format_table(_placement_rows(results, with_graph=True)))
    return 0


def _placement_json(r: Placement) -> dict:
    return {
        "graph": r.graph,
        "makespan": r.makespan,
        "single_device_makespan": r.single_device_makespan,
        "initial_makespan": r.initial_makespan,
        "peak_memory": np.asarray(r.peak_memory).tolist(),
        "fits_memory": r.fits_memory,
        "nodes": r.n_nodes,
        "evaluations": r.evaluations,
        "placement": r.placement.tolist(),
    }


def _placement_rows(results: list[Placement], with_graph: bool) -> list[tuple[str, ...]]:
    if not with_graph:
        r = results[0]
        return [
            ("placement", "makespan ms", "speedup vs single"),
            ("single device", f"{r.single_device_makespan / MS:.3f}", "1.00x"),
            (
                "initial (random)",
                f"{r.initial_makespan / MS:.3f}",
                f"{r.single_device_makespan / r.initial_makespan:.2f}x",
            ),
            ("placeto", f"{r.makespan / MS:.3f}", f"{r.single_device_makespan / r.makespan:.2f}x"),
        ]
    rows = [("graph", "nodes", "single ms", "initial ms", "placeto ms", "speedup")]
    for r in results:
        rows.append(
            (
                r.graph,
                str(r.n_nodes),
                f"{r.single_device_makespan / MS:.3f}",
                f"{r.initial_makespan / MS:.3f}",
                f"{r.makespan / MS:.3f}",
                f"{r.single_device_makespan / r.makespan:.2f}x",
            )
        )
    return rows
