"""`rl.train.compiled_run`: a run kept for a bank of the same static shape is reused with another
bank as data, and gives what a fresh run gives."""

from __future__ import annotations

import jax
import numpy as np

from placeto_jax import Cluster
from placeto_jax.config import Config, EnvConfig, PolicyConfig
from placeto_jax.env.bank import build_bank, prepare
from placeto_jax.env.start import with_start
from placeto_jax.graphs import generators
from placeto_jax.rl import train as train_module
from placeto_jax.rl.evaluate import place_with
from placeto_jax.rl.train import compiled_run, forget_compiled_runs, make_train

CLUSTER = Cluster.preset("placeto-k80", 2)
CONFIG = Config(n_devices=2, policy=PolicyConfig(rounds=1))


def _started(seed: int):
    """layered:20 from a random start drawn with `seed` (the same shape for every seed)."""
    start = np.random.default_rng(seed).integers(0, 2, 20)
    return with_start(prepare("g", generators.layered(20, seed=0)), start, "file", 2)


def test_a_kept_run_is_reused_for_a_bank_of_the_same_shape_and_gives_a_fresh_runs_output():
    forget_compiled_runs()
    config = Config(n_devices=2, policy=PolicyConfig(rounds=1),
                    env=EnvConfig(initial_placement="given"))  # fmt: skip
    first, second = build_bank([_started(1)]), build_bank([_started(2)])
    run, _ = compiled_run(config, first, CLUSTER)
    again, env_params = compiled_run(config, second, CLUSTER)
    assert again is run  # reused: the programs take the bank as data
    np.testing.assert_array_equal(np.asarray(env_params.bank.start), second.start)
    params = run.init(jax.random.key(3), run.env_params).params
    fresh = make_train(config, second, CLUSTER)
    (reused,) = place_with(run, params, env_params, [_started(2)], CLUSTER)
    (expected,) = place_with(fresh, params, fresh.env_params, [_started(2)], CLUSTER)
    np.testing.assert_array_equal(reused.placement, expected.placement)
    assert reused.makespan == expected.makespan and reused.start == expected.start
    # another static shape (another config) builds its own run; the oldest is dropped past
    # RUNS_KEPT
    other, _ = compiled_run(CONFIG, build_bank([prepare("g", generators.layered(20))]), CLUSTER)
    assert other is not run
    for seed in range(train_module.RUNS_KEPT):
        bank = build_bank([prepare("g", generators.layered(20 + 8 * (seed + 1)))])
        compiled_run(CONFIG, bank, CLUSTER)
    assert compiled_run(config, first, CLUSTER)[0] is not run
    forget_compiled_runs()
