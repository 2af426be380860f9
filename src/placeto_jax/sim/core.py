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

One loop simulates a chunk of placements, the lanes (`simulate_lanes`; layout in `_State`).
Cost per placement: O(N (W + K + D)) for N ops, W chains, K max out-degree, D devices, plus an
O(N log N) sort for peak memory (O(N D log N) without broadcast).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.sim import native
from placeto_jax.sim.padded import PaddedGraph


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SimGraph:
    """Device-side copy of a `PaddedGraph` (same fields, JAX arrays)."""

    n_ops: jax.Array  # [] int32
    cost: jax.Array  # [Np] float µs
    out_bytes: jax.Array  # [Np] float bytes
    param_bytes: jax.Array  # [Np] float bytes
    inner_kernels: jax.Array  # [Np] float, kernels an op runs after its first (grouped ops)
    n_parents: jax.Array  # [Np] int32
    children: jax.Array  # [Np, K] int32, each op's consumers first, then Np (absent)
    chain_heads: jax.Array  # [W] int32, -1 for padding chains
    chain_next: jax.Array  # [Np] int32, -1 at a chain's end
    chain_of: jax.Array  # [Np] int32
    edge_src: jax.Array  # [Ep] int32, Np for padding edges
    edge_dst: jax.Array  # [Ep] int32

    @classmethod
    def from_padded(cls, padded: PaddedGraph, float_dtype) -> SimGraph:
        """Device arrays of `padded`: floats in `float_dtype`, integers int32."""
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
    """The loop's state for L placements (lanes), lanes last: a step's reductions over chain
    slots and its selects run across lanes in vector registers, and its gathers and scatters into
    per-op arrays take flat indices op * L + lane (XLA CPU runs those 2x to 3x faster than the
    batched gathers and scatters of a vmapped loop)."""

    # Per op (source of truth for ops that are not chain heads):
    ready_t: jax.Array  # [Np * L] float µs, latest input arrival so far
    ready_rp: jax.Array  # [Np * L, 2] int32: round of that arrival, parents not yet started
    # Per chain slot, a copy of its head's data so that choosing the next op needs no gathers:
    slot_op: jax.Array  # [W, L] int32 head op, -1 when the chain is exhausted
    slot_dev: jax.Array  # [W, L] int32 device of the head
    slot_rt: jax.Array  # [W, L] float µs, head's ready time
    slot_rp: jax.Array  # [W * L, 2] int32, head's ready round and parents not yet started
    slot_free: jax.Array  # [W, L] float µs, when the head's device is next free
    slot_free_r: jax.Array  # [W, L] int32, round of that
    # Per device:
    dev_t: jax.Array  # [D, L] float µs, device free from
    dev_r: jax.Array  # [D, L] int32
    bus_t: jax.Array  # [D, L] float µs, bus free from
    bus_r: jax.Array  # [D, L] int32
    # Outputs:
    start: jax.Array  # [Np * L] float µs
    xfer: jax.Array  # [Np * L, C] float µs transfer start, -inf none (C = 1 with broadcast, else D)
    arrival: jax.Array  # [Np * L, C] float µs, -inf none


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


def smallest(keys: list[jax.Array], valid: jax.Array, axis: int) -> jax.Array:
    """Mask of the `valid` entry smallest by `keys` lexicographically along `axis` (the last
    key unique among valid entries): one True per row that has a valid entry."""
    mask = valid
    for key in keys:
        floating = jnp.issubdtype(key.dtype, jnp.floating)
        big = jnp.inf if floating else jnp.iinfo(key.dtype).max
        mask = mask & (key == jnp.min(jnp.where(mask, key, big), axis=axis, keepdims=True))
    return mask


def _lexmin_slot(keys: list[jax.Array], valid: jax.Array) -> jax.Array:
    """[L] index along the first axis of the `valid` entry that is smallest by `keys` [W, L]
    lexicographically (the last key must be unique among valid entries); W where none is."""
    mask = smallest(keys, valid, axis=0)
    n = mask.shape[0]
    return jnp.min(jnp.where(mask, jnp.arange(n)[:, None], n), axis=0)


def _pick(values: jax.Array, index: jax.Array, fill) -> jax.Array:
    """values[index[l, ...], l] for `values` [D, L] and small D, by selects, not a gather."""
    n = values.shape[0]
    hit = index == jnp.arange(n).reshape((n,) + (1,) * index.ndim)  # [D, L, ...]
    per_lane = values.reshape(values.shape + (1,) * (index.ndim - 1))
    return jnp.max(jnp.where(hit, per_lane, fill), axis=0)


