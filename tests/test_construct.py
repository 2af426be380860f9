"""The constructive placement MDP (`env/construct*.py`), its policy and its host loop: the list
schedule by hand and against `placers.timeline.Timeline`, co-location and memory in episodes,
device equivariance, and placing (evaluations, exact scores)."""

from __future__ import annotations

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import pipeline as pipeline_module
from placeto_jax.cluster import Cluster
from placeto_jax.config import apply, make_config, make_pipeline
from placeto_jax.env import construct as env
from placeto_jax.env.construct_graph import Padding, build
from placeto_jax.graphs.core import Graph
from placeto_jax.placers import PlacerResult
from placeto_jax.placers.guided import Units
from placeto_jax.placers.timeline import Timeline
from placeto_jax.reproduce import construct as construct_runs
from placeto_jax.rl import construct as device
from placeto_jax.rl import construct_loop as loop
from placeto_jax.sim.api import simulate
from placeto_jax.stages.teachers import (
    FALLBACK,
    TEACHERS,
    best_teacher,
    searched_from,
    teachers,
)
from randgraphs import random_case

CLUSTER = Cluster.preset("placeto-k80", 2)  # delta1 5.7 µs, delta2 25 µs, 7,600 bytes/µs


def _fork() -> Graph:
    """a (100 µs, 76,000 bytes: a 10 µs transfer) feeds b (50 µs) and c (30 µs)."""
    return Graph.from_edges(
        cost=[100.0, 50.0, 30.0], out_bytes=[76_000.0, 8.0, 8.0], edges=[(0, 1), (0, 2)]
    )


def _estimate(graph: Graph, cluster: Cluster, placement: np.ndarray) -> float:
    built = build("g", graph, cluster)
    arrays = env.GraphArrays.stack([built]).at(0)
    by_position = jnp.asarray(built.by_position(placement))
    return float(env.estimated_makespan(arrays, env.Machine.of(cluster), by_position))


def test_the_list_schedule_of_a_fork_by_hand():
    # a on 0: 0-100, device 0 free at 105.7. b on 1: a's output leaves bus 0 at 100, arrives
    # at 110; b runs 110-160. c on 0: a is local (100), device 0 free at 105.7: 105.7-135.7.
    # Makespan 160. In visiting order (upward rank): a, b (rank 50 + 10), c.
    graph = _fork()
    built = build("g", graph, CLUSTER)
    np.testing.assert_array_equal(built.op_index, [0, 1, 2])
    assert _estimate(graph, CLUSTER, np.array([0, 1, 0])) == pytest.approx(160.0)
    # All on device 0: a 0-100, b 105.7-155.7, c 161.4-191.4.
    assert _estimate(graph, CLUSTER, np.array([0, 0, 0])) == pytest.approx(191.4)


