"""The one module that touches jraph (unmaintained since 2022): neighbour sums over a padded
edge list, through `jraph.GraphNetwork`. Padding edges carry a zero mask, so they add nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jraph


def neighbour_sum(
    messages: jax.Array,
    senders: jax.Array,
    receivers: jax.Array,
    edge_mask: jax.Array,
    direction: str,
) -> jax.Array:
    """[N, W] sums of `messages` [N, W] over each node's parents ("forward": messages flow along
    the edges, producer to consumer) or over its children ("backward")."""
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction must be 'forward' or 'backward', not {direction!r}")
    graph = jraph.GraphsTuple(
        nodes=messages,
        edges=edge_mask.astype(messages.dtype)[:, None],
        senders=senders,
        receivers=receivers,
        globals=None,
        n_node=jnp.array([messages.shape[0]]),
        n_edge=jnp.array([senders.shape[0]]),
    )
    forward = direction == "forward"

    def edge_message(mask, from_sender, from_receiver, _):
        return (from_sender if forward else from_receiver) * mask

    def node_sum(_, sent, received, __):
        return received if forward else sent

    return jraph.GraphNetwork(update_edge_fn=edge_message, update_node_fn=node_sum)(graph).nodes
