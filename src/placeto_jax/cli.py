"""The `placeto-jax` command line: `simulate` one placement, `demo` the baseline placers,
`graphs list|show|export|plot` to inspect the built-in graphs, and `train`, `place`, `eval`
(cli_agent.py) for the learned policy.

Errors in the input (graph spec or file, placement, preset, device count) print one line,
`placeto-jax: error: ...`, to stderr and exit with status 2; I/O failures exit with status 1.
Output files are written atomically. The simulator runs in float64 (`simulate`'s default), so
the numbers are exact; no command sets JAX's global `jax_enable_x64` flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

import placeto_jax as pj
from placeto_jax.cli_agent import add_agent_commands
from placeto_jax.cli_reproduce import add_reproduce_command
from placeto_jax.cluster import PRESETS, Cluster
from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.io import save_graph
from placeto_jax.graphs.registry import BUILTIN_GRAPHS, names, resolve_graph
from placeto_jax.graphs.stats import GraphStats, graph_stats
from placeto_jax.placers import PLACERS, random_batch
from placeto_jax.plotting import gantt
from placeto_jax.report import PlacementReport, format_table, summarize
from placeto_jax.reproduce.sweep import add_sweep_command

PROG = "placeto-jax"
PLOT_EDGES_MAX_OPS = 2000  # larger graphs are drawn without edges
TOP_OPS = 10
GB = 1e9
MB = 1e6
MS = 1e3  # µs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.command(args)
    except ValueError as err:
        return _fail(err, 2)
    except OSError as err:
        return _fail(err, 1)


def _fail(err: Exception, status: int) -> int:
    message = " ".join(str(err).split())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


# ---------------------------------------------------------------------- argument parsing
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learned device placement (Placeto) with a vectorised JAX simulator.",
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _add_simulate(commands)
    _add_demo(commands)
    _add_graphs(commands)
    add_agent_commands(commands)
    add_reproduce_command(commands)
    add_sweep_command(commands)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        default="placeto-k80",
        metavar="NAME",
        help=f"cluster preset: {', '.join(PRESETS)} (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")


def _add_simulate(commands) -> None:
    parser = commands.add_parser(
        "simulate",
        help="simulate one placement of a graph and report per-device load",
        description="Simulate one placement of GRAPH on a cluster and print makespan, per-device "
        "load, memory and transfers.",
        epilog=BUILTIN_GRAPHS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("graph", metavar="GRAPH", help="graph file or built-in graph (below)")
    parser.add_argument("--devices", type=int, required=True, metavar="D", help="device count")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--placement",
        metavar="FILE",
        help='JSON file: a list of N device indices, or {"placement": [...]}',
    )
    source.add_argument(
        "--placer",
        choices=list(PLACERS),
        default="single",
        help="baseline placer when no --placement is given (default: %(default)s)",
    )
    _common(parser)
    parser.add_argument(
        "--no-broadcast",
        action="store_true",
        help="send one transfer per remote consumer device instead of one per op",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--gantt", metavar="OUT.png", help="also write a Gantt chart (PNG)")
    parser.set_defaults(command=_simulate)


def _add_demo(commands) -> None:
    parser = commands.add_parser(
        "demo",
        help="compare baseline placers on a built-in graph",
        description="Simulate a graph under the single, round-robin and random placers, and the "
        "best of a batch of random placements evaluated in one vectorised simulator call.",
        epilog=BUILTIN_GRAPHS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--devices", type=int, default=4, help="device count (default: 4)")
    parser.add_argument("--graph", default="cnn", help="graph (default: %(default)s)")
    parser.add_argument(
        "--batch", type=int, default=4096, help="random placements in the batch (default: 4096)"
    )
    _common(parser)
    parser.set_defaults(command=_demo)


def _add_graphs(commands) -> None:
    parser = commands.add_parser(
        "graphs",
        help="list, show, export or plot built-in graphs",
        description="Inspect graphs: sizes, critical path and parallelism; export or draw one.",
        epilog=BUILTIN_GRAPHS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one row per built-in zoo model and example")
    listing.add_argument("--json", action="store_true", help="print a JSON list of objects")
    listing.add_argument(
        "--include-families",
        action="store_true",
        help="also the 96 family graphs (slow: each is traced)",
    )
    listing.set_defaults(command=_graphs_list)
    show = actions.add_parser("show", help="statistics and the costliest ops of one graph")
    show.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(command=_graphs_show)
    export = actions.add_parser("export", help="save a graph in the placeto-jax format")
    export.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help=".json or .json.gz")
    export.set_defaults(command=_graphs_export)
    plot = actions.add_parser("plot", help="draw a graph layer by layer (PNG)")
    plot.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png", help="PNG file")
    plot.set_defaults(command=_graphs_plot)


# ---------------------------------------------------------------------- simulate
def _simulate(args: argparse.Namespace) -> int:
    graph = resolve_graph(args.graph)
    cluster = Cluster.preset(args.preset, args.devices, broadcast=not args.no_broadcast)
    if args.placement:
        placement = load_placement(args.placement, graph, cluster.n_devices)
        source = f"file {args.placement}"
    else:
        placement = PLACERS[args.placer](graph, cluster, jax.random.key(args.seed))
        source = f"placer {args.placer}"
    result = pj.simulate(graph, cluster, placement)
    report = summarize(graph, cluster, placement, result)
    if args.gantt:
        gantt(graph, cluster, placement, result, args.gantt)
    if args.json:
        print(json.dumps(_report_json(args.graph, graph, cluster, source, placement, report)))
    else:
        print(_reportformat_table(args.graph, graph, cluster, source, report))
        if args.gantt:
            print(f"wrote {args.gantt}")
    return 0


def load_placement(path: str, graph: Graph, n_devices: int) -> np.ndarray:
    """[N] int64 from a JSON file holding a list of device indices or {"placement": [...]}."""
    try:
        doc = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such placement file") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read the placement file ({err.strerror})") from None
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if isinstance(doc, dict) and set(doc) == {"placement"}:
        doc = doc["placement"]
    if not isinstance(doc, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in doc
    ):
        raise ValueError(f'{path}: expected a list of device indices or {{"placement": [...]}}')
    if len(doc) != graph.n_ops:
        raise ValueError(
            f"{path}: placement has {len(doc)} entries; the graph has {graph.n_ops} ops"
        )
    bad = next((v for v, d in enumerate(doc) if not 0 <= d < n_devices), None)
    if bad is not None:
        raise ValueError(
            f"{path}: op {bad} ({graph.names[bad]}) is placed on device {doc[bad]}, "
            f"outside [0, {n_devices})"
        )
    return np.asarray(doc, dtype=np.int64)


def _report_json(
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
        "n_devices": cluster.n_devices,
        "preset": cluster.name,
        "broadcast": cluster.broadcast,
        "placement_source": source,
        "makespan_us": report.makespan_us,
        "op_count": report.op_count.tolist(),
        "busy_us": report.busy_us.tolist(),
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


def _reportformat_table(
    spec: str, graph: Graph, cluster: Cluster, source: str, report: PlacementReport
) -> str:
    mode = "broadcast" if cluster.broadcast else "no broadcast"
    rows = [
        ("device", "ops", "busy ms", "util", "peak GB", "capacity GB", "transfers", "sent MB"),
        *(
            (
                str(d),
                str(report.op_count[d]),
                f"{report.busy_us[d] / MS:.3f}",
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
class _DemoRow:
    method: str
    makespan_us: float
    peak_memory_bytes: float  # largest over devices


def _demo(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise ValueError(f"--batch must be at least 1, got {args.batch}")
    graph = resolve_graph(args.graph)
    cluster = Cluster.preset(args.preset, args.devices)
    key, batch_key = jax.random.split(jax.random.key(args.seed))
    rows = []
    for name in ("single", "round-robin", "random"):
        result = pj.simulate(graph, cluster, PLACERS[name](graph, cluster, key))
        rows.append(_DemoRow(name, float(result.makespan), float(result.peak_memory.max())))
    placements = random_batch(graph, cluster, batch_key, args.batch)
    tic = time.perf_counter()
    pj.simulate(graph, cluster, placements)  # compiles for this batch shape
    compiled = time.perf_counter()
    batch = pj.simulate(graph, cluster, placements)
    done = time.perf_counter()
    best = int(np.argmin(batch.makespan))
    rows.append(
        _DemoRow(
            f"best of {args.batch} random",
            float(batch.makespan[best]),
            float(batch.peak_memory[best].max()),
        )
    )
    print(_demoformat_table(args.graph, graph, cluster, rows))
    print(
        f"\nbatch: {args.batch} placements in one simulate call, {done - compiled:.3f} s "
        f"({args.batch / (done - compiled):,.0f} placements/s on {jax.default_backend()}; "
        f"first call with compilation {compiled - tic:.2f} s)"
    )
    return 0


def _demoformat_table(spec: str, graph: Graph, cluster: Cluster, rows: list[_DemoRow]) -> str:
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


# ---------------------------------------------------------------------- graphs
def _graphs_list(args: argparse.Namespace) -> int:
    listed = [
        n
        for n in names()
        if n.startswith(("example:", "zoo:"))
        or (args.include_families and n.rpartition("/")[2].isdigit())
    ]
    rows = []
    for name in listed:
        graph = resolve_graph(name)
        row = _stats_json(name, graph_stats(graph))
        row["groups"], row["ops"] = row["ops"], _op_count(name, graph)
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
    else:
        print(format_table([_LIST_HEADER, *(_list_row(row) for row in rows)]))
    return 0


def _list_row(row: dict) -> tuple[str, ...]:
    name, _, *rest = _stats_row(row)  # rest: edges of the listed graph, times, parallelism
    return (name, str(row["ops"]), str(row["groups"]), *rest)


_STATS_HEADER = ("name", "ops", "edges", "total ms", "critical path ms", "parallelism")
_LIST_HEADER = (
    "name",
    "ops",
    "groups",
    "group edges",
    "total ms",
    "critical path ms",
    "parallelism",
)


def _op_count(name: str, graph: Graph) -> int:
    """Ops before grouping: zoo models are listed grouped (their op count is cached beside)."""
    if name.startswith("zoo:"):
        from placeto_jax.graphs.zoo import zoo_op_count

        return zoo_op_count(name.removeprefix("zoo:")) or graph.n_ops
    return graph.n_ops


def _stats_json(name: str, stats: GraphStats) -> dict:
    return {
        "name": name,
        "ops": stats.n_ops,
        "edges": stats.n_edges,
        "total_ms": stats.total_us / MS,
        "critical_path_ms": stats.critical_path_us / MS,
        "parallelism": stats.parallelism,
    }


def _stats_row(row: dict) -> tuple[str, ...]:
    return (
        row["name"],
        str(row["ops"]),
        str(row["edges"]),
        f"{row['total_ms']:.3f}",
        f"{row['critical_path_ms']:.3f}",
        f"{row['parallelism']:.2f}",
    )


def _graphs_show(args: argparse.Namespace) -> int:
    graph = resolve_graph(args.graph)
    doc = _show_json(args.graph, graph)
    print(json.dumps(doc) if args.json else _show_text(doc))
    return 0


def _show_json(spec: str, graph: Graph) -> dict:
    total = float(graph.cost.sum())
    top = np.argsort(-graph.cost, kind="stable")[:TOP_OPS]
    return {
        **_stats_json(spec, graph_stats(graph)),
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


def _degree_json(degree: np.ndarray) -> dict:
    """Mean, max and the count of ops with degree 0 (roots for in-degree, sinks for out)."""
    return {
        "mean": float(degree.mean()),
        "max": int(degree.max()),
        "zero": int((degree == 0).sum()),
    }


def _show_text(doc: dict) -> str:
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
            f"params     {doc['param_bytes'] / GB:.4g} GB",
            *degrees,
            "",
            format_table(top),
        ]
    )


def _graphs_export(args: argparse.Namespace) -> int:
    graph = resolve_graph(args.graph)
    save_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n_ops} ops, {graph.n_edges} edges")
    return 0


def _graphs_plot(args: argparse.Namespace) -> int:
    graph = resolve_graph(args.graph)
    plot_layers(graph, args.output, title=args.graph)
    print(f"wrote {args.output}")
    return 0


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
