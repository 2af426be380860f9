"""Ablations of Placeto's components (../shared/spec/placeto.md, claim 3) on one graph.

Each variant changes one static setting of the same base config (the tiny preset), so each
compiles its own program; the seeds of a variant are vmapped in it. A variant is scored by the
exact op-graph makespan of every seed's greedy placement and by its learning curve (the sampled
episodes' final runtime / initial per update).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from placeto_jax.config import Config, make_config, to_dict
from placeto_jax.reproduce import sweep
from placeto_jax.reproduce.output import EVALUATIONS, Recorder
from placeto_jax.reproduce.sweep import (
    MS,
    TAIL_FRACTION,
    Point,
    Runs,
    evaluation_row,
    train_points,
)
from placeto_jax.rl.loop import cluster_of, load_graphs


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[str, ...]  # `section.field=value` on top of the base config


FULL_PLACETO = "full Placeto"
VARIANTS = (
    Variant(FULL_PLACETO, ()),
    Variant("no message passing", ("policy.message_passing=none",)),
    Variant("sweep message passing", ("policy.message_passing=sweep",)),
    Variant("random traversal", ("env.traversal=random",)),
    Variant("no per-step baseline", ("train.baseline=none",)),
    Variant("per-device parallel pooling", ("policy.per_device_parallel=true",)),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every variant trains on, and how long."""

    graph: str  # graph spec (`placeto-jax graphs list`) or file
    devices: int
    seeds: int  # seeds 0..seeds-1, vmapped
    overrides: tuple[str, ...]  # on the tiny preset, before the variant's


QUICK = Settings("family:nmt/0", 4, 3, sweep.QUICK)
FULL = Settings(
    "family:nmt/0",
    4,
    5,
    ("run.group_target=48", "policy.rounds=8", "train.episodes=256", "train.iterations=500"),
)


def variant_config(settings: Settings, variant: Variant) -> Config:
    return make_config(
        "tiny", [*settings.overrides, *variant.overrides], n_devices=settings.devices
    )


def run_ablations(out_root: str | Path, quick: bool, progress: bool = True) -> Path:
    """Train every variant (seeds vmapped), write results/ablations/, return the README's path."""
    settings = QUICK if quick else FULL
    configs = [variant_config(settings, v) for v in VARIANTS]  # every config checked first
    cluster = cluster_of(configs[0])
    graphs = load_graphs(settings.graph, configs[0], cluster)
    recorder = Recorder(out_root, "ablations", "quick" if quick else "full")
    runs = []
    for variant, config in tqdm(
        list(zip(VARIANTS, configs, strict=True)), desc="ablations", disable=not progress
    ):
        point = Point((("variant", variant.name),), config)
        runs.append(train_points(config, [point], settings.seeds, graphs, cluster).point(0))
    recorder.table(
        "ablations",
        "Final makespans per variant",
        ablation_rows(VARIANTS, runs),
        note=f"{settings.graph} on {settings.devices} devices, {settings.seeds} seeds. makespan: "
        "exact op-graph makespan (ms) of the greedy placement, mean and std over seeds; "
        "vs_full: mean makespan / full Placeto's (above 1: worse); speedup_vs_single: "
        f"single-device makespan ({runs[0].single.mean() / MS:.4g} ms) / makespan; final_runtime: "
        f"sampled episodes' final runtime / initial over the last {TAIL_FRACTION:.0%} of the "
        "updates.",
    )
    recorder.table(
        "evaluations",
        "Simulator evaluations per method",
        [evaluation_row({"graph": settings.graph}, [v.name for v in VARIANTS], runs)],
        note=f"{EVALUATIONS} Per variant: its {settings.seeds} seeds' together.",
    )
    recorder.figure(
        "curves",
        "Learning curves (mean and one standard deviation over seeds)",
        draw_spread([v.name for v in VARIANTS], [r.curves for r in runs]),
    )
    return recorder.finish(
        {
            "graph": settings.graph,
            "devices": settings.devices,
            "preset": "tiny",
            "overrides": list(settings.overrides),
            "variants": {v.name: list(v.overrides) for v in VARIANTS},
            "base": to_dict(configs[0]),
        },
        list(range(settings.seeds)),
        notes=_NOTES,
    )


def ablation_rows(variants: Sequence[Variant], runs: Sequence[Runs]) -> list[dict[str, Any]]:
    """One row per variant; `runs[i]` arrays are [S, ...] (one point); the first is the
    reference (full Placeto)."""
    means = [r.makespans.mean(axis=1) for r in runs]  # [S] mean over graphs, µs
    reference = means[0].mean()
    rows = []
    for variant, run, per_seed in zip(variants, runs, means, strict=True):
        tail = max(1, round(TAIL_FRACTION * run.curves.shape[1]))
        final = run.curves[:, -tail:].mean(axis=1)  # [S]
        rows.append(
            {
                "variant": variant.name,
                "overrides": " ".join(variant.overrides) or "(base)",
                "makespan_ms": float(per_seed.mean() / MS),
                "makespan_std_ms": float(per_seed.std() / MS),
                "initial_ms": float(run.initial.mean() / MS),
                "vs_full": float(per_seed.mean() / reference),
                "speedup_vs_single": float((run.single / run.makespans).mean()),
                "final_runtime": float(final.mean()),
                "final_runtime_std": float(final.std()),
            }
        )
    return rows


def draw_spread(labels: Sequence[str], curves: Sequence[np.ndarray]):
    """`draw(figure)`: per label, the mean over seeds of [S, iterations] with a band of one
    standard deviation."""

    def draw(figure) -> None:
        ax = figure.add_subplot()
        for label, curve in zip(labels, curves, strict=True):
            x = np.arange(1, curve.shape[1] + 1)
            mean, std = curve.mean(axis=0), curve.std(axis=0)
            (line,) = ax.plot(x, mean, label=label)
            ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        ax.set_xlabel("update")
        ax.set_ylabel("sampled final runtime / initial")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    return draw


_NOTES = """\
Every variant changes one setting of the same base config (`config.base` above); the seeds of a
variant run vmapped in one compiled program, so each variant compiles once (a train and a greedy
program). Quick: the graph coarsened to 24 groups, 40 updates of 16 episodes at learning rate
3e-2, sized for a 2-core CPU: 400-470 s of CPU time, mostly compilation (11 min wall measured
twice on a 2-core EPYC shared with other JAX jobs, load 6-9). Its greedy makespans move little
from the initial placement and differ between seeds by more than between most variants, so read
the learning curves and final_runtime first. Full: 48 groups, 8 radial rounds, 500 updates of
256 episodes, for an accelerator: on one H200, 16-25 s compilation, 0.19-0.39 s per update
(5 seeds vmapped) and 6-9 s of greedy evaluation per variant, about 3 min per variant and 18 min
in all."""
