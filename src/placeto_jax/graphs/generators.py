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


def layered(
    n: int, n_layers: int | None = None, seed: int = 0, out_degree: float = 2.0
) -> Graph:
    """A random layered DAG of n ops: ops are split into layers (default about sqrt(n) of them);
    every op outside the last layer gets 1 + Poisson(out_degree - 1) consumers, 80% in the next
    layer and 20% in any later layer, so the average out-degree is about `out_degree`.
    Costs are log-uniform in [10, 1000] µs, outputs log-uniform in [10 kB, 10 MB]."""
    if n < 1:
        raise ValueError(f"a layered graph needs n >= 1 ops, got {n}")
    rng = np.random.default_rng(seed)
    n_layers = n_layers or max(1, round(np.sqrt(n)))
    n_layers = min(n_layers, n)
    bounds = np.linspace(0, n, n_layers + 1).round().astype(int)
    layer_of = np.repeat(np.arange(n_layers), np.diff(bounds))
    edges = set()
    for v in range(bounds[-2]):
        layer = layer_of[v]
        for _ in range(1 + rng.poisson(max(out_degree - 1.0, 0.0))):
            target = layer + 1 if rng.random() < 0.8 else rng.integers(layer + 1, n_layers)
            lo, hi = bounds[target], bounds[target + 1]
            edges.add((v, int(rng.integers(lo, hi))))
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
