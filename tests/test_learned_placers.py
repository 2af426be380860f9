"""The learned per-graph placers (`rnn`, `hierarchical`) on small hand-built graphs.

Every graph here has 12 ops and at most 16 (padded) edges, and every run uses the same policy
sizes, so each policy compiles once for the whole file.

Hand-derived makespans on 2 x placeto-k80 (speed 1, delta1 = 5.7 µs, delta2 = 25 µs,
7,600 bytes/µs), ops of cost 1,000 µs:
* one device runs 12 ops: 12 x 1,000 + 11 x 5.7 (delta1 between ops) = 12,062.7 µs;
* two independent 6-op chains, one per device: 6 x 1,000 + 5 x 5.7 = 6,028.5 µs;
* a 12-op chain whose outputs are 1e8 bytes: every device change costs a transfer of
  1e8 / 7,600 = 13,158 µs > the 12,062.7 µs of the whole chain on one device, so the best
  placement keeps it on one device (12,062.7 µs) and any split is at least 25,000 µs.
"""

import jax
import numpy as np
import pytest

from placeto_jax import Cluster
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import METHODS
from placeto_jax.placers.hierarchical import HierarchicalPolicy, train_hierarchical
from placeto_jax.placers.rnn import RnnPolicy, train_rnn
from placeto_jax.placers.seq2seq import Training, score_batch

SINGLE = 12 * 1000 + 11 * 5.7  # µs, see the module docstring
SPLIT = 6 * 1000 + 5 * 5.7
BATCH = 16
BUDGET = 512  # 32 updates of 16 placements
TRAINING = Training(learning_rate=1e-2)


def _chains(n_chains: int, length: int, out_bytes: float, colocation=None) -> Graph:
    n = n_chains * length
    edges = [
        (c * length + i, c * length + i + 1) for c in range(n_chains) for i in range(length - 1)
    ]
    return Graph.from_edges([1000.0] * n, [out_bytes] * n, edges, colocation=colocation)


TWO_CHAINS = _chains(2, 6, 1e3)
ONE_CHAIN = _chains(1, 12, 1e8)
# ops 0, 3 and 9 share a group; so do 7 and 11
COLOCATED = _chains(2, 6, 1e3, colocation=[0, -1, -1, 0, -1, -1, -1, 1, -1, 0, -1, 1])
CLUSTER = Cluster.preset("placeto-k80", 2)


def _train(method: str, graph: Graph, seed: int = 0, budget: int = BUDGET):
    """Small policies (width 32, batches of 16) and a learning rate of 1e-2 for tiny graphs."""
    key = jax.random.key(seed)
    if method == "rnn":
        return train_rnn(graph, CLUSTER, key, budget, RnnPolicy(2, 32, BATCH), TRAINING)
    policy = HierarchicalPolicy(2, graph.n_ops, 32, BATCH)
    return train_hierarchical(graph, CLUSTER, key, budget, policy, TRAINING)


@pytest.fixture(scope="module", params=["rnn", "hierarchical"])
def method(request):
    return request.param


def _makespan(graph: Graph, placement: np.ndarray) -> float:
    """µs, simulated in a batch of the training's size (one simulator compile for the file);
    nothing here overflows memory, so the penalised score is the makespan."""
    penalised, _, _ = score_batch(graph, CLUSTER, np.repeat(placement[None], BATCH, axis=0))
    return float(penalised[0])


def test_registered():
    assert {"rnn", "hierarchical"} <= set(METHODS)


def test_hand_derived_makespans():
    assert _makespan(TWO_CHAINS, np.zeros(12, int)) == pytest.approx(SINGLE)
    assert _makespan(TWO_CHAINS, np.repeat([0, 1], 6)) == pytest.approx(SPLIT)
    assert _makespan(ONE_CHAIN, np.zeros(12, int)) == pytest.approx(SINGLE)


@pytest.mark.slow
def test_budget_and_curve(method):
    solution, curve = _train(method, TWO_CHAINS, budget=40)  # batches of 16, 16, 8
    assert solution.evaluations == 40
    np.testing.assert_array_equal(curve.evaluations, [16, 32, 40])
    assert np.all(np.diff(curve.best) <= 0)
    assert curve.best[-1] == pytest.approx(_makespan(TWO_CHAINS, solution.placement))
    assert curve.evaluations_to_within(0.05) <= 40
    # nothing here overflows memory: the raw makespans are the penalised ones
    np.testing.assert_array_equal(curve.raw, curve.best)
    assert curve.fits.dtype == bool and curve.fits.all()


def test_valid_and_colocated(method):
    solution, _ = _train(method, COLOCATED, budget=32)
    placement = solution.placement
    assert placement.shape == (12,) and placement.dtype == np.int64
    assert placement.min() >= 0 and placement.max() < 2
    assert len(set(placement[[0, 3, 9]])) == 1 and placement[7] == placement[11]


def test_deterministic(method):
    first, curve1 = _train(method, TWO_CHAINS, seed=3, budget=48)
    second, curve2 = _train(method, TWO_CHAINS, seed=3, budget=48)
    np.testing.assert_array_equal(first.placement, second.placement)
    np.testing.assert_array_equal(curve1.mean, curve2.mean)
    _, other = _train(method, TWO_CHAINS, seed=4, budget=48)
    assert not np.array_equal(curve1.mean, other.mean)


def test_learns_to_split_independent_chains(method):
    solution, curve = _train(method, TWO_CHAINS)
    assert _makespan(TWO_CHAINS, solution.placement) < SINGLE
    assert curve.best[-1] == pytest.approx(SPLIT)
    # the policy improves: the last batches are better on average than the first ones
    assert curve.mean[-4:].mean() < curve.mean[:4].mean()


def test_keeps_a_communication_bound_chain_on_one_device(method):
    solution, curve = _train(method, ONE_CHAIN)
    assert _makespan(ONE_CHAIN, solution.placement) == pytest.approx(SINGLE, rel=0.01)
    # the policy converged: its last batch keeps the chain on one device
    assert curve.mean[-1] == pytest.approx(SINGLE, rel=0.01)
