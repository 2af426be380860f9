"""List schedulers: hand-computed HEFT and m-ETF schedules, estimates that agree with the
simulator where the scheduler's model is exact, SCT's favourite children, memory awareness."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import Cluster, Graph, simulate
from placeto_jax.graphs.generators import diamond
from placeto_jax.placers import listsched, run_method
from placeto_jax.placers.timeline import Schedule, Timeline, upward_rank
from randgraphs import random_case

SCHEDULERS = [
    listsched.heft,
    listsched.critical_path,
    listsched.m_etf,
    listsched.m_sct,
    listsched.m_topo,
]


def _six() -> tuple[Graph, Cluster]:
    """a -> b, c, d; b, c -> e; d, e -> f. Costs (10, 30, 20, 40, 10, 10) µs, outputs (20000,
    1000, 1000, 2000, 1000, 0) bytes; 2 devices, 1000 bytes/µs (bytes / 1000 = µs), delta1 5,
    delta2 10."""
    graph = Graph.from_edges(
        cost=[10.0, 30.0, 20.0, 40.0, 10.0, 10.0],
        out_bytes=[20000.0, 1000.0, 1000.0, 2000.0, 1000.0, 0.0],
        edges=[(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 5), (4, 5)],
    )
    return graph, Cluster(n_devices=2, bandwidth=1000.0, delta1=5.0, delta2=10.0)


def test_upward_rank_by_hand():
    # mean busy = cost + delta1: (15, 35, 25, 45, 15, 15); mean transfer = bytes / 1000
    # f 15; e 15 + 1 + 15 = 31; d 45 + 2 + 15 = 62; c 25 + 1 + 31 = 57; b 35 + 1 + 31 = 67;
    # a 15 + 20 + max(67, 57, 62) = 102
    graph, cluster = _six()
    assert upward_rank(graph, cluster).tolist() == [102.0, 67.0, 57.0, 62.0, 31.0, 15.0]


def test_heft_by_hand():
    # Order by rank: a, b, d, c, e, f. Earliest finish, insertion, lowest device on ties:
    # a: 0-10 on 0 or 1 -> 0 (busy to 15).
    # b: on 0 starts 15 (ends 45); on 1 needs a's transfer 10-30 (ends 60) -> 0, busy to 50.
    # d: on 0 no gap before 50 (ends 90); on 1 starts 30 (ends 70) -> 1; bus 0 sends a 10-30,
    #    free at 40; device 1 busy to 75.
    # c: on 0 starts 50 (ends 70); on 1 a has arrived (30) but 1 is busy to 75 -> 0, busy to 75.
    # e: on 0 starts 75 (ends 85); on 1: bus 0 sends b 45-46 (free 56) and c 70-71, device 1
    #    free at 75, ends 85 -> tie -> 0, busy to 90.
    # f: on 0: d over bus 1 70-72, device 0 free at 90 (ends 100); on 1: e over bus 0 85-86,
    #    starts 86 (ends 96) -> 1. Makespan 96.
    graph, cluster = _six()
    schedule = listsched.heft(graph, cluster)
    assert schedule.placement.tolist() == [0, 0, 0, 1, 0, 1]
    assert schedule.start.tolist() == [0.0, 15.0, 50.0, 30.0, 75.0, 86.0]
    assert schedule.makespan == 96.0
    # the simulator: device 0 runs b before c (equal ready time 10, lower index), as HEFT did
    result = simulate(graph, cluster, schedule.placement)
    assert result.start.tolist() == schedule.start.tolist()
    assert float(result.makespan) == 96.0


def test_m_etf_by_hand():
    # ETF: the ready (op, device) pair with the earliest start; ties to the larger rank, then
    # the lower device.
    # 1. a: 0 on both -> 0 (busy to 15).
    # 2. b, c, d: 15 on 0, 30 on 1 (a's transfer 10-30) -> 15, largest rank b -> b on 0 15-45.
    # 3. c, d: 50 on 0, 30 on 1 -> 30, larger rank d (62 > 57) -> d on 1 30-70 (busy to 75).
    # 4. c: 50 on 0, 75 on 1 -> c on 0 50-70.
    # 5. e: 75 on 0 (busy to 75); on 1 b, c arrive 46, 71, device free 75 -> tie -> 0, 75-85.
    # 6. f: 90 on 0 (busy to 90); 86 on 1 (e over bus 0 85-86) -> 1, 86-96.
    graph, cluster = _six()
    schedule = listsched.m_etf(graph, cluster)
    assert schedule.placement.tolist() == [0, 0, 0, 1, 0, 1]
    assert schedule.start.tolist() == [0.0, 15.0, 50.0, 30.0, 75.0, 86.0]
    assert schedule.makespan == 96.0


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=lambda f: f.__name__)
def test_estimate_matches_the_simulator_on_the_diamond(scheduler):
    graph, cluster = diamond(), Cluster(n_devices=3)
    schedule = scheduler(graph, cluster)
    result = simulate(graph, cluster, schedule.placement)
    assert schedule.makespan == pytest.approx(float(result.makespan), abs=1e-9)


def test_heft_and_etf_on_the_diamond_by_hand():
    # a 0-100 on 0; b on 0 starts 105.7 (ends 155.7), on 1 after a's 10 µs transfer at 110
    # (ends 160) -> 0; c then ends 135.7 + 30... on 1 at 110 (a arrived), ends 140 -> 1;
    # d: on 0 c's output arrives 141, device 0 free at 161.4 -> ends 171.4; on 1 b arrives
    # 156.7 (bus 0 free at 135), device 1 free at 145.7 -> ends 166.7 -> 1.
    graph, cluster = diamond(), Cluster(n_devices=3)
    for scheduler in (listsched.heft, listsched.m_etf):
        schedule = scheduler(graph, cluster)
        assert schedule.placement.tolist() == [0, 0, 1, 1]
        assert schedule.makespan == pytest.approx(166.7)


def test_sct_favourite_child_is_on_the_critical_path():
    # a -> b -> d and a -> c; a's output takes 1000 µs to send. Keeping b (on the long path)
    # with a saves 1000 µs of makespan, c (a leaf) can wait: x_ab = 0, x_ac = 1, the only
    # optimum since x_ab + x_ac >= 1.
    graph = Graph.from_edges(
        cost=[100.0, 100.0, 10.0, 100.0],
        out_bytes=[7.6e6, 7600.0, 0.0, 0.0],
        edges=[(0, 1), (0, 2), (1, 3)],
    )
    favourite = listsched.favourite_parents(graph, Cluster(n_devices=2))
    assert favourite[1] == 0 and favourite[2] == -1 and favourite[0] == -1
    assert listsched.m_sct(graph, Cluster(n_devices=2)).placement[1] == 0


def test_sct_makes_no_favourite_on_a_tie():
    # the diamond's two branches are symmetric: the LP gives x = 0.5 to both, neither favourite
    graph = Graph.from_edges(
        cost=[100.0, 100.0, 100.0, 10.0],
        out_bytes=[7.6e6, 7600.0, 7600.0, 0.0],
        edges=[(0, 1), (0, 2), (1, 3), (2, 3)],
    )
    assert listsched.favourite_parents(graph, Cluster(n_devices=2))[1:3].tolist() == [-1, -1]


def test_memory_awareness_moves_ops_off_a_full_device():
    # a chain a -> b -> c of 1 MB params each: each device holds 2.5 MB, so not all on one.
    graph = Graph.from_edges(
        cost=[10.0, 10.0, 10.0],
        out_bytes=[1000.0, 1000.0, 0.0],
        edges=[(0, 1), (1, 2)],
        param_bytes=[1e6, 1e6, 1e6],
    )
    cluster = Cluster(n_devices=2, memory=2.5e6)
    for scheduler in SCHEDULERS:
        placement = scheduler(graph, cluster).placement
        peak = simulate(graph, cluster, placement).peak_memory
        assert np.all(peak <= 2.5e6), scheduler.__name__
        assert len(set(placement.tolist())) == 2, scheduler.__name__


def test_m_topo_blocks_follow_speed():
    # 8 equal ops in a chain; device 1 twice as fast: shares 8/3 and 16/3 op costs
    graph = Graph.from_edges([10.0] * 8, [0.0] * 8, [(i, i + 1) for i in range(7)])
    placement = listsched.m_topo(graph, Cluster(n_devices=2, speed=(1.0, 2.0))).placement
    assert placement.tolist() == [0, 0, 1, 1, 1, 1, 1, 1]


@pytest.mark.parametrize("method", ["m-topo", "m-etf", "m-sct"])
def test_a_scheduler_that_cannot_fit_memory_says_so(method, capsys):
    # Three independent ops of 10 bytes of parameters, two devices of 15 bytes: one op per device
    # fits, the third fits nowhere, and the result says so instead of dropping the limit quietly.
    graph = pj.Graph.from_edges([5.0, 5.0, 5.0], [0.0] * 3, [], param_bytes=[10.0] * 3)
    cluster = pj.Cluster(2, memory=15.0)
    result = run_method(method, graph, cluster, jax.random.key(0))
    assert result.note == (
        "no device had memory left for 1 of 3 ops (by the scheduler's memory bound); they were "
        "placed without it"
    )
    assert not result.fits_memory
    assert run_method(method, graph, pj.Cluster(2, memory=30.0), jax.random.key(0)).note == ""


def _naive_etf(graph: Graph, cluster: Cluster, devices_of) -> Schedule:
    """ETF as written in the literature: at every step probe every ready (op, device) pair
    afresh and commit the smallest (start, -rank, device, op). No caches."""
    rank = upward_rank(graph, cluster)
    timeline = Timeline(graph, cluster)
    waiting = graph.in_degree.copy()
    ready = set(np.flatnonzero(waiting == 0).tolist())
    while ready:
        candidates = []
        for v in ready:
            for d in devices_of(timeline, v):
                start, transfers = timeline.probe(v, d)
                candidates.append(((start, -rank[v], d, v), transfers))
        (start, _, d, v), transfers = min(candidates, key=lambda c: c[0])
        timeline.commit(v, d, start, transfers)
        ready.discard(v)
        for c in graph.children(v).tolist():
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.add(c)
    return timeline.schedule()


def _tight_case(seed: int) -> tuple[Graph, Cluster]:
    """A random case whose devices hold 20-60% of the graph's bytes (or all of it), a third of
    them with co-location groups."""
    graph, cluster, _ = random_case(seed, max_ops=50)
    rng = np.random.default_rng(seed)
    share = rng.choice([0.0, 0.2, 0.35, 0.6])
    if share:
        total = float((graph.param_bytes + graph.out_bytes).sum())
        cluster = dataclasses.replace(cluster, memory=total * share + 1.0)
    if rng.random() < 0.35:
        groups = rng.integers(0, max(1, graph.n_ops // 4), graph.n_ops)
        colocation = np.where(rng.random(graph.n_ops) < 0.4, groups, -1)
        graph = Graph.from_edges(
            graph.cost, graph.out_bytes, graph.edges, graph.param_bytes, colocation=colocation
        )
    return graph, cluster


def test_etf_schedulers_equal_a_naive_etf_on_random_cases():
    # m-ETF, m-SCT and the fixed-placement estimate keep probes and memory checks between
    # steps; the naive loop recomputes everything at every step. Same placements, same times.
    overflowing = restricted = 0
    for seed in range(120):
        graph, cluster = _tight_case(seed)
        favourite = listsched.favourite_parents(graph, cluster)
        fixed = np.random.default_rng(seed).integers(0, cluster.n_devices, graph.n_ops)

        def sct(timeline, v, favourite=favourite):
            allowed = timeline.devices(v)
            u = favourite[v]
            return [timeline.place[u]] if u >= 0 and timeline.place[u] in allowed else allowed

        for fast, naive in [
            (listsched.m_etf(graph, cluster), _naive_etf(graph, cluster, Timeline.devices)),
            (listsched.m_sct(graph, cluster), _naive_etf(graph, cluster, sct)),
            (
                listsched.estimate(graph, cluster, fixed),
                _naive_etf(graph, cluster, lambda _, v, fixed=fixed: [int(fixed[v])]),
            ),
        ]:
            assert fast.placement.tolist() == naive.placement.tolist(), seed
            assert fast.start.tolist() == naive.start.tolist(), seed
            assert fast.end.tolist() == naive.end.tolist(), seed
            assert fast.overflowing == naive.overflowing, seed
            overflowing += fast.overflowing > 0
        roomy = dataclasses.replace(cluster, memory=1e18)
        restricted += not np.array_equal(
            listsched.m_etf(graph, cluster).placement, listsched.m_etf(graph, roomy).placement
        )
    assert overflowing > 5 and restricted > 5  # the memory bound was exercised
