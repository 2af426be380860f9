"""Simple baseline placers: one device, uniform random, round-robin in topological order.

Each is `place(graph, cluster, key) -> [N] int64` (device per op); randomness comes only from
the `jax.random` key. All respect `graph.colocation` (see `colocate`).
"""

from __future__ import annotations

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.api import single_device


def single(graph: Graph, cluster: Cluster, key: jax.Array) -> np.ndarray:
    """Every op on one device: `sim.api.single_device` (the fastest that holds the graph)."""
    del key
    return single_device(graph, cluster)


def random(graph: Graph, cluster: Cluster, key: jax.Array) -> np.ndarray:
    """Each op on a uniformly random device."""
    return random_batch(graph, cluster, key, 1)[0]


def random_batch(graph: Graph, cluster: Cluster, key: jax.Array, batch: int) -> np.ndarray:
    """[B, N] int64: `batch` independent uniform random placements."""
    draws = jax.random.randint(key, (batch, graph.n_ops), 0, cluster.n_devices)
    return colocate(graph, np.asarray(draws, dtype=np.int64))


def round_robin(graph: Graph, cluster: Cluster, key: jax.Array) -> np.ndarray:
    """The op at position i of `graph.topological_order` on device i % D."""
    del key
    placement = np.empty(graph.n_ops, dtype=np.int64)
    placement[graph.topological_order] = np.arange(graph.n_ops) % cluster.n_devices
    return colocate(graph, placement)


def colocate(graph: Graph, placement: np.ndarray) -> np.ndarray:
    """Placement(s) [..., N] with every op of a co-location group (id >= 0) moved to the device of
    the group's first op in topological order."""
    if graph.colocation is None:
        return placement
    return placement[..., _group_leader(graph)]


def _group_leader(graph: Graph) -> np.ndarray:
    """[N] int64: the op whose device each op takes (itself when it is in no group)."""
    order = graph.topological_order
    groups = graph.colocation[order]
    grouped = groups >= 0
    members = order[grouped]
    ids, first = np.unique(groups[grouped], return_index=True)
    leader = np.arange(graph.n_ops, dtype=np.int64)
    leader[members] = members[first][np.searchsorted(ids, groups[grouped])]
    return leader
