"""Shared pieces of the learned placers (`rnn`, `hierarchical`): op features, the LSTM
encoder / attention decoder, and the REINFORCE loop over batches of simulated placements.

A policy is a frozen (hashable) dataclass with `init(key, inputs) -> params`,
`sample(params, inputs, key) -> (placements [B, L] int32, actions)` (L >= N: padding ops last) and
`log_prob(params, inputs, actions) -> [B]`; `reinforce` jits `sample` and the update once per
(policy, input shapes) and runs the loop on the host: sample a batch, simulate it in one batched
call (every placement counts as one evaluation), reward -sqrt(score / reference), advantage
against an exponential moving average of past batch rewards, one Adam step on the batch mean of
-advantage x log-probability.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution, best_so_far
from placeto_jax.placers.search import DEFAULT_BUDGET
from placeto_jax.placers.simple import colocate
from placeto_jax.sim.api import padded, simulate_rows
from placeto_jax.sim.padded import bucket
from placeto_jax.sim.ranking import fits_memory, penalised_makespan

MIN_LENGTH = 64  # sequences are padded to a power of two at least this long
VOCAB = 32  # op-type buckets: the VOCAB - 1 most frequent types, then one for all others
NEIGHBOURS = 3  # parent slots and child slots in the adjacency features
F32 = jnp.float32


# ---------------------------------------------------------------------- features
def sequence_length(n_ops: int) -> int:
    """L: the padded op count, so that graphs of similar size share one compiled policy."""
    return bucket(n_ops, MIN_LENGTH)


def padded_features(graph: Graph, order: np.ndarray) -> np.ndarray:
    """[L, F] float32: the op features of ops `order` ([N] ints), zero rows after them."""
    out = np.zeros((sequence_length(graph.n_ops), VOCAB + 4 + 2 * NEIGHBOURS), np.float32)
    out[: graph.n_ops] = op_features(graph)[order]
    return out


def op_features(graph: Graph) -> np.ndarray:
    """[N, VOCAB + 4 + 2 NEIGHBOURS] float32 per op (op index order): op-type one-hot; log output
    bytes, log cost, log in- and out-degree, each divided by its max over the graph; the signed
    topological-position offsets (/ N) of the NEIGHBOURS nearest parents and children, 0 when
    absent."""
    n = graph.n_ops
    types = np.zeros((n, VOCAB), np.float32)
    types[np.arange(n), _type_ids(graph)] = 1.0
    scalars = np.stack(
        [graph.out_bytes, graph.cost, graph.in_degree, graph.out_degree], axis=1
    ).astype(np.float64)
    scalars = np.log1p(scalars)
    scalars /= np.maximum(scalars.max(axis=0), 1e-12)
    return np.concatenate([types, scalars.astype(np.float32), _adjacency(graph)], axis=1)


def _type_ids(graph: Graph) -> np.ndarray:
    """[N] int: rank of the op's type by frequency (ties by name), capped at VOCAB - 1; all 0
    when the graph has no op types."""
    if graph.op_types is None:
        return np.zeros(graph.n_ops, np.int64)
    names, inverse, counts = np.unique(
        np.asarray(graph.op_types), return_inverse=True, return_counts=True
    )
    rank = np.empty(names.size, np.int64)
    rank[np.lexsort((names, -counts))] = np.arange(names.size)
    return np.minimum(rank[inverse], VOCAB - 1)


def _adjacency(graph: Graph) -> np.ndarray:
    """[N, 2 NEIGHBOURS] float32: (position of neighbour - position of op) / N for the nearest
    parents (negative) then the nearest children (positive), in topological positions."""
    n = graph.n_ops
    pos = np.empty(n, np.int64)
    pos[graph.topological_order] = np.arange(n)
    out = np.zeros((n, 2 * NEIGHBOURS), np.float32)
    for v in range(n):
        parents = np.sort(pos[graph.parents(v)])[::-1][:NEIGHBOURS]
        children = np.sort(pos[graph.children(v)])[:NEIGHBOURS]
        out[v, : parents.size] = (parents - pos[v]) / n
        out[v, NEIGHBOURS : NEIGHBOURS + children.size] = (children - pos[v]) / n
    return out


# ---------------------------------------------------------------------- model
class Seq2Seq(nn.Module):
    """LSTM encoder over L input vectors; LSTM decoder with dot-product (Luong) attention over the
    encoder states, one device per position. Decoder input at step t: the embedding of the
    previous device (a start token at t = 0) and the encoder state at t."""

    n_devices: int
    hidden: int  # LSTM width

    def setup(self):
        self.embed = nn.Dense(self.hidden, param_dtype=F32, dtype=F32)
        self.encoder = nn.RNN(nn.OptimizedLSTMCell(self.hidden, dtype=F32), return_carry=True)
        self.device_embed = nn.Embed(self.n_devices + 1, self.hidden, param_dtype=F32, dtype=F32)
        self.decoder = nn.OptimizedLSTMCell(self.hidden, dtype=F32)
        self.attend = nn.Dense(self.hidden, use_bias=False, param_dtype=F32, dtype=F32)
        self.mix = nn.Dense(self.hidden, param_dtype=F32, dtype=F32)
        self.head = nn.Dense(self.n_devices, param_dtype=F32, dtype=F32)

    def encode(self, x: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        """x [B, L, F] -> (final LSTM carry, states [B, L, H], attention keys [B, L, H])."""
        carry, states = self.encoder(jnp.tanh(self.embed(x.astype(F32))))
        return carry, states, self.attend(states)

    def step(self, carry, prev: jax.Array, state_t: jax.Array, states, keys):
        """One decoder step: prev [B] int device (n_devices = start), state_t [B or 1, H],
        states and keys [B or 1, L, H] (1: one encoding shared by the batch) ->
        (carry, logits [B, D])."""
        embedded = self.device_embed(prev)
        state_t = jnp.broadcast_to(state_t, embedded.shape)
        carry, h = self.decoder(carry, jnp.concatenate([embedded, state_t], axis=-1))
        if keys.shape[0] == 1:
            weights = jax.nn.softmax(h @ keys[0].T / np.sqrt(self.hidden), axis=-1)
            context = weights @ states[0]
        else:
            scores = jnp.einsum("blh,bh->bl", keys, h) / np.sqrt(self.hidden)
            context = jnp.einsum("bl,blh->bh", jax.nn.softmax(scores, axis=-1), states)
        return carry, self.head(jnp.tanh(self.mix(jnp.concatenate([h, context], axis=-1))))

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits [B, D] of the first step (used to initialise the parameters)."""
        carry, states, keys = self.encode(x)
        start = jnp.full(x.shape[:1], self.n_devices, jnp.int32)
        return self.step(carry, start, states[:, 0], states, keys)[1]


