"""resolve_graph: built-in graph specs and graph files, with errors that list the forms."""

from __future__ import annotations

import numpy as np
import pytest

from placeto_jax.graphs import generators
from placeto_jax.graphs.io import save_graph
from placeto_jax.graphs.registry import BUILTIN_GRAPHS, resolve_graph

FORMS = (
    "example:diamond, layered:N[:SEED], cnn[:MODULES[:SEED]], zoo:MODEL, family:F/I[:SEED], "
    "or a graph file path"
)


def _same(a, b) -> bool:
    return (
        a.names == b.names
        and np.array_equal(a.cost, b.cost)
        and np.array_equal(a.edges, b.edges)
        and np.array_equal(a.param_bytes, b.param_bytes)
    )


def test_example_diamond():
    graph = resolve_graph("example:diamond")
    assert graph.names == ("a", "b", "c", "d")
    assert graph.cost.tolist() == [100.0, 50.0, 30.0, 10.0]


def test_layered_sizes_and_seeds():
    assert resolve_graph("layered:50").n_ops == 50
    assert _same(resolve_graph("layered:50"), generators.layered(50, seed=0))
    assert _same(resolve_graph("layered:50:7"), generators.layered(50, seed=7))
    assert not _same(resolve_graph("layered:50:7"), resolve_graph("layered:50:8"))


def test_cnn_defaults_and_arguments():
    assert _same(resolve_graph("cnn"), generators.branchy_cnn(10, 0))
    assert _same(resolve_graph("cnn:2"), generators.branchy_cnn(2, 0))
    assert _same(resolve_graph("cnn:2:5"), generators.branchy_cnn(2, 5))


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_graph_file(tmp_path, name):
    save_graph(generators.layered(12, seed=3), tmp_path / name)
    assert _same(resolve_graph(str(tmp_path / name)), generators.layered(12, seed=3))


def test_builtin_names_take_precedence_over_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_graph(generators.diamond(), tmp_path / "cnn")
    assert resolve_graph("cnn").n_ops == generators.branchy_cnn().n_ops
    assert resolve_graph("./cnn").n_ops == 4


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("layered", "layered takes N and an optional SEED"),
        ("layered:", "N must be an integer >= 1, got ''"),
        ("layered:abc", "N must be an integer >= 1, got 'abc'"),
        ("layered:0", "N must be an integer >= 1, got '0'"),
        ("layered:-3", "N must be an integer >= 1, got '-3'"),
        ("layered:5:x", "SEED must be an integer >= 0, got 'x'"),
        ("layered:5:1:2", "layered takes N and an optional SEED"),
        ("cnn:", "MODULES must be an integer >= 1, got ''"),
        ("cnn:0", "MODULES must be an integer >= 1, got '0'"),
        ("cnn:2:1.5", "SEED must be an integer >= 0, got '1.5'"),
        ("cnn:1:2:3", "cnn takes an optional MODULES and SEED"),
        ("example", "the only example is example:diamond"),
        ("example:square", "the only example is example:diamond"),
    ],
)
def test_malformed_builtin_specs(spec, problem):
    with pytest.raises(ValueError) as info:
        resolve_graph(spec)
    assert str(info.value) == f"bad graph {spec!r}: {problem}; expected {FORMS}"


