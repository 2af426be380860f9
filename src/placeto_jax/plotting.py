"""Every matplotlib drawing of the project: the Gantt chart of a simulated schedule (one lane
per device and per bus), a graph drawn layer by layer, and the experiments' learning curves and
CDFs.

Drawn with matplotlib's Agg canvas (no screen needed); a Gantt chart is one `broken_barh`
collection per lane, so graphs of thousands of ops render in about a second.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from placeto_jax.cluster import Cluster
from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph
from placeto_jax.sim.result import SimResult

_COLOURS = np.asarray(
    ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]
)
PLOT_EDGES_MAX_OPS = 2000  # larger graphs are drawn without edges


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
    ax.legend(handles=gantt_legend(), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def gantt_legend() -> list[Patch]:
    """What a Gantt chart's bars and lanes mean."""
    n = len(_COLOURS)
    colours = [Patch(color=_COLOURS[k], label=f"op k with k mod {n} = {k}") for k in range(3)]
    lanes = [
        Patch(color="none", label="lane 'device d': op k running on d"),
        Patch(color="none", label="lane 'bus d': op k's output sent from d"),
    ]
    return [*colours, Patch(color="none", label="..."), *lanes]


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


def layer_positions(graph: Graph) -> np.ndarray:
    """[N, 2] float64: x = topological depth, y = rank within the depth (by op index), centred."""
    depth = graph.depth
    order = np.lexsort((np.arange(graph.n_ops), depth))
    counts = np.bincount(depth)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(graph.n_ops, dtype=np.float64)
    rank[order] = np.arange(graph.n_ops) - starts[depth[order]]
    return np.stack([depth, rank - (counts[depth] - 1) / 2], axis=1).astype(np.float64)