def test_the_observation_of_the_last_op_of_the_fork_by_hand():
    graph = _fork()
    built = build("g", graph, CLUSTER)
    g = env.GraphArrays.stack([built]).at(0)
    machine = env.Machine.of(CLUSTER)
    s = env.Schedule.empty(g, 2)
    for t, d in [(0, 0), (1, 1)]:
        s = env.commit(g, machine, s, jnp.asarray(t), env.look(g, machine, s, jnp.asarray(t)), d)
    seen = env.look(g, machine, s, jnp.asarray(2))
    scale = built.scale  # (180 + 3 x 5.7) / 2
    assert scale == pytest.approx((180 + 3 * 5.7) / 2)
    f = np.asarray(seen.features)
    np.testing.assert_allclose(f[:, 0] * scale, [100.0, 110.0], rtol=1e-6)  # inputs there
    np.testing.assert_allclose(f[:, 1] * scale, [105.7, 165.7], rtol=1e-6)  # device free
    np.testing.assert_allclose(f[:, 2] * scale, [105.7, 165.7], rtol=1e-6)  # earliest start
    np.testing.assert_allclose(f[:, 5], [1.0, 0.0])  # a's bytes are on device 0
    np.testing.assert_allclose(f[:, 6], [0.0, 0.0])  # a's output was already sent
    np.testing.assert_allclose(f[:, 7] * scale, [100.0, 50.0], rtol=1e-6)  # busy time
    np.testing.assert_allclose(f[:, 10], [0.0, 1.0])  # b (position 1) is on device 1
    np.testing.assert_allclose(np.asarray(seen.finish), [135.7, 195.7], rtol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_the_list_schedule_matches_the_timeline_on_random_forests(seed):
    # With one parent per op a step sends at most one new transfer, where `Timeline.probe`
    # and the episode's schedule agree exactly; ops committed in the visiting order.
    rng = np.random.default_rng(seed)
    n = 30
    parent = [int(rng.integers(0, v)) if v and rng.random() < 0.85 else -1 for v in range(n)]
    graph = Graph.from_edges(
        cost=rng.uniform(0, 200, n).round(1),
        out_bytes=rng.uniform(0, 4e5, n).round(),
        edges=[(p, v) for v, p in enumerate(parent) if p >= 0],
    )
    cluster = Cluster.preset("placeto-k80", 3)
    placement = rng.integers(0, 3, n)
    timeline = Timeline(graph, cluster)
    for v in build("g", graph, cluster).op_index.tolist():
        d = int(placement[v])
        start, transfers = timeline.probe(v, d)
        timeline.commit(v, d, start, transfers)
    expected = timeline.schedule().makespan
    assert _estimate(graph, cluster, placement) == pytest.approx(expected, rel=1e-5)


def _colocated() -> Graph:
    """A training step: weight w, forward f, backward b, update u; w and u share a device."""
    return Graph.from_edges(
        cost=[1.0, 100.0, 100.0, 1.0],
        out_bytes=[8e3, 8e3, 8e3, 8e3],
        edges=[(0, 1), (1, 2), (0, 2), (2, 3), (0, 3)],
        colocation=[0, -1, -1, 0],
    )


def _episodes(graph, cluster, choose_fn, n=1):
    built = build("g", graph, cluster)
    g = env.GraphArrays.stack([built]).at(0)
    keys = jax.random.split(jax.random.key(0), n)
    out = jax.vmap(lambda k: env.rollout(g, env.Machine.of(cluster), choose_fn, k))(keys)
    return built, out


def test_a_co_location_class_is_one_decision_and_its_members_follow_the_leader():
    graph = _colocated()

    def last_device(t, features, allowed, noise):  # always the highest allowed device
        return jnp.max(jnp.where(allowed, jnp.arange(allowed.shape[0]), -1))

    built, out = _episodes(graph, CLUSTER, last_device)
    placement = built.placement(np.asarray(out.device[0]))
    assert placement.tolist() == [1, 1, 1, 1]
    decisions = np.asarray(out.decision[0])[: graph.n_ops]
    leader_of = {v: i for i, v in enumerate(built.op_index.tolist())}
    assert decisions[leader_of[3]] == 0 and decisions[leader_of[0]] == 1
    assert decisions.sum() == 3


def test_a_device_without_room_is_not_allowed_unless_none_has_room():
    cluster = Cluster.preset("placeto-k80", 2, memory=(20e3, 1e9))
    graph = Graph.from_edges(cost=[10.0, 10.0], out_bytes=[15e3, 15e3], edges=[(0, 1)])

    def first_allowed(t, features, allowed, noise):
        return jnp.argmax(allowed)

    _, out = _episodes(graph, cluster, first_allowed)
    allowed = np.asarray(out.allowed[0])[:2]
    np.testing.assert_array_equal(allowed, [[True, True], [False, True]])  # 30 kB > 20 kB
    tight = Cluster.preset("placeto-k80", 2, memory=(1e3, 1e3))
    _, out = _episodes(graph, tight, first_allowed)
    np.testing.assert_array_equal(np.asarray(out.allowed[0])[:2], [[True, True]] * 2)


def test_memory_freed_by_the_simulator_is_not_held_against_a_device():
    # Three independent ops of 8 kB outputs and 4 kB weights: one after another on device 0,
    # each output freed when its op ends, so 12 kB + 8 kB = 20 kB at most (the simulator's
    # peak); parameters and outputs summed (the observed bound, 36 kB) would forbid the third.
    cluster = Cluster.preset("placeto-k80", 2, memory=(20e3, 1e9))
    graph = Graph.from_edges(cost=[10.0] * 3, out_bytes=[8e3] * 3, edges=np.zeros((0, 2), int),
                             param_bytes=[4e3] * 3)  # fmt: skip

    def first_allowed(t, features, allowed, noise):
        return jnp.argmax(allowed)

    built, out = _episodes(graph, cluster, first_allowed)
    np.testing.assert_array_equal(np.asarray(out.allowed[0])[:3], [[True, True]] * 3)
    np.testing.assert_array_equal(built.placement(np.asarray(out.device[0])), [0, 0, 0])
    assert float(simulate(graph, cluster, np.zeros(3, int)).peak_memory[0]) == 20e3
    memory = np.asarray(out.features[0])[:3, 0, 9]  # the observed bound over capacity
    np.testing.assert_allclose(memory, [12e3 / 20e3, 24e3 / 20e3, 36e3 / 20e3], rtol=1e-6)
    heavy = Graph.from_edges(
        cost=[10.0] * 3, out_bytes=[8e3] * 3, edges=np.zeros((0, 2), int), param_bytes=[6e3] * 3
    )  # 6 + 6 + 6 + 8 = 26 kB: surely over
    _, out = _episodes(heavy, cluster, first_allowed)
    np.testing.assert_array_equal(
        np.asarray(out.allowed[0])[:3], [[True, True]] * 2 + [[False, True]]
    )


def _committed(graph, cluster, placement) -> tuple:
    """The schedule after every op of `graph` is committed to `placement` in visiting order."""
    built = build("g", graph, cluster)
    g, machine = env.GraphArrays.stack([built]).at(0), env.Machine.of(cluster)
    s = env.Schedule.empty(g, cluster.n_devices)
    for t, d in enumerate(built.by_position(placement)[: graph.n_ops]):
        s = env.commit(g, machine, s, jnp.asarray(t), env.look(g, machine, s, jnp.asarray(t)), d)
    return built, g, machine, s


def test_the_live_memory_of_the_diamond_by_hand():
    # a (76 kB) feeds b (on device 1) and c (on 0); b and c (7.6 kB each) feed d (on 0). Visiting
    # order a, b, c, d. a: 76 kB on 0. b: its output and a's copy on 1, 83.6 kB. c: 83.6 kB on
    # 0, and a's last consumer is placed: a and its copy freed (7.6 kB on each). d: b's copy on
    # 0 (15.2 kB), then b, its copy and c freed. Peaks 83.6 kB on both: the simulator's.
    graph = Graph.from_edges(cost=[100.0, 50.0, 30.0, 10.0], out_bytes=[76e3, 7.6e3, 7.6e3, 0.0],
                             edges=[(0, 1), (0, 2), (1, 3), (2, 3)])  # fmt: skip
    placement = np.array([0, 1, 0, 0])
    built, _, _, s = _committed(graph, CLUSTER, placement)
    np.testing.assert_array_equal(built.op_index, [0, 1, 2, 3])
    np.testing.assert_allclose(np.asarray(s.peak), [83.6e3, 83.6e3], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s.live), [0.0, 0.0], atol=1e-3)
    assert np.asarray(s.pending)[:4].tolist() == [0, 0, 0, 0]
    simulated = simulate(graph, CLUSTER, placement).peak_memory
    np.testing.assert_allclose(np.asarray(s.peak), np.asarray(simulated), rtol=1e-6)


