"""METIS graph partitioning (Karypis and Kumar, SIAM J. Sci. Comput. 1998) through `pymetis`.

The op graph is made undirected; co-location groups are contracted into one vertex first.
Vertex weight: compute cost; edge weight: bytes of the producer's output (summed over merged
edges). METIS takes integers, so both are scaled to at most `WEIGHT_SCALE` and rounded up to at
least 1 (a zero weight would let METIS ignore an op or an edge entirely). The graph is split into
k = 1, ..., D parts; part j's share of the compute goes to the j-th fastest device; all D
candidates are simulated in one batch and the fastest kept (memory overflow penalised as in
`search`) (so fewer parts than devices win when
communication dominates).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pymetis

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.sim.api import simulate
from placeto_jax.sim.ranking import penalised_makespan

WEIGHT_SCALE = 10_000  # largest integer weight handed to METIS


def metis(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """The best of the METIS partitions into 1..D parts, mapped heaviest part to fastest device."""
    del key, budget
    problem = _Problem.of(graph)
    candidates = [np.zeros(graph.n_ops, dtype=np.int64)]
    for k in range(2, min(cluster.n_devices, problem.n_vertices) + 1):
        candidates.append(_to_devices(problem.parts(k), graph.cost, cluster))
    candidates = np.stack(candidates)
    result = simulate(graph, cluster, candidates)  # a small batch: compiles faster than Scorer's
    scores = penalised_makespan(result.makespan, result.peak_memory, cluster)
    return Solution(candidates[int(np.argmin(scores))], len(candidates))


def metis_parts(graph: Graph, k: int) -> np.ndarray:
    """[N] int64 part in [0, k) of each op: METIS's k-way partition of the contracted graph
    (co-located ops in one part). ValueError unless 2 <= k <= the contracted vertex count."""
    problem = _Problem.of(graph)
    if not 2 <= k <= problem.n_vertices:
        raise ValueError(f"METIS needs 2 to {problem.n_vertices} parts here, got {k}")
    return problem.parts(k)


@dataclasses.dataclass(frozen=True)
class _Problem:
    """The contracted graph as METIS takes it, built once for every part count."""

    vertex_of: np.ndarray  # [N] vertex of each op
    n_vertices: int
    adjacency: pymetis.CSRAdjacency
    vweights: np.ndarray  # [n_vertices] integer compute weights
    eweights: np.ndarray  # integer edge weights, in adjacency order

    @classmethod
    def of(cls, graph: Graph) -> _Problem:
        vertex_of, n_vertices = _contract(graph)
        adjacency, eweights = _adjacency(graph, vertex_of, n_vertices)
        vweights = np.zeros(n_vertices)
        np.add.at(vweights, vertex_of, graph.cost)
        return cls(vertex_of, n_vertices, adjacency, _integer_weights(vweights), eweights)

    def parts(self, k: int) -> np.ndarray:
        """[N] int64 part of each op in METIS's k-way partition."""
        _, parts = pymetis.part_graph(
            k, self.adjacency, vweights=self.vweights, eweights=self.eweights
        )
        return np.asarray(parts, dtype=np.int64)[self.vertex_of]


def _contract(graph: Graph) -> tuple[np.ndarray, int]:
    """([N] vertex of each op, vertex count): co-located ops share one vertex."""
    vertex_of = graph.colocation_classes
    return vertex_of, int(vertex_of.max()) + 1


def _adjacency(graph: Graph, vertex_of: np.ndarray, n: int):
    """METIS CSR adjacency and edge weights of the undirected contracted graph."""
    src, dst = vertex_of[graph.edges[:, 0]], vertex_of[graph.edges[:, 1]]
    weight = graph.out_bytes[graph.edges[:, 0]]
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    w = np.concatenate([weight[keep], weight[keep]])
    pairs, inverse = np.unique(a * n + b, return_inverse=True)
    summed = np.zeros(pairs.size)
    np.add.at(summed, inverse, w)
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.add.at(xadj, pairs // n + 1, 1)
    adjacency = pymetis.CSRAdjacency(np.cumsum(xadj), pairs % n)
    return adjacency, _integer_weights(summed)


def _integer_weights(values: np.ndarray) -> np.ndarray:
    """Scale so the largest is `WEIGHT_SCALE`, round up, at least 1."""
    top = values.max(initial=0.0)
    if top <= 0:
        return np.ones(values.shape, dtype=np.int64)
    return np.maximum(np.ceil(values * (WEIGHT_SCALE / top)), 1).astype(np.int64)


def _to_devices(parts: np.ndarray, cost: np.ndarray, cluster: Cluster) -> np.ndarray:
    """[N] int64: part ranked j by total cost goes to the device ranked j by speed."""
    load = np.bincount(parts, weights=cost, minlength=parts.max() + 1)
    by_load = np.argsort(-load, kind="stable")
    by_speed = np.argsort(-cluster.speed_array, kind="stable")
    device_of_part = np.empty(load.size, dtype=np.int64)
    device_of_part[by_load] = by_speed[: load.size]
    return device_of_part[parts]
