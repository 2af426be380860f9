"""The hierarchical planner (Mirhoseini et al., ICLR 2018), trained per graph with REINFORCE.

A feed-forward grouper (MLP on `seq2seq.op_features`, softmax over G groups) samples a group per
op; a seq2seq placer (LSTM encoder over the groups' embeddings, attention decoder) samples a
device per group; each op goes to its group's device. Both are trained jointly on the sum of the
two log-probabilities. Ops of a co-location group take the group of the group's first op.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.seq2seq import (
    F32,
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
from placeto_jax.sim.padded import bucket

N_GROUPS = 64  # default G (fixed, so that graphs of similar size share one compiled policy)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HierInputs:
    """One graph as the hierarchical planner sees it (op index order), padded to L
    (`seq2seq.sequence_length`) ops; padding ops belong to no group."""

    features: jax.Array  # [L, F] float32 op features
    leader: jax.Array  # [L] int32 op whose group each op takes (itself: sampled)
    real_op: jax.Array  # [L] float32 1 for an op of the graph, 0 for padding
    edges: jax.Array  # [E', 2] int32 (producer, consumer), padded to a power of two
    real_edge: jax.Array  # [E'] float32 1 for an edge of the graph, 0 for padding

    @classmethod
    def of(cls, graph: Graph) -> HierInputs:
        n, length = graph.n_ops, sequence_length(graph.n_ops)
        leader = np.arange(length)
        leader[:n] = colocate(graph, np.arange(n))
        edges = np.zeros((bucket(graph.n_edges), 2), np.int32)
        edges[: graph.n_edges] = graph.edges
        return cls(
            features=jnp.asarray(padded_features(graph, np.arange(n))),
            leader=jnp.asarray(leader, jnp.int32),
            real_op=jnp.asarray(np.arange(length) < n, F32),
            edges=jnp.asarray(edges),
            real_edge=jnp.asarray(np.arange(edges.shape[0]) < graph.n_edges, F32),
        )


class Grouper(nn.Module):
    """Two-layer ReLU MLP: op features [N, F] -> group logits [N, G]."""

    n_groups: int
    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(2):
            x = nn.relu(nn.Dense(self.hidden, param_dtype=F32, dtype=F32)(x))
        return nn.Dense(self.n_groups, param_dtype=F32, dtype=F32)(x)


def group_features(groups: jax.Array, inputs: HierInputs, n_groups: int) -> jax.Array:
    """[B, G, F + 1 + 2G] per sampled grouping groups [B, L]: the mean of the members' op
    features, log group size, log edge counts to and from every group (log1p, divided by
    log1p of N or of the edge count)."""
    member = jax.nn.one_hot(groups, n_groups, dtype=F32) * inputs.real_op[:, None]  # [B, L, G]
    size = member.sum(axis=1)  # [B, G]
    mean = jnp.einsum("bng,nf->bgf", member, inputs.features) / jnp.maximum(size, 1.0)[..., None]
    src, dst = member[:, inputs.edges[:, 0]], member[:, inputs.edges[:, 1]]
    links = jnp.einsum("beg,e,beh->bgh", src, inputs.real_edge, dst)  # [B, G, G] g -> h edges
    links = jnp.log1p(links) / jnp.log1p(jnp.maximum(inputs.real_edge.sum(), 1.0))
    sizes = jnp.log1p(size)[..., None] / jnp.log1p(inputs.real_op.sum())
    return jnp.concatenate([mean, sizes, links, jnp.swapaxes(links, 1, 2)], axis=-1)


@dataclasses.dataclass(frozen=True)
class HierarchicalPolicy:
    """Grouper + seq2seq placer; the actions are (groups [B, L], devices per group [B, G])."""

    n_devices: int
    n_groups: int = N_GROUPS  # G
    hidden: int = 64  # MLP and LSTM width
    batch: int = 64  # placements sampled per update

    @property
    def grouper(self) -> Grouper:
        return Grouper(self.n_groups, self.hidden)

    @property
    def placer(self) -> Seq2Seq:
        return Seq2Seq(self.n_devices, self.hidden)

    def init(self, key: jax.Array, inputs: HierInputs):
        k_group, k_place = jax.random.split(key)
        groups = jnp.zeros((1, inputs.features.shape[0]), jnp.int32)
        return {
            "grouper": self.grouper.init(k_group, inputs.features),
            "placer": self.placer.init(k_place, group_features(groups, inputs, self.n_groups)),
        }

    def sample(self, params, inputs: HierInputs, key: jax.Array):
        """(placements [B, L], (groups [B, L], devices [B, G]))."""
        k_group, k_place = jax.random.split(key)
        logits = self.grouper.apply(params["grouper"], inputs.features)
        length = logits.shape[0]
        groups = jax.random.categorical(k_group, logits, shape=(self.batch, length))
        groups = groups[:, inputs.leader].astype(jnp.int32)
        x = group_features(groups, inputs, self.n_groups)
        free = jnp.arange(self.n_groups, dtype=jnp.int32)
        devices = decode_sample(self.placer, params["placer"], x, free, k_place, self.batch)
        return jnp.take_along_axis(devices, groups, axis=1), (groups, devices)

    def log_prob(self, params, inputs: HierInputs, actions) -> jax.Array:
        """[B] log-probability of the sampled groups (co-located followers excluded) plus that
        of the devices of the non-empty groups."""
        groups, devices = actions
        length = groups.shape[1]
        logp = jax.nn.log_softmax(self.grouper.apply(params["grouper"], inputs.features))
        own = (inputs.leader == jnp.arange(length)) * inputs.real_op
        group_lp = jnp.sum(logp[jnp.arange(length), groups] * own, axis=1)
        x = group_features(groups, inputs, self.n_groups)
        rows = jnp.arange(groups.shape[0])[:, None]
        real = jnp.broadcast_to(inputs.real_op, groups.shape)
        used = jnp.zeros(devices.shape, F32).at[rows, groups].max(real)
        return group_lp + decode_log_prob(self.placer, params["placer"], x, devices, used)


def train_hierarchical(
    graph: Graph,
    cluster: Cluster,
    key: jax.Array,
    budget: int | None = None,
    policy: HierarchicalPolicy | None = None,
    training: Training | None = None,
) -> tuple[Solution, Curve]:
    """Train the hierarchical planner on `graph` for `budget` simulator evaluations (default
    4,096): the best placement seen and the learning curve."""
    policy = policy or HierarchicalPolicy(cluster.n_devices, batch=min(64, budget or 64))
    inputs = HierInputs.of(graph)
    return reinforce(
        graph, cluster, key, budget, policy, inputs, training or Training(), "hierarchical"
    )


def hierarchical(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """`Method` solver: `train_hierarchical` without the curve."""
    return train_hierarchical(graph, cluster, key, budget)[0]