def plot_layers(graph: Graph, path: str | os.PathLike, title: str) -> None:
    """Draw `graph` layer by layer (marker area ~ op cost; edges up to PLOT_EDGES_MAX_OPS ops)
    and write it atomically to `path` as PNG."""
    xy = layer_positions(graph)
    fig = Figure(figsize=(12.0, 8.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if graph.n_ops <= PLOT_EDGES_MAX_OPS:
        lines = LineCollection(xy[graph.edges], colors="0.6", linewidths=0.5, zorder=1)
        ax.add_collection(lines)
    peak = graph.cost.max()
    sizes = 4.0 + 200.0 * (graph.cost / peak if peak > 0 else graph.cost)
    ax.scatter(xy[:, 0], xy[:, 1], s=sizes, c="#4e79a7", edgecolors="none", zorder=2)
    ax.set_xlabel("topological depth")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yticks([])
    ax.set_title(f"{title}: {graph.n_ops} ops, {graph.n_edges} edges (marker area ~ cost)")
    with atomic_write(path) as file:
        fig.savefig(file, format="png", dpi=100)


def plot_training(records: Sequence[Mapping[str, float]], path: str | os.PathLike) -> None:
    """A run's learning curve from its metrics records (one per update, "iteration" and the
    trainer's metrics): the episodes' mean final runtime and the greedy evaluation's best, in
    the environment's units, written atomically to `path` as PNG."""
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for key, label, style in (
        ("train/final_runtime", "episodes: mean final runtime", "-"),
        ("eval/best_runtime", "greedy evaluation: best runtime", "o-"),
        ("train/imitation_loss", "imitation loss (construct agent)", "-"),
    ):
        points = [(r["iteration"], r[key]) for r in records if key in r]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=label, markersize=3)
    ax.set_xlabel("update")
    ax.set_ylabel("runtime (env units; construct agent: over the teacher's)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    ax.set_title("learning curve")
    with atomic_write(path) as file:
        fig.savefig(file, format="png", dpi=100)


def draw_learning_curves(
    figure: Figure,
    curves: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    title: str,
    single: tuple[float, bool],
    others: Mapping[str, tuple[float, bool]],
) -> None:
    """One step line per learned method: the makespan without the memory penalty (µs, drawn in
    ms) of its best placement so far against simulator evaluations (log scale), a hollow marker
    where that placement does not fit memory; `curves` maps a method to (evaluations [K],
    makespan [K] µs, fits [K] bool). A dotted line at the single-device makespan `single` (µs,
    fits) and a dashed one per method of `others` ({method: (µs, fits)}), labelled in ms."""
    figure.set_size_inches(9.0, 4.5)
    axes = figure.add_subplot()
    overflows = False
    for name, (evaluations, makespan, fits) in curves.items():
        x, y, out = np.maximum(evaluations, 1), np.asarray(makespan) / 1e3, ~np.asarray(fits)
        (line,) = axes.step(x, y, where="post", label=name)
        if out.any():
            axes.plot(x[out], y[out], "o", mfc="none", color=line.get_color(), label="_overflow")
        overflows |= bool(out.any())
    levels = {"single device": single, **others}
    for k, (name, (makespan, fits)) in enumerate(levels.items()):
        axes.axhline(
            makespan / 1e3,
            color="grey" if k == 0 else f"C{(len(curves) + k - 1) % 10}",
            linestyle=":" if k == 0 else "--",
            linewidth=0.9,
            label=f"{name} {makespan / 1e3:.4g} ms" + ("" if fits else " (does not fit)"),
        )
    if overflows:
        axes.plot([], [], "o", mfc="none", color="black", label="best so far does not fit")
    axes.set_xscale("log")
    axes.set_xlabel("simulator evaluations")
    axes.set_ylabel("makespan of the best so far (ms)")
    axes.set_title(title)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


def draw_relative_cdf(
    figure: Figure,
    relative: Sequence[Mapping[str, float | str]],
    families: Sequence[str],
    methods: Sequence[str],
) -> None:
    """One panel per family: the CDF over all its rows (every test graph given, whether or not
    a placement fits memory) of each method's makespan relative to the best baseline (`relative`
    rows hold "family" and one value per method); the title counts the rows."""
    for k, family in enumerate(families, 1):
        axes = figure.add_subplot(1, len(families), k)
        mine = [r for r in relative if r["family"] == family]
        for method in methods if mine else []:
            values = np.sort([r[method] for r in mine])
            fraction = np.arange(len(values) + 1) / len(values)
            axes.step(np.r_[values[0], values], fraction, where="post", label=method)
        axes.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
        axes.set_title(f"{family}: {len(mine)} test graphs")
        axes.set_xlabel("makespan / best baseline")
        if k == 1:
            axes.set_ylabel("fraction of test graphs")
    figure.axes[0].legend(fontsize="small")


def draw_sweep_curves(
    figure: Figure,
    labels: Sequence[str],
    curves: Sequence[np.ndarray],
    metric: str = "sampled final runtime / initial",
) -> None:
    """A sweep's learning curves: the mean over seeds of each point's `metric` per update
    (curves [S, U] each), one line per point."""
    ax = figure.add_subplot()
    for label, curve in zip(labels, curves, strict=True):
        x = np.arange(1, curve.shape[1] + 1)
        ax.plot(x, curve.mean(axis=0), label=label)
    ax.set_xlabel("update")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def draw_ratio_bars(
    figure: Figure,
    rows: Sequence[Mapping[str, float | str]],
    limits: tuple[float, float],
) -> None:
    """One panel per family: for each graph, one bar per variant of its "ratio" (Placeto's
    makespan over the best heuristic's; `rows` hold "family", "graph", "variant", "ratio"),
    drawn from 1 (up: slower than the heuristic, down: faster), and the two bounds (`limits`:
    the geometric mean's and every graph's) as lines."""
    families = sorted({str(r["family"]) for r in rows})
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    width = 0.8 / len(variants)
    for k, family in enumerate(families, 1):
        axes = figure.add_subplot(1, len(families), k)
        graphs = sorted({str(r["graph"]) for r in rows if r["family"] == family})
        for j, variant in enumerate(variants):
            ratio = {r["graph"]: r["ratio"] for r in rows
                     if r["family"] == family and r["variant"] == variant}  # fmt: skip
            shown = [(i, ratio[g]) for i, g in enumerate(graphs) if g in ratio]
            offset = (j - (len(variants) - 1) / 2) * width
            axes.bar([i + offset for i, _ in shown], [r - 1.0 for _, r in shown], width,
                     bottom=1.0, color=_COLOURS[j % len(_COLOURS)], label=variant)  # fmt: skip
        for limit, style in zip(limits, (":", "--"), strict=True):
            axes.axhline(limit, color="grey", linewidth=0.8, linestyle=style)
        axes.set_xticks(range(len(graphs)), [g.rsplit("/", 1)[-1] for g in graphs])
        axes.set_title(family)
        axes.set_xlabel("test graph")
        if k == 1:
            axes.set_ylabel("Placeto / best heuristic")
    patches = [Patch(color=_COLOURS[j % len(_COLOURS)], label=v) for j, v in enumerate(variants)]
    figure.axes[0].legend(handles=patches, fontsize="small")  # every variant, in any panel
