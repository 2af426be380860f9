"""`placeto-jax reproduce EXPERIMENT`: the paper's tables and figures, one command each, written
under `results/<experiment>/` (Markdown, CSV/JSON, PNG, provenance header)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

PAPER = ("table1", "generalization", "ablations", "benchmarks")  # what `all` runs
EXPERIMENTS = (*PAPER, "improve", "efficiency")
DESCRIPTIONS = """experiments:
  table1          placement quality and training cost on zoo:inception_v3, zoo:nmt, zoo:nasnet
  generalization  family policies placing unseen test graphs (zero-shot, from scratch, fine-tuned)
  ablations       message passing, traversal, baseline and pooling variants over seeds
  benchmarks      every method on the benchmark folder's layer and operator graphs (--data DIR)
  improve         Placeto improving the best fast heuristic's placement (family test graphs;
                  with --data DIR, the benchmark files too)
  efficiency      evaluations the RNN placer and Placeto need to reach the better final value
                  (zoo and family graphs; with --data DIR, benchmark layer graphs too)
  all             the paper's four tables (not improve or efficiency), in that order
"""


def add_reproduce_command(commands) -> None:
    """Add `reproduce` to the `placeto-jax` subcommands."""
    parser = commands.add_parser(
        "reproduce",
        help="regenerate the paper's tables and figures",
        description="Run one experiment of the paper and write its tables (Markdown, CSV, "
        "JSON) and plots (PNG) with a provenance header under OUT/<experiment>/.",
        epilog=DESCRIPTIONS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("experiment", choices=(*EXPERIMENTS, "all"), metavar="EXPERIMENT")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help="CPU-sized budgets (the default), for a 2-core machine",
    )
    size.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help="the paper-scale settings, meant for a GPU (see README for the expected time)",
    )
    parser.set_defaults(preset="quick")
    parser.add_argument(
        "--out", default="results", metavar="DIR", help="output root (default: %(default)s)"
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="benchmark graph folder (msr-fiddle format), for `benchmarks`, `improve`, "
        "`efficiency` and `all`",
    )
    parser.add_argument(
        "--start",
        choices=("best", "best-op"),
        help="improve only: the starts, the fastest fast heuristic run on the grouped graph "
        "(best, the default) or on the op graph (best-op; written to OUT/improve-best-op/)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(command=_reproduce)


def _reproduce(args: argparse.Namespace) -> int:
    chosen = PAPER if args.experiment == "all" else (args.experiment,)
    if args.start is not None and args.experiment != "improve":
        raise ValueError(f"--start is for `reproduce improve`, not {args.experiment}")
    if args.data is not None and not Path(args.data).is_dir():
        raise ValueError(f"--data {args.data!r} is not a folder")
    if "benchmarks" in chosen:
        if args.data is None:
            raise ValueError(f"reproduce {args.experiment} needs --data DIR (the benchmark folder)")
        from placeto_jax.reproduce.benchmarks import PRESETS, benchmark_cases

        settings = PRESETS[args.preset]
        benchmark_cases(args.data, settings.folders, settings.kinds)  # every file checked first
    progress = not args.no_progress
    for name in chosen:
        began = time.perf_counter()
        path = _run(name, args.out, args.preset, args.data, progress, args.start or "best")
        print(f"{name}: wrote {path} ({time.perf_counter() - began:.0f} s)", flush=True)
    return 0


def _run(name: str, out: str, preset: str, data: str | None, progress: bool, start: str) -> Path:
    if name == "table1":
        from placeto_jax.reproduce.table1 import run_table1

        return run_table1(out, preset, progress)
    if name == "generalization":
        from placeto_jax.reproduce.generalization import run_generalization

        return run_generalization(out, preset, progress)
    if name == "ablations":
        from placeto_jax.reproduce.ablations import run_ablations

        return run_ablations(out, preset == "quick", progress)
    if name == "efficiency":
        from placeto_jax.reproduce.efficiency import run_efficiency

        return run_efficiency(out, preset, progress, data)
    if name == "improve":
        from placeto_jax.reproduce.improve import run_improve

        return run_improve(out, preset, progress, data, start)
    from placeto_jax.reproduce.benchmarks import run_benchmarks

    return run_benchmarks(out, data, preset, progress)
