"""The wide-graph loop (`sim/wide.py`) against the reference: the same 520 random cases as
test_sim.py (zero costs, ties, rounds at one instant, 1-8 devices, both transfer models), with
blocks and rows small enough that every case uses several blocks and rows of consumers (half of
the cases in the default suite, the other half in `make test-slow`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import precision
from placeto_jax.sim import api
from placeto_jax.sim.core import SimGraph
from placeto_jax.sim.padded import pad_graph
from placeto_jax.sim.wide import block_size, simulate_lanes_wide
from randgraphs import random_case

F64 = np.float64
SIZES = dict(n_pad=64, max_children=64, n_chains=64, n_edges=1024)  # one compile for all


@functools.cache
def _loop(row: int, block: int):
    fn = functools.partial(simulate_lanes_wide, row=row, block=block)
    return jax.jit(fn, static_argnums=3)


def _check(seeds, row: int, block: int) -> None:
    with precision.scope(F64):
        for seed in seeds:
            graph, cluster, placements = random_case(seed)
            rows = np.zeros((len(placements), SIZES["n_pad"]), np.int32)
            rows[:, : graph.n_ops] = placements
            out = _loop(row, block)(
                SimGraph.from_padded(pad_graph(graph, **SIZES), F64),
                api.sim_cluster(cluster, F64),
                jnp.asarray(rows),
                cluster.broadcast,
            )
            n = graph.n_ops
            for b, placement in enumerate(placements):
                want = pj.simulate_reference(graph, cluster, placement)
                got = {
                    "makespan": out.makespan[b],
                    "start": out.start[b, :n],
                    "end": out.end[b, :n],
                    "peak_memory": out.peak_memory[b],
                    "transfer_start": np.where(
                        np.isneginf(out.transfer_start[b, :n]), np.nan, out.transfer_start[b, :n]
                    ),
                    "arrival": np.where(
                        np.isneginf(out.arrival[b, :n]), np.nan, out.arrival[b, :n]
                    ),
                }
                for field, value in got.items():
                    np.testing.assert_array_equal(
                        value, getattr(want, field), err_msg=f"seed {seed} row {b} {field}"
                    )


def test_wide_loop_equals_the_reference_on_every_32nd_random_case():
    """Rows of 2 consumers, blocks of 4 slots (16 blocks): 17 cases x 4 placements, exact."""
    _check(range(0, 520, 32), row=2, block=4)


@pytest.mark.slow
def test_wide_loop_equals_the_reference_on_the_other_random_cases():
    _check([seed for seed in range(520) if seed % 32], row=2, block=4)


@pytest.mark.slow
@pytest.mark.parametrize(("row", "block"), [(3, 5), (1, 1), (8, 32)])
def test_wide_loop_equals_the_reference_for_other_row_and_block_sizes(row, block):
    _check(range(0, 520, 4), row, block)


def test_the_wide_loop_stays_exact_on_a_wide_graph():
    # 300 chains of two ops (an op and its consumer on another device half the time), with
    # zero costs and shared consumers: at least WIDE_SLOTS chain slots.
    rng = np.random.default_rng(5)
    n = 600
    cost = rng.choice([0.0, 10.0, 25.0], size=n)
    edges = [(i, i + 300) for i in range(300)] + [
        (i, 300 + (i * 7) % 300) for i in range(0, 300, 3)
    ]
    graph = pj.Graph.from_edges(cost, rng.choice([0.0, 7600.0], size=n), sorted(set(edges)))
    assert api.padded(graph).width >= api.WIDE_SLOTS
    for broadcast in (True, False):
        cluster = pj.Cluster(3, broadcast=broadcast)
        placements = rng.integers(0, 3, size=(3, n))
        got = pj.simulate(graph, cluster, placements, loop="wide")
        for b in range(3):
            want = pj.simulate_reference(graph, cluster, placements[b])
            np.testing.assert_array_equal(got.start[b], want.start)
            np.testing.assert_array_equal(got.peak_memory[b], want.peak_memory)


@pytest.mark.slow
def test_wide_loop_equals_the_scan_loop_in_float32():
    """Times as float32 bit patterns order as the floats do: both loops agree to the bit."""
    with precision.scope(np.float32):
        for seed in range(520):
            graph, cluster, placements = random_case(seed)
            if cluster.n_devices != 4:  # two compiled shapes per loop (broadcast or not)
                continue
            rows = np.zeros((len(placements), SIZES["n_pad"]), np.int32)
            rows[:, : graph.n_ops] = placements
            args = (
                SimGraph.from_padded(pad_graph(graph, **SIZES), np.float32),
                api.sim_cluster(cluster, np.float32),
                jnp.asarray(rows),
                cluster.broadcast,
            )
            wide = api.simulate_batch(*args, loop="wide")
            scan = api.simulate_batch(*args, loop="scan")
            assert wide.end.dtype == np.float32
            for a, b in zip(wide, scan, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"seed {seed}")


def test_block_size_is_the_power_of_two_nearest_the_root_of_devices_times_slots():
    # sqrt(4 * 256) = 32; sqrt(4 * 392) = 39.6 -> 2^5.31 -> 32; sqrt(4 * 640) = 50.6 -> 2^5.66
    # -> 64; sqrt(4 * 1320) = 72.7 -> 2^6.18 -> 64; sqrt(8 * 8192) = 256, capped at 128;
    # sqrt(1 * 8) = 2.8, raised to 16.
    sizes = [(256, 4), (392, 4), (640, 4), (1320, 4), (8192, 8), (8, 1)]
    assert [block_size(w, d) for w, d in sizes] == [32, 32, 64, 64, 128, 16]
