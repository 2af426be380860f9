"""Names and options shared by the `placeto-jax` commands."""

from __future__ import annotations

import argparse

PROG = "placeto-jax"
DEFAULT_CLUSTER = "placeto-k80"


def add_cluster_option(
    parser: argparse.ArgumentParser,
    default: str | None = DEFAULT_CLUSTER,
    shown: str = "%(default)s",
) -> None:
    """`--cluster NAME`: the cluster preset (`shown` describes the default in the help)."""
    from placeto_jax.cluster import PRESETS  # NumPy: not at `placeto-jax`'s start

    parser.add_argument(
        "--cluster",
        default=default,
        metavar="NAME",
        help=f"cluster preset: {', '.join(PRESETS)} (default: {shown})",
    )


def add_seed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
