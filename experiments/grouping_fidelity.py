"""How well a grouped graph's makespan predicts its op graph's, with and without kernel counts.

For each model, the training step is traced (jaxpr level, `v100` roofline), grouped to a
target, and R random placements of the groups (each group on a uniformly random device of 4
`v100`s, co-location classes ignored: this measures the simulator) are simulated on the
grouped graph, with its kernel counts (each group runs its
members' kernels, `delta1` apart) and without them (a group pays `delta1` once, as before), and
expanded to the op graph. Prints the single-device times and the Pearson and Spearman
correlations of grouped against op-graph makespans; writes JSON atomically.

Run: `python experiments/grouping_fidelity.py [--placements 64] [--target 500]`
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np
from scipy import stats

import placeto_jax as pj
from calibrate import REDUCED, vit_step
from placeto_jax.files import write_result
from placeto_jax.graphs import group, zoo
from placeto_jax.graphs.trace import from_jax

MODELS = {
    "vit (AdamW)": vit_step,
    "zoo:transformer": lambda: zoo.ZOO_MODELS["transformer"].build(
        zoo._sizes("transformer", REDUCED["transformer"])
    ),
    "zoo:resnet50": lambda: zoo.ZOO_MODELS["resnet50"].build(
        zoo._sizes("resnet50", REDUCED["resnet50"])
    ),
}


def without_kernels(graph: pj.Graph) -> pj.Graph:
    """`graph` with one kernel per op (a group paying `delta1` once)."""
    return pj.Graph.from_edges(
        graph.cost, graph.out_bytes, graph.edges, param_bytes=graph.param_bytes,
        colocation=graph.colocation,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", type=int, default=64)
    parser.add_argument("--target", type=int, default=500)
    parser.add_argument("--out", default="results/grouping/fidelity.json")
    args = parser.parse_args(argv)
    cluster = pj.Cluster.preset("v100", 4)
    one = pj.Cluster.preset("v100", 1)
    rows = []
    columns = ["ops", "groups", "single op ms", "grouped ms", "before ms", "pearson", "before"]
    print(f"{'model':<18}", *(f"{c:>6}" for c in columns), "spearman", "before")
    for name, build in MODELS.items():
        step = build()
        graph = from_jax(
            step.fn, *step.args, level="jaxpr", device="v100", param_argnums=zoo.PARAM_ARGNUMS
        )
        grouping = group(graph, target=args.target)
        grouped, old = grouping.graph, without_kernels(grouping.graph)
        keys = jax.random.split(jax.random.key(0), args.placements)
        by_group = np.stack(
            [np.asarray(jax.random.randint(k, (grouped.n_ops,), 0, 4)) for k in keys]
        )
        by_op = by_group[:, grouping.op_to_group]
        cases = (("op", graph, by_op), ("new", grouped, by_group), ("old", old, by_group))
        times = {
            label: np.asarray(pj.simulate(g, cluster, p, allow_split=True).makespan)
            for label, g, p in cases
        }
        single = {
            label: float(pj.simulate(g, one, np.zeros(g.n_ops, np.int32)).makespan)
            for label, g in (("op", graph), ("new", grouped), ("old", old))
        }
        row = {
            "model": name,
            "ops": graph.n_ops,
            "groups": grouped.n_ops,
            "single_us": single,
            "pearson": {k: float(stats.pearsonr(times[k], times["op"])[0]) for k in ("new", "old")},
            "spearman": {
                k: float(stats.spearmanr(times[k], times["op"])[0]) for k in ("new", "old")
            },
        }
        rows.append(row)
        print(
            f"{name:<18} {graph.n_ops:>6} {grouped.n_ops:>6} {single['op'] / 1e3:>12.2f} "
            f"{single['new'] / 1e3:>10.2f} {single['old'] / 1e3:>9.2f} "
            f"{row['pearson']['new']:>8.3f} {row['pearson']['old']:>7.3f} "
            f"{row['spearman']['new']:>8.3f} {row['spearman']['old']:>7.3f}"
        )
    path = Path(args.out)
    write_result(path, {"placements": args.placements, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
