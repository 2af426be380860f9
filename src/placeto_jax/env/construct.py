"""The constructive placement MDP (device side): one op per step, in visiting order
(`env/construct_graph.py`), each placed once, with the observation a list scheduler sees.

State: the devices chosen so far and a list schedule of them on the simulator's communication
model (as `placers.timeline.Timeline` without insertion): each op starts when its device is free
and its inputs have arrived; a remote input is one transfer of the producer's output on the
producer's device's bus (first-in first-out, `delta2` after each), shared by every remote device
(broadcast); a device stays busy `delta1` after an op of nonzero cost; memory is observed as
the conservative bound of parameters and outputs placed, never freed.

Observation at step t, per device d (`N_DYNAMIC` features, times divided by the graph's scale):
when op t's inputs would be on d, when d is free, the earliest start and finish on d (absolute
and relative to the best device), the fraction of op t's input bytes already on d, the new
transfer time placing it there would need, d's assigned busy time (absolute and against the
mean), d's memory after placing op t over its capacity, whether d holds op t - 1, d's
relative speed, and whether a declared start (the hint) puts op t on d.

Memory mask: a device is allowed when its parameters and its live memory would fit, by an
estimate that follows the visiting order: each output, and each copy of it on a consumer's
device, is live from its placing until every consumer of the output is placed (the most live at
once is the estimate's peak; within a few percent of the simulator's on the benchmark files).
With a declared start (the hint), a device must also keep room for the parameters the hint
puts on it later, so that the hint can always finish what the episode leaves (its reservation;
off where the graph's `reserve` is, `env.construct_reserve`); the hint's device stays allowed,
and is the only one when no device fits by the estimate and the hint fits memory by exact
simulation. Otherwise, when none fits, the devices that fit by a lower bound are allowed
(parameters and the largest bytes one op holds while it runs: its output and inputs), and all
are when none does. A co-location class's later members follow
their leader: no decision.

Lookahead (`env.construct_lookahead`, with a hint): `N_LOOKAHEAD` more features per device, from
the exact simulator (`sim/`): the penalised makespan of the placement that puts op t's class on
d, the ops before t where the episode put them and the later ones where the hint does (the
hint completes the episode), against that of the hint's device and of the best device. They
cost D - 1 simulations per decision (the hint's device is the completion so far), counted as
evaluations (`rl.construct_loop.lookahead_evaluations`); they share the completion's schedule up
to where the class is first reached (`sim.api.simulate_variants`).

An episode costs O(N (K + D)) for N ops of at most K parents on D devices (with the lookahead,
N (D - 1) simulations more); its placement is scored once by the exact simulator outside this
module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.env.construct_graph import ConstructGraph
from placeto_jax.sim.api import simulate_variants
from placeto_jax.sim.core import SimCluster, SimGraph
from placeto_jax.sim.ranking import MEMORY_PENALTY

N_DYNAMIC = 14  # per-(op, device) features of the observation
HINT_FEATURE = N_DYNAMIC - 1  # the last of them: whether the hint puts op t on the device
N_LOOKAHEAD = 2  # more of them with the lookahead
LOOKAHEAD_SCALE = 100.0  # a lookahead feature is asinh of this times a log ratio of makespans
#                          (about the percentage near 0, logarithmic for overflows; monotone)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Lookahead:
    """What the lookahead simulates, stacked on the graph axis G like `GraphArrays`."""

    sim: SimGraph  # [G, ...] the op graph padded for the simulator, ops in their own order
    op_position: jax.Array  # [G, Np] int32 visiting position of each op (0 on padding)


def n_features(g: GraphArrays) -> int:
    """Per-(op, device) features the observation of graphs like `g` has."""
    return N_DYNAMIC + (N_LOOKAHEAD if g.lookahead is not None else 0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GraphArrays:
    """`ConstructGraph`s stacked on a leading graph axis G (or one graph without it)."""

    cost: jax.Array  # [G, Np] µs
    out_bytes: jax.Array  # [G, Np] bytes
    own_bytes: jax.Array  # [G, Np] bytes
    param_bytes: jax.Array  # [G, Np] bytes
    need_bytes: jax.Array  # [G, Np] bytes
    parents: jax.Array  # [G, Np, K] int32
    parent_mask: jax.Array  # [G, Np, K] bool
    n_children: jax.Array  # [G, Np] int32
    leader: jax.Array  # [G, Np] int32
    real: jax.Array  # [G, Np] bool
    static: jax.Array  # [G, Np, S]
    senders: jax.Array  # [G, Ep] int32
    receivers: jax.Array  # [G, Ep] int32
    edge_mask: jax.Array  # [G, Ep] bool
    hint: jax.Array  # [G, Np] int32, -1 where none
    hint_fits: jax.Array  # [G] bool: the hint fits memory by exact simulation
    reserve: jax.Array  # [G] bool: each device keeps room for the hint's later parameters
    scale: jax.Array  # [G] µs
    lookahead: Lookahead | None = None  # with `env.construct_lookahead`

    @classmethod
    def stack(cls, graphs: list[ConstructGraph], lookahead: Lookahead | None = None):
        """The graphs (of equal padding) on a leading axis, with `lookahead` (already stacked)."""
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "lookahead"]
        arrays = {f: jnp.asarray(np.stack([getattr(g, f) for g in graphs])) for f in fields}
        return cls(**arrays, lookahead=lookahead)

    def at(self, index: jax.Array) -> GraphArrays:
        """Graph `index` of the stack, without the leading axis."""
        return jax.tree.map(lambda a: a[index], self)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Machine:
    """The cluster as device arrays."""

    speed: jax.Array  # [D] relative compute speed
    bandwidth: jax.Array  # [D] bytes/µs of each device's outgoing bus
    capacity: jax.Array  # [D] bytes
    delta1: jax.Array  # [] µs after an op of nonzero cost
    delta2: jax.Array  # [] µs after a transfer
    sim: SimCluster  # the cluster as the lookahead's simulator reads it (float32)
    broadcast: bool = dataclasses.field(metadata={"static": True})  # the cluster's transfers

    @classmethod
    def of(cls, cluster: Cluster) -> Machine:
        f32 = jnp.float32
        return cls(
            speed=jnp.asarray(cluster.speed_array, f32),
            bandwidth=jnp.asarray(cluster.bandwidth_array, f32),
            capacity=jnp.asarray(cluster.memory_array, f32),
            delta1=jnp.asarray(cluster.delta1, f32),
            delta2=jnp.asarray(cluster.delta2, f32),
            sim=SimCluster(
                speed=jnp.asarray(cluster.speed, f32),
                bandwidth=jnp.asarray(cluster.bandwidth, f32),
                delta1=jnp.asarray(cluster.delta1, f32),
                delta2=jnp.asarray(cluster.delta2, f32),
            ),
            broadcast=bool(cluster.broadcast),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Schedule:
    """The list schedule of one episode so far."""

    device: jax.Array  # [Np] int32 device per position (0 until placed)
    finish: jax.Array  # [Np] µs estimated end
    sent: jax.Array  # [Np] µs arrival of the op's broadcast transfer, inf until sent
    device_free: jax.Array  # [D] µs
    bus_free: jax.Array  # [D] µs
    busy: jax.Array  # [D] µs of compute assigned
    memory: jax.Array  # [D] bytes charged
    params: jax.Array  # [D] parameter bytes placed
    need: jax.Array  # [D] bytes: the most any op placed there holds while it runs
    pending: jax.Array  # [Np] int32 consumers of each op's output not placed yet
    copied: jax.Array  # [Np, D] bool: a copy of the op's output is on the device
    live: jax.Array  # [D] bytes of outputs and copies that unplaced consumers still need
    peak: jax.Array  # [D] bytes: the most `live` held, with each op's own run
    reserved: jax.Array  # [D] parameter bytes the hint puts on each device at later positions

    @classmethod
    def empty(cls, g: GraphArrays, n_devices: int) -> Schedule:
        n_pad = g.cost.shape[0]
        zeros = jnp.zeros(n_devices, jnp.float32)
        return cls(
            device=jnp.zeros(n_pad, jnp.int32),
            finish=jnp.zeros(n_pad, jnp.float32),
            sent=jnp.full(n_pad, jnp.inf, jnp.float32),
            device_free=zeros,
            bus_free=zeros,
            busy=zeros,
            memory=zeros,
            params=zeros,
            need=zeros,
            pending=g.n_children,
            copied=jnp.zeros((n_pad, n_devices), bool),
            live=zeros,
            peak=zeros,
            reserved=zeros.at[jnp.maximum(g.hint, 0)].add(_reservation(g, ...)),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One episode: what the policy saw and did at each position."""

    device: jax.Array  # [Np] int32 device per position (the placement)
    features: jax.Array  # [Np, D, N_DYNAMIC]
    allowed: jax.Array  # [Np, D] bool
    decision: jax.Array  # [Np] bool: the op chose (a real class leader or a free op)


