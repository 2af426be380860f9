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
    """The loop's state for L placements side by side, the placement (lane) axis last: on CPU,
    reductions over slots and selects then run across lanes, which vectorises."""

    # Per op (source of truth for ops that are not chain heads):
    ready_t: jax.Array  # [Np, L] float µs, latest input arrival so far
    ready_rp: jax.Array  # [2, Np, L] int32: round of that arrival, parents not yet started
    # Per chain slot, a copy of its head's data so that choosing the next op needs no gathers:
    slot_op: jax.Array  # [W, L] int32 head op, -1 when the chain is exhausted
    slot_dev: jax.Array  # [W, L] int32 device of the head
    slot_rt: jax.Array  # [W, L] float µs, head's ready time
    slot_rp: jax.Array  # [2, W, L] int32, head's ready round and parents not yet started
    slot_free: jax.Array  # [W, L] float µs, when the head's device is next free
    slot_free_r: jax.Array  # [W, L] int32, round of that
    # Per device:
    dev_t: jax.Array  # [D, L] float µs, device free from
    dev_r: jax.Array  # [D, L] int32
    bus_t: jax.Array  # [D, L] float µs, bus free from
    bus_r: jax.Array  # [D, L] int32
    # Outputs:
    out: jax.Array  # [1 + 2C, Np, L] float µs: start, C transfer starts, C arrivals (-inf for
    #   none; C = 1 with broadcast, else D)


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


def _lexmin_slot(keys: list[jax.Array], valid: jax.Array) -> jax.Array:
    """[L] index along axis 0 of the `valid` entry that is smallest by `keys` ([W, L] each)
    lexicographically (the last key must be unique among valid entries)."""
    mask = valid
    for key in keys:
        big = jnp.inf if jnp.issubdtype(key.dtype, jnp.floating) else _BIG_INT
        mask = mask & (key == jnp.min(jnp.where(mask, key, big), axis=0))
    index = jnp.arange(mask.shape[0])[:, None]
    return jnp.min(jnp.where(mask, index, mask.shape[0]), axis=0)


def _pick(hit: jax.Array, values: jax.Array) -> jax.Array:
    """values[j] where hit[j] ([N, ...] one-hot along axis 0), by a select-reduce, not a gather."""
    fill = -jnp.inf if jnp.issubdtype(values.dtype, jnp.floating) else -_BIG_INT
    return jnp.max(jnp.where(hit, values, fill), axis=0)


