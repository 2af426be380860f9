"""Every method through the one interface: valid placements, co-location, memory, and tiny
graphs with known optima (a chain stays on one device; two independent chains split)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.graphs.generators import layered
from placeto_jax.placers import METHODS, PLACERS, fastest_fitting, run_method, scored
from placeto_jax.placers.base import Solution
from placeto_jax.placers.expert import propagate, tag_devices
from placeto_jax.placers.search import Scorer, batch_rows

KEY = jax.random.key(0)
BUDGET = 256
# methods that search for a short makespan (the others follow a fixed rule)
OPTIMISING = ["metis", "heft", "critical-path", "m-etf", "m-sct", "random-search", "cross-entropy"]
MEMORY_AWARE = ["heft", "critical-path", "m-topo", "m-etf", "m-sct", "fit-fastest", "random-search",
                "cross-entropy", "local-search"]  # fmt: skip


def _chains(n_chains: int, length: int) -> Graph:
    """Independent chains of `length` ops (100 µs each, 76 kB outputs: a 10 µs transfer, more
    than the 5.7 µs a device stays busy after an op)."""
    n = n_chains * length
    edges = [
        (c * length + i, c * length + i + 1) for c in range(n_chains) for i in range(length - 1)
    ]
    return Graph.from_edges([100.0] * n, [76000.0] * n, edges)


def test_methods_are_listed_with_one_line_each():
    assert set(PLACERS) < set(METHODS)
    for name, method in METHODS.items():
        assert method.name == name and method.summary and "\n" not in method.summary


LEARNED = ("rnn", "hierarchical")  # trained per graph: tests/test_learned_placers.py
# the learned placers compile a policy per graph size: here only in the slow suite
ALL_METHODS = [pytest.param(m, marks=pytest.mark.slow) if m in LEARNED else m for m in METHODS]


def _known_to(name: str, graph: Graph) -> Graph:
    """`graph`, its ops named zoo:nmt/op<i> for the expert (whose rules must know a graph)."""
    if name != "expert":
        return graph
    names = [f"zoo:nmt/op{i}" for i in range(graph.n_ops)]
    return Graph.from_edges(graph.cost, graph.out_bytes, graph.edges, graph.param_bytes,
                            names=names, colocation=graph.colocation)  # fmt: skip


@pytest.mark.parametrize("name", ALL_METHODS)
def test_valid_placement_and_result(name):
    graph, cluster = _known_to(name, layered(40, seed=3)), Cluster(n_devices=3)
    result = run_method(name, graph, cluster, KEY, budget=BUDGET)
    assert result.method == name
    assert result.placement.dtype == np.int64 and result.placement.shape == (40,)
    assert result.placement.min() >= 0 and result.placement.max() < 3
    sim = simulate(graph, cluster, result.placement)
    assert result.makespan == float(sim.makespan)
    assert np.array_equal(result.peak_memory, sim.peak_memory)
    assert result.fits_memory
    assert result.evaluations <= BUDGET and result.wall_s >= 0
    placement = METHODS[name].place(graph, cluster, KEY, BUDGET)
    assert np.array_equal(placement, result.placement)  # a function of the key


@pytest.mark.parametrize("name", ALL_METHODS)
def test_colocation_is_respected(name):
    base = layered(24, seed=4)
    groups = np.full(24, -1)
    groups[[0, 5, 11, 23]] = 0
    groups[[3, 4]] = 1
    graph = Graph.from_edges(base.cost, base.out_bytes, base.edges, colocation=groups)
    placement = METHODS[name].place(_known_to(name, graph), Cluster(n_devices=3), KEY, BUDGET)
    assert len(set(placement[[0, 5, 11, 23]].tolist())) == 1
    assert placement[3] == placement[4]


@pytest.mark.parametrize("name", MEMORY_AWARE)
def test_memory_is_respected_when_possible(name):
    # 12 ops with 1 MB of parameters each; a device holds 5 MB: at least 3 devices are needed
    base = layered(12, seed=5)
    graph = Graph.from_edges(base.cost, base.out_bytes * 0, base.edges, param_bytes=[1e6] * 12)
    cluster = Cluster(n_devices=4, memory=5e6)
    assert run_method(name, graph, cluster, KEY, budget=1024).fits_memory


def test_when_nothing_fits_the_best_is_the_placement_that_overflows_least():
    # 12 ops with 1 MB of parameters each on 4 devices of 2.5 MB: no placement fits
    base = layered(12, seed=5)
    graph = Graph.from_edges(base.cost, base.out_bytes * 0, base.edges, param_bytes=[1e6] * 12)
    cluster = Cluster(n_devices=4, memory=2.5e6)
    alone = scored("single", graph, cluster, Solution(np.zeros(12, np.int64)), 0.0)
    spread = scored("spread", graph, cluster, Solution(np.arange(12) % 4), 0.0)
    assert not (alone.fits_memory or spread.fits_memory)
    assert alone.overflow == pytest.approx((12 - 2.5) / 2.5)  # 12 MB on one device
    assert spread.overflow == pytest.approx(4 * (3 - 2.5) / 2.5)  # 3 MB on each
    faster = dataclasses.replace(alone, makespan=spread.makespan / 2)
    assert fastest_fitting([faster, spread]).method == "spread"  # not the shorter makespan
    fits = dataclasses.replace(faster, method="fits", makespan=10 * spread.makespan,
                               fits_memory=True, overflow=0.0)  # fmt: skip
    assert fastest_fitting([faster, spread, fits]).method == "fits"


@pytest.mark.parametrize("name", [*OPTIMISING, "local-search"])
def test_a_chain_stays_on_one_device(name):
    placement = METHODS[name].place(_chains(1, 6), Cluster(n_devices=2), KEY, BUDGET)
    assert len(set(placement.tolist())) == 1


@pytest.mark.parametrize("name", OPTIMISING)
def test_two_equal_chains_split(name):
    placement = METHODS[name].place(_chains(2, 3), Cluster(n_devices=2), KEY, BUDGET)
    assert len(set(placement[:3].tolist())) == 1 and len(set(placement[3:].tolist())) == 1
    assert placement[0] != placement[3]


@pytest.mark.slow
def test_search_budget_is_counted():
    graph, cluster = layered(30, seed=6), Cluster(n_devices=2)
    assert run_method("random-search", graph, cluster, KEY, budget=300).evaluations == 300
    assert run_method("cross-entropy", graph, cluster, KEY, budget=600).evaluations == 512
    assert run_method("local-search", graph, cluster, KEY, budget=200).evaluations <= 200
    with pytest.raises(ValueError, match="budget"):
        run_method("random-search", graph, cluster, KEY, budget=0)


def test_small_batches_are_padded_to_a_power_of_two():
    rows = [batch_rows(n) for n in (1, 2, 3, 5, 129, 256, 257, 600)]
    assert rows == [1, 2, 4, 8, 256, 256, 512, 768]


def test_scores_do_not_depend_on_the_batch_they_are_in():
    graph, cluster = layered(30, seed=6), Cluster(n_devices=3)
    placements = np.random.default_rng(0).integers(0, 3, (5, graph.n_ops))
    scorer = Scorer(graph, cluster)
    alone = [scorer(p[None])[0] for p in placements]
    np.testing.assert_allclose(scorer(placements), alone, rtol=1e-6)
    expected = simulate(graph, cluster, placements[2]).makespan
    np.testing.assert_allclose(alone[2], expected, rtol=1e-6)


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match=r"'nope'.*heft"):
        run_method("nope", layered(5), Cluster(n_devices=2), KEY)


def test_expert_rules_on_scoped_names():
    names = (
        "zoo:nmt/Nmt/enc0_t01/enc0/x",
        "zoo:nmt/Nmt/enc1_t01/enc1/x",
        "zoo:nmt/Nmt/dec2_t03/dec2/x",
        "zoo:nmt/Nmt/attention_t03",
        "zoo:nmt/Nmt/softmax/dot",
        "zoo:nmt/optimizer_4",
    )
    assert tag_devices(names, 2).tolist() == [0, 1, 0, 0, 1, -1]
    bert = ("zoo:bert_base/Bert/embed/_take", "zoo:bert_base/Bert/layer3/ff1", "zoo:bert_base/x",
            "zoo:bert_base/Bert/layer0/ff2", "zoo:bert_base/Bert/mlm_dense")  # fmt: skip
    assert tag_devices(bert, 2).tolist() == [0, 1, -1, 0, 1]
    assert tag_devices(("zoo:resnet50/ResNet/stage3_0/conv",), 4).tolist() == [2]
    assert tag_devices(("zoo:inception_v3/InceptionV3/mixed_6b/b7x7dbl_2_conv",), 3).tolist() == [1]
    assert tag_devices(("other",), 2).tolist() == [-1]


def test_expert_propagation_follows_the_largest_input():
    # 0 -> 2, 1 -> 2 (1's output larger), 2 -> 3; 4 is a root consumed by 3 only
    graph = Graph.from_edges(
        [1.0] * 5, [10.0, 20.0, 5.0, 0.0, 1.0], [(0, 2), (1, 2), (2, 3), (4, 3)]
    )
    assert propagate(graph, np.array([0, 1, -1, -1, -1])).tolist() == [0, 1, 1, 1, 1]


def test_metis_parts_keep_classes_together_and_split_independent_chains():
    from placeto_jax.placers.partition import metis_parts

    chains = _chains(4, 5)  # four independent chains: a cut of zero bytes exists
    parts = metis_parts(chains, 4)
    assert sorted(set(parts.tolist())) == [0, 1, 2, 3]
    assert all(len(set(parts[c * 5 : c * 5 + 5].tolist())) == 1 for c in range(4))
    groups = np.full(20, -1)
    groups[[0, 19]] = 0  # the first op of chain 0 and the last of chain 3 share a device
    tied = Graph.from_edges(chains.cost, chains.out_bytes, chains.edges, colocation=groups)
    tied_parts = metis_parts(tied, 2)
    assert tied_parts[0] == tied_parts[19]
    with pytest.raises(ValueError, match="2 to 20 parts"):
        metis_parts(chains, 21)


def test_expert_refuses_a_graph_no_rules_know():
    cluster = Cluster(n_devices=2)
    with pytest.raises(ValueError, match=r"^expert: no naming rules know this graph .*nasnet, nmt"):
        run_method("expert", layered(12), cluster, KEY)
    names = ["zoo:nmt/enc0/a", "zoo:nmt/enc1/b", "zoo:nmt/dec0/c"]  # devices 0, 1, 0 by rule
    graph = Graph.from_edges([1.0, 1.0, 1.0], [0, 0, 0], [(0, 1), (1, 2)], names=names)
    assert run_method("expert", graph, cluster, KEY).placement.tolist() == [0, 1, 0]


def test_expert_blocks_a_zoo_graph_whose_ops_match_no_rule():
    # zoo:nmt names without layer names; costs 1, 1, 2, 4: compute before each op 0, 1, 2, 4 of
    # 8, so on 2 devices the blocks are [0, 0, 0, 1]
    names = [f"zoo:nmt/Nmt_{i}" for i in range(4)]
    graph = Graph.from_edges([1.0, 1.0, 2.0, 4.0], [0] * 4, [(0, 1), (1, 2), (2, 3)], names=names)
    assert run_method("expert", graph, Cluster(n_devices=2), KEY).placement.tolist() == [0, 0, 0, 1]
