"""What every experiment writes under `results/<experiment>/`: a provenance header (git commit,
command line, config, seeds, hardware, library versions, wall time), Markdown tables, CSV and
JSON, and PNG plots. Every file is written atomically.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from placeto_jax.files import atomic_write, write_result
from placeto_jax.provenance import git, versions

SEARCH_METHODS = ("local-search", "cross-entropy")  # the baselines that take a search budget
EVALUATIONS = (
    "Every placement each method simulated to choose its result, as `place` counts them (the "
    "final scoring not counted; 0: a rule or a list scheduler). Placeto: its training episodes' "
    "steps and each greedy evaluation's episode and exact ranking."
)  # the note of each experiment's `evaluations` table
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "jraph", "chex", "numpy", "scipy", "pymetis")


def git_commit(root: Path | None = None) -> dict[str, Any]:
    """{"commit": sha or None, "modified": [files changed since it, outside results/]} of the
    source checkout (or of the repository at `root`)."""
    root = root or Path(__file__).resolve().parents[3]
    # the experiments' own outputs (results/ holds committed tables) do not make a checkout dirty
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", cwd=root)
    return {"commit": git("rev-parse", "HEAD", cwd=root), "modified": (status or "").splitlines()}


def hardware() -> dict[str, Any]:
    """CPU model and count, and the JAX backend with its devices."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu
            )
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d.device_kind) for d in jax.devices()],
    }


@dataclasses.dataclass(frozen=True)
class Header:
    """Provenance of one experiment run."""

    experiment: str
    preset: str  # "quick" or "full"
    config: Mapping[str, Any]  # the experiment's resolved settings
    seeds: Sequence[int]
    git: Mapping[str, Any]
    hardware: Mapping[str, Any]
    versions: Mapping[str, str | None]
    started: str  # UTC, ISO 8601
    wall_s: float  # seconds the whole experiment took

    def markdown(self) -> str:
        commit = self.git.get("commit") or "unknown"
        dirty = " (with uncommitted changes)" if self.git.get("modified") else ""
        libs = ", ".join(f"{k} {v}" for k, v in self.versions.items() if v)
        hw = self.hardware
        return "\n".join(
            [
                f"- experiment: `{self.experiment}`, preset `{self.preset}`",
                f"- git commit: `{commit}`{dirty}",
                f"- started {self.started}, wall time {self.wall_s:.0f} s",
                f"- hardware: {hw['cpu']} x {hw['cpu_count']}, JAX backend {hw['jax_backend']} "
                f"({', '.join(hw['jax_devices'])})",
                f"- seeds: {', '.join(map(str, self.seeds))}",
                f"- libraries: {libs}",
                "",
                "<details><summary>config (also in header.json)</summary>",
                "",
                "```json",
                json.dumps(self.config, indent=1, sort_keys=True, default=str),
                "```",
                "",
                "</details>",
            ]
        )


class Recorder:
    """Collects an experiment's outputs in `root/<experiment>/` and stamps them with a Header."""

    def __init__(self, root: str | os.PathLike, experiment: str, preset: str):
        self.directory = Path(root) / experiment
        self.directory.mkdir(parents=True, exist_ok=True)
        self.experiment = experiment
        self.preset = preset
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._clock = time.perf_counter()
        self.sections: list[str] = []

    def header(self, config: Mapping[str, Any], seeds: Sequence[int]) -> Header:
        return Header(
            experiment=self.experiment,
            preset=self.preset,
            config=dict(config),
            seeds=list(seeds),
            git=git_commit(),
            hardware=hardware(),
            versions=versions(LIBRARIES),
            started=self.started,
            wall_s=time.perf_counter() - self._clock,
        )

    def table(
        self, name: str, title: str, rows: Sequence[Mapping[str, Any]], note: str = ""
    ) -> str:
        """Write `name.csv` and `name.json` (rows as given) and keep a Markdown section for the
        report; returns the Markdown table."""
        columns = list(rows[0]) if rows else []
        write_text(self.directory / f"{name}.csv", to_csv(rows, columns))
        write_text(self.directory / f"{name}.json", json.dumps(rows, indent=1, default=_plain))
        table = markdown_table(rows, columns)
        self.sections.append(f"## {title}\n\n{note + chr(10) * 2 if note else ''}{table}\n")
        return table

    def wall_times(self, rows: Sequence[Mapping[str, Any]]) -> str:
        """The `wall_s` table: seconds per method, compilation included."""
        return self.table(
            "wall_s",
            "Wall time (s) per method",
            rows,
            note="Including any JIT compilation the method triggered (the first graph of a "
            "size pays for it).",
        )

    def figure(self, name: str, title: str, draw) -> Path:
        """Render `draw(figure)` to `name.png` and reference it in the report."""
        path = self.directory / f"{name}.png"
        save_figure(path, draw)
        self.sections.append(f"## {title}\n\n![{title}]({path.name})\n")
        return path

    def gantt(
        self, name: str, title: str, graph, cluster, placement: np.ndarray, method: str
    ) -> Path:
        """A Gantt chart of `placement` (found by `method`), simulated exactly, as `name.png`."""
        from placeto_jax.plotting import draw_gantt
        from placeto_jax.sim.api import simulate

        result = simulate(graph, cluster, np.asarray(placement))
        return self.figure(
            name,
            title,
            lambda fig: draw_gantt(fig, graph, cluster, placement, result, f"{method}: "),
        )

    def finish(self, config: Mapping[str, Any], seeds: Sequence[int], notes: str = "") -> Path:
        """Write `README.md` (header, notes, every section) and `header.json` (with a
        "provenance" block: commit, command line, versions); return the README's path."""
        header = self.header(config, seeds)
        doc = json.loads(json.dumps(dataclasses.asdict(header), default=_plain))
        write_result(self.directory / "header.json", doc)
        parts = [f"# {self.experiment} ({self.preset})\n", header.markdown() + "\n"]
        if notes:
            parts.append(notes.strip() + "\n")
        path = self.directory / "README.md"
        write_text(path, "\n".join(parts + self.sections))
        return path


def fastest(candidates: Mapping[str, tuple[float | None, bool | None]]) -> tuple[str, bool]:
    """(method, fits) of the shortest makespan among `candidates` (method -> (makespan, fits
    memory); makespan None: no placement) that fit memory, or among all if none fits."""
    placed = {m: c for m, c in candidates.items() if c[0] is not None}
    if not placed:
        raise ValueError("no method gave a placement")
    fitting = {m: c for m, c in placed.items() if c[1]}
    pool = fitting or placed
    return min(pool, key=lambda m: pool[m][0]), bool(fitting)


def write_text(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text.encode())


def save_figure(path: Path, draw) -> None:
    """Render `draw(figure)` with the Agg canvas and write the PNG atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=110)
    FigureCanvasAgg(figure)
    draw(figure)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    with atomic_write(path) as f:
        f.write(buffer.getvalue())


def cell(value: Any) -> str:
    """One Markdown/CSV cell: floats with 4 significant digits, None as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            return str(float(value))
        return f"{float(value):.4g}"
    return str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(no rows)"
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else _plain(row.get(c)) for c in columns])
    return buffer.getvalue()


def _plain(value: Any) -> Any:
    """JSON-able Python scalars and lists from NumPy values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
