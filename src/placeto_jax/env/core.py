"""The Placeto MDP as pure JAX functions over a device-resident bank of padded graphs.

`PlacetoEnv` holds only static settings; arrays live in `EnvParams` (gymnax style), so one
compiled `reset`/`step` serves every graph of a bank, and batches come from `jax.vmap`.

Contract (one episode on graph g of the bank, N padded nodes, n real ones, D devices):

The agent decides per **unit**: a node, or the nodes that co-location ties to one device
(`Bank.unit`; docs/agent.md). An episode visits the units, and a decision moves all of a
unit's nodes; the graph that is simulated stays the bank's DAG of nodes.

Every function takes its arguments in gymnax's order: the key first, then state and action, then
`env_params`. Which graph an episode plays is data: `env_params.graph` for `reset` (set it with
`env_params.on_graph(g)`, also under `vmap`), then `state.graph`.

- **reset(key, env_params)** -> (state, observation). The initial placement is random per
  episode, one fixed random placement per graph, everything on device 0, or each graph's given
  start (`initial_placement` "given": `Bank.start`, improve mode, env/start.py); it is simulated
  once, and the episode's runtime scale is that initial runtime.
- **observation** (`Observation`): `features` [N, d] float with d = 5 + D (+1 with the memory
  feature): cost / max cost, output bytes / max, times this node's unit was placed in the
  episode, a current-unit flag, start time in the latest simulation minus the current unit's
  earliest, divided by the largest such gap, one-hot of the current device (memory bytes / max).
  `unit` [] the current unit and `current` [N] bool its nodes; `ancestors`, `descendants` [N]
  bool: the nodes outside the unit that reach (are reached from) one of its nodes; `node_mask`
  [N] real nodes; `placement` [N]; `action_mask` [D] allowed devices (all, unless
  `mask_out_of_memory` and some device would overflow); `senders`, `receivers`, `edge_mask` [E]
  and `depth`, `height` [N]: the graph's structure for message passing.
- **step(key, state, action, env_params)** -> (state, observation, reward, done) (the key is
  unused: the step is deterministic). Puts the current unit's nodes
  on device `action` ([] int), simulates the whole placement and moves to the next unit of the
  traversal order (topological or a random permutation per episode), `passes` times over the
  units. reward = runtime before - runtime after, where runtime = makespan in seconds + memory
  penalty (`memory_penalty` s per GB that the fullest device's peak exceeds its memory, at most
  `memory_penalty_cap`), divided by the initial runtime when `normalize == "initial"`. The episode
  ends after passes * (units of g) steps; later steps change nothing and reward 0 (`done` is True).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from placeto_jax.cluster import GB, Cluster
from placeto_jax.config import EnvConfig
from placeto_jax.env.bank import Bank
from placeto_jax.sim.api import sim_cluster
from placeto_jax.sim.core import SimCluster, SimGraph, simulate_padded

US = 1e-6  # seconds per µs


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DeviceBank:
    """`Bank` arrays on the device, stacked over G graphs."""

    n_nodes: jax.Array  # [G] int32
    n_units: jax.Array  # [G] int32 decision units
    unit: jax.Array  # [G, N] int32 unit of each node
    sim: SimGraph  # fields [G, ...]
    op_sim: SimGraph | None  # fields [G, ...] of the op graphs, or None
    op_to_group: jax.Array | None  # [G, N_ops_pad] int32
    cost_feature: jax.Array  # [G, N] cost / max cost
    bytes_feature: jax.Array  # [G, N] output bytes / max
    memory_feature: jax.Array  # [G, N] (param + output bytes) / max
    memory: jax.Array  # [G, N] bytes, param + output
    order: jax.Array  # [G, N] int32 topological order, real nodes first
    senders: jax.Array  # [G, E] int32
    receivers: jax.Array  # [G, E] int32
    edge_mask: jax.Array  # [G, E] bool
    depth: jax.Array  # [G, N] int32
    height: jax.Array  # [G, N] int32
    ancestors: jax.Array  # [G, N, N/8] uint8 packed
    descendants: jax.Array  # [G, N, N/8] uint8 packed
    start: jax.Array | None  # [G, N] int32 device per node of each graph's given start, or None
    seed: jax.Array  # [G] uint32 per graph's content (`Bank.seed`): greedy episodes' starts

    @classmethod
    def of(cls, bank: Bank, float_dtype=jnp.float32) -> DeviceBank:
        def floats(x):
            return jnp.asarray(x, float_dtype)

        return cls(
            n_nodes=jnp.asarray(bank.n_nodes, jnp.int32),
            n_units=jnp.asarray(bank.n_units, jnp.int32),
            unit=jnp.asarray(bank.unit, jnp.int32),
            sim=SimGraph.from_padded(bank.sim, float_dtype),  # fields stacked over graphs
            op_sim=None if bank.op_sim is None else SimGraph.from_padded(bank.op_sim, float_dtype),
            op_to_group=None if bank.op_to_group is None else jnp.asarray(bank.op_to_group),
            cost_feature=floats(_by_max(bank.cost)),
            bytes_feature=floats(_by_max(bank.out_bytes)),
            memory_feature=floats(_by_max(bank.memory)),
            memory=floats(bank.memory),
            order=jnp.asarray(bank.order),
            senders=jnp.asarray(bank.senders),
            receivers=jnp.asarray(bank.receivers),
            edge_mask=jnp.asarray(bank.edge_mask),
            depth=jnp.asarray(bank.depth),
            height=jnp.asarray(bank.height),
            ancestors=jnp.asarray(bank.ancestors),
            descendants=jnp.asarray(bank.descendants),
            start=None if bank.start is None else jnp.asarray(bank.start, jnp.int32),
            seed=jnp.zeros(bank.n_graphs, jnp.uint32)
            if bank.seed is None
            else jnp.asarray(bank.seed, jnp.uint32),
        )


def _by_max(x) -> jax.Array:
    """Each row divided by its max (rows of zeros stay zero)."""
    x = jnp.asarray(x)
    top = jnp.max(x, axis=1, keepdims=True)
    return jnp.where(top > 0, x / jnp.where(top > 0, top, 1), 0.0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EnvParams:
    bank: DeviceBank
    cluster: SimCluster
    capacity: jax.Array  # [D] bytes, each device's memory
    graph: jax.Array  # [] int32 the graph `reset` starts an episode on
    graphs: jax.Array  # [K] int32 the graphs a trainer plays (all G of the bank, or a subset)

    def on_graph(self, graph) -> EnvParams:
        """These parameters with episodes starting on `graph` ([] int, traced or not)."""
        return dataclasses.replace(self, graph=jnp.asarray(graph, jnp.int32))

    def playing(self, graphs) -> EnvParams:
        """These parameters with a trainer playing only `graphs` ([K] int bank indices)."""
        return dataclasses.replace(self, graphs=jnp.asarray(graphs, jnp.int32))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EnvState:
    graph: jax.Array  # [] int32 index into the bank
    order: jax.Array  # [N] int32 traversal order of units, real units first
    t: jax.Array  # [] int32 steps taken
    placement: jax.Array  # [N] int32 device per node
    start: jax.Array  # [N] float µs, start times in the latest simulation
    runtime: jax.Array  # [] float, current runtime (seconds, or / initial when normalised)
    scale: jax.Array  # [] float seconds, divisor of runtimes (1 unless normalised)
    makespan: jax.Array  # [] float µs, current makespan
    peak_memory: jax.Array  # [D] float bytes, current peak per device
    best_runtime: jax.Array  # [] float, lowest runtime seen this episode
    best_placement: jax.Array  # [N] int32, the placement that had it

    @classmethod
    def replayed(cls, graph, order, t, placement, start) -> EnvState:
        """A state with the fields `observe` reads, from a stored trajectory (how the loss
        rebuilds the rollout's observations); the fields it does not read are zeros."""
        zero = jnp.zeros(jnp.shape(t), start.dtype)  # shaped like t, so that it maps with it
        return cls(
            graph=graph,
            order=order,
            t=t,
            placement=placement,
            start=start,
            runtime=zero,
            scale=zero,
            makespan=zero,
            peak_memory=zero,
            best_runtime=zero,
            best_placement=placement,
        )


class Observation(NamedTuple):
    features: jax.Array  # [N, d] float
    unit: jax.Array  # [] int32 current unit
    current: jax.Array  # [N] bool nodes of the current unit
    node_mask: jax.Array  # [N] bool real nodes
    ancestors: jax.Array  # [N] bool nodes outside the current unit that reach it
    descendants: jax.Array  # [N] bool nodes outside the current unit that it reaches
    placement: jax.Array  # [N] int32
    action_mask: jax.Array  # [D] bool
    senders: jax.Array  # [E] int32
    receivers: jax.Array  # [E] int32
    edge_mask: jax.Array  # [E] bool
    depth: jax.Array  # [N] int32
    height: jax.Array  # [N] int32


@dataclasses.dataclass(frozen=True)
class PlacetoEnv:
    """Static settings of the MDP; see the module docstring for the contract."""

    config: EnvConfig
    n_devices: int
    broadcast: bool = True

    @property
    def n_features(self) -> int:
        return 5 + self.n_devices + int(self.config.memory_feature)

    def env_params(self, bank: Bank, cluster: Cluster, float_dtype=jnp.float32) -> EnvParams:
        """The bank and cluster as device arrays in `float_dtype`; episodes on every graph."""
        if cluster.n_devices != self.n_devices:
            raise ValueError(
                f"the cluster has {cluster.n_devices} devices, the environment {self.n_devices}"
            )
        if self.config.initial_placement == "given" and bank.start is None:
            raise ValueError(
                'env.initial_placement="given" needs a start for every graph '
                "(env.start.with_start; the CLI's --start)"
            )
        return EnvParams(
            bank=DeviceBank.of(bank, float_dtype),
            cluster=sim_cluster(cluster, float_dtype),
            capacity=jnp.asarray(cluster.memory_array, float_dtype),
            graph=jnp.zeros((), jnp.int32),
            graphs=jnp.arange(bank.n_graphs, dtype=jnp.int32),
        )

    # ------------------------------------------------------------------ episode
    def n_steps(self, graph: jax.Array, env_params: EnvParams) -> jax.Array:
        """[] int32 steps in an episode on `graph`: one per unit and pass."""
        return self.config.passes * env_params.bank.n_units[graph]

    def reset(
        self, key: jax.Array, env_params: EnvParams, per_graph: bool = False
    ) -> tuple[EnvState, Observation]:
        """The first state and observation of an episode on `env_params.graph`. `per_graph`
        (static): the random start depends on `key` and the graph's content alone (its seed,
        one draw per unit id), not on the bank around it or the episode's index, so that a
        greedy episode is the same whichever graphs are placed with it."""
        bank = env_params.bank
        graph = env_params.graph
        n_pad = bank.order.shape[1]
        if per_graph:
            key = jax.random.fold_in(key, bank.seed[graph])
        k_order, k_place = jax.random.split(key)
        valid = jnp.arange(n_pad) < bank.n_units[graph]
        if self.config.traversal == "random":
            shuffled = jax.random.permutation(k_order, n_pad)
            order = shuffled[jnp.argsort(~valid[shuffled], stable=True)].astype(jnp.int32)
        else:
            order = bank.order[graph]
        placement = self._initial_placement(k_place, graph, bank, per_graph)
        makespan, peak, start = self._simulate(graph, placement, env_params)
        raw = self._runtime_s(makespan, peak, env_params)
        scale = raw if self.config.normalize == "initial" else jnp.ones_like(raw)
        runtime = raw / scale
        state = EnvState(
            graph=graph,
            order=order,
            t=jnp.zeros((), jnp.int32),
            placement=placement,
            start=start,
            runtime=runtime,
            scale=scale,
            makespan=makespan,
            peak_memory=peak,
            best_runtime=runtime,
            best_placement=placement,
        )
        return state, self.observe(state, env_params)

    def step(
        self, key: jax.Array, state: EnvState, action: jax.Array, env_params: EnvParams
    ) -> tuple[EnvState, Observation, jax.Array, jax.Array]:
        del key  # the step is deterministic
        active = state.t < self.n_steps(state.graph, env_params)
        moved = active & (env_params.bank.unit[state.graph] == self.current_unit(state, env_params))
        placement = jnp.where(moved, action.astype(jnp.int32), state.placement)
        makespan, peak, start = self._simulate(state.graph, placement, env_params)
        runtime = self._runtime_s(makespan, peak, env_params) / state.scale
        better = active & (runtime < state.best_runtime)
        new = EnvState(
            graph=state.graph,
            order=state.order,
            t=state.t + 1,
            placement=placement,
            start=jnp.where(active, start, state.start),
            runtime=jnp.where(active, runtime, state.runtime),
            scale=state.scale,
            makespan=jnp.where(active, makespan, state.makespan),
            peak_memory=jnp.where(active, peak, state.peak_memory),
            best_runtime=jnp.where(better, runtime, state.best_runtime),
            best_placement=jnp.where(better, placement, state.best_placement),
        )
        reward = jnp.where(active, state.runtime - new.runtime, 0.0)
        done = new.t >= self.n_steps(state.graph, env_params)
        return new, self.observe(new, env_params), reward, done

    def current_unit(self, state: EnvState, env_params: EnvParams) -> jax.Array:
        """[] int32 the unit that step `state.t` places."""
        n = env_params.bank.n_units[state.graph]
        return state.order[state.t % jnp.maximum(n, 1)]

    # ------------------------------------------------------------------ observation
    def observe(self, state: EnvState, env_params: EnvParams) -> Observation:
        """The observation before step `state.t`; it reads only the state's graph, order, t,
        placement and start times (what `EnvState.replayed` rebuilds from a trajectory)."""
        bank = env_params.bank
        graph, order, t, placement, start = (
            state.graph,
            state.order,
            state.t,
            state.placement,
            state.start,
        )
        n_pad = order.shape[0]
        n = jnp.maximum(bank.n_units[graph], 1)
        node_mask = jnp.arange(n_pad) < bank.n_nodes[graph]
        unit_of = bank.unit[graph]
        unit = order[t % n]
        current = node_mask & (unit_of == unit)
        position = jnp.zeros(n_pad, jnp.int32).at[order].set(jnp.arange(n_pad, dtype=jnp.int32))
        visits = jnp.minimum(t, self.n_steps(graph, env_params))
        placed = (visits // n + (position[unit_of] < visits % n)).astype(start.dtype)
        gap = jnp.where(node_mask, start - jnp.min(jnp.where(current, start, jnp.inf)), 0.0)
        gap = gap / jnp.maximum(jnp.max(jnp.abs(gap)), 1e-9)
        one_hot = jax.nn.one_hot(placement, self.n_devices, dtype=start.dtype)
        columns = [
            bank.cost_feature[graph],
            bank.bytes_feature[graph],
            placed,
            current.astype(start.dtype),
            gap,
        ]
        if self.config.memory_feature:
            one_hot = jnp.concatenate([one_hot, bank.memory_feature[graph][:, None]], axis=1)
        features = jnp.concatenate([jnp.stack(columns, axis=1), one_hot], axis=1)
        features = jnp.where(node_mask[:, None], features, 0.0)
        return Observation(
            features=features,
            unit=unit,
            current=current,
            node_mask=node_mask,
            ancestors=_unpack_row(bank.ancestors[graph, unit], n_pad),
            descendants=_unpack_row(bank.descendants[graph, unit], n_pad),
            placement=placement,
            action_mask=self._action_mask(graph, placement, current, node_mask, env_params),
            senders=bank.senders[graph],
            receivers=bank.receivers[graph],
            edge_mask=bank.edge_mask[graph],
            depth=bank.depth[graph],
            height=bank.height[graph],
        )

    def _action_mask(self, graph, placement, current, node_mask, env_params) -> jax.Array:
        """[D] bool: the devices that hold the current unit's nodes next to the others."""
        if not self.config.mask_out_of_memory:
            return jnp.ones(self.n_devices, bool)
        memory = env_params.bank.memory[graph]
        others = jnp.where(node_mask & ~current, memory, 0.0)
        used = jax.ops.segment_sum(others, placement, self.n_devices)  # [D] bytes
        fits = used + jnp.sum(jnp.where(current, memory, 0.0)) <= env_params.capacity
        return jnp.where(jnp.any(fits), fits, True)

    # ------------------------------------------------------------------ simulation
    def _initial_placement(
        self, key: jax.Array, graph: jax.Array, bank: DeviceBank, per_unit: bool = False
    ) -> jax.Array:
        """[N] int32 device per node: the graph's given start, or one device per unit id (nodes
        take their unit's); `per_unit`: each unit's drawn from its own id, so the draw does not
        depend on the padding."""
        kind = self.config.initial_placement
        if kind == "given":
            return bank.start[graph]
        n_pad = bank.order.shape[1]
        if kind == "single":
            return jnp.zeros(n_pad, jnp.int32)
        if kind == "fixed":
            key = jax.random.fold_in(jax.random.key(self.config.fixed_placement_seed), graph)
        if per_unit and kind == "random":
            draws = jax.vmap(
                lambda u: jax.random.randint(
                    jax.random.fold_in(key, u), (), 0, self.n_devices, dtype=jnp.int32
                )
            )(jnp.arange(n_pad))
        else:
            draws = jax.random.randint(key, (n_pad,), 0, self.n_devices, dtype=jnp.int32)
        return draws[bank.unit[graph]]

    def _simulate(self, graph: jax.Array, placement: jax.Array, env_params: EnvParams):
        """(makespan µs, peak memory [D] bytes, start [N] µs per node) of `placement`."""
        bank = env_params.bank
        if self.config.reward_graph == "grouped" or bank.op_sim is None:
            # (no graph of the bank was coarsened: each is its own op graph)
            sim = jax.tree.map(lambda x: x[graph], bank.sim)
            out = simulate_padded(sim, env_params.cluster, placement, self.broadcast)
            return out.makespan, out.peak_memory, out.start
        sim = jax.tree.map(lambda x: x[graph], bank.op_sim)
        op_to_group = bank.op_to_group[graph]
        out = simulate_padded(sim, env_params.cluster, placement[op_to_group], self.broadcast)
        real = jnp.arange(op_to_group.shape[0]) < sim.n_ops
        first = jax.ops.segment_min(
            jnp.where(real, out.start, jnp.inf), op_to_group, placement.shape[0]
        )
        return out.makespan, out.peak_memory, jnp.where(jnp.isfinite(first), first, 0.0)

    def _runtime_s(self, makespan, peak, env_params: EnvParams) -> jax.Array:
        """[] seconds: the episode's runtime, makespan (µs) plus the memory penalty for the
        fullest device's overflow of peak memory [D] bytes (the reward's quantity)."""
        over_gb = jnp.max(jnp.maximum(peak - env_params.capacity, 0.0)) / GB
        penalty = jnp.minimum(self.config.memory_penalty * over_gb, self.config.memory_penalty_cap)
        return makespan * US + penalty


def _unpack_row(packed: jax.Array, n_pad: int) -> jax.Array:
    """[N/8] uint8 (NumPy `packbits` order) -> [N] bool."""
    return jnp.unpackbits(packed, count=n_pad).astype(bool)
