"""The JAX simulator against the spec's worked examples and the event-driven reference."""

from __future__ import annotations

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import placeto_jax as pj
from conftest import NATIVE
from placeto_jax import precision
from placeto_jax.graphs.generators import diamond, layered
from placeto_jax.sim.api import padded, sim_cluster, simulate_batch
from placeto_jax.sim.core import SimGraph, simulate_padded
from placeto_jax.sim.padded import chain_cover, pad_graph
from randgraphs import random_case

# docs/simulator.md, "Worked examples": placement, broadcast, starts, makespan, peak memory.
WORKED = [
    ((0, 0, 0, 0), True, (0, 105.7, 161.4, 197.1), 207.1, (91200, 0, 0)),
    ((0, 0, 0, 0), False, (0, 105.7, 161.4, 197.1), 207.1, (91200, 0, 0)),
    ((0, 1, 1, 0), True, (0, 110, 165.7, 196.7), 206.7, (76000, 83600, 0)),
    ((0, 1, 1, 0), False, (0, 110, 165.7, 196.7), 206.7, (76000, 83600, 0)),
    ((0, 1, 2, 0), True, (0, 110, 110, 161), 171, (76000, 83600, 83600)),
    ((0, 1, 2, 0), False, (0, 110, 145, 176), 186, (76000, 83600, 83600)),
]


@pytest.mark.parametrize("simulator", [pj.simulate, pj.simulate_reference])
@pytest.mark.parametrize(("placement", "broadcast", "starts", "makespan", "peak"), WORKED)
def test_worked_examples(simulator, placement, broadcast, starts, makespan, peak):
    result = simulator(diamond(), pj.Cluster(3, broadcast=broadcast), np.array(placement))
    np.testing.assert_allclose(result.start, starts, rtol=0, atol=1e-9)
    assert result.makespan == pytest.approx(makespan, abs=1e-9)
    np.testing.assert_array_equal(result.peak_memory, peak)


def test_worked_example_transfers():
    """Row 4: bus 0 sends a to device 1 (100-110), then to device 2 (135-145)."""
    result = pj.simulate(diamond(), pj.Cluster(3, broadcast=False), np.array([0, 1, 2, 0]))
    np.testing.assert_allclose(result.transfer_start[0], [np.nan, 100, 135], atol=1e-9)
    np.testing.assert_allclose(result.arrival[0], [np.nan, 110, 145], atol=1e-9)
    np.testing.assert_allclose(result.arrival[2], [176, np.nan, np.nan], atol=1e-9)  # c: 145-175


def _cases_by_shape(n_cases: int) -> dict[tuple[int, bool], list]:
    """Random cases grouped by (devices, broadcast) so each group compiles once."""
    groups: dict[tuple[int, bool], list] = {}
    for seed in range(n_cases):
        graph, cluster, placements = random_case(seed)
        groups.setdefault((cluster.n_devices, cluster.broadcast), []).append(
            (graph, cluster, placements)
        )
    return groups


F64 = np.float64


@pytest.fixture
def exact():
    """64-bit types on, for tests that call the padded core with float64 arrays directly (the
    host functions `simulate` and `simulate_rows` enable them themselves)."""
    with precision.scope(F64):
        yield


FIELDS = ("makespan", "start", "end", "peak_memory", "transfer_start", "arrival")
N_CASES = 520  # x 4 placements each
CASES = _cases_by_shape(N_CASES)


def test_differential_cases_cover_the_space():
    assert sum(len(c) for c in CASES.values()) == N_CASES
    assert {d for d, _ in CASES} == set(range(1, 9))
    assert {b for _, b in CASES} == {True, False}


@pytest.mark.parametrize("loop", [NATIVE, "scan"])
@pytest.mark.parametrize("group", sorted(CASES), ids=lambda g: f"D{g[0]}-bcast{int(g[1])}")
def test_differential_random_cases_exact(group, loop):
    """520 random DAG/cluster cases in all (4 placements each; zero costs, ties, 1-8 devices,
    unequal speeds and bandwidths, broadcast on and off) agree with the reference exactly, on
    the native CPU kernel and on the JAX scan loop (the wide loop: tests/test_sim_wide.py)."""
    for graph, cluster, placements in CASES[group]:
        sizes = pad_graph(graph, n_pad=64, max_children=64, n_chains=64, n_edges=1024)
        got = pj.simulate(graph, cluster, placements, padding=sizes, loop=loop)
        for b, placement in enumerate(placements):
            want = pj.simulate_reference(graph, cluster, placement)
            for field in FIELDS:
                np.testing.assert_array_equal(
                    getattr(got, field)[b], getattr(want, field), err_msg=field
                )


