"""The `placeto-jax` command line, called in-process (plus one console-script check)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import cli
from placeto_jax.graphs.generators import diamond
from placeto_jax.graphs.io import graph_to_dict

PNG = b"\x89PNG\r\n\x1a\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _json_file(path: Path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _simulate_json(capsys, *argv: str) -> dict:
    status, out, err = _run(capsys, "simulate", "example:diamond", "--json", *argv)
    assert (status, err) == (0, "")
    return json.loads(out)


def _error(capsys, *argv: str) -> str:
    status, out, err = _run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("placeto-jax: error: ") and err.count("\n") == 1
    return err


@pytest.mark.parametrize("wrapped", [False, True])
def test_simulate_worked_example(capsys, tmp_path, wrapped):
    placement = [0, 1, 2, 0]
    doc = {"placement": placement} if wrapped else placement
    path = _json_file(tmp_path / "p.json", doc)
    report = _simulate_json(capsys, "--devices", "3", "--placement", path)
    assert report["makespan_us"] == pytest.approx(171.0, abs=1e-9)
    assert report["peak_memory_bytes"] == [76000.0, 83600.0, 83600.0]
    # compute: a and d (100 + 10 µs) on 0, b on 1, c on 2; busy adds the 5.7 µs gap after a,
    # b and c (d ends the step: its gap falls after the makespan)
    assert report["compute_us"] == [110.0, 50.0, 30.0]
    assert report["busy_us"] == pytest.approx([115.7, 55.7, 35.7], abs=1e-9)
    assert report["overhead_us"] == pytest.approx([5.7, 5.7, 5.7], abs=1e-9)
    assert report["utilisation"] == pytest.approx([115.7 / 171, 55.7 / 171, 35.7 / 171])
    assert report["op_count"] == [2, 1, 1]
    assert report["transfers"] == {"count": [1, 1, 1], "bytes": [76000.0, 7600.0, 7600.0]}
    assert report["fits_memory"] is True
    assert report["placement"] == placement
    assert report["memory_capacity_bytes"] == [12e9] * 3
    assert (report["graph"], report["n_ops"], report["n_edges"]) == ("example:diamond", 4, 4)
    assert (report["n_devices"], report["cluster"], report["broadcast"]) == (3, "placeto-k80", True)


def test_simulate_without_broadcast(capsys, tmp_path):
    path = _json_file(tmp_path / "p.json", [0, 1, 2, 0])
    report = _simulate_json(capsys, "--devices", "3", "--placement", path, "--no-broadcast")
    assert report["makespan_us"] == pytest.approx(186.0, abs=1e-9)
    assert report["transfers"]["count"] == [2, 1, 1]
    assert report["broadcast"] is False


def test_simulate_placers(capsys):
    single = _simulate_json(capsys, "--devices", "3")
    assert single["placement"] == [0, 0, 0, 0]
    assert single["makespan_us"] == pytest.approx(207.1, abs=1e-9)
    assert single["peak_memory_bytes"] == [91200.0, 0.0, 0.0]
    robin = _simulate_json(capsys, "--devices", "3", "--placer", "round-robin")
    assert robin["placement"] == [0, 1, 2, 0]
    assert robin["makespan_us"] == pytest.approx(171.0, abs=1e-9)
    first = _simulate_json(capsys, "--devices", "3", "--placer", "random", "--seed", "4")
    again = _simulate_json(capsys, "--devices", "3", "--placer", "random", "--seed", "4")
    assert first["placement"] == again["placement"]
    assert first["placement_source"] == "placer random"


def test_simulate_on_another_cluster(capsys):
    report = _simulate_json(
        capsys, "--devices", "3", "--placer", "round-robin", "--cluster", "v100"
    )
    expected = pj.simulate(diamond(), pj.Cluster.preset("v100", 3), np.array([0, 1, 2, 0]))
    assert report["cluster"] == "v100"
    assert report["makespan_us"] == pytest.approx(float(expected.makespan), abs=1e-9)
    assert report["makespan_us"] < 171.0  # the round-robin makespan on placeto-k80, above


def test_preset_names_no_cluster(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["simulate", "example:diamond", "--devices", "2", "--preset", "p100"])
    assert info.value.code == 2
    assert "unrecognized arguments: --preset p100" in capsys.readouterr().err


def test_simulate_table(capsys):
    status, out, _ = _run(
        capsys, "simulate", "example:diamond", "--devices", "3", "--placer", "round-robin"
    )
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "graph      example:diamond: 4 ops, 4 edges"
    assert lines[1] == "cluster    placeto-k80, 3 devices, broadcast"
    assert lines[3] == "makespan   0.171 ms"
    assert lines[4] == "memory     fits on every device"
    assert lines[6].split() == [
        "device",
        "ops",
        "busy",
        "ms",
        "overhead",
        "ms",
        "util",
        "peak",
        "GB",
        "capacity",
        "GB",
        "transfers",
        "sent",
        "MB",
    ]
    # busy: compute (110 and 30 µs) and the 5.7 µs gap after a and c; 115.7 / 171 = 67.7%
    row0 = ["0", "2", "0.116", "0.006", "67.7%", "7.6e-05", "12", "1", "0.076"]
    assert lines[7].split() == row0
    assert lines[9].split() == [
        "2",
        "1",
        "0.036",
        "0.006",
        "20.9%",
        "8.36e-05",
        "12",
        "1",
        "0.0076",
    ]


def test_simulate_gantt(capsys, tmp_path):
    chart = tmp_path / "chart.png"
    status, out, _ = _run(
        capsys, "simulate", "example:diamond", "--devices", "3", "--gantt", str(chart)
    )
    assert status == 0 and out.splitlines()[-1] == f"wrote {chart}"
    assert chart.read_bytes().startswith(PNG)
    assert os.listdir(tmp_path) == ["chart.png"]


def test_unwritable_gantt_exits_2(capsys, tmp_path):
    chart = tmp_path / "missing" / "chart.png"
    status, out, err = _run(
        capsys, "simulate", "example:diamond", "--devices", "3", "--gantt", str(chart)
    )
    assert (status, out) == (2, "")
    assert err == f"placeto-jax: error: [Errno 2] No such file or directory: '{chart}'\n"
    assert os.listdir(tmp_path) == []


def test_graph_file_with_a_cycle(capsys, tmp_path):
    doc = graph_to_dict(diamond())
    doc["edges"].append([3, 0])
    path = _json_file(tmp_path / "cyclic.json", doc)
    chart = tmp_path / "chart.png"
    err = _error(capsys, "simulate", path, "--devices", "2", "--gantt", str(chart))
    assert err == f"placeto-jax: error: {path}: graph has a cycle: b -> d -> a -> b\n"
    assert os.listdir(tmp_path) == ["cyclic.json"]


def test_missing_graph_file(capsys, tmp_path):
    err = _error(capsys, "simulate", str(tmp_path / "nope.json"), "--devices", "2")
    assert "nope.json' is not a built-in graph or an existing file" in err
    assert "layered:N[:SEED]" in err


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([0, 1, 2], "placement has 3 entries; the graph has 4 ops"),
        ([0, 1, 3, 0], "op 'c' is placed on device 3, outside [0, 3)"),
        ([0, -1, 1, 0], "op 'b' is placed on device -1, outside [0, 3)"),
        ([0, 1.5, 1, 0], "entry 1 of the placement list is 1.5, not a device index"),
        ({"devices": [0, 1, 2, 0]}, "op 'devices' is not in the graph (4 ops)"),
        ({"a": 0, "b": 1, "c": 2}, "1 ops of the graph have no device, e.g. 'd'"),
        ({"a": 0, "b": 1, "c": 2, "d": "0"}, "op 'd': device must be an integer, got '0'"),
        (
            {"format": "placeto-jax-placement", "version": 2, "placement": {}},
            'expected "format": "placeto-jax-placement", "version": 1; got '
            "'placeto-jax-placement', version 2",
        ),
    ],
)
def test_bad_placement_file(capsys, tmp_path, doc, problem):
    path = _json_file(tmp_path / "p.json", doc)
    err = _error(capsys, "simulate", "example:diamond", "--devices", "3", "--placement", path)
    assert err == f"placeto-jax: error: {path}: {problem}\n"


def test_unreadable_placement_files(capsys, tmp_path):
    corrupt = tmp_path / "p.json"
    corrupt.write_text("[0, 1,")
    err = _error(
        capsys, "simulate", "example:diamond", "--devices", "3", "--placement", str(corrupt)
    )
    assert f"{corrupt}: not valid JSON" in err
    missing = tmp_path / "none.json"
    err = _error(
        capsys, "simulate", "example:diamond", "--devices", "3", "--placement", str(missing)
    )
    assert err == f"placeto-jax: error: {missing}: no such file\n"


def test_bad_cluster_arguments(capsys):
    err = _error(capsys, "simulate", "example:diamond")
    assert err == "placeto-jax: error: simulate needs --devices (or --cluster FILE)\n"
    err = _error(capsys, "simulate", "example:diamond", "--devices", "0")
    assert err == "placeto-jax: error: --devices must be at least 1, got 0\n"
    err = _error(capsys, "simulate", "example:diamond", "--devices", "2", "--cluster", "k81")
    assert "unknown cluster 'k81': give a preset" in err
    err = _error(capsys, "demo", "--batch", "0")
    assert err == "placeto-jax: error: --batch must be in [1, 1,048,576], got 0\n"


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["simulate", "x", "--devices", "two"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2
    capsys.readouterr()


@pytest.mark.parametrize("command", ["simulate", "demo"])
def test_subcommand_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    assert "cnn[:MODULES[:SEED]]" in capsys.readouterr().out


def test_demo(capsys):
    status, out, _ = _run(capsys, "demo", "--batch", "64", "--seed", "1")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("graph    cnn: 204 ops")
    table = {line.split()[0]: line.split() for line in lines[4:8]}
    assert list(table) == ["single", "round-robin", "random", "best"]
    assert table["single"][2] == "1.00x"
    assert lines[7].startswith("best of 64 random")
    assert "placements/s" in lines[-1]


def test_console_script_help():
    script = Path(sys.executable).with_name("placeto-jax")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "simulate" in done.stdout and "demo" in done.stdout


def test_demo_on_another_cluster(capsys):
    status, out, _ = _run(
        capsys, "demo", "--graph", "example:diamond", "--batch", "8", "--cluster", "p100"
    )
    assert status == 0
    assert out.splitlines()[1] == "cluster  p100, 4 devices, 16 GB each"


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE).group(1)
    assert capsys.readouterr().out == f"placeto-jax {version}\n"


def test_a_closed_pipe_exits_quietly():
    """The reader leaves after one line of a 1024-device table (73 kB): more than a pipe holds,
    so the child is still writing (`placeto-jax simulate ... | head -1`)."""
    code = "import sys; from placeto_jax.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "simulate", "example:diamond", "--devices", "1024"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        first = child.stdout.readline()
        child.stdout.close()
        err = child.stderr.read().decode()
    assert first == b"graph      example:diamond: 4 ops, 4 edges\n"
    assert child.returncode == 141
    assert "Traceback" not in err and "Broken pipe" not in err and "error" not in err
