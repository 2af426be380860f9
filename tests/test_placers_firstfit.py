"""Memory first-fit (`placers.firstfit`): hand-derived placements where parameters alone fill
the devices, where live outputs do (the simulator's memory, not a bound), and device order."""

from __future__ import annotations

import jax

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.placers import run_method
from placeto_jax.placers.firstfit import first_fit

KEY = jax.random.key(0)


def _chain(n: int, out_bytes: float, param_bytes: float) -> Graph:
    return Graph.from_edges(
        [10.0] * n,
        [out_bytes] * n,
        [(i, i + 1) for i in range(n - 1)],
        param_bytes=[param_bytes] * n,
    )


def test_parameters_fill_devices_in_order_and_the_rest_stays_on_the_sink():
    # 6 ops of 4 bytes of parameters, no outputs; 3 devices of 10 bytes; device 2 is the sink.
    # op 0: devices 0 and 1 tried (2 rows), 0 fits. op 1: both tried, 0 (8 bytes). op 2: 0 has
    # no room for 4 more (12 > 10), 1 tried alone. op 3: 1 (8). ops 4, 5: no room, not tried.
    # Evaluations: the sink placement, then 2 + 2 + 1 + 1 rows.
    solution = first_fit(_chain(6, 0.0, 4.0), Cluster(n_devices=3, memory=10.0), KEY, None)
    assert solution.placement.tolist() == [0, 0, 1, 1, 2, 2]
    assert solution.evaluations == 7


def test_live_outputs_count_as_the_simulator_frees_them():
    # 4 ops, outputs of 4 bytes, no parameters; devices of 7 bytes. op 0 on device 0 holds 4
    # until its transfer to the sink arrives. op 1 on device 0 would start while op 0's output
    # waits for op 1 (4 + 4 = 8 > 7); on device 1 it holds the received copy and its own output
    # (8). ops 2 and 3 likewise hold an input copy and their output anywhere but the sink.
    graph, cluster = _chain(4, 4.0, 0.0), Cluster(n_devices=3, memory=7.0)
    placement = first_fit(graph, cluster, KEY, None).placement
    assert placement.tolist() == [0, 2, 2, 2]
    peak = simulate(graph, cluster, placement).peak_memory
    assert peak.tolist() == [4.0, 0.0, 8.0]


def test_the_fastest_device_first_and_a_fitting_graph_stays_on_it():
    cluster = Cluster(n_devices=3, speed=(1.0, 2.0, 1.0), memory=100.0)
    result = run_method("first-fit", _chain(5, 4.0, 4.0), cluster, KEY)
    assert result.placement.tolist() == [1] * 5
    assert result.fits_memory


def test_a_graph_that_fits_nowhere_ends_on_the_sink():
    # every op alone needs 20 bytes of parameters: no device of 10 bytes is ever tried
    solution = first_fit(_chain(3, 0.0, 20.0), Cluster(n_devices=2, memory=10.0), KEY, None)
    assert solution.placement.tolist() == [1, 1, 1] and solution.evaluations == 1
