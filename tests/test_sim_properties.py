"""Property-based checks (hypothesis): JAX simulator == reference on small random instances."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import placeto_jax as pj
from placeto_jax.sim.padded import pad_graph

MAX_OPS = 12
SIZES = dict(n_pad=16, max_children=16, n_chains=16, n_edges=128)  # one compiled shape


@st.composite
def instances(draw):
    n = draw(st.integers(1, MAX_OPS))
    label = draw(st.permutations(range(n)))
    pairs = [(i, j) for j in range(n) for i in range(j)]
    chosen = draw(st.lists(st.sampled_from(pairs), max_size=3 * n)) if pairs else []
    edges = [(label[i], label[j]) for i, j in chosen]
    cost = draw(st.lists(st.sampled_from([0.0, 1.0, 2.5, 10.0]), min_size=n, max_size=n))
    size = draw(st.lists(st.sampled_from([0.0, 7600.0, 15200.0]), min_size=n, max_size=n))
    graph = pj.Graph.from_edges(cost, size, edges)
    cluster = pj.Cluster(
        3,
        speed=draw(st.sampled_from([1.0, [1.0, 2.0, 0.5]])),
        delta1=draw(st.sampled_from([0.0, 5.7])),
        delta2=draw(st.sampled_from([0.0, 25.0])),
        broadcast=draw(st.booleans()),
    )
    placement = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    return graph, cluster, np.asarray(placement)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_jax_simulator_equals_reference(instance):
    graph, cluster, placement = instance
    got = pj.simulate(graph, cluster, placement, padding=pad_graph(graph, **SIZES))
    want = pj.simulate_reference(graph, cluster, placement)
    for field in ("start", "end", "peak_memory", "transfer_start", "arrival"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)


@settings(max_examples=150, deadline=None)
@given(instances())
def test_schedule_invariants(instance):
    """Every op starts after its inputs arrive; ops on one device never overlap."""
    graph, cluster, placement = instance
    result = pj.simulate_reference(graph, cluster, placement)
    for u, v in graph.edges:
        same = placement[u] == placement[v]
        ready = result.end[u] if same else result.arrival[u, placement[v]]
        assert result.start[v] >= ready
    for d in range(cluster.n_devices):
        ops = np.flatnonzero(placement == d)
        order = ops[np.lexsort((result.end[ops], result.start[ops]))]
        assert np.all(result.start[order[1:]] >= result.end[order[:-1]])
    assert result.makespan == (result.end.max())
