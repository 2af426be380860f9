"""Graph statistics against hand-computed values."""

from __future__ import annotations

import pytest

from placeto_jax.graphs import generators
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.stats import GraphStats, critical_path_us, finish_times, graph_stats


def _chain() -> Graph:
    return Graph.from_edges(
        [1.0, 2.0, 3.0], [0.0] * 3, [("a", "b"), ("b", "c")], names=["a", "b", "c"]
    )


def test_chain_is_one_path():
    assert finish_times(_chain()).tolist() == [1.0, 3.0, 6.0]
    assert graph_stats(_chain()) == GraphStats(3, 2, 6.0, 6.0, 1.0)


def test_diamond_takes_the_costlier_branch():
    graph = generators.diamond()  # a 100 -> b 50, c 30 -> d 10
    assert finish_times(graph).tolist() == [100.0, 150.0, 130.0, 160.0]
    assert critical_path_us(graph) == 160.0
    assert graph_stats(graph) == GraphStats(4, 4, 190.0, 160.0, pytest.approx(190.0 / 160.0))


def test_independent_ops_run_in_parallel():
    graph = Graph.from_edges([4.0, 2.0, 2.0], [0.0] * 3, [])
    assert graph_stats(graph) == GraphStats(3, 0, 8.0, 4.0, 2.0)


def test_order_of_ops_does_not_matter():
    # d <- b <- a and d <- c, listed with the sink first
    graph = Graph.from_edges(
        [10.0, 50.0, 100.0, 30.0],
        [0.0] * 4,
        [("a", "b"), ("b", "d"), ("c", "d")],
        names=["d", "b", "a", "c"],
    )
    assert finish_times(graph).tolist() == [160.0, 150.0, 100.0, 30.0]


def test_graph_without_compute_has_parallelism_one():
    graph = Graph.from_edges([0.0, 0.0], [0.0, 0.0], [(0, 1)])
    assert graph_stats(graph) == GraphStats(2, 1, 0.0, 0.0, 1.0)
