"""`placeto_jax.place`: named pipelines, their validation, and what each stage reports."""

from __future__ import annotations

import dataclasses

import chex
import jax
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import pipeline as pipeline_module
from placeto_jax.config import Config, Pipeline, PolicyConfig, make_pipeline
from placeto_jax.env.bank import build_bank, prepare
from placeto_jax.graphs import generators
from placeto_jax.placers import FAST_HEURISTICS, fast_heuristics, fastest_fitting
from placeto_jax.rl.train import make_train
from placeto_jax.stages.starts import heuristic_start

CLUSTER = pj.Cluster.preset("placeto-k80", 2)


def _graph():
    return generators.layered(24, seed=0)


def _untrained_policy(graph) -> pj.Policy:
    config = Config(n_devices=2, policy=PolicyConfig(rounds=1))
    run = make_train(config, build_bank([prepare("g", graph)]), CLUSTER)
    return pj.Policy(config, run.init(jax.random.key(1), run.env_params).params)


def test_the_heuristics_pipeline_is_the_best_fast_heuristic_and_needs_no_policy():
    graph = _graph()
    placed = pj.place(graph, CLUSTER, pj.PIPELINES["heuristics"])
    results = fast_heuristics(graph, CLUSTER, jax.random.key(0))
    best = fastest_fitting(results)
    assert placed.result.makespan == pytest.approx(best.makespan)
    np.testing.assert_array_equal(placed.result.placement, best.placement)
    (stage,) = placed.stages
    assert stage.name == "heuristics"
    assert stage.evaluations == sum(r.evaluations + 1 for r in results)  # one score each
    assert placed.best_heuristic.method == best.method
    simulated = pj.simulate(graph, CLUSTER, placed.result.placement)
    assert placed.result.makespan == pytest.approx(float(simulated.makespan), rel=1e-12)


def test_a_policy_pipeline_without_a_policy_is_refused_before_any_work():
    with pytest.raises(ValueError, match="this pipeline places with a policy"):
        pj.place(_graph(), CLUSTER)
    with pytest.raises(ValueError, match="this pipeline places with a policy"):
        pj.place(_graph(), CLUSTER, make_pipeline("heuristics", ["pipeline.random_passes=1"]))


