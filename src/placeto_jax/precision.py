"""Precision is an argument, never the caller's global `jax_enable_x64` flag.

JAX makes float64 (and int64) arrays only while 64-bit types are enabled, so the library's
float64 computations (the exact host simulator, the tracing of built-in graphs) run inside
`scope(np.float64)`, which enables them for that block of code alone (thread-local), and
float32 computations inside `scope(np.float32)`, which disables them, so that neither depends
on what the caller set. This module is the only place the library touches the setting.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np

EXACT = np.float64  # the host simulator's default: bit-equal to the reference


def scope(dtype: Any) -> contextlib.AbstractContextManager:
    """The scope a computation in float `dtype` runs in (64-bit types on for float64 only)."""
    return jax.enable_x64(np.dtype(dtype) == np.float64)
