"""`simulate`: the host wrapper that validates, pads, batches, runs the jitted simulator, unpads."""

from __future__ import annotations

import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.core import SimCluster, SimGraph, SimOutput, simulate_lanes
from placeto_jax.sim.padded import PaddedGraph, bucket, pad_graph
from placeto_jax.sim.result import SimResult
from placeto_jax.sim.validate import check_placement

_padded_cache: weakref.WeakKeyDictionary[Graph, PaddedGraph] = weakref.WeakKeyDictionary()
_device_cache: weakref.WeakKeyDictionary[Graph, dict] = weakref.WeakKeyDictionary()
_MAX_FLAT = 1 << 30  # lanes x padded ops of one chunk: its flat int32 indices stay in range


def padded(graph: Graph) -> PaddedGraph:
    """The graph's default padding (cached per graph object)."""
    if graph not in _padded_cache:
        _padded_cache[graph] = pad_graph(graph)
    return _padded_cache[graph]


def device_graph(graph: Graph) -> SimGraph:
    """The default padding as device arrays in the current float dtype (cached per graph object,
    so repeated `simulate` calls do not copy the graph to the device again)."""
    dtype = jnp.result_type(float)
    per_dtype = _device_cache.setdefault(graph, {})
    if dtype not in per_dtype:
        per_dtype[dtype] = SimGraph.from_padded(padded(graph), dtype)
    return per_dtype[dtype]


def sim_cluster(cluster: Cluster, float_dtype=None) -> SimCluster:
    dtype = float_dtype or jnp.result_type(float)
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


@functools.partial(jax.jit, static_argnames="broadcast")
def simulate_batch(
    graph: SimGraph, cluster: SimCluster, placements: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate placements [B, Np] int32: a scan over chunks of `chunk_size` lanes, each chunk
    one `simulate_lanes` loop (a last, smaller chunk takes the rest)."""
    n_rows, n_pad = placements.shape
    lanes = max(1, min(chunk_size(), n_rows, _MAX_FLAT // n_pad))
    n_full = n_rows // lanes * lanes

    def run(rows):
        return simulate_lanes(graph, cluster, rows, broadcast)

    out = jax.lax.map(run, placements[:n_full].reshape(-1, lanes, n_pad))
    out = jax.tree.map(lambda x: x.reshape(n_full, *x.shape[2:]), out)
    if n_full < n_rows:
        rest = run(placements[n_full:])
        out = jax.tree.map(lambda a, r: jnp.concatenate([a, r]), out, rest)
    return out


def simulate(
    graph: Graph, cluster: Cluster, placement, *, padding: PaddedGraph | None = None
) -> SimResult:
    """Simulate one placement ([N] ints) or a batch ([B, N]); see docs/simulator.md.

    Batches are padded to a power of two so that repeated calls reuse one compiled program;
    `padding` (from `pad_graph(graph, ...)`) chooses the graph's padded sizes, by default
    power-of-two buckets. Results are float64 NumPy when `jax_enable_x64` is on (exact), else
    float32."""
    placement = check_placement(placement, graph.n_ops, cluster.n_devices)
    single = placement.ndim == 1
    batch = placement[None] if single else placement
    pg = padded(graph) if padding is None else padding
    if int(pg.n_ops) != graph.n_ops:
        raise ValueError(f"padding is for a graph of {int(pg.n_ops)} ops, not {graph.n_ops}")
    n, b = graph.n_ops, batch.shape[0]
    rows = np.zeros((bucket(b, 1), pg.n_pad), dtype=np.int32)
    rows[:b, :n] = batch
    out = simulate_batch(
        device_graph(graph) if padding is None else SimGraph.from_padded(pg),
        sim_cluster(cluster),
        jnp.asarray(rows),
        cluster.broadcast,
    )
    out = jax.device_get(out)
    result = SimResult(
        makespan=np.asarray(out.makespan[:b]),
        start=np.asarray(out.start[:b, :n]),
        end=np.asarray(out.end[:b, :n]),
        peak_memory=np.asarray(out.peak_memory[:b]),
        transfer_start=_nan_for_none(out.transfer_start[:b, :n]),
        arrival=_nan_for_none(out.arrival[:b, :n]),
    )
    return result[0] if single else result


def _nan_for_none(x: np.ndarray) -> np.ndarray:
    x = np.array(x)
    x[np.isneginf(x)] = np.nan
    return x
