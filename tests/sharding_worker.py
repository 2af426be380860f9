"""Run by tests/test_sharding.py in fresh processes (device count and jax.distributed must be set
before JAX starts). Writes the policy parameters after two updates to an .npz file.

  python sharding_worker.py mesh OUT.npz            4 host devices, with and without a mesh
  python sharding_worker.py process I PORT OUT.npz  process I of 2 on localhost
"""

from __future__ import annotations

import os
import sys

mode = sys.argv[1]
if mode == "mesh":
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402

if mode == "process":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        f"localhost:{sys.argv[3]}", num_processes=2, process_id=int(sys.argv[2])
    )

import numpy as np  # noqa: E402

from placeto_jax import Cluster, Graph  # noqa: E402
from placeto_jax.config import make_config  # noqa: E402
from placeto_jax.env import build_bank, prepare  # noqa: E402
from placeto_jax.rl.sharding import episode_mesh, local_copy  # noqa: E402
from placeto_jax.rl.train import make_train  # noqa: E402

GRAPH = Graph.from_edges([100.0] * 8, [1e5] * 8, [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7)])
CONFIG = make_config(None, ["train.episodes=8", "policy.rounds=2"], n_devices=2)


def params_after_two_updates(mesh) -> list[np.ndarray]:
    bank = build_bank([prepare("chains", GRAPH)])
    run = make_train(CONFIG, bank, Cluster.preset("placeto-k80", 2), mesh)
    state = run.init(jax.random.key(0), run.env_params)
    for _ in range(2):
        state, _ = run.updates(state, run.hyper, run.env_params, count=1)
    return jax.tree.leaves(local_copy(state.params))


if mode == "mesh":
    assert jax.device_count() == 4
    one = params_after_two_updates(None)
    four = params_after_two_updates(episode_mesh())
    np.savez(sys.argv[2], *one, *four)
else:
    assert jax.process_count() == 2 and jax.device_count() == 2
    np.savez(sys.argv[4], *params_after_two_updates(episode_mesh()))
