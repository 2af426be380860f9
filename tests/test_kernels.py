"""Ops that run several kernels (`Graph.kernels`): a grouped op holds its members' kernels, so a
grouped graph on one device takes as long as its op graph, and both simulators agree exactly.

An op of k >= 1 kernels runs `cost / speed + (k - 1) delta1`: its kernels back to back with the
gap the device leaves after every kernel (simulator rule 2), then that gap once more.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import placeto_jax as pj
from conftest import NATIVE
from placeto_jax import precision
from placeto_jax.graphs import group, resolve_graph
from placeto_jax.graphs.io import graph_from_dict, graph_to_dict
from placeto_jax.sim import api
from placeto_jax.sim.core import SimGraph
from placeto_jax.sim.padded import pad_graph
from randgraphs import random_case

SIZES = dict(n_pad=64, max_children=64, n_chains=64, n_edges=1024)  # one compile for all cases


@functools.cache
def batch_loop():
    return jax.jit(api.simulate_batch, static_argnums=(3, 4))


def with_kernels(graph: pj.Graph, seed: int) -> pj.Graph:
    """`graph` with 1 to 4 kernels on every op of nonzero cost."""
    rng = np.random.default_rng(seed)
    kernels = np.where(graph.cost > 0, rng.integers(1, 5, graph.n_ops), 0)
    return pj.Graph.from_edges(
        graph.cost, graph.out_bytes, graph.edges, param_bytes=graph.param_bytes, kernels=kernels
    )


def on_one_device(graph: pj.Graph, cluster: pj.Cluster) -> float:
    return float(pj.simulate(graph, cluster, np.zeros(graph.n_ops, np.int32)).makespan)


def test_an_op_of_three_kernels_by_hand():
    # a (cost 100, 3 kernels) -> b (cost 50, 1 kernel) on one K80 (delta1 5.7 µs):
    # a runs 100 + 2 x 5.7 = 111.4 µs, the device is free at 117.1, b ends at 167.1.
    graph = pj.Graph.from_edges([100.0, 50.0], [8.0, 8.0], [(0, 1)], kernels=[3, 1])
    cluster = pj.Cluster.preset("placeto-k80", 2)
    for simulate in (pj.simulate, pj.simulate_reference):
        result = simulate(graph, cluster, [0, 0])
        np.testing.assert_allclose(result.start, [0.0, 117.1], rtol=1e-15)
        np.testing.assert_allclose(result.end, [111.4, 167.1], rtol=1e-15)


@pytest.mark.parametrize(("spec", "targets"), [("layered:300", (20, 60, 150)), ("cnn:6", (30,))])
def test_a_grouped_graph_on_one_device_takes_as_long_as_its_op_graph(spec, targets):
    graph = resolve_graph(spec)
    assert np.all(graph.cost > 0)
    for preset in ("placeto-k80", "v100"):
        cluster = pj.Cluster.preset(preset, 1)
        whole = on_one_device(graph, cluster)
        for target in targets:
            grouped = group(graph, target=target).graph
            assert grouped.kernel_counts.sum() == graph.n_ops
            np.testing.assert_allclose(on_one_device(grouped, cluster), whole, rtol=1e-12)
            reference = pj.simulate_reference(grouped, cluster, np.zeros(grouped.n_ops, int))
            np.testing.assert_allclose(float(reference.makespan), whole, rtol=1e-12)


def check_loop_against_reference(loop: str, seeds, devices: int | None) -> None:
    """Both simulators on random cases with kernels (of `devices` devices only, when given, so
    that one program serves every case), bit for bit in float64."""
    f64 = np.float64
    with precision.scope(f64):
        for seed in seeds:
            graph, cluster, placements = random_case(seed)
            if devices is not None and (cluster.n_devices, cluster.broadcast) != (devices, True):
                continue
            graph = with_kernels(graph, seed)
            rows = np.zeros((len(placements), SIZES["n_pad"]), np.int32)
            rows[:, : graph.n_ops] = placements
            out = batch_loop()(
                SimGraph.from_padded(pad_graph(graph, **SIZES), f64),
                api.sim_cluster(cluster, f64),
                jnp.asarray(rows),
                cluster.broadcast,
                loop,
            )
            for b, placement in enumerate(placements):
                want = pj.simulate_reference(graph, cluster, placement)
                np.testing.assert_array_equal(out.makespan[b], want.makespan, err_msg=str(seed))
                np.testing.assert_array_equal(out.start[b, : graph.n_ops], want.start)
                np.testing.assert_array_equal(out.end[b, : graph.n_ops], want.end)


@pytest.mark.parametrize("loop", [NATIVE, "scan", "wide"])
def test_both_loops_equal_the_reference_with_kernels(loop):
    check_loop_against_reference(loop, range(200), devices=4)


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["scan", "wide"])
def test_both_loops_equal_the_reference_with_kernels_on_every_cluster(loop):
    check_loop_against_reference(loop, range(100), devices=None)


def test_kernels_are_checked_saved_and_part_of_the_digest():
    graph = pj.Graph.from_edges([10.0, 0.0, 5.0], [1.0, 1.0, 1.0], [(0, 1), (1, 2)])
    assert graph.kernels is None and graph.kernel_counts.tolist() == [1, 0, 1]
    same = pj.Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, kernels=[1, 0, 1])
    assert same.kernels is None and same.digest == graph.digest  # the default is not stored
    more = pj.Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, kernels=[4, 0, 1])
    assert more.digest != graph.digest
    back = graph_from_dict(graph_to_dict(more))
    assert back.kernels.tolist() == [4, 0, 1] and back.digest == more.digest
    with pytest.raises(ValueError, match=r"op 1 has cost 0\.0 and 2 kernels"):
        pj.Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, kernels=[1, 2, 1])
    with pytest.raises(ValueError, match=r"op 0 has cost 10\.0 and 0 kernels"):
        pj.Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, kernels=[0, 0, 1])
    with pytest.raises(ValueError, match=r"kernels must be 3 integers >= 0"):
        pj.Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, kernels=[1, 0])