def _reference_peak(graph: Graph, built, placement: np.ndarray, n_devices: int) -> np.ndarray:
    """The live-memory estimate of `env.construct` written out op by op (NumPy, no padding)."""
    children = np.bincount(graph.edges[:, 0], minlength=graph.n_ops)
    parents = [graph.edges[graph.edges[:, 1] == v, 0] for v in range(graph.n_ops)]
    pending, copied = children.copy(), np.zeros((graph.n_ops, n_devices), bool)
    live, peak = np.zeros(n_devices), np.zeros(n_devices)
    for v in built.op_index:
        d, size = placement[v], graph.out_bytes
        live[d] += size[v]
        for p in parents[v]:
            if placement[p] != d and not copied[p, d]:
                live[d], copied[p, d] = live[d] + size[p], True
        peak = np.maximum(peak, live)
        for p in parents[v]:
            pending[p] -= 1
            if pending[p] == 0:
                live[placement[p]] -= size[p]
                live -= size[p] * copied[p]
        if children[v] == 0:
            live[d] -= size[v]
    return peak


@pytest.mark.parametrize("seed", range(6))
def test_the_live_memory_matches_a_reference_on_random_graphs(seed):
    graph, cluster, placements = random_case(seed)
    built, _, _, s = _committed(graph, cluster, placements[0])
    expected = _reference_peak(graph, built, placements[0], cluster.n_devices)
    np.testing.assert_allclose(np.asarray(s.peak), expected, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(s.live), 0.0, atol=1.0)  # everything freed


def test_a_device_whose_live_outputs_leave_no_room_is_not_allowed():
    # p and q (50 kB outputs) both feed r. With p on device 0 and r unplaced, p's output is
    # live there, so q on 0 would hold 100 kB > 80 kB (the simulator's peak for p, q, r on 0);
    # the single-op bound (50 kB) allows it. A declared start keeps its device allowed, and
    # when no device has room by the estimate, the single-op bound decides again, or the
    # declared start's device alone where the start fits memory.
    graph = Graph.from_edges(cost=[10.0, 10.0, 10.0], out_bytes=[50e3, 50e3, 0.0],
                             edges=[(0, 2), (1, 2)])  # fmt: skip
    cluster = Cluster.preset("placeto-k80", 2, memory=80e3)
    assert float(simulate(graph, cluster, np.zeros(3, int)).peak_memory[0]) == 100e3
    built = build("g", graph, cluster)
    q = int(np.flatnonzero(built.op_index == 1)[0])
    assert q == 1  # visiting order p, q, r
    g, machine = env.GraphArrays.stack([built]).at(0), env.Machine.of(cluster)
    s = env.Schedule.empty(g, 2)
    s = env.commit(g, machine, s, jnp.asarray(0), env.look(g, machine, s, jnp.asarray(0)), 0)
    np.testing.assert_array_equal(np.asarray(env.look(g, machine, s, jnp.asarray(q)).allowed),
                                  [False, True])  # fmt: skip
    hinted = dataclasses.replace(g, hint=g.hint.at[q].set(0))
    np.testing.assert_array_equal(np.asarray(env.look(hinted, machine, s, jnp.asarray(q)).allowed),
                                  [True, True])  # fmt: skip
    s = env.commit(g, machine, s, jnp.asarray(q), env.look(g, machine, s, jnp.asarray(q)), 1)
    full = dataclasses.replace(s, peak=jnp.full(2, 80e3, jnp.float32))  # no room by the estimate
    np.testing.assert_array_equal(np.asarray(env.look(g, machine, full, jnp.asarray(2)).allowed),
                                  [True, True])  # fmt: skip
    hinted = dataclasses.replace(g, hint=g.hint.at[2].set(1))  # a hint that overflows: the same
    np.testing.assert_array_equal(np.asarray(env.look(hinted, machine, full, 2).allowed),
                                  [True, True])  # fmt: skip
    fitting = dataclasses.replace(hinted, hint_fits=jnp.asarray(True))  # its device alone
    np.testing.assert_array_equal(np.asarray(env.look(fitting, machine, full, 2).allowed),
                                  [False, True])  # fmt: skip


