"""Issue 20 item 2's table from `placeto-jax eval --json` outputs: per test graph, Placeto's
makespan over the best fast heuristic's on the same op graph (METIS, HEFT, m-ETF, m-SCT, as
`eval` runs them), and per family and variant the geometric mean and the largest ratio, the
two numbers the item bounds (at most 1.0 and 1.05).

Each input is `LABEL=FILE` (FILE: one `eval --json` output, a list of graphs; several files may
share a label, e.g. one per graph); graphs are grouped into families by the name before "/".

Run, for example:
`python experiments/zero_shot_table.py plain=cifar10.json polish2=cifar10-polish2.json
--out results/zero-shot/cifar10.json --plot results/zero-shot/cifar10.png` (the plot: one panel
per family, a bar per graph and variant, the two bounds as lines).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from placeto_jax.files import write_result
from placeto_jax.graphs.families import SPLITS
from placeto_jax.plotting import draw_ratio_bars
from placeto_jax.report import format_table
from placeto_jax.reproduce.output import save_figure

LIMITS = (1.0, 1.05)  # the item's bounds: geometric mean, and every graph
TEST_GRAPHS = len(SPLITS["test"])  # a family's verdict needs all of its test graphs


def rows_of(label: str, doc: list[dict]) -> list[dict]:
    """One row per graph of an `eval --json` output: its makespans (ms) and ratio."""
    rows = []
    for entry in doc:
        best = entry["best_heuristic"]
        if best is None:
            raise ValueError(f"{entry['graph']}: the eval ran with --no-heuristics")
        rows.append(
            {
                "variant": label,
                "graph": entry["graph"],
                "family": entry["graph"].split("/")[0],
                "decisions": entry["decisions"],
                "heuristic": best["method"],
                "heuristic_ms": best["makespan_us"] / 1e3,
                "placeto_ms": entry["makespan_us"] / 1e3,
                "ratio": entry["makespan_us"] / best["makespan_us"],
                "polish_steps": entry["polish_steps"],
            }
        )
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per (family, variant): graphs, geometric mean and largest ratio, whether both are within
    the item's bounds, and whether the item is met: within them on all the family's test
    graphs."""
    out = []
    for key in sorted({(r["family"], r["variant"]) for r in rows}):
        mine = [r for r in rows if (r["family"], r["variant"]) == key]
        ratios, graphs = [r["ratio"] for r in mine], [r["graph"] for r in mine]
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        within = geomean <= LIMITS[0] and max(ratios) <= LIMITS[1]
        out.append(
            {
                "family": key[0],
                "variant": key[1],
                "graphs": len(ratios),
                "geomean": geomean,
                "max": max(ratios),
                "within_bounds": within,
                "met": within and len(set(graphs)) == TEST_GRAPHS,
            }
        )
    return out


def verdict(total: dict) -> str:
    """The summary's last column: yes, no, or within bounds on fewer than all test graphs."""
    if total["met"]:
        return "yes"
    if not total["within_bounds"]:
        return "no"
    return f"{total['graphs']} of {TEST_GRAPHS} graphs only"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="LABEL=FILE")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--plot", type=Path, default=None, help="draw the ratios as a PNG here")
    args = parser.parse_args(argv)
    rows = []
    for item in args.inputs:
        label, sep, path = item.partition("=")
        if not sep or not label:
            raise SystemExit(f"zero_shot_table: expected LABEL=FILE, got {item!r}")
        rows += rows_of(label, json.loads(Path(path).read_text()))
    table = [["graph", "variant", "decisions", "best heuristic ms", "placeto ms", "ratio",
              "polish steps"]]  # fmt: skip
    for r in rows:
        table.append([r["graph"], r["variant"], str(r["decisions"]),
                      f"{r['heuristic_ms']:.3f} {r['heuristic']}", f"{r['placeto_ms']:.3f}",
                      f"{r['ratio']:.3f}", str(r["polish_steps"])])  # fmt: skip
    print(format_table(table))
    totals = summary(rows)
    print()
    print(format_table([["family", "variant", "graphs", "geomean", "max", "item 2 met"]] + [
        [s["family"], s["variant"], str(s["graphs"]), f"{s['geomean']:.3f}", f"{s['max']:.3f}",
         verdict(s)] for s in totals]))  # fmt: skip
    if args.out is not None:
        write_result(args.out, {"rows": rows, "summary": totals})
        print(f"wrote {args.out}")
    if args.plot is not None:
        save_figure(args.plot, lambda figure: draw_ratio_bars(figure, rows, LIMITS))
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
