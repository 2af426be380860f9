"""The learning commands of `placeto-jax`: `train` a Placeto policy, `place` a graph with a
named pipeline (`placeto_jax.pipeline`: a trained policy zero-shot, the heuristics, search) or a
baseline method, `eval` a policy over graphs.

The policy runs in float32; the placements it returns are then simulated exactly (float64) on the
op graph for every number printed. `place` and `eval` place on the cluster the checkpoint trained
for, or on `--cluster NAME|FILE` (a preset on the checkpoint's device count, or a cluster file).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import socket
import sys
import time
from pathlib import Path

import jax
import numpy as np

from placeto_jax.cli.format import (
    devices_line,
    eval_table,
    method_json,
    method_table,
    policy_json,
    policy_table,
    stages_line,
    train_text,
)
from placeto_jax.cli.options import (
    DEFAULT_CLUSTER,
    add_cluster_option,
    add_seed_option,
    cluster_of_args,
)
from placeto_jax.cluster import Cluster
from placeto_jax.config import (
    PIPELINES,
    PRESETS,
    Config,
    Pipeline,
    apply,
    check_unique,
    make_config,
    make_pipeline,
    own_pipeline,
)
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.placements import save_placement
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.pipeline import (
    Policy,
    Stage,
    check,
    place,
    place_many,
    starting_config,
    starting_graphs,
    uniform_random,
    untrained,
)
from placeto_jax.placers import METHODS, run_method
from placeto_jax.placers.search import DEFAULT_BUDGET
from placeto_jax.rl import construct_loop
from placeto_jax.rl.evaluate import found_on_ops
from placeto_jax.rl.loop import TrainingInterrupted, load_graphs, train_and_evaluate
from placeto_jax.rl.sharding import episode_mesh
from placeto_jax.stages.policy_search import squeezed_method
from placeto_jax.stages.starts import STARTS, check_start
from placeto_jax.stages.teachers import config_teachers

CHECKPOINT_CLUSTER = "the checkpoint's"


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
    train.add_argument(
        "--devices", type=int, metavar="D", help="device count (a cluster file gives its own)"
    )
    train.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="config preset: tiny (CPU-sized), paper, or construct (the construct agent: each op "
        "placed once, imitating the best heuristic; docs/agent.md)",
    )
    add_cluster_option(train)
    train.add_argument(
        "--workdir", metavar="DIR", help="run directory (default: runs/<graphs>-d<D>-s<SEED>)"
    )
    add_seed_option(train)
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. train.episodes=128 (repeatable)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--no-heuristics", action="store_true", help=NO_HEURISTICS)
    add_start_option(train, "random")
    train.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="multi-host training: process 0's address (jax.distributed)",
    )
    train.add_argument("--num-processes", type=int, metavar="N", help="with --coordinator")
    train.add_argument("--process-id", type=int, metavar="I", help="with --coordinator")
    train.add_argument(
        "--coordinator-timeout",
        type=int,
        default=60,
        metavar="S",
        help="seconds to wait for every process to reach the coordinator (default: 60)",
    )
    train.set_defaults(command=_train)

    place = commands.add_parser(
        "place",
        help="place a graph with a pipeline (a trained policy, the heuristics) or one method",
        description="Place GRAPH with a named pipeline of stages (the policy in a checkpoint "
        "directory, without training; or the best fast heuristic), or with one baseline "
        "method. --set pipeline.FIELD=V changes a stage.",
        epilog=PIPELINES_EPILOG
        + "\nmethods:\n"
        + "\n".join(f"  {m.name:<14} {m.summary}" for m in METHODS.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    place.add_argument("graph", metavar="GRAPH", help="graph file or built-in graph")
    source = place.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", metavar="DIR", help="run directory of a trained policy")
    source.add_argument("--method", metavar="NAME", help="one baseline method (listed below)")
    place.add_argument(
        "--devices",
        type=int,
        metavar="D",
        help="device count (a cluster file gives its own; a checkpoint of the paper agent "
        "places on its run's count)",
    )
    add_cluster_option(
        place, None, f"{CHECKPOINT_CLUSTER} with --checkpoint, {DEFAULT_CLUSTER} otherwise"
    )
    place.add_argument(
        "--budget",
        type=int,
        metavar="N",
        help=f"simulator evaluations for --method's search methods (default: {DEFAULT_BUDGET})",
    )
    add_seed_option(place)
    add_pipeline_options(place)
    place.add_argument("-o", "--output", metavar="FILE", help="write the placement (JSON)")
    place.add_argument("--json", action="store_true", help="print one JSON object")
    place.set_defaults(command=_place)

    evaluate = commands.add_parser(
        "eval",
        help="evaluate a trained policy on graphs (a table)",
        description="Place every graph with the policy in a checkpoint directory (a named "
        "pipeline, by default the policy's own episodes), next to the best fast heuristic.",
        epilog=PIPELINES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="run directory")
    evaluate.add_argument("--graphs", required=True, metavar="NAME[,NAME...]", help="graphs")
    add_cluster_option(evaluate, None, CHECKPOINT_CLUSTER)
    evaluate.add_argument("--json", action="store_true", help="print a JSON list")
    evaluate.add_argument("--no-heuristics", action="store_true", help=NO_HEURISTICS)
    evaluate.add_argument(
        "--control",
        action="store_true",
        help="also place the graphs by the same pipeline with the run's untrained policy (its "
        "initial weights: what training added) and, for the construct agent, with uniformly "
        "random episodes (what the policy adds over chance)",
    )
    add_seed_option(evaluate)
    add_pipeline_options(evaluate)
    evaluate.set_defaults(command=_eval)


PIPELINES_EPILOG = (
    "pipelines (--pipeline NAME):\n"
    + "\n".join(
        f"  {name:<14} {summary}"
        for name, summary in (
            ("policy", "the policy's own episodes (greedy; pipeline.samples sampled ones)"),
            ("heuristics", "the best fast heuristic on the op graph (no policy)"),
            ("sampled", "the greedy episode and 16 sampled ones at temperature 0.6"),
            ("search", "episodes from the best heuristic, then policy-guided and random search"),
        )
    )
    + "\n  fields: "
    + ", ".join(f.name for f in dataclasses.fields(Pipeline))
)


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    """`--pipeline NAME` and `--set pipeline.FIELD=V` (repeatable)."""
    parser.add_argument(
        "--pipeline",
        choices=sorted(PIPELINES),
        default=None,
        help="the stages: a named pipeline (default: policy with --checkpoint, heuristics without)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="pipeline.FIELD=V",
        help="change one field of the pipeline, e.g. pipeline.samples=16 (repeatable)",
    )


def add_start_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    """`--start`: where episodes start (improve mode for anything but random)."""
    shown = "the run's own" if default is None else default
    parser.add_argument(
        "--start",
        default=default,
        metavar="START",
        help=f"episodes start from: {', '.join(STARTS)} (best: the fastest of METIS, HEFT, "
        "m-ETF, m-SCT, each run on the grouped graph; best-op: the same on the op graph, the "
        "graph regrouped within it), or a placement FILE; anything but random is improve "
        f"mode: the result is never slower than the start (default: {shown})",
    )


INTERRUPTED = 130  # exit status of a train stopped by Ctrl-C (128 + SIGINT)
NO_HEURISTICS = (
    "do not run the fast heuristics (placers.FAST_HEURISTICS) that the table compares with "
    "(they take seconds per graph)"
)


# ---------------------------------------------------------------------- train
def _train(args: argparse.Namespace) -> int:
    if (args.num_processes is not None or args.process_id is not None) and not args.coordinator:
        raise ValueError("--num-processes and --process-id go with --coordinator HOST:PORT")
    cluster = cluster_of_args(args.cluster, args.devices, "train")  # before any work
    check_unique(args.set)
    config = make_config(args.preset, args.set, n_devices=cluster.n_devices,
                         cluster_preset=cluster.preset_name(), seed=args.seed)  # fmt: skip
    config = starting_config(config, args.start)
    workdir = args.workdir or _default_workdir(args.graphs, cluster.n_devices, args.seed)
    graphs = load_graphs(args.graphs, config, cluster)  # every graph read and checked first
    graphs = starting_graphs(graphs, config, args.start, jax.random.key(args.seed), cluster)
    if config.agent == "construct":
        return _train_construct(args, config, graphs, workdir, cluster)
    if args.coordinator:
        _join(args)
    mesh = episode_mesh() if jax.device_count() > 1 else None
    try:
        result = train_and_evaluate(config, graphs, workdir, progress=not args.no_progress,
                                    mesh=mesh, cluster=cluster)  # fmt: skip
    except TrainingInterrupted as stop:
        print(f"placeto-jax: {stop}", file=sys.stderr)
        return INTERRUPTED
    policy = Policy(config, result.state.params, target=cluster)
    pipeline = Pipeline(start=args.start) if args.start not in (None, "random") else Pipeline()
    named = [(pg.name, pg.op_graph or pg.graph) for pg in graphs]
    key = jax.random.key(args.seed)
    own = place_many(named, cluster, pipeline, policy, key, compare=not args.no_heuristics,
                     progress=not args.no_progress)  # fmt: skip
    found = dataclasses.replace(policy, found=found_on_ops(result.state, graphs))
    visited = place_many(named, cluster, pipeline, found, key, compare=False)
    print(train_text(config, own, visited, workdir))
    return 0


def _train_construct(args: argparse.Namespace, config, graphs, workdir: str, cluster) -> int:
    """`train` for the construct agent: op graphs, one process; then its own placements (the
    `sampled` pipeline; with the lookahead, whose episode simulates thousands of placements,
    `place`'s default: the greedy episode) against the heuristics."""
    if args.coordinator or args.start not in (None, "random"):
        raise ValueError("the construct agent trains in one process, from no start")
    named = [(pg.name, pg.op_graph or pg.graph) for pg in graphs]
    taught = config_teachers(config, named, cluster)
    state = construct_loop.train_in(config, named, cluster, workdir, taught, not args.no_progress)
    policy = Policy(config, state.params, target=cluster)
    own = place_many(named, cluster, own_pipeline(config), policy,
                     jax.random.key(args.seed), compare=not args.no_heuristics,
                     progress=not args.no_progress)  # fmt: skip
    print(train_text(config, own, own, workdir))
    return 0


def _join(args: argparse.Namespace) -> None:
    """Join the multi-process run at `--coordinator`; OSError naming the address when it cannot
    be reached within `--coordinator-timeout` seconds. Processes other than 0 first probe the
    address over TCP themselves: jaxlib ends the process (SIGABRT) when its own deadline
    passes, so the probe is what turns an unreachable coordinator into one line."""
    if args.coordinator_timeout < 1:
        raise ValueError(f"--coordinator-timeout must be >= 1 s, got {args.coordinator_timeout}")
    if args.process_id:
        _probe(args.coordinator, args.coordinator_timeout)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            args.coordinator,
            args.num_processes,
            args.process_id,
            initialization_timeout=args.coordinator_timeout,
        )
    except Exception as err:  # jaxlib raises its own runtime errors
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise OSError(
            f"cannot join the coordinator at {args.coordinator} within "
            f"{args.coordinator_timeout} s ({type(err).__name__}: {first})"
        ) from None


