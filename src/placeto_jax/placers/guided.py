"""Guided search: a placement improved one decision unit at a time, the moves proposed as an array.

The search visits the decision units of an op graph (the ops one step moves together: a
co-location class, or a group a policy placed) in a given order, once per pass. On pass p, unit
u is proposed device `proposals[p, u]`, except where the unit's device is over its memory: then
the other device with room for the unit's bytes that holds the most bytes of its edges (ties:
the largest free fraction, then the lowest index), or with no room anywhere the largest free
fraction (`relieved`), so that chains stay together as they leave a full device. The move is
simulated and kept only when the placement then ranks before the current one
(`sim.ranking.rank_key` order: fitting memory first, then makespan plus `MEMORY_PENALTY` per unit
of relative overflow summed over devices). One simulation per step, counted as an evaluation.

Whoever proposes computes the array (the policy's likeliest devices in
`stages.policy_search`, or uniformly random ones); the search is a pure, jitted function of the
graph's padded arrays (`search_steps`), run in float64 so that it ranks as exact simulation does.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax import precision
from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.api import device_graph, padded, sim_cluster
from placeto_jax.sim.core import SimCluster, SimGraph, simulate_padded
from placeto_jax.sim.ranking import MEMORY_PENALTY, memory_overflow


@dataclasses.dataclass(frozen=True)
class Units:
    """An op graph's decision units: which ops each step moves, and the order a pass visits."""

    of_op: np.ndarray  # [N] int unit of each op, in [0, U)
    order: np.ndarray  # [U] int every unit once, in visiting order

    @classmethod
    def of_ops(cls, graph: Graph) -> Units:
        """One unit per co-location class (or free op), numbered and visited in topological
        order of its first op (so the first k units of `order` are units 0 to k - 1)."""
        n = graph.n_ops
        classes = graph.colocation if graph.colocation is not None else np.full(n, -1)
        labels = np.where(classes >= 0, classes, classes.max(initial=0) + 1 + np.arange(n))
        _, label_of_op = np.unique(labels, return_inverse=True)
        first = np.full(label_of_op.max() + 1, n)
        rank = np.empty(n, np.int64)
        rank[graph.topological_order] = np.arange(n)
        np.minimum.at(first, label_of_op, rank)
        renumber = np.empty_like(first)
        renumber[np.argsort(first, kind="stable")] = np.arange(first.size)
        return cls(renumber[label_of_op].astype(np.int64), np.arange(first.size))


@dataclasses.dataclass(frozen=True)
class Searched:
    """A placement of an op graph as simulated (float64), and what the search spent on it."""

    placement: np.ndarray  # [N] int64 device per op
    makespan: float  # µs
    peak_memory: np.ndarray  # [D] bytes
    fits_memory: bool
    overflow: float  # `sim.ranking.memory_overflow` of peak_memory (0: it fits)
    kept: int = 0  # moves kept
    evaluations: int = 0  # simulations run (one per step)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class UnitArrays:
    """`Units` padded for `search_steps`."""

    of_op: jax.Array  # [Np] int32 unit of each op, -1 for padding ops
    order: jax.Array  # [Np] int32 units in visiting order, the first `n_units` real
    n_units: jax.Array  # [] int32


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SearchState:
    """The search between steps."""

    placement: jax.Array  # [Np] int32 device per op
    makespan: jax.Array  # [] µs
    peak_memory: jax.Array  # [D] bytes
    kept: jax.Array  # [] int32 moves kept
    evaluations: jax.Array  # [] int32 simulations run


def guided_search(
    graph: Graph, cluster: Cluster, units: Units, current: Searched, proposals: np.ndarray
) -> Searched:
    """`current` (its makespan and peak memory simulated as given) improved by P passes over
    `units`, unit u proposed device `proposals[p, u]` ([P, U] ints) on pass p (see the module
    docstring); its `kept` and `evaluations` add the search's. ValueError for proposals of
    the wrong shape or devices out of range."""
    proposals = np.asarray(proposals)
    n_units, n_dev = len(units.order), cluster.n_devices
    if proposals.ndim != 2 or proposals.shape[1] != n_units:
        raise ValueError(f"proposals must be [passes, {n_units}], got shape {proposals.shape}")
    if proposals.size and not 0 <= proposals.min() <= proposals.max() < n_dev:
        raise ValueError(f"proposals must be devices in [0, {n_dev}), got {proposals.max()}")
    n, n_pad = graph.n_ops, padded(graph).n_pad
    of_op = np.full(n_pad, -1, np.int32)
    of_op[:n] = units.of_op
    order = np.concatenate([units.order, np.arange(n_units, n_pad)]).astype(np.int32)
    rows = np.zeros((proposals.shape[0], n_pad), np.int32)
    rows[:, :n_units] = proposals
    placement = np.zeros(n_pad, np.int32)
    placement[:n] = current.placement
    with precision.scope(precision.EXACT):
        state = SearchState(
            jnp.asarray(placement),
            jnp.asarray(current.makespan, precision.EXACT),
            jnp.asarray(current.peak_memory, precision.EXACT),
            jnp.int32(current.kept),
            jnp.int32(current.evaluations),
        )
        out = search_steps(
            device_graph(graph),
            sim_cluster(cluster, precision.EXACT),
            jnp.asarray(cluster.memory_array, precision.EXACT),
            UnitArrays(jnp.asarray(of_op), jnp.asarray(order), jnp.int32(n_units)),
            state,
            jnp.asarray(rows),
            cluster.broadcast,
        )
        out = jax.device_get(out)
    overflow = float(memory_overflow(out.peak_memory[None], cluster)[0])
    return Searched(
        placement=np.asarray(out.placement[:n], np.int64),
        makespan=float(out.makespan),
        peak_memory=np.asarray(out.peak_memory),
        fits_memory=overflow == 0,
        overflow=overflow,
        kept=int(out.kept),
        evaluations=int(out.evaluations),
    )


