"""Episodes that start from a given placement (improve mode, `env.initial_placement="given"`).

A start is an op placement: a heuristic's, or a user's file. The agent places the grouped graph,
so the start must put every decision unit on one device. When it does, it is attached to the
graph as it is. When it does not, the op graph is grouped again *within* the start: the ops of
one unit on one device form a co-location class, merged into as few nodes as keep a DAG and
tied (the co-location step of `graphs/grouping.py`), so the start is exactly a placement of the
new grouped graph. Either way the first observation's placement is the start, unit by unit, and
its op-graph makespan is the start's own.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.env.bank import PlacementGraph, Start, prepare
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.placements import check_placement_of


def with_start(
    pg: PlacementGraph,
    op_placement: np.ndarray,
    name: str,
    n_devices: int,
    op_overhead_us: float = 0.0,
    evaluations: int = 0,
) -> PlacementGraph:
    """`pg` whose episodes start from `op_placement` ([N_ops] device per op of its op graph),
    regrouped within the start when the start splits one of its units (see the module
    docstring; `op_overhead_us` as in `prepare`; `evaluations`: the simulations that found
    it). ValueError for a placement of the wrong length, a device out of range, or a
    co-location class of the op graph split over devices."""
    op_graph = pg.op_graph or pg.graph
    devices = checked_start(op_graph, op_placement, n_devices, name)
    op_to_group = np.arange(op_graph.n_ops) if pg.op_to_group is None else pg.op_to_group
    key = pg.graph.colocation_classes[op_to_group] * n_devices + devices
    if np.unique(key).size == pg.n_units:
        start = Start(name, _node_devices(op_to_group, devices), evaluations)
        return dataclasses.replace(pg, start=start)
    regrouped = prepare(pg.name, dataclasses.replace(op_graph, colocation=key), 0, op_overhead_us)
    op_to_group = (
        np.arange(op_graph.n_ops) if regrouped.op_to_group is None else regrouped.op_to_group
    )
    return PlacementGraph(
        pg.name,
        regrouped.graph,
        op_graph,
        op_to_group,
        Start(name, _node_devices(op_to_group, devices), evaluations),
    )


def checked_start(
    op_graph: Graph, op_placement: np.ndarray, n_devices: int, name: str
) -> np.ndarray:
    """[N_ops] int64 `op_placement` of `op_graph`; ValueError naming the start for a wrong
    length, a device out of range or a co-location class split over devices."""
    devices = np.asarray(op_placement)
    if devices.shape != (op_graph.n_ops,) or not np.issubdtype(devices.dtype, np.integer):
        raise ValueError(
            f"start {name!r}: expected {op_graph.n_ops} integer devices (one per op), got shape "
            f"{devices.shape} of {devices.dtype}"
        )
    try:
        check_placement_of(op_graph, devices, n_devices)
    except ValueError as err:
        raise ValueError(f"start {name!r}: {err}") from None
    return devices.astype(np.int64)


def _node_devices(op_to_group: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """[N] int64 device per node from devices per op that agree within every node."""
    nodes = np.zeros(int(op_to_group.max()) + 1, dtype=np.int64)
    nodes[op_to_group] = devices
    return nodes
