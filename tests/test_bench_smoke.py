"""Smoke tests of experiments/bench_simulator.py and bench_gpu.py on tiny settings (numbers are
not asserted)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import experiment
from placeto_jax.sim import native

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "bench_simulator.py"
GPU_SCRIPT = SCRIPT.with_name("bench_gpu.py")
ROW_KEYS = {
    "n_ops",
    "graph_digest",
    "batch",
    "dtype",
    "compile_s",
    "wall_s",
    "cpu_s",
    "repeats",
    "placements_per_wall_s",
    "placements_per_cpu_s",
    "peak_rss_gb",
    "check",
}
MACHINE_KEYS = {"platform", "cpu_count", "jax", "jaxlib", "git_commit"}


def assert_valid_row(row: dict) -> None:
    assert row.keys() >= ROW_KEYS, row
    assert row["repeats"] >= 2
    assert row["wall_s"] > 0 and row["cpu_s"] > 0 and row["peak_rss_gb"] > 0
    assert row["placements_per_wall_s"] > 0 and row["placements_per_cpu_s"] > 0
    assert row["check"]["ok"], row["check"]


def test_run_one_in_process():
    """One configuration in this process, in float64 (exact against the reference)."""
    bench = experiment("bench_simulator")
    x64 = 1
    row = bench.run_one(20, 2, n_devices=3, x64=x64, min_time=0.01)
    assert_valid_row(row)
    assert (row["n_ops"], row["batch"], row["dtype"]) == (20, 2, bench.DTYPES[x64])
    assert row["check"]["placements"] == 2
    reference = {20: {"placements_per_cpu_s": 10.0, "graph_digest": row["graph_digest"]}}
    lines = bench.table(
        [row, {"n_ops": 20, "batch": 4, "dtype": "float32", "cores": "1", "error": "boom"}],
        reference,
    )
    assert len(lines.splitlines()) == 3 and "failed" in lines.splitlines()[2]
    summary = bench.checks_summary([row], reference)
    assert summary.endswith(": ok") and "WARNING" not in summary


def test_write_json_is_atomic(tmp_path):
    bench = experiment("bench_simulator")
    out = tmp_path / "a" / "b.json"
    bench.write_json(out, {"x": 1})
    assert json.loads(out.read_text()) == {"x": 1}
    with pytest.raises(TypeError):
        bench.write_json(out, {"x": object()})
    assert json.loads(out.read_text()) == {"x": 1}
    assert [p.name for p in out.parent.iterdir()] == ["b.json"]


@pytest.mark.slow
def test_script_end_to_end(tmp_path):
    out = tmp_path / "bench" / "simulator.json"
    cmd = [sys.executable, str(SCRIPT), "--sizes", "50", "--batches", "1,4", "--out", str(out)]
    cmd += ["--min-time", "0.05", "--ref-time", "0.2", "--variants", "f32:1,f64:1,f32:all"]
    cmd += ["--extra", "50:8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jax pl/cpu-s" in proc.stdout
    data = json.loads(out.read_text())
    assert {"machine", "settings", "reference", "jax"} <= data.keys()
    assert data["machine"].keys() >= MACHINE_KEYS
    (reference,) = data["reference"]
    assert reference["n_ops"] == 50 and reference["placements_per_cpu_s"] > 0
    rows = data["jax"]
    assert sorted((r["batch"], r["dtype"], r["cores"]) for r in rows) == [
        (1, "float32", "1"),
        (1, "float32", "all"),
        (1, "float64", "1"),
        (4, "float32", "1"),
        (4, "float32", "all"),
        (4, "float64", "1"),
        (8, "float32", "1"),  # the --extra row, first variant only
    ]
    assert "floor" not in proc.stdout  # no floor configuration at N = 50
    for row in rows:
        assert_valid_row(row)


def test_floors_summary_reports_each_variant():
    bench = experiment("bench_simulator")
    reference = {500: {"placements_per_cpu_s": 100.0}, 2000: {"placements_per_cpu_s": 20.0}}
    rows = [
        {
            "n_ops": 500,
            "batch": 1024,
            "dtype": "float32",
            "cores": "1",
            "placements_per_cpu_s": 900,
        },
        {
            "n_ops": 2000,
            "batch": 256,
            "dtype": "float32",
            "cores": "all",
            "placements_per_cpu_s": 150,
        },
        {"n_ops": 2000, "batch": 64, "dtype": "float32", "cores": "1", "placements_per_cpu_s": 999},
    ]
    lines = bench.floors_summary(rows, reference).splitlines()
    assert lines == [
        "floor N=500 B=1024 float32 cores=1: 9.0x (>= 30x required): BELOW",
        "floor N=2000 B=256 float32 cores=all: 7.5x (>= 30x required): BELOW",
    ]


def test_scaling_and_memory_summaries():
    bench = experiment("bench_simulator")
    rows = [
        {"n_ops": 250, "batch": 256, "dtype": "float32", "cores": "1", "placements_per_cpu_s": 900},
        {
            "n_ops": 2000,
            "batch": 256,
            "dtype": "float32",
            "cores": "1",
            "placements_per_cpu_s": 100,
        },
        {"n_ops": 2000, "batch": 256, "dtype": "float64", "cores": "1", "placements_per_cpu_s": 50},
        {"n_ops": 2000, "batch": 4096, "dtype": "float32", "cores": "1", "peak_rss_gb": 2.5},
    ]
    assert bench.scaling_summary(rows).splitlines() == [
        "scaling N=2000 vs N=250 B=256 float32 cores=1: 9.0x time per placement "
        "(<= 10x required): meets"
    ]
    assert bench.memory_summary(rows).splitlines() == [
        "memory N=2000 B=4096 float32 cores=1: peak RSS 2.50 GB (< 8 GB required): meets"
    ]


@pytest.mark.slow  # about 40 s of CPU
def test_gpu_bench_quick_on_cpu(tmp_path):
    """bench_gpu.py in its small CPU mode (`make test-slow` runs `make bench-gpu`'s script):
    simulator rows and the trainer's rate, printed as a table and written as JSON."""
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(GPU_SCRIPT), "--quick", "--min-time", "0.01", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("device: ")
    data = json.loads(out.read_text())
    assert data["quick"] and data["machine"].keys() >= MACHINE_KEYS
    assert sorted((r["n_ops"], r["batch"]) for r in data["simulator"]) == [
        (100, 64),
        (100, 256),
        (500, 64),
        (500, 256),
    ]
    assert all(r["placements_per_s"] > 0 for r in data["simulator"])
    assert data["trainer"]["decisions_per_s"] > 0
    assert "| N = 500 | 256 | " in proc.stdout and "aim N=" not in proc.stdout  # no aims if quick


def test_gpu_table_and_aims(monkeypatch):
    gpu = experiment("bench_gpu", monkeypatch)
    rows = [
        {"n_ops": 100, "batch": 1024, "placements_per_s": 400_000.0, "first_call_s": 2.04},
        {"n_ops": 100, "batch": 16384, "placements_per_s": 1_250_000.0, "first_call_s": 3.0},
        {"n_ops": 500, "batch": 16384, "placements_per_s": 99_999.4, "first_call_s": 9.96},
    ]
    trainer = {"nodes": 100, "batch": 256, "decisions_per_s": 12345.6}
    assert gpu.table(rows, trainer, "NVIDIA H200").splitlines() == [
        "| NVIDIA H200 | B | placements/s | first call (s) |",
        "|---|---|---|---|",
        "| N = 100 | 1024 | 400,000 | 2.0 |",
        "| N = 100 | 16384 | 1,250,000 | 3.0 |",
        "| N = 500 | 16384 | 99,999 | 10.0 |",
        "| trainer, 100 nodes | 256 | 12,346 decisions/s | |",
    ]
    assert gpu.aims_summary(rows).splitlines() == [
        "aim N=100: 1,250,000 placements/s (>= 1,000,000): meets",
        "aim N=500: 99,999 placements/s (>= 100,000): BELOW",
    ]


def test_gpu_bench_real_graph_rows_are_checked_against_the_reference(monkeypatch):
    """A real graph's rows (here on CPU): float64 bit-equal to the reference, float32 within
    0.1% of its makespans; a start moved by 1 µs, or a makespan by 1%, fails the check."""
    gpu = experiment("bench_gpu", monkeypatch)
    graph = gpu.graph_of("family:cifar10/24")  # about 440 ops, traced by this JAX
    rows = gpu.real_graph_rows("family:cifar10/24", [(4, "float32"), (2, "float64")], 0.0)
    assert [(r["dtype"], r["n_ops"], r["batch"], r["loop"]) for r in rows] == [
        ("float32", graph.n_ops, 4, "scan"),
        ("float64", graph.n_ops, 2, "scan"),
    ]
    assert all(r["matches_reference"] and r["placements_per_s"] > 0 for r in rows)
    placements = gpu.colocate(graph, np.zeros((2, graph.n_ops), np.int64))
    want = [gpu.pj.simulate_reference(graph, gpu.pj.Cluster(4), p) for p in placements]
    exact = gpu.pj.simulate(graph, gpu.pj.Cluster(4), placements)
    assert gpu.matches(exact, want, graph.n_ops, "float64")
    moved = dataclasses.replace(exact, start=exact.start + np.eye(2, graph.n_ops))
    assert not gpu.matches(moved, want, graph.n_ops, "float64")
    assert gpu.matches(exact, want, graph.n_ops, "float32")
    slower = dataclasses.replace(exact, makespan=exact.makespan * 1.01)
    assert not gpu.matches(slower, want, graph.n_ops, "float32")


def test_gpu_real_table_and_budget(monkeypatch, tmp_path):
    gpu = experiment("bench_gpu", monkeypatch)
    row = {"graph": "family:nmt/24", "n_ops": 4246, "n_edges": 5792, "chain_slots": 648,
           "loop": "wide", "batch": 4096, "dtype": "float64", "placements_per_s": 5827.4,
           "first_call_s": 3.46, "reference_per_s": 12.0, "matches_reference": True}  # fmt: skip
    f32 = {**row, "dtype": "float32", "placements_per_s": 5355.0, "matches_reference": False}
    assert gpu.real_table([row, f32], "H200").splitlines()[2:] == [
        "| family:nmt/24 | 4,246 | 5,792 | 648 | wide | 4096 | float64 | 5,827 | 3.5 | 12.0 "
        "| 486x | bit-equal |",
        "| family:nmt/24 | 4,246 | 5,792 | 648 | wide | 4096 | float32 | 5,355 | 3.5 | 12.0 "
        "| 446x | NO |",
    ]
    small, large = (f"zoo-ops:bert_base:layers={n}" for n in (3, 12))
    bert = [{**row, "graph": small, "n_ops": 2000, "placements_per_s": 12000.0},
            {**row, "graph": large, "n_ops": 6000, "placements_per_s": 3000.0},  # N x3, time x4
            {**f32, "graph": small, "n_ops": 2000, "placements_per_s": 9000.0}]  # fmt: skip
    assert gpu.real_growth(bert) == [
        f"B=4096 float64 growth {small} -> {large}: N x3.00, time per placement x4.00 "
        "(1.33 x N's, <= 1.3 required): BELOW"
    ]
    # a spent budget starts nothing, and says what it skipped
    out = tmp_path / "gpu.json"
    assert gpu.main(["--quick", "--budget-s", "1e-9", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["simulator"] == [] and data["trainer"] is None
    assert data["skipped"] == [
        "simulator N=100 B=64",
        "simulator N=100 B=256",
        "simulator N=500 B=64",
        "simulator N=500 B=256",
        "trainer",
    ]
    with pytest.raises(SystemExit):
        gpu.main(["--quick", "--budget-s", "0"])


def test_wide_bench_measures_both_loops_and_the_reference(monkeypatch, tmp_path):
    bench = experiment("bench_wide", monkeypatch)
    out = tmp_path / "wide.json"
    assert (
        bench.main(["--graphs", "layered:40", "--batch", "4", "--repeats", "1", "--out", str(out)])
        == 0
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["n_ops"], row["batch"], row["jax_loop"]) == (40, 4, "scan")
    assert row["loop"] == ("native" if native.in_use() else "scan")
    assert row["outputs_equal"] and row["exact_against_reference"]
    rates = (row["simulate_per_cpu_s"], row["jax_loop_per_cpu_s"], row["reference_per_cpu_s"])
    assert min(rates) > 0


def test_wide_bench_target_line(monkeypatch):
    bench = experiment("bench_wide", monkeypatch)
    rows = [
        {"graph": "family:nmt/24", "n_ops": 4384, "simulate_per_cpu_s": 310.0},
        {"graph": "x.json", "n_ops": 1200, "simulate_per_cpu_s": 290.0},
        {"graph": "small.json", "n_ops": 999, "simulate_per_cpu_s": 1.0},  # too small to count
        {"graph": bench.SYNTHETIC[0], "n_ops": 2000, "simulate_per_cpu_s": 1.0},  # synthetic
    ]
    for row in rows:
        row["reference_per_cpu_s"] = 10.0
    assert bench.target_summary(rows) == (
        "real graphs of >= 1,000 ops at >= 30x the reference per CPU-second: 1 of 2 (lowest 29.0x)"
    )
    assert bench.target_summary(rows[2:]) is None


def test_wide_bench_growth_line(monkeypatch):
    bench = experiment("bench_wide", monkeypatch)
    small, large = bench.BERT[0], bench.BERT[-1]
    rows = [
        {"graph": small, "n_ops": 1000, "simulate_per_cpu_s": 100.0},
        {"graph": large, "n_ops": 3000, "simulate_per_cpu_s": 25.0},  # time x4, N x3
    ]
    assert bench.growth_summary(rows) == (
        f"growth {small} -> {large}: N x3.00, time per placement x4.00 "
        "(1.33 x N's, <= 1.3 required): BELOW"
    )
    rows[1]["simulate_per_cpu_s"] = 30.0  # time x3.33: 1.11 x N's
    assert bench.growth_summary(rows).endswith("(1.11 x N's, <= 1.3 required): meets")
    assert bench.growth_summary(rows[:1]) is None