def test_a_device_keeps_room_for_the_parameters_the_hint_puts_on_it_later():
    # Weights a, b (50 kB) and c (100 kB), visited in that order, 100 kB per device; the hint
    # puts a and b on device 0, c on 1. A chooser that balances busy time puts a on 0, b on 1
    # and then has no room for c (150 kB either way). With c's 100 kB reserved on device 1, a
    # or b there would need 150 kB, so both stay on 0 and the episode finishes the hint.
    graph = Graph.from_edges(cost=[10.0] * 3, out_bytes=[0.0] * 3, edges=np.zeros((0, 2), int),
                             param_bytes=[50e3, 50e3, 100e3])  # fmt: skip
    cluster = Cluster.preset("placeto-k80", 2, memory=100e3)
    assert build("g", graph, cluster).op_index.tolist() == [0, 1, 2]

    def least_busy(t, features, allowed, noise):
        return jnp.argmin(jnp.where(allowed, features[:, 7], jnp.inf))

    _, out = _episodes(graph, cluster, least_busy)
    assert np.asarray(out.device[0])[:3].tolist() == [0, 1, 0]  # unhinted: c overflows
    assert not build("g", graph, cluster, hint=np.zeros(3, int)).hint_fits

    def hinted(reserve: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(allowed [3, 2], placement [3], peak memory [2]) of the chooser given the hint."""
        built = build("g", graph, cluster, hint=np.array([0, 0, 1]), reserve=reserve)
        assert built.hint_fits
        g = env.GraphArrays.stack([built]).at(0)
        out = env.rollout(g, env.Machine.of(cluster), least_busy, jax.random.key(0))
        placement = built.placement(np.asarray(out.device))
        peak = simulate(graph, cluster, placement).peak_memory
        return np.asarray(out.allowed)[:3], placement, peak

    allowed, placement, peak = hinted(reserve=True)
    np.testing.assert_array_equal(allowed, [[True, False], [True, False], [False, True]])
    assert placement.tolist() == [0, 0, 1] and np.all(peak <= 100e3)
    # Without the reservation (`env.construct_reserve=false`) a and b may go anywhere; c has
    # no room by the estimate, and the hint fits, so its device alone: c overflows device 1.
    allowed, placement, peak = hinted(reserve=False)
    np.testing.assert_array_equal(allowed, [[True, True], [True, True], [False, True]])
    assert placement.tolist() == [0, 1, 1]
    np.testing.assert_allclose(peak, [50e3, 150e3])


def test_the_policy_is_equivariant_under_renaming_devices():
    config = _config()
    bank = loop.Bank.of([("g", _fork())], CLUSTER)
    learner = loop.learner_of(config)
    params = jax.tree.map(lambda p: p * 50.0, loop.initial_state(config, bank).params)
    embedding = learner.embed(params, bank.arrays.at(0))[0]
    features = jax.random.normal(jax.random.key(2), (3, env.N_DYNAMIC))
    allowed = jnp.ones(3, bool)
    logits = learner.logits(params, embedding, features, allowed)
    permuted = learner.logits(params, embedding, features[jnp.array([2, 0, 1])], allowed)
    np.testing.assert_allclose(permuted, logits[jnp.array([2, 0, 1])], rtol=1e-5, atol=1e-6)
    assert float(logits.max() - logits.min()) > 1e-3


def test_a_drawn_step_is_the_draw_of_jax_random_categorical():
    """The noise drawn before the scan gives, at each position t, the device that
    `jax.random.categorical(fold_in(key, t), ...)` draws (the reference), for the policy's
    draws at a temperature and for the uniform control over the allowed devices."""
    key = jax.random.key(3)
    logits = jnp.asarray([0.3, -1.2, 2.0, device.MASKED])  # device 3 not allowed
    noise = env.gumbel_noise(key, 64, 4)
    for mode, reference in (
        ("sample", logits / 0.6),
        ("uniform", jnp.where(logits > device.MASKED / 2, 0.0, device.MASKED)),
    ):
        drawn = [int(device.choose(mode, logits, noise[t], 0.6)) for t in range(64)]
        expected = [
            int(jax.random.categorical(jax.random.fold_in(key, t), reference)) for t in range(64)
        ]
        assert drawn == expected
        assert 3 not in drawn and len(set(drawn)) > 1  # never the masked device; not constant


def test_episodes_are_scored_by_exact_simulation_and_keep_co_location():
    config = _config()
    graph = _colocated()
    bank = loop.Bank.of([("g", graph)], CLUSTER)
    params = loop.initial_state(config, bank).params
    rows = loop.candidates(config, params, bank, 0, jax.random.key(3), samples=5)
    assert rows.shape == (6, 4)
    np.testing.assert_array_equal(rows[:, 0], rows[:, 3])  # w and its update together
    by_position = np.stack([bank.built[0].by_position(r) for r in rows])[None]
    scored = loop.scores(bank, CLUSTER, [0], by_position)[0]
    expected = [float(simulate(graph, CLUSTER, r).makespan) for r in rows]
    np.testing.assert_allclose(scored, expected, rtol=1e-12)
    uniform = loop.candidates(config, params, bank, 0, jax.random.key(3), 63, mode="uniform")
    assert len({tuple(r) for r in uniform.tolist()}) > 1  # random, yet co-located
    np.testing.assert_array_equal(uniform[:, 0], uniform[:, 3])


def test_imitation_learns_a_teachers_placement(tmp_path):
    # The teacher splits the two chains over the two devices; after imitation the greedy
    # episode places them as the teacher does (devices named in order of first use).
    config = apply(_config(imitation=60), {"train.learning_rate": 1e-2})
    named = [("g", _two_chains())]
    state = loop.train_in(
        config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, config.seed), progress=False
    )
    losses = [
        json.loads(line)["train/imitation_loss"] for line in (tmp_path / "metrics.jsonl").open()
    ]
    assert losses[-1] < 0.5 * losses[0]
    bank = loop.Bank.of(named, CLUSTER)
    teacher, _, reference = loop.teacher_rows(bank, CLUSTER, teachers(named, CLUSTER, 0))
    greedy = loop.candidates(config, state.params, bank, 0, jax.random.key(0))[0]
    np.testing.assert_array_equal(bank.built[0].by_position(greedy)[:6], teacher[0, :6])
    assert float(simulate(_two_chains(), CLUSTER, greedy).makespan) == pytest.approx(reference[0])


def test_padding_that_cannot_hold_a_graph_is_refused():
    with pytest.raises(ValueError, match="exceed the padding"):
        build("g", _fork(), CLUSTER, Padding(n_pad=2, k_pad=4, e_pad=64))


def _two_chains() -> Graph:
    return Graph.from_edges(
        cost=[100.0] * 6, out_bytes=[8e5] * 6, edges=[(0, 1), (1, 2), (3, 4), (4, 5)]
    )


def _config(**train):
    settings = [f"train.{k}={v}" for k, v in train.items()]
    return make_config("construct", ["policy.width=16", "policy.rounds=1", *settings],
                       n_devices=2)  # fmt: skip


def test_a_killed_run_resumes_to_the_uninterrupted_parameters(tmp_path):
    config = _config(imitation=4, iterations=3, episodes=2, graphs_per_update=1)
    config = apply(config, {"run.checkpoint_every": 2})
    named = [("a", _two_chains()), ("b", _fork())]
    taught = teachers(named, CLUSTER, config.seed)

    def train(workdir, stop_at=None):
        return loop.train_in(config, named, CLUSTER, tmp_path / workdir, taught, False, stop_at)

    whole = train("whole")
    train("cut", stop_at=5)
    resumed = train("cut")
    assert int(resumed.iteration) == 7
    chex.assert_trees_all_equal(resumed.params, whole.params)
    records = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").open()]
    assert [r["iteration"] for r in records] == list(range(1, 8))
    assert all("train/imitation_loss" in r for r in records[:4])
    assert all("train/final_runtime" in r for r in records[4:])


def test_zero_updates_write_the_untrained_policy_as_a_checkpoint(tmp_path):
    config = _config(imitation=0, iterations=0)
    named = [("a", _two_chains())]
    loop.train_in(
        config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, config.seed), progress=False
    )
    restored = pj.Policy.load(str(tmp_path))
    fresh = loop.initial_state(config, loop.Bank.of(named, CLUSTER)).params
    chex.assert_trees_all_equal(restored.params, fresh)


def test_the_pipeline_places_with_a_construct_policy_alike_alone_and_among_others(tmp_path):
    config = _config(imitation=10)
    graph = _colocated()
    named = [("g", graph)]
    loop.train_in(config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, 0), progress=False)
    policy = pj.Policy.load(str(tmp_path))
    sampled = make_pipeline("sampled")
    alone = pj.place(graph, CLUSTER, sampled, policy, name="g", compare=False)
    others = [("x", _two_chains()), ("g", graph)]
    together = pj.place_many(others, CLUSTER, sampled, policy, compare=False)[1]
    np.testing.assert_array_equal(alone.result.placement, together.result.placement)
    (stage,) = alone.stages
    assert stage.name == "episodes" and 1 <= stage.evaluations <= 17
    assert alone.result.episodes == 17
    simulated = simulate(graph, CLUSTER, alone.result.placement)
    assert alone.result.makespan == pytest.approx(float(simulated.makespan), rel=1e-12)
    with pytest.raises(ValueError, match="construct agent"):
        pj.place(graph, CLUSTER, make_pipeline("search"), policy)


def test_the_uniform_control_is_the_best_of_uniformly_random_episodes(tmp_path):
    """A uniform policy through the pipeline: the best, by exact simulation, of the 1 + 16
    uniformly random episodes that the graph's key draws, whatever its weights (here the
    trained ones); `uniform_random` is the run's untrained weights so marked."""
    graph = Graph.from_edges(
        cost=[100.0, 40.0, 70.0, 10.0] * 6, out_bytes=[8e4] * 24,
        edges=[(i, i + 1) for i in range(23) if i % 4 != 3] + [(3, 4), (11, 20), (7, 16)],
    )  # fmt: skip
    config = _config(imitation=10)
    named = [("g", graph)]
    loop.train_in(config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, 0), progress=False)
    policy = pj.Policy.load(str(tmp_path))
    sampled, key = make_pipeline("sampled"), jax.random.key(5)
    control = pj.place(graph, CLUSTER, sampled, dataclasses.replace(policy, uniform=True), key,
                       compare=False)  # fmt: skip
    graph_key = jax.random.fold_in(key, int(graph.digest[:8], 16))
    rows = loop.candidates(config, policy.params, loop.Bank.of(named, CLUSTER), 0, graph_key,
                           16, sampled.temperature, "uniform")  # fmt: skip
    makespans = [float(simulate(graph, CLUSTER, r).makespan) for r in rows]
    assert len(set(makespans)) > 8  # drawn at random
    np.testing.assert_array_equal(control.result.placement, rows[int(np.argmin(makespans))])
    assert control.result.makespan == pytest.approx(min(makespans), rel=1e-12)
    assert control.result.episodes == 17
    mine = pj.place(graph, CLUSTER, sampled, policy, key, compare=False)
    assert not np.array_equal(mine.result.placement, control.result.placement)
    marked = pipeline_module.uniform_random(policy)
    assert marked.uniform and not policy.uniform
    chex.assert_trees_all_equal(marked.params, pipeline_module.untrained(policy).params)


