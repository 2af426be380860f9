"""The analytic roofline cost model for traced JAX primitives (host-side, no execution).

An op's time on a device is `max(FLOPs / peak, bytes / bandwidth) + launch`, in µs, where bytes
are the op's input plus output bytes (every operand read once, every result written once) and
launch is a per-device constant: the fixed duration of even an empty kernel (launch latency,
scheduling, tail), so tiny ops are not free.

FLOPs per primitive (integer and boolean ops count like floating-point ones):
- `dot_general`: 2 * (output elements) * (contracted size), i.e. 2 * batch * M * N * K.
- `conv_general_dilated`: 2 * (output elements) * (kernel elements per output feature), i.e.
  2 * N * out_spatial * C_out * C_in / feature_group_count * kernel_spatial. Strides, padding and
  dilation enter through the output shape and the kernel shape; every tap counts, including taps
  on padding or on the holes of a dilated input (what a direct convolution executes).
  `batch_group_count` folds into the same formula (the kernel's input-feature size is C_in).
- elementwise: 1 per output element; transcendental ones (exp, log, tanh, logistic, sin, sqrt,
  erf, ...) `TRANSCENDENTAL_FLOPS` per element, because GPU special-function units issue at 1/4
  to 1/8 of the FP32 rate (e.g. 16 SFU against 64-128 FP32 lanes per SM since Volta).
- reductions and cumulative ops: 1 per input element; `sort`: n * ceil(log2(d)) comparisons over
  the n elements of the keys, d the sorted dimension's size.
- windowed ops (`reduce_window*`, pooling gradients): window size * pooled elements (the smaller
  of the first operand and the output).
- gathers, scatters, dynamic slices, data movement (reshape, transpose, broadcast, concatenate,
  slice, pad, convert, iota, stop_gradient, ...) and random-bit generation: 0 FLOPs, so bytes
  only.
- any other primitive: bytes only, with one `UserWarning` per primitive name per process.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from placeto_jax.cluster import GBPS, PRESETS

TFLOPS = 1e6  # FLOP per µs in one TFLOP/s
TRANSCENDENTAL_FLOPS = 8.0  # FLOPs charged per element of a transcendental op


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Roofline parameters of one device."""

    peak_flops: float  # FLOP/µs, FP32 peak (1 TFLOP/s = 1e6 FLOP/µs)
    bandwidth: float  # bytes/µs, device memory (1 GB/s = 1e3 bytes/µs)
    launch_us: float  # µs added to every op: the duration of an empty kernel
    speed: float = 1.0  # the cluster preset's relative speed: µs on it x speed = µs at speed 1
    cache_bytes: float = 0.0  # bytes: a kernel moving at most this many runs from cache (0: none)
    cache_bandwidth: float = 0.0  # bytes/µs of that cache
    conv_peak_flops: float = 0.0  # FLOP/µs convolutions reach (0: peak_flops)
    grouped_conv_peak_flops: float = 0.0  # FLOP/µs of grouped, depthwise ones (0: conv's)


# Keyed by cluster preset name (placeto_jax.cluster.PRESETS). FP32 peak and memory bandwidth are
# the vendor datasheet numbers of the variant each preset names (docs/cluster-presets.md).
# launch_us is a modelling choice in the 3-5 µs range that kernel-launch microbenchmarks report,
# higher for older GPUs and drivers (the same range as the presets' delta1).
DEVICES: dict[str, DeviceSpec] = {
    # NVIDIA Tesla K80 datasheet: 8.73 TFLOPS FP32 (boost), 480 GB/s GDDR5 per board of two
    # GK210 dies; one die, as in the preset (Placeto profiled on one die).
    "placeto-k80": DeviceSpec(peak_flops=4.37 * TFLOPS, bandwidth=240 * GBPS, launch_us=5.0),
    # NVIDIA Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOPS FP32, 732 GB/s HBM2.
    "p100": DeviceSpec(peak_flops=9.3 * TFLOPS, bandwidth=732 * GBPS, launch_us=4.0),
    # NVIDIA V100 PCIe datasheet: 14 TFLOPS FP32, 900 GB/s HBM2.
    "v100": DeviceSpec(peak_flops=14.0 * TFLOPS, bandwidth=900 * GBPS, launch_us=4.0),
    # NVIDIA V100 SXM2 datasheet: 15.7 TFLOPS FP32, 900 GB/s HBM2.
    "v100-nvlink": DeviceSpec(peak_flops=15.7 * TFLOPS, bandwidth=900 * GBPS, launch_us=4.0),
    # NVIDIA A100 SXM4 80 GB datasheet: 19.5 TFLOPS FP32, 2,039 GB/s HBM2e.
    "a100": DeviceSpec(peak_flops=19.5 * TFLOPS, bandwidth=2039 * GBPS, launch_us=3.0),
    # NVIDIA H100 SXM5 datasheet: 67 TFLOPS FP32, 3.35 TB/s HBM3.
    "h100": DeviceSpec(peak_flops=67.0 * TFLOPS, bandwidth=3350 * GBPS, launch_us=3.0),
}


