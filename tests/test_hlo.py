# ruff: noqa: E501 (the hand-written HLO module keeps its lines as XLA prints them)
"""Tracing the compiled program (`from_jax(level="hlo")`, `placeto_jax.graphs.hlo`).

The parser and the costs are checked on a hand-written HLO module whose numbers are worked out
below; the traced programs are checked against XLA's own cost analysis (an independent count of
the same FLOPs and bytes) and against the jaxpr level of the same function.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import placeto_jax as pj
from placeto_jax.graphs import hlo
from placeto_jax.graphs.costs import DeviceSpec
from placeto_jax.graphs.trace import from_jax

# One FLOP and one byte per µs, 2 µs per launch: costs are FLOP or byte counts.
UNIT = DeviceSpec(peak_flops=1.0, bandwidth=1.0, launch_us=2.0)

MODULE = """\
HloModule jit_f, is_scheduled=true, input_output_alias={ {1}: (1, {}, may-alias) }, entry_computation_layout={(f32[8,16]{1,0}, f32[16,32]{1,0})->(f32[8,32]{1,0}, f32[16,32]{1,0})}

%fused_dense (param_0: f32[8,16], param_1: f32[16,32]) -> f32[8,32] {
  %param_0 = f32[8,16]{1,0} parameter(0)
  %param_1 = f32[16,32]{1,0} parameter(1)
  %dot.0 = f32[8,32]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %tanh.0 = f32[8,32]{1,0} tanh(%dot.0), metadata={op_name="jit(f)/dense/tanh"}
}

%cond (c: (s32[], f32[4])) -> pred[] {
  %c = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[], f32[4])) -> (s32[], f32[4]) {
  %b = (s32[], f32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%b), index=0
  %v = f32[4]{0} get-tuple-element(%b), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i.1, %one)
  %e = f32[4]{0} exponential(%v)
  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %e)
}

