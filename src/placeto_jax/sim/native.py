"""The simulator's CPU kernel (`native.cc`), called from jitted code through XLA's FFI.

On a CPU the JAX loops commit one op per step through dozens of XLA kernels, whose fixed cost
per step dominates on wide graphs (docs/simulator.md, "Wide graphs"). `native.cc` runs the
reference's event-driven algorithm in C++ instead: one FFI call simulates a whole batch, inside
jit and under vmap, with float64 outputs bit-equal to the reference. `pip install` builds it
when a C++ compiler is present (`setup.py`); without one, `available()` is False and `simulate`
runs the JAX loops, which are also what runs on accelerators.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os

import jax
import numpy as np

LIBRARY = "placeto_jax.sim._native"  # the compiled `native.cc`; not a Python module
_KERNELS = ("Simulate", "Variants")  # `native.cc`'s handlers, each for float32 and float64
_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}
VARIANT_OPS_PER_THREAD = 6144  # `simulate_variants` splits its rows over threads only when each
# gets at least this many padded ops (rows x Np): a lookahead decision's 3 rows on 2 threads were
# 30-35% slower than on 1 at 441-813 ops, even at 3,706 and 12% faster at 5,050 (findings.md)


def _target(kernel: str, dtype) -> str:
    return f"placeto_jax_Placeto{kernel}{_DTYPES[np.dtype(dtype)]}"


@functools.cache
def available() -> bool:
    """Whether the kernel is built; registers it for the CPU platform on the first call."""
    spec = importlib.util.find_spec(LIBRARY)
    if spec is None or spec.origin is None:
        return False
    try:
        library = ctypes.CDLL(spec.origin)
    except OSError as error:
        raise RuntimeError(
            f"the native simulator at {spec.origin} does not load ({error}); rebuild it with "
            "`pip install -e .`, or set PLACETO_JAX_NATIVE=0 to run the JAX loops"
        ) from error
    for kernel in _KERNELS:
        for dtype, suffix in _DTYPES.items():
            handler = jax.ffi.pycapsule(getattr(library, f"Placeto{kernel}{suffix}"))
            jax.ffi.register_ffi_target(_target(kernel, dtype), handler, platform="cpu")
    return True


def in_use() -> bool:
    """Whether `simulate` and the environments run the kernel: built, not switched off with
    `PLACETO_JAX_NATIVE=0` (read when a function is traced), and the default backend is the
    CPU (accelerators run the JAX loops, which are built for parallel lanes)."""
    switched_off = os.environ.get("PLACETO_JAX_NATIVE", "1") == "0"
    return not switched_off and jax.default_backend() == "cpu" and available()


def threads() -> int:
    """Threads one call splits its placements over: `PLACETO_JAX_NATIVE_THREADS`, else the CPUs
    this process may run on (so `taskset -c 0` gives one). Outputs do not depend on it."""
    if "PLACETO_JAX_NATIVE_THREADS" in os.environ:
        text = os.environ["PLACETO_JAX_NATIVE_THREADS"]
        if not text.strip().isdigit() or int(text) < 1:
            raise ValueError(f"PLACETO_JAX_NATIVE_THREADS must be an integer >= 1, not {text!r}")
        return int(text)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def simulate_placements(graph, cluster, placements: jax.Array, broadcast: bool) -> tuple:
    """(makespan [R], start [R, Np], end [R, Np], peak memory [R, D], transfer start and arrival
    [R, Np, D], -inf where none) of placements [R, Np] int32 on a `SimGraph` and `SimCluster`;
    the fields of `core.SimOutput`. Under vmap every input may carry the batch axes."""
    if not available():
        raise RuntimeError("the native simulator is not built (no C++ compiler at install?)")
    n_rows, n_pad = placements.shape
    n_dev = cluster.speed.shape[0]
    dtype = graph.cost.dtype

    def like(*shape):
        return jax.ShapeDtypeStruct(shape, dtype)

    call = jax.ffi.ffi_call(
        _target("Simulate", dtype),
        (
            like(n_rows),
            like(n_rows, n_pad),
            like(n_rows, n_pad),
            like(n_rows, n_dev),
            like(n_rows, n_pad, n_dev),
            like(n_rows, n_pad, n_dev),
        ),
        vmap_method="broadcast_all",
    )
    return call(*_graph_args(graph, cluster), placements, broadcast=bool(broadcast),
                threads=np.int32(threads()))  # fmt: skip


def simulate_variants(
    graph, cluster, base: jax.Array, placements: jax.Array, broadcast: bool
) -> tuple:
    """(makespan [R], peak memory [R, D]) of placements [R, Np] int32 that differ from `base`
    [Np] in a few ops, equal to `simulate_placements`'s: `base`'s schedule runs once up to the
    first completion of a parent of a moved op, and each row goes on from there (`native.cc`,
    `Variants`). Under vmap every input may carry the batch axes."""
    if not available():
        raise RuntimeError("the native simulator is not built (no C++ compiler at install?)")
    n_rows = placements.shape[0]
    n_dev = cluster.speed.shape[0]
    dtype = graph.cost.dtype
    call = jax.ffi.ffi_call(
        _target("Variants", dtype),
        (jax.ShapeDtypeStruct((n_rows,), dtype), jax.ShapeDtypeStruct((n_rows, n_dev), dtype)),
        vmap_method="broadcast_all",
    )
    split = variant_threads(n_rows, placements.shape[-1])
    return call(*_graph_args(graph, cluster), base, placements, broadcast=bool(broadcast),
                threads=np.int32(split))  # fmt: skip


def variant_threads(n_rows: int, n_pad: int) -> int:
    """Threads `simulate_variants` splits `n_rows` rows of `n_pad` ops over: `threads()`, but
    none with fewer than `VARIANT_OPS_PER_THREAD` padded ops."""
    return max(1, min(threads(), n_rows * n_pad // VARIANT_OPS_PER_THREAD))


def _graph_args(graph, cluster) -> tuple:
    """The kernels' first inputs: the `SimGraph`'s and `SimCluster`'s arrays."""
    return (graph.n_ops, graph.cost, graph.out_bytes, graph.param_bytes, graph.inner_kernels,
            graph.n_parents, graph.children, cluster.speed, cluster.bandwidth, cluster.delta1,
            cluster.delta2)  # fmt: skip