def test_named_pipelines_take_overrides_and_name_what_is_wrong():
    search = make_pipeline("search", ["pipeline.samples=4", "pipeline.squeeze=false"])
    assert (search.samples, search.squeeze, search.proposer) == (4, False, "ranked")
    assert make_pipeline(None) == pj.PIPELINES["policy"] == pj.Pipeline()
    for name, overrides, message in (
        ("best", [], "unknown pipeline 'best'"),
        ("policy", ["samples=3"], "expected pipeline.FIELD=VALUE"),
        ("heuristics", ["pipeline.samples=3"], "not with source=heuristics"),
        ("policy", ["pipeline.group_targets=8,-1"], "pipeline.group_targets must be >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            make_pipeline(name, overrides)


def test_heuristics_already_run_are_taken_as_they_are(monkeypatch):
    # A caller that ran the fast heuristics passes them: they are not run again, and the
    # placement is the one they give (the last heuristic made the fastest: it is chosen).
    graph = _graph()
    results = fast_heuristics(graph, CLUSTER, jax.random.key(0))
    results[-1] = dataclasses.replace(results[-1], makespan=1.0, fits_memory=True)
    monkeypatch.setattr(pipeline_module, "fast_heuristics", lambda *_: pytest.fail("ran again"))
    (placed,) = pj.place_many([("g", graph)], CLUSTER, pj.PIPELINES["heuristics"],
                              heuristics=[results])  # fmt: skip
    np.testing.assert_array_equal(placed.result.placement, results[-1].placement)
    assert placed.stages[0].evaluations == sum(r.evaluations + 1 for r in results)


def test_stages_run_in_order_and_count_their_simulations():
    # An untrained policy, greedy episode from a random start, then two passes of op-level
    # search: one simulation per op and pass (2 N), from the episode's exact simulation.
    graph = _graph()
    policy = _untrained_policy(graph)
    plain = pj.place(graph, CLUSTER, policy=policy, compare=False)
    (episodes,) = plain.stages
    steps = graph.n_ops  # one pass, one step per op
    assert episodes.name == "episodes"
    assert episodes.evaluations == steps + plain.result.evaluations
    assert plain.best_heuristic is None
    searched = pj.place(graph, CLUSTER, make_pipeline("policy", ["pipeline.search_ops=2"]), policy)
    first, search = searched.stages
    assert (first.name, search.name) == ("episodes", "search-ops")
    assert first.evaluations == episodes.evaluations  # the same episode
    assert search.evaluations == 2 * graph.n_ops
    assert searched.evaluations == first.evaluations + search.evaluations
    assert searched.result.makespan <= plain.result.makespan
    assert search.makespan == searched.result.makespan
    simulated = pj.simulate(graph, CLUSTER, searched.result.placement)
    assert searched.result.makespan == pytest.approx(float(simulated.makespan), rel=1e-12)


def test_a_policy_for_another_device_count_is_refused():
    policy = _untrained_policy(_graph())
    with pytest.raises(ValueError, match="the policy places on 2 devices, the cluster has 3"):
        pj.place(_graph(), pj.Cluster.preset("placeto-k80", 3), policy=policy)


def test_a_graph_is_placed_alike_alone_and_beside_others():
    # The greedy episode's random start comes from the graph's content, not from the bank it
    # is played in, so `eval` on many graphs and `place` on one agree.
    graph = _graph()
    policy = _untrained_policy(graph)
    others = [("a", generators.layered(40, seed=3)), ("g", graph), ("b", generators.layered(9))]
    together = pj.place_many(others, CLUSTER, policy=policy, compare=False)[1]
    alone = pj.place(graph, CLUSTER, policy=policy, name="g", compare=False)
    np.testing.assert_array_equal(together.result.placement, alone.result.placement)
    assert together.result.makespan == alone.result.makespan
    assert together.result.initial_makespan == alone.result.initial_makespan


def test_a_start_counts_the_simulations_that_found_it():
    # `best`: the 8 fast heuristics on the grouped graph, each its own simulations and one to
    # score it; a single method: its own and one; best-op's are the heuristics stage's.
    graph = _graph()
    policy = _untrained_policy(graph)
    placed = pj.place(graph, CLUSTER, Pipeline(start="best"), policy, compare=False)
    start, episodes = placed.stages
    assert (start.name, episodes.name) == ("start", "episodes")
    pg = prepare("graph", graph, policy.config.run.group_target, CLUSTER.delta1)
    runs = [heuristic_start(pg, CLUSTER, m, jax.random.key(0)) for m in FAST_HEURISTICS]
    assert start.evaluations == sum(r.evaluations + 1 for r in runs)
    assert start.makespan == pytest.approx(fastest_fitting(runs).makespan)
    single = pj.place(graph, CLUSTER, Pipeline(start="single"), policy, compare=False)
    assert (single.stages[0].name, single.stages[0].evaluations) == ("start", 1)
    best_op = pj.place(graph, CLUSTER, Pipeline(start="best-op"), policy, compare=False)
    assert [s.name for s in best_op.stages] == ["heuristics", "episodes"]


def test_the_untrained_control_is_the_runs_initial_weights(tmp_path):
    graph = _graph()
    overrides = ["policy.rounds=1", "train.episodes=4"]
    trained = pj.train(
        graph, CLUSTER, str(tmp_path / "a"), None, [*overrides, "train.iterations=2"]
    )
    zero = pj.train(graph, CLUSTER, str(tmp_path / "b"), None, [*overrides, "train.iterations=0"])
    chex.assert_trees_all_equal(pipeline_module.untrained(trained).params, zero.params)
    restored = pj.Policy.load(str(tmp_path / "b"))
    chex.assert_trees_all_equal(restored.params, zero.params)
    moved = jax.tree.map(lambda a, b: bool((a != b).any()), trained.params, zero.params)
    assert any(jax.tree.leaves(moved))
    with pytest.raises(ValueError, match="paper agent has none"):
        pipeline_module.uniform_random(trained)
    with pytest.raises(ValueError, match="construct agent's, not the paper's"):
        pj.place(
            graph, CLUSTER, make_pipeline("policy"), dataclasses.replace(trained, uniform=True)
        )
