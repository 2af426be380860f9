"""The constructive policy: a graph embedding computed once per graph, and a device scorer that
reads, per device, the list-schedule observation of `env/construct.py`.

Embedding: an MLP of the static node features, then `rounds` rounds of message passing, each
adding to every node the mean of its parents' and of its children's vectors (separate weights
per direction, shared over rounds; jraph through `nn/graph_ops.py`). It does not depend on the
placement, so one pass serves every step of every episode on the graph.

Scorer: for op t and each device d, an MLP of [embedding of t, features of (t, d), features of
(t, d) minus their mean over devices] gives one logit; the same weights for every device, so the
policy is equivariant under renaming devices and works for any device count.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from placeto_jax.nn.graph_ops import neighbour_sum


class ConstructPolicy(nn.Module):
    width: int = 64  # hidden units of every layer
    rounds: int = 3  # message-passing rounds of the embedding

    def setup(self) -> None:
        self.encode = nn.Sequential([nn.Dense(self.width), nn.relu, nn.Dense(self.width)])
        self.forward_message = nn.Dense(self.width)
        self.backward_message = nn.Dense(self.width)
        self.mix = nn.Dense(self.width)
        self.hidden = [nn.Dense(self.width), nn.Dense(self.width)]
        small = nn.initializers.variance_scaling(1e-4, "fan_in", "normal")  # near-uniform start
        self.out = nn.Dense(1, kernel_init=small)

    def __call__(self, static, senders, receivers, edge_mask, features):
        """Initialisation entry: the logits [Np, D] of every position."""
        return self.score(self.embed(static, senders, receivers, edge_mask), features)

    def embed(self, static, senders, receivers, edge_mask) -> jax.Array:
        """[Np, width] node embeddings of static [Np, S] on the padded edge list [Ep]."""
        ones = jnp.ones((static.shape[0], 1), static.dtype)
        n_in = neighbour_sum(ones, senders, receivers, edge_mask, "forward")
        n_out = neighbour_sum(ones, senders, receivers, edge_mask, "backward")
        x = self.encode(static)
        for _ in range(self.rounds):
            down = neighbour_sum(nn.relu(self.forward_message(x)), senders, receivers,
                                 edge_mask, "forward") / jnp.maximum(n_in, 1.0)  # fmt: skip
            up = neighbour_sum(nn.relu(self.backward_message(x)), senders, receivers,
                               edge_mask, "backward") / jnp.maximum(n_out, 1.0)  # fmt: skip
            x = x + nn.relu(self.mix(jnp.concatenate([down, up], axis=-1)))
        return x

    def score(self, embedding, features) -> jax.Array:
        """[..., D] logits from embeddings [..., width] and features [..., D, F]."""
        centred = features - features.mean(axis=-2, keepdims=True)
        tiled = jnp.broadcast_to(embedding[..., None, :], (*features.shape[:-1], self.width))
        h = jnp.concatenate([tiled, features, centred], axis=-1)
        for layer in self.hidden:
            h = nn.relu(layer(h))
        return self.out(h)[..., 0]
