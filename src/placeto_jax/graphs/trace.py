"""Trace a JAX function into a placement `Graph`, costed by the roofline model or by timing.

`from_jax` has two levels. `level="hlo"` (the default) compiles the jitted function for the
current backend and makes one op per kernel of the optimized program, after XLA's fusion
(`placeto_jax.graphs.hlo`): what a device actually launches. `level="jaxpr"` reads
`jax.make_jaxpr(fn)(*example_args)` (nothing is compiled or executed; example arguments may
be `jax.ShapeDtypeStruct`s, at either level) and makes one op per primitive equation:
- Calls are inlined recursively: `jit` (`pjit` in older JAX), `closed_call`, `call`,
  `custom_jvp_call`, `custom_vjp_call` (`custom_vjp_call_jaxpr` in older JAX) and remat
  (`jax.checkpoint`, primitive `remat2`). Their equations become ops of the graph, wired to the
  outer producers.
- `scan` is one op whose cost is the body's total cost times the trip count (`length`), or, with
  `unroll_loops=True`, one copy of the body's ops per iteration: iteration i reads the carry from
  iteration i - 1, every iteration reads the stacked `xs` from their producer (no slicing op),
  and a consumer of the stacked `ys` depends on every iteration. Reverse scans unroll the same
  way (the graph does not depend on the direction).
- `while` is always one op costing its condition plus its body once: the trip count is not known
  from the jaxpr, so it counts as 1.
- `cond` is always one op costing its most expensive branch; the branch index is an input.
- Other primitives with bodies (`shard_map`, `custom_linear_solve`, ...) are one op priced by
  the cost model's fallback (bytes only, with a warning).
Costs are µs on `device` (`placeto_jax.graphs.costs`). A loop op's cost includes every launch
overhead of its body. With `cost_model="measure"`, each op is instead timed on the current JAX
backend. At the HLO level the compiled program runs a few times under the JAX profiler and each
kernel costs the mean of its recorded durations over the typical runs
(`placeto_jax.graphs.profiled`; a loop or branch its inner kernels' durations plus `device`'s
launch time for each). At the jaxpr level
each op runs alone (`placeto_jax.graphs.measure`): loop and branch ops are run as a whole,
unrolled scan bodies op by op; an op that cannot run on its own falls back to the roofline with
a warning.
Names come from each equation's name stack (Flax module paths, `jax.jit` function names,
`jax.named_scope`s; AD renders as `jvp(...)`/`transpose(...)`) joined with `/` and ending with
the primitive name; a repeated name gets `_1`, `_2`, ... appended (at both levels). A jaxpr-level
op's roofline cost includes the device's launch time, as the jaxpr level predates the one
per-kernel overhead of the HLO level (the cluster's `delta1`); the zoo and the families are
traced at the jaxpr level, so that their graphs and the tables built on them stay as they were.

Edges are data dependencies between equations (kernels at the HLO level). The function's inputs
are not ops; literals and constants are not edges, so equations reading nothing else (iota,
broadcast constants) are roots. The leaves of the arguments named by `param_argnums`
(parameters, optimizer state) are resident parameters. A leaf's bytes are counted once, in
`param_bytes` of the op that holds it: the first op (in op order) that reads it (a leaf no op
reads is dropped), so `param_bytes` sums to the parameters that the step touches.

Weights stay with their updates at both levels (`colocate_params=True`, the default): the leaves
of a weight are its leaf in the first `param_argnums` argument (the parameters) and every leaf
of the other parameter arguments whose key path ends with that leaf's path and has its shape
(optimizer state such as Adam's `mu` and `nu` mirror the parameters' tree). Every op that reads
one of a weight's leaves, and the op that produces an output leaf matched the same way (the
updated parameter or optimizer state, in the function's returned tree), form one co-location
class (classes sharing an op are one class). A weight's forward and backward readers then sit on
the weight's device, and the update with them (docs/graphs.md).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex_core

from placeto_jax.graphs import hlo
from placeto_jax.graphs.core import MEASURED, Graph, joined_classes
from placeto_jax.graphs.costs import DeviceSpec, device_spec, nbytes, op_cost_us
from placeto_jax.graphs.measure import (
    cache_path,
    example_value,
    load_cache,
    measure_eqn_us,
    save_cache,
)
from placeto_jax.graphs.profiled import kernel_times_us

COST_MODELS = ("roofline", "measure")

# Call primitives whose body is inlined, and the parameter holding the body.
CALLS: dict[str, str] = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat2": "jaxpr",
}


@dataclasses.dataclass(frozen=True)
class _Deps:
    """What a value depends on: the ops that produced it and the parameter leaves it is."""

    nodes: frozenset[int] = frozenset()  # op indices
    params: frozenset[int] = frozenset()  # positions among the jaxpr's inputs

    def __or__(self, other: _Deps) -> _Deps:
        return _Deps(self.nodes | other.nodes, self.params | other.params)


_NONE = _Deps()


LEVELS = ("hlo", "jaxpr")


def from_jax(
    fn: Callable,
    *example_args: Any,
    level: str = "hlo",
    cost_model: str = "roofline",
    device: str | DeviceSpec = "placeto-k80",
    unroll_loops: bool = False,
    param_argnums: int | Sequence[int] = (),
    donate_argnums: int | Sequence[int] = (),
    colocate_params: bool = True,
    name: str | None = None,
    cache: str | os.PathLike | None = None,
    measure_repeats: int = 10,
) -> Graph:
    """The placement graph of `fn` applied to `example_args`.

    `level="hlo"` (the default) makes one op per kernel of the program XLA compiles for the
    current backend (`placeto_jax.graphs.hlo`: fusions, custom calls, copies, collectives),
    priced by the roofline without a launch term (the cluster's `delta1` is the one per-kernel
    overhead); `donate_argnums` are donated as in `jax.jit`, so outputs written into donated
    buffers are not counted twice; `cost_model="measure"` instead times every kernel where it
    runs, the median of `measure_repeats` runs of the compiled program under the JAX profiler
    (`placeto_jax.graphs.profiled`; inputs given as shapes get concrete values). `level="jaxpr"`
    makes one op per jaxpr equation (see the module docstring), priced with the device's launch
    time per op, or timed alone (`cost_model="measure"`) on the current backend, reading and
    updating the op time cache at `cache` (default: `placeto_jax.graphs.measure.cache_path`).

    `device` is a cluster preset name (or a `DeviceSpec`) whose roofline prices the ops. Costs
    are stored as the Graph's unit, µs on a device of speed 1.0: the device's times x its
    preset's speed, recorded in `costs_for`. Simulated on that preset they take the device's
    times; on another preset they rescale once, by the ratio of the speeds. `name` prefixes
    every op name. `colocate_params=False` leaves out the weight classes (module docstring).
    Raises ValueError for an unknown level, cost model or device, options the level does not
    have, a bad `param_argnums`, a function that JAX cannot trace or compile (the message names
    the function and JAX's error), or a function without any operation."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; choose one of {LEVELS}")
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost model {cost_model!r}; choose one of {COST_MODELS}")
    if level == "hlo" and unroll_loops:
        raise ValueError("unroll_loops=True is a jaxpr-level option: pass level='jaxpr' with it")
    if measure_repeats < 1:
        raise ValueError(f"measure_repeats must be at least 1, got {measure_repeats}")
    spec = device_spec(device)
    is_param = _leaves_of_args(example_args, param_argnums)
    if level == "hlo":
        donated = _argnums(donate_argnums, len(example_args), "donate_argnums")
        measure = measure_repeats if cost_model == "measure" else 0
        ops, out_shape = _compiled_ops(fn, example_args, donated, spec, is_param, measure)
        flat_sizes = [nbytes(leaf) for leaf in jax.tree.leaves(example_args)]
    else:
        ops, flat_sizes, out_shape = _jaxpr_ops(
            fn, example_args, is_param, spec, cost_model, unroll_loops, cache
        )
    if not ops.cost:
        raise ValueError("the traced function has no operations to place")
    n = len(ops.cost)
    if cost_model == "roofline":  # µs on the device -> µs at speed 1.0, the Graph's unit
        cost = [c * spec.speed for c in ops.cost]
        costs_for = (device if isinstance(device, str) else "custom", spec.speed)
    else:
        cost, costs_for = ops.cost, (f"{MEASURED}{jax.default_backend()}", 1.0)
    colocation = None
    if colocate_params and any(is_param):
        weights = _weights(example_args, param_argnums, out_shape)
        colocation = _weight_classes(n, weights, ops.param_users, ops.outputs)
    return Graph.from_edges(
        cost,
        ops.out_bytes,
        ops.edges,
        param_bytes=_held_params(n, ops.param_users, flat_sizes),
        names=unique_names([_scope(name or "", base) for base in ops.names]),
        op_types=ops.op_types,
        colocation=colocation,
        costs_for=costs_for,
    )


def _compiled_ops(
    fn: Callable,
    example_args: tuple,
    donate_argnums: Sequence[int],
    spec: DeviceSpec,
    is_param: Sequence[bool],
    measure_repeats: int,
) -> tuple[hlo.HloOps, Any]:
    """The kernels of the compiled program (`placeto_jax.graphs.hlo`; readers kept for the
    parameter leaves only) and the output shapes; with `measure_repeats` > 0 the costs are the
    kernels' profiled times (`placeto_jax.graphs.profiled`), else the roofline's."""
    compiled, text, out_shape = _guarded(
        fn, lambda: hlo.compile_program(fn, example_args, donate_argnums)
    )
    module = hlo.parse_module(text)
    found = hlo.module_ops(module, spec)
    readers = {leaf: ops for leaf, ops in found.param_users.items() if is_param[leaf]}
    found = dataclasses.replace(found, param_users=readers)
    if measure_repeats:
        times = kernel_times_us(
            compiled,
            _concrete(example_args),
            module,
            repeats=measure_repeats,
            inner_overhead_us=spec.launch_us,
            donated=_leaves_of_args(example_args, donate_argnums, "donate_argnums"),
        )
        found = dataclasses.replace(found, cost=times)
    return found, out_shape


def _concrete(example_args: tuple) -> tuple:
    """The arguments with every `jax.ShapeDtypeStruct` leaf given a concrete value
    (`graphs.measure.example_value`); arrays are kept."""
    leaves, treedef = jax.tree.flatten(example_args)
    keys = jax.random.split(jax.random.key(0), max(len(leaves), 1))
    made = [
        example_value(leaf, key) if isinstance(leaf, jax.ShapeDtypeStruct) else leaf
        for leaf, key in zip(leaves, keys, strict=False)
    ]
    return jax.tree.unflatten(treedef, made)


def _jaxpr_ops(
    fn: Callable,
    example_args: tuple,
    is_param: Sequence[bool],
    spec: DeviceSpec,
    cost_model: str,
    unroll_loops: bool,
    cache: str | os.PathLike | None,
) -> tuple[hlo.HloOps, list[float], Any]:
    """One op per jaxpr equation, the bytes of every flat input, and the output shapes."""
    closed, out_shape = _guarded(fn, lambda: jax.make_jaxpr(fn, return_shape=True)(*example_args))
    inputs = [_Deps(params=frozenset({i})) if p else _NONE for i, p in enumerate(is_param)]
    if cost_model == "roofline":
        builder = _Builder(functools.partial(eqn_cost, spec=spec), unroll_loops)
        outputs = builder.walk(closed.jaxpr, inputs, "")
    else:
        path = cache_path(cache)
        times = load_cache(path)
        builder = _Builder(functools.partial(_measured_cost, spec=spec, times=times), unroll_loops)
        outputs = builder.walk(closed.jaxpr, inputs, "")
        save_cache(path, times)
    ops = hlo.HloOps(
        builder.cost,
        builder.out_bytes,
        builder.names,
        builder.op_types,
        builder.edges,
        builder.param_users,
        [o.nodes for o in outputs],
    )
    return ops, [nbytes(v.aval) for v in closed.jaxpr.invars], out_shape


def _guarded(fn: Callable, action: Callable[[], Any]) -> Any:
    """`action()` (tracing or compiling `fn`), its failures as one ValueError."""
    try:
        return action()
    except Exception as err:  # any failure inside the user's function
        label = getattr(fn, "__qualname__", repr(fn))
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"cannot trace {label}: {type(err).__name__}: {first}") from err


