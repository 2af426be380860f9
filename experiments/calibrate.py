"""Calibration on this CPU: the simulated single-device step against the measured one.

For each model (zoo models at a reduced size, a small ViT trained with AdamW and a two-tower
recommender with large embedding tables, both written for this check), the training step is
traced with `from_jax` at both levels and priced by a roofline of this CPU, whose three numbers
are measured first by micro-benchmarks that know nothing of the models:
- peak FLOP/µs: a 1,024 x 1,024 float32 matmul;
- memory bandwidth: bytes/µs of an elementwise add (read two, write one) moving 12 times the
  last-level cache, and the cache's bandwidth: the same add moving a quarter of the cache; a
  kernel whose bytes fit the cache moves them at the cache's bandwidth;
- convolution peaks: a dense and a depthwise 3 x 3 convolution (128 channels, 8 x 32 x 32);
- per-kernel overhead: a chain of unfusable tiny matmuls in one program, 400 against 200 links
  (the difference over 200), which is the cluster's `delta1` (and the jaxpr level's launch).
The same HLO graph is also costed by measurement (as `cost_model="measure"` does: every
kernel's mean duration over the typical profiled runs of the compiled step, `graphs.profiled`),
the cost model that suits a machine one can run on; its loop ops add the micro-benchmarked
per-kernel overhead per inner kernel. The simulated step (one device, `pj.simulate`, that
overhead as `delta1`) is compared with the median wall time of one step of a training loop on
the same arrays (parameters, optimizer and model state donated and fed back, as a training loop
runs it and as the HLO graphs are traced). A step's wall time also holds the host's call of the
program (dispatching each of its arrays, about 1.4 µs apiece), which no placement changes and
the simulated program does not hold: it is measured on its own (a jitted identity on the same
arguments, donated and fed back, `host_call_us`) and reported with the ratio it gives added to
the simulated step. The wall times and the profile come from one loop,
timed and profiled in `--rounds` alternations of `--round-steps` steps (the median of the rounds'
medians): timing a second loop of the same program after a profile, or profiling after it,
made either up to 1.6x slower (zoo:nmt: 13 ms against 8), so separate loops disagree. Each
model is measured in a fresh process, its loop first: in 5 full runs in one process, after
other models, zoo:nmt's profiled kernels came to 1.33 to 1.55 times its step, against 0.93 to
1.12 in 6 of 7 runs alone (1.42 in the seventh). The
op-cost errors compare the roofline, for the costliest dot and convolution equations of each
model, with the op timed alone (`graphs.measure`, minus the dispatch time of an empty jitted
call), and, for the kernels costliest in the profile, with their profiled times.

`make calibrate` runs it on one core (`taskset -c 0`, and
`XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`): a device that runs one kernel at a time, as the
simulator's devices do. On all cores XLA's CPU runtime also runs independent kernels at once,
which no single-device simulation models.

Run: `python experiments/calibrate.py [--repeats 10] [--rounds 10] [--round-steps 5]
[--only MODELS] [--out FILE]` (default results/calibration/calibration.json). Prints a table
and writes JSON atomically.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import placeto_jax as pj
from placeto_jax.files import write_result
from placeto_jax.graphs import hlo, profiled, zoo
from placeto_jax.graphs.costs import DeviceSpec, op_cost_us
from placeto_jax.graphs.measure import measure_eqn_us, median_time_us
from placeto_jax.graphs.trace import from_jax

REDUCED = {
    "resnet50": {"batch": 8, "image": 64, "blocks": (1, 1, 1, 1), "width": 16, "classes": 100},
    "transformer": {"batch": 8, "seq": 64, "layers": 2, "d": 128, "heads": 4, "ff": 512,
                    "vocab": 2000},
    "bert_base": {"batch": 8, "seq": 64, "layers": 2, "d": 128, "heads": 4, "ff": 512,
                  "vocab": 2000},
    "inception_v3": {"batch": 4, "image": 96, "width_div": 8, "classes": 100},
    "nmt": {"batch": 16, "steps": 8, "layers": 2, "hidden": 128, "vocab": 2000},
    "gnmt": {"batch": 16, "steps": 6, "layers": 4, "hidden": 64, "vocab": 1000},
    "nasnet": {"batch": 4, "image": 64, "filters": 16, "cells_per_stack": 1, "classes": 100},
}  # fmt: skip


# ---------------------------------------------------------------------- two models of our own
class ViT(nn.Module):
    """A small Vision Transformer: 8 x 8 patches, a class token, pre-LayerNorm blocks."""

    layers: int = 4
    d: int = 128
    heads: int = 4
    classes: int = 10

    @nn.compact
    def __call__(self, images):
        b = images.shape[0]
        x = nn.Conv(self.d, (8, 8), strides=(8, 8), name="patches")(images).reshape(b, -1, self.d)
        cls = self.param("cls", nn.initializers.zeros, (1, 1, self.d))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, self.d)), x], axis=1)
        x = x + self.param("pos", nn.initializers.normal(0.02), (1, x.shape[1], self.d))
        for i in range(self.layers):
            h = nn.LayerNorm(name=f"block{i}_ln1")(x)
            x = x + nn.MultiHeadDotProductAttention(self.heads, name=f"block{i}_attn")(h, h)
            h = nn.LayerNorm(name=f"block{i}_ln2")(x)
            h = nn.Dense(4 * self.d, name=f"block{i}_mlp1")(h)
            x = x + nn.Dense(self.d, name=f"block{i}_mlp2")(nn.gelu(h))
        return nn.Dense(self.classes, name="head")(nn.LayerNorm(name="ln")(x[:, 0]))


class TwoTower(nn.Module):
    """A two-tower recommender: user and item embedding tables, an MLP per tower, in-batch
    softmax over the dot products."""

    users: int = 200_000
    items: int = 100_000
    d: int = 64

    @nn.compact
    def __call__(self, ids):
        user = nn.Embed(self.users, self.d, name="user_table")(ids[:, 0])
        item = nn.Embed(self.items, self.d, name="item_table")(ids[:, 1])
        user = nn.Dense(self.d, name="user_mlp2")(nn.relu(nn.Dense(256, name="user_mlp1")(user)))
        item = nn.Dense(self.d, name="item_mlp2")(nn.relu(nn.Dense(256, name="item_mlp1")(item)))
        return user @ item.T  # [B, B]: row i's positive is column i


def vit_step() -> zoo.TrainStep:
    images = jax.ShapeDtypeStruct((16, 64, 64, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((16,), jnp.int32)
    return zoo.train_step(ViT(), images, labels, optax.adamw(1e-3, weight_decay=0.05))


def two_tower_step() -> zoo.TrainStep:
    ids = jax.ShapeDtypeStruct((256, 2), jnp.int32)
    labels = jax.ShapeDtypeStruct((256,), jnp.int32)
    return zoo.train_step(TwoTower(), ids, labels, optax.adam(1e-3))


def models() -> dict[str, Callable[[], zoo.TrainStep]]:
    """Every model of the table, by name (built lazily)."""
    built = {
        f"zoo:{name}": (lambda n=name: zoo.ZOO_MODELS[n].build(zoo._sizes(n, REDUCED[n])))
        for name in REDUCED
    }
    return {**built, "vit (AdamW)": vit_step, "two-tower (embeddings)": two_tower_step}


# ---------------------------------------------------------------------- this CPU's roofline
def median_us(fn: Callable, *args, repeats: int) -> float:
    """Median wall time in µs of `fn(*args)` after one warm-up call."""
    return median_time_us(fn, args, repeats=repeats, warmup=1)


CARRIED = (0, 1, 2)  # a training step's params, optimizer state and model state: donated


MEASURED = (f"measured on {jax.default_backend()}", 1.0)  # what from_jax records for measured costs


def loop_and_kernels_us(
    step: zoo.TrainStep, args: tuple, rounds: int, repeats: int, overhead_us: float
) -> tuple[list[float], list[float]]:
    """The median wall time (µs) of one step of a training loop in each round, and every
    kernel's µs from the profiled steps (`graphs.profiled`, as `cost_model="measure"`), both
    from one loop: the compiled step with the carried arguments donated and fed back, timed and
    profiled in alternation (`rounds` x `repeats` steps each), after `WARMUP_RUNS` steps."""
    compiled, text, _ = hlo.compile_program(step.fn, args, CARRIED)
    module = hlo.parse_module(text)
    donated = [i in CARRIED for i, arg in enumerate(args) for _ in jax.tree.leaves(arg)]
    run = profiled.training_loop(compiled, args, module, donated)
    for _ in range(profiled.WARMUP_RUNS):
        run()
    walls, events = [], []
    for _ in range(rounds):
        walls.append(median_time_us(run, (), repeats=repeats, warmup=0))
        events += profiled.profiled_runs(run, repeats, module)
    costs, _ = profiled.entry_times_us(module, events, overhead_us)
    return walls, costs


def host_call_us(args: tuple, repeats: int) -> float:
    """Median µs of the host's call of a jitted program on `args` that runs no kernel: an
    identity with every leaf donated and fed back (each array's dispatch, what a training step
    also pays before and after its kernels, whatever its placement)."""
    leaves = [jnp.copy(x) for x in jax.tree.leaves(args)]
    identity = jax.jit(lambda *xs: xs, donate_argnums=tuple(range(len(leaves))))

    def call() -> None:
        leaves[:] = jax.block_until_ready(identity(*leaves))

    return median_time_us(call, (), repeats=repeats, warmup=1)


def last_level_cache_bytes() -> float:
    """The largest CPU cache's size from sysfs (32 MiB if it cannot be read)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
        sizes.append(float(text.rstrip("KM")) * scale)
    return max(sizes, default=32 * (1 << 20))