@dataclasses.dataclass(frozen=True)
class Look:
    """What placing the current op on each device would mean (internal to a step)."""

    features: jax.Array  # [D, N_DYNAMIC]
    allowed: jax.Array  # [D] bool
    finish: jax.Array  # [D] µs
    new_arrival: jax.Array  # [K] µs arrival of each parent's transfer if sent now
    needs_send: jax.Array  # [K] bool: a real parent whose output has not been sent


def look(g: GraphArrays, m: Machine, s: Schedule, t: jax.Array) -> Look:
    """The observation of placing op t (module docstring) and the finish times behind it."""
    n_devices = m.speed.shape[0]
    devices = jnp.arange(n_devices)
    parents, mask = g.parents[t], g.parent_mask[t]
    p_device, p_finish = s.device[parents], s.finish[parents]
    p_bytes = g.out_bytes[parents]
    transfer = p_bytes / m.bandwidth[p_device]
    new_arrival = jnp.maximum(s.bus_free[p_device], p_finish) + transfer
    sent = jnp.isfinite(s.sent[parents])
    remote = jnp.where(sent, s.sent[parents], new_arrival)
    local = p_device[:, None] == devices[None, :]  # [K, D]
    arrival = jnp.where(local, p_finish[:, None], remote[:, None])
    data_ready = jnp.max(jnp.where(mask[:, None], arrival, 0.0), axis=0)
    start = jnp.maximum(s.device_free, data_ready)
    duration = g.cost[t] / m.speed
    finish = start + duration
    in_bytes = jnp.where(mask, p_bytes, 0.0)
    local_fraction = (in_bytes[:, None] * local).sum(0) / jnp.maximum(in_bytes.sum(), 1.0)
    new_transfer = (jnp.where(mask & ~sent, transfer, 0.0)[:, None] * ~local).sum(0)
    memory_after = s.memory + g.own_bytes[t]
    params_after = s.params + g.param_bytes[t]
    fits = params_after + jnp.maximum(s.need, g.need_bytes[t]) <= m.capacity
    copies_in = mask[:, None] & ~local & ~s.copied[parents]  # [K, D] inputs new to the device
    running = s.live + g.out_bytes[t] + (in_bytes[:, None] * copies_in).sum(0)
    hinted = devices == g.hint[t]  # a declared start's device stays allowed
    reserved = s.reserved - hinted * _reservation(g, t)  # but op t's own
    fits_live = params_after + reserved + jnp.maximum(s.peak, running) <= m.capacity
    fallback = jnp.where(g.hint_fits, hinted, jnp.where(fits.any(), fits, True))
    allowed = jnp.where(fits_live.any(), fits_live | hinted, fallback)
    previous = s.device[jnp.maximum(t - 1, 0)]
    op_time = jnp.maximum(duration.mean() + m.delta1, 1e-3)
    scale = g.scale
    features = jnp.stack(
        [
            data_ready / scale,
            s.device_free / scale,
            start / scale,
            (start - start.min()) / scale,
            jnp.log1p((finish - finish.min()) / op_time),
            local_fraction,
            new_transfer / scale,
            s.busy / scale,
            (s.busy - s.busy.mean()) / scale,
            memory_after / m.capacity,
            ((devices == previous) & (t > 0)).astype(jnp.float32),
            m.speed / m.speed.max(),
            jnp.log1p((data_ready - data_ready.min()) / op_time),
            (devices == g.hint[t]).astype(jnp.float32),  # HINT_FEATURE
        ],
        axis=1,
    )
    needs_send = mask & ~sent
    return Look(features, allowed, finish, new_arrival, needs_send)


