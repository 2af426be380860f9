"""`placeto_jax.execute` and `placeto-jax execute`: split runs equal the unsplit function, pieces
and transfers match hand counts, bad placements are refused. Multi-device cases run in a fresh
process with 4 host CPU devices (tests/execute_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax.cli import main
from placeto_jax.cli.execute import parse_sizes
from placeto_jax.execute import (
    check_graph,
    excesses,
    execute,
    local_cluster,
    op_graph,
    plan,
    program,
)

WORKER = Path(__file__).with_name("execute_worker.py")
ZOO = ["zoo:transformer", "--size", "batch=2", "--size", "seq=8", "--size", "layers=1"]
ZOO += ["--size", "d=32", "--size", "heads=2", "--size", "ff=64", "--size", "vocab=50"]


def _worker(tmp_path_factory, mode: str) -> dict:
    out = tmp_path_factory.mktemp("execute") / f"{mode}.json"
    subprocess.run([sys.executable, str(WORKER), mode, str(out)], check=True, timeout=600)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict:
    return _worker(tmp_path_factory, "fast")


def chain(x, y):
    a = jnp.sin(x)
    b = jnp.cos(x)
    return a * b + y, a


@pytest.mark.parametrize(
    "case",
    ["mlp/one", "mlp/alternating", "mlp/random", "zoo/one", "zoo/alternating", "zoo/random"],
)
def test_split_outputs_equal_the_unsplit_function(cases, case):
    found = cases[case]
    assert found["devices"] == 4
    assert found["equal"] and found["same_tree"]
    assert found["max_abs_diff"] < 1e-5
    if case.endswith("/one"):
        assert (found["n_pieces"], found["n_transfers"], found["max_abs_diff"]) == (1, 0, 0.0)
    else:
        assert found["n_pieces"] > 1 and found["n_transfers"] > 0


@pytest.mark.parametrize(
    ("case", "pieces", "transfers"),
    [
        # x read on 0 and 1; a, b to 2; c back to 0: (x,1) (a,2) (b,2) (c,0)
        ("chain/[0, 1, 2, 0]", 4, 4),
        # sin and cos one piece on 0; a and b to 1, where y is first read: (a,1) (b,1)
        ("chain/[0, 0, 1, 1]", 2, 2),
        # (x,1) (b,0) (c,1)
        ("chain/[0, 1, 0, 1]", 4, 3),
        # a reaches device 1 once although two pieces there read it: (a,1) (b,0) (c,1)
        ("relay", 4, 3),
    ],
)
def test_transfers_are_the_cross_device_value_device_pairs(cases, case, pieces, transfers):
    assert cases[case]["equal"]
    assert (cases[case]["n_pieces"], cases[case]["n_transfers"]) == (pieces, transfers)


def test_plan_of_a_tiny_function():
    prog = program(chain, jnp.arange(3.0), jnp.ones(3))
    assert prog.op_types == ("sin", "cos", "mul", "add")
    x, y, a, b, c, d = range(6)  # value ids: inputs, then each op's output
    pl = plan(prog, [0, 1, 2, 0])
    assert [p.device for p in pl.pieces] == [0, 1, 2, 0]
    assert [p.ops for p in pl.pieces] == [(0,), (1,), (2,), (3,)]
    assert [p.fetch for p in pl.pieces] == [(), (x,), (a, b), (c,)]
    assert pl.home == {x: 0, y: 0, a: 0, b: 1, c: 2, d: 0}
    assert prog.outputs == (d, a)
    merged = plan(prog, [0, 0, 1, 1])
    assert [p.ops for p in merged.pieces] == [(0, 1), (2, 3)]
    assert [p.outputs for p in merged.pieces] == [(a, b), (d,)]


def test_an_op_joins_its_devices_piece_when_its_inputs_are_older():
    # sin on 0, cos on 1 (reads x only), mul on 0 reads cos's output: a new piece after 1's
    prog = program(chain, jnp.arange(3.0), jnp.ones(3))
    assert [p.ops for p in plan(prog, [0, 1, 0, 0]).pieces] == [(0,), (1,), (2, 3)]
    assert [p.ops for p in plan(prog, [1, 0, 0, 1]).pieces] == [(0,), (1, 2), (3,)]


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ([0, 0, 0], "needs 4 devices"),
        ([0.0, 0.0, 0.0, 0.0], "must be integers"),
        ([0, 0, 1, 0], "xla_force_host_platform_device_count=2"),
        ([0, -1, 0, 0], ">= 0"),
    ],
)
def test_bad_placements_are_refused(placement, message):
    with pytest.raises(ValueError, match=message):
        execute(chain, jnp.arange(3.0), jnp.ones(3), placement=placement, devices=jax.devices()[:1])


def test_a_graph_of_another_function_is_refused():
    other = op_graph(lambda x, y: (jnp.cos(x) * y, x), jnp.arange(3.0), jnp.ones(3))
    with pytest.raises(ValueError, match=r"op 0 \('cos'\) is 'cos' in the graph but 'sin'"):
        execute(chain, jnp.arange(3.0), jnp.ones(3), placement=[0] * 4, graph=other)


def test_a_graph_with_unrolled_loops_is_refused():
    def loop(xs):
        return jax.lax.scan(lambda c, x: (c + jnp.sin(x), c), 0.0, xs)

    xs = jnp.arange(3.0)
    check_graph(program(loop, xs), op_graph(loop, xs))
    with pytest.raises(ValueError, match="unroll_loops=True"):
        check_graph(program(loop, xs), op_graph(loop, xs, unroll_loops=True))


def test_local_cluster_of_one_device():
    cluster = local_cluster(jax.devices()[:1], repeats=3)
    assert cluster.n_devices == 1 and not cluster.broadcast
    assert cluster.delta1 > 0 and cluster.delta2 == 0.0 and cluster.speed == (1.0,)


def test_parse_sizes():
    assert parse_sizes(["layers=1", "blocks=1,1,1,1", "name=x"]) == {
        "layers": 1,
        "blocks": (1, 1, 1, 1),
        "name": "x",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_sizes(["layers"])


@pytest.mark.slow
def test_cli_json_has_the_keys(capsys):
    argv = ["execute", *ZOO, "--devices", "1", "--cost-model", "roofline", "--repeats", "2"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    keys = {"model", "sizes", "n_ops", "cluster", "placement_source", "step_us", "times_us"}
    keys |= {"unsplit_us", "simulated_us", "max_abs_diff", "equal", "n_pieces", "n_transfers"}
    assert keys <= set(report)
    assert report["equal"] and report["n_pieces"] == 1 and report["n_transfers"] == 0
    assert len(report["times_us"]) == 2 and report["simulated_us"] > 0
    assert report["sizes"]["layers"] == 1 and report["placement_source"] == "method single"


def test_cli_refuses_more_devices_than_there_are(capsys):
    assert main(["execute", *ZOO, "--devices", "64", "--cost-model", "roofline"]) == 2
    assert "xla_force_host_platform_device_count=64" in capsys.readouterr().err
    assert main(["execute", "cnn", "--devices", "1"]) == 2
    assert "STEP must be zoo:NAME, FILE.py:FUNCTION or MODULE:FUNCTION" in capsys.readouterr().err
    assert main(["execute", "zoo:cnn", "--devices", "1"]) == 2
    assert "unknown zoo model 'zoo:cnn'" in capsys.readouterr().err


STEP_FILE = """
import jax, jax.numpy as jnp

