"""The text and JSON output of the `placeto-jax` commands.

JSON keys name their unit: `_us` and `_ms` for times, `_s` for wall seconds, `_bytes` for sizes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from placeto_jax.cluster import CUSTOM, Cluster
from placeto_jax.config import Config, Pipeline
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.stats import GraphStats, critical_path_us, graph_stats
from placeto_jax.pipeline import Placed, pipeline_json
from placeto_jax.placers import PlacerResult
from placeto_jax.report import PlacementReport, format_table
from placeto_jax.rl.evaluate import Placement
from placeto_jax.sim.api import simulate

TOP_OPS = 10
GB = 1e9
MB = 1e6
MS = 1e3  # µs


def cluster_json(cluster: Cluster) -> dict:
    """The cluster's name and count, and its values as a cluster file holds them."""
    return {"n_devices": cluster.n_devices, "cluster": cluster.name,
            "cluster_spec": cluster.document()}  # fmt: skip


def devices_line(cluster: Cluster) -> str:
    """The cluster in one line: a preset by name, any other by its values."""
    if cluster.preset_name() != CUSTOM:
        return f"devices  {cluster.n_devices} x {cluster.name}"
    doc = cluster.document()
    values = ", ".join(f"{key} {_compact(doc[key])}"
                       for key in ("speed", "memory_gb", "bandwidth_gb_per_s"))  # fmt: skip
    broadcast = "" if cluster.broadcast else ", no broadcast"
    return f"devices  {cluster.n_devices} ({cluster.name}): {values}{broadcast}"


def _compact(values: list[float]) -> str:
    """One number when every device has it, else one per device (4 significant digits)."""
    shown = [f"{v:.4g}" for v in values]
    return shown[0] if len(set(shown)) == 1 else "/".join(shown)


# ---------------------------------------------------------------------- simulate
def report_json(
    spec: str,
    graph: Graph,
    cluster: Cluster,
    source: str,
    placement: np.ndarray,
    report: PlacementReport,
) -> dict:
    return {
        "graph": spec,
        "n_ops": graph.n_ops,
        "n_edges": graph.n_edges,
        **cluster_json(cluster),
        "broadcast": cluster.broadcast,
        "placement_source": source,
        "makespan_us": report.makespan_us,
        "op_count": report.op_count.tolist(),
        "busy_us": report.busy_us.tolist(),
        "compute_us": report.compute_us.tolist(),
        "overhead_us": report.overhead_us.tolist(),
        "utilisation": report.utilisation.tolist(),
        "peak_memory_bytes": report.peak_memory_bytes.tolist(),
        "memory_capacity_bytes": report.memory_capacity_bytes.tolist(),
        "fits_memory": report.fits_memory,
        "transfers": {
            "count": report.transfer_count.tolist(),
            "bytes": report.transfer_bytes.tolist(),
        },
        "placement": placement.tolist(),
    }


def report_text(
    spec: str, graph: Graph, cluster: Cluster, source: str, report: PlacementReport
) -> str:
    mode = "broadcast" if cluster.broadcast else "no broadcast"
    rows = [
        (
            "device",
            "ops",
            "busy ms",
            "overhead ms",
            "util",
            "peak GB",
            "capacity GB",
            "transfers",
            "sent MB",
        ),
        *(
            (
                str(d),
                str(report.op_count[d]),
                f"{report.busy_us[d] / MS:.3f}",
                f"{report.overhead_us[d] / MS:.3f}",
                f"{report.utilisation[d]:.1%}",
                f"{report.peak_memory_bytes[d] / GB:.4g}",
                f"{report.memory_capacity_bytes[d] / GB:.4g}",
                str(report.transfer_count[d]),
                f"{report.transfer_bytes[d] / MB:.4g}",
            )
            for d in range(cluster.n_devices)
        ),
    ]
    over = np.flatnonzero(report.peak_memory_bytes > report.memory_capacity_bytes)
    memory = (
        f"EXCEEDS capacity on device(s) {', '.join(map(str, over))}"
        if over.size
        else "fits on every device"
    )
    return "\n".join(
        [
            f"graph      {spec}: {graph.n_ops} ops, {graph.n_edges} edges",
            f"cluster    {cluster.name}, {cluster.n_devices} devices, {mode}",
            f"placement  {source}",
            f"makespan   {report.makespan_us / MS:.3f} ms",
            f"memory     {memory}",
            "",
            format_table(rows),
        ]
    )


