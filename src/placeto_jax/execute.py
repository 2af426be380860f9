"""Run a placement for real: split a traced function into per-device jitted pieces.

`program(fn, *args)` walks `jax.make_jaxpr(fn)(*args)` in exactly `from_jax`'s op order (calls
in `graphs.trace.CALLS` inlined recursively; `scan`, `while`, `cond` and other primitives with
bodies one op each), recording for every op the values it reads: a flat input leaf, a literal, a
constant of a closed jaxpr, or an output of an earlier op. Graphs traced with
`unroll_loops=True` are refused when they differ (their loop bodies are ops; the program's loops
are not), as are grouped graphs: `check_graph` names the first op whose type differs.

`plan(program, placement)` forms pieces in op order: an op on device d joins d's latest piece
unless it reads a value made by a piece on another device created after that one; then it
opens a new piece on d. A piece therefore reads only from earlier pieces, and pieces run in
creation order (JAX dispatches them asynchronously, so pieces on different devices overlap).
Each piece is jitted once, pinned to its device by `out_shardings`, and evaluates its equations
with `primitive.bind`, as `jax.core.eval_jaxpr` does. An input leaf lives on the device of the
first piece that reads it (it is put there before the step is timed); every other (value,
device) pair that a piece needs is one transfer inside the step, made once per step just
before its first reader: one explicit `jax.device_put` of the list of values that piece fetches.

`execute(fn, *args, placement=...)` runs the pieces, compares the outputs with the unsplit
`jax.jit(fn)(*args)` and times both (median of `repeats` steps after `warmup`);
`local_cluster(devices)` measures the `Cluster` that describes the local devices, on which
`ExecutionResult.simulated_us` is simulated (docs/execute.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.sharding import SingleDeviceSharding

from placeto_jax.cluster import GBPS, Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.costs import nbytes
from placeto_jax.graphs.trace import CALLS, from_jax
from placeto_jax.graphs.zoo import ZOO_MODELS, _sizes
from placeto_jax.sim.api import simulate

RTOL = 1e-4  # outputs equal: |split - unsplit| <= ATOL + RTOL |unsplit| (float leaves); XLA
ATOL = 1e-5  # fuses each piece differently from the whole step, which changes float rounding


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A value known when tracing: a literal or a constant of a closed jaxpr."""

    value: Any


Ref = int | Fixed  # a value id (flat input leaves first, then op outputs) or a known value


@dataclasses.dataclass(frozen=True)
class Op:
    """One equation of the program, wired to the values it reads and makes."""

    eqn: jex_core.JaxprEqn
    inputs: tuple[Ref, ...]
    outputs: tuple[int, ...]  # value ids


