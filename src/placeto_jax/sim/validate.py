"""Placement validation at the boundary (host-side)."""

from __future__ import annotations

import numpy as np


def check_placement(placement, n_ops: int, n_devices: int) -> np.ndarray:
    """Return the placement as int64 [N] or [B, N]; raise ValueError naming what is wrong."""
    try:
        arr = np.asarray(placement)
    except (TypeError, ValueError) as err:
        raise ValueError(f"placement must be an array of device indices: {err}") from None
    if arr.ndim not in (1, 2) or arr.shape[-1] != n_ops:
        raise ValueError(
            f"placement has shape {arr.shape}; expected [{n_ops}] or [B, {n_ops}] "
            f"(one device per op)"
        )
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0)
    )
    if arr.size and not integral:
        raise ValueError(f"placement must hold integer device indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = np.argwhere((arr < 0) | (arr >= n_devices))
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        op = where[-1]
        raise ValueError(f"placement puts op {op} on device {arr[where]}, outside [0, {n_devices})")
    return arr
