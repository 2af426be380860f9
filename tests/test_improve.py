"""Improve mode: episodes from a given start, regrouping within a start that splits a group, and
a returned placement never slower than the start (strictly faster where a move helps)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.config import Config, EnvConfig, PolicyConfig, make_config
from placeto_jax.env import PlacetoEnv, build_bank, prepare
from placeto_jax.env.start import with_start
from placeto_jax.graphs import generators
from placeto_jax.placers import FAST_HEURISTICS
from placeto_jax.reproduce.improve import (
    BENCH_VARIANTS,
    Outcome,
    Settings,
    _bench_placed,
    _from,
    faster,
    summary,
)
from placeto_jax.reproduce.placeto import PlacetoBench
from placeto_jax.rl.evaluate import (
    Placement,
    best_of_groupings,
    place_with,
    rank_visited,
    with_candidate,
)
from placeto_jax.rl.train import make_train, sample_action
from placeto_jax.stages.starts import heuristic_start, start_result, started

# Two devices, fast buses, no overheads: makespans by hand.
CLUSTER = Cluster(n_devices=2, speed=1.0, bandwidth=1000.0, delta1=0.0, delta2=0.0)
GIVEN = EnvConfig(initial_placement="given")


def tied_step() -> Graph:
    """Weight w, forward f, backward b, update u; w and u co-located (two tied nodes)."""
    return Graph.from_edges(
        [1.0, 10.0, 20.0, 5.0], [1000.0, 2000.0, 1000.0, 0.0],
        [(0, 1), (1, 2), (2, 3), (0, 3)], names=["w", "f", "b", "u"],
        colocation=[0, -1, -1, 0],
    )  # fmt: skip


def two_chains() -> Graph:
    """a -> b and c -> d, 100 µs each: 400 µs on one device, 200 µs with a chain on each."""
    return Graph.from_edges([100.0] * 4, [10.0] * 4, [(0, 1), (2, 3)], names=list("abcd"))


def test_the_first_observation_is_the_given_start_unit_by_unit():
    start = np.array([1, 0, 1, 1])  # the tied w and u together on device 1
    pg = with_start(prepare("step", tied_step()), start, "hand", 2)
    env = PlacetoEnv(GIVEN, 2)
    env_params = env.env_params(build_bank([pg]), CLUSTER)
    state, obs = jax.jit(env.reset)(jax.random.key(0), env_params)
    np.testing.assert_array_equal(obs.placement[:4], start)
    assert float(state.makespan) == pytest.approx(simulate(tied_step(), CLUSTER, start).makespan)


def test_a_start_that_splits_a_group_is_kept_exactly_by_regrouping():
    graph = generators.layered(24, seed=1)
    pg = prepare("layered", graph, group_target=4)
    op_start = np.arange(graph.n_ops) % 2  # splits every group of several ops
    regrouped = with_start(pg, op_start, "alternate", 2)
    np.testing.assert_array_equal(regrouped.expand(regrouped.start.placement), op_start)
    assert regrouped.n_units > pg.n_units and regrouped.op_graph is graph
    unchanged = with_start(pg, pg.expand(np.arange(pg.graph.n_ops) % 2), "whole", 2)
    assert unchanged.graph is pg.graph  # a start that keeps every unit whole regroups nothing


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (np.zeros(3, dtype=int), "expected 4 integer devices"),
        (np.array([0, 0, 2, 0]), "outside [0, 2)"),
        (np.array([0, 0, 0, 1]), "are co-located"),
    ],
)
def test_a_bad_start_is_refused_by_name(placement, message):
    with pytest.raises(ValueError, match="start 'bad'") as err:
        with_start(prepare("step", tied_step()), placement, "bad", 2)
    assert message in str(err.value)


def test_given_starts_need_a_start_on_every_graph():
    with pytest.raises(ValueError, match="needs a start for every graph"):
        PlacetoEnv(GIVEN, 2).env_params(build_bank([prepare("chains", two_chains())]), CLUSTER)


def test_improve_mode_is_never_slower_than_the_start_and_finds_the_improving_move():
    config = Config(n_devices=2, env=GIVEN, policy=PolicyConfig(rounds=1))
    (pg,) = started([prepare("chains", two_chains())], CLUSTER, "single", jax.random.key(0))
    assert pg.start.name == "single"
    run = make_train(config, build_bank([pg]), CLUSTER)
    params = run.init(jax.random.key(1), run.env_params).params  # untrained, near uniform
    (greedy,) = place_with(run, params, run.env_params, [pg], CLUSTER)
    (sampled,) = place_with(run, params, run.env_params, [pg], CLUSTER, 8, jax.random.key(2))
    assert greedy.initial_makespan == sampled.initial_makespan == pytest.approx(400.0)
    assert greedy.makespan <= greedy.initial_makespan and greedy.start == "single"
    assert sampled.makespan == pytest.approx(200.0)  # the best move: a chain on each device
    assert sampled.episodes == 9 and sampled.episode_steps == 9 * 4
    exact = simulate(two_chains(), CLUSTER, sampled.placement).makespan
    assert sampled.makespan == pytest.approx(exact)
    assert faster(sampled, sampled.initial_makespan / 1e3)
    assert not faster(dataclasses.replace(sampled, makespan=400.0), 0.4)
    hot = place_with(run, params, run.env_params, [pg], CLUSTER, 8, jax.random.key(2), 4.0)
    assert hot[0].temperature == 4.0 and hot[0].makespan == pytest.approx(200.0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature must be finite and > 0"):
            place_with(run, params, run.env_params, [pg], CLUSTER, 8, jax.random.key(2), bad)


def test_a_placement_training_found_is_ranked_with_the_greedy_episode():
    config = Config(n_devices=2, env=GIVEN, policy=PolicyConfig(rounds=1))
    (pg,) = started([prepare("chains", two_chains())], CLUSTER, "single", jax.random.key(0))
    run = make_train(config, build_bank([pg]), CLUSTER)
    params = run.init(jax.random.key(1), run.env_params).params
    params = jax.tree.map(jnp.zeros_like, params)  # equal logits: argmax keeps device 0
    (stuck,) = place_with(run, params, run.env_params, [pg], CLUSTER)
    assert stuck.makespan == pytest.approx(400.0) and stuck.evaluations == 1
    (none,) = place_with(run, params, run.env_params, [pg], CLUSTER, found=[None])
    assert none.makespan == pytest.approx(400.0)
    chains = np.array([0, 0, 1, 1, 0, 0])  # padded past the 4 ops, as a TrainState row is
    (found,) = place_with(run, params, run.env_params, [pg], CLUSTER, found=[chains])
    assert found.makespan == pytest.approx(200.0) and found.evaluations == 2
    np.testing.assert_array_equal(found.placement, [0, 0, 1, 1])


def test_an_op_graph_candidate_replaces_a_placement_only_when_strictly_faster():
    pg = prepare("chains", two_chains())
    (stuck,) = [rank_visited(pg, CLUSTER, np.zeros((1, 4), np.int64), "single")]
    assert stuck.makespan == pytest.approx(400.0) and stuck.evaluations == 1
    assert with_candidate(stuck, pg, CLUSTER, None) is stuck  # nothing to rank: no simulation
    better = with_candidate(stuck, pg, CLUSTER, np.array([0, 0, 1, 1]))  # a chain per device
    assert better.makespan == pytest.approx(200.0) and better.evaluations == 2
    np.testing.assert_array_equal(better.placement, [0, 0, 1, 1])
    assert better.start == "single" and better.initial_makespan == pytest.approx(400.0)
    same = with_candidate(better, pg, CLUSTER, np.array([1, 1, 0, 0]))  # as fast: kept
    np.testing.assert_array_equal(same.placement, [0, 0, 1, 1])
    assert same.evaluations == 3
    worse = with_candidate(better, pg, CLUSTER, np.array([0, 1, 0, 1]))  # 4 transfers of 10 B
    assert worse.makespan == pytest.approx(200.0) and worse.evaluations == 3


def test_sampling_at_temperature_t_draws_from_softmax_of_logits_over_t():
    logits = jnp.log(jnp.array([1.0, 2.0, 4.0]))
    keys = jax.random.split(jax.random.key(0), 20_000)

    def draws(t: float) -> np.ndarray:
        return np.asarray(jax.vmap(lambda k: sample_action(k, logits, t))(keys))

    def frequencies(t: float) -> np.ndarray:
        return np.bincount(draws(t), minlength=3) / len(keys)

    np.testing.assert_allclose(frequencies(1.0), np.array([1, 2, 4]) / 7, atol=0.01)
    # T = 2: softmax(log p / 2) is proportional to sqrt(p) = (1, sqrt 2, 2)
    np.testing.assert_allclose(frequencies(2.0), np.array([1, 2**0.5, 2]) / (3 + 2**0.5), atol=0.01)
    np.testing.assert_allclose(frequencies(1e6), np.full(3, 1 / 3), atol=0.01)  # near uniform
    own = np.asarray(jax.vmap(lambda k: jax.random.categorical(k, logits))(keys))
    np.testing.assert_array_equal(draws(1.0), own)  # T = 1: the policy's own samples, bit for bit


def test_the_best_start_is_the_fastest_fast_heuristic_on_the_grouped_graph():
    pg = prepare("chains", two_chains())
    best = start_result(pg, CLUSTER, "best", jax.random.key(0))
    assert best.makespan == pytest.approx(200.0) and best.method in ("metis", "heft", "m-etf")
    with pytest.raises(ValueError, match="unknown start 'nope'"):
        start_result(pg, CLUSTER, "nope", jax.random.key(0))


def test_the_best_op_start_runs_the_heuristics_on_the_op_graph_and_is_kept_exactly():
    pg = prepare("chains", two_chains(), group_target=1)  # one node: one device only
    assert start_result(pg, CLUSTER, "best", jax.random.key(0)).makespan == pytest.approx(400.0)
    best_op = start_result(pg, CLUSTER, "best-op", jax.random.key(0))
    assert best_op.makespan == pytest.approx(200.0)  # a chain on each device
    (started_pg,) = started([pg], CLUSTER, "best-op", jax.random.key(0))
    assert started_pg.start.name == f"{best_op.method} (best-op)"
    assert started_pg.n_units == 2  # regrouped within the start: one node per chain
    np.testing.assert_array_equal(started_pg.expand(started_pg.start.placement), best_op.placement)


def test_summary_counts_strict_gains_against_each_start():
    def outcome(start_ms: float, placeto_ms: float) -> Outcome:
        placed = Placement("g", np.zeros(4, int), placeto_ms * 1e3, 0.0, 0.0, np.zeros(2), True,
                           4, 4, 1)  # fmt: skip
        return Outcome("f", "g", 4, "m", start_ms, "m", start_ms, {"v": placed}, {"v": 0})

    found = summary([outcome(10.0, 9.0), outcome(10.0, 10.0)], "v")
    assert found["graphs"] == 2 and found["strictly faster"] == 0.5
    assert found["mean gain"] == pytest.approx(0.05)


def test_the_best_of_several_groupings_fits_memory_first_and_counts_every_one():
    def placed(makespan_ms, fits, nodes, evaluations):
        arrays = np.full(4, nodes), makespan_ms * 1e3, 9e3, 8e3, np.zeros(2)
        steps = 3 * nodes
        return Placement(
            "g", *arrays, fits, nodes, nodes, evaluations, episodes=2, episode_steps=steps
        )

    coarse = [placed(5.0, True, 4, 10), placed(7.0, True, 4, 11)]
    fine = [placed(6.0, True, 8, 20), placed(3.0, False, 8, 21)]
    finest = [placed(5.0, True, 12, 30), placed(6.5, True, 12, 31)]
    first, second = best_of_groupings([coarse, fine, finest])
    # Graph 1: 5 ms at 4 and at 12 groups, the earlier kept; graph 2: 3 ms does not fit, and
    # 6.5 ms at 12 groups is the fastest that does.
    assert first.n_nodes == 4 and first.makespan == 5e3 and (first.placement == 4).all()
    assert second.n_nodes == 12 and second.makespan == 6.5e3 and second.fits_memory
    assert (first.evaluations, second.evaluations) == (10 + 20 + 30, 11 + 21 + 31)
    assert first.episodes == second.episodes == 6
    assert first.episode_steps == second.episode_steps == 3 * (4 + 8 + 12)
    assert best_of_groupings([fine]) == fine
    # when nothing fits, the least memory overflow is kept, not the shortest makespan
    over = [dataclasses.replace(placed(3.0, False, 4, 1), overflow=0.5),
            dataclasses.replace(placed(6.0, False, 8, 1), overflow=0.1)]  # fmt: skip
    assert best_of_groupings([[over[0]], [over[1]]])[0].n_nodes == 8
    with pytest.raises(ValueError, match="no placements"):
        best_of_groupings([])


@pytest.mark.slow  # 27 s; `make test-slow`
def test_each_benchmark_variant_counts_its_training_and_its_sampled_episodes():
    config = make_config(None, ["train.iterations=1", "train.episodes=4", "policy.rounds=1",
                                "run.eval_every=1", "run.buckets=8"], n_devices=2)  # fmt: skip
    graphs = started([prepare("chains", two_chains())], CLUSTER, "best", jax.random.key(0))
    benches = {o: PlacetoBench(_from(config, o), graphs, CLUSTER) for o in ("random", "start")}
    key = jax.random.key(3)
    settings = Settings(families=(), devices=2, family=(), bench=(), samples=3, start="best")
    placed, evals = _bench_placed(benches, 0, settings, key)
    assert set(placed) == set(evals) == {v.name for v in BENCH_VARIANTS}
    fit = benches["start"].fit(0, key)
    # one update of 4 episodes x (4 steps + the initial placement); two greedy evaluations
    # (before and after it) of 4 steps and 1 to 5 distinct placements, the second with the
    # placement training found too (up to 6)
    # The variants trained from the start add its simulations: 8 heuristics, each its own
    # and one to score it.
    runs = [heuristic_start(prepare("chains", two_chains()), CLUSTER, m, jax.random.key(0))
            for m in FAST_HEURISTICS]  # fmt: skip
    start_cost = sum(r.evaluations + 1 for r in runs)
    assert graphs[0].start.evaluations == start_cost >= len(FAST_HEURISTICS)
    assert 20 + 2 * 4 + 2 <= fit.evaluations <= 20 + 8 + 11
    assert evals[BENCH_VARIANTS[1].name] == fit.evaluations + start_cost
    assert 20 + 2 * 4 + 2 <= evals[BENCH_VARIANTS[0].name] <= 20 + 8 + 11
    for v in BENCH_VARIANTS[2:]:  # its 3 sampled episodes and the greedy one, ranked, then
        bench = benches["start"]  # the best placement training found (one more simulation)
        (sampled,) = place_with(bench.run, fit.params, bench.graph_env_params(0), graphs,
                                CLUSTER, 3, key, v.temperature)  # fmt: skip
        assert evals[v.name] == fit.evaluations + start_cost + 4 * 4 + sampled.evaluations + 1
