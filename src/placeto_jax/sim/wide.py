"""The simulator's loop for wide graphs: per-device blocks of chain heads instead of a scan.

`core.simulate_lanes` chooses each step's op by scanning all W chain heads, O(W) per step,
which dominates on real graphs (W of 100 to 700). This loop commits the same op at every step
(same semantics, bit-equal outputs), but finds it in O(D W / S + S + K0) per step:

* **Per-device order keys that do not move.** Device d would start, at stamp max(F_d, R_v), the
  known head v on d (ready stamp R_v) that is smallest by (start stamp, ready time, index); F_d
  is d's free stamp. Heads with R_v <= F_d ("group A") all start at F_d, so their order is
  (ready time, index); the others start at R_v, order (ready stamp, index). Both orders are keys
  fixed once a head is known. The slots are cut into blocks of S; for every (device, block) the
  loop keeps the head smallest by (R_t, R_r, index) ("T1") and by (R_t, index) ("T2").
* **The choice.** The D x W / S block winners are read densely (their keys are stored with
  them). Per device: T1's winner m over its blocks; if R_m > F_d, m starts at R_m.
  Otherwise group A is not empty; its smallest (R_t, index) is T2's winner when R_t(m) < F_t
  (every head with the smallest ready time is then in A). When R_t(m) = F_t, A holds the heads
  with R_t = F_t and R_r <= F_r: T2's winner if its round qualifies, else (a tie at one instant
  between rounds of zero-time work, rare) a scan of the device's heads. The step commits the
  smallest device candidate by (start stamp, ready time, index), as `core` does.
* **Updates.** The committed head leaves its block, which is rescanned (S slots). The chain's
  next op and every consumer that became a known head (its last parent started) are compared
  with their block's winners (O(1) each, the best candidate per block first).
* **Rows of children.** An op's consumers are handled in rows of K0: a step commits an op and
  handles its first row, and an op with more consumers takes one more step per row before the
  next commit (nothing is committed in between, so the order of events is unchanged). The loop
  runs N + (extra rows) steps, the same for every placement. Transfers need every consumer's
  device at once: `core.consumer_devices`, once per placement.

Lanes (placements of one graph simulated in one loop) are last, and per-op arrays flat
(op * L + lane), as in `core`. XLA CPU pays about half a microsecond per kernel of the loop's
body, and a gather or scatter is a kernel: the fields that are read and written together are
packed into one integer array (times as their bit patterns, which order non-negative floats
as the floats do), so that each is one gather and one scatter. Every scatter index is in
bounds: per-op arrays have one scratch op row (index Np), slot arrays a sentinel row (W, "no
head") and a scratch row (W + 1), block arrays a scratch entry; masked-out writes go there.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from placeto_jax.sim.core import (
    SimCluster,
    SimGraph,
    SimOutput,
    _after,
    _finish,
    _later,
    _pick,
    _until,
    consumer_devices,
    op_duration,
    smallest,
    transfer,
)

ROW = 8  # consumers handled per step (K0)
# Columns of the packed arrays:
T, R = 0, 1  # ready: time bits, round; then parents not yet started
LEFT = 2
OP, ON = 0, 1  # slots: head op, its device once known (else -1); then T_, R_ (time, round)
S_T, S_R = 2, 3
SLOT, B_T, B_R, B_OP = 0, 1, 2, 3  # block winners: slot, time bits, round, op


class _State(NamedTuple):
    ready: jax.Array  # [(Np + 1) L, 3] int: input arrival so far (time bits, round), parents left
    out: jax.Array  # [(Np + 1) L, 1 + 2C] float µs: start, transfer starts, arrivals (-inf none)
    slots: jax.Array  # [(W + 2) L, 4] int: head op, device if known, ready (time bits, round)
    best: jax.Array  # [(D nb + 1) L, 2, 4] int: T1 and T2 winners (slot, time bits, round, op)
    dev_t: jax.Array  # [D, L] float µs, device free from
    dev_r: jax.Array  # [D, L] int32
    bus_t: jax.Array  # [D, L] float µs
    bus_r: jax.Array  # [D, L] int32
    # The op whose rows of consumers are still to do, per lane [L] (-1: none):
    pend_op: jax.Array  # int32
    pend_row: jax.Array  # int32 next row
    pend_dev: jax.Array  # int32 its device
    pend_t: jax.Array  # float µs, its end: the input stamp of a local consumer
    pend_r: jax.Array  # int32
    pend_at: jax.Array  # [C, L] float µs, input stamp of a remote consumer (per device: C = D)
    pend_ar: jax.Array  # [C, L] int32


def block_size(width: int, n_dev: int) -> int:
    """Chain slots per block (S): the power of two nearest sqrt(D W), which balances the
    choice's dense read of D W / S block winners against the rescan of S slots; 16 to 128.
    Measured (docs/simulator.md): 32 at W = 392, 64 from W = 640 (1.22x over 32 at W = 1,320)."""
    return min(128, max(16, 2 ** round(math.log2(math.sqrt(n_dev * width)))))


def _before_stamp(a, b) -> jax.Array:
    """Whether keys a = (R_t, R_r, op) come before b in T1's order."""
    return (a[0] < b[0]) | ((a[0] == b[0]) & ((a[1] < b[1]) | ((a[1] == b[1]) & (a[2] < b[2]))))