@dataclasses.dataclass(frozen=True)
class Program:
    """A traced function as ops in `from_jax` order; value ids 0..n_inputs-1 are its flat
    input leaves."""

    n_inputs: int
    ops: tuple[Op, ...]  # [N]
    outputs: tuple[Ref, ...]  # the flat output leaves
    out_tree: Any  # PyTreeDef of the outputs
    value_bytes: tuple[float, ...]  # [values] bytes of each value id

    @property
    def op_types(self) -> tuple[str, ...]:
        return tuple(op.eqn.primitive.name for op in self.ops)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Consecutive work of one device: ops in op order, run as one jitted call."""

    device: int  # index into the device list
    ops: tuple[int, ...]  # op indices
    inputs: tuple[int, ...]  # value ids read from outside the piece
    outputs: tuple[int, ...]  # value ids made here and read later or returned
    fetch: tuple[int, ...]  # value ids copied to `device` just before this piece runs


@dataclasses.dataclass(frozen=True)
class Plan:
    """Pieces in run order and the device each value is made on (input leaves: first reader)."""

    pieces: tuple[Piece, ...]
    home: dict[int, int]  # value id -> device index

    @property
    def n_transfers(self) -> int:
        return sum(len(p.fetch) for p in self.pieces)


@dataclasses.dataclass(frozen=True)
class ExecutionResult:
    """One placement run on local devices, next to the unsplit function."""

    outputs: Any  # the split run's outputs (the function's output tree)
    step_us: float  # median µs of one split step
    times_us: tuple[float, ...]  # [repeats] µs of each timed split step
    unsplit_us: float  # median µs of `jax.jit(fn)` on one device
    max_abs_diff: float  # largest |split - unsplit| over the output leaves
    equal: bool  # every leaf within RTOL/ATOL (floats) or identical (other dtypes)
    worst_output: str  # the output leaf furthest from tolerance (its path in the output tree)
    worst_excess: float  # that leaf's largest |diff| / (ATOL + RTOL |unsplit|): > 1 fails
    n_pieces: int
    n_transfers: int  # (value, device) copies per step
    transfer_bytes: int  # bytes copied per step
    simulated_us: float | None  # makespan on `cluster` (None without a graph and cluster)


# ---------------------------------------------------------------------- the program
def program(fn: Callable, *args: Any) -> Program:
    """The ops of `fn` on `args` (arrays or `ShapeDtypeStruct`s) in `from_jax`'s op order."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    n_inputs = len(closed.jaxpr.invars)
    ops: list[Op] = []
    ids = itertools.count(n_inputs)

    def walk(jaxpr: jex_core.Jaxpr, consts: Sequence[Any], inputs: Sequence[Ref]) -> list[Ref]:
        env: dict[Any, Ref] = {v: Fixed(c) for v, c in zip(jaxpr.constvars, consts, strict=True)}
        env.update(zip(jaxpr.invars, inputs, strict=True))

        def read(atom: Any) -> Ref:
            return Fixed(atom.val) if isinstance(atom, jex_core.Literal) else env[atom]

        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            if eqn.primitive.name in CALLS:
                body = eqn.params[CALLS[eqn.primitive.name]]
                outs = walk(getattr(body, "jaxpr", body), getattr(body, "consts", ()), ins)
            else:
                outs = [next(ids) for _ in eqn.outvars]
                ops.append(Op(eqn, tuple(ins), tuple(outs)))
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]

    outputs = walk(closed.jaxpr, closed.consts, range(n_inputs))
    sizes = [nbytes(v.aval) for v in closed.jaxpr.invars]
    sizes += [nbytes(var.aval) for op in ops for var in op.eqn.outvars]
    return Program(
        n_inputs, tuple(ops), tuple(outputs), jax.tree.structure(out_shape), tuple(sizes)
    )


def check_graph(prog: Program, graph: Graph) -> None:
    """ValueError naming the first op where `graph` and `prog` differ (count or type)."""
    types = prog.op_types
    theirs = graph.op_types or ("?",) * graph.n_ops
    for i, (mine, other) in enumerate(zip(types, theirs, strict=False)):
        if mine != other:
            raise ValueError(
                f"the graph does not match the function: op {i} ({graph.names[i]!r}) is "
                f"{other!r} in the graph but {mine!r} in the function (trace it with "
                "`placeto_jax.execute.op_graph(fn, *args)`, one op per jaxpr equation; graphs "
                "traced at the default HLO level, with unroll_loops=True or grouped are refused)"
            )
    if len(types) != graph.n_ops:
        raise ValueError(
            f"the graph does not match the function: it has {graph.n_ops} ops, the function "
            f"{len(types)} (trace it with `placeto_jax.execute.op_graph(fn, *args)`, one op per "
            "jaxpr equation; graphs traced at the default HLO level, with unroll_loops=True or "
            "grouped are refused)"
        )