@pytest.mark.parametrize("loop", [NATIVE, "scan"])
def test_zero_duration_rounds_follow_the_reference(loop):
    """Zero-cost ops and zero-byte transfers at one instant: later rounds, tie-breaks by index."""
    cost = [0, 0, 10, 0, 5, 0]
    out_bytes = [0, 7600, 0, 0, 0, 0]
    edges = [(0, 2), (0, 3), (1, 4), (3, 5), (2, 5), (4, 5)]
    graph = pj.Graph.from_edges(cost, out_bytes, edges)
    for placement in itertools.product(range(2), repeat=6):
        for broadcast, delta in itertools.product((True, False), ((0.0, 0.0), (5.7, 25.0))):
            cluster = pj.Cluster(2, broadcast=broadcast, delta1=delta[0], delta2=delta[1])
            got = pj.simulate(graph, cluster, np.array(placement), loop=loop)
            want = pj.simulate_reference(graph, cluster, np.array(placement))
            np.testing.assert_array_equal(got.start, want.start)
            np.testing.assert_array_equal(got.peak_memory, want.peak_memory)


def test_padding_invariance():
    graph = layered(60, seed=3)
    cluster = pj.Cluster(3, speed=[1.0, 2.0, 0.5], broadcast=False)
    placements = np.random.default_rng(0).integers(0, 3, size=(5, graph.n_ops))
    small = pj.simulate(graph, cluster, placements)
    large = pj.simulate(
        graph,
        cluster,
        placements,
        padding=pad_graph(graph, n_pad=256, max_children=32, n_chains=64, n_edges=512),
    )
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(small, field), getattr(large, field))


def test_batch_equals_loop():
    graph = layered(80, seed=1)
    cluster = pj.Cluster(4)
    placements = np.random.default_rng(1).integers(0, 4, size=(7, graph.n_ops))
    batch = pj.simulate(graph, cluster, placements)
    for b, placement in enumerate(placements):
        one = pj.simulate(graph, cluster, placement)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(batch, field)[b], getattr(one, field))


@pytest.mark.slow
@pytest.mark.usefixtures("exact")
def test_explicit_vmap_equals_loop_on_padded_function():
    graph = layered(40, seed=2)
    pg = padded(graph)
    sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(pj.Cluster(2), F64)
    rows = np.zeros((3, pg.n_pad), np.int32)
    rows[:, : graph.n_ops] = np.random.default_rng(2).integers(0, 2, size=(3, graph.n_ops))
    batched = jax.vmap(simulate_padded, in_axes=(None, None, 0))(sg, sc, jnp.asarray(rows))
    for b in range(3):
        one = simulate_padded(sg, sc, jnp.asarray(rows[b]))
        np.testing.assert_array_equal(batched.end[b], one.end)
        np.testing.assert_array_equal(batched.peak_memory[b], one.peak_memory)


@pytest.mark.usefixtures("exact")
@pytest.mark.parametrize("broadcast", [True, False])
def test_chunks_of_lanes_equal_one_placement_at_a_time(broadcast):
    """67 rows: one chunk of 64 lanes and a last chunk of 3; each row as if simulated alone."""
    graph = layered(60, seed=3)
    pg = padded(graph)
    sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(pj.Cluster(3, broadcast=broadcast), F64)
    rows = np.zeros((67, pg.n_pad), np.int32)
    rows[:, : graph.n_ops] = np.random.default_rng(3).integers(0, 3, size=(67, graph.n_ops))
    batch = simulate_batch(sg, sc, jnp.asarray(rows), broadcast)
    for b in (0, 1, 63, 64, 66):
        one = simulate_padded(sg, sc, jnp.asarray(rows[b]), broadcast)
        for x, y in zip(batch, one, strict=True):
            np.testing.assert_array_equal(x[b], y)


@pytest.mark.usefixtures("exact")
def test_no_retrace_when_only_the_placement_changes():
    graph = layered(100, seed=5)
    other = layered(100, seed=6)
    sizes = dict(n_pad=128, max_children=8, n_chains=32, n_edges=256)  # one bucket for both
    cluster = pj.Cluster(4)
    rng = np.random.default_rng(0)
    pj.simulate(
        graph, cluster, rng.integers(0, 4, size=(8, 100)), padding=pad_graph(graph, **sizes)
    )
    before = simulate_batch._cache_size()
    for g in (graph, other, graph):
        placements = rng.integers(0, 4, size=(8, 100))
        pj.simulate(g, cluster, placements, padding=pad_graph(g, **sizes))
    assert simulate_batch._cache_size() == before

    traced = jax.jit(chex.assert_max_traces(simulate_padded, n=1))
    pg = padded(graph)
    sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(cluster, F64)
    for seed in range(3):
        row = np.zeros(pg.n_pad, np.int32)
        row[:100] = np.random.default_rng(seed).integers(0, 4, 100)
        traced(sg, sc, jnp.asarray(row))


def test_float32_matches_to_rounding():
    graph = layered(120, seed=4)
    cluster = pj.Cluster(4)
    placements = np.random.default_rng(4).integers(0, 4, size=(4, graph.n_ops))
    pg = padded(graph)
    rows = np.zeros((4, pg.n_pad), np.int32)
    rows[:, : graph.n_ops] = placements
    out = simulate_batch(
        SimGraph.from_padded(pg, jnp.float32), sim_cluster(cluster, jnp.float32), jnp.asarray(rows)
    )
    assert out.end.dtype == jnp.float32
    for b in range(4):
        want = pj.simulate_reference(graph, cluster, placements[b])
        np.testing.assert_allclose(out.makespan[b], want.makespan, rtol=1e-5)
        np.testing.assert_allclose(out.peak_memory[b], want.peak_memory, rtol=1e-5)


