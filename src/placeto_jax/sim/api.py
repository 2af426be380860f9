"""`simulate`: the host wrapper that validates, pads, batches, runs the jitted simulator, unpads.

Precision is an argument (`dtype`), never the caller's global `jax_enable_x64` flag: the host
functions here run the simulator in float64 by default (exact: bit-equal to the reference) or in
float32 when asked, each inside `precision.scope(dtype)`.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax import precision
from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim import native
from placeto_jax.sim.core import SimCluster, SimGraph, SimOutput, simulate_lanes
from placeto_jax.sim.padded import PaddedGraph, bucket, fine_bucket, pad_graph
from placeto_jax.sim.result import SimResult
from placeto_jax.sim.validate import check_simulation
from placeto_jax.sim.wide import simulate_lanes_wide

_padded_cache: weakref.WeakKeyDictionary[Graph, PaddedGraph] = weakref.WeakKeyDictionary()
_device_cache: weakref.WeakKeyDictionary[Graph, dict] = weakref.WeakKeyDictionary()
_MAX_FLAT = 1 << 30  # lanes x padded ops of one chunk: its flat int32 indices stay in range
# Chain slots from which a batch runs the wide-graph loop (`sim/wide.py`): measured on this
# 2-core CPU at 64 lanes, float32, it gives 1.0x the scan loop at 216 slots (BERT-12 inference,
# 783 ops), 2.2x-2.3x at 672 (family:nmt/24, 4,384 ops), 0.4x at 16 (layered:2000).
WIDE_SLOTS = 256


def padded(graph: Graph) -> PaddedGraph:
    """The graph's default padding (cached per graph object): ops and edges to `fine_bucket`
    sizes (at most an eighth above 512), not powers of two. The work before and after the loop
    (state, consumer devices, peak memory's sort) scales with the padded size: measured at 64
    lanes, `family:nmt/24` (4,384 ops) runs 1.25x faster padded to 4,608 than to 8,192."""
    if graph not in _padded_cache:
        _padded_cache[graph] = pad_graph(
            graph, n_pad=fine_bucket(graph.n_ops), n_edges=fine_bucket(max(graph.n_edges, 1))
        )
    return _padded_cache[graph]


def device_graph(graph: Graph, dtype: Any = precision.EXACT) -> SimGraph:
    """The default padding as device arrays in `dtype` (cached per graph object and dtype, so
    repeated `simulate` calls do not copy the graph to the device again). Call it inside
    `precision.scope(dtype)`."""
    dtype = np.dtype(dtype)
    per_dtype = _device_cache.setdefault(graph, {})
    if dtype not in per_dtype:
        per_dtype[dtype] = SimGraph.from_padded(padded(graph), dtype)
    return per_dtype[dtype]


def sim_cluster(cluster: Cluster, dtype: Any) -> SimCluster:
    """The cluster's speeds, bandwidths and overheads as device arrays in `dtype`."""
    return SimCluster(
        speed=jnp.asarray(cluster.speed, dtype),
        bandwidth=jnp.asarray(cluster.bandwidth, dtype),
        delta1=jnp.asarray(cluster.delta1, dtype),
        delta2=jnp.asarray(cluster.delta2, dtype),
    )


def chunk_size() -> int:
    """Placements simulated together (the lanes of one `simulate_lanes` loop) in one chunk of a
    batch. On CPU, chunks run one after the other so that a chunk's state stays in cache:
    measured on a 2-core x86 CPU, 64 lanes give 1.1x-1.2x the placements per CPU-second of 32
    and 1.0x-1.04x that of 128, at 512 and 2,048 padded ops (docs/simulator.md). On an accelerator
    the whole batch is one chunk (parallel lanes are what it is for)."""
    return 64 if jax.default_backend() == "cpu" else 1 << 30


@functools.partial(jax.jit, static_argnames=("broadcast", "loop"))
def simulate_batch(
    graph: SimGraph,
    cluster: SimCluster,
    placements: jax.Array,
    broadcast: bool = True,
    loop: str = "auto",
) -> SimOutput:
    """Simulate placements [B, Np] int32, the same outputs bit for bit whichever `loop` runs:
    "native" (the C++ kernel, `sim/native.py`: one call for the batch), or a scan over chunks of
    `chunk_size` lanes, each chunk one JAX loop (a last, smaller chunk takes the rest): "scan"
    (`simulate_lanes`) or "wide" (`simulate_lanes_wide`). "auto" takes the native kernel where
    it runs (`native.in_use`), else the wide loop for a graph of at least `WIDE_SLOTS` chain
    slots, else the scan loop."""
    if loop not in ("auto", "native", "scan", "wide"):
        raise ValueError(f"loop must be 'auto', 'native', 'scan' or 'wide', not {loop!r}")
    if loop == "native" or (loop == "auto" and native.in_use()):
        return SimOutput(*native.simulate_placements(graph, cluster, placements, broadcast))
    n_rows, n_pad = placements.shape
    lanes = max(1, min(chunk_size(), n_rows, _MAX_FLAT // n_pad))
    n_full = n_rows // lanes * lanes
    wide = loop == "wide" or (loop == "auto" and graph.chain_heads.shape[0] >= WIDE_SLOTS)
    loop_fn = simulate_lanes_wide if wide else simulate_lanes

    def run(rows):
        return loop_fn(graph, cluster, rows, broadcast)

    out = jax.lax.map(run, placements[:n_full].reshape(-1, lanes, n_pad))
    out = jax.tree.map(lambda x: x.reshape(n_full, *x.shape[2:]), out)
    if n_full < n_rows:
        rest = run(placements[n_full:])
        out = jax.tree.map(lambda a, r: jnp.concatenate([a, r]), out, rest)
    return out


def simulate_variants(
    graph: SimGraph,
    cluster: SimCluster,
    base: jax.Array,
    placements: jax.Array,
    broadcast: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """(makespan [B], peak memory [B, D]) of placements [B, Np] int32 that differ from `base`
    [Np] in a few ops, the same as `simulate_batch`'s. The native kernel shares the schedule's
    part before any moved op is reached (`native.simulate_variants`); elsewhere this is
    `simulate_batch`."""
    if native.in_use():
        return native.simulate_variants(graph, cluster, base, placements, broadcast)
    out = simulate_batch(graph, cluster, placements, broadcast)
    return out.makespan, out.peak_memory


def simulate_rows(
    graph: Graph,
    cluster: Cluster,
    rows: np.ndarray,
    dtype: Any = precision.EXACT,
    padding: PaddedGraph | None = None,
    loop: str = "auto",
):
    """SimOutput (NumPy, `dtype`) of placement rows [B, Np] int32 on `padding` (default: the
    graph's cached default padding), in one `simulate_batch` call of exactly B rows (the caller
    pads the batch to the sizes it wants compiled) with `loop`. No validation: `simulate` is the
    checked entry point."""
    with precision.scope(dtype):
        sim_graph = (
            device_graph(graph, dtype) if padding is None else SimGraph.from_padded(padding, dtype)
        )
        out = simulate_batch(
            sim_graph,
            sim_cluster(cluster, dtype),
            jnp.asarray(rows, jnp.int32),
            cluster.broadcast,
            loop,
        )
        return jax.device_get(out)


def check_options(padding: Any, dtype: Any) -> None:
    """TypeError or ValueError naming `simulate`'s `padding` or `dtype` when it is of the
    wrong kind (the graph, cluster and placement are checked by `check_simulation`)."""
    if padding is not None and not isinstance(padding, PaddedGraph):
        raise TypeError(
            f"padding must come from pad_graph(graph, ...), got {type(padding).__name__}"
        )
    try:
        kind = np.dtype(dtype)
    except TypeError:
        kind = None
    if kind not in (np.dtype(np.float32), np.dtype(np.float64)):
        shown = kind.name if kind is not None else repr(dtype)
        raise ValueError(f"dtype must be float32 or float64, got {shown}")


def simulate(
    graph: Graph,
    cluster: Cluster,
    placement,
    *,
    padding: PaddedGraph | None = None,
    dtype: Any = precision.EXACT,
    allow_split: bool = False,
    loop: str = "auto",
) -> SimResult:
    """Simulate one placement ([N] ints) or a batch ([B, N]); see docs/simulator.md.

    A placement that puts two ops of one co-location class on different devices is refused
    (ValueError naming them) unless `allow_split=True`, which simulates it as given.

    Batches are padded to a power of two so that repeated calls reuse one compiled program;
    `padding` (from `pad_graph(graph, ...)`) chooses the graph's padded sizes, by default
    power-of-two buckets. Results are NumPy in `dtype`: float64 (the default) is exact, equal to
    the reference to the last bit; float32 is faster and matches to rounding. `loop` chooses the
    implementation (`simulate_batch`): "auto" (the default) runs the native CPU kernel where it
    is built and the backend is the CPU, else a JAX loop; every choice gives the same outputs."""
    check_options(padding, dtype)
    placement = check_simulation(graph, cluster, placement, allow_split)
    single = placement.ndim == 1
    batch = placement[None] if single else placement
    pg = padded(graph) if padding is None else padding
    if int(pg.n_ops) != graph.n_ops:
        raise ValueError(f"padding is for a graph of {int(pg.n_ops)} ops, not {graph.n_ops}")
    n, b = graph.n_ops, batch.shape[0]
    rows = np.zeros((bucket(b, 1), pg.n_pad), dtype=np.int32)
    rows[:b, :n] = batch
    out = simulate_rows(graph, cluster, rows, dtype, padding, loop)
    result = SimResult(
        makespan=np.asarray(out.makespan[:b]),
        start=np.asarray(out.start[:b, :n]),
        end=np.asarray(out.end[:b, :n]),
        peak_memory=np.asarray(out.peak_memory[:b]),
        transfer_start=_nan_for_none(out.transfer_start[:b, :n]),
        arrival=_nan_for_none(out.arrival[:b, :n]),
    )
    return result[0] if single else result


def single_device(graph: Graph, cluster: Cluster) -> np.ndarray:
    """[N] int64: every op on the fastest device (lowest index on ties), the reference that
    placements are compared with. When the graph's parameters plus all its outputs exceed that
    device's memory: the next fastest device that holds them, or the fastest when none does."""
    by_speed = np.argsort(-cluster.speed_array, kind="stable")
    need = graph.param_bytes.sum() + graph.out_bytes.sum()
    fits = by_speed[need <= cluster.memory_array[by_speed]]
    device = fits[0] if fits.size else by_speed[0]
    return np.full(graph.n_ops, device, dtype=np.int64)


def _nan_for_none(x: np.ndarray) -> np.ndarray:
    x = np.array(x)
    x[np.isneginf(x)] = np.nan
    return x