def check_placement(placement: Any, n_ops: int, n_devices: int) -> np.ndarray:
    """[N] int64 device indices, or ValueError for a wrong length, type or device."""
    arr = np.asarray(placement)
    if arr.ndim != 1 or arr.shape[0] != n_ops:
        raise ValueError(f"the placement needs {n_ops} devices (one per op), got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"the placement must be integers (device indices), got {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"device indices must be >= 0, got {int(arr.min())}")
    if arr.size and arr.max() >= n_devices:
        bad = int(arr.max())
        raise ValueError(f"device {bad} does not exist: {_device_count(n_devices, bad + 1)}")
    return arr.astype(np.int64)


def local_devices(n: int) -> list:
    """The first `n` local devices, or ValueError saying how many exist."""
    devices = jax.local_devices()
    if not 1 <= n <= len(devices):
        raise ValueError(f"{n} devices asked for: {_device_count(len(devices), n)}")
    return devices[:n]


def _device_count(available: int, wanted: int) -> str:
    return (
        f"there are {available} local device(s) ({jax.default_backend()}); for {wanted} host CPU "
        f"devices, start with XLA_FLAGS=--xla_force_host_platform_device_count={wanted}"
    )


# ---------------------------------------------------------------------- the plan
def plan(prog: Program, placement: Sequence[int]) -> Plan:
    """The pieces and explicit transfers of `prog` under `placement` (see the module docstring)."""
    made_in: dict[int, int] = {}  # op output value id -> piece index
    latest: dict[int, int] = {}  # device -> its latest piece index
    members: list[list[int]] = []
    devices: list[int] = []
    for i, op in enumerate(prog.ops):
        d = int(placement[i])
        sources = [made_in[v] for v in op.inputs if isinstance(v, int) and v in made_in]
        after = max((p for p in sources if devices[p] != d), default=-1)
        if latest.get(d, -1) <= after:
            latest[d] = len(members)
            members.append([])
            devices.append(d)
        members[latest[d]].append(i)
        made_in.update((v, latest[d]) for v in op.outputs)
    return _pieces(prog, members, devices)


def _pieces(prog: Program, members: list[list[int]], devices: list[int]) -> Plan:
    """Each piece's inputs, outputs and fetches from its ops (`members`) and `devices`."""
    reads = [_reads(prog, ops) for ops in members]
    made = [{v for i in ops for v in prog.ops[i].outputs} for ops in members]
    wanted = {v for v in prog.outputs if isinstance(v, int)}
    for k, values in enumerate(reads):
        wanted.update(v for v in values if v not in made[k])
    home: dict[int, int] = {}
    for k in range(len(members)):
        home.update((v, devices[k]) for v in made[k])
        home.update((v, devices[k]) for v in reads[k] if v < prog.n_inputs and v not in home)
    for v in prog.outputs:  # an input leaf returned unread stays where it was put
        if isinstance(v, int):
            home.setdefault(v, 0)
    pieces, copied = [], set()
    for k, ops in enumerate(members):
        inputs = tuple(v for v in reads[k] if v not in made[k])
        fetch = tuple(v for v in inputs if home[v] != devices[k] and (v, devices[k]) not in copied)
        copied.update((v, devices[k]) for v in fetch)
        outputs = tuple(v for i in ops for v in prog.ops[i].outputs if v in wanted)
        pieces.append(Piece(devices[k], tuple(ops), inputs, outputs, fetch))
    return Plan(tuple(pieces), home)


def _reads(prog: Program, ops: Sequence[int]) -> list[int]:
    """The value ids that `ops` read, in first-read order, without repeats."""
    return list(dict.fromkeys(v for i in ops for v in prog.ops[i].inputs if isinstance(v, int)))


# ---------------------------------------------------------------------- running
def _apply(eqn: jex_core.JaxprEqn, inputs: Sequence[Any]) -> Sequence[Any]:
    """The outputs of `eqn` on `inputs` (`primitive.bind`, as `jax.core.eval_jaxpr`)."""
    out = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(eqn.params))
    return out if eqn.primitive.multiple_results else [out]


def _piece_fn(prog: Program, piece: Piece) -> Callable:
    """The piece as a function of its inputs returning its outputs (a tuple)."""
    ops = [prog.ops[i] for i in piece.ops]

    def run(*xs: Any) -> tuple:
        env = dict(zip(piece.inputs, xs, strict=True))
        for op in ops:
            ins = [r.value if isinstance(r, Fixed) else env[r] for r in op.inputs]
            env.update(zip(op.outputs, _apply(op.eqn, ins), strict=True))
        return tuple(env[v] for v in piece.outputs)

    return run


def compile_plan(prog: Program, pl: Plan, devices: Sequence[Any]) -> list[Callable]:
    """One jitted function per piece, pinned to its device by `out_shardings`."""
    return [
        jax.jit(_piece_fn(prog, p), out_shardings=SingleDeviceSharding(devices[p.device]))
        for p in pl.pieces
    ]


def place_inputs(pl: Plan, leaves: Sequence[Any], devices: Sequence[Any]) -> dict[int, Any]:
    """Input leaf id -> the leaf on its home device (leaves no op reads or returns are left)."""
    return {v: jax.device_put(x, devices[pl.home[v]]) for v, x in enumerate(leaves) if v in pl.home}


