"""A model written for the purpose (not in the zoo, never traced by the project before): the
training step of a small U-Net for 8-class segmentation (Flax, AdamW), traced with
`pj.graphs.from_jax` at op level (one op per XLA kernel, roofline costs on a placeto-k80) and
saved as a graph file, for the experiments that take graph files (e.g.
`matched_budget.py --graphs FILE`).

Run: `python experiments/unet_graph.py --out results/unet/unet_train.json`; prints the graph's
ops, edges and single-device step time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import placeto_jax as pj

ROOT = Path(__file__).resolve().parents[1]
CLASSES = 8


class Block(nn.Module):
    """Two 3x3 convolutions with group norm and GELU."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(2):
            x = nn.Conv(self.features, (3, 3), name=f"conv{i}")(x)
            x = nn.gelu(nn.GroupNorm(num_groups=8, name=f"norm{i}")(x))
        return x


class UNet(nn.Module):
    """Encoder of `depth` halvings, decoder with skip connections, 1x1 classifier."""

    width: int = 32
    depth: int = 3

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        skips = []
        for level in range(self.depth):
            x = Block(self.width * 2**level, name=f"down{level}")(x)
            skips.append(x)
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = Block(self.width * 2**self.depth, name="middle")(x)
        for level in reversed(range(self.depth)):
            x = nn.ConvTranspose(self.width * 2**level, (2, 2), strides=(2, 2),
                                 name=f"up{level}")(x)  # fmt: skip
            x = Block(self.width * 2**level, name=f"merge{level}")(
                jnp.concatenate([x, skips[level]], -1)
            )
        return nn.Conv(CLASSES, (1, 1), name="classify")(x)


def unet_graph(batch: int = 8, size: int = 64) -> pj.Graph:
    """The op graph of one AdamW training step of `UNet` on [batch, size, size, 3] images."""
    model, tx = UNet(), optax.adamw(1e-3)
    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((batch, size, size), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), images)["params"]
    opt_state = jax.eval_shape(tx.init, params)

    def step(params, opt_state, images, labels):
        def loss_fn(params):
            logits = model.apply({"params": params}, images)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        with jax.named_scope("optimizer"):
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
        return params, opt_state, loss

    return pj.graphs.from_jax(step, params, opt_state, images, labels, param_argnums=(0, 1),
                              donate_argnums=(0, 1), name="unet")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results/unet/unet_train.json")
    args = parser.parse_args(argv)
    graph = unet_graph()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pj.save_graph(graph, args.out)
    one = pj.simulate(graph, pj.Cluster.preset("placeto-k80", 1), np.zeros(graph.n_ops, int))
    print(f"{args.out}: {graph.n_ops} ops, {graph.n_edges} edges, "
          f"{float(one.makespan) / 1e3:.2f} ms on one placeto-k80")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