def _probe(address: str, timeout_s: int) -> None:
    """Connect to HOST:PORT over TCP, retrying until `timeout_s` passes; OSError naming it."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        raise ValueError(f"--coordinator must be HOST:PORT, got {address!r}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise OSError(
                    f"cannot join the coordinator at {address} within {timeout_s} s "
                    f"({err.strerror or err})"
                ) from None
            time.sleep(0.2)


def _default_workdir(graphs: str, devices: int, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", graphs).strip("_")[:60]
    return str(Path("runs") / f"{slug}-d{devices}-s{seed}")


# ---------------------------------------------------------------------- place / eval
def _pipeline(args: argparse.Namespace, policy: bool) -> Pipeline:
    """The pipeline `args` name (default: "policy" with a policy, else "heuristics")."""
    return make_pipeline(args.pipeline or ("policy" if policy else "heuristics"), args.set)


def _place(args: argparse.Namespace) -> int:
    if args.method:
        return _place_method(args)
    pipeline = _pipeline(args, args.checkpoint is not None)
    if args.budget is not None:
        raise ValueError("--budget is for --method's search methods, not pipelines")
    if pipeline.start:
        check_start(pipeline.start)  # before the checkpoint is read
    if args.checkpoint:
        policy = Policy.load(args.checkpoint, args.devices, args.cluster)
        cluster = policy.cluster()
    else:
        who = f"the {args.pipeline or 'heuristics'} pipeline"
        policy, cluster = None, cluster_of_args(args.cluster, args.devices, who)
    check(pipeline, policy, cluster)  # before the graph is read
    graph = resolve_graph(args.graph)
    placed = place(graph, cluster, pipeline, policy, jax.random.key(args.seed), name=args.graph,
                   progress=not args.json)  # fmt: skip
    result = placed.result
    _write_placement(args.output, graph, result.placement, cluster)
    if args.json:
        print(json.dumps(policy_json(placed, pipeline, cluster)))
        return 0
    by = f"the policy in {args.checkpoint}" if policy else "the fast heuristics"
    print(f"graph    {result.graph}: placed as {result.n_nodes} nodes{_tied(result)} by {by}")
    print(devices_line(cluster))
    print(stages_line(placed) + "\n")
    print(policy_table(placed))
    _after_placing(result.fits_memory, args.output)
    return 0


def _tied(result) -> str:
    """ ", N decisions" when co-location ties some nodes together, else nothing."""
    return "" if result.n_units == result.n_nodes else f" ({result.n_units} decisions)"


def _place_method(args: argparse.Namespace) -> int:
    cluster = cluster_of_args(args.cluster, args.devices, "--method")
    if args.pipeline:
        raise ValueError("--method places with one method: not with --pipeline")
    method = METHODS.get(args.method)
    if method is not None and args.budget is not None and not method.budgeted:
        searches = ", ".join(m.name for m in METHODS.values() if m.budgeted)
        raise ValueError(f"{args.method} takes no --budget (the searches do: {searches})")
    squeezing = _method_squeeze(args.set)
    graph = resolve_graph(args.graph)
    result = run_method(args.method, graph, cluster, jax.random.key(args.seed), args.budget)
    stages = [Stage(args.method, result.evaluations, result.wall_s, result.makespan)]
    if squeezing and not result.fits_memory:
        placed, result = result, squeezed_method(graph, cluster, result)
        stages.append(Stage("squeeze", result.evaluations - placed.evaluations,
                            result.wall_s - placed.wall_s, result.makespan))  # fmt: skip
    _write_placement(args.output, graph, result.placement, cluster)
    if args.json:
        doc = method_json(args.graph, result, cluster)
        doc["pipeline"] = {"method": args.method, "budget": args.budget, "squeeze": squeezing}
        doc["stages"] = [s.to_json() for s in stages]
        print(json.dumps(doc))
        return 0
    print(f"graph    {args.graph}: {graph.n_ops} ops; method {result.method}")
    print(devices_line(cluster) + "\n")
    print(method_table(result))
    if result.note:
        print(f"\nwarning: {result.method}: {result.note}", file=sys.stderr)
    _after_placing(result.fits_memory, args.output)
    return 0


def _method_squeeze(settings: list[str]) -> bool:
    """Whether `--set` asks for the memory squeeze after `--method` (the one pipeline field a
    method takes); ValueError for any other field."""
    pipeline = make_pipeline("policy", settings)
    if dataclasses.replace(pipeline, squeeze=False) != PIPELINES["policy"]:
        raise ValueError("--method takes pipeline.squeeze only; the other fields need a pipeline")
    return pipeline.squeeze


def _write_placement(
    path: str | None, graph: Graph, placement: np.ndarray, cluster: Cluster
) -> None:
    """Write the op placement to `path` (when given), ops by name."""
    if path:
        save_placement(path, graph, placement, cluster.n_devices)


def _after_placing(fits: bool, output: str | None) -> None:
    if not fits:
        print("\nwarning: the placement exceeds some device's memory", file=sys.stderr)
    if output:
        print(f"\nplacement written to {output}")


def _eval(args: argparse.Namespace) -> int:
    pipeline = _pipeline(args, True)
    policy = Policy.load(args.checkpoint, None, args.cluster)
    cluster = policy.cluster()
    check(pipeline, policy, cluster)
    loaded = load_graphs(args.graphs, _ungrouped(policy.config), cluster)
    graphs = [(pg.name, pg.op_graph or pg.graph) for pg in loaded]
    key = jax.random.key(args.seed)
    placed = place_many(graphs, cluster, pipeline, policy, key, compare=not args.no_heuristics,
                        progress=not args.json)  # fmt: skip
    controls = {}
    if args.control:
        kinds = {"untrained": untrained}
        if policy.config.agent == "construct":
            kinds["uniform"] = uniform_random
        for name, control in kinds.items():
            controls[name] = place_many(graphs, cluster, pipeline, control(policy), key,
                                        compare=False)  # fmt: skip
    if args.json:
        docs = [policy_json(p, pipeline, cluster) for p in placed]
        for i, doc in enumerate(docs):
            for name, other in controls.items():
                doc[f"{name}_makespan_us"] = other[i].result.makespan
        print(json.dumps(docs))
    else:
        print(eval_table(placed, controls))
    return 0


def _ungrouped(config: Config) -> Config:
    """`config` reading graphs without coarsening (the pipeline coarsens them itself)."""
    return apply(config, {"run.group_target": 0})
