"""The learning commands of `placeto-jax`: `train` a Placeto policy, `place` a graph with a
trained policy (zero-shot) or a baseline method, `eval` a policy over graphs.

The policy runs in float32; the placements it returns are then simulated exactly (float64) on the
op graph for every number printed. `place` and `eval` place on the checkpoint's cluster preset,
or on `--cluster NAME` with the checkpoint's device count (the policy places for that count).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from placeto_jax.cli.format import (
    devices_line,
    eval_table,
    method_json,
    method_table,
    policy_json,
    policy_table,
    search_line,
    train_text,
)
from placeto_jax.cli.options import DEFAULT_CLUSTER, add_cluster_option, add_seed_option
from placeto_jax.cluster import Cluster
from placeto_jax.config import PRESETS, Config, apply, make_config
from placeto_jax.env.bank import PlacementGraph, build_bank
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.placements import save_placement
from placeto_jax.graphs.registry import resolve_graph
from placeto_jax.placers import METHODS, PlacerResult, best_heuristic, run_method, scored
from placeto_jax.placers.base import Solution
from placeto_jax.placers.squeeze import squeeze
from placeto_jax.reproduce.starts import STARTS, check_start, started
from placeto_jax.rl.checkpoint import Checkpointer, load_run
from placeto_jax.rl.evaluate import (
    Placement,
    best_of_groupings,
    found_placements,
    improved,
    kept_groupings,
    place_graphs,
    polish_placements,
)
from placeto_jax.rl.loop import TrainingInterrupted, cluster_of, load_graphs, train_and_evaluate
from placeto_jax.rl.sharding import episode_mesh
from placeto_jax.rl.train import make_train

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
    train.add_argument("--devices", type=int, required=True, metavar="D", help="device count")
    train.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="config preset: tiny (CPU-sized) or paper",
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
    add_cluster_option(
        place, None, f"{CHECKPOINT_CLUSTER} with --checkpoint, {DEFAULT_CLUSTER} with --method"
    )
    place.add_argument(
        "--budget", type=int, metavar="N", help="simulator evaluations for the search methods"
    )
    add_seed_option(place)
    add_improve_options(place)
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
    add_cluster_option(evaluate, None, CHECKPOINT_CLUSTER)
    evaluate.add_argument("--json", action="store_true", help="print a JSON list")
    evaluate.add_argument("--no-heuristics", action="store_true", help=NO_HEURISTICS)
    add_seed_option(evaluate)
    add_improve_options(evaluate)
    evaluate.set_defaults(command=_eval)


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


def add_improve_options(parser: argparse.ArgumentParser) -> None:
    """`--start`, `--samples`, `--temperature`, `--passes`, `--group-target`, `--polish` and
    `--no-progress` of `place` and `eval`."""
    add_start_option(parser, None)
    parser.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="K",
        help="sampled episodes per graph besides the greedy one; the best placement any of "
        "them visits is kept, by exact simulation (default: %(default)s)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        metavar="T",
        help="sampling temperature of the --samples episodes: logits divided by T (> 1 wider, "
        "1 the policy's own distribution; the greedy episode is unchanged) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--passes", type=int, metavar="P", help="passes per episode (default: the run's own)"
    )
    parser.add_argument(
        "--group-target",
        metavar="N[,N...]",
        help="coarsen each graph to at most N nodes for the policy's episodes (0: none; "
        "default: the run's own); several: play each and keep the best by exact simulation. "
        "The policy does not depend on the graph's size: one trained on 48 groups of ptb "
        "graphs placed the test graphs 1.18x METIS's makespan at 256 groups, 1.52x at 48, "
        "1.08x with the best of 48,128,256,512",
    )
    parser.add_argument(
        "--polish",
        type=int,
        default=0,
        metavar="P",
        help="then P passes of policy-guided search on the op graph: each op in turn moved to "
        "the policy's most likely other device, kept only if the simulated step time drops "
        "(one simulation per op and pass) (default: %(default)s, none)",
    )
    parser.add_argument(
        "--polish-groups",
        type=int,
        default=0,
        metavar="P",
        help="before --polish: P passes of the same search over the groups the policy placed, "
        "each move taking a whole group, still judged on the op graph (one simulation per group "
        "and pass) (default: %(default)s, none)",
    )
    parser.add_argument(
        "--polish-block",
        type=int,
        default=1,
        metavar="M",
        help="with --polish: propose M moves at a time from the current placement, simulate "
        "them in one batch and keep the best of the helpful ones alone and together; faster "
        "on graphs of thousands of ops (2.5x on a 4,384-op graph), slower below, and it gains "
        "less per pass (default: %(default)s, one move at a time)",
    )
    parser.add_argument(
        "--polish-ranked",
        action="store_true",
        help="with --polish: on pass p propose each op's p-th most likely other device instead "
        "of its most likely every time, so that D - 1 passes try every device for every op in "
        "the policy's order",
    )
    parser.add_argument(
        "--squeeze",
        action="store_true",
        help="last, where a placement (the policy's, or --method's) overflows a device's "
        "memory: chains of up to 3 moves "
        "aimed at the tensors live at the fullest device's peak, kept when the overflow (then "
        "the step time) drops (at most 4,096 simulations per graph; docs/agent.md, "
        "'The memory squeeze')",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


INTERRUPTED = 130  # exit status of a train stopped by Ctrl-C (128 + SIGINT)
NO_HEURISTICS = (
    "do not run the fast heuristics (METIS, HEFT, m-ETF, m-SCT) that the table compares with "
    "(they take seconds per graph)"
)


# ---------------------------------------------------------------------- train
def _train(args: argparse.Namespace) -> int:
    if args.devices < 1:
        raise ValueError(f"--devices must be at least 1, got {args.devices}")
    Cluster.preset(args.cluster, args.devices)  # a bad preset fails before any work
    config = make_config(
        args.preset, args.set, n_devices=args.devices, cluster_preset=args.cluster, seed=args.seed
    )
    config = starting_config(config, args.start)
    workdir = args.workdir or _default_workdir(args.graphs, args.devices, args.seed)
    graphs = load_graphs(args.graphs, config)  # every graph read and checked before any write
    graphs = starting_graphs(graphs, config, args.start, args.seed)
    if args.coordinator:
        _join(args)
    mesh = episode_mesh() if jax.device_count() > 1 else None
    try:
        result = train_and_evaluate(
            config, graphs, workdir, progress=not args.no_progress, mesh=mesh
        )
    except TrainingInterrupted as stop:
        print(f"placeto-jax: {stop}", file=sys.stderr)
        return INTERRUPTED
    cluster = cluster_of(config)
    found = found_placements(result.state)
    placements = place_graphs(config, result.state.params, graphs, cluster, found=found)
    heuristics = None
    if not args.no_heuristics:
        heuristics = heuristics_of(graphs, cluster, args.seed, progress=not args.no_progress)
    print(train_text(config, placements, heuristics, workdir))
    return 0


def heuristics_of(
    graphs: list[PlacementGraph], cluster: Cluster, seed: int, progress: bool = False
) -> list[PlacerResult]:
    """The best fast heuristic (`placers.best_heuristic`) on the op graph of each graph."""
    key = jax.random.key(seed)
    return [
        best_heuristic(pg.op_graph or pg.graph, cluster, key)
        for pg in tqdm(graphs, desc="heuristics", unit="graph", disable=not progress)
    ]


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


def starting_config(config: Config, start: str | None) -> Config:
    """`config` with episodes from random placements (`start` "random"), from given starts
    (any other start), or as it is (None)."""
    if start is None:
        return config
    check_start(start)
    kind = "random" if start == "random" else "given"
    return apply(config, {"env.initial_placement": kind})


def starting_graphs(
    graphs: list[PlacementGraph], config: Config, start: str | None, seed: int
) -> list[PlacementGraph]:
    """`graphs` with the start `start` names (`reproduce.improve.started`) when `config`
    starts episodes from given starts; ValueError when it does and no start is named."""
    if config.env.initial_placement != "given":
        return graphs
    if start is None:
        raise ValueError(
            "this policy was trained from given starts (env.initial_placement=given); "
            f"name one with --start ({', '.join(STARTS[1:])} or a placement file)"
        )
    return started(graphs, cluster_of(config), start, jax.random.key(seed))


# ---------------------------------------------------------------------- place / eval
def run_config(checkpoint: str, devices: int | None, cluster: str | None) -> Config:
    """The config of the run in `checkpoint`, placing on cluster preset `cluster` (None: the
    run's own) with the run's device count; ValueError if `devices` is given and differs from
    it, or `cluster` is unknown."""
    config, _ = load_run(checkpoint)
    if devices is not None and devices != config.n_devices:
        raise ValueError(
            f"the policy in {checkpoint} places on {config.n_devices} devices, not {devices}; "
            f"train one for {devices} devices"
        )
    if cluster is None:
        return config
    Cluster.preset(cluster, config.n_devices)  # an unknown name fails here
    return dataclasses.replace(config, cluster_preset=cluster)


def load_policy(checkpoint: str, config: Config, graphs: list[PlacementGraph]) -> Any:
    """The policy parameters in `checkpoint`, trained with `config`."""
    run = make_train(config, build_bank(graphs[:1], config.run.buckets), cluster_of(config))
    template = jax.eval_shape(run.init, jax.random.key(0), run.env_params).params
    checkpointer = Checkpointer(checkpoint, create=False)
    try:
        return checkpointer.restore_params(template)
    finally:
        checkpointer.close()


def _placements(
    args: argparse.Namespace, spec: str, devices: int | None
) -> tuple[Cluster, list[PlacementGraph], list[Placement]]:
    """(the cluster placed on, the graphs of `spec` as the agent sees them, the policy's
    placement of each), with `args`' checkpoint, cluster, start, samples, temperature,
    passes and polish."""
    if args.samples < 0:
        raise ValueError(f"--samples must be >= 0, got {args.samples}")
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        raise ValueError(f"--temperature must be finite and > 0, got {args.temperature}")
    if args.passes is not None and args.passes < 1:
        raise ValueError(f"--passes must be >= 1, got {args.passes}")
    targets = group_targets(args.group_target)
    if args.polish < 0:
        raise ValueError(f"--polish must be >= 0, got {args.polish}")
    if args.polish_block < 1:
        raise ValueError(f"--polish-block must be >= 1, got {args.polish_block}")
    if args.polish_block > 1 and not args.polish:
        raise ValueError("--polish-block sets how --polish proposes moves: give --polish P too")
    if args.polish_ranked and not args.polish:
        raise ValueError("--polish-ranked sets how --polish proposes moves: give --polish P too")
    if args.polish_groups < 0:
        raise ValueError(f"--polish-groups must be >= 0, got {args.polish_groups}")
    config = starting_config(run_config(args.checkpoint, devices, args.cluster), args.start)
    if args.passes is not None:
        config = apply(config, {"env.passes": args.passes})
    groupings = []  # (config, graphs) per group target: every graph coarsened before any work
    for target in targets:
        at = config if target is None else apply(config, {"run.group_target": target})
        groupings.append((at, starting_graphs(load_graphs(spec, at), at, args.start, args.seed)))
    params = load_policy(args.checkpoint, *groupings[0])
    on, key = cluster_of(config), jax.random.key(args.seed)
    per_grouping = [
        place_graphs(at, params, g, on, args.samples, key, args.temperature) for at, g in groupings
    ]
    placed = best_of_groupings(per_grouping)
    graphs = groupings[-1][1]  # any grouping's: each holds the same op graphs
    if args.polish_groups:
        kept = [groupings[k][1][i] for i, k in enumerate(kept_groupings(per_grouping))]
        placed = polish_placements(
            config, params, kept, placed, on, args.polish_groups,
            progress=not args.no_progress, on_groups=True,
        )  # fmt: skip
    if args.polish:
        placed = polish_placements(
            config, params, graphs, placed, on, args.polish,
            proposer="ranked" if args.polish_ranked else "policy", block=args.polish_block,
            progress=not args.no_progress,
        )  # fmt: skip
    if args.squeeze:
        placed = squeeze_placements(graphs, placed, on)
    return on, graphs, placed


def squeeze_placements(
    graphs: list[PlacementGraph], placed: list[Placement], cluster: Cluster
) -> list[Placement]:
    """`placed` (one per graph of `graphs`), each that overflows a device's memory improved by
    the memory squeeze (`placers.squeeze`: chains of moves aimed at the tensors live at the
    fullest device's peak) on its op graph; one that fits is returned as it is. Its
    `evaluations` add the squeeze's, which `squeeze_steps` counts."""
    out = []
    for pg, p in zip(graphs, placed, strict=True):
        if p.fits_memory:
            out.append(p)
            continue
        op_graph = pg.op_graph or pg.graph
        found = squeeze(op_graph, cluster, p.placement)
        best = scored("squeeze", op_graph, cluster, found, 0.0)  # its simulations counted there
        out.append(improved(p, best, found.evaluations, squeeze_steps=found.evaluations))
    return out


def squeezed_method(graph: Graph, cluster: Cluster, result: PlacerResult) -> PlacerResult:
    """A method's placement that overflows, improved by the memory squeeze: named
    "METHOD+squeeze", its evaluations and wall time added to the method's."""
    began = time.perf_counter()
    found = squeeze(graph, cluster, result.placement)
    solution = Solution(found.placement, result.evaluations + found.evaluations)
    wall_s = result.wall_s + time.perf_counter() - began
    return scored(f"{result.method}+squeeze", graph, cluster, solution, wall_s)


def group_targets(text: str | None) -> tuple[int | None, ...]:
    """`--group-target`'s node counts, in order ((None,): the run's own); ValueError naming
    a count that is not an integer >= 0."""
    if text is None:
        return (None,)
    targets = []
    for item in text.split(","):
        try:
            target = int(item)
        except ValueError:
            raise ValueError(
                f"--group-target takes node counts separated by commas, got {text!r}"
            ) from None
        if target < 0:
            raise ValueError(f"--group-target must be >= 0, got {target}")
        targets.append(target)
    return tuple(targets)


def _place(args: argparse.Namespace) -> int:
    if args.method:
        return _place_method(args)
    cluster, (graph,), (result,) = _placements(args, args.graph, args.devices)
    _write_placement(args.output, graph.op_graph or graph.graph, result.placement, cluster)
    (best,) = heuristics_of([graph], cluster, args.seed)
    if args.json:
        print(json.dumps(policy_json(result, best, cluster)))
        return 0
    print(
        f"graph    {result.graph}: placed as {result.n_nodes} nodes{_tied(result)} by the "
        f"policy in {args.checkpoint}"
    )
    print(devices_line(cluster))
    print(search_line(result) + "\n")
    print(policy_table(result, best))
    _after_placing(result.fits_memory, args.output)
    return 0


def _tied(result) -> str:
    """ ", N decisions" when co-location ties some nodes together, else nothing."""
    return "" if result.n_units == result.n_nodes else f" ({result.n_units} decisions)"


def _place_method(args: argparse.Namespace) -> int:
    if args.devices is None:
        raise ValueError("--method needs --devices")
    policy_options = (
        args.start, args.samples, args.passes, args.temperature != 1, args.polish,
        args.polish_block != 1, args.group_target, args.polish_groups, args.polish_ranked,
    )  # fmt: skip
    if any(x not in (None, 0, False) for x in policy_options):
        raise ValueError(
            "--start, --samples, --temperature, --passes, --group-target, --polish and "
            "--polish-groups place with a policy (--checkpoint)"
        )
    graph = resolve_graph(args.graph)
    cluster = Cluster.preset(args.cluster or DEFAULT_CLUSTER, args.devices)
    result = run_method(args.method, graph, cluster, jax.random.key(args.seed), args.budget)
    if args.squeeze and not result.fits_memory:
        result = squeezed_method(graph, cluster, result)
    _write_placement(args.output, graph, result.placement, cluster)
    if args.json:
        print(json.dumps(method_json(args.graph, result, cluster)))
        return 0
    print(f"graph    {args.graph}: {graph.n_ops} ops; method {result.method}")
    print(devices_line(cluster) + "\n")
    print(method_table(result))
    if result.note:
        print(f"\nwarning: {result.method}: {result.note}", file=sys.stderr)
    _after_placing(result.fits_memory, args.output)
    return 0


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
    cluster, graphs, results = _placements(args, args.graphs, None)
    heuristics = None
    if not args.no_heuristics:
        heuristics = heuristics_of(graphs, cluster, 0, progress=not args.no_progress)
    if args.json and heuristics is None:
        print(json.dumps([policy_json(r, None, cluster) for r in results]))
    elif args.json:
        print(
            json.dumps(
                [policy_json(r, b, cluster) for r, b in zip(results, heuristics, strict=True)]
            )
        )
    else:
        print(eval_table(results, heuristics))
    return 0