@functools.partial(jax.jit, static_argnames="broadcast")
def search_steps(
    graph: SimGraph,
    cluster: SimCluster,
    capacity: jax.Array,
    units: UnitArrays,
    state: SearchState,
    proposals: jax.Array,
    broadcast: bool = True,
) -> SearchState:
    """`state` after P * `units.n_units` steps, proposals [P, Np] int32 by unit id; `capacity`
    [D] bytes. Pure: jit- and vmap-able."""
    n_units = jnp.maximum(units.n_units, 1)

    def step(i, state: SearchState) -> SearchState:
        unit = units.order[i % n_units]
        inside = units.of_op == unit  # [Np]
        device = relieved(proposals[i // n_units, unit], inside, state, graph, capacity)
        trial = jnp.where(inside, device, state.placement)
        out = simulate_padded(graph, cluster, trial, broadcast)
        keep = ranks_before(out.makespan, out.peak_memory, state.makespan, state.peak_memory,
                            capacity)  # fmt: skip
        return SearchState(
            placement=jnp.where(keep, trial, state.placement),
            makespan=jnp.where(keep, out.makespan, state.makespan),
            peak_memory=jnp.where(keep, out.peak_memory, state.peak_memory),
            kept=state.kept + keep.astype(jnp.int32),
            evaluations=state.evaluations + 1,
        )

    return jax.lax.fori_loop(0, proposals.shape[0] * units.n_units, step, state)


def ranks_before(
    makespan: jax.Array, peak: jax.Array, than_makespan: jax.Array, than_peak: jax.Array,
    capacity: jax.Array,
) -> jax.Array:  # fmt: skip
    """[] bool: a placement of `makespan` µs and `peak` [D] bytes strictly before one of
    `than_makespan` and `than_peak` in `sim.ranking.rank_key` order, `capacity` [D] bytes."""

    def key(makespan, peak):
        over = jnp.sum(jnp.maximum(peak - capacity, 0.0) / capacity)
        return over == 0, makespan + MEMORY_PENALTY * over

    fits, score = key(makespan, peak)
    than_fits, than_score = key(than_makespan, than_peak)
    return (fits & ~than_fits) | ((fits == than_fits) & (score < than_score))


def relieved(
    proposal: jax.Array, inside: jax.Array, state: SearchState, graph: SimGraph, capacity: jax.Array
) -> jax.Array:
    """[] int32: `proposal` for the unit of ops `inside` [Np], or, where the unit's device is over
    its memory in `state`, the other device with room for the unit's bytes (parameters and
    outputs, against its peak) that holds the most bytes of the unit's edges (ties: the largest
    free fraction, then the lowest index), with no room anywhere the largest free fraction."""
    n_dev = capacity.shape[0]
    if n_dev == 1:
        return proposal
    own = jnp.max(jnp.where(inside, state.placement, 0))
    others = jnp.arange(n_dev) != own
    free = capacity - state.peak_memory
    need = jnp.sum(jnp.where(inside, graph.param_bytes + graph.out_bytes, 0.0))
    fraction = jnp.where(others, free / capacity, -jnp.inf)
    room = others & (free >= need)
    near = edge_bytes(inside, state.placement, graph, n_dev)
    nearest = room & (near == jnp.max(jnp.where(room, near, -jnp.inf)))
    target = jnp.where(
        room.any(),
        jnp.argmax(jnp.where(nearest, fraction, -jnp.inf)),
        jnp.argmax(fraction),
    )
    return jnp.where(state.peak_memory[own] > capacity[own], target, proposal).astype(jnp.int32)


def edge_bytes(inside: jax.Array, placement: jax.Array, graph: SimGraph, n_dev: int) -> jax.Array:
    """[D] bytes: the outputs sent over the edges between the ops `inside` [Np] and the others,
    by the device of the op at the other end."""
    n_pad = inside.shape[0]
    real = graph.edge_src < n_pad
    src = jnp.where(real, graph.edge_src, 0)
    dst = graph.edge_dst
    into = real & inside[dst] & ~inside[src]
    out_of = real & inside[src] & ~inside[dst]
    other_end = jnp.where(into, placement[src], placement[dst])
    sent = jnp.where(into | out_of, graph.out_bytes[src], 0.0)
    return jax.ops.segment_sum(sent, other_end, n_dev)
