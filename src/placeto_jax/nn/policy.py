"""Placeto's policy network (Flax Linen): node transform, message passing in both directions,
pooling over the current unit's ancestors, descendants and parallel nodes, and a device head.

A unit is the node the step places, or the nodes co-location ties to it (docs/agent.md): its
embedding is the mean over its nodes, and a node outside it that is both an ancestor and a
descendant (between a weight and its update) is pooled in both sets.

It has no per-node parameters, so one set of weights applies to graphs of any size; padding nodes
and edges are masked out of every sum, so the logits do not depend on the padded size.
Apply it to one `Observation` and `jax.vmap` over episodes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn

from placeto_jax.config import PolicyConfig
from placeto_jax.env.core import Observation
from placeto_jax.nn.graph_ops import neighbour_sum

MASKED_LOGIT = -1e30


class Mlp(nn.Module):
    """Dense layers with ReLU between them (and after the last when `relu_last`)."""

    widths: tuple[int, ...]
    relu_last: bool = False
    last_scale: float = 1.0  # scales the last layer's initial weights

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate(self.widths):
            last = i == len(self.widths) - 1
            scale = self.last_scale if last else 1.0
            x = nn.Dense(
                width,
                kernel_init=nn.initializers.variance_scaling(
                    scale**2, "fan_in", "truncated_normal"
                ),
            )(x)
            if not last or self.relu_last:
                x = nn.relu(x)
        return x


class Propagate(nn.Module):
    """Message passing in one direction: x_v <- h_v + ReLU(G(sum_u ReLU(F(x_u)))) over v's
    parents ("forward") or children ("backward"); F and G are shared by all rounds.

    "radial": `rounds` synchronous rounds. "sweep": one pass in topological order (reverse
    order for "backward"), each node updated from its already-updated neighbours; computed level
    by level (nodes of equal depth, or height, are independent), `levels` levels."""

    width: int
    direction: str
    schedule: str
    rounds: int
    levels: int

    @nn.compact
    def __call__(self, h: jax.Array, obs: Observation) -> jax.Array:
        f_params = _dense_params(self, "F", h.shape[1], self.width)
        g_params = _dense_params(self, "G", self.width, self.width)

        def update(x: jax.Array) -> jax.Array:
            messages = nn.relu(_dense(f_params, x))
            total = neighbour_sum(
                messages, obs.senders, obs.receivers, obs.edge_mask, self.direction
            )
            return jnp.where(obs.node_mask[:, None], h + nn.relu(_dense(g_params, total)), 0.0)

        if self.schedule == "radial":
            return jax.lax.fori_loop(0, self.rounds, lambda _, x: update(x), h)
        level_of = obs.depth if self.direction == "forward" else obs.height

        def sweep_level(x: jax.Array, level: jax.Array) -> tuple[jax.Array, None]:
            return jnp.where((level_of == level)[:, None], update(x), x), None

        x, _ = jax.lax.scan(sweep_level, h, jnp.arange(self.levels + 1))
        return x


def _dense_params(module: nn.Module, name: str, n_in: int, n_out: int) -> dict:
    """A Dense layer's parameters, declared directly so that lax loops can close over them."""
    return {
        "kernel": module.param(
            f"{name}_kernel", nn.initializers.lecun_normal(), (n_in, n_out), jnp.float32
        ),
        "bias": module.param(f"{name}_bias", nn.initializers.zeros_init(), (n_out,), jnp.float32),
    }


def _dense(params: dict, x: jax.Array) -> jax.Array:
    return x @ params["kernel"] + params["bias"]


class Pool(nn.Module):
    """ReLU(G(sum over the masked nodes of ReLU(F(z)) / n)); per device when `n_devices` > 0.

    The sum is divided by the graph's node count n, so that its scale does not grow with the
    graph (undivided sums of a few hundred nodes saturate the head and stall training)."""

    width: int
    n_devices: int = 0

    @nn.compact
    def __call__(
        self, z: jax.Array, mask: jax.Array, placement: jax.Array, n_nodes: jax.Array
    ) -> jax.Array:
        messages = nn.relu(nn.Dense(self.width, name="F")(z))
        messages = jnp.where(mask[:, None], messages / jnp.maximum(n_nodes, 1), 0.0)
        if self.n_devices:
            per_device = jax.ops.segment_sum(messages, placement, self.n_devices)  # [D, W]
            return nn.relu(nn.Dense(self.width, name="G")(per_device)).reshape(-1)
        return nn.relu(nn.Dense(self.width, name="G")(messages.sum(axis=0)))


class PlacetoPolicy(nn.Module):
    """Logits [D] over devices for the current unit of one observation."""

    config: PolicyConfig
    n_devices: int
    n_features: int
    levels: int = 0  # deepest level of the graphs it sees ("sweep" only)

    @nn.compact
    def __call__(self, obs: Observation) -> jax.Array:
        cfg = self.config
        d = self.n_features
        width = cfg.width or d
        mask = obs.node_mask[:, None]
        h = jnp.where(mask, Mlp((width, width, width))(obs.features), 0.0)
        if cfg.message_passing == "none":
            z = h
        else:
            z = jnp.concatenate(
                [
                    Propagate(
                        width,
                        direction,
                        cfg.message_passing,
                        cfg.rounds,
                        self.levels,
                        name=f"propagate_{direction}",
                    )(h, obs)
                    for direction in ("forward", "backward")
                ],
                axis=1,
            )
        parallel = obs.node_mask & ~obs.ancestors & ~obs.descendants & ~obs.current
        n_nodes = obs.node_mask.sum()
        sets = {
            "ancestors": obs.ancestors & obs.node_mask,
            "descendants": obs.descendants & obs.node_mask,
            "parallel": parallel,
        }
        pooled = [
            Pool(
                width,
                self.n_devices if name == "parallel" and cfg.per_device_parallel else 0,
                name=f"pool_{name}",
            )(z, mask, obs.placement, n_nodes)
            for name, mask in sets.items()
        ]
        current = jnp.sum(jnp.where(obs.current[:, None], z, 0.0), axis=0)
        current = current / jnp.maximum(jnp.sum(obs.current), 1)
        head = cfg.head_widths or (16 * d, 8 * d)
        # Small initial logits: an untrained policy is close to uniform over the devices.
        x = Mlp((*head, self.n_devices), last_scale=0.01, name="head")(
            jnp.concatenate([current, *pooled])
        )
        return jnp.where(obs.action_mask, x, MASKED_LOGIT)
