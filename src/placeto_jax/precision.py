"""Precision is an argument, never the caller's global `jax_enable_x64` flag.

JAX makes float64 (and int64) arrays only while 64-bit types are enabled, so the library's
float64 computations (the exact host simulator, the tracing of built-in graphs) run inside
`scope(np.float64)`, which enables them for that block of code alone (thread-local), and
float32 computations inside `scope(np.float32)`, which disables them, so that neither depends
on what the caller set (`Scoped` does the same for a jitted function, the trainer's). This
module is the only place the library touches the setting.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

EXACT = np.float64  # the host simulator's default: bit-equal to the reference


def scope(dtype: Any) -> contextlib.AbstractContextManager:
    """The scope a computation in float `dtype` runs in (64-bit types on for float64 only)."""
    return jax.enable_x64(np.dtype(dtype) == np.float64)


@dataclasses.dataclass(frozen=True)
class Scoped:
    """`fn` (a jitted function) traced, compiled and run inside `scope(dtype)`: its program is
    the same whatever the caller set, down to the library code it calls (optax's scalars)."""

    fn: Callable
    dtype: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with scope(self.dtype):
            return self.fn(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with scope(self.dtype):
            return self.fn.lower(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # the jitted function's other methods
        return getattr(self.fn, name)