def commit(
    g: GraphArrays, m: Machine, s: Schedule, t: jax.Array, seen: Look, device: jax.Array
) -> Schedule:
    """`s` with op t placed on `device` (a padding position changes nothing)."""
    real = g.real[t]
    parents = g.parents[t]
    remote = seen.needs_send & (s.device[parents] != device) & real
    sent = s.sent.at[parents].min(jnp.where(remote, seen.new_arrival, jnp.inf))
    bus_end = jnp.where(remote, seen.new_arrival + m.delta2, 0.0)
    bus_free = s.bus_free.at[s.device[parents]].max(bus_end)
    finish = seen.finish[device]
    gap = jnp.where(g.cost[t] > 0, m.delta1, 0.0)
    busy = jnp.where(real, g.cost[t] / m.speed[device], 0.0)
    pending, copied, live, peak = _live_memory(g, s, t, device)
    return Schedule(
        device=s.device.at[t].set(jnp.where(real, device, 0)),
        finish=s.finish.at[t].set(jnp.where(real, finish, 0.0)),
        sent=sent,
        device_free=s.device_free.at[device].max(jnp.where(real, finish + gap, 0.0)),
        bus_free=bus_free,
        busy=s.busy.at[device].add(busy),
        memory=s.memory.at[device].add(jnp.where(real, g.own_bytes[t], 0.0)),
        params=s.params.at[device].add(jnp.where(real, g.param_bytes[t], 0.0)),
        need=s.need.at[device].max(jnp.where(real, g.need_bytes[t], 0.0)),
        pending=pending,
        copied=copied,
        live=live,
        peak=peak,
        reserved=s.reserved.at[jnp.maximum(g.hint[t], 0)].add(-_reservation(g, t)),
    )