def simulate_padded(
    graph: SimGraph, cluster: SimCluster, placement: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate one placement ([Np] int32 device per op; padding entries are ignored): the native
    kernel where it runs (`native.in_use`), else one lane of the JAX loop."""
    if native.in_use():
        out = SimOutput(*native.simulate_placements(graph, cluster, placement[None], broadcast))
    else:
        out = simulate_lanes(graph, cluster, placement[None], broadcast)
    return jax.tree.map(lambda x: x[0], out)


def op_duration(
    cost: jax.Array, inner_kernels: jax.Array, cluster: SimCluster, by_op: jax.Array
) -> jax.Array:
    """[Np, L] µs each op runs on its device: its cost over the device's speed, plus `delta1`
    between its kernels when it runs several back to back (a grouped op)."""
    return cost[:, None] / cluster.speed[by_op] + inner_kernels[:, None] * cluster.delta1


def simulate_lanes(
    graph: SimGraph, cluster: SimCluster, placements: jax.Array, broadcast: bool = True
) -> SimOutput:
    """Simulate placements [L, Np] of one graph in one loop (outputs with a leading L axis).
    Meant for tens of lanes on CPU; Np * L must stay below 2**31."""
    n_lanes, n_pad = placements.shape
    n_dev = cluster.speed.shape[0]
    n_slots = graph.chain_heads.shape[0]
    n_kids = graph.children.shape[1]
    ftype = graph.cost.dtype
    devices = jnp.arange(n_dev, dtype=jnp.int32)[:, None]  # [D, 1]
    lanes = jnp.arange(n_lanes, dtype=jnp.int32)  # [L]
    by_op = placements.T  # [Np, L]
    duration = op_duration(graph.cost, graph.inner_kernels, cluster, by_op)  # [Np, L] µs
    xfer_time = graph.out_bytes[:, None] / cluster.bandwidth[by_op]  # [Np, L] µs
    # What a step reads about the op it starts: one row of the graph (shared by all lanes) and
    # one float row of its placement. Absent children point at their own op: a step then
    # writes its consumers' state at indices in bounds (an out-of-bounds index makes an XLA CPU
    # scatter about 3x slower), and what it writes at its own op is never read again.
    own = jnp.arange(n_pad, dtype=jnp.int32)[:, None]
    kids_or_own = jnp.where(graph.children < n_pad, graph.children, own)  # [Np, K]
    child_slot = graph.chain_of[kids_or_own]  # [Np, K]
    graph_rows = jnp.concatenate(
        [kids_or_own, child_slot, graph.chain_next[:, None]], axis=1
    )  # [Np, 2K + 1]
    float_rows = jnp.stack([duration, xfer_time], axis=-1).reshape(-1, 2)  # [Np * L, 2] µs
    flat_placement = by_op.reshape(-1)  # [Np * L]
    n_sends = 1 if broadcast else n_dev  # transfer columns recorded per op

    def flat(index: jax.Array) -> jax.Array:
        """Flat index into [Np * L] (or [W * L]) arrays of per-lane indices [L] or [L, K]."""
        return index * n_lanes + lanes.reshape((n_lanes,) + (1,) * (index.ndim - 1))

    def step(_, s: _State) -> _State:
        # 1. Choose: the known head whose start (device free vs ready) is earliest, then by
        #    ready time, then by op index.
        slot_r, slot_p = s.slot_rp[:, 0].reshape(-1, n_lanes), s.slot_rp[:, 1].reshape(-1, n_lanes)
        known = (s.slot_op >= 0) & (slot_p == 0)  # [W, L]
        start_t, start_r = _later(s.slot_free, s.slot_free_r, s.slot_rt, slot_r)
        i = _lexmin_slot([start_t, start_r, s.slot_rt, s.slot_op], known)  # [L]
        at = flat(i)  # [L] flat slot index
        v, d = s.slot_op.reshape(-1)[at], s.slot_dev.reshape(-1)[at]
        st, sr = start_t.reshape(-1)[at], start_r.reshape(-1)[at]
        v_at = flat(v)
        row, floats = graph_rows[v], float_rows[v_at]  # [L, 2K + 1], [L, 2]
        kids, kid_slot, nxt = row[:, :n_kids], row[:, n_kids : 2 * n_kids], row[:, -1]
        kid_at = flat(kids)  # [L, K] flat op index
        present = kids != v[:, None]  # [L, K]
        kid_dev = flat_placement[kid_at]  # [L, K]; an absent child (v itself) is on d
        remote = kid_dev != d[:, None]  # [L, K]

        # 2. Run it; queue its transfers (FIFO on its device's bus); its consumers' input stamps.
        et, er = _after(st, sr, floats[:, 0])
        free_t, free_r = _until(et, er, jnp.where(floats[:, 0] > 0, et + cluster.delta1, et))
        on_dev = devices == d  # [D, L]
        send = _broadcast_send if broadcast else _per_device_send
        bus_t, bus_r, xfer_row, arr_row, in_t, in_r = send(
            cluster,
            _pick(s.bus_t, d, -jnp.inf),
            _pick(s.bus_r, d, -1),
            et,
            er,
            floats[:, 1],
            kid_dev,
            remote,
        )

        # 3. Its consumers: input arrival stamps, one parent fewer to wait for. Absent children
        #    write at v, and children that are not chain heads at slot i (v's slot, which gets
        #    its new head below): both are scratch.
        old_t = s.ready_t[kid_at]
        old_rp = s.ready_rp[kid_at]  # [L, K, 2]
        new_t, new_r = _later(old_t, old_rp[..., 0], in_t, in_r)
        new_rp = jnp.stack([new_r, old_rp[..., 1] - 1], axis=-1)
        ready_t = s.ready_t.at[kid_at].set(new_t, mode="promise_in_bounds")
        ready_rp = s.ready_rp.at[kid_at].set(new_rp, mode="promise_in_bounds")
        kid_slot_at = flat(kid_slot)  # [L, K]
        is_head = present & (s.slot_op.reshape(-1)[kid_slot_at] == kids)
        head_at = jnp.where(is_head, kid_slot_at, at[:, None])
        slot_rt = s.slot_rt.reshape(-1).at[head_at].set(new_t, mode="promise_in_bounds")
        slot_rp = s.slot_rp.at[head_at].set(new_rp, mode="promise_in_bounds")

        # 4. Device state; the chain's next op becomes the slot's head.
        dev_t = jnp.where(on_dev, free_t, s.dev_t)
        dev_r = jnp.where(on_dev, free_r, s.dev_r)
        u_at = flat(jnp.maximum(nxt, 0))  # [L]
        u_dev = flat_placement[u_at]
        this = jnp.arange(n_slots)[:, None] == i  # [W, L]
        slot_op = jnp.where(this, nxt, s.slot_op)
        slot_dev = jnp.where(this, u_dev, s.slot_dev)
        slot_rt = jnp.where(this, ready_t[u_at], slot_rt.reshape(n_slots, n_lanes))
        slot_rp = jnp.where(this[..., None], ready_rp[u_at], slot_rp.reshape(n_slots, n_lanes, 2))
        slot_rp = slot_rp.reshape(-1, 2)
        on_d = slot_dev == d
        u_free_t, u_free_r = _pick(dev_t, u_dev, -jnp.inf), _pick(dev_r, u_dev, -1)
        slot_free = jnp.where(on_d, free_t, jnp.where(this, u_free_t, s.slot_free))
        slot_free_r = jnp.where(on_d, free_r, jnp.where(this, u_free_r, s.slot_free_r))
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
            bus_t=jnp.where(on_dev, bus_t, s.bus_t),
            bus_r=jnp.where(on_dev, bus_r, s.bus_r),
            start=s.start.at[v_at].set(st, mode="promise_in_bounds"),
            xfer=s.xfer.at[v_at].set(xfer_row, mode="promise_in_bounds"),
            arrival=s.arrival.at[v_at].set(arr_row, mode="promise_in_bounds"),
        )

    heads = graph.chain_heads
    first = jnp.maximum(heads, 0)
    flat_f = jnp.zeros(n_pad * n_lanes, ftype)
    slots_lanes = (n_slots, n_lanes)
    n_parents = jnp.repeat(graph.n_parents, n_lanes)  # [Np * L]
    init = _State(
        ready_t=flat_f,
        ready_rp=jnp.stack([jnp.zeros_like(n_parents), n_parents], axis=1),
        slot_op=jnp.broadcast_to(heads[:, None], slots_lanes),
        slot_dev=by_op[first],
        slot_rt=jnp.zeros(slots_lanes, ftype),
        slot_rp=jnp.stack(
            [jnp.zeros(n_slots * n_lanes, jnp.int32), jnp.repeat(graph.n_parents[first], n_lanes)],
            axis=1,
        ),
        slot_free=jnp.zeros(slots_lanes, ftype),
        slot_free_r=jnp.zeros(slots_lanes, jnp.int32),
        dev_t=jnp.zeros((n_dev, n_lanes), ftype),
        dev_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        bus_t=jnp.zeros((n_dev, n_lanes), ftype),
        bus_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        start=flat_f,
        xfer=jnp.full((n_pad * n_lanes, n_sends), -jnp.inf, ftype),
        arrival=jnp.full((n_pad * n_lanes, n_sends), -jnp.inf, ftype),
    )
    final = jax.lax.fori_loop(0, graph.n_ops, step, init)
    start = final.start.reshape(n_pad, n_lanes).T  # [L, Np]
    xfer = final.xfer.reshape(n_pad, n_lanes, n_sends).transpose(1, 0, 2)  # [L, Np, C]
    arrival = final.arrival.reshape(n_pad, n_lanes, n_sends).transpose(1, 0, 2)
    finish = functools.partial(_finish, graph, n_dev=n_dev, broadcast=broadcast)
    return jax.vmap(finish)(placements, start, start + duration.T, xfer, arrival)


def _finish(graph, placement, start, end, xfer, arrival, n_dev: int, broadcast: bool):
    """One placement's outputs from its loop's starts, ends ([Np] µs) and transfer rows."""
    devices = jnp.arange(n_dev, dtype=jnp.int32)
    if broadcast:  # one transfer per op serves all its remote consumer devices
        needs = consumer_devices(graph, placement, n_dev) & (placement[:, None] != devices)
        xfer = jnp.where(needs, xfer, -jnp.inf)  # [Np, D]
        arrival = jnp.where(needs, arrival, -jnp.inf)
    peak = peak_memory(graph, placement, start, end, arrival, n_dev, broadcast)
    return SimOutput(
        makespan=jnp.max(end),
        start=start,
        end=end,
        peak_memory=peak,
        transfer_start=xfer,
        arrival=arrival,
    )


def transfer(cluster, bus_t, bus_r, et, er, xfer_v, need):
    """Per lane [L], where `need`: one transfer of the output of an op that ended at stamp
    (et, er), queued on its device's bus (free from (bus_t, bus_r)), taking `xfer_v` µs.
    Returns the bus's new free stamp, the transfer's start (-inf where not `need`) and its
    arrival stamp."""
    x_t, x_r = _later(bus_t, bus_r, et, er)
    a_t, a_r = _after(x_t, x_r, xfer_v)
    b_t, b_r = _until(a_t, a_r, a_t + cluster.delta2)
    bus_t, bus_r = jnp.where(need, b_t, bus_t), jnp.where(need, b_r, bus_r)
    return bus_t, bus_r, jnp.where(need, x_t, -jnp.inf), a_t, a_r


def _broadcast_send(cluster, bus_t, bus_r, et, er, xfer_v, kid_dev, remote):
    """One transfer of the op's output (ended at stamp (et, er)) serves every remote consumer.
    Per lane: returns the bus's new free stamp, the transfer's start and arrival ([L, 1] µs, -inf
    if none) and each consumer's input stamp ([L, K] µs, [L, K] rounds)."""
    sends = jnp.any(remote, axis=1)
    bus_t, bus_r, x_t, a_t, a_r = transfer(cluster, bus_t, bus_r, et, er, xfer_v, sends)
    xfer_row = x_t[:, None]
    arr_row = jnp.where(sends, a_t, -jnp.inf)[:, None]
    in_t = jnp.where(remote, a_t[:, None], et[:, None])
    in_r = jnp.where(remote, a_r[:, None], er[:, None])
    return bus_t, bus_r, xfer_row, arr_row, in_t, in_r


def _per_device_send(cluster, bus_t, bus_r, et, er, xfer_v, kid_dev, remote):
    """One transfer per remote consumer device, in device order; returns as `_broadcast_send`
    with [L, D] transfer rows."""
    n_dev = cluster.speed.shape[0]
    arr_t, arr_r, xfer_row = [], [], []
    for dest in range(n_dev):
        need = jnp.any(remote & (kid_dev == dest), axis=1)  # [L]
        bus_t, bus_r, x_t, a_t, a_r = transfer(cluster, bus_t, bus_r, et, er, xfer_v, need)
        arr_t.append(jnp.where(need, a_t, -jnp.inf))
        arr_r.append(a_r)
        xfer_row.append(x_t)
    arr_t, arr_r = jnp.stack(arr_t), jnp.stack(arr_r)  # [D, L]
    in_t = jnp.where(remote, _pick(arr_t, kid_dev, -jnp.inf), et[:, None])
    in_r = jnp.where(remote, _pick(arr_r, kid_dev, 0), er[:, None])
    return bus_t, bus_r, jnp.stack(xfer_row, axis=1), arr_t.T, in_t, in_r


def peak_memory(
    graph: SimGraph, placement, start, end, arrival, n_dev: int, broadcast: bool = False
) -> jax.Array:
    """[D] bytes: parameters plus the largest sum of live tensors on each device.

    Each (op, device) pair holds at most one interval: the op's own output on its device, from
    start until the op, its local consumers and its transfers are done; or a copy on a consumer's
    device, from arrival until the last consumer there ends. A free is at an end or an arrival
    (the latest of some of them), so the instants are those of the sorted ends and arrivals
    (`_instants`), and a free's instant is the latest of its parts' instants. A start only
    allocates; it joins the instant of the latest end or arrival not after it (instant 0 if
    there is none): between two such instants memory only grows, so its largest value there is
    the one after all of the interval's starts, which is what the instant then holds. With
    `broadcast`, an op's finite arrivals are all equal (one time per op)."""
    n_pad = start.shape[0]
    devices = jnp.arange(n_dev, dtype=jnp.int32)
    arrives = jnp.isfinite(arrival)  # [Np, D]
    arrival_times = jnp.max(arrival, axis=1) if broadcast else arrival.reshape(-1)
    n_instants, at_events, at_start = _instants(jnp.concatenate([end, arrival_times]), start)
    at_end, at_arrival = at_events[:n_pad], at_events[n_pad:]  # [Np], [Np or Np * D]
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
    largest = _max_prefix_sum(per_instant.reshape(n_dev, n_instants))
    params = jax.ops.segment_sum(graph.param_bytes, placement, num_segments=n_dev)
    return jnp.maximum(largest, 0.0) + params


def consumer_devices(graph: SimGraph, placement, n_dev: int) -> jax.Array:
    """[Np, D] bool: whether op v has a consumer on device d (one scatter over the edges)."""
    n_pad = placement.shape[0]
    dst_dev = placement.at[graph.edge_dst].get(mode="fill", fill_value=0)  # [Ep]
    pair = graph.edge_src * n_dev + dst_dev  # [Ep] (producer, consumer device); padding: dropped
    return jnp.zeros(n_pad * n_dev, bool).at[pair].set(True, mode="drop").reshape(n_pad, n_dev)


def _max_prefix_sum(x: jax.Array, block: int = 32) -> jax.Array:
    """[R] largest prefix sum of each row of x [R, M]: prefix sums within blocks of `block` by
    one matrix product with a triangular matrix of ones, then the blocks' running offsets (exact
    for integer values; several times faster on CPU than a cumsum over M)."""
    rows, m = x.shape
    x = jnp.pad(x, ((0, 0), (0, -m % block))).reshape(rows, -1, block)  # [R, M / block, block]
    inner = x @ jnp.triu(jnp.ones((block, block), x.dtype))  # prefix sums within each block
    totals = jnp.cumsum(inner[:, :, -1], axis=1)  # [R, M / block]
    offset = jnp.pad(totals[:, :-1], ((0, 0), (1, 0)))  # sum of the blocks before each block
    return jnp.max(offset[:, :, None] + inner, axis=(1, 2))


def _instants(events: jax.Array, others: jax.Array) -> tuple[int, jax.Array, jax.Array]:
    """(M + 1, instant [M] of each of `events`, instant [X] of each of `others`) for times µs
    (non-negative or -inf): a time's instant is the number of events at or before it, so equal
    events share one, instants compare as the times do, and a time before every event is at 0.

    Times are compared through their bit patterns (monotone for non-negative floats): a
    one-operand integer sort is several times faster on CPU than sorting floats with a payload."""
    int_type = jnp.int64 if events.dtype == jnp.float64 else jnp.int32
    keys = jax.lax.bitcast_convert_type(jnp.concatenate([events, others]), int_type)
    m = events.shape[0]
    rank = jnp.searchsorted(jnp.sort(keys[:m]), keys, side="right", method="scan")
    rank = rank.astype(jnp.int32)
    return m + 1, rank[:m], rank[m:]
