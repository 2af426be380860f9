"""Run by tests/test_execute.py in a fresh process with 4 host CPU devices (the device count must
be set before JAX starts). Executes small functions under several placements and writes, per
case, what `execute` reported, as JSON.

  python execute_worker.py fast OUT.json   MLP per op, the zoo model per block of 48 ops
  python execute_worker.py slow OUT.json   the zoo model per op (hundreds of pieces to compile)
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.execute import execute, op_graph, zoo_step
from placeto_jax.graphs.zoo import PARAM_ARGNUMS

ZOO_SIZES = {"batch": 2, "seq": 8, "layers": 1, "d": 32, "heads": 2, "ff": 64, "vocab": 50}


def mlp_step(params, x, y):
    """One SGD step of a 2-layer tanh MLP on a squared error."""

    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 0.1 * g, params, grads), value


def mlp_args(key):
    k = jax.random.split(key, 4)
    params = {
        "w1": jax.random.normal(k[0], (8, 16)),
        "b1": jnp.zeros(16),
        "w2": jax.random.normal(k[1], (16, 4)),
    }
    return params, jax.random.normal(k[2], (5, 8)), jax.random.normal(k[3], (5, 4))


def chain(x, y):
    """sin, cos, mul, add: the 4 ops of the hand-counted transfer cases."""
    a = jnp.sin(x)
    b = jnp.cos(x)
    return a * b + y, a


def relay(x):
    """sin, cos, exp, mul: `a` is read on one device by two pieces."""
    a = jnp.sin(x)
    b = jnp.cos(a)
    return jnp.exp(b) * a


def placements(n: int, key, block: int) -> dict[str, np.ndarray]:
    """All on device 0, and alternating over 4 devices and uniformly random per block of ops."""
    blocks = -(-n // block)
    return {
        "one": np.zeros(n, np.int64),
        "alternating": np.repeat(np.arange(blocks) % 4, block)[:n],
        "random": np.repeat(np.asarray(jax.random.randint(key, (blocks,), 0, 4)), block)[:n],
    }


def report(fn, *args, placement, graph=None) -> dict:
    result = execute(fn, *args, placement=placement, graph=graph, repeats=1, warmup=1)
    reference = jax.jit(fn)(*args)
    return {
        "equal": result.equal,
        "max_abs_diff": result.max_abs_diff,
        "n_pieces": result.n_pieces,
        "n_transfers": result.n_transfers,
        "same_tree": jax.tree.structure(result.outputs) == jax.tree.structure(reference),
        "devices": len(jax.local_devices()),
    }


def zoo_cases(block: int) -> dict[str, dict]:
    fn, args = zoo_step("transformer", ZOO_SIZES, jax.random.key(2))
    graph = op_graph(fn, *args, param_argnums=PARAM_ARGNUMS)
    return {
        f"zoo/{name}": report(fn, *args, placement=p, graph=graph)
        for name, p in placements(graph.n_ops, jax.random.key(3), block).items()
    }


def main(mode: str, out: str) -> None:
    if mode == "slow":
        cases = zoo_cases(block=1)
        del cases["zoo/one"]
    else:
        cases = fast_cases()
    with open(out, "w") as f:
        json.dump(cases, f)


def fast_cases() -> dict[str, dict]:
    args = mlp_args(jax.random.key(0))
    graph = op_graph(mlp_step, *args, param_argnums=0)
    cases = {
        f"mlp/{name}": report(mlp_step, *args, placement=p, graph=graph)
        for name, p in placements(graph.n_ops, jax.random.key(1), block=1).items()
    }
    cases.update(zoo_cases(block=48))
    x, y = jnp.arange(3.0), jnp.ones(3)
    for p in ([0, 1, 2, 0], [0, 0, 1, 1], [0, 1, 0, 1]):
        cases[f"chain/{p}"] = report(chain, x, y, placement=p)
    cases["relay"] = report(relay, x, placement=[0, 1, 0, 1])
    return cases


if __name__ == "__main__":
    main(*sys.argv[1:])
