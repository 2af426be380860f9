"""Built-in graphs: the spec's worked example, random layered DAGs, and a multi-branch CNN-like
training graph used by the demo. All deterministic from their arguments (NumPy RNG by seed)."""

from __future__ import annotations

import numpy as np

from placeto_jax.graphs.core import Graph

MB = 1e6  # bytes


def diamond() -> Graph:
    """The worked example of docs/simulator.md: a -> b, a -> c, b -> d, c -> d."""
    return Graph.from_edges(
        cost=[100.0, 50.0, 30.0, 10.0],
        out_bytes=[76000.0, 7600.0, 7600.0, 0.0],
        edges=[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
        names=["a", "b", "c", "d"],
    )


def layered(n: int, n_layers: int | None = None, seed: int = 0, out_degree: float = 2.0) -> Graph:
    """A random layered DAG of n ops shaped like a network: ops are split into `n_layers` layers
    (default: layers of about 8 ops); every op after the first layer has a producer in the layer
    before and every op before the last layer has a consumer in the layer after; further edges
    (80% to the next layer, 20% skipping ahead) bring the average out-degree to about
    `out_degree`. Costs are log-uniform in [10, 1000] µs, outputs log-uniform in [10 kB, 10 MB]."""
    if n < 1:
        raise ValueError(f"a layered graph needs n >= 1 ops, got {n}")
    rng = np.random.default_rng(seed)
    n_layers = min(n_layers or max(1, round(n / 8)), n)
    bounds = np.linspace(0, n, n_layers + 1).round().astype(int)
    layer_of = np.repeat(np.arange(n_layers), np.diff(bounds))

    def pick(layer: int) -> int:
        return int(rng.integers(bounds[layer], bounds[layer + 1]))

    edges = set()
    for v in range(bounds[1], n):  # a producer in the previous layer
        edges.add((pick(layer_of[v] - 1), v))
    has_child = np.zeros(n, dtype=bool)
    has_child[[u for u, _ in edges]] = True
    for v in np.flatnonzero(~has_child[: bounds[-2]]):  # a consumer in the next layer
        edges.add((int(v), pick(layer_of[v] + 1)))
    target = min(int(out_degree * bounds[-2]), bounds[-2] * (n - bounds[-2]))
    for _ in range(20 * n):
        if len(edges) >= target:
            break
        u = int(rng.integers(0, bounds[-2]))
        layer = layer_of[u]
        later = layer + 1 if rng.random() < 0.8 else int(rng.integers(layer + 1, n_layers))
        edges.add((u, pick(later)))
    cost = np.exp(rng.uniform(np.log(10.0), np.log(1000.0), n)).round(1)
    out_bytes = np.exp(rng.uniform(np.log(1e4), np.log(1e7), n)).round()
    return Graph.from_edges(cost, out_bytes, sorted(edges))


def branchy_cnn(n_modules: int = 10, seed: int = 0) -> Graph:
    """An Inception-like training graph: a stem, `n_modules` modules of four parallel branches of
    1 to 3 convolutions joined by a concat, a classifier head, and a mirrored backward pass whose
    gradient ops consume the forward activations. Costs and sizes are in the ranges of a K80
    profile of Inception-V3 at batch 32 (100 µs to 5 ms per conv, 1 to 50 MB activations)."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    cost: list[float] = []
    size: list[float] = []
    params: list[float] = []
    edges: list[tuple[int, int]] = []

    def op(name: str, us: float, out_mb: float, param_mb: float = 0.0, inputs=()) -> int:
        names.append(name)
        cost.append(round(us, 1))
        size.append(round(out_mb * MB))
        params.append(round(param_mb * MB))
        edges.extend((u, len(names) - 1) for u in inputs)
        return len(names) - 1

    forward: list[tuple[int, list[int]]] = []  # (op, its inputs), topological order

    def layer(name: str, us: float, out_mb: float, param_mb: float, inputs: list[int]) -> int:
        v = op(name, us, out_mb, param_mb, inputs)
        forward.append((v, inputs))
        return v

    x = op("input", 50.0, 20.0)
    for i in range(3):
        x = layer(f"stem/conv{i}", rng.uniform(800, 3000), rng.uniform(20, 50), 0.1, [x])
    for m in range(n_modules):
        tails = []
        for b in range(4):
            y = x
            for k in range(int(rng.integers(1, 4))):
                y = layer(
                    f"mixed{m}/branch{b}/conv{k}",
                    rng.uniform(100, 2000),
                    rng.uniform(1, 12),
                    rng.uniform(0.05, 2.0),
                    [y],
                )
            tails.append(y)
        x = layer(f"mixed{m}/concat", 60.0, sum(size[t] for t in tails) / MB, 0.0, tails)
    logits = layer("head/fc", 400.0, 0.5, 8.0, [x])
    loss = op("head/loss", 30.0, 0.001, 0.0, [logits])
    grad_inputs: dict[int, list[int]] = {logits: [loss]}  # gradient contributions per op
    for v, inputs in reversed(forward):
        if v in grad_inputs:
            g = op(f"grad/{names[v]}", cost[v] * 2.0, size[v] / MB, 0.0, [*grad_inputs[v], v])
            for u in inputs:
                grad_inputs.setdefault(u, []).append(g)
    return Graph.from_edges(cost, size, edges, param_bytes=params, names=names)
