"""Placers: every baseline behind one interface, `place(graph, cluster, key) -> [N] int64`."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.simple import colocate, random, random_batch, round_robin, single

Placer = Callable[[Graph, Cluster, jax.Array], np.ndarray]

PLACERS: dict[str, Placer] = {
    "single": single,
    "random": random,
    "round-robin": round_robin,
}

__all__ = ["PLACERS", "Placer", "colocate", "random", "random_batch", "round_robin", "single"]
