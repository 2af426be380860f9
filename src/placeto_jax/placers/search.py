"""Search over placements with the vectorised simulator, under a budget of simulator evaluations.

Every candidate is scored by `simulate_batch` in batches of at most `BATCH` placements (a smaller
batch is padded with copies of its first row to the next power of two, so that a handful of batch
shapes is compiled per graph; padding rows are not counted as evaluations):

* `random_search`: uniform random placements, keep the best.
* `local_search`: greedy per-node search, Placeto's action space without a policy: visit the ops
  in topological order, try every device for each, keep the best. Candidates are batched: a
  block of `BATCH // D` ops is tried on every device at once, then the block's improving moves
  are applied one after the other (in topological order) and the best of those prefixes kept.
  Passes repeat until one changes nothing or the budget runs out.
* `cross_entropy`: the cross-entropy method (Rubinstein 1999) over independent per-op device
  distributions: sample a batch, move the distributions towards the elite tenth, repeat.

Scores: the penalised makespan (`sim.ranking.penalised_makespan`, µs), so any placement that
fits beats one that does not.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.simple import colocate, random_batch, single
from placeto_jax.sim.api import padded, simulate_rows
from placeto_jax.sim.ranking import penalised_makespan

BATCH = 256  # placements simulated per call
DEFAULT_BUDGET = 4096  # simulator evaluations when none is given
ELITE_FRACTION = 0.1
SMOOTHING = 0.7  # weight of the elite frequencies in the cross-entropy update


@dataclasses.dataclass(frozen=True)
class Scorer:
    """Scores batches of placements on one graph and cluster; counts evaluations."""

    graph: Graph
    cluster: Cluster

    def __call__(self, placements: np.ndarray) -> np.ndarray:
        """[B] scores (µs) of placements [B, N], simulated in padded batches (`batch_rows`)."""
        n_rows = placements.shape[0]
        n_pad = padded(self.graph).n_pad
        rows = batch_rows(n_rows)
        batch = np.zeros((rows, n_pad), dtype=np.int32)
        batch[:, : self.graph.n_ops] = placements[0]
        batch[:n_rows, : self.graph.n_ops] = placements
        out = simulate_rows(self.graph, self.cluster, batch)
        return penalised_makespan(out.makespan[:n_rows], out.peak_memory[:n_rows], self.cluster)


def batch_rows(n_rows: int) -> int:
    """Rows simulated for `n_rows` placements: a multiple of `BATCH`, or a power of two below it."""
    if n_rows >= BATCH:
        return -(-n_rows // BATCH) * BATCH
    return 1 << max(0, n_rows - 1).bit_length()


def random_search(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """The best of `budget` uniform random placements."""
    budget = _budget(budget)
    score = Scorer(graph, cluster)
    best, best_score, used = None, np.inf, 0
    for batch_key in jax.random.split(key, -(-budget // BATCH)):
        candidates = random_batch(graph, cluster, batch_key, min(BATCH, budget - used))
        scores = score(candidates)
        used += len(candidates)
        if scores.min() < best_score:
            best, best_score = candidates[np.argmin(scores)], scores.min()
    return Solution(best, used)


def local_search(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """Greedy per-op search from the single-device placement (see the module docstring)."""
    budget = _budget(budget)
    score = Scorer(graph, cluster)
    n_dev = cluster.n_devices
    members = _group_members(graph)
    order = graph.topological_order
    current = single(graph, cluster, key)
    current_score = float(score(current[None])[0])
    used = 1
    block = max(1, BATCH // n_dev)
    changed = True
    while changed and used < budget:
        changed = False
        for lo in range(0, graph.n_ops, block):
            ops = order[lo : lo + block][: max(0, (budget - used) // (n_dev + 1))]
            if ops.size == 0:
                break
            # every op of the block on every device, from the current placement
            moves = np.repeat(current[None], ops.size * n_dev, axis=0)
            for i, v in enumerate(ops.tolist()):
                for d in range(n_dev):
                    moves[i * n_dev + d, members[v]] = d
            scores = score(moves).reshape(ops.size, n_dev)
            used += moves.shape[0]
            best_device = np.argmin(scores, axis=1)  # lowest device on ties
            improving = scores[np.arange(ops.size), best_device] < current_score
            # apply the improving moves one by one, in topological order; keep the best prefix
            prefixes = [current]
            for v, d in zip(ops[improving].tolist(), best_device[improving].tolist(), strict=True):
                step = prefixes[-1].copy()
                step[members[v]] = d
                prefixes.append(step)
            if len(prefixes) == 1:
                continue
            prefix_scores = score(np.stack(prefixes[1:]))
            used += len(prefixes) - 1
            k = int(np.argmin(prefix_scores))
            if prefix_scores[k] < current_score:
                current, current_score, changed = prefixes[k + 1], float(prefix_scores[k]), True
    return Solution(current, used)


def cross_entropy(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """Cross-entropy method over per-op device distributions, `budget // BATCH` rounds (at
    least one); the best placement seen is returned."""
    budget = _budget(budget)
    score = Scorer(graph, cluster)
    n_elite = max(1, int(ELITE_FRACTION * BATCH))
    probs = np.full((graph.n_ops, cluster.n_devices), 1.0 / cluster.n_devices)
    best, best_score, used = None, np.inf, 0
    for round_key in jax.random.split(key, max(1, budget // BATCH)):
        draws = jax.random.categorical(round_key, jnp.log(probs), shape=(BATCH, graph.n_ops))
        candidates = colocate(graph, np.array(draws, dtype=np.int64))
        if best is not None:
            candidates[0] = best  # keep the best so far in the population
        scores = score(candidates)
        used += BATCH
        elite = candidates[np.argsort(scores, kind="stable")[:n_elite]]
        if scores.min() < best_score:
            best, best_score = candidates[np.argmin(scores)], scores.min()
        freq = (elite[:, :, None] == np.arange(cluster.n_devices)).mean(axis=0)  # [N, D]
        probs = (1 - SMOOTHING) * probs + SMOOTHING * freq
    return Solution(best, used)


def _budget(budget: int | None) -> int:
    budget = DEFAULT_BUDGET if budget is None else int(budget)
    if budget < 1:
        raise ValueError(f"the evaluation budget must be at least 1, got {budget}")
    return budget


def _group_members(graph: Graph) -> list[np.ndarray]:
    """[N] arrays: the ops that move together with each op (its co-location group, or itself)."""
    if graph.colocation is None:
        return [np.array([v]) for v in range(graph.n_ops)]
    groups = graph.colocation
    return [
        np.flatnonzero(groups == groups[v]) if groups[v] >= 0 else np.array([v])
        for v in range(graph.n_ops)
    ]
