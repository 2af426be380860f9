"""Summary numbers of a graph (host-side NumPy): total compute, critical path, parallelism."""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.graphs.core import Graph


@dataclasses.dataclass(frozen=True)
class GraphStats:
    """Size and shape of a graph's compute."""

    n_ops: int
    n_edges: int
    total_us: float  # µs, sum of op costs
    critical_path_us: float  # µs, costliest root-to-sink path
    parallelism: float  # total_us / critical_path_us (1.0 for a graph without compute)


def finish_times(graph: Graph, duration: np.ndarray | None = None) -> np.ndarray:
    """[N] float64 µs: the costliest path from a root up to and including each op, computed in
    the graph's topological order (its end time with unlimited devices and free transfers);
    `duration` [N] µs per op (default: its cost)."""
    duration = graph.cost if duration is None else duration
    finish = np.zeros(graph.n_ops, dtype=np.float64)
    for v in graph.topological_order:
        parents = graph.parents(v)
        finish[v] = duration[v] + (finish[parents].max() if parents.size else 0.0)
    return finish


def critical_path_us(graph: Graph, duration: np.ndarray | None = None) -> float:
    """µs: the largest total cost (or `duration` [N] µs) of any path through the graph."""
    return float(finish_times(graph, duration).max()) if graph.n_ops else 0.0


def graph_stats(graph: Graph) -> GraphStats:
    """Op and edge counts, total compute, critical path and average parallelism of `graph`."""
    total = float(graph.cost.sum())
    critical = critical_path_us(graph)
    parallelism = total / critical if critical > 0 else 1.0
    return GraphStats(graph.n_ops, graph.n_edges, total, critical, parallelism)
