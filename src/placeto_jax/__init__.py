"""placeto_jax: learned device placement with a vectorised, jit-compiled JAX simulator."""

from placeto_jax import graphs
from placeto_jax.cluster import PRESETS, Cluster
from placeto_jax.config import PIPELINES, Pipeline, make_pipeline
from placeto_jax.graphs import Graph, load_graph, resolve_graph, save_graph
from placeto_jax.graphs.placements import load_placement, save_placement
from placeto_jax.pipeline import Placed, Policy, place, place_many, train
from placeto_jax.sim.api import simulate
from placeto_jax.sim.reference import simulate_reference
from placeto_jax.sim.result import SimResult

__all__ = [
    "PIPELINES",
    "PRESETS",
    "Cluster",
    "Graph",
    "Pipeline",
    "Placed",
    "Policy",
    "SimResult",
    "graphs",
    "load_graph",
    "load_placement",
    "make_pipeline",
    "place",
    "place_many",
    "resolve_graph",
    "save_graph",
    "save_placement",
    "simulate",
    "simulate_reference",
    "train",
]
__version__ = "0.1.0"