def run_step(
    prog: Program, pl: Plan, fns: Sequence[Callable], placed: dict[int, Any], devices: Sequence
) -> list[Any]:
    """The flat outputs of one split step from the placed inputs (not waited for)."""
    env = {(v, pl.home[v]): x for v, x in placed.items()}
    for piece, fn in zip(pl.pieces, fns, strict=True):
        if piece.fetch:
            sent = [env[(v, pl.home[v])] for v in piece.fetch]
            moved = jax.device_put(sent, devices[piece.device])
            env.update(((v, piece.device), x) for v, x in zip(piece.fetch, moved, strict=True))
        outs = fn(*(env[(v, piece.device)] for v in piece.inputs))
        env.update(((v, piece.device), x) for v, x in zip(piece.outputs, outs, strict=True))
    return [r.value if isinstance(r, Fixed) else env[(r, pl.home[r])] for r in prog.outputs]


def _times_us(step: Callable[[], Any], repeats: int, warmup: int) -> tuple[float, ...]:
    """[repeats] µs of `step()` waited for, after `warmup` untimed runs."""
    for _ in range(warmup):
        jax.block_until_ready(step())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step())
        times.append((time.perf_counter() - start) * 1e6)
    return tuple(times)


def max_abs_diff(outputs: Sequence[Any], reference: Sequence[Any]) -> float:
    """The largest |difference| between two flat output lists (inf for another shape or
    dtype); whether they match is `excesses`'s business."""
    worst = 0.0
    for a, b in zip(outputs, reference, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    return worst


def excesses(outputs: Sequence[Any], reference: Sequence[Any]) -> list[float]:
    """[leaves] how far each output leaf is from its reference, in tolerances: the largest
    |a - b| / (ATOL + RTOL |b|) for floats (NaN where both are NaN counts as equal), 0 or inf
    for other dtypes (identical or not), inf for another shape or dtype. At most 1 passes."""
    out = []
    for a, b in zip(outputs, reference, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(float("inf"))
        elif not np.issubdtype(b.dtype, np.inexact):
            out.append(0.0 if np.array_equal(a, b) else float("inf"))
        elif not a.size:
            out.append(0.0)
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            diff = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64))
            out.append(float(np.nanmax(diff / (ATOL + RTOL * np.abs(b64)))))
    return out


def execute(
    fn: Callable,
    *args: Any,
    placement: Sequence[int],
    graph: Graph | None = None,
    devices: Sequence[Any] | None = None,
    repeats: int = 10,
    warmup: int = 2,
    cluster: Cluster | None = None,
) -> ExecutionResult:
    """Run `fn(*args)` split by `placement` ([N] device indices into `devices`, default
    `jax.local_devices()`) and compare it with `jax.jit(fn)(*args)`. `graph`, when given, must
    be `fn`'s op graph (`check_graph`); with `cluster` too, the placement is simulated on it.
    ValueError for a mismatched graph or a bad placement (see `check_placement`)."""
    if repeats < 1 or warmup < 1:
        raise ValueError(f"repeats and warmup must be at least 1, got {repeats} and {warmup}")
    devices = list(devices if devices is not None else jax.local_devices())
    prog = program(fn, *args)
    if graph is not None:
        check_graph(prog, graph)
    devs = check_placement(placement, len(prog.ops), len(devices))
    pl = plan(prog, devs)
    fns = compile_plan(prog, pl, devices)
    placed = place_inputs(pl, jax.tree.leaves(args), devices)
    times = _times_us(lambda: run_step(prog, pl, fns, placed, devices), repeats, warmup)
    flat = run_step(prog, pl, fns, placed, devices)
    unsplit = jax.jit(fn)
    whole = jax.device_put(args, devices[0])
    unsplit_times = _times_us(lambda: unsplit(*whole), repeats, warmup)
    reference = jax.tree.leaves(unsplit(*whole))
    worst, excess = max_abs_diff(flat, reference), excesses(flat, reference)
    at = int(np.argmax(excess)) if excess else 0
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        jax.tree.unflatten(prog.out_tree, flat))[0]]  # fmt: skip
    simulated = None
    if graph is not None and cluster is not None:
        simulated = float(simulate(graph, cluster, devs).makespan)
    return ExecutionResult(
        outputs=jax.tree.unflatten(prog.out_tree, flat),
        step_us=statistics.median(times),
        times_us=times,
        unsplit_us=statistics.median(unsplit_times),
        max_abs_diff=worst,
        equal=all(e <= 1.0 for e in excess),
        worst_output=paths[at] if paths else "",
        worst_excess=excess[at] if excess else 0.0,
        n_pieces=len(pl.pieces),
        n_transfers=pl.n_transfers,
        transfer_bytes=int(sum(prog.value_bytes[v] for p in pl.pieces for v in p.fetch)),
        simulated_us=simulated,
    )


