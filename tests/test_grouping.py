"""Grouping: hand-derived merges of chains, diamonds, scopes and co-location; expansion of
placements; the grouped graph is a DAG that simulates; argument validation."""

from __future__ import annotations

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import Graph
from placeto_jax.graphs.generators import diamond
from placeto_jax.graphs.grouping import _State, group
from placeto_jax.graphs.stats import graph_stats
from randgraphs import random_case


def chain4() -> Graph:
    return Graph.from_edges(
        cost=[10.0, 20.0, 30.0, 40.0],
        out_bytes=[100.0, 1.0, 300.0, 5.0],
        edges=[(0, 1), (1, 2), (2, 3)],
        param_bytes=[1.0, 2.0, 3.0, 4.0],
    )


def test_chain_of_four_to_two_groups():
    # Round 1 matches the heaviest edges: (0,1) with 100 bytes and (2,3) with 300 bytes.
    g = group(chain4(), target=2)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 1, 1])
    np.testing.assert_array_equal(g.graph.cost, [30.0, 70.0])
    np.testing.assert_array_equal(g.graph.param_bytes, [3.0, 7.0])
    np.testing.assert_array_equal(g.graph.out_bytes, [1.0, 5.0])  # op 1 leaves; op 3 is a sink
    np.testing.assert_array_equal(g.graph.edges, [[0, 1]])


def test_chain_to_one_group():
    g = group(chain4(), target=1)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 0, 0])
    np.testing.assert_array_equal(g.graph.cost, [100.0])
    np.testing.assert_array_equal(g.graph.out_bytes, [5.0])
    assert g.graph.names == ("group",)  # op0..op3 share no name component


def test_diamond_never_groups_a_with_d():
    for target in (1, 2, 3):
        g = group(diamond(), target=target)
        a, b, c, d = g.op_to_group
        assert g.n_groups == target
        assert not (a == d and b != a), "a and d together without b is a cycle"
        assert not (a == d and c != a), "a and d together without c is a cycle"


def test_diamond_to_two_groups_by_hand():
    # a 100 -> b 50, c 30 -> d 10; critical path a, b, d = 160 µs. Round 1: no merge is free;
    # every merge makes the critical path 190 (e.g. {a, b} delays c to 150, then 30 + 10) and
    # lengthens its own path by 30; bytes break the tie: (a, b) and (a, c) carry 76000 and
    # (a, b) wins by index. Round 2: ({a, b}, c) and (c, d) are free (their paths are 190
    # already); ({a, b}, c) carries 76000 bytes, (c, d) 7600. {a, b, c} and {d}.
    g = group(diamond(), target=2)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 0, 1])
    np.testing.assert_array_equal(g.graph.cost, [180.0, 10.0])
    np.testing.assert_array_equal(g.graph.out_bytes, [7600.0 + 7600.0, 0.0])
    assert g.graph.names == ("group", "d")


def test_can_merge_rejects_a_path_through_a_third_group():
    # a -> d directly and a -> b -> d: merging a with d would put b on a cycle.
    graph = Graph.from_edges([1.0] * 3, [1.0] * 3, [(0, 1), (1, 2), (0, 2)])
    state = _State.of(graph, colocated=False)
    assert not state.can_merge(0, 2)
    assert state.can_merge(0, 1) and state.can_merge(1, 2)


def named_graph(names, edges) -> Graph:
    n = len(names)
    return Graph.from_edges([1.0] * n, [1.0] * n, edges, names=names)


def test_scope_depth_one_and_two():
    names = ["a/b/c/x", "a/b/d/y", "a/e/z", "f/w", "a"]
    edges = [("a/b/c/x", "a/b/d/y"), ("a/b/d/y", "a/e/z"), ("a/e/z", "f/w"), ("a", "a/b/c/x")]
    g = named_graph(names, edges)
    one = group(g, scope_depth=1)
    np.testing.assert_array_equal(one.op_to_group, [0, 0, 0, 1, 0])
    assert one.graph.names == ("a", "f/w")
    two = group(g, scope_depth=2)
    np.testing.assert_array_equal(two.op_to_group, [0, 0, 1, 2, 3])
    assert two.graph.names == ("a/b", "a/e/z", "f/w", "a")
    np.testing.assert_array_equal(two.graph.edges, [[0, 1], [1, 2], [3, 0]])


def test_scope_is_split_where_data_leaves_and_returns():
    # s/x -> t/y -> s/z: one group {s/x, s/z} would form a cycle with t/y, so s stays in two.
    g = named_graph(["s/x", "t/y", "s/z"], [("s/x", "t/y"), ("t/y", "s/z")])
    out = group(g, scope_depth=1)
    np.testing.assert_array_equal(out.op_to_group, [0, 1, 2])
    assert out.graph is g


