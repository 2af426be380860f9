"""The placement simulator as a pure JAX function over padded arrays (jit- and vmap-compatible).

Semantics: docs/simulator.md. The algorithm is a list-scheduling loop that commits one op per
step, in the order in which the event-driven simulation would start them:

* Every moment is a *stamp* (time µs, round): work that takes no time happens in a later round of
  the same instant, which is how "all arrivals and completions at one instant are applied before
  any device or bus chooses" is resolved. Stamps compare lexicographically.
* Only chain heads can be ready (see `padded.py`), so a step scans W chain heads, not N ops.
  A head is *known* once all its parents have started (their completion and arrival stamps are
  then fixed). Device d would next start, at stamp max(free[d], ready[v]), the known head v on d
  with the smallest (that stamp, ready time, index); the step commits the globally smallest such
  choice. Ops that are not yet known have ready stamps later than it, so the choice is final.
* A bus sends in the order its ops started (FIFO), so an op's transfers are fixed when it starts:
  start = max(bus free, op end), arrival = start + bytes / bandwidth, bus free = arrival + delta2.

Cost per placement: O(N (W + K + D)) for N ops, W chains, K max out-degree, D devices, plus an
O(N D log N) sort for peak memory.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.sim.padded import PaddedGraph

_BIG_INT = np.iinfo(np.int32).max


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimGraph:
    """Device-side copy of a `PaddedGraph` (same fields, JAX arrays)."""

    n_ops: jax.Array  # [] int32
    cost: jax.Array  # [Np] float µs
    out_bytes: jax.Array  # [Np] float bytes
    param_bytes: jax.Array  # [Np] float bytes
    n_parents: jax.Array  # [Np] int32
    children: jax.Array  # [Np, K] int32, Np where absent
    chain_heads: jax.Array  # [W] int32, -1 for padding chains
    chain_next: jax.Array  # [Np] int32, -1 at a chain's end
    chain_of: jax.Array  # [Np] int32
    edge_src: jax.Array  # [Ep] int32, Np for padding edges
    edge_dst: jax.Array  # [Ep] int32

    @classmethod
    def from_padded(cls, padded: PaddedGraph, float_dtype=None) -> SimGraph:
        float_dtype = float_dtype or jnp.result_type(float)
        fields = {}
        for f in dataclasses.fields(PaddedGraph):
            value = np.asarray(getattr(padded, f.name))
            dtype = float_dtype if np.issubdtype(value.dtype, np.floating) else jnp.int32
            fields[f.name] = jnp.asarray(value, dtype=dtype)
        return cls(**fields)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimCluster:
    """Device-side cluster parameters (the static `broadcast` flag is passed separately)."""

    speed: jax.Array  # [D] relative speed
    bandwidth: jax.Array  # [D] bytes/µs
    delta1: jax.Array  # [] µs
    delta2: jax.Array  # [] µs


class SimOutput(NamedTuple):
    makespan: jax.Array  # [] µs
    start: jax.Array  # [Np] µs
    end: jax.Array  # [Np] µs
    peak_memory: jax.Array  # [D] bytes
    transfer_start: jax.Array  # [Np, D] µs, -inf where no transfer
    arrival: jax.Array  # [Np, D] µs, -inf where no transfer


class _State(NamedTuple):
    heads: jax.Array  # [W] int32 current head op of each chain, -1 when exhausted
    pending: jax.Array  # [Np] int32 parents not yet started
    ready_t: jax.Array  # [Np] float µs, latest input-arrival time so far
    ready_r: jax.Array  # [Np] int32 round of that arrival
    dev_t: jax.Array  # [D] float µs, device free from
    dev_r: jax.Array  # [D] int32
    bus_t: jax.Array  # [D] float µs, bus free from
    bus_r: jax.Array  # [D] int32
    start: jax.Array  # [Np] float µs
    end: jax.Array  # [Np] float µs
    xfer: jax.Array  # [Np, D] float µs transfer start, -inf none
    arrival: jax.Array  # [Np, D] float µs, -inf none


def _later(at, ar, bt, br):
    """Lexicographically larger of stamps (at, ar) and (bt, br)."""
    a_wins = (at > bt) | ((at == bt) & (ar >= br))
    return jnp.where(a_wins, at, bt), jnp.where(a_wins, ar, br)


def _after(t, r, dt):
    """Stamp of an event caused at (t, r) that happens dt >= 0 later (next round if no time)."""
    new_t = t + dt
    return new_t, jnp.where(new_t > t, 0, r + 1)


def _until(t, r, new_t):
    """Stamp from which a resource held since (t, r) is free again at time new_t >= t."""
    moved = new_t > t
    return jnp.where(moved, new_t, t), jnp.where(moved, 0, r)


def _lexmin_index(keys: list[jax.Array], ids: jax.Array, valid: jax.Array) -> jax.Array:
    """The smallest id among `valid` entries ordered by `keys` lexicographically, then id."""
    mask = valid
    for key in keys:
        big = jnp.inf if jnp.issubdtype(key.dtype, jnp.floating) else _BIG_INT
        best = jnp.min(jnp.where(mask, key, big))
        mask = mask & (key == best)
    return jnp.min(jnp.where(mask, ids, _BIG_INT))


def simulate_padded(
    graph: SimGraph, cluster: SimCluster, placement: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate one placement ([Np] int32 device per op; padding entries are ignored)."""
    n_pad = graph.cost.shape[0]
    n_dev = cluster.speed.shape[0]
    ftype = graph.cost.dtype
    devices = jnp.arange(n_dev, dtype=jnp.int32)
    duration = graph.cost / cluster.speed[placement]  # [Np] µs
    xfer_time = graph.out_bytes / cluster.bandwidth[placement]  # [Np] µs
    child_valid = graph.children < n_pad  # [Np, K]

    def step(_, s: _State) -> _State:
        heads = s.heads
        live = heads >= 0
        h = jnp.where(live, heads, 0)
        known = live & (s.pending[h] == 0)
        hdev = placement[h]
        hrt, hrr = s.ready_t[h], s.ready_r[h]
        st_all, sr_all = _later(s.dev_t[hdev], s.dev_r[hdev], hrt, hrr)
        v = _lexmin_index([st_all, sr_all, hrt], h, known)
        d = placement[v]
        st, sr = _later(s.dev_t[d], s.dev_r[d], s.ready_t[v], s.ready_r[v])
        et, er = _after(st, sr, duration[v])
        free_t = jnp.where(duration[v] > 0, et + cluster.delta1, et)
        dev_t, dev_r = _until(et, er, free_t)

        kids = graph.children[v]  # [K]
        kid_ok = child_valid[v]
        kid_dev = placement.at[kids].get(mode="fill", fill_value=0)
        remote = kid_ok & (kid_dev != d)
        needs = jnp.any(remote[:, None] & (kid_dev[:, None] == devices), axis=0)  # [D]

        bus_t, bus_r = s.bus_t[d], s.bus_r[d]
        if broadcast:
            x_t, x_r = _later(bus_t, bus_r, et, er)
            a_t, a_r = _after(x_t, x_r, xfer_time[v])
            any_remote = jnp.any(needs)
            b_t, b_r = _until(a_t, a_r, a_t + cluster.delta2)
            bus_t, bus_r = jnp.where(any_remote, b_t, bus_t), jnp.where(any_remote, b_r, bus_r)
            arr_t = jnp.where(needs, a_t, -jnp.inf)
            arr_r = jnp.full(n_dev, a_r)
            xfer_row = jnp.where(needs, x_t, -jnp.inf)
        else:
            arr_t, arr_r, xfer_row = [], [], []
            for dest in range(n_dev):
                x_t, x_r = _later(bus_t, bus_r, et, er)
                a_t, a_r = _after(x_t, x_r, xfer_time[v])
                b_t, b_r = _until(a_t, a_r, a_t + cluster.delta2)
                bus_t = jnp.where(needs[dest], b_t, bus_t)
                bus_r = jnp.where(needs[dest], b_r, bus_r)
                arr_t.append(jnp.where(needs[dest], a_t, -jnp.inf))
                arr_r.append(a_r)
                xfer_row.append(jnp.where(needs[dest], x_t, -jnp.inf))
            arr_t, arr_r, xfer_row = jnp.stack(arr_t), jnp.stack(arr_r), jnp.stack(xfer_row)

        local = kid_dev == d
        in_t = jnp.where(local, et, arr_t[kid_dev])
        in_r = jnp.where(local, er, arr_r[kid_dev])
        old_t = s.ready_t.at[kids].get(mode="fill", fill_value=0)
        old_r = s.ready_r.at[kids].get(mode="fill", fill_value=0)
        new_t, new_r = _later(old_t, old_r, in_t, in_r)
        slot = graph.chain_of[v]
        return _State(
            heads=s.heads.at[slot].set(graph.chain_next[v]),
            pending=s.pending.at[kids].add(-1, mode="drop"),
            ready_t=s.ready_t.at[kids].set(new_t, mode="drop"),
            ready_r=s.ready_r.at[kids].set(new_r, mode="drop"),
            dev_t=s.dev_t.at[d].set(dev_t),
            dev_r=s.dev_r.at[d].set(dev_r),
            bus_t=s.bus_t.at[d].set(bus_t),
            bus_r=s.bus_r.at[d].set(bus_r),
            start=s.start.at[v].set(st),
            end=s.end.at[v].set(et),
            xfer=s.xfer.at[v].set(xfer_row),
            arrival=s.arrival.at[v].set(arr_t),
        )

    zeros_f = jnp.zeros(n_pad, ftype)
    zeros_i = jnp.zeros(n_pad, jnp.int32)
    init = _State(
        heads=graph.chain_heads,
        pending=graph.n_parents,
        ready_t=zeros_f,
        ready_r=zeros_i,
        dev_t=jnp.zeros(n_dev, ftype),
        dev_r=jnp.zeros(n_dev, jnp.int32),
        bus_t=jnp.zeros(n_dev, ftype),
        bus_r=jnp.zeros(n_dev, jnp.int32),
        start=zeros_f,
        end=zeros_f,
        xfer=jnp.full((n_pad, n_dev), -jnp.inf, ftype),
        arrival=jnp.full((n_pad, n_dev), -jnp.inf, ftype),
    )
    final = jax.lax.fori_loop(0, graph.n_ops, step, init)
    peak = peak_memory(graph, placement, final.start, final.end, final.arrival, n_dev)
    return SimOutput(
        makespan=jnp.max(final.end),
        start=final.start,
        end=final.end,
        peak_memory=peak,
        transfer_start=final.xfer,
        arrival=final.arrival,
    )