def _reservation(g: GraphArrays, t) -> jax.Array:
    """Bytes the hint reserves for position t (or every position, `...`): its charged
    parameters where the hint names a device and `g.reserve`, else 0."""
    return jnp.where((g.hint[t] >= 0) & g.real[t] & g.reserve, g.param_bytes[t], 0.0)


def _live_memory(g: GraphArrays, s: Schedule, t: jax.Array, device: jax.Array) -> tuple:
    """(pending, copied, live, peak) of `s` with op t placed on `device`: its output and the
    copies of its remote inputs are live from now until every consumer of the output is placed
    (the estimate the memory mask reads; it follows the visiting order, not time)."""
    parents, mask = g.parents[t], g.parent_mask[t] & g.real[t]
    on = jax.nn.one_hot(device, s.live.shape[0], dtype=bool)  # [D]
    p_bytes = g.out_bytes[parents]
    new_copy = mask & (s.device[parents] != device) & ~s.copied[parents, device]  # [K]
    output = jnp.where(g.real[t], g.out_bytes[t], 0.0)
    live = s.live + on * (output + jnp.where(new_copy, p_bytes, 0.0).sum())
    peak = jnp.maximum(s.peak, live)
    copied = s.copied.at[parents, device].max(new_copy)
    pending = s.pending.at[parents].add(-mask.astype(jnp.int32))
    done = mask & (pending[parents] == 0)  # [K] the last consumer of each such parent
    holders = copied[parents] | jax.nn.one_hot(s.device[parents], on.shape[0], dtype=bool)
    freed = (jnp.where(done, p_bytes, 0.0)[:, None] * holders).sum(0)
    unused = jnp.where(g.n_children[t] == 0, output, 0.0)  # an output nothing consumes
    return pending, copied, live - freed - on * unused, peak


Chooser = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]
"""(t, features [D, F], allowed [D], noise [D]) -> device: the policy's (or a teacher's) choice,
`noise` being position t's standard Gumbel noise (a draw is the argmax of logits plus it)."""


def gumbel_noise(key: jax.Array, n_pad: int, n_devices: int) -> jax.Array:
    """[Np, D] float32 standard Gumbel noise, position t's from `fold_in(key, t)` (so it does not
    depend on the padding): the draws `jax.random.categorical(fold_in(key, t), logits)` makes
    for float32 logits, drawn for every position at once instead of in each step of the scan,
    where on a CPU they cost about a quarter of a sampled episode."""
    keys = jax.vmap(lambda t: jax.random.fold_in(key, t))(jnp.arange(n_pad))
    return jax.vmap(lambda k: jax.random.gumbel(k, (n_devices,), jnp.float32))(keys)


def rollout(g: GraphArrays, m: Machine, choose: Chooser, key: jax.Array) -> Trajectory:
    """One episode on graph `g` (no graph axis): every position in order, a decision where op t
    leads (`g.leader[t] == t`), its leader's device otherwise."""
    n_pad = g.cost.shape[0]
    positions = jnp.arange(n_pad)

    n_devices = m.speed.shape[0]

    def step(carry, xs):
        s, current = carry
        t, noise = xs
        seen = look(g, m, s, t)
        decides = (g.leader[t] == t) & g.real[t]
        features = seen.features
        if g.lookahead is not None:
            runtime = jax.lax.cond(
                decides,
                lambda: lookahead_runtimes(g, m, s, t, current),
                lambda: jnp.full(n_devices, current),
            )
            features = jnp.concatenate([features, lookahead_features(g, t, runtime)], axis=1)
        chosen = choose(t, features, seen.allowed, noise)
        device = jnp.where(decides, chosen, s.device[g.leader[t]]).astype(jnp.int32)
        if g.lookahead is not None:
            current = jnp.where(decides, runtime[device], current)
        return (commit(g, m, s, t, seen, device), current), (features, seen.allowed, decides)

    noise = gumbel_noise(key, n_pad, n_devices)
    first = Schedule.empty(g, n_devices)
    current = hint_runtime(g, m, first) if g.lookahead is not None else jnp.zeros((), jnp.float32)
    (final, _), (features, allowed, decision) = jax.lax.scan(
        step, (first, current), (positions, noise)
    )
    return Trajectory(final.device, features, allowed, decision)


