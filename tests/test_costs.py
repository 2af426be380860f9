"""The roofline cost model: FLOP counts against hand-computed values, bytes, and device times.

Each FLOP count traces one primitive with `jax.make_jaxpr` (nothing runs) and compares it with
the arithmetic written out in the test.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from placeto_jax.cluster import PRESETS
from placeto_jax.graphs import costs

S, F32 = jax.ShapeDtypeStruct, jnp.float32


def only_eqn(fn, *shapes):
    """The single equation of fn traced on float32 arguments of the given shapes."""
    (eqn,) = jax.make_jaxpr(fn)(*(S(s, F32) for s in shapes)).jaxpr.eqns
    return eqn


def eqn_flops(eqn) -> float | None:
    ins = [v.aval for v in eqn.invars]
    outs = [v.aval for v in eqn.outvars]
    return costs.flops(eqn.primitive.name, eqn.params, ins, outs)


def test_matmul_flops():
    eqn = only_eqn(lambda a, b: lax.dot(a, b), (8, 16), (16, 32))
    assert eqn_flops(eqn) == 2 * 8 * 32 * 16  # 2 * M * N * K = 8192


def test_batched_contraction_flops():
    # 'bhqd,bhkd->bhqk': batch dims b=2, h=3; free q=5, k=7; contracting d=4.
    dims = (((3,), (3,)), ((0, 1), (0, 1)))
    eqn = only_eqn(lambda q, k: lax.dot_general(q, k, dims), (2, 3, 5, 4), (2, 3, 7, 4))
    assert eqn_flops(eqn) == 2 * (2 * 3) * 5 * 7 * 4  # 1680


def test_two_contracting_dims_flops():
    # 'abc,bcd->ad': contracting b=4 and c=5 (K = 20), M = 3, N = 6.
    dims = (((1, 2), (0, 1)), ((), ()))
    eqn = only_eqn(lambda x, y: lax.dot_general(x, y, dims), (3, 4, 5), (4, 5, 6))
    assert eqn_flops(eqn) == 2 * 3 * 6 * 20  # 720


def conv(window_strides, padding, dimension_numbers, **kwargs):
    return lambda x, k: lax.conv_general_dilated(
        x, k, window_strides, padding, dimension_numbers=dimension_numbers, **kwargs
    )


def test_conv_nhwc_stride2_same_flops():
    # x [2, 9, 9, 4], kernel HWIO [3, 3, 4, 8], stride 2, SAME -> out [2, 5, 5, 8] (ceil(9/2)).
    eqn = only_eqn(conv((2, 2), "SAME", ("NHWC", "HWIO", "NHWC")), (2, 9, 9, 4), (3, 3, 4, 8))
    assert eqn.outvars[0].aval.shape == (2, 5, 5, 8)
    assert eqn_flops(eqn) == 2 * 2 * 5 * 5 * 8 * 4 * 3 * 3  # 2*N*Ho*Wo*Cout*Cin*kh*kw = 28800


def test_depthwise_conv_flops():
    # x [2, 9, 9, 4], kernel HWIO [3, 3, 1, 4], 4 groups of one channel, SAME -> [2, 9, 9, 4].
    fn = conv((1, 1), "SAME", ("NHWC", "HWIO", "NHWC"), feature_group_count=4)
    eqn = only_eqn(fn, (2, 9, 9, 4), (3, 3, 1, 4))
    assert eqn_flops(eqn) == 2 * 2 * 9 * 9 * 4 * (4 // 4) * 3 * 3  # 5832


def test_grouped_conv_flops():
    # C_in = 8 in 2 groups (4 each), C_out = 6, kernel HWIO [3, 3, 4, 6], VALID -> [1, 5, 5, 6].
    fn = conv((1, 1), "VALID", ("NHWC", "HWIO", "NHWC"), feature_group_count=2)
    eqn = only_eqn(fn, (1, 7, 7, 8), (3, 3, 4, 6))
    assert eqn_flops(eqn) == 2 * 1 * 5 * 5 * 6 * (8 // 2) * 3 * 3  # 10800


def test_nchw_dilated_conv_flops():
    # x NCHW [1, 3, 16, 16], kernel OIHW [5, 3, 3, 3], dilation 2 (effective 5x5), VALID
    # -> out [1, 5, 12, 12]; dilation adds no taps.
    fn = conv((1, 1), "VALID", ("NCHW", "OIHW", "NCHW"), rhs_dilation=(2, 2))
    eqn = only_eqn(fn, (1, 3, 16, 16), (5, 3, 3, 3))
    assert eqn.outvars[0].aval.shape == (1, 5, 12, 12)
    assert eqn_flops(eqn) == 2 * 1 * 12 * 12 * 5 * 3 * 3 * 3  # 38880


def test_batch_group_conv_flops():
    # lhs [4, 6, 6, 2] in 2 batch groups, kernel HWIO [3, 3, 2, 4], VALID -> out [2, 4, 4, 4];
    # each output element sums C_in * kh * kw = 18 products.
    fn = conv((1, 1), "VALID", ("NHWC", "HWIO", "NHWC"), batch_group_count=2)
    eqn = only_eqn(fn, (4, 6, 6, 2), (3, 3, 2, 4))
    assert eqn.outvars[0].aval.shape == (2, 4, 4, 4)
    assert eqn_flops(eqn) == 2 * 2 * 4 * 4 * 4 * 2 * 3 * 3  # 4608


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda x: x + 1.0, 12),  # elementwise: one per output element
        (jnp.tanh, 12 * costs.TRANSCENDENTAL_FLOPS),
        (lambda x: x.sum(axis=1), 12),  # input elements
        (lambda x: lax.transpose(x, (1, 0)), 0),  # data movement
        (lambda x: lax.cumsum(x, axis=1), 12),
    ],
)
def test_simple_flops(fn, expected):
    assert eqn_flops(only_eqn(fn, (3, 4))) == expected


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def test_max_pool_flops_are_window_times_pooled_elements():
    eqn = only_eqn(max_pool, (1, 4, 4, 3))
    assert eqn.primitive.name == "reduce_window_max"
    assert eqn_flops(eqn) == 1 * 2 * 2 * 3 * 4  # 12 pooled elements, window 4


def test_sort_flops():
    eqn = only_eqn(lambda x: lax.sort(x, dimension=1), (3, 8))
    assert eqn_flops(eqn) == 24 * 3  # 24 elements, log2(8) = 3 comparison levels


def test_unknown_primitive_has_no_flop_count():
    assert costs.flops("no_such_primitive", {}, [], []) is None


def test_bytes_of_avals():
    assert costs.nbytes(S((3, 4), F32)) == 48
    assert costs.nbytes(S((), jnp.int8)) == 1
    assert costs.nbytes(object()) == 0  # tokens and other shapeless values


def test_roofline_matmul_time_on_k80():
    # [1024, 1024] @ [1024, 1024] float32: 2^31 FLOPs at 4.37e6 FLOP/µs = 491.4 µs (compute
    # bound; memory 3 * 4 MiB at 240e3 bytes/µs = 52.4 µs), plus 5 µs launch.
    eqn = only_eqn(lambda a, b: a @ b, (1024, 1024), (1024, 1024))
    ins = [v.aval for v in eqn.invars]
    outs = [v.aval for v in eqn.outvars]
    spec = costs.DEVICES["placeto-k80"]
    expected = 2 * 1024**3 / 4.37e6 + 5.0
    assert costs.op_cost_us("dot_general", eqn.params, ins, outs, spec) == pytest.approx(expected)


def test_memory_bound_time():
    spec = costs.DeviceSpec(peak_flops=1e6, bandwidth=1e3, launch_us=2.0)
    assert costs.roofline_us(n_flops=1e6, n_bytes=5e3, spec=spec) == 5.0 + 2.0


def test_device_table_covers_every_cluster_preset_and_newer_is_faster():
    assert set(costs.DEVICES) == set(PRESETS)
    k80, h100 = costs.DEVICES["placeto-k80"], costs.DEVICES["h100"]
    assert h100.peak_flops > k80.peak_flops and h100.bandwidth > k80.bandwidth


def test_device_spec_lookup():
    spec = costs.DeviceSpec(peak_flops=1.0, bandwidth=1.0, launch_us=0.0)
    assert costs.device_spec(spec) is spec
    a100 = costs.device_spec("a100")  # the roofline parameters, with the preset's speed
    assert dataclasses.replace(a100, speed=1.0) == costs.DEVICES["a100"]
    assert a100.speed == PRESETS["a100"]["speed"]
    with pytest.raises(ValueError, match="no roofline parameters for device 'tpu'"):
        costs.device_spec("tpu")


def test_embedding_gradient_scatter_add_is_known(recwarn):
    """The gradient of a gather (an embedding lookup) is a `scatter-add`: bytes only, no warning."""
    import jax
    import jax.numpy as jnp

    from placeto_jax.graphs import trace

    def loss(table, ids):
        return jnp.sum(table[ids])

    graph = trace.from_jax(jax.grad(loss), jnp.zeros((100, 8)), jnp.arange(4), level="jaxpr")
    assert "scatter-add" in graph.op_types
    assert not [w for w in recwarn if "scatter-add" in str(w.message)]
    from placeto_jax.graphs.costs import BYTES_ONLY

    assert "scatter-add" in BYTES_ONLY


def test_a_kernel_that_fits_the_cache_moves_its_bytes_at_the_cache_bandwidth():
    spec = costs.DeviceSpec(
        peak_flops=100.0, bandwidth=10.0, launch_us=1.0, cache_bytes=1000.0, cache_bandwidth=40.0
    )
    assert costs.kernel_us(0.0, 1000.0, spec) == 1000.0 / 40.0  # fits: the cache's bandwidth
    assert costs.kernel_us(0.0, 1001.0, spec) == 1001.0 / 10.0  # does not: memory's
    assert costs.kernel_us(5000.0, 1000.0, spec) == 50.0  # compute-bound either way
    assert costs.roofline_us(0.0, 1000.0, spec) == 1000.0 / 40.0 + 1.0
    no_cache = dataclasses.replace(spec, cache_bytes=0.0)
    assert costs.kernel_us(0.0, 1000.0, no_cache) == 100.0


def test_convolutions_run_at_their_own_peak_where_a_device_has_one():
    spec = costs.DeviceSpec(
        peak_flops=100.0,
        bandwidth=1e9,
        launch_us=0.0,
        conv_peak_flops=20.0,
        grouped_conv_peak_flops=5.0,
    )
    # 1,000 FLOPs of which 600 in a dense and 200 in a grouped convolution:
    # 200 / 100 + 600 / 20 + 200 / 5 = 2 + 30 + 40 µs.
    assert costs.kernel_us(1000.0, 1.0, spec, 600.0, 200.0) == 72.0
    assert (
        costs.kernel_us(1000.0, 1.0, dataclasses.replace(spec, conv_peak_flops=0.0), 600.0) == 10.0
    )
    only_conv = dataclasses.replace(spec, grouped_conv_peak_flops=0.0)
    assert costs.kernel_us(1000.0, 1.0, only_conv, 0.0, 1000.0) == 50.0  # grouped at conv's peak
