"""The suite compiles at XLA's lowest backend optimisation level (conftest.py). The simulator's
contract, bit-equality with the reference in float64, must hold for the code users run, so its
checks run again here in a fresh process at the default level."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import OPTIMIZATION_FLAG, suite_xla_flags
from placeto_jax.sim import native

TESTS = Path(__file__).parent
CHECKS = [
    "test_sim.py::test_differential_random_cases_exact[D3-bcast0-scan]",
    "test_sim.py::test_differential_random_cases_exact[D4-bcast1-scan]",
    "test_sim.py::test_zero_duration_rounds_follow_the_reference[scan]",
    "test_sim_wide.py::test_the_wide_loop_stays_exact_on_a_wide_graph",
    "test_kernels.py::test_both_loops_equal_the_reference_with_kernels",
]


def _without_the_optimization_flag(flags: str) -> str:
    return " ".join(f for f in flags.split() if not f.startswith(OPTIMIZATION_FLAG))


def test_the_suite_adds_level_zero_unless_told_otherwise():
    level = f"{OPTIMIZATION_FLAG}=0"
    assert suite_xla_flags({}) == level
    assert suite_xla_flags({"XLA_FLAGS": "--a=1"}) == f"--a=1 {level}"
    assert suite_xla_flags({"XLA_FLAGS": f"{OPTIMIZATION_FLAG}=2"}) == f"{OPTIMIZATION_FLAG}=2"
    assert suite_xla_flags({"XLA_FLAGS": "--a=1", "PLACETO_TEST_DEFAULT_CODEGEN": "1"}) == "--a=1"
    assert suite_xla_flags(os.environ) == os.environ["XLA_FLAGS"]  # applied at collection
    assert _without_the_optimization_flag(f"--a=1 {level} --b") == "--a=1 --b"


def test_the_simulator_equals_the_reference_at_the_default_optimization_level(tmp_path):
    env = {
        **os.environ,
        "XLA_FLAGS": _without_the_optimization_flag(os.environ.get("XLA_FLAGS", "")),
        "PLACETO_TEST_DEFAULT_CODEGEN": "1",
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["--basetemp", str(tmp_path / "base"), *CHECKS]
    done = subprocess.run(command, cwd=TESTS, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the kernels check runs three loops (native, scan, wide; native skipped where not built)
    assert f"{7 if native.available() else 6} passed" in done.stdout