def test_result_shapes_and_units():
    graph = layered(30, seed=0)
    result = pj.simulate(graph, pj.Cluster(2), np.zeros((3, 30), dtype=int))
    assert result.makespan.shape == (3,)
    assert result.start.shape == result.end.shape == (3, 30)
    assert result.peak_memory.shape == (3, 2)
    assert result.transfer_start.shape == result.arrival.shape == (3, 30, 2)
    assert np.all(np.isnan(result.arrival))  # everything on device 0: no transfers
    single = pj.simulate(graph, pj.Cluster(2), np.zeros(30, dtype=int))
    assert single.makespan.shape == () and single.start.shape == (30,)
    np.testing.assert_array_equal(single.end, result[1].end)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (np.zeros(3, dtype=int), "shape"),
        (np.zeros((2, 5), dtype=int), "shape"),
        (np.array([0, 1, 3, 0]), "device 3, outside"),
        (np.array([0, -1, 0, 0]), "device -1"),
        (np.array([0.5, 0, 0, 0]), "integer"),
        (np.zeros((1, 1, 4), dtype=int), "shape"),
    ],
)
@pytest.mark.parametrize("simulator", [pj.simulate, pj.simulate_reference])
def test_bad_placements_fail_before_work(simulator, placement, message):
    with pytest.raises(ValueError, match=message):
        simulator(diamond(), pj.Cluster(3), placement)


def test_padding_for_another_graph_is_rejected():
    with pytest.raises(ValueError, match="padding is for a graph of"):
        pj.simulate(diamond(), pj.Cluster(2), np.zeros(4, int), padding=padded(layered(10)))


def test_pad_graph_rejects_too_small_sizes():
    with pytest.raises(ValueError, match="n_pad=2 is too small"):
        pad_graph(diamond(), n_pad=2)


def test_chain_cover_partitions_ops_into_chains():
    graph = layered(200, seed=7)
    chains = chain_cover(graph)
    ops = np.concatenate(chains)
    assert sorted(ops.tolist()) == list(range(graph.n_ops))
    for chain in chains:
        for u, v in itertools.pairwise(chain):
            assert graph.is_ancestor(int(u), int(v))
    # the diamond's width is 2 (b and c are unordered); a chain of 5 is one chain
    assert len(chain_cover(diamond())) == 2
    line = pj.Graph.from_edges([1.0] * 5, [0.0] * 5, [(i, i + 1) for i in range(4)])
    assert len(chain_cover(line)) == 1


@pytest.mark.parametrize(
    ("graph", "cluster", "placements"),
    [
        (pj.Graph.from_edges([5.0], [100.0], []), pj.Cluster(1), [[0]]),
        (pj.Graph.from_edges([1.0, 2.0, 0.0], [0.0, 10.0, 5.0], []), pj.Cluster(3), [[0, 0, 0]]),
        # absorbed time: 1e9 + 1e-9 == 1e9, so the second op ends in a later round, not later
        (
            pj.Graph.from_edges([1e9, 1e-9, 3.0], [1e12, 1.0, 0.0], [(0, 1), (1, 2)]),
            pj.Cluster(2),
            [[0, 1, 0], [1, 1, 0]],
        ),
        (layered(300, seed=1), pj.Cluster(16, broadcast=False), None),
    ],
    ids=["one-op", "no-edges", "absorbed-time", "16-devices-no-broadcast"],
)
def test_edge_cases_match_reference(graph, cluster, placements):
    if placements is None:
        placements = np.random.default_rng(0).integers(0, cluster.n_devices, (4, graph.n_ops))
    placements = np.asarray(placements)
    got = pj.simulate(graph, cluster, placements)
    for b, placement in enumerate(placements):
        want = pj.simulate_reference(graph, cluster, placement)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(got, field)[b], getattr(want, field))


def test_precision_is_an_argument_not_the_global_flag():
    # Exact float64 by default without any global flag, float32 on request, and the caller's
    # flag changes neither.
    graph = layered(50, seed=7)
    cluster = pj.Cluster(3)
    placements = np.random.default_rng(7).integers(0, 3, size=(5, graph.n_ops))
    want = [pj.simulate_reference(graph, cluster, p).makespan for p in placements]
    exact = pj.simulate(graph, cluster, placements)
    assert exact.makespan.dtype == np.float64
    np.testing.assert_array_equal(exact.makespan, want)
    fast = pj.simulate(graph, cluster, placements, dtype=np.float32)
    assert fast.makespan.dtype == np.float32
    np.testing.assert_allclose(fast.makespan, want, rtol=1e-5)
    with jax.enable_x64(True):
        np.testing.assert_array_equal(
            pj.simulate(graph, cluster, placements, dtype=np.float32).makespan, fast.makespan
        )
