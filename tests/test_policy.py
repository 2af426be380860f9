"""The policy network: padding invariance, the two message-passing schedules, the
no-message-passing variant, masks, and no retracing across graphs of one bucket."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax import Cluster
from placeto_jax.config import EnvConfig, PolicyConfig
from placeto_jax.env import PlacetoEnv, build_bank, prepare
from placeto_jax.graphs import generators
from placeto_jax.nn import PlacetoPolicy
from placeto_jax.nn.graph_ops import neighbour_sum

CLUSTER = Cluster.preset("placeto-k80", 3)
ENV = PlacetoEnv(EnvConfig(initial_placement="fixed"), 3)


RESET, STEP = jax.jit(ENV.reset), jax.jit(ENV.step)


def _observations(graphs, buckets=None, steps=3):
    bank = build_bank(graphs, buckets)
    env_params = ENV.env_params(bank, CLUSTER)
    out = []
    for g in range(len(graphs)):
        state, obs = RESET(jax.random.key(0), env_params.on_graph(g))
        for t in range(steps):
            out.append(obs)
            state, obs, _, _ = STEP(jax.random.key(0), state, jnp.int32(t % 3), env_params)
    return bank, out


def _policy(bank, **overrides) -> PlacetoPolicy:
    config = dataclasses.replace(PolicyConfig(rounds=3), **overrides)
    return PlacetoPolicy(config, 3, ENV.n_features, bank.max_level)


def test_neighbour_sums_by_hand():
    # edges 0->2, 1->2, 2->3 and one padding edge (mask False) that must add nothing
    senders, receivers = jnp.array([0, 1, 2, 3]), jnp.array([2, 2, 3, 0])
    mask = jnp.array([True, True, True, False])
    x = jnp.array([[1.0], [2.0], [4.0], [8.0]])
    fwd = neighbour_sum(x, senders, receivers, mask, "forward")
    bwd = neighbour_sum(x, senders, receivers, mask, "backward")
    np.testing.assert_array_equal(fwd[:, 0], [0, 0, 3, 4])  # sums over parents
    np.testing.assert_array_equal(bwd[:, 0], [4, 4, 8, 0])  # sums over children
    with pytest.raises(ValueError, match="direction"):
        neighbour_sum(x, senders, receivers, mask, "sideways")


@pytest.mark.parametrize(
    "schedule", [pytest.param("radial", marks=pytest.mark.slow), "sweep", "none"]
)
def test_logits_do_not_depend_on_padding(schedule):
    graph = [prepare("cnn", generators.branchy_cnn(2, seed=1))]
    bank_small, small = _observations(graph)
    _, large = _observations(graph, buckets=(bank_small.n_pad * 4,))
    policy = _policy(bank_small, message_passing=schedule, per_device_parallel=True)
    params = policy.init(jax.random.key(1), small[0])
    apply = jax.jit(policy.apply)
    for a, b in zip(small, large, strict=True):
        np.testing.assert_allclose(apply(params, a), apply(params, b), rtol=2e-5, atol=1e-7)


def test_radial_rounds_beyond_the_depth_equal_the_sweep():
    # On a DAG, k synchronous rounds with k > the longest path reach the sweep's fixed point.
    graph = [prepare("cnn", generators.branchy_cnn(2, seed=1))]
    bank, observations = _observations(graph)
    radial = _policy(bank, message_passing="radial", rounds=bank.max_level + 1)
    sweep = _policy(bank, message_passing="sweep")
    short = _policy(bank, message_passing="radial", rounds=1)
    params = radial.init(jax.random.key(2), observations[0])
    for obs in observations:
        np.testing.assert_allclose(
            radial.apply(params, obs), sweep.apply(params, obs), rtol=1e-5, atol=1e-7
        )
    assert not np.allclose(
        short.apply(params, observations[0]), sweep.apply(params, observations[0])
    )


def test_initial_policy_is_close_to_uniform_and_masks_devices():
    graph = [prepare("layered", generators.layered(30, seed=3))]
    bank, observations = _observations(graph)
    policy = _policy(bank)
    params = policy.init(jax.random.key(3), observations[0])
    probs = jax.nn.softmax(policy.apply(params, observations[0]))
    np.testing.assert_allclose(probs, 1 / 3, atol=0.02)
    masked = observations[0]._replace(action_mask=jnp.array([True, False, True]))
    assert float(jax.nn.softmax(policy.apply(params, masked))[1]) == 0.0


def test_no_message_passing_variant_has_fewer_parameters():
    graph = [prepare("layered", generators.layered(30, seed=3))]
    bank, observations = _observations(graph)
    count = {
        mp: sum(
            x.size
            for x in jax.tree.leaves(
                _policy(bank, message_passing=mp).init(jax.random.key(0), observations[0])
            )
        )
        for mp in ("radial", "none")
    }
    assert count["none"] < count["radial"]


def test_one_compilation_serves_every_graph_of_a_bucket():
    graphs = [prepare(f"l{s}", generators.layered(24 + s, seed=s)) for s in range(3)]
    bank, observations = _observations(graphs, buckets=(32,), steps=1)
    policy = _policy(bank)
    params = policy.init(jax.random.key(0), observations[0])

    @jax.jit
    @chex.assert_max_traces(n=1)
    def logits(p, obs):
        return policy.apply(p, obs)

    results = [logits(params, obs) for obs in observations]
    assert len({tuple(np.asarray(r).round(6)) for r in results}) == 3  # different graphs
