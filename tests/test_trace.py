"""Tracing JAX functions into placement graphs (`from_jax`).

Expected graphs are derived by hand from the functions' jaxprs (printed in the comments), costs
from the roofline formula written out, and loop costs from tracing the loop body on its own.
Nothing is compiled except in the one `simulate` test.
"""

from __future__ import annotations

import collections
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax
from jax.extend.core import Primitive

import placeto_jax as pj
from placeto_jax.graphs import trace
from placeto_jax.graphs.costs import DEVICES, TRANSCENDENTAL_FLOPS
from placeto_jax.graphs.trace import eqn_cost
from placeto_jax.placers import colocate

S, F32 = jax.ShapeDtypeStruct, jnp.float32
K80 = DEVICES["placeto-k80"]


def from_jax(*args, **kwargs) -> pj.Graph:
    """`from_jax` at the jaxpr level (one op per equation), which these tests derive by hand."""
    return trace.from_jax(*args, level="jaxpr", **kwargs)


def k80_us(n_flops: float, n_bytes: float) -> float:
    return max(n_flops / K80.peak_flops, n_bytes / K80.bandwidth) + K80.launch_us


def edge_list(graph: pj.Graph) -> list[tuple[str, str]]:
    return [(graph.names[u], graph.names[v]) for u, v in graph.edges]


# ---------------------------------------------------------------------- hand-derived graphs
def test_tiny_function_matches_hand_derived_graph():
    # c:f32[8,32] = dot_general a b;  d:f32[8,32] = tanh c;  e:f32[] = reduce_sum d
    g = from_jax(lambda x, w: jnp.tanh(x @ w).sum(), S((8, 16), F32), S((16, 32), F32))
    assert g.names == ("dot_general", "tanh", "reduce_sum")
    assert g.op_types == ("dot_general", "tanh", "reduce_sum")
    assert edge_list(g) == [("dot_general", "tanh"), ("tanh", "reduce_sum")]
    np.testing.assert_array_equal(g.out_bytes, [8 * 32 * 4, 8 * 32 * 4, 4])
    np.testing.assert_array_equal(g.param_bytes, [0, 0, 0])
    expected = [
        k80_us(2 * 8 * 32 * 16, (8 * 16 + 16 * 32 + 8 * 32) * 4),
        k80_us(TRANSCENDENTAL_FLOPS * 256, 2 * 256 * 4),
        k80_us(256, 256 * 4 + 4),
    ]
    np.testing.assert_allclose(g.cost, expected, rtol=1e-12)


def test_literals_and_inputs_are_not_edges_and_constants_are_roots():
    # b = mul a 2.0;  c = iota;  d = add b c;  e = tanh d;  f = tanh e;  g = reduce_sum f
    def fn(x):
        return jnp.tanh(jnp.tanh(x * 2.0 + jnp.arange(4, dtype=F32))).sum()

    g = from_jax(fn, S((4,), F32))
    assert g.names == ("mul", "iota", "add", "tanh", "tanh_1", "reduce_sum")
    assert edge_list(g) == [
        ("mul", "add"),
        ("iota", "add"),
        ("add", "tanh"),
        ("tanh", "tanh_1"),
        ("tanh_1", "reduce_sum"),
    ]


def test_name_prefix():
    g = from_jax(lambda x: jnp.sin(x) + 1.0, S((3,), F32), name="net")
    assert g.names == ("net/sin", "net/add")


# ---------------------------------------------------------------------- MLP training step
def mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"] + params["b2"]
    return jnp.mean((out - y) ** 2)


