"""Family samplers: deterministic ENAS architectures and their traced training-step graphs.

The default suite traces shrunken copies of sampled architectures (same cells, tiny sizes);
full-size graphs are built only in the slow tests.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax.graphs import families as fam
from placeto_jax.graphs.families import (
    CNN_NODES,
    CNN_OPS,
    FAMILIES,
    FAMILY_SIZE,
    RNN_ACTIVATIONS,
    RNN_NODES,
    SPLITS,
    CnnCell,
    RnnCell,
    architecture_graph,
    family_graph,
    family_graphs,
    family_name,
    sample_architecture,
)

pytestmark = pytest.mark.filterwarnings("ignore:roofline cost model has no FLOP count")


def tiny(arch: fam.Architecture) -> fam.Architecture:
    """The same cells at sizes that trace in a fraction of a second."""
    if isinstance(arch, fam.Cifar10Architecture):
        return dataclasses.replace(arch, channels=4, cells=1, batch=2, image=8, classes=3)
    if isinstance(arch, fam.PtbArchitecture):
        return dataclasses.replace(arch, hidden=8, steps=3, batch=2, vocab=16)
    return dataclasses.replace(arch, hidden=8, src_steps=3, tgt_steps=2, batch=2, vocab=16)


def assert_same_graph(a: pj.Graph, b: pj.Graph) -> None:
    for field in ("cost", "out_bytes", "param_bytes", "edges"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.names == b.names and a.op_types == b.op_types


def rnn_cells(arch: fam.Architecture) -> list[RnnCell]:
    if isinstance(arch, fam.PtbArchitecture):
        return [arch.cell]
    return [arch.encoder, arch.decoder] if isinstance(arch, fam.NmtArchitecture) else []


def assert_valid_rnn_cell(cell: RnnCell) -> None:
    assert len(cell.inputs) == RNN_NODES - 1 and len(cell.activations) == RNN_NODES
    assert all(0 <= j < i for i, j in enumerate(cell.inputs, 1))
    assert set(cell.activations) <= set(RNN_ACTIVATIONS)
    assert cell.loose_ends and cell.loose_ends[-1] == RNN_NODES - 1


def assert_valid_cnn_cell(cell: CnnCell) -> None:
    assert len(cell.inputs) == len(cell.ops) == CNN_NODES
    assert all(0 <= j < i for i, pair in enumerate(cell.inputs, 2) for j in pair)
    assert {op for pair in cell.ops for op in pair} <= set(CNN_OPS)
    assert cell.loose_ends and cell.loose_ends[-1] == CNN_NODES + 1


# ---------------------------------------------------------------------- sampling
@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_is_deterministic_and_indices_differ(family):
    archs = [sample_architecture(family, i) for i in range(FAMILY_SIZE)]
    assert archs == [sample_architecture(family, i, seed=0) for i in range(FAMILY_SIZE)]
    assert len(set(archs)) == FAMILY_SIZE
    assert sample_architecture(family, 0, seed=1) != archs[0]


def test_families_differ_for_the_same_seed_and_index():
    ptb, nmt = sample_architecture("ptb", 3), sample_architecture("nmt", 3)
    assert ptb.cell not in (nmt.encoder, nmt.decoder)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_sampled_architecture_is_valid(family):
    for seed in (0, 1):
        for i in range(FAMILY_SIZE):
            arch = sample_architecture(family, i, seed)
            if isinstance(arch, fam.Cifar10Architecture):
                assert_valid_cnn_cell(arch.cell)
                assert arch.channels in (16, 24, 32) and arch.cells in (1, 2)
            elif isinstance(arch, fam.PtbArchitecture):
                assert arch.hidden in (200, 300, 400, 650) and 20 <= arch.steps <= 35
            else:
                assert arch.hidden in (256, 384, 512)
                assert 10 <= arch.src_steps <= 20 and 10 <= arch.tgt_steps <= 20
            for cell in rnn_cells(arch):
                assert_valid_rnn_cell(cell)


def test_loose_ends():
    cell = RnnCell(inputs=(0, 0, 1, 2, 2, 5, 3), activations=("tanh",) * RNN_NODES)
    assert cell.loose_ends == (4, 6, 7)
    cnn = CnnCell(inputs=((0, 1), (2, 2), (3, 0), (1, 4), (5, 5)), ops=(("identity",) * 2,) * 5)
    assert cnn.loose_ends == (6,)


# ---------------------------------------------------------------------- splits and names
def test_splits_are_fixed_disjoint_and_cover_the_family():
    assert list(SPLITS["train"]) == list(range(24))
    assert list(SPLITS["test"]) == list(range(24, 32))
    assert set(SPLITS["train"]).isdisjoint(SPLITS["test"])
    assert set(SPLITS["train"]) | set(SPLITS["test"]) == set(SPLITS["all"])
    assert len(SPLITS["all"]) == FAMILY_SIZE == 32


def test_names():
    assert family_name("ptb", 5) == "family:ptb/5"
    assert family_name("cifar10", 31, seed=7) == "family:cifar10/31:7"


@pytest.mark.parametrize("split", ["train", "test", "all"])
def test_family_graphs_lists_the_split_in_index_order(monkeypatch, split):
    built = []

    def fake(family, index, *, seed, group_target):
        built.append((family, index, seed, group_target))
        return pj.Graph.from_edges([1.0], [0.0], [])

    monkeypatch.setattr(fam, "family_graph", fake)
    graphs = family_graphs("nmt", split, seed=2, group_target=5)
    indices = list(SPLITS[split])
    assert [name for name, _ in graphs] == [f"family:nmt/{i}:2" for i in indices]
    assert built == [("nmt", i, 2, 5) for i in indices]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sample_architecture("imagenet", 0), "unknown family 'imagenet'"),
        (lambda: sample_architecture("ptb", 32), "index must be in 0..31, got 32"),
        (lambda: sample_architecture("ptb", -1), "index must be in 0..31, got -1"),
        (lambda: sample_architecture("ptb", 0, seed=-3), "seed must be >= 0, got -3"),
        (lambda: family_graph("rnn", 0), "unknown family 'rnn'"),
        (lambda: family_graph("nmt", 40), "index must be in 0..31, got 40"),
        (lambda: family_graphs("ptb", "val"), "unknown split 'val'"),
        (lambda: family_graphs("lm"), "unknown family 'lm'"),
        (lambda: family_name("ptb", 99), "index must be in 0..31"),
    ],
)
def test_bad_arguments_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------- graphs (tiny)
@pytest.mark.parametrize("family", FAMILIES)
def test_graph_is_deterministic(family):
    arch = tiny(sample_architecture(family, 0))
    assert_same_graph(architecture_graph(arch), architecture_graph(arch))


@pytest.mark.parametrize("family", FAMILIES)
def test_graphs_are_training_steps_whose_size_varies(family):
    graphs = [architecture_graph(tiny(sample_architecture(family, i))) for i in range(3)]
    for g in graphs:
        assert len(g.topological_order) == g.n_ops  # a DAG (from_edges rejects cycles)
        assert np.all(g.cost > 0) and g.param_bytes.sum() > 0
        assert any("transpose" in name for name in g.names)  # the backward pass is traced
    assert len({g.n_ops for g in graphs}) > 1


def test_rnn_cell_ops_follow_the_architecture():
    arch = tiny(sample_architecture("ptb", 0))
    cell = RnnCell(inputs=(0,) * (RNN_NODES - 1), activations=("identity",) * RNN_NODES)
    other = dataclasses.replace(cell, activations=("tanh",) * RNN_NODES)
    plain = architecture_graph(dataclasses.replace(arch, cell=cell))
    tanh = architecture_graph(dataclasses.replace(arch, cell=other))
    assert "tanh" not in (plain.op_types or ())
    assert plain.n_ops < tanh.n_ops


def test_grouping_target():
    # The target counts decisions: groups, those tied by co-location (a weight and its update,
    # with the forward and backward pass between them) counted once.
    graph = architecture_graph(tiny(sample_architecture("cifar10", 1)), group_target=12)
    assert graph.colocation_classes.max() + 1 <= 12 < graph.n_ops


# ---------------------------------------------------------------------- graphs (full size)
@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_full_size_family(family):
    graphs = family_graphs(family)
    assert [name for name, _ in graphs] == [f"family:{family}/{i}" for i in range(FAMILY_SIZE)]
    ops = [g.n_ops for _, g in graphs]
    assert len(set(ops)) > FAMILY_SIZE // 2 and min(ops) > 300
    assert_same_graph(graphs[0][1], family_graph(family, 0))
    grouped = family_graph(family, 0, group_target=50)
    # The target counts decisions: groups tied by co-location are one decision.
    assert grouped.colocation_classes.max() + 1 <= 50
    assert grouped.n_ops < graphs[0][1].n_ops