def word_set(names: str) -> frozenset[str]:
    """A set of names from a whitespace-separated list."""
    return frozenset(names.split())


TRANSCENDENTAL = word_set(
    """exp exp2 expm1 log log1p logistic tanh sin cos tan asin acos atan atan2 sinh cosh asinh
    acosh atanh pow sqrt rsqrt cbrt erf erfc erf_inv lgamma digamma igamma igammac igamma_grad_a
    polygamma zeta bessel_i0e bessel_i1e regularized_incomplete_beta random_gamma_grad"""
)
ELEMENTWISE = word_set(
    """add add_any sub mul div rem max min neg abs sign floor ceil round square integer_pow
    nextafter clamp select_n eq ne lt le gt ge and or not xor shift_left shift_right_logical
    shift_right_arithmetic population_count clz is_finite reduce_precision real imag conj
    complex"""
)
REDUCTIONS = word_set(
    """reduce reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor
    argmax argmin cumsum cumprod cummax cummin cumlogsumexp"""
)
WINDOWED = word_set(
    """reduce_window reduce_window_sum reduce_window_max reduce_window_min select_and_scatter_add
    select_and_gather_add"""
)
BYTES_ONLY = word_set(
    """gather scatter scatter_add scatter_sub scatter_mul scatter_min scatter_max scatter-add
    scatter-sub scatter-mul scatter-min scatter-max dynamic_slice
    dynamic_update_slice reshape transpose broadcast_in_dim concatenate slice pad squeeze
    rev convert_element_type bitcast_convert_type copy copy_p iota split device_put
    sharding_constraint optimization_barrier stop_gradient random_bits random_seed random_wrap
    random_unwrap random_fold_in random_split threefry2x32"""
)

_warned: set[str] = set()  # primitive names already warned about (once per process)


def device_spec(device: str | DeviceSpec) -> DeviceSpec:
    """The roofline parameters of a cluster preset name (with the preset's speed), or `device`
    itself."""
    if isinstance(device, DeviceSpec):
        return device
    if device not in DEVICES:
        raise ValueError(f"no roofline parameters for device {device!r}; choose {sorted(DEVICES)}")
    return dataclasses.replace(DEVICES[device], speed=PRESETS[device]["speed"])


def elements(aval: Any) -> int:
    """Number of elements of an abstract value (0 for tokens and other shapeless values)."""
    shape = getattr(aval, "shape", None)
    return 0 if shape is None else math.prod(shape)


def nbytes(aval: Any) -> float:
    """Bytes of an abstract value (0 for tokens and other shapeless values)."""
    dtype = getattr(aval, "dtype", None)
    return 0.0 if dtype is None else float(elements(aval) * dtype.itemsize)


def dot_general_flops(
    lhs_shape: Sequence[int], dimension_numbers, out_shape: Sequence[int]
) -> float:
    """2 * output elements * contracted size (= 2 * batch * M * N * K)."""
    (lhs_contract, _), _ = dimension_numbers
    k = math.prod(lhs_shape[d] for d in lhs_contract)
    return 2.0 * math.prod(out_shape) * k


