"""Graph model, built-in generators, file formats and name resolution (host-side NumPy)."""

from placeto_jax.graphs.benchmark import BenchmarkGraph, load_benchmark, load_expert_split
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.grouping import Grouping, group
from placeto_jax.graphs.io import load_graph, save_graph
from placeto_jax.graphs.registry import load, names, resolve_graph
from placeto_jax.graphs.trace import from_jax

__all__ = [
    "BenchmarkGraph",
    "Graph",
    "Grouping",
    "from_jax",
    "group",
    "load",
    "load_benchmark",
    "load_expert_split",
    "load_graph",
    "names",
    "resolve_graph",
    "save_graph",
]