ENTRY %main (x: f32[8,16], w: f32[16,32]) -> (f32[8,32], f32[16,32], f32[4]) {
  %x = f32[8,16]{1,0} parameter(0), metadata={op_name="x"}
  %w = f32[16,32]{1,0} parameter(1), metadata={op_name="params[\\'w\\']"}
  %zero = s32[] constant(0)
  %v0 = f32[4]{0} constant({1, 2, 3, 4})
  %fusion = f32[8,32]{1,0} fusion(%x, %w), kind=kLoop, calls=%fused_dense, metadata={op_name="jit(f)/dense/dot_general"}
  %copy = f32[16,32]{1,0} copy(%w)
  %neg = f32[16,32]{1,0} negate(%copy), metadata={op_name="jit(f)/update/neg"}
  %init = (s32[], f32[4]{0}) tuple(%zero, %v0)
  %loop = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %out = f32[4]{0} get-tuple-element(%loop), index=1
  ROOT %tuple = (f32[8,32]{1,0}, f32[16,32]{1,0}, f32[4]{0}) tuple(%fusion, %neg, %out)
}
"""


# ---------------------------------------------------------------------- the parser, by hand
def test_parser_reads_computations_instructions_and_aliases():
    module = hlo.parse_module(MODULE)
    assert module.entry == "main"
    assert module.name == "jit_f"
    assert set(module.computations) == {"fused_dense", "cond", "body", "main"}
    assert module.root == {"fused_dense": "tanh.0", "cond": "lt", "body": "t", "main": "tuple"}
    assert module.aliases == {1: 1}  # output 1 is written into parameter 1's buffer
    by_name = {i.name: i for i in module.computations["main"]}
    assert by_name["fusion"].opcode == "fusion"
    assert by_name["fusion"].operands == ("x", "w")
    assert by_name["loop"].shape == "(s32[], f32[4]{0})"
    assert by_name["v0"].operands == ()  # a literal is not an operand
    assert [i.is_op for i in module.computations["main"]] == [
        *[False] * 4,  # parameters and constants
        True,  # fusion
        True,  # copy
        True,  # negate
        False,  # tuple
        True,  # while
        False,  # get-tuple-element
        False,  # the root tuple
    ]


def test_shape_bytes_of_arrays_tuples_and_small_types():
    assert hlo.shape_bytes("f32[8,32]{1,0}") == 8 * 32 * 4
    assert hlo.shape_bytes("(s32[], f32[4]{0}, /*index=2*/bf16[3,2]{1,0})") == 4 + 16 + 12
    assert hlo.shape_bytes("pred[10]{0}") == 10
    assert hlo.shape_bytes("f8e4m3fn[16]{0}") == 16
    with pytest.raises(ValueError, match="unknown HLO element type 'q7'"):
        hlo.shape_bytes("q7[4]{0}")


def test_ops_edges_names_and_costs_of_the_hand_written_module():
    ops = hlo.module_ops(hlo.parse_module(MODULE), UNIT)
    assert ops.names == ["dense/dot_general", "copy(params['w'])", "update/neg", "loop"]
    assert ops.op_types == ["dot_general", "copy", "neg", "while"]
    assert ops.edges == [(1, 2)]  # copy -> neg; the loop reads only constants
    assert ops.param_users == {0: {0}, 1: {0, 1}}
    assert ops.outputs == [frozenset({0}), frozenset({2}), frozenset({3})]
    dense_flops = 2 * 8 * 32 * 16 + 8 * (8 * 32)  # the dot, then tanh at 8 FLOPs per element
    dense_bytes = (8 * 16 + 16 * 32 + 8 * 32) * 4
    copy_bytes = 2 * 16 * 32 * 4
    # One trip: add (1 FLOP, 4 + 4 + 4 bytes) and exp (8 x 4 FLOPs, 16 + 16 bytes) in the body,
    # compare (1 FLOP, 4 + 4 + 1 bytes) in the condition, each with its 2 µs launch.
    trip = (12 + 2) + (32 + 2) + (9 + 2)
    assert ops.cost == [max(dense_flops, dense_bytes), copy_bytes, copy_bytes, 3 * trip]
    # The update is written in place into the donated w and read by no op: no new bytes.
    assert ops.out_bytes == [8 * 32 * 4, 16 * 32 * 4, 0.0, 4 + 16]


# ---------------------------------------------------------------------- traced programs
class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10, name="fc2")(nn.relu(nn.Dense(64, name="fc1")(x)))


def adam_step():
    """An MLP's Adam training step and its example arguments (params, opt state, x, y)."""
    model, tx = MLP(), optax.adam(1e-3)
    x, y = jnp.zeros((32, 16)), jnp.zeros((32,), jnp.int32)
    params = model.init(jax.random.key(0), x)["params"]

    def step(params, opt_state, x, y):
        def loss(p):
            logits = model.apply({"params": p}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, (params, tx.init(params), x, y)


def test_flops_and_bytes_agree_with_xla_cost_analysis():
    step, args = adam_step()
    compiled = jax.jit(step).lower(*args).compile()
    xla = compiled.cost_analysis()
    xla = xla[0] if isinstance(xla, list) else xla
    module = hlo.parse_module(compiled.as_text())
    flops, moved = hlo.entry_totals(module, transcendental=0.0)
    with_transcendental, _ = hlo.entry_totals(module, transcendental=1.0)
    np.testing.assert_allclose(flops, xla["flops"], rtol=0.01)
    np.testing.assert_allclose(with_transcendental - flops, xla["transcendentals"], rtol=0.01)
    np.testing.assert_allclose(moved, xla["bytes accessed"], rtol=0.02)


def test_a_training_step_is_its_kernels_with_weights_kept_with_their_updates():
    step, args = adam_step()
    graph = from_jax(step, *args, param_argnums=(0, 1), donate_argnums=(0, 1), device="v100")
    by_op = from_jax(step, *args, param_argnums=(0, 1), level="jaxpr", device="v100")
    assert 0 < graph.n_ops < by_op.n_ops / 2  # fusions, not primitives
    assert any("fc1" in name for name in graph.names) and any("fc2" in name for name in graph.names)
    assert graph.costs_for == ("v100", pj.PRESETS["v100"]["speed"])
    # Every resident byte (4 weights, Adam's mu and nu, the step count) is held once.
    leaves = jax.tree.leaves(args[:2])
    assert sum(graph.param_bytes) == sum(leaf.nbytes for leaf in leaves)
    # One class per weight, as at the jaxpr level: every op reading the weight, its mu or its
    # nu (flat inputs k, 5 + k, 9 + k; input 4 is Adam's count), and the producers of the new
    # weight, mu and nu (flat outputs k, 5 + k, 9 + k), read off the same compiled program.
    _, text, _ = hlo.compile_program(step, args, (0, 1))
    ops = hlo.module_ops(hlo.parse_module(text), UNIT)
    classes = graph.colocation_classes
    found = set()
    for k in range(4):
        members = set().union(*(ops.param_users[i] for i in (k, 5 + k, 9 + k)))
        members |= set().union(*(ops.outputs[i] for i in (k, 5 + k, 9 + k)))
        assert len({classes[v] for v in members}) == 1, k
        found.add(classes[min(members)])
    assert len(found) == 4
    shared = {c for c in classes if np.sum(classes == c) > 1}
    assert shared == found  # and no other class


def test_one_overhead_per_kernel_on_one_device():
    """Costs carry no launch term: on one device the step is the kernels' time plus delta1
    after every kernel but the last (`sim` rule 2), nothing else."""
    step, args = adam_step()
    graph = from_jax(step, *args, param_argnums=(0, 1), device="v100")
    cluster = pj.Cluster.preset("v100", 1)
    result = pj.simulate(graph, cluster, np.zeros(graph.n_ops, np.int32))
    seconds = np.asarray(graph.cost) / cluster.speed_array[0]
    assert np.all(seconds > 0)
    expected = seconds.sum() + cluster.delta1 * (graph.n_ops - 1)
    np.testing.assert_allclose(float(result.makespan), expected, rtol=1e-9)


def test_donated_updates_are_not_counted_twice():
    step, args = adam_step()
    weights = jax.tree.leaves(args[0])  # the first outputs are the new weights, in this order

    def producers_bytes(donate):
        _, text, _ = hlo.compile_program(step, args, donate)
        ops = hlo.module_ops(hlo.parse_module(text), UNIT)
        return [[ops.out_bytes[v] for v in ops.outputs[k]] for k in range(len(weights))]

    # Without donation each new weight is a new buffer; with it, the weight's final update
    # (read by no op) writes into the donated buffer and adds nothing.
    assert producers_bytes(()) == [[w.nbytes] for w in weights]
    assert producers_bytes((0, 1)) == [[0.0]] * len(weights)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"level": "mlir"}, "unknown level 'mlir'"),
        ({"cost_model": "measure", "measure_repeats": 0}, "measure_repeats must be at least 1"),
        ({"unroll_loops": True}, "unroll_loops=True is a jaxpr-level option"),
        ({"donate_argnums": (3,)}, r"donate_argnums \[3\] out of range for 1 example"),
    ],
)
def test_options_the_level_does_not_have_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        from_jax(jnp.sin, jax.ShapeDtypeStruct((3,), jnp.float32), **options)


def test_a_function_that_does_not_compile_names_itself():
    def broken(x):
        return x @ jnp.ones((5, 5))  # (3,) @ (5, 5)

    with pytest.raises(ValueError, match=r"cannot trace .*broken: TypeError"):
        from_jax(broken, jax.ShapeDtypeStruct((3,), jnp.float32))