def _before_time(a, b) -> jax.Array:
    """Whether keys a = (R_t, R_r, op) come before b in T2's order (R_t, op)."""
    return (a[0] < b[0]) | ((a[0] == b[0]) & (a[2] < b[2]))


def _select(mask: jax.Array, values: jax.Array, axis: int, fill) -> jax.Array:
    """The `values` entry that a one-hot `mask` picks along `axis` (`fill` where none), by a
    masked reduction (fused by XLA, unlike a gather)."""
    low = -jnp.inf if jnp.issubdtype(values.dtype, jnp.floating) else jnp.iinfo(values.dtype).min
    picked = jnp.max(jnp.where(mask, values, low), axis=axis)
    return jnp.where(jnp.any(mask, axis=axis), picked, fill)


def simulate_lanes_wide(
    graph: SimGraph,
    cluster: SimCluster,
    placements: jax.Array,
    broadcast: bool = True,
    row: int = ROW,
    block: int | None = None,
) -> SimOutput:
    """Simulate placements [L, Np] of one graph in one loop; outputs as `core.simulate_lanes`.
    `row` consumers per step and `block` slots per block (static; default `block_size`)."""
    n_lanes, n_pad = placements.shape
    n_dev = cluster.speed.shape[0]
    n_kids = graph.children.shape[1]
    row_len = min(row, n_kids)
    n_row_slots = -(-n_kids // row_len)  # rows per op in the table (R)
    width = graph.chain_heads.shape[0]
    block = min(block or block_size(width, n_dev), width)
    n_blocks = -(-width // block)
    n_slots = n_blocks * block  # W, slots padded to whole blocks
    sentinel, slot_scratch = n_slots, n_slots + 1
    blk_scratch = n_dev * n_blocks
    ftype = graph.cost.dtype
    itype = jnp.int64 if ftype == jnp.float64 else jnp.int32  # the float's bit pattern
    big = jnp.iinfo(itype).max
    n_sends = 1 if broadcast else n_dev
    lanes = jnp.arange(n_lanes, dtype=jnp.int32)
    devices = jnp.arange(n_dev, dtype=jnp.int32)[:, None]  # [D, 1]
    none = jnp.array([sentinel, big, big, big], itype)  # a winner entry without a head

    def flat(index: jax.Array) -> jax.Array:
        """Flat index of per-lane indices [L] or [L, K] into lane-last arrays."""
        return index * n_lanes + lanes.reshape((n_lanes,) + (1,) * (index.ndim - 1))

    def bits(t: jax.Array) -> jax.Array:
        return jax.lax.bitcast_convert_type(t, itype)

    def time_of(b: jax.Array) -> jax.Array:
        return jax.lax.bitcast_convert_type(b, ftype)

    # Per op, lanes last; one scratch op row at Np.
    by_op = jnp.concatenate([placements.T, jnp.zeros((1, n_lanes), jnp.int32)])  # [Np + 1, L]
    cost = jnp.pad(graph.cost, (0, 1))
    out_bytes = jnp.pad(graph.out_bytes, (0, 1))
    inner = jnp.pad(graph.inner_kernels, (0, 1))
    duration = op_duration(cost, inner, cluster, by_op)  # [Np + 1, L] µs
    op_times = jnp.stack([duration, out_bytes[:, None] / cluster.bandwidth[by_op]], -1)
    op_times = op_times.reshape(-1, 2)  # [(Np + 1) L, 2] µs: run, transfer
    placement_flat = by_op.reshape(-1)
    needs = jax.vmap(lambda p: consumer_devices(graph, p, n_dev))(placements)  # [L, Np, D]
    needs = jnp.concatenate([needs.transpose(1, 0, 2), jnp.zeros((1, n_lanes, n_dev), bool)])
    needs = needs.reshape(-1, n_dev)  # [(Np + 1) L, D]
    kids_table = jnp.pad(
        graph.children, ((0, 1), (0, n_row_slots * row_len - n_kids)), constant_values=n_pad
    ).reshape(-1, row_len)  # [(Np + 1) R, K0], Np where absent
    degree = jnp.sum(graph.children < n_pad, axis=1)
    n_rows = jnp.pad(jnp.maximum(1, -(-degree // row_len)), (0, 1), constant_values=1)
    real = jnp.arange(n_pad) < graph.n_ops
    n_steps = graph.n_ops + jnp.sum(jnp.where(real, n_rows[:n_pad] - 1, 0))
    chain_of = jnp.pad(graph.chain_of, (0, 1))
    chain_next = jnp.pad(graph.chain_next, (0, 1), constant_values=-1)

    # ------------------------------------------------------------------ blocks
    def rescan(s: _State, dev: jax.Array, blk: jax.Array) -> jax.Array:
        """[L, 2, 4] the T1 and T2 winners (slot, time bits, round, op) of block `blk` [L]
        among the known heads on `dev` [L]."""
        slots = blk[:, None] * block + jnp.arange(block, dtype=jnp.int32)  # [L, S]
        rows = s.slots[flat(slots)]  # [L, S, 4]
        valid = rows[..., ON] == dev[:, None]
        op, t, r = rows[..., OP], rows[..., S_T], rows[..., S_R]
        entries = []
        for keys in ([t, r, op], [t, op]):
            mask = smallest(keys, valid, 1)
            entries.append(
                jnp.stack(
                    [_select(mask, x, 1, f) for x, f in zip((slots, t, r, op), none, strict=True)],
                    -1,
                )
            )
        return jnp.stack(entries, axis=1)

    def enter(best: jax.Array, cand: jax.Array, ok: jax.Array, target: jax.Array) -> jax.Array:
        """`best` with the candidates cand [L, C, 4] (slot, time bits, round, op; in block
        `target` where `ok`) that beat their block's winner, per tree: first the best
        candidate of each block, then one scatter."""
        key = (cand[..., B_T], cand[..., B_R], cand[..., B_OP])
        at = flat(target)  # [L, C]
        current = best[jnp.where(ok, at, flat(jnp.full_like(target, blk_scratch)))]  # [L, C, 2, 4]
        same = ok[:, None, :] & (target[:, None, :] == target[:, :, None])  # [L, C, C]
        index, values = [], []
        for tree, before in enumerate((_before_stamp, _before_time)):
            beaten = jnp.any(
                same & before(tuple(k[:, None, :] for k in key), tuple(k[:, :, None] for k in key)),
                axis=2,
            )
            now = current[:, :, tree]
            wins = ok & ~beaten & before(key, (now[..., B_T], now[..., B_R], now[..., B_OP]))
            index.append(jnp.where(wins, at, flat(jnp.full_like(target, blk_scratch))) * 2 + tree)
            values.append(jnp.where(wins[..., None], cand, now))
        flat_best = best.reshape(-1, 4)
        flat_best = flat_best.at[jnp.stack(index, -1)].set(
            jnp.stack(values, 2), mode="promise_in_bounds"
        )
        return flat_best.reshape(best.shape)

    # ------------------------------------------------------------------ choice
    def device_best(s: _State, tree: int, order) -> tuple[jax.Array, ...]:
        """Per device [D, L]: the winner (slot, time bits, round, op) over its blocks."""
        view = s.best[: blk_scratch * n_lanes, tree].reshape(n_dev, n_blocks, n_lanes, 4)
        mask = smallest([view[..., k] for k in order], view[..., B_OP] < big, axis=1)
        return tuple(_select(mask, view[..., k], 1, none[k]) for k in range(4))

    def choose(s: _State):
        """Per lane: (slot, op, device, start stamp) of the op the next commit starts."""
        m_slot, m_t, m_r, m_o = device_best(s, 0, (B_T, B_R, B_OP))
        a_slot, _, a_r, a_o = device_best(s, 1, (B_T, B_OP))
        f_t, f_r = bits(s.dev_t), s.dev_r
        exists = m_o < big
        group_a = exists & ((m_t < f_t) | ((m_t == f_t) & (m_r <= f_r)))
        hard = group_a & (m_t == f_t) & (a_r > f_r)
        c_slot = jnp.where(group_a, a_slot, m_slot)
        c_op = jnp.where(group_a, a_o, m_o)
        c_slot, c_op = jax.lax.cond(
            jnp.any(hard),
            lambda: _scan_ties(s, f_t, f_r, hard, c_slot, c_op),
            lambda: (c_slot, c_op),
        )
        s_t = jnp.where(group_a, f_t, m_t)  # every candidate's ready time is m_t
        s_r = jnp.where(group_a, f_r, m_r)
        mask = smallest([s_t, s_r, m_t, c_op], exists, axis=0)  # [D, L]
        d = jnp.minimum(jnp.argmax(mask, axis=0).astype(jnp.int32), n_dev - 1)
        # (no candidate: a pending lane, whose choice is unused)
        slot = _select(mask, c_slot, 0, 0).astype(jnp.int32)
        op = _select(mask, c_op, 0, 0).astype(jnp.int32)
        st = time_of(_select(mask, s_t, 0, 0))
        return slot, op, d, st, _select(mask, s_r, 0, 0).astype(jnp.int32)

    def _scan_ties(s, f_t, f_r, hard, c_slot, c_op):
        """Group A's smallest op where rounds decide: the heads on d with R_t = F_t and
        R_r <= F_r, by a scan of every slot (only taken when some lane needs it)."""
        rows = s.slots[: n_slots * n_lanes].reshape(n_slots, n_lanes, 4)
        slots = jnp.arange(n_slots, dtype=itype)[:, None]
        out_slot, out_op = [], []
        for e in range(n_dev):
            ok = (rows[..., ON] == e) & (rows[..., S_T] == f_t[e]) & (rows[..., S_R] <= f_r[e])
            mask = smallest([rows[..., OP]], ok, axis=0)
            out_slot.append(jnp.where(hard[e], _select(mask, slots, 0, sentinel), c_slot[e]))
            out_op.append(jnp.where(hard[e], _select(mask, rows[..., OP], 0, big), c_op[e]))
        return jnp.stack(out_slot), jnp.stack(out_op)

    # ------------------------------------------------------------------ one step
    def step(_, s: _State) -> _State:
        pending = s.pend_op >= 0
        commit = ~pending
        i, v, d, st, sr = choose(s)
        v = jnp.where(commit, v, n_pad)  # the scratch op for pending lanes
        v_at = flat(v)
        times = op_times[v_at]
        dur, xt = times[:, 0], times[:, 1]
        et, er = _after(st, sr, dur)
        free_t, free_r = _until(et, er, jnp.where(dur > 0, et + cluster.delta1, et))
        remote_dev = needs[v_at] & (d[:, None] != devices.T)  # [L, D]
        send = _broadcast_send if broadcast else _per_device_send
        bus_t, bus_r, xfer_row, arr_row, rem_t, rem_r = send(
            cluster, _pick(s.bus_t, d, -jnp.inf), _pick(s.bus_r, d, -1), et, er, xt, remote_dev
        )

        # Rows of consumers: the committed op's first, or the pending op's next.
        row_op = jnp.where(pending, s.pend_op, v)
        row = jnp.where(pending, s.pend_row, 0)
        row_dev = jnp.where(pending, s.pend_dev, d)
        loc_t, loc_r = jnp.where(pending, s.pend_t, et), jnp.where(pending, s.pend_r, er)
        rem_t = jnp.where(pending, s.pend_at, rem_t)  # [C, L]
        rem_r = jnp.where(pending, s.pend_ar, rem_r)
        kids = kids_table[row_op * n_row_slots + row]  # [L, K0]
        present = kids < n_pad
        kid_at = flat(kids)  # absent: the scratch op
        kid_dev = placement_flat[kid_at]
        remote = kid_dev != row_dev[:, None]
        if broadcast:
            in_t = jnp.where(remote, rem_t[0][:, None], loc_t[:, None])
            in_r = jnp.where(remote, rem_r[0][:, None], loc_r[:, None])
        else:
            in_t = jnp.where(remote, _pick(rem_t, kid_dev, -jnp.inf), loc_t[:, None])
            in_r = jnp.where(remote, _pick(rem_r, kid_dev, 0), loc_r[:, None])
        old = s.ready[kid_at]  # [L, K0, 3]
        new_t, new_r = _later(time_of(old[..., T]), old[..., R], in_t, in_r)
        new_t = bits(new_t)
        new_left = old[..., LEFT] - 1
        ready = s.ready.at[kid_at].set(
            jnp.stack([new_t, new_r.astype(itype), new_left], -1), mode="promise_in_bounds"
        )
        kid_slot = chain_of[kids]
        kid_rows = s.slots[flat(kid_slot)]  # [L, K0, 4]
        insert = present & (new_left == 0) & (kid_rows[..., OP] == kids)

        # Slots: the committed op's chain moves on; consumers that became known heads.
        u = jnp.where(commit, chain_next[v], -1)
        u_at = flat(jnp.maximum(u, 0))
        u_dev = placement_flat[u_at]
        u_ready = ready[u_at]  # [L, 3]
        u_known = commit & (u >= 0) & (u_ready[:, LEFT] == 0)
        i_at = flat(jnp.where(commit, i, slot_scratch))
        ins_at = flat(jnp.where(insert, kid_slot, slot_scratch))  # [L, K0]
        u_row = jnp.stack([u, jnp.where(u_known, u_dev, -1), u_ready[:, T], u_ready[:, R]], -1)
        kid_row = jnp.stack([kids, kid_dev, new_t, new_r.astype(itype)], -1)
        slots = s.slots.at[jnp.concatenate([i_at[:, None], ins_at], 1)].set(
            jnp.concatenate([u_row[:, None].astype(itype), kid_row.astype(itype)], 1),
            mode="promise_in_bounds",
        )
        s = s._replace(ready=ready, slots=slots)

        # Blocks: rescan the committed slot's block on its device; then the heads that became
        # known (the chain's next op and consumers) enter their blocks.
        blk = jnp.where(commit, i, 0) // block
        at = flat(jnp.where(commit, d * n_blocks + blk, blk_scratch))
        best = s.best.at[at].set(rescan(s, d, blk), mode="promise_in_bounds")
        c_slot = jnp.concatenate([i[:, None], kid_slot], axis=1)  # [L, C = 1 + K0]
        cand = jnp.stack(
            [
                c_slot.astype(itype),
                jnp.concatenate([u_ready[:, T][:, None], new_t], 1),
                jnp.concatenate([u_ready[:, R][:, None], new_r.astype(itype)], 1),
                jnp.concatenate([u[:, None], kids], 1).astype(itype),
            ],
            -1,
        )
        ok = jnp.concatenate([u_known[:, None], insert], axis=1)
        target = jnp.concatenate([u_dev[:, None], kid_dev], axis=1) * n_blocks + c_slot // block
        best = enter(best, cand, ok, target)

        on_dev = (devices == d) & commit
        more = row + 1 < n_rows[row_op]
        out_row = jnp.concatenate([st[:, None], xfer_row, arr_row], axis=1)  # [L, 1 + 2C]
        return s._replace(
            out=s.out.at[v_at].set(out_row, mode="promise_in_bounds"),
            best=best,
            dev_t=jnp.where(on_dev, free_t, s.dev_t),
            dev_r=jnp.where(on_dev, free_r, s.dev_r),
            bus_t=jnp.where(on_dev, bus_t, s.bus_t),
            bus_r=jnp.where(on_dev, bus_r, s.bus_r),
            pend_op=jnp.where(more, row_op, -1),
            pend_row=row + 1,
            pend_dev=row_dev,
            pend_t=loc_t,
            pend_r=loc_r,
            pend_at=rem_t,
            pend_ar=rem_r,
        )

    # ------------------------------------------------------------------ start
    heads = jnp.pad(graph.chain_heads, (0, n_slots - width), constant_values=-1)  # [W]
    first_op = jnp.maximum(heads, 0)
    known = (heads >= 0) & (graph.n_parents[first_op] == 0)
    slot_op = jnp.broadcast_to(heads[:, None], (n_slots, n_lanes))
    slot_on = jnp.where(known[:, None], by_op[first_op], -1)  # [W, L]
    zero_t = jnp.zeros((n_slots, n_lanes), itype)  # bits of 0.0
    extra = jnp.array([[big, -1, big, big], [-1, -1, 0, 0]], itype)  # sentinel, scratch
    slots0 = jnp.concatenate(
        [
            jnp.stack([slot_op, slot_on, zero_t, zero_t], -1).astype(itype),
            jnp.broadcast_to(extra[:, None], (2, n_lanes, 4)),
        ]
    ).reshape(-1, 4)
    valid = (slot_on == devices[:, :, None]).reshape(n_dev, n_blocks, block, n_lanes)
    ops = jnp.broadcast_to(slot_op.reshape(n_blocks, block, n_lanes), valid.shape).astype(itype)
    mask = smallest([ops], valid, axis=2)  # every ready time is 0 at the start
    slot_ids = jnp.arange(n_slots, dtype=itype).reshape(n_blocks, block, 1)
    entry = jnp.stack(
        [
            _select(mask, jnp.broadcast_to(slot_ids, valid.shape), 2, sentinel),
            jnp.where(jnp.any(mask, 2), 0, big).astype(itype),
            jnp.where(jnp.any(mask, 2), 0, big).astype(itype),
            _select(mask, ops, 2, big),
        ],
        -1,
    ).reshape(-1, 4)  # [D nb L, 4]
    entry = jnp.concatenate([entry, jnp.broadcast_to(none, (n_lanes, 4))])
    n_parents = jnp.pad(graph.n_parents, (0, 1)).astype(itype)
    per_op = (n_pad + 1) * n_lanes
    init = _State(
        ready=jnp.stack(
            [jnp.zeros(per_op, itype), jnp.zeros(per_op, itype), jnp.repeat(n_parents, n_lanes)],
            -1,
        ),
        out=jnp.concatenate(
            [jnp.zeros((per_op, 1), ftype), jnp.full((per_op, 2 * n_sends), -jnp.inf, ftype)], 1
        ),
        slots=slots0,
        best=jnp.stack([entry, entry], 1),
        dev_t=jnp.zeros((n_dev, n_lanes), ftype),
        dev_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        bus_t=jnp.zeros((n_dev, n_lanes), ftype),
        bus_r=jnp.zeros((n_dev, n_lanes), jnp.int32),
        pend_op=jnp.full(n_lanes, -1, jnp.int32),
        pend_row=jnp.zeros(n_lanes, jnp.int32),
        pend_dev=jnp.zeros(n_lanes, jnp.int32),
        pend_t=jnp.zeros(n_lanes, ftype),
        pend_r=jnp.zeros(n_lanes, jnp.int32),
        pend_at=jnp.zeros((n_sends, n_lanes), ftype),
        pend_ar=jnp.zeros((n_sends, n_lanes), jnp.int32),
    )
    final = jax.lax.fori_loop(0, n_steps, step, init)
    out = final.out.reshape(n_pad + 1, n_lanes, 1 + 2 * n_sends)[:n_pad].transpose(1, 0, 2)
    start = out[..., 0]  # [L, Np]
    xfer, arrival = out[..., 1 : 1 + n_sends], out[..., 1 + n_sends :]
    end = start + duration[:n_pad].T
    finish = functools.partial(_finish, graph, n_dev=n_dev, broadcast=broadcast)
    return jax.vmap(finish)(placements, start, end, xfer, arrival)


def _broadcast_send(cluster, bus_t, bus_r, et, er, xfer_v, remote_dev):
    """One transfer serves every remote consumer device (`remote_dev` [L, D]): the bus's new
    free stamp, the transfer's start and arrival rows ([L, 1] µs, -inf if none) and the remote
    consumers' input stamp ([1, L] µs and rounds)."""
    sends = jnp.any(remote_dev, axis=1)
    bus_t, bus_r, x_t, a_t, a_r = transfer(cluster, bus_t, bus_r, et, er, xfer_v, sends)
    arr_row = jnp.where(sends, a_t, -jnp.inf)[:, None]
    return bus_t, bus_r, x_t[:, None], arr_row, a_t[None], a_r[None]


def _per_device_send(cluster, bus_t, bus_r, et, er, xfer_v, remote_dev):
    """One transfer per remote consumer device, in device order; returns as `_broadcast_send`
    with [L, D] rows and [D, L] input stamps."""
    arr_t, arr_r, xfer_row = [], [], []
    for dest in range(remote_dev.shape[1]):
        need = remote_dev[:, dest]
        bus_t, bus_r, x_t, a_t, a_r = transfer(cluster, bus_t, bus_r, et, er, xfer_v, need)
        arr_t.append(jnp.where(need, a_t, -jnp.inf))
        arr_r.append(a_r)
        xfer_row.append(x_t)
    arr_t, arr_r = jnp.stack(arr_t), jnp.stack(arr_r)  # [D, L]
    return bus_t, bus_r, jnp.stack(xfer_row, axis=1), arr_t.T, arr_t, arr_r
