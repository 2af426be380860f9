"""Fault injection: damaged checkpoints, a second `train` on one workdir, changed graphs,
nonsense configuration, unwritable folders, Ctrl-C, an unreachable coordinator, and wrong
arguments to the Python API. Every fault ends in one clear line (or a documented recovery),
never in a silent wrong result."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.cli import _swallowed_ctrl_c_sent_again, main
from placeto_jax.config import make_config
from placeto_jax.env import prepare
from placeto_jax.rl.loop import TrainingInterrupted, read_metrics, train_and_evaluate

GRAPH = pj.Graph.from_edges([100.0] * 6, [1e5] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)])
CLI = str(Path(sys.executable).with_name("placeto-jax"))  # the console script of this venv
TINY = [
    "--devices", "2", "--no-progress",
    "--set", "train.iterations=6", "--set", "train.episodes=4", "--set", "policy.rounds=1",
    "--set", "run.eval_every=2", "--set", "run.checkpoint_every=2",
]  # fmt: skip


def _train(workdir: Path, graph: str = "example:diamond", *extra: str) -> int:
    return main(["train", "--graphs", graph, "--workdir", str(workdir), *TINY, *extra])


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run (checkpoints at updates 4 and 6) and its placement of the diamond."""
    workdir = tmp_path_factory.mktemp("faults") / "run"
    assert _train(workdir) == 0
    out = workdir.parent / "placement.json"
    assert main(["place", "example:diamond", "--checkpoint", str(workdir), "-o", str(out)]) == 0
    return workdir, json.loads(out.read_text())["placement"]


def _copy(trained, tmp_path) -> Path:
    workdir = tmp_path / "run"
    shutil.copytree(trained[0], workdir)
    return workdir


def _files(step: Path, item: str) -> list[Path]:
    return sorted(p for p in (step / item).rglob("*") if p.is_file() and p.stat().st_size)