# ---------------------------------------------------------------------- demo
@dataclasses.dataclass(frozen=True)
class DemoRow:
    method: str
    makespan_us: float
    peak_memory_bytes: float  # largest over devices


def demo_text(spec: str, graph: Graph, cluster: Cluster, rows: Sequence[DemoRow]) -> str:
    single = next(r.makespan_us for r in rows if r.method == "single")
    table = [
        ("method", "makespan ms", "speedup", "peak memory GB"),
        *(
            (
                r.method,
                f"{r.makespan_us / MS:.3f}",
                f"{single / r.makespan_us:.2f}x" if r.makespan_us > 0 else "-",
                f"{r.peak_memory_bytes / GB:.3f}",
            )
            for r in rows
        ),
    ]
    capacity = cluster.memory_array.min() / GB
    return "\n".join(
        [
            f"graph    {spec}: {graph.n_ops} ops, {graph.n_edges} edges, "
            f"{graph.cost.sum() / MS:.1f} ms of compute",
            f"cluster  {cluster.name}, {cluster.n_devices} devices, {capacity:.4g} GB each",
            "",
            format_table(table),
        ]
    )


def batch_text(size: int, seconds: float, first_seconds: float, backend: str) -> str:
    """The demo's batch line: `size` placements simulated in `seconds` (`first_seconds` with
    compilation)."""
    return (
        f"batch: {size} placements in one simulate call, {seconds:.3f} s "
        f"({size / seconds:,.0f} placements/s on {backend}; "
        f"first call with compilation {first_seconds:.2f} s)"
    )


# ---------------------------------------------------------------------- graphs
LIST_HEADER = (
    "name",
    "ops",
    "groups",
    "group edges",
    "total ms",
    "critical path ms",
    "parallelism",
)


def stats_json(name: str, stats: GraphStats) -> dict:
    return {
        "name": name,
        "ops": stats.n_ops,
        "edges": stats.n_edges,
        "total_ms": stats.total_us / MS,
        "critical_path_ms": stats.critical_path_us / MS,
        "parallelism": stats.parallelism,
    }


def list_text(rows: Sequence[dict]) -> str:
    """The `graphs list` table of rows of `stats_json` with "groups" (the graph's ops) and
    "ops" (ops before grouping)."""
    return format_table([LIST_HEADER, *(_list_row(row) for row in rows)])


def _list_row(row: dict) -> tuple[str, ...]:
    counts = (str(row[key]) for key in ("ops", "groups", "edges"))
    times = (f"{row[key]:.3f}" for key in ("total_ms", "critical_path_ms"))
    return (row["name"], *counts, *times, f"{row['parallelism']:.2f}")


def show_json(spec: str, graph: Graph, cluster: Cluster) -> dict:
    """`graphs show`: the graph's statistics, its step on one device of `cluster` (compute and
    per-kernel overhead), and its costliest ops."""
    total = float(graph.cost.sum())
    top = np.argsort(-graph.cost, kind="stable")[:TOP_OPS]
    return {
        **stats_json(spec, graph_stats(graph)),
        **one_device_json(graph, cluster),
        "param_bytes": float(graph.param_bytes.sum()),
        "in_degree": _degree_json(graph.in_degree),
        "out_degree": _degree_json(graph.out_degree),
        "top_ops": [
            {
                "name": graph.names[v],
                "cost_ms": float(graph.cost[v]) / MS,
                "share": float(graph.cost[v]) / total if total > 0 else 0.0,
            }
            for v in top
        ],
    }