def completions(g: GraphArrays, s: Schedule, t: jax.Array, devices: jax.Array) -> jax.Array:
    """[R, Np] placements by op (of `g.lookahead.sim`): op t's class on each of `devices` [R],
    the ops of classes led before t where `s` put them, the others where the hint does."""
    leader = g.leader
    placed = jnp.where(leader < t, s.device[leader], jnp.maximum(g.hint, 0))  # [Np] by position
    by_position = jnp.where(leader[None, :] == t, devices[:, None], placed[None, :])
    op_real = jnp.arange(g.real.shape[0]) < g.real.sum()
    return jnp.where(op_real, by_position[:, g.lookahead.op_position], 0).astype(jnp.int32)


def log_runtimes(g: GraphArrays, m: Machine, base: jax.Array, placements: jax.Array) -> jax.Array:
    """[R] log penalised makespans (µs; `sim.ranking.penalised_makespan`) of placements by op
    [R, Np] that differ from `base` [Np] in one class, by the exact simulator in float32."""
    makespan, peak = simulate_variants(g.lookahead.sim, m.sim, base, placements, m.broadcast)
    overflow = (jnp.maximum(peak - m.capacity, 0.0) / m.capacity).sum(axis=1)
    return jnp.log(makespan + MEMORY_PENALTY * overflow)


def hint_runtime(g: GraphArrays, m: Machine, s: Schedule) -> jax.Array:
    """[] the hint's own `log_runtimes`: the completion before the first step (`s` empty)."""
    hinted = completions(g, s, jnp.asarray(-1), jnp.zeros(1, jnp.int32))
    return log_runtimes(g, m, hinted[0], hinted)[0]


def lookahead_runtimes(
    g: GraphArrays, m: Machine, s: Schedule, t: jax.Array, current: jax.Array
) -> jax.Array:
    """[D] `log_runtimes` of op t's class on each device (`completions`): D - 1 simulations,
    the hint's device being the current completion (`current`, carried from the last step: the
    hint keeps a class together, as `construct_graph.build`'s simulation of it requires)."""
    n_devices = m.speed.shape[0]
    hinted = jnp.maximum(g.hint[t], 0)
    if n_devices == 1:
        return current[None]
    others = jnp.arange(n_devices - 1)
    others = others + (others >= hinted)
    placements = completions(g, s, t, jnp.concatenate([hinted[None], others]))  # current first
    runtime = log_runtimes(g, m, placements[0], placements[1:])
    return jnp.zeros(n_devices).at[others].set(runtime).at[hinted].set(current)


def lookahead_features(g: GraphArrays, t: jax.Array, runtime: jax.Array) -> jax.Array:
    """[D, N_LOOKAHEAD] at position t (module docstring) from the completions' log penalised
    makespans `runtime` [D]: asinh of `LOOKAHEAD_SCALE` times their difference from the hint
    device's and from the best."""
    hinted = runtime[jnp.maximum(g.hint[t], 0)]
    differences = jnp.stack([runtime - hinted, runtime - runtime.min()], axis=1)
    return jnp.arcsinh(LOOKAHEAD_SCALE * differences)


def lookahead_choice(features: jax.Array, allowed: jax.Array) -> jax.Array:
    """The device whose completion ranks first among the allowed ones (features [D, F] with the
    lookahead's), the hint's on a tie: the lookahead teacher's choice."""
    gain = jnp.where(allowed, features[:, N_DYNAMIC], jnp.inf)  # against the hint's device
    hinted = jnp.argmax(features[:, HINT_FEATURE])
    return jnp.where(gain.min() < gain[hinted], jnp.argmin(gain), hinted)


def estimated_makespan(g: GraphArrays, m: Machine, device: jax.Array) -> jax.Array:
    """The list schedule's makespan (µs) of a whole placement by position (`device` [Np]):
    the episode's own estimate, not the simulator's."""

    def step(s: Schedule, t):
        return commit(g, m, s, t, look(g, m, s, t), device[t]), None

    n_pad = g.cost.shape[0]
    final, _ = jax.lax.scan(step, Schedule.empty(g, m.speed.shape[0]), jnp.arange(n_pad))
    return jnp.max(jnp.where(g.real, final.finish, 0.0))