def _flip(path: Path, rng: np.random.Generator, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    for i in rng.integers(0, len(data), size=count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------- 1. checksums
@pytest.mark.parametrize("seed", range(6))
def test_flipped_bytes_in_the_latest_params_never_give_a_placement(trained, tmp_path, capsys, seed):
    workdir = _copy(trained, tmp_path)
    rng = np.random.default_rng(seed)
    files = _files(workdir / "checkpoints" / "6", "params")
    _flip(files[int(rng.integers(len(files)))], rng, count=int(rng.integers(1, 17)))
    capsys.readouterr()
    status = main(["place", "example:diamond", "--checkpoint", str(workdir)])
    assert status == 2
    err = _error(capsys)
    assert "checkpoint step 6 in" in err and "is damaged" in err


def test_a_damaged_latest_state_resumes_from_the_newest_intact_step(trained, tmp_path, capsys):
    workdir = _copy(trained, tmp_path)
    files = _files(workdir / "checkpoints" / "6", "state")
    _flip(max(files, key=lambda p: p.stat().st_size), np.random.default_rng(0))
    shutil.rmtree(workdir / "checkpoints" / "6" / "params")  # the policy too: place must refuse
    capsys.readouterr()
    assert _train(workdir) == 0  # resumes from update 4 and trains 5 and 6 again
    err = capsys.readouterr().err
    assert "checkpoint step 6" in err and "resuming from step 4" in err
    assert (workdir / "damaged-checkpoints" / "6").is_dir()
    assert [m["iteration"] for m in read_metrics(workdir)] == [1, 2, 3, 4, 5, 6]
    out = tmp_path / "placement.json"
    assert main(["place", "example:diamond", "--checkpoint", str(workdir), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["placement"] == trained[1]  # the same run, replayed


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_damaged_latest_params_heal_on_train_and_damage_twice_keeps_both(
    trained, tmp_path, capsys, damage
):
    # The policy of the latest step is damaged (a flipped byte, or its params/ deleted) while
    # its state is intact: `place` refuses it; `train` on the workdir moves the step aside,
    # resumes from update 4 and saves step 6 again, after which `place` gives the run's own
    # placement. Damaged a second time, the first copy set aside stays.
    workdir = _copy(trained, tmp_path)
    for round_ in (1, 2):
        params = workdir / "checkpoints" / "6" / "params"
        if damage == "flip":
            _flip(max(_files(params.parent, "params"), key=lambda p: p.stat().st_size),
                  np.random.default_rng(round_))  # fmt: skip
        else:
            shutil.rmtree(params)
        capsys.readouterr()
        assert main(["place", "example:diamond", "--checkpoint", str(workdir)]) == 2
        assert _train(workdir) == 0
        err = capsys.readouterr().err
        assert "checkpoint step 6" in err and "resuming from step 4" in err
        out = tmp_path / "placement.json"
        assert main(["place", "example:diamond", "--checkpoint", str(workdir), "-o", str(out)]) == 0
        assert json.loads(out.read_text())["placement"] == trained[1]
    aside = sorted(p.name for p in (workdir / "damaged-checkpoints").iterdir())
    assert aside == ["6", "6.1"]


def test_a_cut_off_last_metrics_line_is_dropped_on_resume(trained, tmp_path, capsys):
    # A run killed while writing metrics.jsonl leaves half a line; the next `train` drops it
    # with everything after the newest checkpoint, and the records read back whole.
    workdir = _copy(trained, tmp_path)
    shutil.rmtree(workdir / "checkpoints" / "6")  # resume from update 4
    metrics = workdir / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"iteration": 7, "train/los')
    assert _train(workdir) == 0
    assert [m["iteration"] for m in read_metrics(workdir)] == [1, 2, 3, 4, 5, 6]


def test_a_truncated_latest_step_falls_back_and_a_missing_record_counts_as_damage(
    trained, tmp_path, capsys
):
    workdir = _copy(trained, tmp_path)
    biggest = max(_files(workdir / "checkpoints" / "6", "state"), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
    (workdir / "checkpoints" / "4" / "integrity.json").unlink()
    capsys.readouterr()
    assert _train(workdir) == 2  # neither step is intact
    assert "every checkpoint in" in _error(capsys)


# ---------------------------------------------------------------------- 2. one run per workdir
def test_a_second_train_on_a_locked_workdir_is_refused(trained, tmp_path, capsys):
    workdir = _copy(trained, tmp_path)
    before = (workdir / "metrics.jsonl").read_text()
    lock = workdir / "train.lock"
    lock.write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename}))
    assert _train(workdir) == 2
    assert f"is in use by another train (pid {os.getppid()})" in _error(capsys)
    assert (workdir / "metrics.jsonl").read_text() == before  # nothing appended
    assert lock.exists()  # someone else's lock stays


def test_a_stale_lock_is_taken_over_and_released(trained, tmp_path, capsys):
    workdir = _copy(trained, tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (workdir / "train.lock").write_text(json.dumps({"pid": gone.pid, "host": os.uname().nodename}))
    assert _train(workdir) == 0
    assert "removing the stale lock" in capsys.readouterr().err
    assert not (workdir / "train.lock").exists()


def test_a_lock_whose_pid_now_runs_another_program_is_stale(trained, tmp_path, capsys):
    # The lock names a live pid (the test's parent) but another start time: that pid was given
    # to a later process, so the run that held the lock is gone.
    from placeto_jax.rl.checkpoint import started

    if started(os.getppid()) is None:
        pytest.skip("process start times are read from /proc")
    workdir = _copy(trained, tmp_path)
    holder = {"pid": os.getppid(), "host": os.uname().nodename, "started": "1"}
    (workdir / "train.lock").write_text(json.dumps(holder))
    assert _train(workdir) == 0
    assert f"removing the stale lock {workdir / 'train.lock'} (pid {os.getppid()} now runs" in (
        capsys.readouterr().err
    )


# ---------------------------------------------------------------------- 3. changed graphs
@pytest.mark.slow
def test_a_resume_with_a_changed_graph_is_refused(tmp_path, capsys):
    path = tmp_path / "g.json"
    pj.save_graph(GRAPH, path)
    assert _train(tmp_path / "run", str(path)) == 0
    changed = pj.Graph.from_edges(GRAPH.cost * 10, GRAPH.out_bytes, GRAPH.edges)
    pj.save_graph(changed, path)
    assert _train(tmp_path / "run", str(path)) == 2
    assert f"graph {str(path)!r} has changed since the run" in _error(capsys)


# ---------------------------------------------------------------------- 4. configuration
@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("train.learning_rate=inf", "config train.learning_rate=inf must be a finite number"),
        ("env.memory_penalty=inf", "config env.memory_penalty=inf must be a finite number"),
        ("train.entropy=-5", "config train.entropy must be >= 0"),
        ("policy.head_widths=0", "config policy.head_widths must be >= 1"),
        ("n_devices=3", "--set n_devices=3 conflicts with n_devices=2 given by its own flag"),
        ("train.learning_rate=2", "config train.learning_rate must be <= 1"),
        ("train.graphs_per_update=-1", "config train.graphs_per_update must be >= 0"),
    ],
)
def test_nonsense_configuration_writes_nothing(tmp_path, capsys, setting, problem):
    assert _train(tmp_path / "run", "example:diamond", "--set", setting) == 2
    assert problem in _error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ["--set", "train.episodes=4", "--set", "train.episodes=8"],
            "train.episodes is given twice",
        ),
        (["--num-processes", "2"], "--num-processes and --process-id go with --coordinator"),
        (["--seed", str(2**63)], "--seed must be in [0, 2^63), got 9223372036854775808"),
    ],
)
def test_train_arguments_that_cannot_work_write_nothing(tmp_path, capsys, argv, problem):
    assert _train(tmp_path / "run", "example:diamond", *argv) == 2
    assert problem in _error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["demo", "--batch", "10000000000"], "--batch must be in [1, 1,048,576]"),
        (["demo", "--batch", "3000000"], "--batch must be in [1, 1,048,576]"),
        (["simulate", "example:diamond", "--devices", "2", "--seed", "-1"], "--seed must be in"),
        (
            ["place", "example:diamond", "--method", "local-search", "--devices", "2",
             "--budget", "1000000000000"],
            "the budget must be in [1, 100,000,000] evaluations",
        ),
        (
            ["place", "example:diamond", "--method", "heft", "--devices", "2", "--budget", "5"],
            "heft takes no --budget (the searches do: random-search, local-search",
        ),
    ],
)  # fmt: skip
def test_sizes_past_their_bounds_are_one_line_before_any_work(capsys, argv, problem):
    assert main(argv) == 2
    assert problem in _error(capsys)


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("train.episodes=1000000000", "config train.episodes must be <= 65,536"),
        ("train.iterations=99999999999999999999", "config train.iterations must be <= 10,000,000"),
    ],
)
def test_runs_too_large_to_fit_write_nothing(tmp_path, capsys, setting, problem):
    argv = ["train", "--graphs", "example:diamond", "--devices", "2"]
    assert main([*argv, "--workdir", str(tmp_path / "run"), "--set", setting]) == 2
    assert problem in _error(capsys)
    assert not (tmp_path / "run").exists()


