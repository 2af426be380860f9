"""`placeto-jax graphs list|show|export|plot`: inspect, save or draw graphs."""

from __future__ import annotations

import argparse
import json

from placeto_jax.cli.format import list_text, show_json, show_text, stats_json
from placeto_jax.cli.options import add_cluster_option, cluster_of_args
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.io import save_graph
from placeto_jax.graphs.registry import BUILTIN_GRAPHS, names, resolve_graph
from placeto_jax.graphs.stats import graph_stats
from placeto_jax.plotting import plot_layers


def add_graphs_command(commands) -> None:
    """Add `graphs` and its actions to the `placeto-jax` subcommands."""
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
    listing.set_defaults(command=_list)
    show = actions.add_parser("show", help="statistics and the costliest ops of one graph")
    show.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    add_cluster_option(show)
    show.set_defaults(command=_show)
    export = actions.add_parser("export", help="save a graph in the placeto-jax format")
    export.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help=".json or .json.gz")
    export.set_defaults(command=_export)
    plot = actions.add_parser("plot", help="draw a graph layer by layer (PNG)")
    plot.add_argument("graph", metavar="NAME", help="graph file or built-in graph")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png", help="PNG file")
    plot.set_defaults(command=_plot)


def _list(args: argparse.Namespace) -> int:
    listed = [
        n
        for n in names()
        if n.startswith(("example:", "zoo:"))
        or (args.include_families and n.rpartition("/")[2].isdigit())
    ]
    rows = []
    for name in listed:
        graph = resolve_graph(name)
        row = stats_json(name, graph_stats(graph))
        row["groups"], row["ops"] = row["ops"], _op_count(name, graph)
        rows.append(row)
    print(json.dumps(rows) if args.json else list_text(rows))
    return 0


def _op_count(name: str, graph: Graph) -> int:
    """Ops before grouping: zoo models are listed grouped (their op count is cached beside)."""
    if name.startswith("zoo:"):
        from placeto_jax.graphs.zoo import zoo_op_count

        return zoo_op_count(name.removeprefix("zoo:")) or graph.n_ops
    return graph.n_ops


def _show(args: argparse.Namespace) -> int:
    cluster = cluster_of_args(args.cluster, None, "graphs show", default=1)  # before the graph
    doc = show_json(args.graph, resolve_graph(args.graph), cluster)
    print(json.dumps(doc) if args.json else show_text(doc))
    return 0


def _export(args: argparse.Namespace) -> int:
    graph = resolve_graph(args.graph)
    save_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n_ops} ops, {graph.n_edges} edges")
    return 0


def _plot(args: argparse.Namespace) -> int:
    plot_layers(resolve_graph(args.graph), args.output, title=args.graph)
    print(f"wrote {args.output}")
    return 0
