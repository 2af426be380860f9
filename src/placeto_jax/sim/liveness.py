"""Which tensors a device holds, and when (host-side NumPy): the allocations of the simulator's
memory model (docs/simulator.md, "Memory") rebuilt from one simulated placement's times, and
the tensors live at a device's peak."""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.graphs.core import Graph
from placeto_jax.sim.result import SimResult


@dataclasses.dataclass(frozen=True)
class Allocations:
    """Every tensor allocation of one simulated placement: an op's output on its own device,
    and each received copy on a device that consumes it."""

    device: np.ndarray  # [A] int64, the device holding the tensor
    tensor: np.ndarray  # [A] int64, the op whose output it is
    allocated: np.ndarray  # [A] float64 µs, when it is allocated (the op's start, or arrival)
    freed: np.ndarray  # [A] float64 µs, when it is freed (live on [allocated, freed))
    home: np.ndarray  # [A] bool, on the producing op's device (else a received copy)


@dataclasses.dataclass(frozen=True)
class Peak:
    """The instant a device's live tensors are largest, and which they are."""

    device: int
    instant: float  # µs, the first instant of the largest live sum
    live_bytes: float  # bytes live then (the device's peak memory less its parameters)
    tensors: np.ndarray  # [L] int64, ops whose nonzero outputs are live then (home or received)
    home: np.ndarray  # [L] bool, each on its producer's device (else a received copy)


def allocations(graph: Graph, placement: np.ndarray, result: SimResult) -> Allocations:
    """The allocations of one simulated placement [N] (`result` unbatched): an output lives on
    its device from its op's start until the op, its consumers there and its transfers are done;
    a copy lives on a consuming device from its arrival until that device's last consumer ends."""
    n = graph.n_ops
    placement = np.asarray(placement, dtype=np.int64)
    n_devices = result.arrival.shape[1]
    senders, receivers = graph.edges[:, 0], graph.edges[:, 1]
    last_use = np.full((n, n_devices), -np.inf)  # [N, D] µs, last consumer's end per device
    np.maximum.at(last_use, (senders, placement[receivers]), result.end[receivers])
    arrival = np.asarray(result.arrival, dtype=np.float64)
    last_arrival = np.max(np.where(np.isnan(arrival), -np.inf, arrival), axis=1)
    home_freed = np.maximum.reduce([result.end, last_use[np.arange(n), placement], last_arrival])
    op, device = np.nonzero(np.isfinite(last_use))
    remote = device != placement[op]
    op, device = op[remote], device[remote]
    ops = np.arange(n)
    return Allocations(
        device=np.concatenate([placement, device]),
        tensor=np.concatenate([ops, op]),
        allocated=np.concatenate([result.start, arrival[op, device]]).astype(np.float64),
        freed=np.concatenate([home_freed, last_use[op, device]]).astype(np.float64),
        home=np.concatenate([np.ones(n, bool), np.zeros(len(op), bool)]),
    )


def peak(graph: Graph, allocs: Allocations, device: int) -> Peak:
    """The first instant of `device`'s largest sum of live tensors (frees before allocations at
    one instant, as the simulator counts) and the tensors of nonzero size live then."""
    mine = np.nonzero(allocs.device == device)[0]
    size = graph.out_bytes[allocs.tensor[mine]].astype(np.float64)
    times = np.concatenate([allocs.allocated[mine], allocs.freed[mine]])
    is_allocation = np.concatenate([np.ones(len(mine)), np.zeros(len(mine))])
    order = np.lexsort((is_allocation, times))  # by time, frees first
    live = np.cumsum(np.concatenate([size, -size])[order])
    if not len(live) or live.max() <= 0:
        return Peak(device, 0.0, 0.0, np.zeros(0, np.int64), np.zeros(0, bool))
    instant = float(times[order][int(np.argmax(live))])
    at = mine[(allocs.allocated[mine] <= instant) & (instant < allocs.freed[mine]) & (size > 0)]
    return Peak(device, instant, float(live.max()), allocs.tensor[at], allocs.home[at])
