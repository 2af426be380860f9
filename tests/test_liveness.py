"""Tensors live at a device's peak (`sim.liveness`): the spec's worked example read by hand, and
on random cases the live sum plus parameters equals the simulator's peak memory."""

from __future__ import annotations

import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate, simulate_reference
from placeto_jax.sim.liveness import allocations, peak
from randgraphs import random_case


def _worked_example() -> Graph:
    return Graph.from_edges(
        [100.0, 50.0, 30.0, 10.0], [76000.0, 7600.0, 7600.0, 0.0], [(0, 1), (0, 2), (1, 3), (2, 3)]
    )


def test_the_worked_example_peaks_and_their_tensors():
    # Placement (0, 1, 1, 0) of docs/simulator.md: a runs 0-100 on device 0 and its one transfer
    # arrives on device 1 at 110; b runs 110-160 there (its output arrives on 0 at 161), c
    # 165.7-195.7 (arrives at 196.7), d 196.7-206.7 on 0. Device 0: a's output lives [0, 110),
    # the copies of b [161, 206.7) and c [196.7, 206.7): its peak is a alone at 0. Device 1:
    # a's copy [110, 195.7), b [110, 161), c [165.7, 196.7): 83600 first at 110, a and b.
    graph, cluster = _worked_example(), Cluster(n_devices=3)
    placement = np.array([0, 1, 1, 0])
    allocs = allocations(graph, placement, simulate(graph, cluster, placement))
    on_0 = peak(graph, allocs, 0)
    assert (on_0.instant, on_0.live_bytes, on_0.tensors.tolist()) == (0.0, 76000.0, [0])
    on_1 = peak(graph, allocs, 1)
    assert (on_1.instant, on_1.live_bytes) == (110.0, 83600.0)
    assert sorted(zip(on_1.tensors.tolist(), on_1.home.tolist(), strict=True)) == [
        (0, False),
        (1, True),
    ]
    copies = sorted(
        (int(t), float(a), round(float(f), 6))
        for t, a, f, h in zip(
            allocs.tensor, allocs.allocated, allocs.freed, allocs.home, strict=True
        )
        if not h
    )
    assert copies == [(0, 110.0, 195.7), (1, 161.0, 206.7), (2, 196.7, 206.7)]
    empty = peak(graph, allocs, 2)
    assert (empty.live_bytes, empty.tensors.size) == (0.0, 0)


@pytest.mark.parametrize("seed", range(12))
def test_live_sum_plus_parameters_is_the_simulated_peak(seed):
    graph, cluster, placements = random_case(seed)
    for placement in placements:
        result = simulate_reference(graph, cluster, placement)
        allocs = allocations(graph, placement, result)
        params = np.zeros(cluster.n_devices)
        np.add.at(params, placement, graph.param_bytes)
        for device in range(cluster.n_devices):
            at_peak = peak(graph, allocs, device)
            assert at_peak.live_bytes + params[device] == pytest.approx(
                result.peak_memory[device], abs=1e-6
            )
            assert graph.out_bytes[at_peak.tensors].sum() == pytest.approx(at_peak.live_bytes)