@pytest.mark.parametrize("spec", ["nope.json", "unknown:3", "diamond"])
def test_unknown_names_and_missing_files(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as info:
        resolve_graph(spec)
    assert str(info.value) == (
        f"graph {spec!r} is not a built-in graph or an existing file; {FORMS}"
    )


def test_corrupt_file_error_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{")
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON"):
        resolve_graph(str(path))


def test_help_text_lists_every_form():
    for form in ("example:diamond", "layered:N[:SEED]", "cnn[:MODULES[:SEED]]", ".json.gz"):
        assert form in BUILTIN_GRAPHS


def test_zoo_names_dispatch_to_the_zoo(monkeypatch):
    from placeto_jax.graphs import zoo

    built = []
    monkeypatch.setattr(zoo, "zoo_graph", lambda name: built.append(name) or generators.diamond())
    assert resolve_graph("zoo:resnet50").n_ops == 4
    assert built == ["resnet50"]


def test_zoo_name_errors_list_the_models():
    with pytest.raises(ValueError, match="zoo takes one model name: resnet50"):
        resolve_graph("zoo:resnet50:extra")
    with pytest.raises(ValueError, match="resnet50"):
        resolve_graph("zoo:alexnet")


def test_family_names_dispatch_to_the_families(monkeypatch):
    from placeto_jax.graphs import families

    built = []

    def fake(family, index, seed=0):
        built.append((family, index, seed))
        return generators.diamond()

    monkeypatch.setattr(families, "family_graph", fake)
    resolve_graph("family:ptb/5")
    resolve_graph("family:cifar10/31:7")
    assert built == [("ptb", 5, 0), ("cifar10", 31, 7)]


@pytest.mark.parametrize("spec", ["family:ptb", "family:ptb/x", "family:mnist/1", "family:ptb/40"])
def test_family_name_errors(spec):
    with pytest.raises(ValueError, match="bad graph"):
        resolve_graph(spec)


# ---------------------------------------------------------------------- names, lists, suggestions
def test_names_lists_every_builtin_name():
    from placeto_jax.graphs import families, zoo
    from placeto_jax.graphs.registry import names

    listed = names()
    assert listed[0] == "example:diamond"
    assert [n for n in listed if n.startswith("zoo:")] == [f"zoo:{m}" for m in zoo.ZOO_MODELS]
    for split in ("family:ptb", "family:ptb/train", "family:ptb/test", "family:nmt/31"):
        assert split in listed
    per_family = 1 + 2 + families.FAMILY_SIZE
    assert len(listed) == 1 + len(zoo.ZOO_MODELS) + len(families.FAMILIES) * per_family
    assert len(set(listed)) == len(listed)


def test_names_is_exported():
    from placeto_jax import graphs

    assert "names" in graphs.__all__ and graphs.names is not None


@pytest.fixture
def fake_families(monkeypatch):
    """Family graph (F, I, seed) becomes layered:(I + 1):seed; returns the calls."""
    from placeto_jax.graphs import families

    built = []

    def fake(family, index, *, seed=0, group_target=None):
        built.append((family, index, seed))
        return generators.layered(index + 1, seed=seed)

    monkeypatch.setattr(families, "family_graph", fake)
    return built


@pytest.mark.parametrize(
    ("spec", "indices", "seed"),
    [
        ("family:ptb", range(32), 0),
        ("family:ptb/train", range(24), 0),
        ("family:ptb/test", range(24, 32), 0),
        ("family:nmt/test:3", range(24, 32), 3),
    ],
)
def test_load_family_and_split_names_give_lists(fake_families, spec, indices, seed):
    from placeto_jax.graphs.registry import load

    family = spec.split(":")[1].split("/")[0]
    loaded = load(spec)
    suffix = f":{seed}" if seed else ""
    assert [name for name, _ in loaded] == [f"family:{family}/{i}{suffix}" for i in indices]
    assert [graph.n_ops for _, graph in loaded] == [i + 1 for i in indices]
    assert fake_families == [(family, i, seed) for i in indices]


def test_load_single_names_give_graphs(fake_families):
    from placeto_jax.graphs.registry import load

    assert load("family:ptb/4").n_ops == 5
    assert load("example:diamond").names == ("a", "b", "c", "d")


@pytest.mark.parametrize(
    ("spec", "problem", "suggestion"),
    [
        ("family:ptb/val", "unknown split 'val'", "did you mean family:ptb/"),
        ("family:ptbb", "unknown family 'ptbb'", "did you mean family:ptb,"),
    ],
)
def test_bad_family_list_names(fake_families, spec, problem, suggestion):
    from placeto_jax.graphs.registry import load

    with pytest.raises(ValueError) as info:
        load(spec)
    message = str(info.value)
    assert message.startswith(f"bad graph {spec!r}: {problem}") and suggestion in message
    assert fake_families == []


def test_unknown_zoo_model_suggests_close_names():
    with pytest.raises(ValueError, match=r"did you mean zoo:resnet50\b"):
        resolve_graph("zoo:resnet")


def test_family_index_out_of_range_suggests_indices():
    with pytest.raises(ValueError, match=r"did you mean family:ptb/4, "):
        resolve_graph("family:ptb/40")


def test_a_list_name_is_not_one_graph():
    with pytest.raises(ValueError, match="names a list of graphs") as info:
        resolve_graph("family:ptb/train")
    assert "did you mean family:ptb/train" not in str(info.value)


def test_builtin_help_lists_every_zoo_model():
    from placeto_jax.graphs.zoo import ZOO_MODELS

    listed = BUILTIN_GRAPHS.replace("\n", " ").replace(" ", "")
    for model in ZOO_MODELS:
        assert model in listed
