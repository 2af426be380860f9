"""Makespan lower bounds (sim/bound.py): hand-derived cases, and every placement of small random
graphs simulated (no placement may beat the bound, and a reachable target is never excluded)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from conftest import experiment
from placeto_jax import Cluster, Graph, simulate
from placeto_jax.sim.bound import exclusion, makespan_lower_bound
from randgraphs import random_case

K80 = Cluster.preset("placeto-k80", 2)  # delta1 5.7 µs, 7,600 bytes/µs
SLOW = 7.6e6  # bytes: a 1,000 µs transfer


def test_chain_bound_is_the_serial_time():
    """a (100 µs) then b (50 µs); a's 200 µs transfer loses to the 5.7 µs gap on one device."""
    graph = Graph.from_edges([100.0, 50.0], [1.52e6, 0.0], [(0, 1)])
    assert makespan_lower_bound(graph, K80) == pytest.approx(155.7)
    assert simulate(graph, K80, [0, 0]).makespan == pytest.approx(155.7)


def test_independent_ops_share_the_devices():
    """4 independent ops of 100 µs on 2 devices: two each, 100 + 5.7 + 100."""
    graph = Graph.from_edges([100.0] * 4, [0.0] * 4, [])
    assert makespan_lower_bound(graph, K80) == pytest.approx(205.7)
    assert _optimum(graph, K80) == pytest.approx(205.7)


def test_kernels_count_their_inner_gaps():
    """a runs 3 kernels: 100 + 2 x 5.7 µs, then b; one device: 111.4 + 5.7 + 50."""
    graph = Graph.from_edges([100.0, 50.0], [1.52e6, 0.0], [(0, 1)], kernels=[3, 1])
    assert makespan_lower_bound(graph, K80) == pytest.approx(167.1)
    assert simulate(graph, K80, [0, 0]).makespan == pytest.approx(167.1)


def test_children_that_share_the_device_run_one_at_a_time():
    """u (100) feeds c1, c2 (50 each) over a 1,000 µs transfer: they stay on u's device and run
    in turn (100 + 5.7 + 50 + 5.7 + 50), where the critical path says 155.7."""
    graph = Graph.from_edges([100.0, 50.0, 50.0], [SLOW, 0.0, 0.0], [(0, 1), (0, 2)])
    assert exclusion(graph, K80, np.inf).bound_us == pytest.approx(211.4)
    assert makespan_lower_bound(graph, K80) == pytest.approx(211.4)
    assert _optimum(graph, K80) == pytest.approx(211.4)


def test_parents_that_share_the_device_run_one_at_a_time():
    """p1, p2 (50 each) feed v (100): 50 + 5.7 + 50 + 5.7 + 100."""
    graph = Graph.from_edges([50.0, 50.0, 100.0], [SLOW, SLOW, 0.0], [(0, 2), (1, 2)])
    assert makespan_lower_bound(graph, K80) == pytest.approx(211.4)
    assert _optimum(graph, K80) == pytest.approx(211.4)


def test_a_zero_duration_child_does_not_delay_its_sibling():
    """u (200) feeds z (0 µs) and c (50): on u's device z ends as it starts, so c runs at
    205.7 and the step ends at 255.7 (z ordered last would give 261.4)."""
    graph = Graph.from_edges([200.0, 0.0, 50.0], [1e6, 0.0, 0.0], [(0, 1), (0, 2)])
    assert makespan_lower_bound(graph, K80) == pytest.approx(255.7)
    assert _optimum(graph, K80) == pytest.approx(255.7)


def test_a_fork_worth_its_transfer_is_not_tied():
    """a (10) feeds b and c (100 each) over a 10 µs transfer: c on the other device ends at
    10 + 10 + 100 = 120, the optimum; a target of 120 ties neither edge."""
    graph = Graph.from_edges([10.0, 100.0, 100.0], [76000.0, 0.0, 0.0], [(0, 1), (0, 2)])
    assert _optimum(graph, K80) == pytest.approx(120.0)
    reached = exclusion(graph, K80, 120.0)
    assert not reached.excluded and reached.tied_edges == 0
    assert exclusion(graph, K80, 119.0).excluded
    assert makespan_lower_bound(graph, K80) == pytest.approx(120.0)
    fast_bus = Cluster(2, bandwidth=(7600.0, 76000.0))  # 10x the bytes, sent from device 1
    graph = Graph.from_edges([10.0, 100.0, 100.0], [760000.0, 0.0, 0.0], [(0, 1), (0, 2)])
    assert _optimum(graph, fast_bus) == pytest.approx(120.0)
    assert makespan_lower_bound(graph, fast_bus) == pytest.approx(120.0)


