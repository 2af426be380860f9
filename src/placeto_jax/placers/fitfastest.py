"""`fit_fastest`: ops in topological order, each to the device where the simulated makespan is
shortest among those where every device's simulated peak memory still fits; what fits nowhere
stays on the slowest device.

The list schedulers' memory bound (`Timeline`) charges every output for the whole step, so on
graphs whose parameters and outputs together exceed the cluster's memory (inference layer graphs
spread over a dozen small devices) they run out of devices and place the rest blindly. Here the
simulator itself measures memory (parameters, live outputs and received copies, freed as
`docs/simulator.md` says), one batch of candidate devices per op: every op starts on the slowest
device (the sink), and in topological order each moves to the other device where the placement
simulates fastest among those where no device (the sink aside) goes over its memory (ties: the
faster device, then the lower index). A device whose current peak plus the op's parameters
already exceeds its memory is not tried. A graph that fits nowhere ends as single device on the
sink. Cost: one simulated batch per op, so seconds on graphs of a few hundred ops and minutes
on ten thousand.
"""

from __future__ import annotations

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.simple import colocate
from placeto_jax.sim.api import simulate


def fit_fastest(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """Each op to its fastest device that memory allows, in topological order (module
    docstring). Evaluations: the placements simulated."""
    del key, budget
    devices = np.argsort(-cluster.speed_array, kind="stable")
    sink, candidates = devices[-1], devices[:-1]
    capacity = cluster.memory_array
    params = np.asarray(graph.param_bytes, dtype=np.float64)
    placement = np.full(graph.n_ops, sink, dtype=np.int64)
    peak = np.asarray(simulate(graph, cluster, placement).peak_memory, dtype=np.float64)
    evaluations = 1
    leader = colocate(graph, np.arange(graph.n_ops))  # the op whose device each op takes
    for op in graph.topological_order.tolist():
        if leader[op] != op:
            continue  # it moves with its co-location group's first op
        tried = candidates[peak[candidates] + params[op] <= capacity[candidates]]
        if not len(tried):
            continue  # no device has room
        rows = np.repeat(placement[None], len(tried), axis=0)
        rows[np.arange(len(tried)), op] = tried
        rows = colocate(graph, rows)
        result = simulate(graph, cluster, rows)
        peaks = np.asarray(result.peak_memory, dtype=np.float64)
        evaluations += len(tried)
        fits = np.all(peaks[:, candidates] <= capacity[candidates], axis=1)
        if fits.any():
            fastest = int(np.argmin(np.where(fits, result.makespan, np.inf)))
            placement, peak = rows[fastest], peaks[fastest]
    return Solution(placement, evaluations)