def _encoded(model: Seq2Seq, params, x: jax.Array, batch: int):
    """Encode x [1 or B, L, F]: (decoder carry broadcast to `batch` rows, states, keys)."""
    carry, states, keys = model.apply(params, x, method=Seq2Seq.encode)
    carry = jax.tree.map(lambda a: jnp.broadcast_to(a, (batch, *a.shape[1:])), carry)
    return carry, states, keys


def decode_sample(
    model: Seq2Seq, params, x: jax.Array, leader: jax.Array, key: jax.Array, batch: int
) -> jax.Array:
    """[B, L] int32 devices sampled position by position. Position t copies the device of
    position leader[t] < t (co-location) instead of sampling when leader[t] != t."""
    carry, states, keys = _encoded(model, params, x, batch)
    length = states.shape[1]

    def step(loop, t):
        carry, prev, devices = loop
        carry, logits = model.apply(
            params, carry, prev, states[:, t], states, keys, method=Seq2Seq.step
        )
        drawn = jax.random.categorical(jax.random.fold_in(key, t), logits).astype(jnp.int32)
        device = jnp.where(leader[t] == t, drawn, devices[:, leader[t]])
        return (carry, device, devices.at[:, t].set(device)), None

    start = jnp.full((batch,), model.n_devices, jnp.int32)
    devices = jnp.zeros((batch, length), jnp.int32)
    (_, _, devices), _ = jax.lax.scan(step, (carry, start, devices), jnp.arange(length))
    return devices


def decode_log_prob(
    model: Seq2Seq, params, x: jax.Array, devices: jax.Array, counted: jax.Array
) -> jax.Array:
    """[B] sum over positions where counted [B or 1, L] of log pi(devices [B, L]), teacher-forced.
    The step is rematerialised so that memory stays O(B L H), not O(B L^2)."""
    batch = devices.shape[0]
    carry, states, keys = _encoded(model, params, x, batch)

    @jax.checkpoint
    def step(carry, inputs):
        prev, device, state_t = inputs
        carry, logits = model.apply(params, carry, prev, state_t, states, keys, method=Seq2Seq.step)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), device[:, None], axis=1)
        return carry, picked[:, 0]

    prev = jnp.concatenate([jnp.full((batch, 1), model.n_devices, jnp.int32), devices[:, :-1]], 1)
    _, logp = jax.lax.scan(step, carry, (prev.T, devices.T, jnp.swapaxes(states, 0, 1)))
    return jnp.sum(logp.T * counted, axis=1)


# ---------------------------------------------------------------------- REINFORCE
class Policy(Protocol):
    batch: int  # placements sampled per update

    def init(self, key: jax.Array, inputs: Any) -> Any: ...

    def sample(self, params: Any, inputs: Any, key: jax.Array) -> tuple[jax.Array, Any]: ...

    def log_prob(self, params: Any, inputs: Any, actions: Any) -> jax.Array: ...


@dataclasses.dataclass(frozen=True)
class Training:
    """REINFORCE hyperparameters shared by the learned placers."""

    learning_rate: float = 3e-3  # Adam, decayed linearly to learning_rate * final_fraction
    final_fraction: float = 0.1
    grad_clip: float = 1.0  # global norm
    baseline_decay: float = 0.9  # EMA of batch-mean rewards