def one_device_json(graph: Graph, cluster: Cluster) -> dict:
    """The graph's step on the first device of `cluster` (simulated): its compute, the
    per-kernel overhead (`delta1` after each kernel), and the parallelism left with kernels
    counted (that step over the longest path of op durations, transfers free)."""
    first = Cluster(n_devices=1, speed=cluster.speed[0], memory=cluster.memory[0],
                    bandwidth=cluster.bandwidth[0], delta1=cluster.delta1, delta2=cluster.delta2,
                    broadcast=cluster.broadcast, name=cluster.name)  # fmt: skip
    one = simulate(graph, first, np.zeros(graph.n_ops, np.int64))
    speed = float(cluster.speed_array[0])
    kernels = graph.kernel_counts
    duration = graph.cost / speed + np.maximum(kernels - 1, 0) * cluster.delta1
    step, compute = float(one.makespan), float(graph.cost.sum()) / speed
    path = critical_path_us(graph, duration)
    return {
        "cluster": cluster.name,
        "kernels": int(kernels.sum()),
        "delta1_us": cluster.delta1,
        "one_device_ms": step / MS,
        "one_device_compute_ms": compute / MS,
        "one_device_overhead_ms": (step - compute) / MS,
        "parallelism_with_overhead": step / path if path > 0 else 1.0,
    }


def _degree_json(degree: np.ndarray) -> dict:
    """Mean, max and the count of ops with degree 0 (roots for in-degree, sinks for out)."""
    return {
        "mean": float(degree.mean()),
        "max": int(degree.max()),
        "zero": int((degree == 0).sum()),
    }


def show_text(doc: dict) -> str:
    top = [
        ("op", "cost ms", "share"),
        *((op["name"], f"{op['cost_ms']:.3f}", f"{op['share']:.1%}") for op in doc["top_ops"]),
    ]
    degrees = [
        f"{kind:<11}mean {d['mean']:.2f}, max {d['max']}, {d['zero']} ops with none"
        for kind, d in (("in-degree", doc["in_degree"]), ("out-degree", doc["out_degree"]))
    ]
    return "\n".join(
        [
            f"graph      {doc['name']}: {doc['ops']} ops, {doc['edges']} edges",
            f"compute    {doc['total_ms']:.3f} ms total, critical path "
            f"{doc['critical_path_ms']:.3f} ms, parallelism {doc['parallelism']:.2f}",
            f"one device {doc['one_device_ms']:.3f} ms on {doc['cluster']}: compute "
            f"{doc['one_device_compute_ms']:.3f} ms + per-kernel overhead "
            f"{doc['one_device_overhead_ms']:.3f} ms ({doc['kernels']} kernels, "
            f"{doc['delta1_us']:g} µs gaps); parallelism with overhead "
            f"{doc['parallelism_with_overhead']:.2f}",
            f"params     {doc['param_bytes'] / GB:.4g} GB",
            *degrees,
            "",
            format_table(top),
        ]
    )