def test_a_construct_policy_places_on_another_device_count(tmp_path):
    config = _config(imitation=0, iterations=0)  # trained for CLUSTER's 2 devices
    named = [("a", _two_chains())]
    loop.train_in(config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, 0), progress=False)
    three = Cluster.preset("placeto-k80", 3)
    policy = pj.Policy.load(str(tmp_path), devices=3)
    assert policy.config.n_devices == 3 and policy.cluster() == three
    placed = pj.place(_colocated(), three, make_pipeline("sampled"), policy, compare=False)
    assert placed.result.placement.max() <= 2 and placed.result.episodes == 17
    simulated = simulate(_colocated(), three, placed.result.placement)
    assert placed.result.makespan == pytest.approx(float(simulated.makespan), rel=1e-12)


def test_a_hinted_policy_observes_the_best_teacher_and_counts_its_simulations(tmp_path):
    config = apply(_config(imitation=2), {"env.construct_hint": "best"})
    graph = _two_chains()
    run = loop.Run.make(config, [("g", graph)], CLUSTER, teachers([("g", graph)], CLUSTER, 0))
    built = run.bank.built[0]
    np.testing.assert_array_equal(built.hint[:6], np.asarray(run.teacher)[0, :6])
    assert sorted(set(built.hint[:6].tolist())) == [0, 1]  # the chains apart
    g = run.bank.arrays.at(0)
    s = env.Schedule.empty(g, 2)
    seen = env.look(g, run.bank.machine, s, jnp.asarray(0))
    np.testing.assert_array_equal(np.asarray(seen.features)[:, 13], np.eye(2)[built.hint[0]])
    named = [("g", graph)]
    loop.train_in(config, named, CLUSTER, tmp_path, teachers(named, CLUSTER, 0), progress=False)
    placed = pj.place(graph, CLUSTER, make_pipeline("policy"), pj.Policy.load(str(tmp_path)))
    heuristics, episodes = placed.stages
    assert heuristics.name == "heuristics" and episodes.name == "episodes"
    ran = best_teacher(graph, CLUSTER, jax.random.key(0))
    assert heuristics.evaluations == sum(r.evaluations + 1 for r in ran)
    assert heuristics.makespan == pytest.approx(ran[0].makespan)


