"""Gantt chart of a simulated schedule: one lane per device (ops) and per bus (transfers).

Drawn with matplotlib's Agg canvas (no screen needed), one `broken_barh` collection per lane, so
graphs of thousands of ops render in about a second.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from placeto_jax.cluster import Cluster
from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.result import SimResult

_COLOURS = np.asarray(
    ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]
)


@dataclasses.dataclass(frozen=True)
class Lane:
    """One row of the chart."""

    label: str  # "device 0" or "bus 0"
    ops: np.ndarray  # [K] int64, the op of each bar (the producer, for a transfer)
    bars: np.ndarray  # [K, 2] µs, (start, duration)


def schedule_lanes(
    graph: Graph, cluster: Cluster, placement: np.ndarray, result: SimResult
) -> list[Lane]:
    """Device lanes (op start to end) then bus lanes (transfer start to arrival; with broadcast,
    one bar per op; without, one per destination device)."""
    placement = _check(graph, cluster, placement, result)
    ops = np.arange(graph.n_ops)
    op_bars = np.stack([result.start, result.end - result.start], axis=1)
    src, starts, arrivals = _transfer_bars(result, cluster.broadcast)
    tx_bars = np.stack([starts, arrivals - starts], axis=1)
    lanes = []
    for kind, owner, ids, bars in (
        ("device", placement, ops, op_bars),
        ("bus", placement[src], src, tx_bars),
    ):
        for d in range(cluster.n_devices):
            mine = owner == d
            lanes.append(Lane(f"{kind} {d}", ids[mine], bars[mine]))
    return lanes


def gantt(
    graph: Graph,
    cluster: Cluster,
    placement: np.ndarray,
    result: SimResult,
    path: str | os.PathLike,
) -> None:
    """Draw the schedule of one placement and write it atomically to `path` as PNG."""
    fig = Figure(layout="constrained")
    FigureCanvasAgg(fig)
    draw_gantt(fig, graph, cluster, placement, result)
    with atomic_write(path) as file:
        fig.savefig(file, format="png", dpi=100)


def draw_gantt(
    fig: Figure,
    graph: Graph,
    cluster: Cluster,
    placement: np.ndarray,
    result: SimResult,
    label: str = "",
) -> None:
    """Draw the schedule of one placement on `fig` (resized to fit its lanes); `label` opens
    the title."""
    lanes = schedule_lanes(graph, cluster, placement, result)
    fig.set_size_inches(12.0, 1.2 + 0.35 * len(lanes))
    ax = fig.add_subplot()
    for i, lane in enumerate(lanes):
        colours = _COLOURS[lane.ops % len(_COLOURS)].tolist()
        ax.broken_barh(
            lane.bars / 1e3, (i - 0.4, 0.8), facecolors=colours, edgecolors=colours, linewidth=0.5
        )
    ax.set_yticks(range(len(lanes)), [lane.label for lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ends = [lane.bars.sum(axis=1).max() for lane in lanes if len(lane.bars)]
    ax.set_xlim(0.0, max([*ends, 1.0]) / 1e3 * 1.01)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(
        f"{label}makespan {float(result.makespan) / 1e3:.3f} ms: {graph.n_ops} ops on "
        f"{cluster.n_devices} devices ({cluster.name})"
    )


def _transfer_bars(result: SimResult, broadcast: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(producer [T] int64, start [T] µs, arrival [T] µs) of every transfer."""
    sent = ~np.isnan(result.transfer_start)
    if broadcast:
        src = np.flatnonzero(sent.any(axis=1))
        dst = sent[src].argmax(axis=1)
    else:
        src, dst = np.nonzero(sent)
    return src, result.transfer_start[src, dst], result.arrival[src, dst]


def _check(graph: Graph, cluster: Cluster, placement: np.ndarray, result: SimResult) -> np.ndarray:
    n, d = graph.n_ops, cluster.n_devices
    placement = np.asarray(placement, dtype=np.int64)
    if np.ndim(result.makespan) != 0:
        raise ValueError("a Gantt chart shows one placement; got a batched result")
    if placement.shape != (n,) or result.start.shape != (n,):
        raise ValueError(f"placement and result must be for the graph's {n} ops")
    if result.transfer_start.shape != (n, d) or np.any((placement < 0) | (placement >= d)):
        raise ValueError(f"placement and result must be for a cluster of {d} devices")
    return placement
