"""REINFORCE's pieces as pure functions: returns, the per-graph baseline and its window, the
advantage, and the policy-gradient loss of a chunk of steps.

Shapes: T steps per episode, B episodes, G graphs of the bank, W baseline window, D devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def returns_to_go(reward: jax.Array) -> jax.Array:
    """[T, B] G_t = sum of rewards from step t on (gamma = 1), for rewards [T, B]."""
    return jnp.cumsum(reward[::-1], axis=0)[::-1]


def window_baseline(
    window: jax.Array, filled: jax.Array, graph: jax.Array, returns: jax.Array
) -> jax.Array:
    """[T, B] b_t per episode: the mean G_t over its graph's window (`window` [G, W, T] of the
    last episodes' returns, `filled` [G] int32 episodes in it), or this batch's per-graph mean
    of `returns` [T, B] where the graph (`graph` [B] int32) has no history yet."""
    n_graphs = window.shape[0]
    window_mean = window.sum(axis=1) / jnp.maximum(filled, 1)[:, None]  # [G, T]
    one_hot = jax.nn.one_hot(graph, n_graphs, dtype=returns.dtype)  # [B, G]
    batch_mean = (returns @ one_hot) / jnp.maximum(one_hot.sum(axis=0), 1)  # [T, G]
    per_graph = jnp.where(filled[None, :] > 0, window_mean.T, batch_mean)  # [T, G]
    return per_graph[:, graph]


def push_returns(
    window: jax.Array, filled: jax.Array, cursor: jax.Array, graph: jax.Array, returns: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(window [G, W, T], filled [G], cursor [G]) with the batch's returns [T, B] appended to
    their graphs' windows (`graph` [B] int32; `cursor` [G] int32 the next slot per graph); where
    a graph has more than W episodes in the batch, its last W are kept."""
    n_graphs, size = window.shape[:2]
    one_hot = jax.nn.one_hot(graph, n_graphs, dtype=jnp.int32)  # [B, G]
    count = one_hot.sum(axis=0, dtype=jnp.int32)  # [G]
    rank = (jnp.cumsum(one_hot, axis=0, dtype=jnp.int32) - 1)[jnp.arange(graph.shape[0]), graph]
    skip = jnp.maximum(count - size, 0)[graph]  # [B] older episodes not kept
    keep = rank >= skip
    slot = (cursor[graph] + rank - skip) % size
    row = jnp.where(keep, graph, n_graphs)  # out of range: dropped
    buffer = window.at[row, slot].set(returns.T, mode="drop")
    stored = jnp.minimum(count, size)
    return buffer, jnp.minimum(filled + stored, size), (cursor + stored) % size


def normalized(advantage: jax.Array, active: jax.Array) -> jax.Array:
    """[T, B] advantages [T, B] divided by their root mean square over the `active` steps."""
    n_active = jnp.maximum(active.sum(), 1)
    spread = jnp.sqrt(jnp.sum(advantage**2) / n_active)
    return advantage / jnp.maximum(spread, 1e-8)


def policy_loss(
    logits: jax.Array,
    action: jax.Array,
    active: jax.Array,
    advantage: jax.Array,
    entropy_weight: jax.Array,
    n_active: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """(loss, entropy sum) of a chunk of steps: logits [C, B, D], action, active and advantage
    [C, B]; loss = sum over active steps of -(A_t log pi(a_t) + beta H(pi)), divided by
    `n_active` (the episodes' active steps in all chunks, so that chunk losses add up)."""
    log_p = jax.nn.log_softmax(logits)
    chosen = jnp.take_along_axis(log_p, action[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
    policy_term = -jnp.sum(jnp.where(active, advantage * chosen, 0.0))
    entropy_sum = jnp.sum(jnp.where(active, entropy, 0.0))
    return (policy_term - entropy_weight * entropy_sum) / n_active, entropy_sum
