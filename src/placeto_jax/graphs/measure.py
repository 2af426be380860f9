"""Measured op costs: time one primitive equation on the current JAX backend.

`measure_eqn_us` jits the equation's primitive alone (`primitive.bind` with its parameters, as
`jax.core.eval_jaxpr` does) over concrete inputs of its input shapes, and returns the median
wall time of a few runs in µs, like the per-op step statistics Placeto profiled. The time
includes the dispatch of one jitted call, the analogue of the roofline model's launch overhead.

Equations with bodies (`scan`, `while`, `cond`, `pjit`, `custom_jvp_call`, ...) are measured as
a whole: the primitive is bound with its body, so a scan's time covers all its iterations and a
while loop runs as many trips as its inputs give (zeros for integers, floats in [0.5, 1)).

Times are cached in a JSON file mapping `signature(eqn)` (primitive, input shapes and dtypes,
parameters with bodies replaced by a hash of their text, platform and device kind) to µs:
`~/.cache/placeto_jax/op_times.json`, or `$PLACETO_JAX_CACHE/op_times.json` when that is set.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core

from placeto_jax.files import atomic_write

CACHE_ENV = "PLACETO_JAX_CACHE"
CACHE_NAME = "op_times.json"


def cache_path(path: str | os.PathLike | None = None) -> Path:
    """`path`, else `$PLACETO_JAX_CACHE/op_times.json`, else `~/.cache/placeto_jax/...`."""
    if path is not None:
        return Path(path)
    root = os.environ.get(CACHE_ENV)
    return Path(root) / CACHE_NAME if root else Path.home() / ".cache/placeto_jax" / CACHE_NAME


def load_cache(path: str | os.PathLike) -> dict[str, float]:
    """The cached times in `path`: empty if it is missing, or unreadable (with a warning)."""
    try:
        times = json.loads(Path(path).read_text())
        if not isinstance(times, dict):
            raise ValueError("not a JSON object")
        return {str(k): float(v) for k, v in times.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError) as err:
        warnings.warn(f"ignoring unreadable op time cache {os.fspath(path)}: {err}", stacklevel=2)
        return {}


def save_cache(path: str | os.PathLike, times: MutableMapping[str, float]) -> None:
    """Write `times` to `path` atomically, creating its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as file:
        file.write(json.dumps(dict(sorted(times.items())), indent=1).encode())


def signature(eqn: jex_core.JaxprEqn) -> str:
    """The cache key of `eqn` on the default device."""
    device = jax.devices()[0]
    ins = ",".join(str(v) if isinstance(v, jex_core.Literal) else str(v.aval) for v in eqn.invars)
    params = ",".join(f"{k}={_stable(v)}" for k, v in sorted(eqn.params.items()))
    return f"{eqn.primitive.name}({ins}){{{params}}}@{device.platform}:{device.device_kind}"


def _stable(value: Any) -> str:
    """A repr of a parameter without memory addresses: bodies hash their text."""
    if isinstance(value, jex_core.Jaxpr | jex_core.ClosedJaxpr):
        return "jaxpr:" + hashlib.sha256(str(value).encode()).hexdigest()[:16]
    if isinstance(value, tuple | list):
        return "(" + ",".join(_stable(v) for v in value) + ")"
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__qualname__", type(value).__name__)
    return repr(value)


def measure_eqn_us(
    eqn: jex_core.JaxprEqn,
    *,
    repeats: int = 5,
    warmup: int = 2,
    cache: MutableMapping[str, float] | None = None,
) -> float:
    """Median µs of `repeats` jitted runs of `eqn` after `warmup` runs; looked up in and added
    to `cache` (signature -> µs) when given."""
    key = signature(eqn)
    if cache is not None and key in cache:
        return cache[key]
    fn, args = _standalone(eqn)
    us = median_time_us(fn, args, repeats=repeats, warmup=warmup)
    if cache is not None:
        cache[key] = us
    return us


def _standalone(eqn: jex_core.JaxprEqn) -> tuple[Callable, list[Any]]:
    """A jitted function applying `eqn` to its non-literal inputs, and example inputs."""
    variables = [v for v in eqn.invars if not isinstance(v, jex_core.Literal)]
    params = eqn.primitive.get_bind_params(eqn.params)

    def apply(*xs: Any) -> Any:
        values = iter(xs)
        ins = [v.val if isinstance(v, jex_core.Literal) else next(values) for v in eqn.invars]
        return eqn.primitive.bind(*ins, **params)

    keys = jax.random.split(jax.random.key(0), max(len(variables), 1))
    return jax.jit(apply), [example_value(v.aval, k) for v, k in zip(variables, keys, strict=False)]


def example_value(aval: Any, key: jax.Array) -> jax.Array:
    """A concrete value of `aval`: floats in [0.5, 1), zeros otherwise (safe indices)."""
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.prng_key):
        return jnp.broadcast_to(jax.random.key(0), aval.shape)
    if jnp.issubdtype(aval.dtype, jnp.floating):
        return jax.random.uniform(key, aval.shape, aval.dtype, 0.5, 1.0)
    return jnp.zeros(aval.shape, aval.dtype)


def median_time_us(fn: Callable, args: Sequence[Any], *, repeats: int, warmup: int) -> float:
    """Median wall time of `fn(*args)` in µs, waiting for its results each run."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)