def _argnums(argnums: int | Sequence[int], n_args: int, what: str) -> list[int]:
    """Sorted argument numbers, each checked to be in range."""
    nums = sorted({argnums} if isinstance(argnums, int) else set(argnums))
    bad = [i for i in nums if not 0 <= i < n_args]
    if bad:
        raise ValueError(f"{what} {bad} out of range for {n_args} example arguments")
    return nums


def _leaves_of_args(
    args: Sequence[Any], argnums: int | Sequence[int], what: str = "param_argnums"
) -> list[bool]:
    """[flat inputs] whether each leaf of the flattened arguments belongs to an argument of
    `argnums` (checked, `what` naming them)."""
    nums = set(_argnums(argnums, len(args), what))
    return [i in nums for i, arg in enumerate(args) for _ in jax.tree.leaves(arg)]


def _held_params(n: int, users: dict[int, set[int]], sizes: Sequence[float]) -> list[float]:
    """[n] bytes: each parameter leaf's bytes on its holder, the first op that reads it."""
    param_bytes = [0.0] * n
    for leaf, ops in users.items():
        param_bytes[min(ops)] += sizes[leaf]
    return param_bytes


@dataclasses.dataclass(frozen=True)
class _Weights:
    """Which flat input and output leaves belong to which weight (a leaf of the parameters)."""

    inputs: dict[int, int]  # flat input position -> weight (its position among the inputs)
    outputs: dict[int, int]  # flat output position -> weight


