"""`placeto-jax train`, `place` and `eval` end to end on tiny graphs, and their errors."""

from __future__ import annotations

import json

import pytest

from placeto_jax.cli import main

TINY = [
    "--set",
    "train.iterations=2",
    "--set",
    "train.episodes=4",
    "--set",
    "policy.rounds=1",
    "--set",
    "run.eval_every=1",
    "--set",
    "run.checkpoint_every=1",
]


def _train(workdir) -> int:
    graphs = "example:diamond,layered:12"
    argv = ["train", "--graphs", graphs, "--devices", "2", "--workdir", str(workdir)]
    return main([*argv, "--no-progress", *TINY])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cli") / "run"
    assert _train(workdir) == 0
    return workdir


def test_train_prints_a_table_and_resumes(run_dir, capsys):
    assert _train(run_dir) == 0
    out = capsys.readouterr().out
    assert "example:diamond" in out and "layered:12" in out and str(run_dir) in out


def test_place_json_has_the_documented_fields(run_dir, capsys, tmp_path):
    output = tmp_path / "placement.json"
    assert (
        main(["place", "layered:16:3", "--checkpoint", str(run_dir), "--json", "-o", str(output)])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    for key in (
        "graph",
        "makespan",
        "single_device_makespan",
        "initial_makespan",
        "peak_memory",
        "placement",
        "evaluations",
    ):
        assert key in doc
    assert len(doc["placement"]) == 16 and set(doc["placement"]) <= {0, 1}
    assert doc["makespan"] <= doc["initial_makespan"]  # the initial placement is a candidate
    assert json.loads(output.read_text())["placement"] == doc["placement"]
    # the written placement simulates to the reported makespan
    assert (
        main(["simulate", "layered:16:3", "--devices", "2", "--placement", str(output), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["makespan_us"] == pytest.approx(doc["makespan"])


def test_eval_prints_one_row_per_graph(run_dir, capsys):
    assert (
        main(["eval", "--checkpoint", str(run_dir), "--graphs", "example:diamond,layered:9"]) == 0
    )
    out = capsys.readouterr().out
    assert "single ms" in out and "example:diamond" in out and "layered:9" in out


def test_place_with_a_baseline_method(capsys):
    assert main(["place", "example:diamond", "--method", "heft", "--devices", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "heft" and len(doc["placement"]) == 4 and doc["wall_s"] >= 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["place", "example:diamond", "--checkpoint", "{run}", "--devices", "3"],
            "places on 2 devices, not 3",
        ),
        (["place", "example:diamond", "--checkpoint", "{tmp}/nothing"], "does not exist"),
        (
            ["place", "example:diamond", "--method", "magic", "--devices", "2"],
            "unknown placement method 'magic'",
        ),
        (
            [
                "train",
                "--graphs",
                "layered:100",
                "--devices",
                "2",
                "--workdir",
                "{tmp}/w",
                "--set",
                "run.buckets=32,64",
            ],
            "larger than every bucket",
        ),
        (
            [
                "train",
                "--graphs",
                "example:diamond",
                "--devices",
                "2",
                "--workdir",
                "{tmp}/w",
                "--set",
                "train.episodes=zero",
            ],
            "bad value 'zero' for config train.episodes",
        ),
    ],
)
def test_bad_input_is_one_clear_line(run_dir, tmp_path, capsys, argv, message):
    argv = [a.format(run=run_dir, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("placeto-jax: error:") and message in err
    assert not (tmp_path / "w").exists()  # nothing half-written
