"""The simulator's result on the host (NumPy), shared by the JAX simulator and the reference."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class SimResult:
    """Schedule of one placement ([N]-shaped fields) or of a batch ([B, N]-shaped fields).

    `transfer_start[.., v, d]` / `arrival[.., v, d]`: when the transfer of v's output that serves
    device d started on v's bus and when its data arrived on d; NaN where v sends nothing to d.
    With `broadcast` one transfer serves all remote devices, so those entries are equal.
    """

    makespan: np.ndarray  # [] or [B] µs, largest end time
    start: np.ndarray  # [N] or [B, N] µs
    end: np.ndarray  # [N] or [B, N] µs
    peak_memory: np.ndarray  # [D] or [B, D] bytes, parameters + largest live tensor sum
    transfer_start: np.ndarray  # [N, D] or [B, N, D] µs, NaN where no transfer
    arrival: np.ndarray  # [N, D] or [B, N, D] µs, NaN where no transfer

    def __getitem__(self, b: int) -> SimResult:
        """The b-th placement of a batched result."""
        if np.ndim(self.makespan) == 0:
            raise IndexError("this result holds one placement, not a batch")
        return SimResult(*(getattr(self, f.name)[b] for f in dataclasses.fields(self)))