def test_tied_edges_prove_a_target_out_of_reach():
    """a forks into two branches of two ops that join at e, every op 100 µs, every transfer
    1,000 µs. Without ties the bound serialises only the join (522.8 µs). A placement of at
    most 600 µs must keep every edge on one device, so its 6 ops run in turn: 600 + 5 x 5.7 =
    628.5 µs, which is the optimum: 600 is excluded, 628.5 is not."""
    edges = [(0, 1), (1, 2), (2, 5), (0, 3), (3, 4), (4, 5)]
    graph = Graph.from_edges([100.0] * 6, [SLOW] * 6, edges)
    assert exclusion(graph, K80, np.inf).bound_us == pytest.approx(522.8)
    below = exclusion(graph, K80, 600.0)
    assert below.excluded and below.bound_us == pytest.approx(628.5)
    assert (below.tied_edges, below.largest_group_ops) == (6, 6)
    assert not exclusion(graph, K80, 628.5).excluded
    assert _optimum(graph, K80) == pytest.approx(628.5)
    assert 628.5 * (1 - 2e-3) <= makespan_lower_bound(graph, K80) <= 628.5
    one = Cluster.preset("placeto-k80", 1)  # one device: one group from the start
    assert exclusion(graph, one, np.inf).bound_us == pytest.approx(628.5)


@pytest.mark.parametrize("seed", range(24))
def test_no_placement_beats_the_bound(seed):
    """Small random graphs (with 30x the transfers of `random_case` on odd seeds, co-location
    classes on every third): every placement simulated. The bound is at most the optimum, and
    for the best placements (makespan M) `exclusion(M)` is not excluded and bounds M."""
    graph, cluster, _ = random_case(seed, max_ops=7, max_devices=3)
    if seed % 2:
        graph = Graph.from_edges(graph.cost, graph.out_bytes * 30, graph.edges)
    if seed % 3 == 0 and graph.n_ops > 2:
        classes = np.full(graph.n_ops, -1)
        classes[:2] = 0
        graph = Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, colocation=classes)
    makespans = _all_makespans(graph, cluster)
    assert makespan_lower_bound(graph, cluster) <= makespans.min() + 1e-9
    for reached in np.unique(makespans)[:5]:
        verdict = exclusion(graph, cluster, float(reached) + 1e-9) if reached > 0 else None
        if verdict is not None:
            assert not verdict.excluded
            assert verdict.bound_us <= reached + 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_no_placement_beats_the_bound_on_many_graphs(seed):
    """100 graphs per seed of up to 9 ops with kernels, transfers up to 1,000 µs, and clusters
    with mixed speeds, bandwidths, gaps and broadcast: every placement simulated."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        n = int(rng.integers(3, 10))
        devices = int(rng.integers(2, 4)) if n <= 7 else 2
        density = rng.uniform(0.15, 0.6)
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < density]
        cost = rng.choice([0.0, 1.0, 5.0, 50.0, 100.0, 400.0], n)
        out_bytes = rng.choice([0.0, 7600.0, 76000.0, 7.6e5, 7.6e6], n)
        kernels = np.where(cost > 0, rng.choice([1, 1, 2, 5], n), 0)
        graph = Graph.from_edges(cost, out_bytes, edges, kernels=kernels)
        cluster = Cluster(
            devices,
            speed=tuple(rng.choice([0.5, 1.0, 2.0], devices)),
            bandwidth=tuple(rng.choice([3800.0, 7600.0, 15200.0], devices)),
            delta1=float(rng.choice([0.0, 5.7, 20.0])),
            delta2=float(rng.choice([0.0, 25.0])),
            broadcast=bool(rng.random() < 0.5),
        )
        makespans = _all_makespans(graph, cluster)
        if makespans.min() <= 0:
            continue
        assert makespan_lower_bound(graph, cluster) <= makespans.min() * (1 + 1e-9)
        for reached in np.unique(makespans)[:3]:
            assert not exclusion(graph, cluster, float(reached)).excluded


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "10", True])
def test_bad_target_is_named(bad):
    graph = Graph.from_edges([1.0], [0.0], [])
    with pytest.raises(ValueError, match="target_us"):
        exclusion(graph, K80, bad)


def test_numpy_targets_are_numbers():
    graph = Graph.from_edges([1.0], [0.0], [])
    assert exclusion(graph, K80, np.float32(0.5)).excluded  # the op alone takes 1 µs


def test_bad_tolerance_is_named():
    graph = Graph.from_edges([1.0], [0.0], [])
    with pytest.raises(ValueError, match="rel_tol"):
        makespan_lower_bound(graph, K80, rel_tol=0.0)


def test_the_experiment_never_excludes_the_heuristic_itself(tmp_path, monkeypatch):
    """experiments/lower_bounds.py on named graphs: the best heuristic is a placement, so the
    bound is at most 1 of it and a target of 1.0 is never excluded."""
    module = experiment("lower_bounds", monkeypatch)
    out = tmp_path / "bounds.json"
    argv = ["--graphs", "example:diamond,layered:30", "--devices", "3", "--ratio", "1.0",
            "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["graph"], r["devices"]) for r in rows] == [("example:diamond", 3), ("layered:30", 3)]
    assert all(0 < r["bound_ratio"] <= 1 + 1e-9 and not r["excluded"] for r in rows)
    with pytest.raises(SystemExit):
        module.main(["--graphs", "example:diamond", "--ratio", "0"])


def _all_makespans(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Makespans of every placement that keeps each co-location class on one device."""
    classes = graph.colocation_classes
    _, first = np.unique(classes, return_index=True)
    units = np.unique(classes, return_inverse=True)[1]
    rows = np.array(list(itertools.product(range(cluster.n_devices), repeat=first.size)))
    return simulate(graph, cluster, rows[:, units]).makespan


def _optimum(graph: Graph, cluster: Cluster) -> float:
    return float(_all_makespans(graph, cluster).min())
