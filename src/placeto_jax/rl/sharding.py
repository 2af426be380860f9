"""Scale-out: the episode batch split over every device of every process (`jax.sharding`).

Single host: `episode_mesh()` spans the local accelerators. Several hosts: call
`jax.distributed.initialize(...)` first (`placeto-jax train --coordinator ...`); the mesh then
spans every process's devices, every process runs the same program, and XLA's collectives
average the gradient, so all processes hold identical parameters. No parameter server.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

EPISODES = "episodes"  # the mesh axis the episode batch is split over


def episode_mesh(devices: list | None = None) -> Mesh:
    """A one-axis mesh ("episodes") over `devices` (default: every device of every process)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (EPISODES,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Every array of `tree` as a global array with a full copy on every device of `mesh` (works
    across processes, each passing the same values)."""
    sharding = replicated(mesh)

    def put(x: Any) -> jax.Array:
        host = np.asarray(jax.device_get(x))
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def local_copy(tree: Any) -> Any:
    """NumPy copies of replicated global arrays, read from this process's first device."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)
