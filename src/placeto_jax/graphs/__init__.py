"""Graph model, built-in generators, file format and name resolution (host-side NumPy)."""

from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.io import load_graph, save_graph
from placeto_jax.graphs.registry import resolve_graph

__all__ = ["Graph", "load_graph", "resolve_graph", "save_graph"]