# ---------------------------------------------------------------------- inputs and the cluster
def concrete(args: Any, key: jax.Array, int_high: int = 1) -> Any:
    """Arrays for a tree of `ShapeDtypeStruct`s: floats uniform in [0, 0.1) (non-negative, so
    optimizer second moments stay valid), integers uniform in [0, int_high), others zeros."""
    leaves, tree = jax.tree.flatten(args)
    keys = jax.random.split(key, max(len(leaves), 1))
    out = []
    for leaf, k in zip(leaves, keys, strict=False):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, 0.0, 0.1))
        elif jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, leaf.shape, 0, int_high, leaf.dtype))
        else:
            out.append(jnp.zeros(leaf.shape, leaf.dtype))
    return jax.tree.unflatten(tree, out)


def zoo_step(name: str, sizes: dict[str, Any] | None, key: jax.Array) -> tuple[Callable, tuple]:
    """Zoo model `name`'s training step (sizes overridden by `sizes`) and concrete arguments
    from `key`; integer inputs (tokens, labels) lie below the vocabulary and class counts."""
    full = _sizes(name, sizes)
    step = ZOO_MODELS[name].build(full)
    high = min(full.get("vocab", full.get("classes", 1)), full.get("classes", full.get("vocab", 1)))
    return step.fn, concrete(step.args, key, int_high=high)


def local_cluster(
    devices: Sequence[Any] | None = None, *, repeats: int = 20, transfer_bytes: int = 1 << 22
) -> Cluster:
    """The `Cluster` of the local devices (default `jax.local_devices()`), measured here:
    - speed 1.0 (graphs costed with `cost_model="measure"` hold µs on this backend);
    - memory: the device's `bytes_limit`, else the host's RAM (host CPU devices share it);
    - delta1: median µs of dispatching a jitted `x + 1` on a 1-element array, waited for;
    - delta2: median µs of `jax.device_put` of 4 bytes from device 0 to device 1;
    - bandwidth: `transfer_bytes` / (median µs of putting that many bytes from device 0 to
      device 1 - delta2), in bytes/µs.
    One device has nothing to measure across: bandwidth 1 TB/s and delta2 0 stand in.
    Transfers are per destination (`broadcast=False`), as `execute` copies them."""
    devices = list(devices if devices is not None else jax.local_devices())
    first = devices[0]
    tiny = jax.device_put(jnp.zeros(1, jnp.float32), first)
    bump = jax.jit(lambda x: x + 1)
    delta1 = statistics.median(_times_us(lambda: bump(tiny), repeats, 2))
    bandwidth, delta2 = 1000 * GBPS, 0.0
    if len(devices) > 1:
        big = jax.device_put(jnp.zeros(transfer_bytes // 4, jnp.float32), first)
        delta2 = statistics.median(_times_us(lambda: jax.device_put(tiny, devices[1]), repeats, 2))
        put = statistics.median(_times_us(lambda: jax.device_put(big, devices[1]), repeats, 2))
        bandwidth = transfer_bytes / max(put - delta2, 1e-3)
    stats = first.memory_stats() or {}
    memory = stats.get("bytes_limit") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Cluster(
        n_devices=len(devices),
        speed=1.0,
        memory=float(memory),
        bandwidth=bandwidth,
        delta1=delta1,
        delta2=delta2,
        broadcast=False,
        name=f"local-{first.platform}",
    )


def op_graph(fn: Callable, *args: Any, **options: Any) -> Graph:
    """`from_jax(fn, *args, level="jaxpr", **options)`: one op per equation, the ops that
    `execute` runs."""
    return from_jax(fn, *args, level="jaxpr", **options)
