"""The RNN-based placer (Mirhoseini et al., ICML 2017), trained per graph with REINFORCE.

The ops in topological order are one sequence; each op's input vector is its type, output size,
cost and adjacency (`seq2seq.op_features`). An LSTM encoder reads the sequence, an LSTM decoder
with attention emits one device per op, feeding the previous device back. Ops of a co-location
group take the device of the group's first op (the decoder copies it and does not sample).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.seq2seq import (
    Curve,
    Seq2Seq,
    Training,
    decode_log_prob,
    decode_sample,
    padded_features,
    reinforce,
    sequence_length,
)
from placeto_jax.placers.simple import colocate


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RnnInputs:
    """One graph as the RNN placer sees it, in topological positions, padded to L
    (`seq2seq.sequence_length`) positions; the padding comes last and is never sampled."""

    features: jax.Array  # [1, L, F] float32 op features by topological position
    order: jax.Array  # [L] int32 op at each position (padding: N, N + 1, ...)
    leader: jax.Array  # [L] int32 position whose device each position copies (itself: sampled)

    @classmethod
    def of(cls, graph: Graph) -> RnnInputs:
        n, length = graph.n_ops, sequence_length(graph.n_ops)
        order = np.concatenate([graph.topological_order, np.arange(n, length)])
        position = np.empty(length, np.int64)
        position[order] = np.arange(length)
        leader = np.full(length, -1, np.int64)  # -1: a padding position copies, never samples
        leader[:n] = position[colocate(graph, np.arange(n))[order[:n]]]
        return cls(
            features=jnp.asarray(padded_features(graph, order[:n])[None]),
            order=jnp.asarray(order, jnp.int32),
            leader=jnp.asarray(leader, jnp.int32),
        )


@dataclasses.dataclass(frozen=True)
class RnnPolicy:
    """Seq2seq over the op sequence; the actions are the devices by position [B, L]."""

    n_devices: int
    hidden: int = 64  # LSTM width (the paper: 256)
    batch: int = 64  # placements sampled per update

    @property
    def model(self) -> Seq2Seq:
        return Seq2Seq(self.n_devices, self.hidden)

    def init(self, key: jax.Array, inputs: RnnInputs):
        return self.model.init(key, inputs.features)

    def sample(self, params, inputs: RnnInputs, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(placements [B, L] by op index, devices [B, L] by position)."""
        devices = decode_sample(self.model, params, inputs.features, inputs.leader, key, self.batch)
        return jnp.zeros_like(devices).at[:, inputs.order].set(devices), devices

    def log_prob(self, params, inputs: RnnInputs, devices: jax.Array) -> jax.Array:
        """[B] log-probability of the sampled (not copied) devices."""
        counted = (inputs.leader == jnp.arange(inputs.leader.shape[0]))[None]
        return decode_log_prob(self.model, params, inputs.features, devices, counted)


def train_rnn(
    graph: Graph,
    cluster: Cluster,
    key: jax.Array,
    budget: int | None = None,
    policy: RnnPolicy | None = None,
    training: Training | None = None,
) -> tuple[Solution, Curve]:
    """Train the RNN placer on `graph` for `budget` simulator evaluations (default 4,096):
    the best placement seen and the learning curve."""
    policy = policy or RnnPolicy(cluster.n_devices, batch=min(64, budget or 64))
    inputs = RnnInputs.of(graph)
    return reinforce(graph, cluster, key, budget, policy, inputs, training or Training(), "rnn")


def rnn(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """`Method` solver: `train_rnn` without the curve."""
    return train_rnn(graph, cluster, key, budget)[0]