def conv_flops(rhs_shape: Sequence[int], dimension_numbers, out_shape: Sequence[int]) -> float:
    """2 * output elements * kernel elements per output feature (C_in / groups * kernel_spatial);
    `dimension_numbers` is lax's ConvDimensionNumbers (rhs_spec[0]: the output-feature axis)."""
    per_feature = math.prod(rhs_shape) // rhs_shape[dimension_numbers.rhs_spec[0]]
    return 2.0 * math.prod(out_shape) * per_feature


def flops(
    name: str, params: Mapping[str, Any], ins: Sequence[Any], outs: Sequence[Any]
) -> float | None:
    """FLOPs of one application of primitive `name`, None when the model does not know it;
    `ins`/`outs` are abstract values (anything with `shape` and `dtype`)."""
    if name == "dot_general":
        return dot_general_flops(ins[0].shape, params["dimension_numbers"], outs[0].shape)
    if name == "conv_general_dilated":
        return conv_flops(ins[1].shape, params["dimension_numbers"], outs[0].shape)
    if name in TRANSCENDENTAL:
        return TRANSCENDENTAL_FLOPS * sum(elements(a) for a in outs)
    if name in ELEMENTWISE:
        return float(sum(elements(a) for a in outs))
    if name in REDUCTIONS:
        return float(sum(elements(a) for a in ins))
    if name == "sort":
        depth = math.ceil(math.log2(max(ins[0].shape[params["dimension"]], 1)))
        return float(elements(ins[0]) * depth)
    if name in WINDOWED:
        pooled = min(elements(ins[0]), elements(outs[0]))
        return float(pooled * math.prod(params["window_dimensions"]))
    if name in BYTES_ONLY:
        return 0.0
    return None


def kernel_us(
    n_flops: float,
    n_bytes: float,
    spec: DeviceSpec,
    conv_flops: float = 0.0,
    grouped_conv_flops: float = 0.0,
) -> float:
    """max(compute time, memory time) in µs: a kernel's time without its launch. `n_flops` is
    the total, of which `conv_flops` (`grouped_conv_flops`) run at the device's convolution
    (grouped convolution) peak where it has one. A kernel whose bytes fit the device's cache
    (`cache_bytes`, as on a CPU's last level) moves them at the cache's bandwidth."""
    conv_peak = spec.conv_peak_flops or spec.peak_flops
    grouped_peak = spec.grouped_conv_peak_flops or conv_peak
    other = n_flops - conv_flops - grouped_conv_flops
    compute = other / spec.peak_flops + conv_flops / conv_peak + grouped_conv_flops / grouped_peak
    cached = 0 < n_bytes <= spec.cache_bytes and spec.cache_bandwidth > 0
    return max(compute, n_bytes / (spec.cache_bandwidth if cached else spec.bandwidth))


def roofline_us(
    n_flops: float, n_bytes: float, spec: DeviceSpec, conv_flops: float = 0.0, grouped: bool = False
) -> float:
    """max(compute time, memory time) + launch overhead, in µs (`conv_flops` of them in a
    convolution, `grouped` or not; see `kernel_us`)."""
    split = (0.0, conv_flops) if grouped else (conv_flops, 0.0)
    return kernel_us(n_flops, n_bytes, spec, *split) + spec.launch_us


def op_cost_us(
    name: str, params: Mapping[str, Any], ins: Sequence[Any], outs: Sequence[Any], spec: DeviceSpec
) -> float:
    """Roofline time of one primitive application in µs. An unknown primitive costs its bytes
    only, with a warning the first time its name is seen."""
    n_flops = flops(name, params, ins, outs)
    if n_flops is None:
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"roofline cost model has no FLOP count for primitive {name!r}; "
                "charging its bytes only",
                stacklevel=2,
            )
        n_flops = 0.0
    n_bytes = sum(nbytes(a) for a in ins) + sum(nbytes(a) for a in outs)
    if name == "conv_general_dilated":
        grouped = params["feature_group_count"] > 1 or params["batch_group_count"] > 1
        return roofline_us(n_flops, n_bytes, spec, conv_flops=n_flops, grouped=grouped)
    return roofline_us(n_flops, n_bytes, spec)