def test_a_graph_without_compute_is_one_line_before_any_work(tmp_path, capsys):
    zero = tmp_path / "zero.json"
    pj.save_graph(pj.Graph.from_edges([0.0, 0.0], [10.0, 0.0], [(0, 1)]), zero)
    message = f"{zero} has no compute: every op costs 0 µs"
    assert _train(tmp_path / "run", str(zero)) == 2
    assert message in _error(capsys) and not (tmp_path / "run").exists()
    assert main(["place", str(zero), "--pipeline", "heuristics", "--devices", "2"]) == 2
    assert message in _error(capsys)
    with pytest.raises(ValueError, match="has no compute"):
        pj.place(pj.load_graph(zero), pj.Cluster(n_devices=2), pj.PIPELINES["heuristics"])


def test_graph_fields_past_their_bounds_name_the_op():
    edges = [(0, 1)]
    with pytest.raises(ValueError, match="op 0 runs 1000000000000000 kernels, above 1,000,000"):
        pj.Graph.from_edges([1.0, 1.0], [0.0, 0.0], edges, kernels=[10**15, 1])
    with pytest.raises(ValueError, match="colocation of op 0 is -2: a group id >= 0, or -1"):
        pj.Graph.from_edges([1.0, 1.0], [0.0, 0.0], edges, colocation=[-2, 0])
    with pytest.raises(ValueError, match="costs_for names an unknown cluster preset 'k81'"):
        pj.Graph.from_edges([1.0, 1.0], [0.0, 0.0], edges, costs_for=("k81", 1.0))
    for fine in (("v100", 1.0), ("custom", 2.0), ("measured on cpu", 1.0)):
        assert pj.Graph.from_edges([1.0, 1.0], [0.0, 0.0], edges, costs_for=fine).costs_for == fine


