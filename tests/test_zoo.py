"""Zoo training graphs: tiny configurations in the default suite, full sizes marked slow."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from placeto_jax.graphs import zoo
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.grouping import Grouping

TINY = {
    "resnet50": {"batch": 2, "image": 32, "blocks": (1, 1, 1, 1), "width": 8, "classes": 10},
    "transformer": {"batch": 2, "seq": 8, "layers": 1, "d": 32, "heads": 2, "ff": 64, "vocab": 50},
    "bert_base": {"batch": 2, "seq": 8, "layers": 1, "d": 32, "heads": 2, "ff": 64, "vocab": 50},
    "inception_v3": {"batch": 1, "image": 75, "width_div": 16, "classes": 10},
}
TARGET = 40


@functools.cache
def _tiny(name: str) -> tuple[Graph, Grouping]:
    return zoo.zoo_op_graph(name, group_target=TARGET, sizes=TINY[name])


def _check_grouping(name: str, graph: Graph, grouping: Grouping, target: int) -> None:
    grouped = grouping.graph
    assert graph.topological_order.shape == (graph.n_ops,)
    assert grouped.topological_order.shape == (grouped.n_ops,)
    assert grouped.n_ops <= target < graph.n_ops
    assert grouping.op_to_group.shape == (graph.n_ops,)
    assert np.isclose(grouped.cost.sum(), graph.cost.sum(), rtol=1e-12)
    assert np.isclose(grouped.param_bytes.sum(), graph.param_bytes.sum(), rtol=1e-12)
    assert all(n.startswith(f"zoo:{name}/") for n in graph.names)


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_training_graph_is_grouped_dag(name):
    graph, grouping = _tiny(name)
    _check_grouping(name, graph, grouping, TARGET)
    assert graph.param_bytes.sum() > 0
    kinds = set(graph.op_types)
    assert {"dot_general", "add"} <= kinds
    forward = [n for n in graph.names if "/jvp(" in n]
    backward = [n for n in graph.names if "/transpose(jvp(" in n]
    optimizer = [n for n in graph.names if "/optimizer/" in n]
    assert forward and backward and optimizer


def test_tiny_resnet_has_every_bottleneck_block():
    graph = _tiny("resnet50")[0]
    for stage in range(1, 5):
        assert any(f"jvp(ResNet)/stage{stage}_0/conv3_conv/" in n for n in graph.names)


def test_inception_branches_are_parallel():
    graph = _tiny("inception_v3")[0]
    prefix = "zoo:inception_v3/jvp(InceptionV3)/mixed_5b"
    convs = [
        graph.index(f"{prefix}/{branch}_conv/conv_general_dilated")
        for branch in ("b1x1", "b5x5_2", "b3x3dbl_3", "pool")
    ]
    for u in convs:
        for v in convs:
            assert u == v or not graph.is_ancestor(u, v)


def test_cache_round_trip(tmp_path, monkeypatch):
    sizes = TINY["resnet50"]
    first = zoo.zoo_graph("resnet50", group_target=TARGET, cache_dir=tmp_path, sizes=sizes)
    path = zoo.cache_path("resnet50", group_target=TARGET, cache_dir=tmp_path, sizes=sizes)
    assert path.is_file() and path.parent == tmp_path and path.name.startswith("resnet50-")

    def no_trace(*args, **kwargs):
        raise AssertionError("the cached graph should have been read")

    monkeypatch.setattr(zoo, "zoo_op_graph", no_trace)
    second = zoo.zoo_graph("resnet50", group_target=TARGET, cache_dir=tmp_path, sizes=sizes)
    for field in ("cost", "out_bytes", "param_bytes", "edges"):
        np.testing.assert_array_equal(getattr(second, field), getattr(first, field))
    assert second.names == first.names and second.op_types == first.op_types


def test_cache_key_and_location(tmp_path, monkeypatch):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    path = zoo.cache_path("transformer")
    assert path.parent == tmp_path
    assert zoo.cache_path("transformer", cache_dir=tmp_path / "x").parent == tmp_path / "x"
    others = {
        zoo.cache_path("transformer", group_target=100),
        zoo.cache_path("transformer", sizes={"batch": 8}),
        zoo.cache_path("bert_base"),
    }
    assert path not in others and len(others) == 3
    monkeypatch.setattr(zoo, "VERSION", zoo.VERSION + 1)
    assert zoo.cache_path("transformer") != path
    monkeypatch.delenv(zoo.CACHE_ENV)
    assert zoo.cache_path("transformer").parent == zoo.DEFAULT_CACHE.expanduser()


def test_unknown_name_lists_models(tmp_path):
    with pytest.raises(ValueError, match=r"unknown zoo model 'vgg'.*resnet50.*transformer"):
        zoo.zoo_graph("vgg", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.zoo_op_graph("vgg")


def test_unknown_size_is_rejected():
    with pytest.raises(ValueError, match=r"unknown sizes \['depth'\].*resnet50"):
        zoo.zoo_op_graph("resnet50", sizes={"depth": 3})


def test_every_model_is_described():
    for entry in zoo.ZOO_MODELS.values():
        assert entry.description and "\n" not in entry.description and entry.sizes
    assert set(TINY) == set(zoo.ZOO_MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(zoo.ZOO_MODELS))
def test_full_size_model(name):
    graph, grouping = zoo.zoo_op_graph(name)
    _check_grouping(name, graph, grouping, 500)