def test_depth_zero_is_one_group():
    g = named_graph(["a/x", "b/y", "c"], [("a/x", "b/y")])
    np.testing.assert_array_equal(group(g, scope_depth=0).op_to_group, [0, 0, 0])


def test_op_type_is_most_common():
    g = Graph.from_edges(
        [1.0] * 3, [1.0] * 3, [(0, 1), (1, 2)], names=["m/a", "m/b", "m/c"],
        op_types=["add", "dot", "dot"],
    )  # fmt: skip
    assert group(g, scope_depth=1).graph.op_types == ("dot",)


def coloc_graph(colocation) -> Graph:
    # 0 -> 1 -> 2, 3 alone
    return Graph.from_edges(
        [1.0, 2.0, 3.0, 4.0], [1.0] * 4, [(0, 1), (1, 2)], colocation=colocation
    )


def test_colocation_respected_and_kept_through_target():
    g = group(coloc_graph([0, -1, -1, 0]), target=2)
    # {0, 3} first; then edges ({0,3}, 1) and (1, 2) tie (1 byte, single) and the first wins.
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 1, 0])
    np.testing.assert_array_equal(g.graph.cost, [7.0, 3.0])
    assert g.graph.colocation is None
    no = group(coloc_graph([0, -1, -1, 0]), respect_colocation=False)
    np.testing.assert_array_equal(no.op_to_group, [0, 1, 2, 3])


def test_colocated_chain_merges():
    g = group(coloc_graph([5, 5, 5, -1]))
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 0, 1])
    np.testing.assert_array_equal(g.graph.cost, [6.0, 4.0])


def test_colocation_around_an_outside_op_stays_two_tied_nodes():
    # 0 -> 1 -> 2 with 0 and 2 co-located: one node would be a cycle with 1, so they stay apart
    # and keep their class, which the agent and every placer read as a tie.
    g = group(coloc_graph([7, -1, 7, -1]))
    np.testing.assert_array_equal(g.op_to_group, [0, 1, 2, 3])
    np.testing.assert_array_equal(g.graph.colocation, [7, -1, 7, -1])
    np.testing.assert_array_equal(g.graph.colocation_classes, [0, 1, 0, 2])
    # A target counts decisions (tied groups once): 3 here, so target=2 needs one merge.
    two = group(coloc_graph([7, -1, 7, -1]), target=2)
    decision = two.graph.colocation_classes[two.op_to_group]
    assert decision.max() + 1 == 2 and decision[0] == decision[2]


def test_a_merge_across_classes_ties_them_transitively():
    # 0 -> 1 -> 2 -> 3, 4 alone; classes {0, 2} and {1, 3} cannot merge (an op between), but
    # the scope step merges 0 and 1, so the groups {0, 1}, {2} and {3} are one tie.
    graph = Graph.from_edges(
        [1.0] * 5, [1.0] * 5, [(0, 1), (1, 2), (2, 3)],
        names=["s/x", "s/y", "t/x", "u/x", "v/x"], colocation=[5, 6, 5, 6, -1],
    )  # fmt: skip
    g = group(graph, scope_depth=1)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 1, 2, 3])
    np.testing.assert_array_equal(g.graph.colocation, [0, 0, 0, -1])
    np.testing.assert_array_equal(g.graph.colocation_classes, [0, 0, 0, 1])


def test_expand_single_and_batched():
    g = group(chain4(), target=2)
    np.testing.assert_array_equal(g.expand([1, 0]), [1, 1, 0, 0])
    np.testing.assert_array_equal(
        g.expand(np.array([[1, 0], [0, 2]])), [[1, 1, 0, 0], [0, 0, 2, 2]]
    )
    with pytest.raises(ValueError, match=r"shape \[2\] or \[B, 2\]"):
        g.expand([0, 1, 2])


def test_grouped_and_expanded_placements_simulate():
    graph = pj.graphs.generators.layered(60, seed=3)
    g = group(graph, target=8)
    cluster = pj.Cluster(n_devices=3, speed=1.0, delta1=0.0, delta2=0.0)
    placement = np.arange(g.n_groups) % 3
    grouped = pj.simulate(g.graph, cluster, placement)
    ops = pj.simulate(graph, cluster, g.expand(placement))
    assert np.isfinite(grouped.makespan) and np.isfinite(ops.makespan)
    batch = pj.simulate(graph, cluster, g.expand(np.stack([placement, placement[::-1]])))
    assert batch.makespan.shape == (2,)
    # All on one device (speed 1, no overheads) both makespans are the total cost.
    one = np.zeros(g.n_groups, dtype=int)
    np.testing.assert_allclose(pj.simulate(g.graph, cluster, one).makespan, graph.cost.sum())
    np.testing.assert_allclose(
        pj.simulate(graph, cluster, g.expand(one)).makespan, graph.cost.sum()
    )


