"""Random DAG/cluster/placement cases for differential tests (NumPy RNG, seeded)."""

from __future__ import annotations

import numpy as np

from placeto_jax import Cluster, Graph


def random_case(seed: int, max_ops: int = 40, max_devices: int = 8):
    """A random DAG with tie-prone integer costs (some zero), a random cluster and placements."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, max_ops + 1))
    order = rng.permutation(n)  # random labelling so index order is not topological
    density = rng.uniform(0.02, 0.3)
    edges = [
        (int(order[i]), int(order[j])) for j in range(n) for i in range(j) if rng.random() < density
    ]
    zero_share = rng.choice([0.0, 0.1, 0.5])
    cost = rng.choice([0, 10, 20, 25, 50, 100], size=n).astype(float)
    cost[rng.random(n) < zero_share] = 0.0
    out_bytes = rng.choice([0, 7600, 15200, 76000], size=n).astype(float)
    param_bytes = rng.choice([0, 1000, 5000], size=n).astype(float)
    graph = Graph.from_edges(cost, out_bytes, edges, param_bytes=param_bytes)
    d = int(rng.integers(1, max_devices + 1))
    if rng.random() < 0.5:
        speed, bandwidth = 1.0, 7600.0
    else:
        speed = rng.choice([0.5, 1.0, 2.0], size=d).tolist()
        bandwidth = rng.choice([3800.0, 7600.0, 15200.0], size=d).tolist()
    delta1, delta2 = [(5.7, 25.0), (0.0, 0.0), (10.0, 0.0), (0.0, 10.0)][int(rng.integers(4))]
    cluster = Cluster(
        d,
        speed=speed,
        bandwidth=bandwidth,
        delta1=delta1,
        delta2=delta2,
        broadcast=bool(rng.random() < 0.5),
    )
    placements = rng.integers(0, d, size=(4, n))
    return graph, cluster, placements


def layered_dag(n: int, n_layers: int, seed: int, out_degree: float = 2.0) -> Graph:
    """A layered random DAG: edges go from each layer to later ones, mostly the next."""
    from placeto_jax.graphs.generators import layered

    return layered(n, n_layers=n_layers, seed=seed, out_degree=out_degree)
