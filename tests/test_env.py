"""The Placeto environment: hand-traced steps on the 4-node diamond, padding and batch
invariance, traversal orders, initial placements, memory penalty and mask, op-graph rewards."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.config import EnvConfig
from placeto_jax.env import PlacetoEnv, build_bank, prepare
from placeto_jax.graphs import generators
from placeto_jax.sim.padded import fine_bucket

# Two devices, 1,000 bytes/µs buses, no per-op or per-transfer overheads: makespans by hand.
CLUSTER = Cluster(n_devices=2, speed=1.0, bandwidth=1000.0, delta1=0.0, delta2=0.0)
RAW = EnvConfig(initial_placement="single", normalize="none")
KEY = jax.random.key(0)  # the step's key (unused: steps are deterministic)


class Jitted:
    """A PlacetoEnv whose reset and step are jitted (eager steps are slow to dispatch)."""

    def __init__(self, env: PlacetoEnv):
        self.env = env
        self.reset = jax.jit(env.reset)
        self.step = jax.jit(env.step)
        self.observe = env.observe
        self.current_unit = env.current_unit


def _env(config=RAW, graphs=None, cluster=CLUSTER, buckets=None):
    graphs = graphs or [prepare("diamond", generators.diamond())]
    env = PlacetoEnv(config, cluster.n_devices, cluster.broadcast)
    return Jitted(env), env.env_params(build_bank(graphs, buckets), cluster)


def test_hand_traced_episode_on_the_diamond():
    # diamond: a(100 µs, 76,000 B) -> b(50, 7,600), c(30, 7,600) -> d(10). All on device 0:
    # makespan 190. Then a->1: a's output takes 76 µs, b starts at 176, c 226, d 256-266.
    # b->1: c waits for a (176-206), b's output queues behind a's on bus 1 (176-183.6),
    # d 206-216. c->0: no change. d->1: c's output leaves at 206, arrives 213.6, d 213.6-223.6.
    env, env_params = _env()
    state, obs = env.reset(jax.random.key(0), env_params)
    assert float(state.makespan) == pytest.approx(190.0)
    np.testing.assert_array_equal(state.order[:4], [0, 1, 2, 3])
    expected = [
        (1, [1, 0, 0, 0], 266.0),
        (1, [1, 1, 0, 0], 216.0),
        (0, [1, 1, 0, 0], 216.0),
        (1, [1, 1, 0, 1], 223.6),
    ]
    before = 190.0
    for i, (action, placement, makespan) in enumerate(expected):
        assert int(obs.unit) == i
        state, obs, reward, done = env.step(KEY, state, jnp.int32(action), env_params)
        np.testing.assert_array_equal(state.placement[:4], placement)
        assert float(state.makespan) == pytest.approx(makespan, rel=1e-6)
        assert float(reward) == pytest.approx((before - makespan) * 1e-6, rel=1e-5)
        assert bool(done) == (i == 3)
        before = makespan
    # After the episode: steps change nothing and reward nothing.
    same, _, reward, done = env.step(KEY, state, jnp.int32(0), env_params)
    np.testing.assert_array_equal(same.placement, state.placement)
    assert float(reward) == 0.0 and bool(done)
    assert float(state.best_runtime) == pytest.approx(190e-6)


def test_observation_features_by_hand():
    env, env_params = _env()
    state, obs = env.reset(jax.random.key(0), env_params)
    f = np.asarray(obs.features)
    assert f.shape == (8, 5 + 2)  # diamond padded to 8 nodes, d = 5 + D
    np.testing.assert_allclose(f[:4, 0], [1.0, 0.5, 0.3, 0.1], rtol=1e-6)  # cost / max
    np.testing.assert_allclose(f[:4, 1], [1.0, 0.1, 0.1, 0.0], rtol=1e-6)  # bytes / max
    np.testing.assert_array_equal(f[:4, 2], 0)  # nothing placed yet
    np.testing.assert_array_equal(f[:4, 3], [1, 0, 0, 0])  # current node a
    np.testing.assert_allclose(f[:4, 4], [0, 100 / 180, 150 / 180, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(f[:4, 5:], [[1, 0]] * 4)
    np.testing.assert_array_equal(f[4:], 0)  # padding rows
    np.testing.assert_array_equal(obs.descendants[:4], [False, True, True, True])
    np.testing.assert_array_equal(obs.ancestors[:4], [False, False, False, False])
    state, obs, _, _ = env.step(KEY, state, jnp.int32(1), env_params)  # a -> 1; current node b
    f = np.asarray(obs.features)
    np.testing.assert_array_equal(f[:4, 2], [1, 0, 0, 0])
    np.testing.assert_array_equal(f[:4, 3], [0, 1, 0, 0])
    # starts a 0, b 176, c 226, d 256; minus b's, over the largest gap 176
    np.testing.assert_allclose(f[:4, 4], [-1.0, 0.0, 50 / 176, 80 / 176], rtol=1e-5)
    np.testing.assert_array_equal(obs.ancestors[:4], [True, False, False, False])
    np.testing.assert_array_equal(obs.descendants[:4], [False, False, False, True])


def _rollout(env, env_params, actions, key=0, graph=0):
    state, _ = env.reset(jax.random.key(key), env_params.on_graph(graph))
    rewards = []
    for a in actions:
        state, _, r, _ = env.step(KEY, state, jnp.int32(a), env_params)
        rewards.append(float(r))
    return state, np.array(rewards)


def test_rewards_do_not_depend_on_padding():
    graph = [prepare("diamond", generators.diamond())]
    small = _env(graphs=graph)
    large = _env(graphs=graph, buckets=(64,))
    assert small[1].bank.order.shape[1] == 8 and large[1].bank.order.shape[1] == 64
    a = _rollout(*small, [1, 1, 0, 1])
    b = _rollout(*large, [1, 1, 0, 1])
    np.testing.assert_array_equal(a[1], b[1])
    assert float(a[0].makespan) == float(b[0].makespan)


def test_vmapped_batch_equals_single_episodes():
    env, env_params = _env(dataclasses.replace(RAW, initial_placement="random"))
    keys = jax.random.split(jax.random.key(3), 5)
    actions = jnp.array([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]])
    reset = jax.jit(jax.vmap(env.env.reset, (0, None)))
    step = jax.jit(jax.vmap(env.env.step, (None, 0, 0, None)))
    state, _ = reset(keys, env_params)
    for t in range(4):
        state, _, _, _ = step(KEY, state, actions[:, t], env_params)
    for b in range(5):
        s, _ = env.reset(keys[b], env_params)
        for t in range(4):
            s, _, _, _ = env.step(KEY, s, actions[b, t], env_params)
        np.testing.assert_array_equal(state.placement[b], s.placement)
        assert float(state.runtime[b]) == float(s.runtime)


def test_initial_placements():
    graphs = [prepare("layered", generators.layered(20, seed=1))]
    placements = {}
    for kind in ("single", "fixed", "random"):
        env, env_params = _env(dataclasses.replace(RAW, initial_placement=kind), graphs)
        placements[kind] = [
            np.asarray(env.reset(jax.random.key(k), env_params)[0].placement[:20]) for k in (0, 1)
        ]
    np.testing.assert_array_equal(placements["single"][0], 0)
    np.testing.assert_array_equal(placements["fixed"][0], placements["fixed"][1])
    assert not np.array_equal(placements["random"][0], placements["random"][1])


def test_random_traversal_visits_every_node_once_per_pass():
    graphs = [prepare("layered", generators.layered(20, seed=1))]
    env, env_params = _env(dataclasses.replace(RAW, traversal="random", passes=2), graphs)
    state, _ = env.reset(jax.random.key(5), env_params)
    order = np.asarray(state.order)
    assert sorted(order[:20]) == list(range(20))
    assert not np.array_equal(order[:20], np.asarray(env_params.bank.order[0, :20]))
    visited = []
    for _ in range(40):
        visited.append(int(env.current_unit(state, env_params)))
        state, _, _, done = env.step(KEY, state, jnp.int32(1), env_params)
    assert visited == list(order[:20]) * 2 and bool(done)


def test_normalised_runtime_is_relative_to_the_initial_one():
    env, env_params = _env(dataclasses.replace(RAW, normalize="initial"))
    state, rewards = _rollout(env, env_params, [1, 1, 0, 1])
    assert float(state.scale) == pytest.approx(190e-6)
    np.testing.assert_allclose(rewards, np.array([-76, 50, 0, -7.6]) / 190, rtol=1e-4)


def test_memory_penalty_and_its_cap():
    # 2 GB of parameters on op a; devices of 1 GB: 1 GB over on device 0 -> 2 s per GB.
    graph = Graph.from_edges([10.0, 10.0], [0.0, 0.0], [(0, 1)], param_bytes=[2e9, 0.0])
    small = dataclasses.replace(CLUSTER, memory=1e9)
    env, env_params = _env(graphs=[prepare("g", graph)], cluster=small)
    state, _ = env.reset(jax.random.key(0), env_params)
    assert float(state.runtime) == pytest.approx(20e-6 + 2.0, rel=1e-6)
    capped = dataclasses.replace(RAW, memory_penalty_cap=0.5)
    env, env_params = _env(capped, graphs=[prepare("g", graph)], cluster=small)
    state, _ = env.reset(jax.random.key(0), env_params)
    assert float(state.runtime) == pytest.approx(20e-6 + 0.5, rel=1e-6)


def test_action_mask_forbids_devices_the_node_would_overflow():
    # Three 0.6 GB nodes, 1 GB devices: with a and c on device 0, b must go to device 1.
    graph = Graph.from_edges([1.0] * 3, [0.0] * 3, [(0, 1), (1, 2)], param_bytes=[6e8] * 3)
    cluster = dataclasses.replace(CLUSTER, memory=1e9)
    config = dataclasses.replace(RAW, mask_out_of_memory=True, initial_placement="fixed")
    env, env_params = _env(config, graphs=[prepare("g", graph)], cluster=cluster)
    state, obs = env.reset(jax.random.key(0), env_params)
    state = dataclasses.replace(state, placement=jnp.array([0, 0, 0, 0, 0, 0, 0, 0]))
    obs = env.observe(dataclasses.replace(state, t=jnp.int32(1)), env_params)  # current node b
    np.testing.assert_array_equal(obs.action_mask, [False, True])
    unmasked, _ = _env(
        dataclasses.replace(config, mask_out_of_memory=False),
        graphs=[prepare("g", graph)],
        cluster=cluster,
    )
    np.testing.assert_array_equal(unmasked.observe(state, env_params).action_mask, [True, True])


def test_op_graph_rewards_simulate_the_expanded_placement():
    ops = generators.layered(40, seed=2)
    pg = prepare("layered", ops, group_target=10)
    assert pg.graph.n_ops <= 10 and pg.op_graph is ops
    config = dataclasses.replace(RAW, reward_graph="ops", initial_placement="fixed")
    env, env_params = _env(config, graphs=[pg])
    state, _ = _rollout(
        env, env_params, [1, 0] * (pg.graph.n_ops // 2) + [1] * (pg.graph.n_ops % 2)
    )
    group_placement = np.asarray(state.placement[: pg.graph.n_ops])
    expected = simulate(ops, CLUSTER, pg.expand(group_placement)).makespan
    assert float(state.makespan) == pytest.approx(float(expected), rel=1e-5)


def test_a_graph_too_small_to_coarsen_is_its_own_op_graph_for_op_rewards():
    small = generators.layered(8, seed=3)
    pg_small = prepare("small", small, group_target=10)  # 8 nodes: nothing to coarsen
    assert pg_small.op_graph is None
    pg_large = prepare("layered", generators.layered(40, seed=2), group_target=10)
    makespans = {}
    for reward in ("grouped", "ops"):
        config = dataclasses.replace(RAW, reward_graph=reward, initial_placement="fixed")
        env, env_params = _env(config, graphs=[pg_small, pg_large])
        state, _ = _rollout(env, env_params, [1, 0] * 4, graph=0)
        makespans[reward] = float(state.makespan)
        placement = np.asarray(state.placement[: small.n_ops])
    assert makespans["ops"] == makespans["grouped"]
    assert makespans["ops"] == pytest.approx(float(simulate(small, CLUSTER, placement).makespan))


def test_op_graph_rewards_on_graphs_that_were_not_coarsened_are_the_grouped_rewards():
    rewards = {}
    for reward in ("grouped", "ops"):
        env, env_params = _env(dataclasses.replace(RAW, reward_graph=reward))  # the diamond
        rewards[reward] = _rollout(env, env_params, [1, 0, 1, 1])[1]
    np.testing.assert_array_equal(rewards["ops"], rewards["grouped"])


def test_a_graph_larger_than_every_bucket_is_refused():
    with pytest.raises(ValueError, match="larger than every bucket"):
        build_bank([prepare("layered", generators.layered(40))], buckets=(8, 16, 32))


def test_edges_are_padded_to_an_eighth_of_their_power_of_two():
    # Multiples of 1024 / 8 for 706 and 513, of 64 (the smallest step) for 300 and 84; 64 for
    # every count up to 64.
    expected = {706: 768, 513: 640, 512: 512, 300: 320, 84: 128, 64: 64, 9: 64, 1: 64}
    assert {n: fine_bucket(n) for n in expected} == expected
    graph = generators.layered(150)
    assert graph.n_edges == 284  # between 256 and 512: a multiple of 64, not 512
    bank = build_bank([prepare("layered", graph)])
    assert bank.senders.shape[1] == 320 and bank.edge_mask.sum() == 284


def training_step_graph() -> Graph:
    """A weight w (1 µs, 1,000 B), forward f (10 µs, 2,000 B), backward b (20 µs, 1,000 B) and
    update u (5 µs) that reads w and b's gradient; w and u are co-located, with f and b between
    them, so they stay two nodes of the DAG tied to one decision."""
    return Graph.from_edges(
        [1.0, 10.0, 20.0, 5.0], [1000.0, 2000.0, 1000.0, 0.0],
        [(0, 1), (1, 2), (2, 3), (0, 3)], names=["w", "f", "b", "u"],
        colocation=[0, -1, -1, 0],
    )  # fmt: skip


def test_a_co_location_class_is_one_decision_with_hand_derived_rewards():
    # All on device 0: w 0-1, f 1-11, b 11-31, u 31-36 (makespan 36).
    # {w, u} -> 1: w 0-1 on 1, its output to f on bus 1 (1-2), f 2-12, b 12-32 on 0, b's
    # gradient to u on bus 0 (32-33), u 33-38: 38. f -> 1: f 1-11 next to w, f's output to b
    # (11-13), b 13-33, its gradient (33-34), u 34-39: 39. b -> 1: everything on 1: 36.
    pg = prepare("step", training_step_graph())
    assert pg.graph.n_ops == 4 and pg.n_units == 3
    env, env_params = _env(graphs=[pg])
    bank = env_params.bank
    np.testing.assert_array_equal(bank.unit[0, :4], [0, 1, 2, 0])
    np.testing.assert_array_equal(bank.order[0, :3], [0, 1, 2])
    state, obs = env.reset(jax.random.key(0), env_params)
    assert float(state.makespan) == pytest.approx(36.0)
    expected = [
        ([1, 0, 0, 1], 38.0, [True, False, False, True], [False, True, True, False]),
        ([1, 1, 0, 1], 39.0, [False, True, False, False], [True, False, False, False]),
        ([1, 1, 1, 1], 36.0, [False, False, True, False], [True, True, False, False]),
    ]
    before = 36.0
    for step, (placement, makespan, current, ancestors) in enumerate(expected):
        assert int(obs.unit) == step
        np.testing.assert_array_equal(obs.current[:4], current)
        np.testing.assert_array_equal(obs.features[:4, 3], current)  # the current-unit flag
        np.testing.assert_array_equal(obs.ancestors[:4], ancestors)
        state, obs, reward, done = env.step(KEY, state, jnp.int32(1), env_params)
        np.testing.assert_array_equal(state.placement[:4], placement)
        assert float(state.makespan) == pytest.approx(makespan, rel=1e-6)
        assert float(reward) == pytest.approx((before - makespan) * 1e-6, rel=1e-5)
        assert bool(done) == (step == 2)
        before = makespan
    # f and b lie between w and u: they are both ancestors and descendants of that unit.
    first = env.observe(dataclasses.replace(state, t=jnp.int32(0)), env_params)
    np.testing.assert_array_equal(first.descendants[:4], [False, True, True, False])
    second = env.observe(dataclasses.replace(state, t=jnp.int32(1)), env_params)
    np.testing.assert_array_equal(second.features[:4, 2], [1, 0, 0, 1])  # one decision placed


def test_random_initial_placements_keep_tied_nodes_together():
    config = dataclasses.replace(RAW, initial_placement="random")
    env, env_params = _env(config, graphs=[prepare("step", training_step_graph())])
    for seed in range(8):
        state, _ = env.reset(jax.random.key(seed), env_params)
        assert int(state.placement[0]) == int(state.placement[3])


def test_the_memory_mask_counts_a_whole_unit():
    # w and u hold 600 B of parameters each: the unit needs 1,600 + 600 B with outputs, which
    # does not fit next to f (2,000 B) and b (1,000 B) on a 4,000 B device, but fits alone.
    graph = training_step_graph()
    graph = dataclasses.replace(graph, param_bytes=np.array([600.0, 0.0, 0.0, 600.0]))
    cluster = dataclasses.replace(CLUSTER, memory=4000.0)
    config = dataclasses.replace(RAW, mask_out_of_memory=True)
    env, env_params = _env(config, graphs=[prepare("step", graph)], cluster=cluster)
    _, obs = env.reset(jax.random.key(0), env_params)
    np.testing.assert_array_equal(obs.action_mask, [False, True])