def test_a_searched_teacher_of_several_passes_counts_each_and_reaches_the_chains_apart():
    # From both chains on device 0, one simulation per op and pass; with 8 passes the search
    # reaches the best placement, the two chains apart (3 x 100 µs + 2 x 5.7 µs each).
    graph = _two_chains()
    single = np.zeros(6, np.int64)
    sim = simulate(graph, CLUSTER, single)
    start = PlacerResult("single", single, float(sim.makespan), np.asarray(sim.peak_memory),
                         True, 0, 0.0)  # fmt: skip
    found = searched_from(graph, CLUSTER, start, jax.random.key(3), passes=8)
    assert found.evaluations == 8 * 6
    apart = simulate(graph, CLUSTER, np.asarray([0, 0, 0, 1, 1, 1]))
    assert found.makespan == pytest.approx(float(apart.makespan)) == pytest.approx(311.4)
    (taught,) = teachers([("g", graph)], CLUSTER, 0, "searched", passes=3)
    (best,) = teachers([("g", graph)], CLUSTER, 0)
    assert taught.evaluations == best.evaluations + 3 * 6
    with pytest.raises(ValueError, match=r"train\.teacher_passes"):
        _config(teacher_passes=3)  # the best heuristic is not searched


def test_the_best_teacher_falls_back_to_fit_fastest_only_when_nothing_fits():
    graph, key = _two_chains(), jax.random.key(0)
    ran = best_teacher(graph, CLUSTER, key)  # 8e5 bytes per op: 12 GB devices hold it all
    assert sorted(r.method for r in ran) == sorted(TEACHERS)
    assert ran[0].makespan == min(r.makespan for r in ran)
    tiny = dataclasses.replace(CLUSTER, memory=1e5)  # under one op's output: nothing fits
    ran = best_teacher(graph, tiny, key)
    assert sorted(r.method for r in ran) == sorted((*TEACHERS, FALLBACK))
    assert not any(r.fits_memory for r in ran)
    again = best_teacher(graph, tiny, key, ran)  # every method already run: none runs again
    assert all(any(r is s for s in ran) for r in again) and again[0] is ran[0]