def _weights(args: Sequence[Any], argnums: int | Sequence[int], out_shape: Any) -> _Weights:
    """Match parameter-argument and output leaves to the weights of the first parameter
    argument by key-path suffix and shape (see the module docstring)."""
    nums = _argnums(argnums, len(args), "param_argnums")
    offsets = [0]
    for arg in args:
        offsets.append(offsets[-1] + len(jax.tree.leaves(arg)))
    by_path: dict[tuple[Any, tuple[int, ...]], int] = {}
    inputs: dict[int, int] = {}
    reference = jax.tree_util.tree_flatten_with_path(args[nums[0]])[0]
    for position, (path, leaf) in enumerate(reference, start=offsets[nums[0]]):
        inputs[position] = position  # every leaf of the parameters is a weight
        if path:  # a bare array has no path to match others by
            by_path[(tuple(path), tuple(leaf.shape))] = position

    def weight_of(path: tuple, shape: tuple[int, ...]) -> int | None:
        for start in range(len(path)):
            found = by_path.get((path[start:], shape))
            if found is not None:
                return found
        return None

    for i in nums[1:]:
        flat = jax.tree_util.tree_flatten_with_path(args[i])[0]
        for position, (path, leaf) in enumerate(flat, start=offsets[i]):
            weight = weight_of(tuple(path), tuple(leaf.shape))
            if weight is not None:
                inputs[position] = weight
    outputs = {}
    for position, (path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(out_shape)[0]):
        weight = weight_of(tuple(path), tuple(leaf.shape))
        if weight is not None:
            outputs[position] = weight
    return _Weights(inputs, outputs)