@dataclasses.dataclass(frozen=True)
class Curve:
    """The learning curve of one run, one entry per sampled batch."""

    evaluations: np.ndarray  # [U] int64 simulator evaluations used after the batch
    best: np.ndarray  # [U] float64 µs best penalised makespan seen so far
    raw: np.ndarray  # [U] float64 µs makespan of that best placement, without the penalty
    fits: np.ndarray  # [U] bool, that best placement fits device memory
    mean: np.ndarray  # [U] float64 µs mean penalised makespan of the batch
    wall_s: np.ndarray  # [U] float64 s from the start of training to the batch's scores

    def evaluations_to_within(self, fraction: float = 0.05) -> int:
        """Evaluations after which the best-so-far score is within `fraction` of the final one."""
        reached = np.flatnonzero(self.best <= (1.0 + fraction) * self.best[-1])
        return int(self.evaluations[reached[0]])


def reinforce(
    graph: Graph,
    cluster: Cluster,
    key: jax.Array,
    budget: int | None,
    policy: Policy,
    inputs: Any,
    training: Training,
    name: str = "reinforce",
) -> tuple[Solution, Curve]:
    """Train `policy` on one graph with at most `budget` simulator evaluations; return the best
    placement seen (by penalised makespan) and the learning curve. A progress bar named `name`
    counts the evaluations where stderr is a terminal."""
    budget = DEFAULT_BUDGET if budget is None else int(budget)
    if budget < 1:
        raise ValueError(f"the evaluation budget must be at least 1, got {budget}")
    n_updates = -(-budget // policy.batch)
    reference = float(graph.cost.sum() / cluster.speed_array.max())  # µs, no transfers
    init_key, loop_key = jax.random.split(key)
    params = _init(policy, init_key, inputs)
    opt_state = _optimizer(training.grad_clip).init(params)
    baseline = None
    best, best_score, used = None, np.inf, 0
    evaluations, batch_best, means, walls = [], [], [], []
    began = time.perf_counter()
    bar = tqdm(total=budget, desc=name, unit="eval", leave=False, disable=None)
    for i, step_key in enumerate(jax.random.split(loop_key, n_updates)):
        placements, actions = _sample(policy, params, inputs, step_key)
        take = min(policy.batch, budget - used)
        rows = colocate(graph, np.asarray(placements[:, : graph.n_ops], dtype=np.int64))
        penalised, makespan, fits = score_batch(graph, cluster, rows)
        scores = penalised[:take]
        used += take
        bar.update(take)
        top = int(np.argmin(scores))
        if scores[top] < best_score:
            best, best_score = rows[top], float(scores[top])
        evaluations.append(used)
        batch_best.append((scores[top], makespan[top], fits[top]))
        means.append(float(scores.mean()))
        walls.append(time.perf_counter() - began)
        if used == budget:
            break
        reward = -np.sqrt(scores / reference)
        baseline = reward.mean() if baseline is None else baseline
        lr = training.learning_rate * (1.0 - (1.0 - training.final_fraction) * i / n_updates)
        params, opt_state = _update(
            policy,
            training.grad_clip,
            params,
            opt_state,
            inputs,
            actions,
            jnp.asarray(reward - baseline, F32),
            jnp.asarray(lr, F32),
        )
        decay = training.baseline_decay
        baseline = decay * baseline + (1.0 - decay) * reward.mean()
    bar.close()
    bests, raw, fit = best_so_far(*zip(*batch_best, strict=True))
    curve = Curve(np.asarray(evaluations), bests, raw, fit, np.asarray(means), np.asarray(walls))
    return Solution(best, used), curve


def score_batch(
    graph: Graph, cluster: Cluster, placements: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(penalised makespan [B] µs, makespan [B] µs, fits memory [B] bool) of placements [B, N],
    simulated in one batched call of exactly B rows (so a fixed batch size compiles the
    simulator once)."""
    rows = np.zeros((placements.shape[0], padded(graph).n_pad), dtype=np.int32)
    rows[:, : graph.n_ops] = placements
    out = simulate_rows(graph, cluster, rows)
    penalised = penalised_makespan(out.makespan, out.peak_memory, cluster)
    return penalised, np.asarray(out.makespan, np.float64), fits_memory(out.peak_memory, cluster)


def _optimizer(grad_clip: float) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.scale_by_adam())


@functools.partial(jax.jit, static_argnums=0)
def _init(policy: Policy, key, inputs):
    return policy.init(key, inputs)


@functools.partial(jax.jit, static_argnums=0)
def _sample(policy: Policy, params, inputs, key):
    return policy.sample(params, inputs, key)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _update(policy: Policy, grad_clip: float, params, opt_state, inputs, actions, advantage, lr):
    """One Adam step on -mean(advantage [B] x log pi(actions))."""

    def loss(params):
        return -jnp.mean(advantage * policy.log_prob(params, inputs, actions))

    grads = jax.grad(loss)(params)
    updates, opt_state = _optimizer(grad_clip).update(grads, opt_state, params)
    params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
    return params, opt_state
