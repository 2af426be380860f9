"""Graph file format: exact round trip, gzip, atomic writes, one-line errors naming the file."""

from __future__ import annotations

import gzip
import json
import os
import re

import numpy as np
import pytest

import placeto_jax.files
from placeto_jax import Graph
from placeto_jax.graphs import io
from placeto_jax.graphs.generators import branchy_cnn, diamond
from placeto_jax.graphs.io import load_graph, save_graph


def _rich_graph() -> Graph:
    """Every optional field set, awkward floats, unicode names, an unsorted edge list."""
    return Graph.from_edges(
        cost=[0.1, 1e-300, 123456789.123456789, 0.0, 2.5],
        out_bytes=[3.0, 1.0 / 3.0, 7e15, 0.0, 12.0],
        edges=[("x→y", "b"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
        param_bytes=[0.0, 5.5, 0.0, 1e9, 2.0],
        names=["a", "b", "c", "d", "x→y"],
        op_types=["conv", "relu", "relu", "add", "input"],
        colocation=[-1, 3, 3, -1, 0],
        costs_for=("v100", 3.2),
    )


def _assert_same(a: Graph, b: Graph) -> None:
    for field in ("cost", "out_bytes", "param_bytes", "edges", "colocation"):
        x, y = getattr(a, field), getattr(b, field)
        if x is None:
            assert y is None
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y), field
    assert a.names == b.names
    assert a.op_types == b.op_types
    assert a.costs_for == b.costs_for
    assert a.digest == b.digest


def _write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _doc() -> dict:
    return io.graph_to_dict(diamond())


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_round_trip_preserves_every_field_exactly(tmp_path, suffix):
    for graph in (_rich_graph(), diamond(), branchy_cnn(2, seed=3)):
        path = tmp_path / f"g{suffix}"
        save_graph(graph, path)
        _assert_same(graph, load_graph(path))
    assert sorted(os.listdir(tmp_path)) == [f"g{suffix}"]


def test_gzip_by_suffix_and_layout(tmp_path):
    save_graph(diamond(), tmp_path / "g.json.gz")
    save_graph(diamond(), tmp_path / "g.json")
    text = (tmp_path / "g.json").read_text()
    assert gzip.decompress((tmp_path / "g.json.gz").read_bytes()).decode() == text
    doc = json.loads(text)
    assert doc["format"] == "placeto-jax-graph" and doc["version"] == 1
    assert doc["ops"]["name"] == ["a", "b", "c", "d"]
    assert doc["ops"]["cost_us"] == [100.0, 50.0, 30.0, 10.0]
    assert doc["ops"]["op_type"] is None and doc["ops"]["colocation"] is None
    assert doc["edges"] == [[0, 1], [0, 2], [1, 3], [2, 3]]


def test_module_docstring_example_loads(tmp_path):
    example = re.search(r"```json\n(.*?)```", io.__doc__, re.S).group(1)
    graph = load_graph(_write(tmp_path / "doc.json", json.loads(example)))
    assert graph.names == ("a", "b", "c", "d")
    assert graph.op_types == ("conv", "relu", "relu", "add")
    assert graph.colocation.tolist() == [-1, 0, 0, -1]
    assert graph.edges.tolist() == [[0, 1], [0, 2], [1, 3], [2, 3]]


def test_optional_fields_may_be_omitted(tmp_path):
    doc = _doc()
    del doc["ops"]["op_type"], doc["ops"]["colocation"]
    graph = load_graph(_write(tmp_path / "g.json", doc))
    assert graph.op_types is None and graph.colocation is None


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "g.json"
    save_graph(diamond(), path)
    save_graph(_rich_graph(), path)
    _assert_same(load_graph(path), _rich_graph())
    assert os.listdir(tmp_path) == ["g.json"]


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(placeto_jax.files.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        save_graph(diamond(), tmp_path / "g.json.gz")
    assert os.listdir(tmp_path) == []


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "g.json"
    save_graph(diamond(), path)
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(placeto_jax.files.os, "replace", broken_replace)
    with pytest.raises(OSError, match="rename failed"):
        save_graph(_rich_graph(), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["g.json"]


def _load_error(path) -> str:
    with pytest.raises(ValueError) as info:
        load_graph(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


def test_missing_file(tmp_path):
    assert "no such file" in _load_error(tmp_path / "absent.json")


def test_directory_is_unreadable(tmp_path):
    assert "cannot read" in _load_error(tmp_path)


def test_corrupt_json(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"format": "placeto-jax-graph", "version": 1, "ops": {')
    assert "not valid JSON" in _load_error(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not valid JSON" in _load_error(path)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "g.json.gz"
    path.write_bytes(b"not gzip at all")
    assert "not a valid gzip file" in _load_error(path)
    save_graph(diamond(), path)
    path.write_bytes(path.read_bytes()[:-10])  # truncated
    assert "not a valid gzip file" in _load_error(path)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.update(format="other"), '"format" is \'other\', expected "placeto-jax-graph"'),
        (lambda d: d.update(version=2), 'unsupported "version" 2'),
        (lambda d: d.update(version="1"), "unsupported \"version\" '1'"),
        (lambda d: d.update(version=True), 'unsupported "version" True'),
        (lambda d: d.pop("edges"), 'missing field "edges"'),
        (lambda d: d.pop("version"), 'missing field "version"'),
        (lambda d: d["ops"].pop("cost_us"), 'missing field "ops.cost_us"'),
        (lambda d: d.update(extra=1), 'unknown field "extra"'),
        (lambda d: d["ops"].update(costs=[]), 'unknown field "ops.costs"'),
        (lambda d: d.update(ops=[]), '"ops" must be an object of per-op lists, got a list'),
        (lambda d: d["ops"].update(name="abcd"), '"ops.name" must be a list of strings, got a str'),
        (
            lambda d: d["ops"]["name"].__setitem__(1, 7),
            '"ops.name" must be a list of strings; entry 1 is 7',
        ),
        (lambda d: d["ops"]["cost_us"].__setitem__(2, "5"), "entry 2 is '5'"),
        (
            lambda d: d["ops"]["out_bytes"].__setitem__(0, True),
            '"ops.out_bytes" must be a list of finite numbers; entry 0 is True',
        ),
        (lambda d: d["ops"]["param_bytes"].__setitem__(3, float("inf")), "entry 3 is inf"),
        (
            lambda d: d["ops"]["cost_us"].__setitem__(3, 10**400),
            '"ops.cost_us" must be a list of finite numbers; entry 3',
        ),
        (
            lambda d: d["ops"].update(colocation=[0, 0, 1.5, -1]),
            '"ops.colocation" must be a list of integers; entry 2 is 1.5',
        ),
        (lambda d: d["ops"].update(op_type=["x"]), '"ops.op_type" has 1 entries; "ops.name" has 4'),
        (lambda d: d["ops"]["out_bytes"].pop(), '"ops.out_bytes" has 3 entries; "ops.name" has 4'),
        (
            lambda d: d.update(edges={"0": 1}),
            '"edges" must be a list of [producer, consumer] pairs, got an object',
        ),
        (
            lambda d: d["edges"].append([1, 2, 3]),
            '"edges" entry 4 must be [producer, consumer] op indices',
        ),
        (
            lambda d: d["edges"].append(["a", "b"]),
            '"edges" entry 4 must be [producer, consumer] op indices',
        ),
    ],
)
def test_bad_fields_name_the_problem(tmp_path, edit, expected):
    doc = _doc()
    edit(doc)
    assert expected in _load_error(_write(tmp_path / "g.json", doc))
    assert os.listdir(tmp_path) == ["g.json"]


def test_top_level_must_be_an_object(tmp_path):
    message = _load_error(_write(tmp_path / "g.json", [1, 2]))
    assert "expected a JSON object at the top level, got a list" in message


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ([[0, 1], [1, 2], [2, 0]], "graph has a cycle: b -> c -> a -> b"),
        ([[0, 0]], "edge (a, a) is a self-loop"),
        ([[0, 9]], "edge refers to unknown op 9; the graph has ops 0..3"),
    ],
)
def test_graph_validation_errors_are_prefixed_with_the_file(tmp_path, edges, expected):
    doc = _doc()
    doc["edges"] = edges
    message = _load_error(_write(tmp_path / "g.json", doc))
    assert message == f"{tmp_path / 'g.json'}: {expected}"


def test_negative_cost_and_duplicate_names(tmp_path):
    doc = _doc()
    doc["ops"]["cost_us"][1] = -1.0
    assert "cost is negative at op 1" in _load_error(_write(tmp_path / "g.json", doc))
    doc = _doc()
    doc["ops"]["name"][3] = "a"
    assert "op names must be unique" in _load_error(_write(tmp_path / "g.json", doc))


def test_placement_files_refuse_another_device_count_unknown_fields_and_repeated_keys(tmp_path):
    from placeto_jax.graphs.placements import load_placement, save_placement

    graph = diamond()
    path = tmp_path / "p.json"
    save_placement(path, graph, np.array([0, 1, 1, 0]), 2)
    assert load_placement(path, graph, 2).tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="the placement is for 2 devices, not 3"):
        load_placement(path, graph, 3)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "colour": "red"}))
    with pytest.raises(ValueError, match="unknown field 'colour' in a placement file"):
        load_placement(path, graph, 2)
    path.write_text('{"a": 0, "b": 1, "c": 1, "d": 0, "a": 1}')
    with pytest.raises(ValueError, match="the key 'a' appears twice in one object"):
        load_placement(path, graph, 2)