def add_bandwidth(n: int, repeats: int) -> float:
    """bytes/µs of an elementwise add of two float32 vectors of `n` elements."""
    x = jnp.ones((n,), jnp.float32)
    return 3 * 4 * n / median_us(jax.jit(jnp.add), x, x, repeats=repeats)


def host_roofline(repeats: int) -> tuple[DeviceSpec, float]:
    """This CPU's roofline (launch = the per-kernel overhead) and that overhead in µs."""
    a = jnp.ones((1024, 1024), jnp.float32)
    peak = 2 * 1024**3 / median_us(jax.jit(jnp.matmul), a, a, repeats=repeats)
    cache = last_level_cache_bytes()
    bandwidth = add_bandwidth(int(4 * cache) // 4, repeats)  # 12 x the cache moved: memory
    in_cache = add_bandwidth(int(cache / 3) // 4 // 4, repeats)  # a quarter of it: the cache
    small = jnp.eye(4, dtype=jnp.float32) * 0.5

    def chain(links: int) -> Callable:
        def run(m):
            for _ in range(links):
                m = jnp.tanh(m @ small)  # a dot between two elementwise ops: no fusion across
            return m

        return jax.jit(run)

    long, short = (median_us(chain(k), small, repeats=repeats) for k in (400, 200))
    overhead = max((long - short) / 200 / 2, 0.0)  # two kernels per link (dot, tanh)
    spec = DeviceSpec(
        peak,
        bandwidth,
        overhead,
        cache_bytes=cache,
        cache_bandwidth=in_cache,
        conv_peak_flops=conv_peak(1, repeats),
        grouped_conv_peak_flops=conv_peak(128, repeats),
    )
    return spec, overhead


def conv_peak(groups: int, repeats: int) -> float:
    """FLOP/µs of a 3 x 3 convolution, 128 -> 128 channels on 8 x 32 x 32 (NHWC), in `groups`
    feature groups (128: depthwise)."""
    x = jnp.ones((8, 32, 32, 128), jnp.float32)
    w = jnp.ones((3, 3, 128 // groups, 128), jnp.float32)

    def conv(x, w):
        return jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups,
        )  # fmt: skip

    n_flops = 2 * 8 * 32 * 32 * 128 * 9 * (128 // groups)
    return n_flops / median_us(jax.jit(conv), x, w, repeats=repeats)


def concrete(tree, key: jax.Array):
    """Random arrays for a tree of ShapeDtypeStructs (integers in [0, 10))."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    made = [
        jax.random.randint(k, s.shape, 0, 10, s.dtype)
        if jnp.issubdtype(s.dtype, jnp.integer)
        else 0.1 * jax.random.normal(k, s.shape, s.dtype)
        for k, s in zip(keys, leaves, strict=True)
    ]
    return jax.tree.unflatten(treedef, made)


def simulated_us(graph: pj.Graph, delta1: float) -> float:
    """The graph's makespan on one device of this CPU."""
    cluster = pj.Cluster(
        n_devices=1, speed=1.0, memory=1e15, bandwidth=1e4, delta1=delta1, delta2=0.0
    )
    return float(pj.simulate(graph, cluster, np.zeros(graph.n_ops, np.int32)).makespan)


def _equations(jaxpr):
    """Every equation of a jaxpr and of the jaxprs in its equations' parameters."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def op_cost_errors(
    step: zoo.TrainStep, spec: DeviceSpec, dispatch_us: float, top: int
) -> list[float]:
    """Relative errors (roofline / measured - 1) of the `top` costliest dots and convolutions."""
    closed = jax.make_jaxpr(step.fn)(*step.args)
    eqns = [
        e
        for e in _equations(closed.jaxpr)
        if e.primitive.name in ("dot_general", "conv_general_dilated")
    ]

    def roofline(eqn) -> float:
        ins = [v.aval for v in eqn.invars]
        outs = [v.aval for v in eqn.outvars]
        return op_cost_us(eqn.primitive.name, eqn.params, ins, outs, spec) - spec.launch_us

    chosen = sorted(eqns, key=roofline, reverse=True)[:top]
    errors = []
    for eqn in chosen:
        measured = max(measure_eqn_us(eqn, cache={}) - dispatch_us, 1e-3)
        errors.append(roofline(eqn) / measured - 1.0)
    return errors


def roofline_errors(roofline: pj.Graph, profiled: pj.Graph, top: int) -> list[float]:
    """Relative errors (roofline / profiled - 1) of the `top` kernels costliest in the profile
    (the same HLO ops in both graphs)."""
    measured = np.asarray(profiled.cost)
    chosen = np.argsort(-measured)[:top]
    return [float(roofline.cost[v] / max(measured[v], 1e-3) - 1.0) for v in chosen]


def in_fresh_process(fn: Callable, *args):
    """`fn(*args)` in a new Python process (spawned: same environment and CPU affinity)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()


def calibrate_model(
    name: str,
    spec: DeviceSpec,
    overhead: float,
    dispatch: float,
    rounds: int,
    round_steps: int,
    top: int,
) -> dict:
    """One model's row of the table: its step timed and profiled first, then traced and priced."""
    step = models()[name]()
    args_concrete = concrete(step.args, jax.random.key(0))
    walls, costs = loop_and_kernels_us(step, args_concrete, rounds, round_steps, overhead)
    measured = float(np.median(walls))
    call = host_call_us(args_concrete, repeats=rounds * round_steps)
    traced = {"param_argnums": zoo.PARAM_ARGNUMS, "donate_argnums": CARRIED, "device": spec}
    hlo_graph = from_jax(step.fn, *step.args, **traced)
    if len(costs) != hlo_graph.n_ops:  # one program for both, so never
        raise RuntimeError(f"{name}: the profiled program is not the traced one")
    measured_graph = dataclasses.replace(hlo_graph, cost=np.asarray(costs), costs_for=MEASURED)
    jaxpr_graph = from_jax(
        step.fn, *step.args, param_argnums=zoo.PARAM_ARGNUMS, device=spec, level="jaxpr"
    )
    sim_hlo = simulated_us(hlo_graph, overhead)
    sim_jaxpr = simulated_us(jaxpr_graph, overhead)
    sim_profiled = simulated_us(measured_graph, overhead)
    errors = op_cost_errors(step, spec, dispatch, top)
    kernel_errors = roofline_errors(hlo_graph, measured_graph, top)
    return {
        "model": name,
        "hlo_ops": hlo_graph.n_ops,
        "jaxpr_ops": jaxpr_graph.n_ops,
        "measured_us": measured,
        "measured_us_per_round": walls,
        "simulated_profiled_us": sim_profiled,
        "ratio_profiled": sim_profiled / measured,
        "host_call_us": call,
        "ratio_profiled_with_call": (sim_profiled + call) / measured,
        "profiled_kernels_us": float(np.sum(measured_graph.cost)),
        "roofline_kernel_errors": kernel_errors,
        "roofline_kernel_median_abs_error": float(np.median(np.abs(kernel_errors))),
        "simulated_hlo_us": sim_hlo,
        "ratio_hlo": sim_hlo / measured,
        "simulated_jaxpr_us": sim_jaxpr,
        "ratio_jaxpr": sim_jaxpr / measured,
        "op_cost_errors": errors,
        "op_cost_median_abs_error": float(np.median(np.abs(errors))) if errors else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="runs per measurement")
    parser.add_argument(
        "--rounds", type=int, default=10, help="alternations of step timing and kernel profiling"
    )
    parser.add_argument(
        "--round-steps", type=int, default=5, help="steps timed, then profiled, in each round"
    )
    parser.add_argument("--top", type=int, default=8, help="ops per model for the op-cost error")
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--out", default="results/calibration/calibration.json")
    args = parser.parse_args(argv)
    spec, overhead = host_roofline(args.repeats)
    dispatch = median_us(jax.jit(lambda x: x), jnp.ones(()), repeats=args.repeats)
    print(
        f"this CPU ({jax.devices()[0].device_kind}): peak {spec.peak_flops / 1e6:.3f} TFLOP/s "
        f"(convolutions {spec.conv_peak_flops / 1e6:.3f}, depthwise "
        f"{spec.grouped_conv_peak_flops / 1e6:.4f}), "
        f"bandwidth {spec.bandwidth / 1e3:.2f} GB/s (memory), {spec.cache_bandwidth / 1e3:.2f} "
        f"GB/s (kernels under {spec.cache_bytes / 2**20:.0f} MiB), "
        f"per-kernel overhead {overhead:.2f} µs, "
        f"dispatch of an empty jitted call {dispatch:.1f} µs"
    )
    rows = []
    wanted = set(args.only.split(",")) if args.only else None
    columns = [
        "HLO ops", "jaxpr ops", "measured ms", "sim profiled ms", "ratio", "call ms", "+call",
        "sim HLO ms", "ratio",
        "sim jaxpr ms", "ratio", "op err", "kernel err",
    ]  # fmt: skip
    print(f"{'model':<26} " + " ".join(f"{c:>{max(len(c), 6)}}" for c in columns))
    for name in models():
        if wanted and name not in wanted:
            continue
        row = in_fresh_process(
            calibrate_model, name, spec, overhead, dispatch, args.rounds, args.round_steps, args.top
        )
        rows.append(row)
        err = row["op_cost_median_abs_error"]
        print(
            f"{name:<26} {row['hlo_ops']:>7} {row['jaxpr_ops']:>9} "
            f"{row['measured_us'] / 1e3:>11.2f} {row['simulated_profiled_us'] / 1e3:>15.2f} "
            f"{row['ratio_profiled']:>6.2f} {row['host_call_us'] / 1e3:>7.2f} "
            f"{row['ratio_profiled_with_call']:>6.2f} {row['simulated_hlo_us'] / 1e3:>10.2f} "
            f"{row['ratio_hlo']:>6.2f} {row['simulated_jaxpr_us'] / 1e3:>12.2f} "
            f"{row['ratio_jaxpr']:>6.2f} {'' if err is None else f'{err:.0%}':>6} "
            f"{row['roofline_kernel_median_abs_error']:>10.0%}"
        )
        sys.stdout.flush()
    for key, what in (
        ("ratio_profiled", "profiled HLO costs"),
        ("ratio_profiled_with_call", "profiled HLO costs and the host's call"),
        ("ratio_hlo", "HLO roofline"),
    ):
        within = sum(abs(r[key] - 1) <= 0.25 for r in rows)
        print(f"within 25% with the {what}: {within} of {len(rows)}")
    out = {
        "host": {
            "device_kind": jax.devices()[0].device_kind,
            "peak_flops_per_us": spec.peak_flops,
            "bandwidth_bytes_per_us": spec.bandwidth,
            "cache_bytes": spec.cache_bytes,
            "cache_bandwidth_bytes_per_us": spec.cache_bandwidth,
            "conv_peak_flops_per_us": spec.conv_peak_flops,
            "grouped_conv_peak_flops_per_us": spec.grouped_conv_peak_flops,
            "kernel_overhead_us": overhead,
            "dispatch_us": dispatch,
        },
        "repeats": args.repeats,
        "rounds": args.rounds,
        "round_steps": args.round_steps,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "rows": rows,
    }
    path = Path(args.out)
    write_result(path, out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
