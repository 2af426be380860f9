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
    op_features,
    reinforce,
)
from placeto_jax.placers.simple import colocate
from placeto_jax.sim.padded import bucket

MAX_GROUPS = 64  # default G = min(MAX_GROUPS, N)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HierInputs:
    """One graph as the hierarchical planner sees it (op index order)."""

    features: jax.Array  # [N, F] float32 op features
    leader: jax.Array  # [N] int32 op whose group each op takes (itself: sampled)
    edges: jax.Array  # [E', 2] int32 (producer, consumer), padded to a power of two
    real: jax.Array  # [E'] float32 1 for a real edge, 0 for padding

    @classmethod
    def of(cls, graph: Graph) -> HierInputs:
        edges = np.zeros((bucket(graph.n_edges), 2), np.int32)
        edges[: graph.n_edges] = graph.edges
        return cls(
            features=jnp.asarray(op_features(graph)),
            leader=jnp.asarray(colocate(graph, np.arange(graph.n_ops)), jnp.int32),
            edges=jnp.asarray(edges),
            real=jnp.asarray(np.arange(edges.shape[0]) < graph.n_edges, F32),
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
    """[B, G, F + 1 + 2G] per sampled grouping groups [B, N]: the mean of the members' op
    features, log group size, log edge counts to and from every group (log1p, divided by
    log1p of N or of the edge count)."""
    member = jax.nn.one_hot(groups, n_groups, dtype=F32)  # [B, N, G]
    size = member.sum(axis=1)  # [B, G]
    mean = jnp.einsum("bng,nf->bgf", member, inputs.features) / jnp.maximum(size, 1.0)[..., None]
    n_ops = inputs.features.shape[0]
    links = jnp.einsum(
        "beg,e,beh->bgh", member[:, inputs.edges[:, 0]], inputs.real, member[:, inputs.edges[:, 1]]
    )  # [B, G, G] edges from group g to group h
    links = jnp.log1p(links) / jnp.log1p(jnp.maximum(inputs.real.sum(), 1.0))
    sizes = jnp.log1p(size)[..., None] / np.log1p(n_ops)
    return jnp.concatenate([mean, sizes, links, jnp.swapaxes(links, 1, 2)], axis=-1)


@dataclasses.dataclass(frozen=True)
class HierarchicalPolicy:
    """Grouper + seq2seq placer; the actions are (groups [B, N], devices per group [B, G])."""

    n_devices: int
    n_groups: int  # G
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
        """(placements [B, N], (groups [B, N], devices [B, G]))."""
        k_group, k_place = jax.random.split(key)
        logits = self.grouper.apply(params["grouper"], inputs.features)
        n_ops = logits.shape[0]
        groups = jax.random.categorical(k_group, logits, shape=(self.batch, n_ops))
        groups = groups[:, inputs.leader].astype(jnp.int32)
        x = group_features(groups, inputs, self.n_groups)
        free = jnp.arange(self.n_groups, dtype=jnp.int32)
        devices = decode_sample(self.placer, params["placer"], x, free, k_place, self.batch)
        return jnp.take_along_axis(devices, groups, axis=1), (groups, devices)

    def log_prob(self, params, inputs: HierInputs, actions) -> jax.Array:
        """[B] log-probability of the sampled groups (co-located followers excluded) plus that
        of the devices of the non-empty groups."""
        groups, devices = actions
        n_ops = groups.shape[1]
        logp = jax.nn.log_softmax(self.grouper.apply(params["grouper"], inputs.features))
        own = inputs.leader == jnp.arange(n_ops)
        group_lp = jnp.sum(logp[jnp.arange(n_ops), groups] * own, axis=1)
        x = group_features(groups, inputs, self.n_groups)
        rows = jnp.arange(groups.shape[0])[:, None]
        used = jnp.zeros(devices.shape, F32).at[rows, groups].max(1.0)
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
    policy = policy or HierarchicalPolicy(
        cluster.n_devices, min(MAX_GROUPS, graph.n_ops), batch=min(64, budget or 64)
    )
    inputs = HierInputs.of(graph)
    return reinforce(graph, cluster, key, budget, policy, inputs, training or Training())


def hierarchical(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """`Method` solver: `train_hierarchical` without the curve."""
    return train_hierarchical(graph, cluster, key, budget)[0]