def test_a_bad_graph_writes_nothing(tmp_path, capsys):
    assert _train(tmp_path / "run", "example:diamond,layered:0") == 2
    assert "N must be an integer >= 1" in _error(capsys)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------- 5. I/O faults
def test_a_workdir_that_cannot_be_created_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    began = time.perf_counter()
    assert _train(blocker / "run") == 2
    assert time.perf_counter() - began < 30
    err = _error(capsys)
    assert err.startswith("placeto-jax: error: cannot create the run directory")
    assert str(blocker / "run") in err


LIMITED = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
os.execv(sys.argv[2], sys.argv[2:])
"""


def _limited(size: int, *argv: str) -> subprocess.CompletedProcess:
    """`placeto-jax ARGV` run with files that may not grow past `size` bytes (`ulimit -f`; Python
    ignores SIGXFSZ, so a write past it fails with EFBIG). A `preexec_fn` would run Python in a
    child forked from this multithreaded (JAX) process."""
    return subprocess.run([sys.executable, "-c", LIMITED, str(size), CLI, *argv],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [["graphs", "export", "layered:200"],
     ["place", "layered:200", "--devices", "2", "--method", "round-robin"]],
)  # fmt: skip
def test_an_output_past_the_file_size_limit_is_one_line_naming_it(tmp_path, argv):
    out = tmp_path / "out.json"  # 8,878 and 2,779 bytes; files may not grow past 2,048
    done = _limited(2048, *argv, "-o", str(out))
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [f"placeto-jax: error: [Errno 27] File too large: '{out}'"]
    assert not list(tmp_path.iterdir())  # neither the file nor its temporary file


@pytest.mark.slow  # a subprocess that builds the trainer before it refuses
def test_a_checkpoint_past_the_file_size_limit_is_refused_before_any_update(tmp_path):
    # Files may not grow past 8 kB: run.json fits, the checkpoint's data file would not.
    workdir = tmp_path / "run"
    done = _limited(8192, "train", "--graphs", "example:diamond", "--workdir", str(workdir), *TINY)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert re.fullmatch(
        r"placeto-jax: error: cannot save checkpoints in .*/run/checkpoints: files may not grow "
        r"past 8,192 bytes \(ulimit -f\), and a checkpoint's data file takes about [\d,]+ bytes",
        lines[0],
    )
    assert sorted(p.name for p in workdir.iterdir()) == ["checkpoints", "run.json"]


def test_a_failed_save_mid_run_is_the_one_line_and_draws_no_curve(tmp_path, capsys, monkeypatch):
    from placeto_jax.rl import checkpoint

    def disk_full(self, step, state, provenance):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.Checkpointer, "_save", disk_full)
    assert _train(tmp_path / "run") == 2
    assert _error(capsys) == (
        f"placeto-jax: error: cannot save checkpoint 2 in {tmp_path / 'run' / 'checkpoints'}: "
        "OSError: [Errno 28] No space left on device"
    )
    assert not (tmp_path / "run" / "learning_curve.png").exists()  # it would hide the error


class _State(NamedTuple):  # a pytree with the `params` a checkpoint saves beside the state
    params: dict


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    from placeto_jax.rl import checkpoint

    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(
        10**9, 10**9 - 1000, 1000))  # fmt: skip
    state = _State(params={"w": np.zeros((256, 256), np.float32)})  # 256 kB of params
    saver = checkpoint.Checkpointer(tmp_path / "run")
    with pytest.raises(OSError, match=r"cannot save checkpoint 2 in .*: 0\.0 MB free, about"):
        saver.save(2, state, checkpoint.Provenance("config", ()))
    saver.close()
    assert not list((tmp_path / "run" / "checkpoints").iterdir())


def test_a_file_size_limit_below_a_checkpoint_is_refused_before_writing(tmp_path, monkeypatch):
    from placeto_jax.rl import checkpoint

    monkeypatch.setattr(checkpoint.resource, "getrlimit", lambda which: (8192, 8192))
    state = _State(params={"w": np.zeros((256, 256), np.float32)})  # 262,144 bytes
    saver = checkpoint.Checkpointer(tmp_path / "run")
    with pytest.raises(OSError) as refused:
        saver.save(2, state, checkpoint.Provenance("config", ()))
    saver.close()
    assert str(refused.value) == (
        f"cannot save checkpoint 2 in {tmp_path / 'run' / 'checkpoints'}: files may not grow "
        "past 8,192 bytes (ulimit -f), and a checkpoint's data file takes about 262,144 bytes"
    )
    assert not list((tmp_path / "run" / "checkpoints").iterdir())


def test_an_unreachable_coordinator_times_out_with_its_address(tmp_path):
    argv = [
        CLI, "train", "--graphs", "example:diamond",
        "--workdir", str(tmp_path / "run"), *TINY, "--coordinator", "127.0.0.1:9",
        "--num-processes", "2", "--process-id", "1", "--coordinator-timeout", "3",
    ]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert time.perf_counter() - began < 90
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("placeto-jax: error: cannot join the coordinator at 127.0.0.1:9")


# ---------------------------------------------------------------------- 6. Ctrl-C
ANSWERING = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])
"""


