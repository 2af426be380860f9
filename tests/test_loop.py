"""The host loop and run directories: resume after a kill ends in the uninterrupted state,
metrics are not duplicated, config checks, corrupt or missing checkpoints, device counts."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from placeto_jax import Cluster, Graph, simulate
from placeto_jax.config import apply, make_config
from placeto_jax.env import prepare
from placeto_jax.rl.checkpoint import (
    Checkpointer,
    Provenance,
    config_digest,
    load_cluster,
    load_run,
    write_run,
)
from placeto_jax.rl.loop import chunks, read_metrics, train_and_evaluate

GRAPH = Graph.from_edges([100.0] * 6, [1e5] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)])
SETTINGS = [
    "train.iterations=6",
    "train.episodes=4",
    "policy.rounds=1",
    "run.eval_every=3",
    "run.checkpoint_every=2",
]


def _run(workdir, **kwargs):
    config = make_config(None, SETTINGS, n_devices=2)
    return train_and_evaluate(config, [prepare("g", GRAPH)], workdir, progress=False, **kwargs)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    return workdir, _run(workdir)


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_state(finished, tmp_path):
    _, full = finished
    stopped = _run(tmp_path, stop_at=5)  # "killed" after update 5; last checkpoint at 4
    assert int(stopped.state.iteration) == 5
    resumed = _run(tmp_path)
    assert resumed.resumed_from == 4
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), full.state, resumed.state)
    assert all(jax.tree.leaves(same))
    assert [m["iteration"] for m in read_metrics(tmp_path)] == [1, 2, 3, 4, 5, 6]


def test_run_directory_contents(finished):
    workdir, result = finished
    config, graphs = load_run(workdir)
    assert config.train.iterations == 6 and graphs == ["g"]
    metrics = read_metrics(workdir)
    assert "eval/best_runtime" in metrics[2] and "eval/best_runtime" not in metrics[0]
    assert list((workdir / "tb").iterdir())  # TensorBoard event files
    assert result.evaluation["best_placement"].shape == (1, 32)  # smallest bucket


def test_a_different_config_in_the_same_directory_is_refused(finished, tmp_path):
    workdir, _ = finished
    shutil.copy(workdir / "run.json", tmp_path / "run.json")
    config = make_config(None, [*SETTINGS, "train.episodes=8"], n_devices=2)
    with pytest.raises(ValueError, match="another config"):
        train_and_evaluate(config, [prepare("g", GRAPH)], tmp_path, progress=False)


def test_a_run_from_before_a_field_existed_resumes_with_the_fields_default(finished, tmp_path):
    workdir, _ = finished
    doc = json.loads((workdir / "run.json").read_text())
    config, _ = load_run(workdir)
    cluster = load_cluster(workdir, config)
    del doc["config"]["agent"], doc["config"]["train"]["imitation"]  # an earlier version's
    del doc["cluster"]  # as was every run.json before clusters were recorded
    (tmp_path / "run.json").write_text(json.dumps(doc))
    assert load_cluster(tmp_path, config) == cluster  # the config's preset
    write_run(tmp_path, config, doc["graphs"], doc["graph_digests"], cluster)  # accepted
    episodes = config.train.episodes
    changed = apply(config, {"train.episodes": episodes + 1})  # still refused: another run
    with pytest.raises(ValueError, match=rf"train\.episodes: {episodes} there, {episodes + 1}"):
        write_run(tmp_path, changed, doc["graphs"], doc["graph_digests"], cluster)


def test_a_corrupt_run_file_or_checkpoint_is_a_clear_error(finished, tmp_path):
    workdir, result = finished
    with pytest.raises(ValueError, match="does not exist"):
        load_run(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"no run\.json"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        load_run(tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(workdir, broken)
    for step in (p for p in (broken / "checkpoints").iterdir() if p.name.isdigit()):
        for f in step.rglob("*"):
            if f.is_file() and f.stat().st_size > 0 and "state" in f.parts:
                f.write_bytes(b"\0" * 7)
    provenance = Provenance(config_digest(load_run(workdir)[0]), ())
    with pytest.raises(ValueError, match=r"every checkpoint in .* is damaged"):
        Checkpointer(broken).restore_state(result.state, provenance)


def test_config_file_round_trips(finished):
    workdir, _ = finished
    doc = json.loads((workdir / "run.json").read_text())
    assert doc["format"] == 1 and doc["config"]["train"]["episodes"] == 4


def test_updates_run_in_chunks_that_end_at_every_evaluation_and_checkpoint():
    run = make_config(None, SETTINGS, n_devices=2).run  # eval every 3, checkpoint every 2
    assert chunks(0, 6, run) == [(1, 2), (3, 3), (4, 4), (5, 6)]
    assert chunks(4, 6, run) == [(5, 6)]  # resumed at the checkpoint of update 4: same chunks
    assert chunks(0, 5, run) == [(1, 2), (3, 3), (4, 4), (5, 5)]  # stopped early at 5
    assert chunks(6, 6, run) == []


def test_every_update_is_logged_once_with_its_own_metrics(finished):
    workdir, _ = finished
    records = read_metrics(workdir)
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert len({r["train/loss"] for r in records}) == 6  # one row per update, not per chunk
    assert [i for i, r in enumerate(records, 1) if "eval/best_runtime" in r] == [3, 6]


def test_logged_scalars_say_what_they_are_against(finished):
    workdir, result = finished
    records = read_metrics(workdir)
    for r in records:  # the mean gain over each episode's start is the gap of the means
        gain = r["train/initial_runtime"] - r["train/final_runtime"]
        assert r["train/improvement_vs_start"] == pytest.approx(gain, abs=1e-6)
    # the last evaluation is of the final parameters: its best placement against every op on
    # device 0, both simulated on the graph, as `place` reports them
    cluster = Cluster.preset("placeto-k80", 2)
    best = result.evaluation["best_placement"][0, :6]
    ratio = simulate(GRAPH, cluster, best).makespan / simulate(GRAPH, cluster, [0] * 6).makespan
    assert records[-1]["eval/g/best_vs_single"] == pytest.approx(float(ratio), rel=1e-12)
    assert records[-1]["eval/best_vs_single"] == records[-1]["eval/g/best_vs_single"]


def test_a_run_whose_updates_were_all_skipped_fails_loudly(capsys):
    from placeto_jax.rl.loop import check_learned

    with pytest.raises(ValueError, match="all 5 updates were skipped"):
        check_learned(5, 5)
    check_learned(5, 2)
    assert "2 of 5 updates were skipped" in capsys.readouterr().err
    check_learned(0, 0)  # a finished run resumed: nothing to learn, nothing to say
    check_learned(5, 0)
    assert capsys.readouterr().err == ""