# ---------------------------------------------------------------------- train / place / eval
def train_text(
    config: Config, own: Sequence[Placed], visited: Sequence[Placed], workdir: str
) -> str:
    """After training, on each graph: the policy's own placement (its greedy episode: what
    `place --checkpoint` returns) and the best placement the training episodes visited (or the
    greedy one, when better), against single device and (when run) the best fast heuristic
    (`eval_table`), and where the run is."""
    against = "and the best fast heuristic " if _compared(own) else ""
    if config.agent == "construct":
        updates = config.train.imitation + config.train.iterations
        passes = config.train.teacher_passes
        searched = (
            " improved by a search pass" if passes == 1 else f" improved by {passes} search passes"
        )
        descended = searched + " and a segment descent"
        teacher = (
            "the best heuristic"
            + {
                "best": "",
                "searched": searched,
                "descent": descended,
                "lookahead": " improved by its lookahead episode",
            }[config.train.teacher]
        )
        return "\n".join([
            f"after {updates} updates ({config.train.imitation} imitating {teacher}, "
            f"{config.train.iterations} self-imitation), on each graph: the policy's own "
            f"placement (what `place --checkpoint {workdir}` returns with the same pipeline) "
            f"against single device {against}(ratios: makespan over theirs, lower is better):",
            eval_table(own),
            "",
            f"run directory: {workdir}  (place a graph: placeto-jax place GRAPH "
            f"--checkpoint {workdir})",
        ])  # fmt: skip
    return "\n".join(
        [
            f"after {config.train.iterations} updates, on each graph: the policy's own placement "
            f"(placeto: its greedy episode, what `place --checkpoint {workdir}` returns) and the "
            f"best one its training visited (visited), against single device {against}(ratios: "
            "makespan over theirs, lower is better):",
            eval_table(own, {"visited": visited}),
            "",
            f"run directory: {workdir}  (place a graph: placeto-jax place GRAPH "
            f"--checkpoint {workdir})",
        ]
    )


def _compared(placed: Sequence[Placed]) -> bool:
    return bool(placed) and all(p.best_heuristic is not None for p in placed)


def policy_json(placed: Placed, pipeline: Pipeline, cluster: Cluster) -> dict:
    """One graph placed by a pipeline on `cluster`: the resolved pipeline, every stage's
    simulations and seconds ("evaluations": all of them; "ranked_evaluations": the distinct
    placements simulated exactly on the op graph), and the best fast heuristic's placement
    (null when not run)."""
    r, best = placed.result, placed.best_heuristic
    return {
        "graph": r.graph,
        "method": "placeto" if pipeline.source == "policy" else "heuristics",
        **cluster_json(cluster),
        "pipeline": pipeline_json(pipeline),
        "stages": [s.to_json() for s in placed.stages],
        "makespan_us": r.makespan,
        "single_device_makespan_us": r.single_device_makespan,
        "initial_makespan_us": r.initial_makespan,
        "start": r.start,
        "peak_memory_bytes": np.asarray(r.peak_memory).tolist(),
        "fits_memory": r.fits_memory,
        "nodes": r.n_nodes,
        "decisions": r.n_units,
        "evaluations": placed.evaluations,
        "ranked_evaluations": r.evaluations,
        "episodes": r.episodes,
        "episode_steps": r.episode_steps,
        "temperature": r.temperature,
        "polish_steps": r.polish_steps,
        "squeeze_steps": r.squeeze_steps,
        "best_heuristic": None
        if best is None
        else {
            "method": best.method,
            "makespan_us": best.makespan,
            "fits_memory": best.fits_memory,
        },
        "placement": r.placement.tolist(),
    }


def method_json(spec: str, r: PlacerResult, cluster: Cluster) -> dict:
    """A baseline method's placement of graph `spec` on `cluster`."""
    return {
        "graph": spec,
        "method": r.method,
        **cluster_json(cluster),
        "makespan_us": r.makespan,
        "peak_memory_bytes": np.asarray(r.peak_memory).tolist(),
        "fits_memory": r.fits_memory,
        "evaluations": r.evaluations,
        "wall_s": r.wall_s,
        "note": r.note,
        "placement": r.placement.tolist(),
    }


def policy_table(placed: Placed) -> str:
    """One graph placed by a pipeline against single device, its initial placement and the
    best fast heuristic (ratios: each row's makespan over that one's, lower is better)."""
    r, best = placed.result, placed.best_heuristic

    def row(label: str, makespan: float, fits: bool = True) -> tuple[str, ...]:
        return (
            label + ("" if fits else " *"),
            f"{makespan / MS:.3f}",
            f"{makespan / r.single_device_makespan:.3f}",
            f"{makespan / best.makespan:.3f}",
        )

    return format_table(
        [
            ("placement", "makespan ms", "/ single", "/ best heuristic"),
            row("single device", r.single_device_makespan),
            row(_start_label(r), r.initial_makespan),
            row(f"best heuristic ({best.method})", best.makespan, best.fits_memory),
            row("placed", r.makespan, r.fits_memory),
        ]
    )


