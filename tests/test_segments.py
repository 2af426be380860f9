"""Segment descent (placers/segments.py) and the `descent` teacher: hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest

from placeto_jax.cluster import Cluster
from placeto_jax.config import make_config
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.guided import Searched
from placeto_jax.placers.segments import segment_descent, segments
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import memory_overflow
from placeto_jax.stages.teachers import teachers

K80 = Cluster.preset("placeto-k80", 2)  # delta1 5.7 µs, 7,600 bytes/µs
SLOW = 7.6e6  # bytes: a 1,000 µs transfer


def _start(graph: Graph, cluster: Cluster, placement) -> Searched:
    placement = np.asarray(placement, np.int64)
    out = simulate(graph, cluster, placement)
    overflow = float(memory_overflow(out.peak_memory[None], cluster)[0])
    return Searched(placement, float(out.makespan), out.peak_memory, overflow == 0, overflow)


def test_segments_are_runs_and_chains_closed_over_classes():
    chain = Graph.from_edges([1.0] * 3, [0.0] * 3, [(0, 1), (1, 2)])
    assert [s.tolist() for s in segments(chain)] == [[0], [0, 1], [0, 1, 2], [1], [1, 2], [2]]
    tied = Graph.from_edges([1.0] * 3, [0.0] * 3, [(0, 1), (1, 2)], colocation=[0, -1, 0])
    assert [s.tolist() for s in segments(tied)] == [[0, 1, 2], [0, 2], [1]]


def _two_chains() -> Graph:
    """a1 -> a2 and b1 -> b2, 100 µs each, every transfer 1,000 µs."""
    return Graph.from_edges([100.0] * 4, [SLOW] * 4, [(0, 1), (2, 3)])


def test_a_chain_moved_whole_where_no_single_move_helps():
    """All on device 0: 4 x 100 + 3 x 5.7 = 417.1 µs. Any one op moved pays a 1,000 µs
    transfer; a chain moved whole runs beside the other: 100 + 5.7 + 100 = 205.7 µs."""
    graph = _two_chains()
    start = _start(graph, K80, [0, 0, 0, 0])
    assert start.makespan == pytest.approx(417.1)
    singles = [_start(graph, K80, np.eye(4, dtype=np.int64)[v]).makespan for v in range(4)]
    assert min(singles) > 417.1
    found = segment_descent(graph, K80, start)
    assert found.makespan == pytest.approx(205.7) and found.kept == 1
    p = found.placement
    assert p[0] == p[1] and p[2] == p[3] and p[0] != p[2]
    assert found.evaluations > len(segments(graph))  # two steps: the second finds nothing
    again = segment_descent(graph, K80, found)
    assert again.kept == found.kept and again.makespan == found.makespan
    unchanged = segment_descent(graph, K80, start, max_steps=0)
    assert unchanged.makespan == start.makespan and unchanged.evaluations == 0


def test_fitting_memory_ranks_before_a_shorter_makespan():
    """a -> b, 0.6 GB of parameters each on 1 GB devices: together they overflow (205.7 µs);
    apart they fit and pay the transfer (100 + 1,000 + 100 µs)."""
    graph = Graph.from_edges([100.0] * 2, [SLOW, 0.0], [(0, 1)], param_bytes=[6e8, 6e8])
    small = Cluster(2, memory=1e9)
    start = _start(graph, small, [0, 0])
    assert not start.fits_memory and start.makespan == pytest.approx(205.7)
    found = segment_descent(graph, small, start)
    assert found.fits_memory and found.makespan == pytest.approx(1200.0)


def test_bad_step_count_is_named():
    graph = _two_chains()
    with pytest.raises(ValueError, match="max_steps"):
        segment_descent(graph, K80, _start(graph, K80, [0, 0, 0, 0]), max_steps=-1)


def test_the_descent_teacher_starts_where_the_searched_one_ends():
    """Three chains of 3 ops (every transfer 1,000 µs) on 2 devices: the descent teacher is
    never slower than the searched teacher of the same seed, counts its simulations on top,
    and keeps the best heuristic as its start."""
    edges = [(0, 1), (1, 2), (3, 4), (4, 5), (6, 7), (7, 8)]
    graph = Graph.from_edges([100.0] * 9, [SLOW] * 9, edges)
    (searched,) = teachers([("g", graph)], K80, 0, "searched", passes=2)
    (descended,) = teachers([("g", graph)], K80, 0, "descent", passes=2)
    assert descended.makespan <= searched.makespan
    heuristic = _start(graph, K80, descended.start)  # the other start of the descent
    assert descended.makespan <= segment_descent(graph, K80, heuristic).makespan
    assert descended.evaluations > searched.evaluations
    assert np.array_equal(descended.start, searched.start)
    assert descended.makespan == pytest.approx(
        float(simulate(graph, K80, descended.placement).makespan)
    )
    config = make_config("construct", ["train.teacher=descent", "train.teacher_passes=2"])
    assert (config.train.teacher, config.train.teacher_passes) == ("descent", 2)