def test_a_teacher_and_its_declared_start_are_renamed_alike():
    # Visiting order a0 b0 a1 b1 a2 b2 (ops 0 3 1 4 2 5). The start (ops 0-2 on 1, 3-5 on 0)
    # by position is 1 0 1 0 1 0: first use renames 1 -> 0 and 0 -> 1. The teacher moves op 0
    # to device 0 (by position 0 0 1 0 1 0); under the start's renaming 1 1 0 1 0 1, where its
    # own renaming would give 0 0 1 0 1 0 and lose the correspondence with the hint.
    graph = _two_chains()
    start = np.array([1, 1, 1, 0, 0, 0])
    taught = [loop.Teacher(np.array([0, 1, 1, 0, 0, 0]), 1.0, 0, start=start)]
    bank = loop.Bank.of([("g", graph)], CLUSTER)
    teacher, hint, reference = loop.teacher_rows(bank, CLUSTER, taught)
    np.testing.assert_array_equal(hint[0, :6], [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(teacher[0, :6], [1, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(reference, [1.0])


def test_a_searched_teacher_improves_its_start_and_counts_the_pass(tmp_path):
    # Both chains on device 0 (the start) is 6 x 100 µs in a row; one pass of local search
    # keeps only moves that shorten it, one simulation per op (no co-location: 6 units).
    graph = _two_chains()
    single = np.zeros(6, np.int64)
    start_sim = simulate(graph, CLUSTER, single)
    start = PlacerResult("single", single, float(start_sim.makespan),
                         np.asarray(start_sim.peak_memory), True, 0, 0.0)  # fmt: skip
    found = searched_from(graph, CLUSTER, start, jax.random.key(3))
    assert found.evaluations == 6
    units = Units.of_ops(graph)
    cut = searched_from(
        graph, CLUSTER, start, jax.random.key(3), Units(units.of_op, units.order[:2])
    )
    assert cut.evaluations == 2  # a pass cut to the first 2 units (ops 0 and 1 of chain a)
    moved = np.flatnonzero(cut.placement != single)
    assert set(moved.tolist()) <= {0, 1}
    assert found.makespan <= start.makespan
    simulated = simulate(graph, CLUSTER, found.placement)
    assert found.makespan == pytest.approx(float(simulated.makespan))
    (taught,) = teachers([("g", graph)], CLUSTER, 0, "searched")
    (best,) = teachers([("g", graph)], CLUSTER, 0)
    np.testing.assert_array_equal(taught.start, best.placement)
    assert taught.evaluations == best.evaluations + 6 and taught.makespan <= best.makespan
    hinted = {"env.construct_hint": "best", "train.teacher": "searched"}
    config = apply(_config(imitation=2), hinted)
    run = loop.Run.make(config, [("g", graph)], CLUSTER, [taught])
    hint_rows = loop.teacher_rows(run.bank, CLUSTER, [taught])[1]
    np.testing.assert_array_equal(run.bank.built[0].hint[:6], hint_rows[0, :6])


def test_self_imitation_keeps_a_graphs_best_placement_only_when_faster():
    state = loop.ConstructState(
        params={}, opt_state=(), iteration=jnp.zeros((), jnp.int32),
        elite=jnp.zeros((2, 3), jnp.int32), elite_runtime=jnp.asarray([10.0, 10.0]),
    )  # fmt: skip
    devices = np.array([[[1, 1, 1], [2, 2, 2]], [[3, 3, 3], [0, 1, 0]]])  # [G=2, B=2, Np=3]
    runtime = np.array([[12.0, 9.0], [11.0, 10.5]])  # graph 1 drawn first, then graph 0
    kept = loop._kept_best(state, np.array([1, 0]), devices, runtime)
    np.testing.assert_array_equal(kept.elite, [[0, 0, 0], [2, 2, 2]])
    np.testing.assert_allclose(kept.elite_runtime, [10.0, 9.0])


@pytest.mark.parametrize(
    "preset, teacher",
    [("construct", "the best heuristic"),
     ("construct-hinted", "the best heuristic improved by a search pass"),
     ("construct-lookahead", "the best heuristic improved by its lookahead episode")],
)  # fmt: skip
def test_train_with_the_construct_preset_from_the_command_line(tmp_path, capsys, preset, teacher):
    from placeto_jax.cli import main

    argv = ["train", "--graphs", "example:diamond", "--devices", "2", "--preset", preset,
            "--set", "train.imitation=3", "--set", "policy.width=8", "--workdir", str(tmp_path),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"after 3 updates (3 imitating {teacher}, 0 self-imitation)" in out
    assert "example:diamond" in out and "/ best" in out
    # Its own placements: the sampled pipeline's, or with the lookahead `place`'s default (the
    # greedy episode alone): the evaluations column against `eval`'s default pipeline.
    trained = next(line for line in out.splitlines() if line.startswith("example:diamond"))
    assert main(["eval", "--checkpoint", str(tmp_path), "--graphs", "example:diamond"]) == 0
    greedy = capsys.readouterr().out.splitlines()[1]
    evals, greedy_evals = int(trained.split()[2]), int(greedy.split()[2])
    assert evals == greedy_evals if preset == "construct-lookahead" else evals > greedy_evals
    assert main(["eval", "--checkpoint", str(tmp_path), "--graphs", "example:diamond",
                 "--pipeline", "sampled", "--control"]) == 0  # fmt: skip
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert head.split()[-8:] == ["untrained", "ms", "/", "best", "uniform", "ms", "/", "best"]
    assert main(["eval", "--checkpoint", str(tmp_path), "--graphs", "example:diamond",
                 "--pipeline", "sampled", "--control", "--json"]) == 0  # fmt: skip
    (doc,) = json.loads(capsys.readouterr().out)  # the same placements as the table's
    cells = row.split()
    assert float(cells[-4].rstrip("*")) == pytest.approx(
        doc["untrained_makespan_us"] / 1e3, abs=1e-3
    )
    assert float(cells[-2].rstrip("*")) == pytest.approx(doc["uniform_makespan_us"] / 1e3, abs=1e-3)


# ------------------------------------------------------------------------------ the lookahead
def _reference_pass(graph: Graph, cluster: Cluster, built) -> tuple[np.ndarray, list]:
    """The lookahead episode written out on the host with the reference simulator: from the
    hint, each class in visiting order tried on every device (the others where the hint and the
    earlier classes put them), moved to the first best device when strictly better. Returns
    the placement, and per decision the log penalised makespans on each device and the hint's
    device."""
    from placeto_jax.sim.ranking import penalised_makespan
    from placeto_jax.sim.reference import simulate_reference

    def log_runtime(placement):
        sim = simulate_reference(graph, cluster, placement)
        return float(np.log(penalised_makespan(sim.makespan[None], sim.peak_memory[None],
                                               cluster)[0]))  # fmt: skip

    current = built.placement(built.hint)
    now, seen, hinted = log_runtime(current), [], []
    for position in range(built.n_ops):
        if built.leader[position] != position:
            continue
        ops = built.op_index[built.leader[: built.n_ops] == position]
        runtimes = []
        for d in range(cluster.n_devices):
            candidate = current.copy()
            candidate[ops] = d
            runtimes.append(now if d == current[ops[0]] else log_runtime(candidate))
        seen.append(runtimes)
        hinted.append(current[ops[0]])
        best = int(np.argmin(runtimes))
        if runtimes[best] < now:
            current[ops], now = best, runtimes[best]
    return current, np.asarray(seen), np.asarray(hinted)


def _lookahead_case(seed: int):
    """A random graph (a co-location class added to the graph of seed 0), a cluster of 2 to 4
    devices and a random hint that keeps the class together."""
    graph, cluster, _ = random_case(seed, max_ops=24, max_devices=4)
    if cluster.n_devices == 1:
        cluster = Cluster.preset("placeto-k80", 3)
    if seed == 0 and graph.n_ops >= 4:
        classes = np.full(graph.n_ops, -1)
        classes[[0, graph.n_ops - 1]] = 0
        graph = dataclasses.replace(graph, colocation=classes)
    hint = np.random.default_rng(seed).integers(0, cluster.n_devices, graph.n_ops)
    if graph.colocation is not None:
        hint[graph.colocation == 0] = hint[graph.colocation == 0][0]
    return graph, cluster, hint


@pytest.mark.parametrize("seed", range(6))
def test_the_lookahead_episode_matches_a_reference_pass_on_random_graphs(seed):
    graph, cluster, hint = _lookahead_case(seed)
    bank = loop.Bank.of([("g", graph)], cluster, [hint], lookahead=True)
    played = loop.lookahead_episodes(loop.learner_of(_config()), bank, progress=False)
    built = bank.built[0]
    expected, seen, hinted = _reference_pass(graph, cluster, built)
    np.testing.assert_array_equal(built.placement(np.asarray(played.device[0, 0])), expected)
    decisions = np.asarray(played.decision[0, 0])
    features = np.asarray(played.features[0, 0])[decisions][:, :, env.N_DYNAMIC :]
    against_hint = seen - seen[np.arange(len(seen)), hinted][:, None]
    against_best = seen - seen.min(axis=1, keepdims=True)
    np.testing.assert_allclose(features[:, :, 0], np.arcsinh(100 * against_hint), atol=1e-3)
    np.testing.assert_allclose(features[:, :, 1], np.arcsinh(100 * against_best), atol=1e-3)


def test_the_lookahead_runs_only_with_a_hint():
    with pytest.raises(ValueError, match=r"env\.construct_lookahead .*construct_hint=best"):
        make_config("construct", ["env.construct_lookahead=true"])
    with pytest.raises(ValueError, match=r"train\.teacher .*construct_lookahead=true"):
        make_config("construct-hinted", ["train.teacher=lookahead"])
    with pytest.raises(ValueError, match=r"env\.construct_lookahead trains by imitation only"):
        make_config("construct-lookahead", ["train.iterations=1"])
    with pytest.raises(ValueError, match=r"run\.eval_every must be >= 1 \(0: none, for agent"):
        make_config("tiny", ["run.eval_every=0"])
    with pytest.raises(ValueError, match=r"g: the lookahead needs a hint \(env.construct_hint"):
        loop.Bank.of([("g", _colocated())], CLUSTER, lookahead=True)


def test_a_lookahead_episode_counts_a_simulation_per_other_device_and_decision(tmp_path):
    # _colocated on 2 devices: 3 decisions (w and u one class), each simulating the other
    # device, and the hint once: 4. The policy trained on the lookahead teacher places the graph
    # through the pipeline, whose episodes stage counts them beside its one scoring.
    graph, named = _colocated(), [("g", _colocated())]
    config = make_config("construct-lookahead", ["policy.width=8", "policy.rounds=1",
                                                 "train.imitation=2"], n_devices=2)  # fmt: skip
    assert loop.lookahead_evaluations(graph, 2) == 4
    # the teacher's episode and one scoring it, per graph
    assert construct_runs.lookahead_simulations(config, [graph, graph], 2) == 2 * (4 + 1)
    assert (
        construct_runs.lookahead_simulations(apply(config, {"run.eval_every": 1}), [graph], 2)
        == (1 + 2) * 4 + 1
    )  # and 2 evaluations (their scorings are counted apart, `training_simulations`)
    taught = teachers(named, CLUSTER, config.seed, "lookahead")
    run = loop.Run.make(config, named, CLUSTER, taught)
    built = run.bank.built[0]
    expected, _, _ = _reference_pass(graph, CLUSTER, built)
    np.testing.assert_array_equal(built.placement(np.asarray(run.teacher[0])), expected)
    assert run.reference[0] == pytest.approx(float(simulate(graph, CLUSTER, expected).makespan))
    loop.train_in(config, named, CLUSTER, tmp_path, taught, progress=False)
    placed = pj.place(graph, CLUSTER, make_pipeline("policy"), pj.Policy.load(str(tmp_path)))
    assert [s.name for s in placed.stages] == ["heuristics", "episodes"]
    assert placed.stages[1].evaluations == 1 + 4
