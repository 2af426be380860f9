"""placeto_jax.provenance and files.write_result: the commit, command line and versions a result
records, written atomically beside its payload."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from placeto_jax import provenance as prov
from placeto_jax.files import write_result

REPO = Path(__file__).resolve().parents[1]
ARGV = ["python", "experiments/run.py", "--set", "a=1 b", "--name", "it's", "--flag"]


def test_fields_and_types():
    doc = prov.provenance(ARGV)
    assert set(doc) == {"commit", "dirty", "command", "versions", "utc"}
    assert doc["commit"] is None or (len(doc["commit"]) == 40 and int(doc["commit"], 16) >= 0)
    assert doc["dirty"] in (None, True, False)
    assert isinstance(doc["command"], str)
    when = datetime.datetime.fromisoformat(doc["utc"])
    assert when.utcoffset() == datetime.timedelta(0)
    assert abs(datetime.datetime.now(datetime.timezone.utc) - when).total_seconds() < 60
    json.dumps(doc)  # all of it JSON


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_commit_is_head_of_this_checkout():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not run from a git checkout")
    doc = prov.provenance()
    assert doc["commit"] == head.stdout.strip()
    assert isinstance(doc["dirty"], bool)


def test_the_process_start_is_about_now():
    started = prov.process_start()
    if started is None:
        pytest.skip("no /proc: the start time is unknown here")
    assert started <= datetime.datetime.now().timestamp() + 1  # this process started earlier


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_run_that_outlives_a_commit_records_the_commit_it_started_at(monkeypatch):
    def log(*argv: str) -> str:
        out = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip("not run from a git checkout with two commits")
        return out.stdout.strip()

    head, parent = log("rev-parse", "HEAD"), log("rev-parse", "HEAD~1")
    head_time, parent_time = (
        int(log("log", "-1", "--format=%ct", "HEAD")),
        int(log("log", "-1", "--format=%ct", "HEAD~1")),
    )
    if parent_time >= head_time:
        pytest.skip("HEAD and its parent were committed in the same second")
    monkeypatch.setattr(prov, "process_start", lambda: head_time - 1.5)  # before HEAD landed
    doc = prov.provenance(ARGV)
    assert (doc["commit"], doc["commit_at_write"]) == (parent, head)
    for after in (1.0, -0.5):  # after it, or within the start's second of uncertainty
        monkeypatch.setattr(prov, "process_start", lambda after=after: head_time + after)
        doc = prov.provenance(ARGV)
        assert doc["commit"] == head and "commit_at_write" not in doc


def test_command_round_trips_through_shlex():
    assert shlex.split(prov.provenance(ARGV)["command"]) == ARGV
    # the default: the interpreter's name, then this process's argv
    default = shlex.split(prov.provenance()["command"])
    assert default == [Path(sys.executable).name, *sys.argv]


def test_versions_are_the_installed_ones():
    versions = prov.provenance(ARGV)["versions"]
    assert versions["jax"] == jax.__version__
    assert versions["numpy"] == np.__version__
    assert versions["python"] == platform.python_version()
    assert set(versions) == {"python", "placeto_jax", "jax", "jaxlib", "flax", "optax", "jraph",
                             "numpy"}  # fmt: skip
    assert prov.versions(("jax", "no-such-distribution-here"))["no-such-distribution-here"] is None


def test_no_git_gives_none(monkeypatch, tmp_path):
    assert prov.git("rev-parse", "HEAD", cwd=tmp_path / "missing") is None  # no such folder

    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    doc = prov.provenance(ARGV)
    assert (doc["commit"], doc["dirty"]) == (None, None)
    assert shlex.split(doc["command"]) == ARGV


def test_write_result_adds_provenance(tmp_path):
    path = tmp_path / "a" / "r.json"
    payload = {"rows": [{"x": 1.5}], "n": 2}
    write_result(path, payload, argv=ARGV)
    doc = json.loads(path.read_text())
    assert payload == {"rows": [{"x": 1.5}], "n": 2}  # the caller's dict untouched
    assert {k: v for k, v in doc.items() if k != "provenance"} == payload
    assert list(doc) == ["rows", "n", "provenance"]
    assert shlex.split(doc["provenance"]["command"]) == ARGV
    assert doc["provenance"]["versions"]["jax"] == jax.__version__


def test_write_result_is_atomic_and_refuses_its_own_key(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_result(path, {"x": object()}, argv=ARGV)  # not JSON: nothing written
    with pytest.raises(ValueError, match="provenance"):
        write_result(path, {"provenance": "mine"}, argv=ARGV)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]
    write_result(path, {"x": 1}, argv=ARGV)
    assert json.loads(path.read_text())["x"] == 1
    assert os.listdir(tmp_path) == ["r.json"]