def peak_memory(graph: SimGraph, placement, start, end, arrival, n_dev: int) -> jax.Array:
    """[D] bytes: parameters plus the largest sum of live tensors on each device.

    Each (op, device) pair holds at most one interval: the op's own output on its device, from
    start until the op, its local consumers and its transfers are done; or a copy on a consumer's
    device, from arrival until the last consumer there ends. Events are sorted per device with
    frees before allocations at equal times (half-open intervals)."""
    n_pad = start.shape[0]
    devices = jnp.arange(n_dev, dtype=jnp.int32)
    segment = graph.edge_src * n_dev + placement.at[graph.edge_dst].get(mode="fill", fill_value=0)
    last_use = jax.ops.segment_max(
        end[graph.edge_dst], segment, num_segments=n_pad * n_dev, indices_are_sorted=False
    ).reshape(n_pad, n_dev)  # [Np, D], -inf where no consumer
    home = placement[:, None] == devices  # [Np, D]
    home_use = jnp.max(jnp.maximum(jnp.where(home, last_use, -jnp.inf), arrival), axis=1)
    home_free = jnp.maximum(end, home_use)  # [Np]
    has_copy = jnp.isfinite(arrival) & ~home
    alloc = jnp.where(home, start[:, None], jnp.where(has_copy, arrival, 0.0))
    free = jnp.where(home, home_free[:, None], jnp.where(has_copy, last_use, 0.0))
    size = jnp.where(home | has_copy, graph.out_bytes[:, None], 0.0)
    times = jnp.concatenate([free.T, alloc.T], axis=1)  # [D, 2Np], frees first
    deltas = jnp.concatenate([-size.T, size.T], axis=1)
    _, deltas = jax.lax.sort((times, deltas), dimension=1, is_stable=True, num_keys=1)
    live_peak = jnp.maximum(jnp.max(jnp.cumsum(deltas, axis=1), axis=1), 0.0)
    params = jax.ops.segment_sum(graph.param_bytes, placement, num_segments=n_dev)
    return live_peak + params
