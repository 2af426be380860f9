"""Graph.from_edges validation and the derived structures (order, adjacency, depth, reachability).

Expected values are derived by hand on small examples, or by brute force (DFS over the edge list,
a direct reading of "smallest-index-first topological order") on seeded random DAGs.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest

from placeto_jax import Graph

# The hand example: edges 2->0, 2->1, 4->3, 0->3, 5->1 (index order is not topological).
#
#   2 --> 0 --> 3 <-- 4        Kahn, smallest ready index first:
#   |           ^              ready {2,4,5}: 2 -> {0,4,5}: 0 -> {4,5}: 4 -> {3,5}: 3 -> {5}: 5
#   +---> 1 <-- 5              -> {1}: 1.   Order 2, 0, 4, 3, 5, 1.
HAND_EDGES = [(2, 0), (2, 1), (4, 3), (0, 3), (5, 1)]
HAND_ORDER = [2, 0, 4, 3, 5, 1]
HAND_CHILDREN = {0: [3], 1: [], 2: [0, 1], 3: [], 4: [3], 5: [1]}
HAND_PARENTS = {0: [2], 1: [2, 5], 2: [], 3: [0, 4], 4: [], 5: []}
HAND_DEPTH = [1, 1, 0, 2, 0, 0]
HAND_DESCENDANTS = {0: [3], 1: [], 2: [0, 1, 3], 3: [], 4: [3], 5: [1]}
HAND_ANCESTORS = {0: [2], 1: [2, 5], 2: [], 3: [0, 2, 4], 4: [], 5: []}


def hand_graph() -> Graph:
    return Graph.from_edges(
        cost=[1, 2, 3, 4, 5, 6], out_bytes=[10, 20, 30, 40, 50, 60], edges=HAND_EDGES
    )


def build(n: int, edges, **kwargs) -> Graph:
    """A graph of n unit-cost ops with zero-byte outputs."""
    return Graph.from_edges([1.0] * n, [0.0] * n, edges, **kwargs)


def raises(match: str):
    return pytest.raises(ValueError, match=match)


# ---------------------------------------------------------------------- fields
def test_fields_shapes_dtypes_and_values():
    g = Graph.from_edges(
        cost=[100, 50, 30],
        out_bytes=np.array([7600, 0, 1], dtype=np.int32),
        edges=[(0, 1), (1, 2)],
        param_bytes=[5, 0, 0],
    )
    assert (g.n_ops, g.n_edges) == (3, 2)
    for field in (g.cost, g.out_bytes, g.param_bytes):
        assert field.shape == (3,) and field.dtype == np.float64
    np.testing.assert_array_equal(g.cost, [100.0, 50.0, 30.0])
    np.testing.assert_array_equal(g.out_bytes, [7600.0, 0.0, 1.0])
    np.testing.assert_array_equal(g.param_bytes, [5.0, 0.0, 0.0])
    assert g.edges.shape == (2, 2) and g.edges.dtype == np.int64
    np.testing.assert_array_equal(g.edges, [[0, 1], [1, 2]])
    assert g.names == ("op0", "op1", "op2")
    assert g.op_types is None and g.colocation is None
    assert repr(g) == "Graph(n_ops=3, n_edges=2)"


def test_param_bytes_default_to_zero():
    g = build(2, [])
    assert g.param_bytes.shape == (2,) and g.param_bytes.dtype == np.float64
    np.testing.assert_array_equal(g.param_bytes, [0.0, 0.0])


def test_arrays_are_read_only_and_graph_is_frozen():
    g = Graph.from_edges([1, 2], [0, 0], [(0, 1)], param_bytes=[3, 4])
    for field in (g.cost, g.out_bytes, g.param_bytes, g.edges):
        with pytest.raises(ValueError, match="read-only"):
            field[0] = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.cost = np.zeros(2)  # type: ignore[misc]


def test_default_param_bytes_read_only():
    g = build(2, [])
    with pytest.raises(ValueError, match="read-only"):
        g.param_bytes[0] = 1.0


def test_caller_arrays_are_copied():
    cost = np.array([1.0, 2.0])
    g = Graph.from_edges(cost, [0.0, 0.0], [])
    assert cost.flags.writeable, "the caller's array was made read-only"
    cost[0] = 99.0
    assert g.cost[0] == 1.0


def test_single_op_without_edges():
    g = build(1, [])
    assert g.edges.shape == (0, 2) and g.edges.dtype == np.int64
    np.testing.assert_array_equal(g.topological_order, [0])
    np.testing.assert_array_equal(g.depth, [0])
    assert g.descendants_packed.shape == (1, 1) and g.descendants(0).size == 0
    assert g.children(0).size == 0 and g.parents(0).size == 0


def test_empty_numpy_edge_array():
    g = build(2, np.zeros((0, 2), dtype=np.int64))
    assert g.n_edges == 0 and g.edges.shape == (0, 2)


def test_duplicate_edges_are_merged_and_sorted():
    g = build(3, [(1, 2), (0, 2), (0, 1), (1, 2), (0, 1)])
    np.testing.assert_array_equal(g.edges, [[0, 1], [0, 2], [1, 2]])
    np.testing.assert_array_equal(g.in_degree, [0, 1, 2])
    np.testing.assert_array_equal(g.out_degree, [2, 1, 0])
    np.testing.assert_array_equal(g.children(0), [1, 2])


def test_duplicate_edges_in_numpy_array_are_merged():
    g = build(2, np.array([[0, 1], [0, 1]]))
    np.testing.assert_array_equal(g.edges, [[0, 1]])


def test_edges_by_name():
    g = Graph.from_edges(
        cost=[1, 1, 1, 1],
        out_bytes=[0, 0, 0, 0],
        edges=[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("a", "b")],
        names=["a", "b", "c", "d"],
    )
    assert g.names == ("a", "b", "c", "d")
    np.testing.assert_array_equal(g.edges, [[0, 1], [0, 2], [1, 3], [2, 3]])
    assert [g.index(x) for x in "abcd"] == [0, 1, 2, 3]


def test_names_given_still_accept_index_edges():
    g = build(2, [(0, 1)], names=["x", "y"])
    np.testing.assert_array_equal(g.edges, [[0, 1]])


def test_integer_valued_endpoints_of_any_integer_type():
    g = build(3, [(np.int32(0), np.int64(1)), (1, 2.0)])
    np.testing.assert_array_equal(g.edges, [[0, 1], [1, 2]])


def test_op_types_and_colocation_are_stored():
    g = build(3, [], op_types=["dot", "add", "dot"], colocation=[0, -1, 0])
    assert g.op_types == ("dot", "add", "dot")
    assert g.colocation.dtype == np.int64
    np.testing.assert_array_equal(g.colocation, [0, -1, 0])


def test_index():
    g = build(3, [], names=["x", "y", "z"])
    assert g.index("z") == 2
    with raises("'w'"):
        g.index("w")


# ---------------------------------------------------------------------- validation errors
def test_empty_graph():
    with raises("at least one op"):
        Graph.from_edges([], [], [])


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("cost", dict(cost=[1, 2, -3], out_bytes=[0, 0, 0])),
        ("out_bytes", dict(cost=[1, 2, 3], out_bytes=[0, 0, -1])),
        ("param_bytes", dict(cost=[1, 2, 3], out_bytes=[0, 0, 0], param_bytes=[0, 0, -0.5])),
    ],
)
def test_negative_value_names_field_and_op(field, kwargs):
    with raises(rf"^{field} .*negative.*op 2\b"):
        Graph.from_edges(edges=[], **kwargs)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("field", ["cost", "out_bytes", "param_bytes"])
def test_non_finite_value_names_field_and_op(field, bad):
    values = {"cost": [1.0, 1.0], "out_bytes": [0.0, 0.0], "param_bytes": [0.0, 0.0]}
    values[field] = [1.0, bad]
    with raises(rf"^{field} .*not finite.*op 1\b"):
        Graph.from_edges(edges=[], **values)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("out_bytes", dict(out_bytes=[0, 0])),
        ("param_bytes", dict(out_bytes=[0, 0, 0], param_bytes=[0, 0, 0, 0])),
        ("names", dict(out_bytes=[0, 0, 0], names=["a", "b"])),
        ("op_types", dict(out_bytes=[0, 0, 0], op_types=["x"])),
        ("colocation", dict(out_bytes=[0, 0, 0], colocation=[0, 1])),
    ],
)
def test_wrong_length_names_field(field, kwargs):
    with raises(rf"^{field}\b"):
        Graph.from_edges(cost=[1, 1, 1], edges=[], **kwargs)


def test_non_vector_cost():
    with raises("cost must be one-dimensional"):
        Graph.from_edges([[1, 2]], [0, 0], [])
    with raises("cost must be numbers"):
        Graph.from_edges(["fast"], [0], [])


def test_colocation_must_be_integers():
    with raises("colocation"):
        build(2, [], colocation=[0.5, 1.0])


@pytest.mark.parametrize("edge", [(0, 3), (3, 0), (0, -1)])
def test_edge_to_missing_op_index(edge):
    missing = edge[1] if edge[0] == 0 else edge[0]
    with raises(rf"unknown op {missing}\b"):
        build(3, [(0, 1), edge])


def test_edge_to_unknown_name():
    with raises("unknown op 'z'"):
        build(2, [("a", "z")], names=["a", "b"])


def test_edge_names_need_names():
    with raises("unknown op 'op0'"):
        build(2, [("op0", "op1")])


@pytest.mark.parametrize(
    ("edges", "names", "label"),
    [([(0, 1), (1, 1)], None, "1"), ([("a", "b"), ("b", "b")], ["a", "b"], "b")],
)
def test_self_loop(edges, names, label):
    with raises(rf"\({label}, {label}\) is a self-loop"):
        build(2, edges, names=names)


@pytest.mark.parametrize("endpoint", [1.5, True, np.float64(0.25)])
def test_non_integer_endpoint(endpoint):
    with raises("edge endpoints must be op indices or names"):
        build(3, [(0, endpoint)])


def test_none_endpoint():
    with raises("edge endpoints"):
        build(2, [(0, None)])


@pytest.mark.parametrize("edges", [[(0, 1, 2)], [0, 1], [(0, 1), (1,)], [[]]])
def test_edges_not_pairs(edges):
    with raises("edges must be"):
        build(3, edges)


def test_duplicate_names():
    with raises("'a' appears more than once"):
        build(3, [], names=["a", "b", "a"])


def cycle_in_message(message: str) -> list[str]:
    """The ops listed after 'cycle:' in an error message, e.g. 'b -> c -> a -> b'."""
    found = re.search(r"cycle: (.*)$", message)
    assert found, message
    return found.group(1).split(" -> ")


def assert_reported_cycle(g_edges, names, message: str, expected: set[str]) -> None:
    listed = cycle_in_message(message)
    assert listed[0] == listed[-1], "the cycle should be shown closed"
    assert set(listed) == expected
    edge_names = {(names[u], names[v]) for u, v in g_edges}
    for a, b in itertools.pairwise(listed):
        assert (a, b) in edge_names, f"{a} -> {b} is not an edge"


def test_cycle_lists_only_its_ops():
    names = ["a", "b", "c", "d", "e"]
    edges = [(0, 1), (1, 2), (2, 0), (3, 0), (2, 4)]  # a->b->c->a; d->a feeds it; c->e after
    with pytest.raises(ValueError, match="cycle") as err:
        build(5, edges, names=names)
    assert_reported_cycle(edges, names, str(err.value), {"a", "b", "c"})


def test_cycle_with_default_names():
    edges = [(0, 1), (2, 3), (3, 4), (4, 2), (5, 2)]
    names = [f"op{i}" for i in range(6)]
    with pytest.raises(ValueError, match="cycle") as err:
        build(6, edges)
    assert_reported_cycle(edges, names, str(err.value), {"op2", "op3", "op4"})


def test_two_cycle_by_name():
    with pytest.raises(ValueError, match="cycle") as err:
        build(3, [("x", "y"), ("y", "x"), ("y", "z")], names=["x", "y", "z"])
    assert set(cycle_in_message(str(err.value))) == {"x", "y"}


# ---------------------------------------------------------------------- structure: hand example
def test_hand_topological_order():
    order = hand_graph().topological_order
    assert order.dtype == np.int64
    np.testing.assert_array_equal(order, HAND_ORDER)


def test_hand_children_parents_degrees():
    g = hand_graph()
    for v in range(6):
        np.testing.assert_array_equal(g.children(v), HAND_CHILDREN[v])
        np.testing.assert_array_equal(g.parents(v), HAND_PARENTS[v])
    np.testing.assert_array_equal(g.out_degree, [1, 0, 2, 0, 1, 1])
    np.testing.assert_array_equal(g.in_degree, [1, 2, 0, 2, 0, 0])


def test_hand_depth():
    np.testing.assert_array_equal(hand_graph().depth, HAND_DEPTH)


def test_hand_reachability():
    g = hand_graph()
    for v in range(6):
        np.testing.assert_array_equal(g.descendants(v), HAND_DESCENDANTS[v])
        np.testing.assert_array_equal(g.ancestors(v), HAND_ANCESTORS[v])
    assert g.is_ancestor(2, 3) and g.is_ancestor(5, 1) and g.is_ancestor(0, 3)
    assert not g.is_ancestor(3, 2) and not g.is_ancestor(4, 1) and not g.is_ancestor(2, 2)


def test_hand_packed_bits():
    g = hand_graph()
    assert g.descendants_packed.shape == (6, 1) and g.descendants_packed.dtype == np.uint8
    assert g.descendants_packed[2, 0] == 0b1101_0000  # ops 0, 1, 3 (most significant bit first)
    assert g.ancestors_packed[3, 0] == 0b1010_1000  # ops 0, 2, 4


def test_packed_rows_span_bytes():
    g = build(10, [(0, 9), (9, 8)])  # 10 ops -> 2 bytes per row
    assert g.descendants_packed.shape == (10, 2)
    np.testing.assert_array_equal(g.descendants_packed[0], [0b0000_0000, 0b1100_0000])
    np.testing.assert_array_equal(g.descendants(0), [8, 9])
    np.testing.assert_array_equal(g.ancestors(8), [0, 9])


def test_long_chain_packed_size():
    n = 5000
    g = Graph.from_edges(np.ones(n), np.zeros(n), np.stack([np.arange(n - 1), np.arange(1, n)], 1))
    assert g.descendants_packed.shape == (n, 625) and g.descendants_packed.dtype == np.uint8
    assert g.ancestors_packed.shape == (n, 625)
    assert g.descendants(0).size == n - 1 and g.descendants(n - 1).size == 0
    np.testing.assert_array_equal(g.ancestors(n - 1), np.arange(n - 1))
    assert g.is_ancestor(0, n - 1) and not g.is_ancestor(n - 1, 0)
    np.testing.assert_array_equal(g.depth, np.arange(n))
    np.testing.assert_array_equal(g.topological_order, np.arange(n))


# ---------------------------------------------------------------------- random DAGs vs brute force
def random_dag(seed: int) -> tuple[int, list[tuple[int, int]]]:
    """A random DAG on 1..40 ops, randomly labelled so index order is not topological, with some
    duplicate edges."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 41))
    label = rng.permutation(n)
    density = rng.uniform(0.0, 0.3)
    edges = [
        (int(label[i]), int(label[j])) for j in range(n) for i in range(j) if rng.random() < density
    ]
    if edges:
        edges += [edges[int(k)] for k in rng.integers(0, len(edges), size=3)]
    return n, edges


