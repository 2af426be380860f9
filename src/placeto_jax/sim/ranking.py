"""How simulated placements rank (host-side NumPy): fitting memory first, then makespan plus a
penalty per unit of relative memory overflow. One order for every search, learned placer,
ranking of results and verdict (`rank_key`)."""

from __future__ import annotations

import numpy as np

from placeto_jax.cluster import Cluster

MEMORY_PENALTY = 1e9  # µs per unit of relative memory overflow


def memory_overflow(peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] float64: relative memory overflow of peak memory [B, D] bytes (bytes over capacity
    divided by capacity, summed over devices); 0 exactly when the placement fits."""
    capacity = cluster.memory_array
    return (np.maximum(np.asarray(peak_memory, np.float64) - capacity, 0.0) / capacity).sum(1)


def penalised_makespan(makespan, peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] µs: makespans [B] µs plus `MEMORY_PENALTY` µs per unit of `memory_overflow` for
    peak memory [B, D] bytes, so any placement that fits scores below one that does not. The
    score every search and learned placer ranks placements by."""
    overflow = memory_overflow(peak_memory, cluster)
    return np.asarray(makespan, dtype=np.float64) + MEMORY_PENALTY * overflow


def rank_key(makespan: float, fits: bool, overflow: float) -> tuple[bool, float]:
    """How two placements compare (the lower key wins): fitting memory first, by makespan
    (µs); among those that do not fit, the least `memory_overflow` (penalised makespan), not
    the shortest makespan."""
    return not fits, float(makespan) + MEMORY_PENALTY * float(overflow)


def rank_keys(makespan, peak_memory, cluster: Cluster) -> list[tuple[bool, float]]:
    """`rank_key` of each of B placements: makespans [B] µs, peak memory [B, D] bytes."""
    overflow = memory_overflow(peak_memory, cluster)
    return [rank_key(m, o == 0, o) for m, o in zip(np.asarray(makespan), overflow, strict=True)]


def first_ranked(makespan, peak_memory, cluster: Cluster) -> int:
    """The index of the first of B placements in `rank_key` order (the first of equals):
    makespans [B] µs, peak memory [B, D] bytes. One stable sort, not B key tuples: segment
    descent ranks thousands of placements a step."""
    overflows = memory_overflow(peak_memory, cluster) > 0
    return int(np.lexsort((penalised_makespan(makespan, peak_memory, cluster), overflows))[0])


def fits_memory(peak_memory, cluster: Cluster) -> np.ndarray:
    """[B] bool: peak memory [B, D] bytes within every device's memory."""
    return np.all(np.asarray(peak_memory, np.float64) <= cluster.memory_array, axis=1)
