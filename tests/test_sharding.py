"""Scale-out: the episode batch split over 4 host devices gives the one-device result, and two
processes on localhost (jax.distributed, CPU collectives) end an update with identical
parameters. Each case runs in fresh processes (tests/sharding_worker.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("sharding_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_four_devices_give_the_one_device_parameters(tmp_path):
    out = tmp_path / "params.npz"
    subprocess.run([sys.executable, str(WORKER), "mesh", str(out)], check=True, timeout=600)
    arrays = np.load(out)
    leaves = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
    half = len(leaves) // 2
    assert half > 0
    for one, four in zip(leaves[:half], leaves[half:], strict=True):
        np.testing.assert_allclose(one, four, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_two_processes_hold_identical_parameters(tmp_path):
    port = str(_free_port())
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "process", str(i), port, str(outs[i])])
        for i in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=600) == 0
    a, b = (np.load(o) for o in outs)
    assert a.files == b.files and a.files
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])


def test_a_batch_that_does_not_split_evenly_is_refused():
    import jax

    from placeto_jax import Cluster, Graph
    from placeto_jax.config import make_config
    from placeto_jax.env import build_bank, prepare
    from placeto_jax.rl.sharding import episode_mesh
    from placeto_jax.rl.train import make_train

    bank = build_bank([prepare("g", Graph.from_edges([1.0, 1.0], [0.0, 0.0], [(0, 1)]))])
    config = make_config(None, ["train.episodes=3"], n_devices=2)
    mesh = episode_mesh(jax.devices()[:1] * 2)
    with pytest.raises(ValueError, match="does not split evenly over 2 devices"):
        make_train(config, bank, Cluster.preset("placeto-k80", 2), mesh)