def mlp_step(params, x, y):
    grads = jax.grad(mlp_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


MLP_PARAMS = {"w1": S((4, 8), F32), "b1": S((8,), F32), "w2": S((8, 2), F32), "b2": S((2,), F32)}
MLP_DATA = (S((16, 4), F32), S((16, 2), F32))


def test_mlp_training_step():
    g = from_jax(mlp_step, MLP_PARAMS, *MLP_DATA, param_argnums=0)
    jaxpr = jax.make_jaxpr(mlp_step)(MLP_PARAMS, *MLP_DATA).jaxpr
    assert g.n_ops == len(jaxpr.eqns)  # no calls to inline: one op per equation
    assert g.op_types == tuple(e.primitive.name for e in jaxpr.eqns)
    types = collections.Counter(g.op_types)
    # forward x@w1, h@w2; backward dW2, dh, dW1 (no gradient for the data x).
    assert types["dot_general"] == 5
    assert types["tanh"] == 1
    # every parameter leaf is read, so param_bytes sums to the parameters: (32 + 8 + 16 + 2) * 4.
    assert g.param_bytes.sum() == pytest.approx(58 * 4)
    # the SGD update p - 0.1 * g: four `sub` ops outside the AD scopes, each reading a parameter.
    updates = [v for v, n in enumerate(g.names) if n.startswith("sub")]
    assert len(updates) == 4
    assert all(g.param_bytes[v] == 0 for v in updates)  # the forward readers hold the bytes
    # ... and each update is co-located with its weight's forward reader: four classes.
    holders = np.flatnonzero(g.param_bytes > 0)
    assert len(holders) == 4 and all(g.out_degree[v] > 0 for v in holders)
    assert sorted(g.colocation[updates]) == sorted(g.colocation[holders]) == [0, 1, 2, 3]
    assert all(g.out_degree[v] == 0 for v in updates)
    assert g.depth.max() >= 10  # forward, then backward, then update: a deep chain
    assert any(n.startswith("transpose(jvp())/") for n in g.names)  # backward ops are named


def test_param_bytes_held_once_by_the_first_reader():
    # w [4, 3] float32 (48 bytes) is read by the dot_general and by the second reduce_sum: the
    # first holds all 48 bytes, and both readers form one co-location class.
    g = from_jax(
        lambda w, x: (x @ w).sum() + w.sum(), S((4, 3), F32), S((2, 4), F32), param_argnums=0
    )
    assert g.names == ("dot_general", "reduce_sum", "reduce_sum_1", "add")
    np.testing.assert_array_equal(g.param_bytes, [48, 0, 0, 0])
    np.testing.assert_array_equal(g.colocation, [0, -1, 0, -1])
    free = from_jax(
        lambda w, x: (x @ w).sum() + w.sum(), S((4, 3), F32), S((2, 4), F32), param_argnums=0,
        colocate_params=False,
    )  # fmt: skip
    assert free.colocation is None
    np.testing.assert_array_equal(free.param_bytes, [48, 0, 0, 0])


def adam_step(params, opt_state, x, y):
    grads = jax.grad(mlp_loss)(params, x, y)
    updates, opt_state = ADAM.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


ADAM = optax.adam(1e-3)


def test_a_weight_its_optimizer_state_and_its_update_form_one_class():
    opt_state = jax.eval_shape(ADAM.init, MLP_PARAMS)
    g = from_jax(adam_step, MLP_PARAMS, opt_state, *MLP_DATA, param_argnums=(0, 1))
    jaxpr = jax.make_jaxpr(adam_step)(MLP_PARAMS, opt_state, *MLP_DATA).jaxpr
    n_params = len(jax.tree.leaves(MLP_PARAMS))
    flat_inputs = jaxpr.invars
    # Leaf order: params (b1, b2, w1, w2), then Adam's count, mu (4), nu (4).
    ops_of = {eqn_outvar: v for v, eqn in enumerate(jaxpr.eqns) for eqn_outvar in eqn.outvars}
    readers = [
        {v for v, eqn in enumerate(jaxpr.eqns) if leaf in eqn.invars} for leaf in flat_inputs
    ]
    classes = set()
    for k in range(n_params):  # weight k: its leaf, its mu and nu, its two outputs
        leaves = [k, n_params + 1 + k, 2 * n_params + 1 + k]
        ops = set().union(*(readers[i] for i in leaves))
        ops |= {ops_of[jaxpr.outvars[i]] for i in leaves}  # outputs: params, then count, mu, nu
        ids = {int(g.colocation[v]) for v in ops}
        assert len(ids) == 1 and -1 not in ids, k
        classes |= ids
        # the weight, mu and nu: three copies of its bytes, held inside its class
        members = np.flatnonzero(g.colocation == ids.pop())
        size = np.prod(jax.tree.leaves(MLP_PARAMS)[k].shape) * 4
        assert g.param_bytes[members].sum() == pytest.approx(3 * size)
    assert len(classes) == n_params  # one class per weight, nothing else tied
    assert set(np.unique(g.colocation)) == classes | {-1}


def test_param_through_inlined_call_and_unused_param():
    @jax.jit
    def scale(w, x):
        return x * w

    g = from_jax(
        lambda w, unused, x: scale(w, x),
        S((3,), F32),
        S((5,), F32),
        S((3,), F32),
        param_argnums=(0, 1),
    )
    assert g.names == ("scale/mul",)
    np.testing.assert_array_equal(g.param_bytes, [12])  # the unused leaf is dropped


def test_bad_arguments():
    with pytest.raises(ValueError, match="param_argnums \\[2\\] out of range"):
        from_jax(lambda x, y: x + y, S((2,), F32), S((2,), F32), param_argnums=2)
    with pytest.raises(ValueError, match="unknown cost model 'profiled'"):
        from_jax(jnp.sin, S((2,), F32), cost_model="profiled")
    with pytest.raises(ValueError, match="no roofline parameters for device 'k80'"):
        from_jax(jnp.sin, S((2,), F32), device="k80")
    with pytest.raises(ValueError, match="no operations to place"):
        from_jax(lambda x: x, S((2,), F32))


# ---------------------------------------------------------------------- inlined calls
def test_jit_bodies_are_inlined_with_their_names():
    @jax.jit
    def inner(a):
        return jnp.sin(a) * 2.0

    @jax.jit
    def outer(a):
        return inner(a) + 1.0

    g = from_jax(lambda x: outer(x - 1.0).sum(), S((3,), F32))
    assert g.names == ("sub", "outer/inner/sin", "outer/inner/mul", "outer/add", "reduce_sum")
    assert edge_list(g) == list(zip(g.names[:-1], g.names[1:], strict=True))


def test_custom_derivative_and_remat_bodies_are_inlined():
    @jax.custom_vjp
    def square(x):
        return x * x

    square.defvjp(lambda x: (x * x, x), lambda x, ct: (2 * x * ct,))

    def fn(x):
        y = jax.nn.relu(x)  # custom_jvp_call around jit(relu)
        y = jax.checkpoint(jnp.cos)(y)  # remat
        return square(y).sum()  # custom_vjp_call

    g = from_jax(fn, S((3,), F32))
    assert g.op_types == ("max", "cos", "mul", "reduce_sum")
    assert g.names[0] == "relu/max"
    assert g.n_edges == 3


# ---------------------------------------------------------------------- loops
def scan_body(c, x):
    return jnp.tanh(c * x), c.sum()


def scan_fn(c0, xs):
    c, ys = lax.scan(scan_body, c0, xs)
    return c.sum() + ys.sum()


L = 5
SCAN_ARGS = (S((4,), F32), S((L, 4), F32))


def test_scan_is_one_op_with_trip_count_scaled_cost():
    g = from_jax(scan_fn, *SCAN_ARGS)
    assert g.op_types == ("scan", "reduce_sum", "reduce_sum", "add")
    assert edge_list(g) == [
        ("scan", "reduce_sum"),
        ("scan", "reduce_sum_1"),
        ("reduce_sum", "add"),
        ("reduce_sum_1", "add"),
    ]
    body = from_jax(scan_body, S((4,), F32), S((4,), F32))
    assert body.op_types == ("mul", "tanh", "reduce_sum")
    assert g.cost[0] == pytest.approx(L * body.cost.sum())
    assert g.out_bytes[0] == 4 * 4 + L * 4  # final carry + stacked ys


def test_unrolled_scan_has_one_body_copy_per_iteration():
    kept = from_jax(scan_fn, *SCAN_ARGS)
    g = from_jax(scan_fn, *SCAN_ARGS, unroll_loops=True)
    assert g.n_ops == 3 * L + 3
    assert g.names[:3] == ("iter0/mul", "iter0/tanh", "iter0/reduce_sum")
    assert g.cost.sum() == pytest.approx(kept.cost.sum())
    edges = set(edge_list(g))
    for i in range(1, L):  # the carry flows from iteration i - 1 into iteration i
        assert (f"iter{i - 1}/tanh", f"iter{i}/mul") in edges
        assert (f"iter{i - 1}/tanh", f"iter{i}/reduce_sum") in edges
    ys_sum = g.names[-2]  # ys.sum() reads the stacked ys: every iteration's reduce_sum
    assert {u for u, v in edges if v == ys_sum} == {f"iter{i}/reduce_sum" for i in range(L)}


def test_cond_costs_its_most_expensive_branch_and_while_one_trip():
    cheap = lambda q: q + 1.0  # noqa: E731
    dear = lambda q: jnp.exp(q) @ jnp.exp(q).T  # noqa: E731

    def fn(p, q):
        r = lax.cond(p > 0, cheap, dear, q)
        return lax.while_loop(lambda s: s.sum() < 10.0, lambda s: jnp.sin(s), r)

    g = from_jax(fn, S((), F32), S((6, 6), F32))
    assert g.op_types == ("gt", "convert_element_type", "cond", "while")
    assert edge_list(g) == [
        ("gt", "convert_element_type"),
        ("convert_element_type", "cond"),
        ("cond", "while"),
    ]
    q = S((6, 6), F32)
    dear_cost = from_jax(dear, q).cost.sum()
    assert dear_cost > from_jax(cheap, q).cost.sum()
    assert g.cost[2] == pytest.approx(dear_cost)
    body_and_test = (
        from_jax(jnp.sin, q).cost.sum() + from_jax(lambda s: s.sum() < 10.0, q).cost.sum()
    )
    assert g.cost[3] == pytest.approx(body_and_test)


# ---------------------------------------------------------------------- Flax
class DenseRelu(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.relu(nn.Dense(8)(x)))


def test_flax_apply_traces_with_module_names():
    model = DenseRelu()
    x = S((4, 3), F32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)
    g = from_jax(model.apply, params, x, param_argnums=0)
    assert collections.Counter(g.op_types)["dot_general"] == 2
    assert "DenseRelu/Dense_0/dot_general" in g.names
    assert "DenseRelu/Dense_1/dot_general" in g.names
    assert "DenseRelu/relu/max" in g.names
    n_param_bytes = sum(leaf.size * 4 for leaf in jax.tree.leaves(params))
    assert g.param_bytes.sum() == pytest.approx(n_param_bytes)


# ---------------------------------------------------------------------- costs and simulation
def test_bigger_matmul_costs_more_and_h100_is_faster():
    def matmul(n):
        return from_jax(lambda a, b: a @ b, S((n, n), F32), S((n, n), F32)).cost[0]

    assert matmul(512) > matmul(256) > matmul(64)
    k80 = from_jax(mlp_step, MLP_PARAMS, *MLP_DATA)
    h100 = from_jax(mlp_step, MLP_PARAMS, *MLP_DATA, device="h100")
    assert np.all(k80.cost > 0)
    speed = pj.PRESETS["h100"]["speed"]
    assert h100.costs_for == ("h100", speed) and k80.costs_for == ("placeto-k80", 1.0)
    assert np.all(h100.cost / speed < k80.cost)  # each op is faster on the H100's roofline


def test_costs_are_stored_at_speed_one_so_every_preset_scales_them_once():
    # Traced for the V100, each op's cost is its V100 roofline time x the preset's speed, so the
    # V100 preset simulates V100 times and the K80 preset rescales by the ratio of speeds once.
    v100 = from_jax(mlp_step, MLP_PARAMS, *MLP_DATA, device="v100")
    jaxpr = jax.make_jaxpr(mlp_step)(MLP_PARAMS, *MLP_DATA).jaxpr
    spec = DEVICES["v100"]
    speed = pj.PRESETS["v100"]["speed"]
    on_v100 = [eqn_cost(e, spec) for e in jaxpr.eqns]
    np.testing.assert_allclose(v100.cost, np.array(on_v100) * speed, rtol=1e-12)
    single = np.zeros(v100.n_ops, dtype=int)
    nonzero = int(np.sum(v100.cost > 0))
    for preset, expected_speed in (("v100", speed), ("placeto-k80", 1.0)):
        cluster = pj.Cluster.preset(preset, 1)
        makespan = pj.simulate(v100, cluster, single).makespan
        busy = v100.cost.sum() / expected_speed + cluster.delta1 * (nonzero - 1)
        assert makespan == pytest.approx(busy, rel=1e-9)  # one device: back to back


def test_simulate_runs_on_a_traced_graph():
    g = from_jax(mlp_step, MLP_PARAMS, *MLP_DATA, param_argnums=0)
    cluster = pj.Cluster.preset("placeto-k80", 2)
    result = pj.simulate(g, cluster, colocate(g, np.arange(g.n_ops) % 2))
    assert result.makespan >= g.cost[g.topological_order].max()
    one = pj.simulate(g, cluster, np.zeros(g.n_ops, dtype=int))
    assert one.makespan >= g.cost.sum()  # one device runs every op in turn


def test_unknown_primitive_falls_back_to_bytes_and_warns_once():
    mystery = Primitive("placeto_test_mystery")
    mystery.def_abstract_eval(lambda x: x)

    def fn(x):
        return mystery.bind(mystery.bind(x))

    x = S((1000,), F32)
    with pytest.warns(
        UserWarning, match="no FLOP count for primitive 'placeto_test_mystery'"
    ) as rec:
        g = from_jax(fn, x)
    assert len([w for w in rec if "placeto_test_mystery" in str(w.message)]) == 1
    np.testing.assert_allclose(g.cost, k80_us(0, 8000))  # bytes only: 4 kB in, 4 kB out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_jax(fn, x)  # already warned about in this process


def test_untraceable_function_is_one_value_error():
    def branchy(x):
        if x.sum() > 0:  # Python control flow on a traced value
            return x
        return -x

    with pytest.raises(ValueError, match=r"cannot trace .*branchy: TracerBoolConversionError"):
        from_jax(branchy, jnp.ones(3))
    with pytest.raises(ValueError, match=r"cannot trace .*AttributeError"):
        from_jax(lambda x: x.nonexistent, jnp.ones(3))