def _start_label(r: Placement) -> str:
    if r.start == "construct":
        return "greedy episode"
    return "initial (random)" if r.start == "random" else f"start ({r.start})"


def stages_line(placed: Placed) -> str:
    """What the placement cost, stage by stage: simulations and wall seconds."""
    parts = [f"{s.name} {s.evaluations} evals {s.wall_s:.1f} s" for s in placed.stages]
    return f"stages   {'; '.join(parts)} (total {placed.evaluations} evals)"


def method_table(r: PlacerResult) -> str:
    return format_table(
        [
            ("makespan ms", "peak memory GB", "evaluations", "wall s"),
            (
                f"{r.makespan / MS:.3f}",
                f"{np.max(r.peak_memory) / GB:.3f}",
                str(r.evaluations),
                f"{r.wall_s:.2f}",
            ),
        ]
    )


def eval_table(placed: Sequence[Placed], others: dict[str, Sequence[Placed]] | None = None) -> str:
    """One row per graph placed by a pipeline, next to single device and (when run) the best
    fast heuristic on the same op graph (`*`: overflows a device's memory), the simulations
    the pipeline ran for it ("evals", every stage's), the start of each episode when it was
    given (improve mode), and each of `others` (by column name, one placement per graph: the
    best placement training visited, the untrained and uniform-random controls); with the
    best heuristic, a last row of geometric means. Ratios: the placement's makespan over the
    other's, lower is better."""
    others = others or {}
    results = [p.result for p in placed]
    compared = _compared(placed)
    best_columns = ("best heuristic ms", "placeto ms", "/ single", "/ best")
    given = any(r.start not in ("random", "construct") for r in results)
    head = ["graph", "nodes", "evals", "single ms", *(("start ms", "/ start") if given else ()),
            *(best_columns if compared else best_columns[1:3])]  # fmt: skip
    for name in others:
        head += [f"{name} ms", "/ best"] if compared else [f"{name} ms"]
    rows = [tuple(head)]
    ratios: list[list[float]] = []  # per graph: placeto / best, then each other's
    for i, (p, r) in enumerate(zip(placed, results, strict=True)):
        row = [r.graph, str(r.n_nodes), str(p.evaluations), f"{r.single_device_makespan / MS:.3f}"]
        if given:
            row += [
                f"{r.initial_makespan / MS:.3f} {r.start}",
                f"{r.makespan / r.initial_makespan:.3f}",
            ]
        if compared:
            best = p.best_heuristic
            row.append(f"{best.makespan / MS:.3f} {best.method}" + _star(best.fits_memory))
        row += [
            f"{r.makespan / MS:.3f}" + _star(r.fits_memory),
            f"{r.makespan / r.single_device_makespan:.3f}",
        ]
        mine = [r.makespan, *(other[i].result.makespan for other in others.values())]
        if compared:
            ratios.append([m / p.best_heuristic.makespan for m in mine])
            row.append(f"{ratios[-1][0]:.3f}")
        for k, other in enumerate(others.values()):
            seen = other[i].result
            row.append(f"{seen.makespan / MS:.3f}" + _star(seen.fits_memory))
            if compared:
                row.append(f"{ratios[-1][k + 1]:.3f}")
        rows.append(tuple(row))
    if compared and len(placed) > 1:
        means = [math.exp(sum(math.log(r[k]) for r in ratios) / len(ratios))
                 for k in range(len(ratios[0]))]  # fmt: skip
        row = ["geometric mean", "", "", "", *(("", "") if given else ()), "", "", "",
               f"{means[0]:.3f}"]  # fmt: skip
        for mean in means[1:]:
            row += ["", f"{mean:.3f}"]
        rows.append(tuple(row))
    return format_table(rows)


def _star(fits: bool) -> str:
    return "" if fits else " *"
