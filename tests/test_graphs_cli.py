"""`placeto-jax graphs list|show|export|plot`, in-process; zoo and family graphs are faked."""

from __future__ import annotations

import json

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import cli, plotting
from placeto_jax.graphs import families, generators, zoo
from placeto_jax.graphs.io import load_graph

PNG = b"\x89PNG\r\n\x1a\n"
ZOO = [f"zoo:{model}" for model in zoo.ZOO_MODELS]


@pytest.fixture(autouse=True)
def fake_models(monkeypatch):
    """Zoo model m is layered:(10 + len(m)), grouped from 1000 + len(m) ops; every family graph
    is the diamond."""

    def fake_zoo(name: str):
        if name not in zoo.ZOO_MODELS:
            raise ValueError(f"unknown zoo model {name!r}")
        return generators.layered(10 + len(name))

    monkeypatch.setattr(zoo, "zoo_graph", fake_zoo)
    monkeypatch.setattr(zoo, "zoo_op_count", lambda name: 1000 + len(name))
    monkeypatch.setattr(families, "family_graph", lambda *args, **kwargs: generators.diamond())


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _ok(capsys, *argv: str) -> str:
    status, out, err = _run(capsys, *argv)
    assert (status, err) == (0, "")
    return out


def _error(capsys, status: int, *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (status, "")
    assert err.startswith("placeto-jax: error: ") and err.count("\n") == 1
    return err


DIAMOND = {
    "name": "example:diamond",
    "ops": 4,
    "groups": 4,
    "edges": 4,
    "total_ms": 0.19,
    "critical_path_ms": 0.16,
    "parallelism": pytest.approx(190 / 160),
}


def test_list_json_has_the_example_and_every_zoo_model(capsys):
    rows = json.loads(_ok(capsys, "graphs", "list", "--json"))
    assert [row["name"] for row in rows] == ["example:diamond", *ZOO]
    assert rows[0] == DIAMOND
    resnet = generators.layered(10 + len("resnet50"))
    assert (rows[1]["groups"], rows[1]["edges"]) == (resnet.n_ops, resnet.n_edges)
    assert rows[1]["ops"] == 1000 + len("resnet50")
    assert rows[1]["total_ms"] == pytest.approx(resnet.cost.sum() / 1e3)


def test_list_table(capsys):
    lines = _ok(capsys, "graphs", "list").splitlines()
    header = [cell.strip() for cell in lines[0].split("  ") if cell.strip()]
    assert header == [
        "name",
        "ops",
        "groups",
        "group edges",
        "total ms",
        "critical path ms",
        "parallelism",
    ]
    assert lines[1].split() == ["example:diamond", "4", "4", "4", "0.190", "0.160", "1.19"]
    assert lines[2].split()[:3] == ["zoo:resnet50", "1008", str(10 + len("resnet50"))]
    assert [line.split()[0] for line in lines[2:]] == ZOO


def test_list_with_families(capsys):
    rows = json.loads(_ok(capsys, "graphs", "list", "--json", "--include-families"))
    family_rows = rows[1 + len(ZOO) :]
    assert len(family_rows) == 3 * 32
    assert family_rows[0]["name"] == "family:cifar10/0"
    assert family_rows[-1]["name"] == "family:nmt/31"
    assert all(row == {**DIAMOND, "name": row["name"]} for row in family_rows)


def test_show_diamond_text(capsys):
    lines = _ok(capsys, "graphs", "show", "example:diamond").splitlines()
    assert lines[:6] == [
        "graph      example:diamond: 4 ops, 4 edges",
        "compute    0.190 ms total, critical path 0.160 ms, parallelism 1.19",
        # one device: a, b, c, d back to back with three 5.7 µs gaps: 190 + 17.1 = 207.1 µs
        "one device 0.207 ms on placeto-k80: compute 0.190 ms + per-kernel overhead 0.017 ms "
        "(4 kernels, 5.7 µs gaps); parallelism with overhead 1.29",
        "params     0 GB",
        "in-degree  mean 1.00, max 2, 1 ops with none",
        "out-degree mean 1.00, max 2, 1 ops with none",
    ]
    assert [line.split() for line in lines[7:]] == [
        ["op", "cost", "ms", "share"],
        ["a", "0.100", "52.6%"],
        ["b", "0.050", "26.3%"],
        ["c", "0.030", "15.8%"],
        ["d", "0.010", "5.3%"],
    ]


def test_show_json_top_ten_by_cost(capsys):
    doc = json.loads(_ok(capsys, "graphs", "show", "layered:30", "--json"))
    graph = generators.layered(30)
    top = np.argsort(-graph.cost)[:10]
    assert [op["name"] for op in doc["top_ops"]] == [graph.names[v] for v in top]
    assert doc["top_ops"][0]["share"] == pytest.approx(graph.cost.max() / graph.cost.sum())
    assert doc["in_degree"] == {
        "mean": pytest.approx(graph.n_edges / 30),
        "max": int(graph.in_degree.max()),
        "zero": int((graph.in_degree == 0).sum()),
    }
    assert doc["param_bytes"] == 0.0
    assert doc["ops"] == 30 and doc["parallelism"] > 1


def test_show_zoo_model_uses_the_zoo(capsys):
    doc = json.loads(_ok(capsys, "graphs", "show", "zoo:bert_base", "--json"))
    assert doc["ops"] == 10 + len("bert_base")


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_export_round_trips(capsys, tmp_path, name):
    path = tmp_path / name
    out = _ok(capsys, "graphs", "export", "layered:30", "-o", str(path))
    assert out == f"wrote {path}: 30 ops, {generators.layered(30).n_edges} edges\n"
    graph = load_graph(path)
    assert graph.names == generators.layered(30).names
    assert np.array_equal(graph.edges, generators.layered(30).edges)


def test_plot_writes_a_png(capsys, tmp_path):
    path = tmp_path / "g.png"
    assert _ok(capsys, "graphs", "plot", "layered:30", "-o", str(path)) == f"wrote {path}\n"
    assert path.read_bytes().startswith(PNG)


def test_plot_large_graph_draws_nodes_only(capsys, tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plotting, "PLOT_EDGES_MAX_OPS", 20)
    monkeypatch.setattr(plotting, "LineCollection", lambda *a, **k: drawn.append(a))
    _ok(capsys, "graphs", "plot", "layered:30", "-o", str(tmp_path / "g.png"))
    assert drawn == [] and (tmp_path / "g.png").read_bytes().startswith(PNG)


def test_unknown_zoo_model_suggests_close_names(capsys):
    err = _error(capsys, 2, "graphs", "show", "zoo:resnet")
    assert "did you mean zoo:resnet50" in err


def test_family_list_name_is_not_one_graph(capsys):
    assert "names a list of graphs" in _error(capsys, 2, "graphs", "show", "family:ptb")


def test_missing_graph_and_unwritable_output(capsys, tmp_path):
    _error(capsys, 2, "graphs", "export", str(tmp_path / "nope.json"), "-o", "x.json")
    err = _error(capsys, 2, "graphs", "plot", "example:diamond", "-o", str(tmp_path / "a/b.png"))
    assert "b.png" in err
    assert list(tmp_path.iterdir()) == []


def test_actions_are_required(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["graphs"])
    assert info.value.code == 2
    assert "ACTION" in capsys.readouterr().err


def test_show_counts_the_per_kernel_overhead_of_a_step_on_one_device(capsys, tmp_path):
    # A chain of 100, 50 and 30 µs ops running 1, 3 and 2 kernels: on one placeto-k80 (speed
    # 1, 5.7 µs after every kernel but the step's last) it takes 180 + 5 x 5.7 = 208.5 µs; the
    # longest path of op durations (their own kernels' gaps inside) is 180 + 3 x 5.7 = 197.1.
    graph = pj.Graph.from_edges([100.0, 50.0, 30.0], [0, 0, 0], [(0, 1), (1, 2)], kernels=[1, 3, 2])
    path = tmp_path / "chain.json"
    pj.save_graph(graph, path)
    doc = json.loads(_ok(capsys, "graphs", "show", str(path), "--json"))
    assert (doc["cluster"], doc["kernels"], doc["delta1_us"]) == ("placeto-k80", 6, 5.7)
    assert doc["one_device_ms"] == pytest.approx(0.2085, abs=1e-12)
    assert doc["one_device_compute_ms"] == pytest.approx(0.180, abs=1e-12)
    assert doc["one_device_overhead_ms"] == pytest.approx(0.0285, abs=1e-12)
    assert doc["parallelism_with_overhead"] == pytest.approx(208.5 / 197.1)
    assert "k81" in _error(capsys, 2, "graphs", "show", str(path), "--cluster", "k81")
