"""`placeto-jax execute`: run one placement of a zoo model's training step on the local devices
(`placeto_jax.execute`) and print the measured step time next to the simulated one."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jax

from placeto_jax.cli.options import add_seed_option
from placeto_jax.cluster import Cluster
from placeto_jax.execute import (
    ATOL,
    RTOL,
    ExecutionResult,
    execute,
    local_cluster,
    local_devices,
    op_graph,
    zoo_step,
)
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.placements import load_placement
from placeto_jax.graphs.trace import COST_MODELS
from placeto_jax.graphs.zoo import PARAM_ARGNUMS, ZOO_MODELS
from placeto_jax.placers import METHODS, run_method

KB = 1e3  # bytes


def add_execute_command(commands) -> None:
    """Add `execute` to the `placeto-jax` subcommands."""
    parser = commands.add_parser(
        "execute",
        help="run a placement of a training step for real on the local devices",
        description="Split STEP (a zoo model's training step, or your own) by a placement "
        "into per-device jitted pieces "
        "with explicit transfers, run it on the first D local devices, check its outputs "
        "against the unsplit step, and print the measured step time next to the time "
        "simulated on the measured local cluster. For D host CPU devices start with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=D.",
        epilog="zoo models: " + ", ".join(f"zoo:{m}" for m in ZOO_MODELS) + ". Outputs match "
        f"when |split - unsplit| <= {ATOL:g} + {RTOL:g} |unsplit| per element: each piece is "
        "compiled on its own, so float rounding differs from the whole step's.",
    )
    parser.add_argument(
        "model",
        metavar="STEP",
        help="zoo:NAME (a zoo model's training step), or FILE.py:FUNCTION / MODULE:FUNCTION, a "
        "function of no arguments returning (step_fn, args) or (step_fn, args, param_argnums)",
    )
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a size of the model, e.g. layers=1 or blocks=1,1,1,1 (repeatable)",
    )
    parser.add_argument("--devices", type=int, required=True, metavar="D", help="device count")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--placement", metavar="FILE", help="placement file naming the step's ops (jaxpr level)"
    )
    source.add_argument(
        "--method",
        choices=list(METHODS),
        default="single",
        metavar="NAME",
        help="baseline method run on the op graph when no --placement is given "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--cost-model",
        choices=COST_MODELS,
        default="measure",
        help="op costs of the simulated graph (default: %(default)s, timed on this backend)",
    )
    parser.add_argument(
        "--repeats", type=int, default=10, help="timed steps (default: %(default)s)"
    )
    add_seed_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(command=_execute)


def parse_sizes(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` items as sizes; a VALUE is a Python literal (`3`, `1,1,1,1`) or a string."""
    sizes = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key:
            raise ValueError(f"bad --size {item!r}: expected KEY=VALUE, e.g. layers=1")
        try:
            sizes[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            sizes[key] = text
    return sizes


def load_step(spec: str, sizes: dict[str, Any], key: jax.Array) -> tuple[Callable, tuple, Any]:
    """(step function, its arguments, parameter argnums) that `spec` names: `zoo:NAME` (sized by
    `sizes`), or `FILE.py:FUNCTION` / `MODULE:FUNCTION`, a factory of no arguments returning
    (fn, args) or (fn, args, param_argnums). ValueError naming what is wrong."""
    kind, _, name = spec.partition(":")
    if kind == "zoo":
        if name not in ZOO_MODELS:
            raise ValueError(
                f"unknown zoo model {spec!r}; choose one of "
                + ", ".join(f"zoo:{m}" for m in ZOO_MODELS)
            )
        return (*zoo_step(name, sizes, key), PARAM_ARGNUMS)
    where, colon, attr = spec.rpartition(":")
    if not colon or not where or not attr:
        raise ValueError(
            f"STEP must be zoo:NAME, FILE.py:FUNCTION or MODULE:FUNCTION, got {spec!r}"
        )
    if sizes:
        raise ValueError("--size sets a zoo model's sizes; your own step sets its own")
    factory = getattr(_module(where), attr, None)
    if not callable(factory):
        raise ValueError(f"{where} has no function {attr!r}")
    made = factory()
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not callable(made[0]):
        raise ValueError(
            f"{spec} must return (step_fn, args) or (step_fn, args, param_argnums), "
            f"got {type(made).__name__}"
        )
    fn, step_args, *argnums = made
    step_args = step_args if isinstance(step_args, tuple) else (step_args,)
    return fn, step_args, argnums[0] if argnums else None


def _module(where: str) -> ModuleType:
    """The module at `where`: a .py file, or an importable module name."""
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"no such file: {where}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(where)
    except ImportError as err:
        raise ValueError(f"cannot import {where!r}: {err}") from None


def _execute(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.size)
    devices = local_devices(args.devices)
    key, place_key = jax.random.split(jax.random.key(args.seed))
    fn, step_args, argnums = load_step(args.model, sizes, key)
    graph = op_graph(
        fn, *step_args, cost_model=args.cost_model, param_argnums=argnums, name=args.model
    )
    cluster = local_cluster(devices)
    if args.placement:
        placement = load_placement(args.placement, graph, cluster.n_devices)
        source = f"file {args.placement}"
    else:
        placement = run_method(args.method, graph, cluster, place_key).placement
        source = f"method {args.method}"
    result = execute(
        fn,
        *step_args,
        placement=placement,
        graph=graph,
        devices=devices,
        repeats=args.repeats,
        cluster=cluster,
    )
    if args.json:
        print(json.dumps(execution_json(args.model, sizes, graph, cluster, source, result)))
    else:
        print(execution_text(args.model, graph, cluster, source, result))
    return 0


def execution_json(
    model: str,
    sizes: dict[str, Any],
    graph: Graph,
    cluster: Cluster,
    source: str,
    result: ExecutionResult,
) -> dict:
    fields = dataclasses.asdict(result)
    del fields["outputs"]
    return {
        "model": model,
        "sizes": sizes,
        "n_ops": graph.n_ops,
        "cluster": dataclasses.asdict(cluster),
        "placement_source": source,
        **fields,
        "rtol": RTOL,
        "atol": ATOL,
    }


def execution_text(
    model: str, graph: Graph, cluster: Cluster, source: str, result: ExecutionResult
) -> str:
    verdict = "equal to" if result.equal else "DIFFERENT from"
    return "\n".join(
        [
            f"model      {model} ({graph.n_ops} ops) on {cluster.n_devices} x {cluster.name}",
            f"placement  {source}",
            f"pieces     {result.n_pieces}, transfers {result.n_transfers} "
            f"({result.transfer_bytes / KB:.1f} KB per step)",
            f"measured   {result.step_us:.1f} µs per step (median of {len(result.times_us)}; "
            f"unsplit {result.unsplit_us:.1f} µs)",
            f"simulated  {result.simulated_us:.1f} µs on the measured local cluster "
            f"(bandwidth {cluster.bandwidth[0] / KB:.1f} GB/s, delta1 {cluster.delta1:.1f} µs, "
            f"delta2 {cluster.delta2:.1f} µs)",
            f"outputs    {verdict} the unsplit step (max |diff| {result.max_abs_diff:.2g}; "
            f"closest to failing: {result.worst_output or 'the output'} at "
            f"{result.worst_excess:.2g} of the tolerance |diff| <= {ATOL:g} + {RTOL:g} "
            "|unsplit|, which allows for each piece's own float rounding)",
        ]
    )