def brute_reach(n: int, succ: dict[int, set[int]]) -> list[set[int]]:
    """For each op, the ops reachable by a non-empty path (iterative DFS)."""
    reach = []
    for v in range(n):
        seen: set[int] = set()
        stack = list(succ[v])
        while stack:
            u = stack.pop()
            if u not in seen:
                seen.add(u)
                stack.extend(succ[u])
        reach.append(seen)
    return reach


def brute_depth(n: int, pred: dict[int, set[int]]) -> list[int]:
    depth: dict[int, int] = {}

    def visit(v: int) -> int:
        if v not in depth:
            depth[v] = max((visit(u) + 1 for u in pred[v]), default=0)
        return depth[v]

    return [visit(v) for v in range(n)]


@pytest.mark.parametrize("seed", range(30))
def test_random_dag_against_brute_force(seed):
    n, edges = random_dag(seed)
    g = build(n, edges)
    succ = {v: {b for a, b in edges if a == v} for v in range(n)}
    pred = {v: {a for a, b in edges if b == v} for v in range(n)}
    assert g.n_edges == len(set(edges))
    for v in range(n):
        assert g.children(v).tolist() == sorted(succ[v])
        assert g.parents(v).tolist() == sorted(pred[v])
    np.testing.assert_array_equal(g.out_degree, [len(succ[v]) for v in range(n)])
    np.testing.assert_array_equal(g.in_degree, [len(pred[v]) for v in range(n)])

    # Smallest-index-first order: each entry is the smallest op whose parents all came earlier.
    placed: set[int] = set()
    for v in g.topological_order.tolist():
        available = [u for u in range(n) if u not in placed and pred[u] <= placed]
        assert v == min(available)
        placed.add(v)
    assert len(placed) == n

    np.testing.assert_array_equal(g.depth, brute_depth(n, pred))
    down, up = brute_reach(n, succ), brute_reach(n, pred)
    for v in range(n):
        assert g.descendants(v).tolist() == sorted(down[v])
        assert g.ancestors(v).tolist() == sorted(up[v])
        for u in range(n):
            assert g.is_ancestor(v, u) == (u in down[v])
