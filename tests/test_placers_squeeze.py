"""The memory squeeze (`placers.squeeze`): a hand-derived case that only a chain of two moves
relieves, a placement that fits left alone, and on random overflowing cases a result never
ranked after its start (scored by the reference simulator)."""

from __future__ import annotations

import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate, simulate_reference
from placeto_jax.placers.simple import colocate
from placeto_jax.placers.squeeze import squeeze
from placeto_jax.sim.ranking import rank_keys
from randgraphs import random_case


def _waiting_consumers() -> tuple[Graph, Cluster]:
    # s -> P, s -> x -> k -> m. P (100 µs, 1000 bytes, no consumers) fills device 0; x (10
    # bytes out, 10 of parameters) runs on device 1 and is consumed by k, then k by m.
    graph = Graph.from_edges(
        cost=[1.0, 100.0, 1.0, 1.0, 1.0],
        out_bytes=[0.0, 1000.0, 10.0, 10.0, 0.0],
        edges=[(0, 1), (0, 2), (2, 3), (3, 4)],
        param_bytes=[0.0, 0.0, 10.0, 0.0, 0.0],
    )
    return graph, Cluster(n_devices=2, memory=[1005.0, 500.0], delta1=0.0, delta2=0.0)


def test_a_chain_of_two_moves_empties_the_peak():
    # Start s, P, k, m on device 0 and x on 1. P runs 1-101 on device 0; x runs 1-2 on device 1
    # and its copy arrives on 0 just after 2, where k waits behind P until 101: the peak is
    # P + x = 1010 > 1005. Single moves do not fit: x to 0 brings its 10 bytes of parameters
    # (1010); k to 1 sends k's output back for m, which waits behind P in turn (1010); m to 1
    # leaves k waiting on 0; P to 1 overflows device 1's 500; s moves no tensor. Level 0 tries
    # (P, 1), (x, 0), (k, 1); of these only k to 1 adds a tensor (k's copy) to device 0's
    # peak, so the chain goes on from there with (k, 0) and (m, 1): k and m both on 1 leave P
    # alone on device 0 (1000): it fits. Evaluations: the start, 3, then 2.
    graph, cluster = _waiting_consumers()
    start = np.array([0, 0, 1, 0, 0])
    assert simulate(graph, cluster, start).peak_memory[0] == 1010.0
    solution = squeeze(graph, cluster, start)
    assert solution.placement.tolist() == [0, 0, 1, 1, 1]
    assert solution.evaluations == 6
    assert simulate_reference(graph, cluster, solution.placement).peak_memory.tolist() == [
        1000.0,
        30.0,
    ]
    for op, device in [(1, 1), (2, 0), (3, 1), (4, 1), (0, 1)]:
        single_move = start.copy()
        single_move[op] = device
        peaks = simulate_reference(graph, cluster, single_move).peak_memory
        assert np.any(peaks > cluster.memory_array)


def test_a_placement_that_fits_comes_back_unchanged():
    graph, cluster = _waiting_consumers()
    solution = squeeze(graph, cluster, np.array([0, 0, 1, 1, 1]))
    assert (solution.placement.tolist(), solution.evaluations) == ([0, 0, 1, 1, 1], 1)
    with pytest.raises(ValueError, match="budget"):
        squeeze(graph, cluster, np.zeros(5, int), budget=0)


@pytest.mark.parametrize("seed", range(8))
def test_never_ranked_after_its_start(seed):
    graph, cluster, placements = random_case(seed, max_ops=25, max_devices=4)
    need = graph.out_bytes.sum() + graph.param_bytes.sum()
    tight = Cluster(
        cluster.n_devices,
        speed=cluster.speed,
        bandwidth=cluster.bandwidth,
        memory=max(need / (2 * cluster.n_devices), 1.0),
        delta1=cluster.delta1,
        delta2=cluster.delta2,
        broadcast=cluster.broadcast,
    )
    start = colocate(graph, placements[0])
    solution = squeeze(graph, tight, start, budget=200)
    assert solution.evaluations <= 200
    assert np.array_equal(colocate(graph, solution.placement), solution.placement)
    before, after = (simulate_reference(graph, tight, p) for p in (start, solution.placement))
    key_before, key_after = (
        rank_keys(np.atleast_1d(r.makespan), np.atleast_2d(r.peak_memory), tight)[0]
        for r in (before, after)
    )
    assert key_after <= key_before
