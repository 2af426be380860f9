"""Per-device summary of one simulated placement: load, utilisation, memory, transfers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.result import SimResult


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """What one placement does to each device (µs and bytes)."""

    makespan_us: float
    op_count: np.ndarray  # [D] int64, ops placed on each device
    busy_us: np.ndarray  # [D] µs the device is not free: compute plus overhead
    compute_us: np.ndarray  # [D] µs, sum of cost / speed of its ops
    overhead_us: np.ndarray  # [D] µs of per-kernel gaps (`delta1`) within the makespan
    peak_memory_bytes: np.ndarray  # [D] bytes, from the simulator
    memory_capacity_bytes: np.ndarray  # [D] bytes
    transfer_count: np.ndarray  # [D] int64, transfers sent on each device's outgoing bus
    transfer_bytes: np.ndarray  # [D] bytes sent on each device's outgoing bus

    @property
    def utilisation(self) -> np.ndarray:  # [D] busy / makespan (0 when the makespan is 0)
        if self.makespan_us <= 0:
            return np.zeros_like(self.busy_us)
        return self.busy_us / self.makespan_us

    @property
    def fits_memory(self) -> bool:
        return bool(np.all(self.peak_memory_bytes <= self.memory_capacity_bytes))


def summarize(
    graph: Graph, cluster: Cluster, placement: np.ndarray, result: SimResult
) -> PlacementReport:
    """Summarise one placement ([N]) and its simulation result."""
    placement = np.asarray(placement, dtype=np.int64)
    n_dev = cluster.n_devices
    if np.ndim(result.makespan) != 0:
        raise ValueError("summarize takes the result of one placement, not a batch")
    compute = np.bincount(placement, weights=graph.cost / cluster.speed_array[placement],
                          minlength=n_dev)  # fmt: skip
    busy = np.bincount(placement, weights=occupancy(result, cluster.delta1), minlength=n_dev)
    ops = transfers(graph, placement, cluster.broadcast)
    bus = placement[ops]
    return PlacementReport(
        makespan_us=float(result.makespan),
        op_count=np.bincount(placement, minlength=n_dev),
        busy_us=busy,
        compute_us=compute,
        overhead_us=np.maximum(busy - compute, 0.0),
        peak_memory_bytes=np.asarray(result.peak_memory, dtype=np.float64),
        memory_capacity_bytes=cluster.memory_array,
        transfer_count=np.bincount(bus, minlength=n_dev),
        transfer_bytes=np.bincount(bus, weights=graph.out_bytes[ops], minlength=n_dev),
    )


def occupancy(result: SimResult, delta1: float) -> np.ndarray:
    """[N] µs each op keeps its device from other work in one simulated placement: from its
    start to its end (its kernels and the gaps between them), then the `delta1` gap after an op
    of nonzero duration, cut at the makespan (the simulator's rules 2 and 5)."""
    start, end = np.asarray(result.start, np.float64), np.asarray(result.end, np.float64)
    gap = np.where(end > start, delta1, 0.0)
    return np.minimum(end + gap, float(result.makespan)) - start


def transfers(graph: Graph, placement: np.ndarray, broadcast: bool) -> np.ndarray:
    """[T] int64: the producing op of every transfer. With broadcast, one per op that has a
    consumer on another device; without, one per (op, distinct remote consumer device)."""
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    remote = placement[src] != placement[dst]
    if broadcast:
        return np.unique(src[remote])
    pairs = np.unique(np.stack([src[remote], placement[dst[remote]]], axis=1), axis=0)
    return pairs[:, 0]


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned others, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    )
