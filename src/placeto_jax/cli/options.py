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
    """`--cluster NAME|FILE`: a cluster preset or a cluster file (`shown` describes the default
    in the help)."""
    from placeto_jax.cluster import PRESETS  # NumPy: not at `placeto-jax`'s start

    parser.add_argument(
        "--cluster",
        default=default,
        metavar="NAME|FILE",
        help=f"cluster preset ({', '.join(PRESETS)}) or a cluster file (.json: your own "
        f"devices, docs/cluster-presets.md) (default: {shown})",
    )


def cluster_of_args(spec: str | None, devices: int | None, who: str, default: int | None = None):
    """The `Cluster` of `--cluster SPEC` (default placeto-k80) and `--devices`: a file gives
    its own count, a preset needs one (`default`, else an error naming `who`)."""
    from placeto_jax.cluster import PRESETS, resolve_cluster

    spec = spec or DEFAULT_CLUSTER
    if devices is not None and devices < 1:
        raise ValueError(f"--devices must be at least 1, got {devices}")
    if devices is None and spec in PRESETS:
        if default is None:
            raise ValueError(f"{who} needs --devices (or --cluster FILE)")
        devices = default
    return resolve_cluster(spec, devices)


def add_seed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
