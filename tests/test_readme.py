"""README.md: its quickstart runs as written, and it fits a screen."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import placeto_jax as pj

README = Path(__file__).parents[1] / "README.md"


def _quickstart() -> str:
    text = README.read_text()
    section = text.split("## Quickstart: your own model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_fits_a_screen_and_its_table_cells_are_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    assert len(_quickstart().splitlines()) <= 15
    table = README.read_text().split("## Status", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("|") and not r.startswith("|---")]
    assert len(rows) > 5
    for row in rows:
        for cell in row.strip("|").split("|"):
            assert len(cell.split()) <= 25, cell


def test_the_readmes_relative_links_name_files_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link and not link.startswith("mailto:")]
    assert local
    missing = [link for link in local if not (README.parent / link).exists()]
    assert not missing, missing


def test_the_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_quickstart(), "README.md quickstart", "exec"), scope)
    graph, cluster, best, mine = (scope[k] for k in ("graph", "cluster", "best", "mine"))
    assert graph.n_ops > 5
    for placed in (best, mine):
        assert math.isfinite(placed.result.makespan) and placed.result.makespan > 0
        simulated = pj.simulate(graph, cluster, placed.result.placement)
        assert placed.result.makespan == pytest.approx(float(simulated.makespan), rel=1e-9)
    printed = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == pytest.approx(mine.result.makespan / best.result.makespan)
    assert (tmp_path / "runs" / "mlp").is_dir()  # the policy's checkpoints