def _weight_classes(
    n: int, weights: _Weights, users: dict[int, set[int]], outputs: Sequence[frozenset[int]]
) -> np.ndarray | None:
    """[n] co-location class per op (None when no class has two ops): a weight's readers and
    update producers, classes that share an op joined (`graphs.core.joined_classes`)."""
    members: dict[int, set[int]] = {}
    for leaf, weight in weights.inputs.items():
        members.setdefault(weight, set()).update(users.get(leaf, ()))
    for position, weight in weights.outputs.items():
        members.setdefault(weight, set()).update(outputs[position])
    return joined_classes(n, [sorted(ops) for ops in members.values()])


def _open(jaxpr: Any) -> jex_core.Jaxpr:
    """The open jaxpr of a ClosedJaxpr or a Jaxpr (constants are not edges)."""
    return getattr(jaxpr, "jaxpr", jaxpr)


def _scope(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def jaxpr_cost(jaxpr: Any, spec: DeviceSpec) -> float:
    """Total µs of a (closed) jaxpr's equations."""
    return sum(eqn_cost(eqn, spec) for eqn in _open(jaxpr).eqns)


def eqn_cost(eqn: jex_core.JaxprEqn, spec: DeviceSpec) -> float:
    """µs of one equation: calls sum their body, scans multiply it by the trip count, while
    loops count one trip, conds take their most expensive branch."""
    prim, params = eqn.primitive.name, eqn.params
    if prim in CALLS:
        return jaxpr_cost(params[CALLS[prim]], spec)
    if prim == "scan":
        return params["length"] * jaxpr_cost(params["jaxpr"], spec)
    if prim == "while":
        return jaxpr_cost(params["cond_jaxpr"], spec) + jaxpr_cost(params["body_jaxpr"], spec)
    if prim == "cond":
        return max(jaxpr_cost(branch, spec) for branch in params["branches"])
    ins = [v.aval for v in eqn.invars]
    outs = [v.aval for v in eqn.outvars]
    return op_cost_us(prim, params, ins, outs, spec)


def _measured_cost(eqn: jex_core.JaxprEqn, spec: DeviceSpec, times: dict[str, float]) -> float:
    """Measured µs of `eqn` (cached in `times`), or its roofline cost if it cannot run alone."""
    try:
        return measure_eqn_us(eqn, cache=times)
    except Exception as err:  # any primitive may refuse to run on its own
        warnings.warn(
            f"cannot time primitive {eqn.primitive.name!r} on its own ({err}); "
            "using its roofline cost",
            stacklevel=2,
        )
        return eqn_cost(eqn, spec)


class _Builder:
    """Accumulates ops while walking nested jaxprs (used only inside `from_jax`)."""

    def __init__(self, cost_fn: Callable[[jex_core.JaxprEqn], float], unroll_loops: bool) -> None:
        self.cost_fn = cost_fn  # µs of one equation
        self.unroll_loops = unroll_loops
        self.cost: list[float] = []  # [N] µs
        self.out_bytes: list[float] = []  # [N] bytes
        self.names: list[str] = []  # [N] base names (`unique_names` makes them unique)
        self.op_types: list[str] = []  # [N]
        self.edges: list[tuple[int, int]] = []  # [E] (producer, consumer)
        self.param_users: dict[int, set[int]] = {}  # input position -> ops reading it

    def walk(self, jaxpr: jex_core.Jaxpr, inputs: Sequence[_Deps], prefix: str) -> list[_Deps]:
        """Add the ops of `jaxpr` given its inputs' dependencies; return its outputs'."""
        env: dict[jex_core.Var, _Deps] = {v: _NONE for v in jaxpr.constvars}
        env.update(zip(jaxpr.invars, inputs, strict=True))

        def read(atom: Any) -> _Deps:
            return _NONE if isinstance(atom, jex_core.Literal) else env[atom]

        for eqn in jaxpr.eqns:
            outs = self.equation(eqn, [read(v) for v in eqn.invars], prefix)
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: jex_core.JaxprEqn, inputs: list[_Deps], prefix: str) -> list[_Deps]:
        prim, params = eqn.primitive.name, eqn.params
        scope = _scope(prefix, str(eqn.source_info.name_stack))
        if prim in CALLS:
            inner = _scope(scope, params.get("name", "") if prim in ("jit", "pjit") else "")
            return self.walk(_open(params[CALLS[prim]]), inputs, inner)
        if prim == "scan" and self.unroll_loops:
            return self.unroll_scan(eqn, inputs, scope)
        v = self.add_op(eqn, scope, functools.reduce(operator.or_, inputs, _NONE))
        return [_Deps(nodes=frozenset({v}))] * len(eqn.outvars)

    def unroll_scan(self, eqn: jex_core.JaxprEqn, inputs: list[_Deps], scope: str) -> list[_Deps]:
        """One copy of the body per iteration (see the module docstring)."""
        params = eqn.params
        n_consts, n_carry = params["num_consts"], params["num_carry"]
        consts, carry = inputs[:n_consts], inputs[n_consts : n_consts + n_carry]
        xs = inputs[n_consts + n_carry :]
        ys = [_NONE] * (len(eqn.outvars) - n_carry)
        body = _open(params["jaxpr"])
        for i in range(params["length"]):
            outs = self.walk(body, [*consts, *carry, *xs], _scope(scope, f"iter{i}"))
            carry = outs[:n_carry]
            ys = [acc | y for acc, y in zip(ys, outs[n_carry:], strict=True)]
        return [*carry, *ys]

    def add_op(self, eqn: jex_core.JaxprEqn, scope: str, deps: _Deps) -> int:
        """Add `eqn` as one op reading `deps`; return its index."""
        v = len(self.cost)
        self.cost.append(self.cost_fn(eqn))
        self.out_bytes.append(sum(nbytes(o.aval) for o in eqn.outvars))
        self.names.append(_scope(scope, eqn.primitive.name))
        self.op_types.append(eqn.primitive.name)
        self.edges.extend((u, v) for u in sorted(deps.nodes))
        for leaf in deps.params:
            self.param_users.setdefault(leaf, set()).add(v)
        return v


def unique_names(bases: Sequence[str]) -> list[str]:
    """Each base name, or `base_k` with the next free counter k >= 1 where it repeats."""
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}  # base name -> next counter to try
    names = []
    for base in bases:
        k = next_suffix.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        next_suffix[base] = k + 1
        names.append(name)
    return names
