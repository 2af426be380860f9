"""Simple placers: valid placements, hand-computed round-robin, single-device memory fallback,
determinism from the key, co-location."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from placeto_jax import Cluster, Graph
from placeto_jax.graphs.generators import diamond, layered
from placeto_jax.placers import PLACERS, colocate, random_batch, round_robin, single

KEY = jax.random.key(0)


def _diamond_colocated(colocation) -> Graph:
    g = diamond()
    return Graph.from_edges(g.cost, g.out_bytes, g.edges, names=g.names, colocation=colocation)


@pytest.mark.parametrize("name", ["single", "random", "round-robin"])
@pytest.mark.parametrize("n_devices", [1, 3])
def test_placements_are_valid(name, n_devices):
    graph = layered(30, seed=1)
    placement = PLACERS[name](graph, Cluster(n_devices=n_devices), KEY)
    assert isinstance(placement, np.ndarray)
    assert placement.dtype == np.int64 and placement.shape == (30,)
    assert placement.min() >= 0 and placement.max() < n_devices


def test_round_robin_on_the_diamond():
    # topological order a, b, c, d
    assert round_robin(diamond(), Cluster(n_devices=2), KEY).tolist() == [0, 1, 0, 1]
    assert round_robin(diamond(), Cluster(n_devices=3), KEY).tolist() == [0, 1, 2, 0]


def test_round_robin_follows_topological_order_not_index():
    # ops listed out of order: 2 -> 0 -> 1, topological order 2, 0, 1
    graph = Graph.from_edges([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [(2, 0), (0, 1)])
    assert round_robin(graph, Cluster(n_devices=2), KEY).tolist() == [1, 0, 0]


def test_single_uses_the_fastest_device_lowest_index_on_ties():
    cluster = Cluster(n_devices=4, speed=(1.0, 3.0, 3.0, 2.0))
    assert single(diamond(), cluster, KEY).tolist() == [1, 1, 1, 1]
    assert single(diamond(), Cluster(n_devices=3), KEY).tolist() == [0, 0, 0, 0]


def test_single_falls_back_to_the_next_fastest_device_that_fits():
    # the diamond needs 0 params + 91200 output bytes
    speed = (1.0, 3.0, 3.0, 2.0)
    cluster = Cluster(n_devices=4, speed=speed, memory=(1e9, 91199.0, 91199.0, 91200.0))
    assert single(diamond(), cluster, KEY).tolist() == [3, 3, 3, 3]
    cluster = Cluster(n_devices=4, speed=speed, memory=(1e9, 91199.0, 1e5, 1e9))
    assert single(diamond(), cluster, KEY).tolist() == [2, 2, 2, 2]
    cluster = Cluster(n_devices=4, speed=speed, memory=1e3)  # nothing fits
    assert single(diamond(), cluster, KEY).tolist() == [1, 1, 1, 1]


def test_random_is_a_function_of_the_key():
    graph, cluster = layered(200, seed=2), Cluster(n_devices=4)
    a = PLACERS["random"](graph, cluster, jax.random.key(1))
    assert np.array_equal(a, PLACERS["random"](graph, cluster, jax.random.key(1)))
    assert not np.array_equal(a, PLACERS["random"](graph, cluster, jax.random.key(2)))
    counts = np.bincount(a, minlength=4)
    assert counts.sum() == 200 and counts.min() >= 30  # uniform: about 50 each


def test_random_batch_shape_and_rows_differ():
    batch = random_batch(diamond(), Cluster(n_devices=3), KEY, 64)
    assert batch.shape == (64, 4) and batch.dtype == np.int64
    assert batch.min() == 0 and batch.max() == 2
    assert len({tuple(row) for row in batch}) > 32


def test_colocation_groups_follow_their_first_op_in_topological_order():
    # a and d share group 0, b and c group 5; topological order a, b, c, d
    graph = _diamond_colocated([0, 5, 5, 0])
    assert round_robin(graph, Cluster(n_devices=4), KEY).tolist() == [0, 1, 1, 0]
    assert colocate(graph, np.array([[2, 1, 0, 3], [1, 3, 2, 0]])).tolist() == [
        [2, 1, 1, 2],
        [1, 3, 3, 1],
    ]


def test_colocation_ignores_ungrouped_ops():
    graph = _diamond_colocated([-1, 4, -1, 4])
    assert colocate(graph, np.array([0, 1, 2, 3])).tolist() == [0, 1, 2, 1]
    assert colocate(diamond(), np.array([0, 1, 2, 3])).tolist() == [0, 1, 2, 3]


def test_random_respects_colocation():
    graph = _diamond_colocated([0, 5, 5, 0])
    batch = random_batch(graph, Cluster(n_devices=4), KEY, 256)
    assert np.array_equal(batch[:, 0], batch[:, 3])
    assert np.array_equal(batch[:, 1], batch[:, 2])
    assert not np.array_equal(batch[:, 0], batch[:, 1])
    one = PLACERS["random"](graph, Cluster(n_devices=4), jax.random.key(9))
    assert one[0] == one[3] and one[1] == one[2]
