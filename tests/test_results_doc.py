"""experiments/results_doc.py: the index of results/ lists every JSON result with the commit it
measured (recorded, or honestly labelled not recorded), deterministically."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import experiment

SHA = "0123456789abcdef0123456789abcdef01234567"
DATE = "2024-01-02"


def _git(root: Path, *argv: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": f"{DATE}T03:04:05Z"}
    env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"]
    config = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    out = subprocess.run(["git", *config, *argv], cwd=root, env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def _results(root: Path) -> Path:
    """results/alpha/ with a README, a JSON with provenance, one without, and a checkpoint."""
    alpha = root / "results" / "alpha"
    (alpha / "runs" / "r" / "checkpoints").mkdir(parents=True)
    (alpha / "README.md").write_text("\n# Alpha runs\n\nmore\n")
    recorded = {"commit": SHA, "dirty": False, "command": "python run.py --x 1", "utc": "t"}
    (alpha / "a.json").write_text(json.dumps({"value": 3, "provenance": recorded}))
    (alpha / "b.json").write_text(json.dumps([{"graph": "g", "ms": 1.0}, {"graph": "h"}]))
    (alpha / "runs" / "r" / "checkpoints" / "c.json").write_text("{}")  # an artifact
    return root / "results"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_lists_both_files_with_their_commits(tmp_path):
    results = _results(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "results")
    _git(tmp_path, "commit", "-q", "-m", "results")
    short = _git(tmp_path, "rev-parse", "--short", "HEAD")
    text = experiment("results_doc").render(results, tmp_path / "docs" / "results.md")
    section = text[text.index("## results/alpha/") :]
    assert section.splitlines() == [
        "## results/alpha/",
        "",
        "[README](../results/alpha/README.md): Alpha runs",
        "",
        "- [`a.json`](../results/alpha/a.json): keys: value",
        "  - measured: `0123456` (recorded)",
        "  - command: `python run.py --x 1`",
        "- [`b.json`](../results/alpha/b.json): 2 rows: graph, ms",
        f"  - measured: not recorded; last committed at `{short}` ({DATE})",
    ]
    assert "make results-doc" in text.splitlines()[2] and "do not edit" in text


def test_uncommitted_file_and_deterministic_output(tmp_path):
    results = _results(tmp_path)  # no git repository around it
    module = experiment("results_doc")
    out = tmp_path / "docs" / "results.md"
    assert module.main(["--results", str(results), "--out", str(out)]) == 0
    first = out.read_bytes()
    assert module.main(["--results", str(results), "--out", str(out)]) == 0
    assert out.read_bytes() == first == module.render(results, out).encode()
    assert "  - measured: not recorded; not committed" in first.decode().splitlines()
    assert "checkpoints" not in first.decode()
    assert sorted(os.listdir(out.parent)) == ["results.md"]