def _answering_ctrl_c(*argv: str) -> list[str]:
    """`argv` run with SIGINT at its default, as from a terminal: a suite started in the
    background (`make test &`) passes SIGINT on ignored, and Python then never answers it."""
    return [sys.executable, "-c", ANSWERING, *argv]


@pytest.fixture
def ctrl_c_answered():
    """Python's own SIGINT handler during the test, as in a foreground run."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_the_resume_ends_where_a_whole_run_ends(
    trained, tmp_path, ctrl_c_answered
):
    config = make_config(None, TINY[4::2], n_devices=2)  # the --set values of TINY
    graphs = [prepare("example:diamond", pj.resolve_graph("example:diamond"))]

    def interrupt(iteration, summary):
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGINT)

    workdir = tmp_path / "run"
    with pytest.raises(TrainingInterrupted, match="checkpoint of update 2 saved in"):
        train_and_evaluate(config, graphs, workdir, progress=False, on_eval=interrupt)
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == ["2"]
    assert not (workdir / "train.lock").exists()
    resumed = train_and_evaluate(config, graphs, workdir, progress=False)
    assert resumed.resumed_from == 2
    out = tmp_path / "placement.json"
    assert main(["place", "example:diamond", "--checkpoint", str(workdir), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["placement"] == trained[1]


def _interrupted_train(tmp_path, signals: int) -> tuple[int, str]:
    """(exit status, stderr) of a long `train` sent `signals` SIGINTs once it has logged an
    update."""
    workdir = tmp_path / "run"
    argv = [
        CLI, "train", "--graphs", "example:diamond",
        "--workdir", str(workdir), "--devices", "2", "--no-progress",
        "--set", "train.iterations=100000", "--set", "run.eval_every=1",
    ]  # fmt: skip
    proc = subprocess.Popen(_answering_ctrl_c(*argv), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 120
    while not (workdir / "metrics.jsonl").exists() or not read_metrics(workdir):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow  # the same path as the in-process test above, through a real SIGINT
def test_ctrl_c_on_the_command_line_exits_130_with_one_line(tmp_path):
    status, err = _interrupted_train(tmp_path, 1)
    assert status == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("placeto-jax: interrupted: checkpoint of update")
    assert "run the same command to resume" in last and "Traceback" not in err


def test_a_second_ctrl_c_stops_at_once_with_one_line(tmp_path):
    # The first Ctrl-C asks for a checkpoint at the next update boundary; a second one right
    # after it stops at once: exit 130 and one line, no traceback.
    status, err = _interrupted_train(tmp_path, 2)
    assert status == 130, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("placeto-jax: interrupted")
    assert "Traceback" not in err


def test_ctrl_c_while_starting_up_exits_130_with_one_line():
    # Sent as jaxlib loads: a KeyboardInterrupt there crashed the process (SIGSEGV), printed a
    # traceback, or was swallowed by JAX's garbage collection callback (exit 0).
    proc = subprocess.Popen(
        _answering_ctrl_c(CLI, "simulate", "zoo:resnet50", "--devices", "2", "--placer",
                          "round-robin"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    maps, deadline = Path(f"/proc/{proc.pid}/maps"), time.time() + 60
    while "/jaxlib/" not in maps.read_text():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert err.splitlines() == ["placeto-jax: interrupted while starting up"]


class _Finalised:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # raised in __del__: swallowed there


def _gc_callback(phase, info):
    if phase == "start":  # not at "stop" too: one Ctrl-C
        signal.raise_signal(signal.SIGINT)  # raised in the callback: swallowed there


@pytest.mark.parametrize("where", ["gc callback", "finaliser", "weakref callback"])
def test_a_ctrl_c_that_python_swallows_is_sent_again(where, ctrl_c_answered):
    with pytest.raises(KeyboardInterrupt), _swallowed_ctrl_c_sent_again():
        if where == "gc callback":
            gc.callbacks.append(_gc_callback)
            try:
                gc.collect()
            finally:
                gc.callbacks.remove(_gc_callback)
        elif where == "finaliser":
            _Finalised()
        else:
            referent = {"a set"}
            ref = weakref.ref(referent, lambda ref: signal.raise_signal(signal.SIGINT))
            del referent  # the callback runs here
            assert ref() is None
        time.sleep(10)  # the interrupt, sent again, ends the sleep


# ---------------------------------------------------------------------- 7. the Python API
def test_wrong_types_and_out_of_range_inputs_name_the_argument():
    diamond = pj.resolve_graph("example:diamond")
    cases = [
        (lambda: pj.graphs.load(None), TypeError, "a graph is named by a str or a path"),
        (lambda: pj.graphs.load(5), TypeError, "got int"),
        (lambda: pj.simulate(3, pj.Cluster(2), [0]), TypeError, "graph must be a placeto_jax"),
        (lambda: pj.simulate(diamond, "k80", [0] * 4), TypeError, "cluster must be a"),
        (
            lambda: pj.Cluster.preset("placeto-k80", 2, bandwith=1.0),
            TypeError,
            "unknown Cluster field 'bandwith'",
        ),
        (lambda: pj.Cluster(2000), ValueError, "n_devices must be at most 1024"),
        (lambda: pj.resolve_graph("layered:100000000"), ValueError, "N must be at most"),
        (lambda: pj.resolve_graph("cnn:100000000"), ValueError, "MODULES must be at most"),
        (
            lambda: pj.Graph.from_edges([True, False], [1.0, 1.0], []),
            ValueError,
            "cost must be numbers, got booleans",
        ),
        (
            lambda: pj.Graph.from_edges([1e308, 1.0], [1.0, 1.0], []),
            ValueError,
            "cost is above 1e+12 at op 0",
        ),
        (
            lambda: pj.Graph.from_edges([1.0], [2e18], []),
            ValueError,
            "out_bytes is above 1e+18 at op 0",
        ),
        (
            lambda: pj.simulate(diamond, pj.Cluster(2), [0] * 4, dtype=np.int32),
            ValueError,
            "dtype must be float32 or float64, got int32",
        ),
        (
            lambda: pj.simulate(diamond, pj.Cluster(2), [0] * 4, dtype=np.float16),
            ValueError,
            "got float16",
        ),
        (
            lambda: pj.simulate(diamond, pj.Cluster(2), [0] * 4, padding="x"),
            TypeError,
            "padding must come from pad_graph",
        ),
        (lambda: pj.save_graph("x", "x.json"), TypeError, "save_graph writes a placeto_jax.Graph"),
        (lambda: pj.graphs.group("x"), TypeError, "group coarsens a placeto_jax.Graph, got str"),
        (
            lambda: pj.graphs.group(diamond, target="ten"),
            TypeError,
            "target must be an integer or None, got 'ten'",
        ),
        (
            lambda: pj.Graph.from_edges(["1", "2"], [1.0, 1.0], []),
            ValueError,
            "cost must be numbers, got text ('1')",
        ),
        (
            lambda: pj.Graph.from_edges([1.0], [1.0], None),
            ValueError,
            "edges must be a list of (producer, consumer) pairs, got NoneType",
        ),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=re.escape(message)):
            call()


def test_simulate_refuses_a_placement_that_splits_a_class_unless_asked():
    graph = pj.Graph.from_edges(
        [1.0, 2.0, 3.0], [1.0] * 3, [(0, 1), (1, 2)], names=["w", "f", "u"], colocation=[0, -1, 0]
    )
    cluster = pj.Cluster(2)
    with pytest.raises(ValueError, match=r"ops 'w' \(device 0\) and 'u' \(device 1\)"):
        pj.simulate(graph, cluster, [[0, 0, 0], [0, 1, 1]])
    with pytest.raises(ValueError, match="allow_split=True"):
        pj.simulate_reference(graph, cluster, [0, 1, 1])
    split = pj.simulate(graph, cluster, [0, 1, 1], allow_split=True)
    reference = pj.simulate_reference(graph, cluster, [0, 1, 1], allow_split=True)
    assert split.makespan == reference.makespan


# ---------------------------------------------------------------- 8. errors that say what is wrong
def test_errors_name_what_is_wrong(trained, tmp_path, capsys):
    bad_list = tmp_path / "bad.json"
    bad_list.write_text('[0, 1, "x", 0]')
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = [
        (["simulate", "example:diamond", "--devices", "2", "--placement", str(bad_list)],
         "entry 2 of the placement list is 'x', not a device index"),
        (["simulate", "family:nmt", "--devices", "2"],
         "family:nmt names a list of graphs: name one, family:F/I"),
        (["place", "example:diamond", "--checkpoint", str(a_file)],
         f"'{a_file}' is a file, not a run directory"),
        (["place", "example:diamond", "--checkpoint", str(trained[0]),
          "--set", f"pipeline.start={tmp_path}/none.json"],
         f"no placement file '{tmp_path}/none.json'"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(argv) == 2
        assert message in _error(capsys)
    diamond, cluster = pj.resolve_graph("example:diamond"), pj.Cluster(n_devices=2)
    for placement, message in (
        (np.array([0, 2**63 + 5, 0, 0], dtype=np.uint64), "op 1 on device 9223372036854775813"),
        (np.array([0.0, 3.0, 0.0, 0.0]), "op 1 on device 3, outside [0, 2)"),
        ({"a": 0}, "placement must be an array of device indices (one per op), got dict"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            pj.simulate(diamond, cluster, placement)


def test_a_refused_resume_names_the_field_that_differs(trained, tmp_path, capsys):
    workdir = _copy(trained, tmp_path)
    assert _train(workdir, "example:diamond", "--set", "policy.width=3") == 2
    assert "another config (policy.width: 0 there, 3 here)" in _error(capsys)
    assert _train(workdir, "layered:12") == 2
    assert "holds a run on other graphs (example:diamond)" in _error(capsys)
