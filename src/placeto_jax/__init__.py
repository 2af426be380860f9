"""placeto_jax: learned device placement with a vectorised, jit-compiled JAX simulator.

The names below are imported on first use, so that `import placeto_jax` does not import JAX:
the `placeto-jax` command starts in milliseconds and answers a Ctrl-C while it imports the rest.
"""

import importlib

_HOMES = {
    "PIPELINES": "config",
    "PRESETS": "cluster",
    "Cluster": "cluster",
    "Graph": "graphs",
    "Pipeline": "config",
    "Placed": "pipeline",
    "Policy": "pipeline",
    "SimResult": "sim.result",
    "load_graph": "graphs",
    "load_placement": "graphs.placements",
    "makespan_lower_bound": "sim.bound",
    "make_pipeline": "config",
    "place": "pipeline",
    "place_many": "pipeline",
    "read_cluster": "cluster",
    "resolve_graph": "graphs",
    "save_graph": "graphs",
    "save_placement": "graphs.placements",
    "simulate": "sim.api",
    "simulate_reference": "sim.reference",
    "train": "pipeline",
    "write_cluster": "cluster",
}  # name -> the module (under placeto_jax) that defines it

__all__ = sorted([*_HOMES, "graphs"])
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "graphs":
        return importlib.import_module("placeto_jax.graphs")
    if name not in _HOMES:
        raise AttributeError(f"module 'placeto_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"placeto_jax.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
