"""Placement validation at the boundary (host-side)."""

from __future__ import annotations

import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.placements import colocation_split, split_message


def check_simulation(graph, cluster, placement, allow_split: bool) -> np.ndarray:
    """The placement as int64 [N] or [B, N] after checking every argument of a simulation:
    TypeError for a graph or cluster of the wrong type, ValueError for a bad placement or one
    that splits a co-location class (unless `allow_split`)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a placeto_jax.Graph, got {type(graph).__name__}")
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a placeto_jax.Cluster, got {type(cluster).__name__}")
    arr = check_placement(placement, graph.n_ops, cluster.n_devices)
    split = None if allow_split or graph.colocation is None else colocation_split(graph, arr)
    if split is not None:
        raise ValueError(
            f"{split_message(graph, arr, split)}; pass allow_split=True to simulate it as given"
        )
    return arr


def check_placement(placement, n_ops: int, n_devices: int) -> np.ndarray:
    """Return the placement as int64 [N] or [B, N]; raise ValueError naming what is wrong."""
    if isinstance(placement, dict | str | bytes):
        raise ValueError(
            f"placement must be an array of device indices (one per op), got "
            f"{type(placement).__name__} (a placement file: placeto_jax.load_placement)"
        )
    try:
        arr = np.asarray(placement)
    except (TypeError, ValueError) as err:
        raise ValueError(f"placement must be an array of device indices: {err}") from None
    if arr.ndim not in (1, 2) or arr.shape[-1] != n_ops:
        raise ValueError(
            f"placement has shape {arr.shape}; expected [{n_ops}] or [B, {n_ops}] "
            f"(one device per op)"
        )
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0)
    )
    if arr.size and not integral:
        raise ValueError(f"placement must hold integer device indices, got dtype {arr.dtype}")
    bad = np.argwhere((arr < 0) | (arr >= n_devices))  # before the cast: uint64, floats
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        value = arr[where]
        shown = int(value) if float(value).is_integer() else float(value)
        raise ValueError(
            f"placement puts op {where[-1]} on device {shown}, outside [0, {n_devices})"
        )
    return arr.astype(np.int64)