def make_step():
    def step(w, x):
        loss = lambda w: jnp.mean(jnp.tanh(x @ w[0]) @ w[1])
        return jax.tree.map(lambda p, g: p - 0.1 * g, w, jax.grad(loss)(w))
    return step, ((jnp.ones((8, 16)), jnp.ones((16, 4))), jnp.ones((4, 8))), (0,)

not_a_step = 3
"""


def test_cli_runs_your_own_step_from_a_file(tmp_path, capsys):
    path = tmp_path / "mystep.py"
    path.write_text(STEP_FILE)
    argv = ["execute", f"{path}:make_step", "--devices", "1", "--cost-model", "roofline"]
    assert main([*argv, "--repeats", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["equal"] and report["n_pieces"] == 1 and report["worst_excess"] <= 1.0
    assert report["worst_output"].startswith("[")  # a path in the step's output tree
    for step, message in (
        (f"{path}:not_a_step", "has no function 'not_a_step'"),
        (f"{tmp_path}/none.py:make_step", "no such file"),
        ("no_such_module_here:make_step", "cannot import 'no_such_module_here'"),
    ):
        assert main(["execute", step, "--devices", "1"]) == 2
        assert message in capsys.readouterr().err
    assert main([*argv, "--size", "layers=1"]) == 2
    assert "--size sets a zoo model's sizes" in capsys.readouterr().err


def test_outputs_are_compared_leaf_by_leaf_in_tolerances():
    # |1.0002 - 1| / (1e-5 + 1e-4 x 1) = 1.818...: fails; 5e-6 / 1e-5 = 0.5 passes
    out = [np.array([1.0002, 0.000005], np.float32), np.array([3, 4]), np.zeros(2)]
    ref = [np.array([1.0, 0.0], np.float32), np.array([3, 4]), np.zeros(3)]
    excess = excesses(out, ref)
    assert excess[0] == pytest.approx(0.0002 / 0.00011, rel=1e-3)
    assert excess[1] == 0.0 and excess[2] == float("inf")
    assert excesses([np.array([1.00005])], [np.array([1.0])])[0] <= 1.0


@pytest.mark.slow
def test_zoo_model_per_op_placements_equal_the_unsplit_step(tmp_path_factory):
    for case, found in _worker(tmp_path_factory, "slow").items():
        assert found["equal"] and found["same_tree"], case
        assert found["n_pieces"] > 100, case