@pytest.mark.parametrize("seed", range(20))
def test_random_dags_stay_acyclic(seed):
    graph, _, _ = random_case(seed, max_ops=40)
    rng = np.random.default_rng(seed)
    target = int(rng.integers(1, graph.n_ops + 1))
    g = group(graph, target=target)  # Graph.from_edges raises on a cycle
    assert g.n_groups == target
    group_edges = {tuple(e) for e in g.graph.edges.tolist()}
    for u, v in graph.edges.tolist():
        gu, gv = int(g.op_to_group[u]), int(g.op_to_group[v])
        if gu != gv:
            assert (gu, gv) in group_edges
    np.testing.assert_allclose(g.graph.cost.sum(), graph.cost.sum())
    np.testing.assert_allclose(g.graph.param_bytes.sum(), graph.param_bytes.sum())
    topo = np.empty(g.n_groups, dtype=int)
    topo[g.graph.topological_order] = np.arange(g.n_groups)
    assert all(topo[a] < topo[b] for a, b in group_edges)


def test_unconnected_ops_merge_cheapest_first():
    g = Graph.from_edges([5.0, 1.0, 2.0, 9.0], [1.0] * 4, [])
    np.testing.assert_array_equal(group(g, target=3).op_to_group, [0, 1, 1, 2])


def test_target_at_least_n_is_identity():
    graph = chain4()
    for target in (4, 10):
        g = group(graph, target=target)
        assert g.graph is graph
        np.testing.assert_array_equal(g.op_to_group, np.arange(4))


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"target": 0}, "target"), ({"scope_depth": -1}, "scope_depth")]
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        group(chain4(), **kwargs)


def test_scope_ignores_transformation_wrappers():
    """Forward (jvp) and backward (transpose(jvp)) ops of one module share its scope."""
    names = ["jvp(Net)/fc/dot", "jvp(Net)/fc/add", "transpose(jvp(Net))/fc/dot", "jvp(Net)/out"]
    graph = Graph.from_edges([1.0] * 4, [1.0] * 4, [(0, 1), (1, 2), (2, 3)], names=names)
    grouping = group(graph, scope_depth=2)
    assert grouping.op_to_group.tolist() == [0, 0, 0, 1]
    assert grouping.graph.names == ("Net/fc", "jvp(Net)/out")


def two_branches(side_sinks: bool = False) -> Graph:
    """A cheap chain p0 -> p1 -> p2 forks into two equal branches a0 -> a1 -> a2 and
    b0 -> b1 -> b2 (10 µs an op) that join in t; with `side_sinks`, a1 and b1 also feed a
    2 µs sink each (like a weight gradient)."""
    names = ["p0", "p1", "p2", "a0", "a1", "a2", "b0", "b1", "b2", "t"]
    cost = [1.0, 1.0, 1.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 1.0]
    edges = [("p0", "p1"), ("p1", "p2"), ("p2", "a0"), ("p2", "b0"), ("a2", "t"), ("b2", "t")]
    edges += [("a0", "a1"), ("a1", "a2"), ("b0", "b1"), ("b1", "b2")]
    if side_sinks:
        names += ["ga", "gb"]
        cost += [2.0, 2.0]
        edges += [("a1", "ga"), ("b1", "gb")]
    return Graph.from_edges(cost, [4.0] * len(cost), edges, names=names)


def test_chains_collapse_and_branches_stay_apart():
    # Op graph: critical path p, a, t = 3 + 30 + 1 = 34 µs, total 64 µs. Merging along the
    # chains lengthens no path, so they collapse first; the four chains are the four groups
    # and the critical path is unchanged. (Heavy-edge matching gave p0 p1 p2 a0 | a1 a2 | b0 b1
    # | b2 t, where t waits for both branches and b2: parallelism 1.45.)
    graph = two_branches()
    g = group(graph, target=4)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    np.testing.assert_array_equal(g.graph.cost, [3.0, 30.0, 30.0, 1.0])
    assert graph_stats(graph).critical_path_us == 34.0
    assert graph_stats(g.graph).critical_path_us == 34.0
    np.testing.assert_allclose(graph_stats(g.graph).parallelism, 64.0 / 34.0)


def test_side_sinks_merge_without_joining_the_branches():
    # Op graph: critical path 34 µs, total 68 µs, parallelism 2. After the chains collapse the
    # sinks ga and gb (both ready at 23 µs, so merging them lengthens no critical path) merge,
    # then join the sink t: the branches stay apart and the critical path is 33 + 1 + 2 + 2.
    graph = two_branches(side_sinks=True)
    g = group(graph, target=4)
    np.testing.assert_array_equal(g.op_to_group, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    assert graph_stats(graph).parallelism == 2.0
    assert graph_stats(g.graph).critical_path_us == 38.0  # parallelism 1.79, 0.89 of 2
