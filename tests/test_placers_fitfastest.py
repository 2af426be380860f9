"""Fit-fastest (`placers.fitfastest`): hand-derived placements where parameters alone fill the
devices, where live outputs do (the simulator's memory, not a bound), and device speed."""

from __future__ import annotations

import jax

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.placers import run_method
from placeto_jax.placers.fitfastest import fit_fastest

KEY = jax.random.key(0)


def _chain(n: int, out_bytes: float, param_bytes: float) -> Graph:
    return Graph.from_edges(
        [10.0] * n,
        [out_bytes] * n,
        [(i, i + 1) for i in range(n - 1)],
        param_bytes=[param_bytes] * n,
    )


def test_parameters_fill_devices_and_the_fastest_fitting_device_wins():
    # 6 ops of 10 µs and 4 bytes of parameters, no outputs (a transfer arrives as it starts;
    # the bus is then busy 25 µs); 3 devices of 10 bytes; device 2 is the sink (ops 1.. on it).
    # op 0: devices 0 and 1 alike -> 0 (the lower index). op 1: on 0 it waits the 5.7 µs that
    # device stays busy (ends 25.7), on 1 it starts at 10 as op 0's output arrives (ends 20)
    # -> 1. op 2: on 0 it starts at 20 (ends 30) and its output leaves when 0's bus is free
    # (35); on 1 it starts at 25.7 (ends 35.7) -> 0. op 3: 0 has no room for 4 more (12 > 10),
    # 1 tried alone. ops 4, 5: no room, not tried. Evaluations: the sink placement, then
    # 2 + 2 + 2 + 1 rows.
    graph, cluster = _chain(6, 0.0, 4.0), Cluster(n_devices=3, memory=10.0)
    solution = fit_fastest(graph, cluster, KEY, None)
    assert solution.placement.tolist() == [0, 1, 0, 1, 2, 2]
    assert solution.evaluations == 8


def test_live_outputs_count_as_the_simulator_frees_them():
    # 4 ops, outputs of 4 bytes, no parameters; devices of 7 bytes. op 0 on device 0 holds 4
    # until its transfer to the sink arrives. op 1 on device 0 would start while op 0's output
    # waits for op 1 (4 + 4 = 8 > 7); on device 1 it holds the received copy and its own output
    # (8). ops 2 and 3 likewise hold an input copy and their output anywhere but the sink.
    graph, cluster = _chain(4, 4.0, 0.0), Cluster(n_devices=3, memory=7.0)
    placement = fit_fastest(graph, cluster, KEY, None).placement
    assert placement.tolist() == [0, 2, 2, 2]
    peak = simulate(graph, cluster, placement).peak_memory
    assert peak.tolist() == [4.0, 0.0, 8.0]


def test_a_chain_that_fits_goes_whole_to_the_fastest_device():
    # 1 ms ops with 76 MB outputs (10 ms transfers): device 1 (speed 2) runs each in 0.5 ms,
    # and an op next to its producer needs no transfer, so every op moves to device 1.
    graph = Graph.from_edges([1000.0] * 5, [76e6] * 5, [(i, i + 1) for i in range(4)])
    result = run_method("fit-fastest", graph, Cluster(n_devices=3, speed=(1.0, 2.0, 1.0)), KEY)
    assert result.placement.tolist() == [1] * 5
    assert result.fits_memory


def test_a_graph_that_fits_nowhere_ends_on_the_sink():
    # every op alone needs 20 bytes of parameters: no device of 10 bytes is ever tried
    solution = fit_fastest(_chain(3, 0.0, 20.0), Cluster(n_devices=2, memory=10.0), KEY, None)
    assert solution.placement.tolist() == [1, 1, 1] and solution.evaluations == 1
