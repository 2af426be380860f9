"""`placeto-jax sweep`: the parser of `reproduce.sweep.run_sweep` (the grid, training and
results live there)."""

from __future__ import annotations

import argparse

from placeto_jax.cli.options import add_cluster_option, cluster_of_args
from placeto_jax.config import PRESETS
from placeto_jax.reproduce import sweep as experiment


def add_sweep_command(commands) -> None:
    """Add `sweep` to the `placeto-jax` subcommands."""
    sweep = commands.add_parser(
        "sweep",
        help="train over a grid of hyperparameters and seeds",
        description="Train an agent for every combination of the --set values and every seed, "
        "and write a table (best first) and learning curves to OUT/NAME/. Paper agent: points "
        "differing only in lr/entropy run vmapped in one compiled program. Construct agent "
        "(--preset construct, construct-hinted): one run per point and seed, scored by its own "
        "placements (the sampled pipeline).",
    )
    sweep.add_argument("--graphs", required=True, metavar="NAME[,NAME...]", help="graphs")
    sweep.add_argument(
        "--devices", type=int, default=None, metavar="D", help="device count (a file gives its own)"
    )
    add_cluster_option(sweep)
    sweep.add_argument("--preset", choices=sorted(PRESETS), default=None, help="config preset")
    sweep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="values of one setting: lr, entropy or SECTION.FIELD (repeatable)",
    )
    sweep.add_argument("--seeds", type=int, default=1, help="seeds 0..S-1 (default: %(default)s)")
    sweep.add_argument(
        "--quick",
        action="store_true",
        help=f"CPU sizes: tiny preset and {' '.join(experiment.QUICK)}",
    )
    sweep.add_argument("--out", default="results", metavar="DIR", help="(default: %(default)s)")
    sweep.add_argument("--name", default=None, help="experiment name (default: sweep)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.set_defaults(command=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    cluster = cluster_of_args(args.cluster, args.devices, "sweep")  # before any work
    readme = experiment.run_sweep(
        args.graphs,
        cluster,
        experiment.parse_grid(args.set),
        args.seeds,
        args.preset,
        args.out,
        args.name,
        progress=not args.no_progress,
        quick=args.quick,
    )
    print(readme.read_text())
    return 0