def simulate_padded(
    graph: SimGraph, cluster: SimCluster, placement: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate one placement ([Np] int32 device per op; padding entries are ignored).

    Under `jax.vmap` over placements only, it simulates the whole batch in one loop with the
    placements on the last axis (`simulate_lanes`)."""
    return _SIMULATE[broadcast](graph, cluster, placement)


def _one(broadcast: bool):
    """`simulate_padded` for one `broadcast` value, with a batching rule over placements."""

    def one(graph, cluster, placement):
        out = simulate_lanes(graph, cluster, placement[:, None], broadcast)
        return jax.tree.map(lambda x: x[..., 0], out)

    simulate = jax.custom_batching.custom_vmap(one)

    @simulate.def_vmap
    def rule(axis_size, in_batched, graph, cluster, placement):
        all_batched = SimOutput(*([True] * len(SimOutput._fields)))
        if any(jax.tree.leaves(in_batched[:2])):  # a graph or cluster per placement
            axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
            return jax.vmap(one, in_axes=axes)(graph, cluster, placement), all_batched
        out = simulate_lanes(graph, cluster, placement.T, broadcast)
        return jax.tree.map(lambda x: jnp.moveaxis(x, -1, 0), out), all_batched

    return simulate


def simulate_lanes(
    graph: SimGraph, cluster: SimCluster, placements: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate placements [Np, L] (one per column) side by side; every output gets a last axis
    of L (e.g. start [Np, L], peak memory [D, L])."""
    n_pad, n_lanes = placements.shape
    n_dev = cluster.speed.shape[0]
    n_slots = graph.chain_heads.shape[0]
    n_kids = graph.children.shape[1]
    ftype = graph.cost.dtype
    lanes = jnp.arange(n_lanes)
    devices = jnp.arange(n_dev, dtype=jnp.int32)[:, None]  # [D, 1]
    slots = jnp.arange(n_slots, dtype=jnp.int32)[:, None]  # [W, 1]
    duration = graph.cost[:, None] / cluster.speed[placements]  # [Np, L] µs
    xfer_time = graph.out_bytes[:, None] / cluster.bandwidth[placements]  # [Np, L] µs
    op_times = jnp.stack([duration, xfer_time])  # [2, Np, L] µs
    # What a step reads about the op it starts: one column of the graph (shared by all lanes).
    child_slot = graph.chain_of.at[graph.children].get(mode="fill", fill_value=0)  # [Np, K]
    graph_cols = jnp.concatenate(
        [graph.children, child_slot, graph.chain_next[:, None]], axis=1
    ).T  # [2K + 1, Np]
    n_sends = 1 if broadcast else n_dev  # transfer columns recorded per op

    def step(_, s: _State) -> _State:
        # 1. Choose: the known head whose start (device free vs ready) is earliest, then by
        #    ready time, then by op index.
        known = (s.slot_op >= 0) & (s.slot_rp[1] == 0)  # [W, L]
        start_t, start_r = _later(s.slot_free, s.slot_free_r, s.slot_rt, s.slot_rp[0])
        i = _lexmin_slot([start_t, start_r, s.slot_rt, s.slot_op], known)  # [L]
        this = slots == i  # [W, L]
        v, d = _pick(this, s.slot_op), _pick(this, s.slot_dev)  # [L]
        st, sr = _pick(this, start_t), _pick(this, start_r)
        cols = graph_cols[:, v]  # [2K + 1, L]
        kids, kid_slot, nxt = cols[:n_kids], cols[n_kids : 2 * n_kids], cols[-1]
        u = jnp.maximum(nxt, 0)  # the chain's next op, [L]
        touched = jnp.concatenate([kids, u[None]])  # [K + 1, L]
        touched_dev = placements.at[touched, lanes].get(mode="fill", fill_value=-1)
        kid_dev, u_dev = touched_dev[:n_kids], touched_dev[-1]  # [K, L], [L]
        remote = (kid_dev >= 0) & (kid_dev != d)  # [K, L]
        dur, xfer_v = op_times[:, v, lanes]  # [L], [L]
        on_d = devices == d  # [D, L]

        # 2. Run it; queue its transfers (FIFO on its device's bus); its consumers' input stamps.
        et, er = _after(st, sr, dur)
        free_t, free_r = _until(et, er, jnp.where(dur > 0, et + cluster.delta1, et))
        send = _broadcast_send if broadcast else _per_device_send
        bus_t, bus_r, xfer_col, arr_col, in_t, in_r = send(
            cluster, _pick(on_d, s.bus_t), _pick(on_d, s.bus_r), et, er, xfer_v, kid_dev, remote
        )
        # Computed once per lane, not once per consumer: XLA would otherwise fuse the per-lane
        # arithmetic above into every [K, L] consumer.
        free_t, free_r, bus_t, bus_r, xfer_col, arr_col, in_t, in_r = jax.lax.optimization_barrier(
            (free_t, free_r, bus_t, bus_r, xfer_col, arr_col, in_t, in_r)
        )

        # 3. Its consumers: input arrival stamps, one parent fewer to wait for.
        old_t = s.ready_t.at[kids, lanes].get(mode="fill", fill_value=0)  # [K, L]
        old_rp = s.ready_rp.at[:, kids, lanes].get(mode="fill", fill_value=0)  # [2, K, L]
        new_t, new_r = _later(old_t, old_rp[0], in_t, in_r)
        new_rp = jnp.stack([new_r, old_rp[1] - 1])
        ready_t = s.ready_t.at[kids, lanes].set(new_t, mode="drop")
        ready_rp = s.ready_rp.at[:, kids, lanes].set(new_rp, mode="drop")
        is_head = (kids < n_pad) & (s.slot_op.at[kid_slot, lanes].get(mode="clip") == kids)
        head_slot = jnp.where(is_head, kid_slot, n_slots)  # [K, L]
        slot_rt = s.slot_rt.at[head_slot, lanes].set(new_t, mode="drop")
        slot_rp = s.slot_rp.at[:, head_slot, lanes].set(new_rp, mode="drop")

        # 4. Device state; the chain's next op becomes the slot's head.
        dev_t, dev_r = jnp.where(on_d, free_t, s.dev_t), jnp.where(on_d, free_r, s.dev_r)
        on_u = devices == u_dev  # [D, L]
        slot_op = jnp.where(this, nxt, s.slot_op)
        slot_dev = jnp.where(this, u_dev, s.slot_dev)
        slot_rt = jnp.where(this, ready_t[u, lanes], slot_rt)
        slot_rp = jnp.where(this, ready_rp[:, u, lanes][:, None], slot_rp)
        here = slot_dev == d  # [W, L]
        slot_free = jnp.where(here, free_t, jnp.where(this, _pick(on_u, dev_t), s.slot_free))
        slot_free_r = jnp.where(here, free_r, jnp.where(this, _pick(on_u, dev_r), s.slot_free_r))
        out_col = jnp.concatenate([st[None], xfer_col, arr_col])  # [1 + 2C, L]
        return _State(
            ready_t=ready_t,
            ready_rp=ready_rp,
            slot_op=slot_op,
            slot_dev=slot_dev,
            slot_rt=slot_rt,
            slot_rp=slot_rp,
            slot_free=slot_free,
            slot_free_r=slot_free_r,
            dev_t=dev_t,
            dev_r=dev_r,
            bus_t=jnp.where(on_d, bus_t, s.bus_t),
            bus_r=jnp.where(on_d, bus_r, s.bus_r),
            out=s.out.at[:, v, lanes].set(out_col),
        )

    heads = graph.chain_heads
    first = jnp.maximum(heads, 0)
    zeros_f = jnp.zeros((n_pad, n_lanes), ftype)
    zeros_i = jnp.zeros((n_slots, n_lanes), jnp.int32)
    parents = jnp.broadcast_to(graph.n_parents[:, None], (n_pad, n_lanes))
    init = _State(
        ready_t=zeros_f,
        ready_rp=jnp.stack([jnp.zeros_like(parents), parents]),
        slot_op=jnp.broadcast_to(heads[:, None], (n_slots, n_lanes)),
        slot_dev=placements[first],
        slot_rt=jnp.zeros((n_slots, n_lanes), ftype),
        slot_rp=jnp.stack([zeros_i, parents[first]]),
        slot_free=jnp.zeros((n_slots, n_lanes), ftype),
        slot_free_r=zeros_i,
        dev_t=jnp.zeros((n_dev, n_lanes), ftype),
        dev_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        bus_t=jnp.zeros((n_dev, n_lanes), ftype),
        bus_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        out=jnp.concatenate(
            [zeros_f[None], jnp.full((2 * n_sends, n_pad, n_lanes), -jnp.inf, ftype)]
        ),
    )
    final = jax.lax.fori_loop(0, graph.n_ops, step, init)
    start = final.out[0]  # [Np, L]
    end = start + duration  # as in the loop (`_after`), for every op
    xfer, arrival = final.out[1 : 1 + n_sends], final.out[1 + n_sends :]  # [C, Np, L]
    if broadcast:  # one transfer per op serves all its remote consumer devices
        xfer, arrival = xfer[0][:, None], arrival[0][:, None]  # [Np, 1, L]
    else:
        xfer, arrival = jnp.moveaxis(xfer, 0, 1), jnp.moveaxis(arrival, 0, 1)  # [Np, D, L]
    peak = jax.vmap(
        lambda p, s, e, x, a: _finish(graph, p, s, e, x, a, n_dev, broadcast),
        in_axes=-1,
        out_axes=-1,
    )(placements, start, end, xfer, arrival)
    return SimOutput(makespan=jnp.max(end, axis=0), start=start, end=end, **peak)


def _finish(graph, placement, start, end, xfer, arrival, n_dev, broadcast) -> dict:
    """One placement's transfer rows [Np, D] (with broadcast, the op's one transfer on every
    device that consumes it remotely) and peak memory [D]."""
    if broadcast:
        child_dev = placement.at[graph.children].get(mode="fill", fill_value=-1)  # [Np, K]
        remote = (child_dev >= 0) & (child_dev != placement[:, None])  # [Np, K]
        devices = jnp.arange(n_dev, dtype=jnp.int32)
        needs = jnp.any(remote[:, :, None] & (child_dev[:, :, None] == devices), axis=1)
        xfer = jnp.where(needs, xfer, -jnp.inf)  # [Np, D]
        arrival = jnp.where(needs, arrival, -jnp.inf)
    peak = peak_memory(graph, placement, start, end, arrival, n_dev, broadcast)
    return {"peak_memory": peak, "transfer_start": xfer, "arrival": arrival}


def _broadcast_send(cluster, bus_t, bus_r, et, er, xfer_v, kid_dev, remote):
    """One transfer of the op's output (ended at stamp (et, er), [L]) serves every remote
    consumer. Returns the bus's new free stamp, the transfer's start and arrival ([1, L] µs, -inf
    if none) and each consumer's input stamp ([K, L] µs, [K, L] rounds)."""
    sends = jnp.any(remote, axis=0)
    x_t, x_r = _later(bus_t, bus_r, et, er)
    a_t, a_r = _after(x_t, x_r, xfer_v)
    b_t, b_r = _until(a_t, a_r, a_t + cluster.delta2)
    bus_t, bus_r = jnp.where(sends, b_t, bus_t), jnp.where(sends, b_r, bus_r)
    xfer_col = jnp.where(sends, x_t, -jnp.inf)[None]
    arr_col = jnp.where(sends, a_t, -jnp.inf)[None]
    return bus_t, bus_r, xfer_col, arr_col, jnp.where(remote, a_t, et), jnp.where(remote, a_r, er)


def _per_device_send(cluster, bus_t, bus_r, et, er, xfer_v, kid_dev, remote):
    """One transfer per remote consumer device, in device order; returns as `_broadcast_send`
    with [D, L] transfer columns."""
    n_dev = cluster.speed.shape[0]
    to = kid_dev[:, None] == jnp.arange(n_dev, dtype=jnp.int32)[:, None]  # [K, D, L]
    need = jnp.any(remote[:, None] & to, axis=0)  # [D, L]
    arr_t, arr_r, xfer_col = [], [], []
    for dest in range(n_dev):
        x_t, x_r = _later(bus_t, bus_r, et, er)
        a_t, a_r = _after(x_t, x_r, xfer_v)
        b_t, b_r = _until(a_t, a_r, a_t + cluster.delta2)
        bus_t = jnp.where(need[dest], b_t, bus_t)
        bus_r = jnp.where(need[dest], b_r, bus_r)
        arr_t.append(jnp.where(need[dest], a_t, -jnp.inf))
        arr_r.append(a_r)
        xfer_col.append(jnp.where(need[dest], x_t, -jnp.inf))
    arr_t, arr_r, xfer_col = jnp.stack(arr_t), jnp.stack(arr_r), jnp.stack(xfer_col)
    in_t = jnp.where(remote, jnp.max(jnp.where(to, arr_t, -jnp.inf), axis=1), et)
    in_r = jnp.where(remote, jnp.max(jnp.where(to, arr_r, 0), axis=1), er)
    return bus_t, bus_r, xfer_col, arr_t, in_t, in_r


_SIMULATE = {b: _one(b) for b in (False, True)}


def peak_memory(
    graph: SimGraph, placement, start, end, arrival, n_dev: int, broadcast: bool = False
) -> jax.Array:
    """[D] bytes: parameters plus the largest sum of live tensors on each device.

    Each (op, device) pair holds at most one interval: the op's own output on its device, from
    start until the op, its local consumers and its transfers are done; or a copy on a consumer's
    device, from arrival until the last consumer there ends. Every event time is a start, an end
    or an arrival (a free is the latest of some of them), so events are placed on the instants of
    one sorted list of those times (`_instants`), and a free's instant is the latest of its
    parts' instants. With `broadcast`, an op's finite arrivals are all equal (one time per op)."""
    n_pad = start.shape[0]
    devices = jnp.arange(n_dev, dtype=jnp.int32)
    arrives = jnp.isfinite(arrival)  # [Np, D]
    arrival_times = jnp.max(arrival, axis=1) if broadcast else arrival.reshape(-1)
    n_instants, ranks = _instants(jnp.concatenate([start, end, arrival_times]))
    at_start, at_end = ranks[:n_pad], ranks[n_pad : 2 * n_pad]  # [Np]
    at_arrival = ranks[2 * n_pad :]
    at_arrival = at_arrival[:, None] if broadcast else at_arrival.reshape(n_pad, n_dev)
    at_arrival = jnp.where(arrives, at_arrival, -1)  # [Np, D]
    segment = graph.edge_src * n_dev + placement.at[graph.edge_dst].get(mode="fill", fill_value=0)
    last_use = jax.ops.segment_max(
        at_end[graph.edge_dst], segment, num_segments=n_pad * n_dev, indices_are_sorted=False
    ).reshape(n_pad, n_dev)  # [Np, D] instant, negative where no consumer
    home = placement[:, None] == devices  # [Np, D]
    home_free = jnp.maximum(at_end, jnp.max(jnp.where(home, last_use, at_arrival), axis=1))
    has_copy = arrives & ~home
    alloc = jnp.where(home, at_start[:, None], at_arrival)  # [Np, D] instant
    free = jnp.where(home, home_free[:, None], last_use)  # [Np, D] instant
    size = jnp.where(home | has_copy, graph.out_bytes[:, None], 0.0)  # [Np, D] bytes
    offset = devices * n_instants  # one row of instants per device
    index = jnp.concatenate([(free + offset).reshape(-1), (alloc + offset).reshape(-1)])
    deltas = jnp.concatenate([-size.reshape(-1), size.reshape(-1)])
    per_instant = jnp.zeros(n_dev * n_instants, size.dtype).at[index].add(deltas, mode="drop")
    running = jnp.cumsum(per_instant.reshape(n_dev, n_instants), axis=1)
    params = jax.ops.segment_sum(graph.param_bytes, placement, num_segments=n_dev)
    return jnp.maximum(jnp.max(running, axis=1), 0.0) + params


def _instants(times: jax.Array) -> tuple[int, jax.Array]:
    """(M, rank [M]) for times [M] µs (non-negative or -inf): each time's position among the
    sorted times, equal times sharing the first position, so ranks compare as the times do.

    Times are compared through their bit patterns (monotone for non-negative floats): a
    one-operand integer sort is several times faster on CPU than sorting floats with a payload."""
    int_type = jnp.int64 if times.dtype == jnp.float64 else jnp.int32
    keys = jax.lax.bitcast_convert_type(times, int_type)
    rank = jnp.searchsorted(jnp.sort(keys), keys, side="left", method="scan")
    return times.shape[0], rank.astype(jnp.int32)
