"""Device side of the construct agent's training: episodes batched over graphs and episodes,
the imitation loss and one optimizer update on it.

An episode's log-probabilities are recomputed in the loss from the features its rollout
recorded (they do not depend on the parameters), with the graph embedding computed once per
graph: an update costs one embedding per graph and one scorer pass per (position, device).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from placeto_jax.env.construct import (
    GraphArrays,
    Machine,
    Trajectory,
    lookahead_choice,
    n_features,
    rollout,
)
from placeto_jax.nn.construct_policy import ConstructPolicy

MODES = ("greedy", "sample", "uniform", "teacher", "lookahead")
MASKED = -1e30  # logit of a device that is not allowed


@dataclasses.dataclass(frozen=True)
class Learner:
    """The policy and its optimizer (static: hashable, closed over by jitted functions)."""

    policy: ConstructPolicy
    optimizer: optax.GradientTransformation

    @classmethod
    @functools.cache  # one object per setting: jitted functions take it as a static argument
    def make(cls, width: int, rounds: int, learning_rate: float, clip: float = 1.0) -> Learner:
        optimizer = optax.chain(optax.clip_by_global_norm(clip), optax.adam(learning_rate))
        return cls(ConstructPolicy(width=width, rounds=rounds), optimizer)

    def init(self, key: jax.Array, g: GraphArrays) -> Any:
        """Parameters for graph `g` (no graph axis; any graph gives the same shapes)."""
        n_devices = 1  # the scorer's weights do not depend on the device count
        features = jnp.zeros((g.cost.shape[0], n_devices, n_features(g)), jnp.float32)
        return self.policy.init(key, g.static, g.senders, g.receivers, g.edge_mask, features)

    def embed(self, params: Any, g: GraphArrays) -> jax.Array:
        return self.policy.apply(
            params, g.static, g.senders, g.receivers, g.edge_mask, method="embed"
        )

    def logits(self, params: Any, embedding: jax.Array, features: jax.Array, allowed) -> jax.Array:
        scores = self.policy.apply(params, embedding, features, method="score")
        return jnp.where(allowed, scores, MASKED)


def choose(mode: str, logits: jax.Array, noise: jax.Array, temperature: float) -> jax.Array:
    """A device from masked logits [D]: argmax (`greedy`), a draw at `temperature`
    (`sample`) or a uniform draw over the allowed devices (`uniform`); a draw is the argmax of
    the logits plus the step's Gumbel noise [D] (the Gumbel-max trick, as
    `jax.random.categorical` draws)."""
    if mode == "greedy":
        return jnp.argmax(logits)
    if mode == "uniform":
        logits = jnp.where(logits > MASKED / 2, 0.0, MASKED)
        return jnp.argmax(noise + logits)
    return jnp.argmax(noise + logits / temperature)


@functools.partial(jax.jit, static_argnames=("learner", "mode", "n_episodes"))
def episodes(
    learner: Learner,
    params: Any,
    bank: GraphArrays,
    machine: Machine,
    graph_ids: jax.Array,
    key: jax.Array,
    mode: str,
    n_episodes: int,
    temperature: float = 1.0,
    teacher: jax.Array | None = None,
) -> Trajectory:
    """[G, B] episodes: `n_episodes` on each graph of `graph_ids` [G], actions by `mode`
    (`MODES`; `teacher`: the devices of `teacher` [G, Np] by position, for imitation;
    `lookahead`: the lookahead's best device, `env.construct.lookahead_choice`). Uniform
    episodes do not simulate the lookahead they would not read."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "lookahead" and bank.lookahead is None:
        raise ValueError("mode 'lookahead' needs a bank built with the lookahead")
    if mode == "uniform":
        bank = dataclasses.replace(bank, lookahead=None)

    def on_graph(index, graph_key, forced):
        g = bank.at(index)
        embedding = learner.embed(params, g)

        def chooser(t, features, allowed, noise):
            if mode == "teacher":
                return forced[t]
            if mode == "lookahead":
                return lookahead_choice(features, allowed)
            if mode == "uniform":  # the policy unread (its features may lack the lookahead)
                return choose(mode, jnp.where(allowed, 0.0, MASKED), noise, temperature)
            return choose(mode, learner.logits(params, embedding[t], features, allowed),
                          noise, temperature)  # fmt: skip

        keys = jax.random.split(graph_key, n_episodes)
        if alone:
            return _batched(rollout(g, machine, chooser, keys[0]))
        return jax.vmap(lambda k: rollout(g, machine, chooser, k))(keys)

    forced = jnp.zeros((graph_ids.shape[0], bank.cost.shape[1]), jnp.int32)
    forced = forced if teacher is None else teacher
    graph_keys = jax.random.split(key, graph_ids.shape[0])
    # One lookahead episode runs unbatched, so that it simulates at decisions only (under vmap,
    # `lax.cond` runs both branches)
    alone = bank.lookahead is not None and graph_ids.shape[0] == 1 and n_episodes == 1
    if alone:
        return _batched(on_graph(graph_ids[0], graph_keys[0], forced[0]))
    return jax.vmap(on_graph)(graph_ids, graph_keys, forced)


def _batched(tree):
    return jax.tree.map(lambda a: a[None], tree)


def log_probs(learner: Learner, params: Any, bank: GraphArrays, graph_ids, trajectory):
    """[G, B, Np, D] log-probabilities of every device at every recorded step."""

    def on_graph(index, features, allowed):
        embedding = learner.embed(params, bank.at(index))  # [Np, W]
        logits = learner.logits(params, embedding[None], features, allowed)
        return jax.nn.log_softmax(logits, axis=-1)

    return jax.vmap(on_graph)(graph_ids, trajectory.features, trajectory.allowed)


def imitation_loss(learner, params, bank, graph_ids, trajectory) -> jax.Array:
    """Mean over decisions of -log pi(teacher's device) along the teacher's own episodes (the
    teacher's device counts as allowed where the memory mask would refuse it)."""
    taught = trajectory.device[..., None] == jnp.arange(trajectory.allowed.shape[-1])
    trajectory = dataclasses.replace(trajectory, allowed=trajectory.allowed | taught)
    logp = log_probs(learner, params, bank, graph_ids, trajectory)
    taken = jnp.take_along_axis(logp, trajectory.device[..., None], axis=-1)[..., 0]
    weight = trajectory.decision.astype(logp.dtype)
    return -(taken * weight).sum() / jnp.maximum(weight.sum(), 1.0)


@functools.partial(jax.jit, static_argnames=("learner",))
def imitation_update(learner, params, opt_state, bank, graph_ids, trajectory):
    """One optimizer step on `imitation_loss`: (params, opt_state, loss)."""
    loss, grads = jax.value_and_grad(
        lambda p: imitation_loss(learner, p, bank, graph_ids, trajectory)
    )(params)
    updates, opt_state = learner.optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
