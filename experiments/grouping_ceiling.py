"""What coarsening costs before any learning: the best fast heuristic on the grouped graph
against the same heuristics on the op graph.

Placeto places a grouped graph, so no policy can beat the best placement of its groups. A
lower bound on how good that placement can be is the best of METIS, HEFT, m-ETF and m-SCT run
on the grouped graph itself (expanded onto the op graph and simulated there). For each test
graph of a family this prints that makespan over the op-graph heuristic's, for the critical-path
grouping the agent uses (`group`, at several targets) and for partition groupings (METIS's
k-way parts of the op graph as co-location classes, each merged into as few nodes as keep a
DAG). Writes JSON atomically.

Run: `python experiments/grouping_ceiling.py [--family ptb] [--tests 8] [--devices 4]`
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np

import placeto_jax as pj
from placeto_jax.env.bank import PlacementGraph, prepare
from placeto_jax.files import write_result
from placeto_jax.graphs.registry import load
from placeto_jax.placers import best_heuristic, scored
from placeto_jax.placers.base import Solution
from placeto_jax.placers.partition import metis_parts


def partition_grouped(name: str, graph: pj.Graph, parts: int, delta1: float) -> PlacementGraph:
    """`graph` grouped within METIS's `parts`-way partition (parts as co-location classes)."""
    key = metis_parts(graph, parts)
    return prepare(name, dataclasses.replace(graph, colocation=key), 0, delta1)


def ceiling(pg: PlacementGraph, op_ms: float, cluster: pj.Cluster, key) -> dict:
    """The best fast heuristic on `pg`'s grouped graph, scored on its op graph."""
    found = best_heuristic(pg.graph, cluster, key)
    op_graph = pg.op_graph or pg.graph
    result = scored(found.method, op_graph, cluster, Solution(pg.expand(found.placement)), 0.0)
    return {
        "decisions": pg.n_units,
        "nodes": pg.graph.n_ops,
        "method": found.method,
        "ms": result.makespan / 1e3,
        "ratio": result.makespan / 1e3 / op_ms,
        "fits memory": result.fits_memory,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="ptb", choices=("cifar10", "ptb", "nmt"))
    parser.add_argument("--tests", type=int, default=8, help="first K test graphs")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--targets", type=int, nargs="+", default=[32, 48, 128])
    parser.add_argument("--parts", type=int, nargs="+", default=[32, 64])
    parser.add_argument(
        "--out", default=None, help="JSON (default results/grouping/ceiling-F.json)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out or f"results/grouping/ceiling-{args.family}.json")
    cluster = pj.Cluster.preset("placeto-k80", args.devices)
    key = jax.random.key(0)
    groupings = {
        **{f"cp{t}": lambda n, g, t=t: prepare(n, g, t, cluster.delta1) for t in args.targets},
        **{f"part{k}": lambda n, g, k=k: partition_grouped(n, g, k, cluster.delta1)
           for k in args.parts},
    }  # fmt: skip
    rows = []
    print(f"{'graph':<20} {'ops':>6} {'op-graph best':>20}", *(f"{g:>20}" for g in groupings))
    for name, graph in load(f"family:{args.family}/test")[: args.tests]:
        began = time.perf_counter()
        op = best_heuristic(graph, cluster, key)
        op_ms = op.makespan / 1e3
        row = {"graph": name, "ops": graph.n_ops, "op method": op.method, "op ms": op_ms}
        row |= {g: ceiling(make(name, graph), op_ms, cluster, key) for g, make in groupings.items()}
        row["seconds"] = time.perf_counter() - began
        rows.append(row)
        cells = [
            f"{row[g]['ratio']:.3f} ({row[g]['decisions']}/{row[g]['nodes']})" for g in groupings
        ]
        print(f"{name:<20} {graph.n_ops:>6} {op.method + f' {op_ms:.2f} ms':>20}",
              *(f"{c:>20}" for c in cells), flush=True)  # fmt: skip
    geomean = {g: float(np.exp(np.mean([np.log(r[g]["ratio"]) for r in rows]))) for g in groupings}
    print(f"{'geometric mean':<48}", *(f"{geomean[g]:>20.3f}" for g in groupings))
    payload = {"family": args.family, "devices": args.devices, "cluster": "placeto-k80",
               "rows": rows, "geometric mean": geomean}  # fmt: skip
    write_result(out, payload)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
