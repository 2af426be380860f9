"""The native CPU kernel (`sim/native.cc` through `sim/native.py`): built, exact, vmappable.

Its agreement with the reference on the 520 random cases and the zero-duration rounds is in
tests/test_sim.py (parametrized over the native kernel and the JAX scan loop)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import placeto_jax as pj
from placeto_jax import precision
from placeto_jax.graphs.generators import layered
from placeto_jax.sim import native
from placeto_jax.sim.api import padded, sim_cluster, simulate_batch
from placeto_jax.sim.core import SimGraph, simulate_lanes, simulate_padded
from placeto_jax.sim.padded import pad_graph
from randgraphs import random_case

F64 = np.float64
SOURCE = Path(native.__file__).with_name("native.cc")


@pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="no C++ compiler to build it"
)
def test_the_kernel_is_built_and_not_older_than_its_source():
    """`pip install` builds it wherever a compiler exists; a stale build after editing
    native.cc would test old code (rebuild with `pip install -e .`)."""
    assert native.available(), "the native simulator did not build: run `pip install -e .`"
    library = Path(importlib.util.find_spec(native.LIBRARY).origin)
    assert library.stat().st_mtime >= SOURCE.stat().st_mtime, "stale build: pip install -e ."
    assert native.in_use() == (jax.default_backend() == "cpu")


needs_kernel = pytest.mark.skipif(not native.available(), reason="native kernel not built")


@needs_kernel
def test_vmap_over_a_bank_of_graphs_equals_the_jax_loop_per_graph():
    """The trainer vmaps `simulate_padded` over episodes of different graphs (batched graph
    arrays, one cluster): every output equals the JAX loop's on each graph alone, bit for bit."""
    graphs = [random_case(seed)[0] for seed in (3, 11, 29)]
    sizes = dict(n_pad=64, max_children=64, n_chains=64, n_edges=1024)
    cluster = pj.Cluster(3, speed=[1.0, 2.0, 0.5], delta1=5.7, delta2=25.0, broadcast=False)
    rng = np.random.default_rng(0)
    with precision.scope(F64):
        banks = [SimGraph.from_padded(pad_graph(g, **sizes), F64) for g in graphs]
        bank = jax.tree.map(lambda *x: jnp.stack(x), *banks)
        sc = sim_cluster(cluster, F64)
        rows = np.zeros((3, 64), np.int32)
        for i, g in enumerate(graphs):
            rows[i, : g.n_ops] = rng.integers(0, 3, g.n_ops)
        fn = jax.jit(jax.vmap(simulate_padded, in_axes=(0, None, 0, None)), static_argnums=3)
        got = fn(bank, sc, jnp.asarray(rows), False)
        for i, sg in enumerate(banks):
            want = simulate_lanes(sg, sc, jnp.asarray(rows[i : i + 1]), False)
            for x, y in zip(got, want, strict=True):
                np.testing.assert_array_equal(x[i], y[0])


@needs_kernel
def test_nested_vmap_and_jit_equal_one_batch_call():
    """vmap of vmap (placements [2, 3, Np]) inside jit: the same outputs as one call on the
    6 rows."""
    graph = layered(50, seed=1)
    pg = padded(graph)
    with precision.scope(F64):
        sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(pj.Cluster(4), F64)
        rows = np.zeros((6, pg.n_pad), np.int32)
        rows[:, : graph.n_ops] = np.random.default_rng(1).integers(0, 4, (6, graph.n_ops))
        inner = jax.vmap(simulate_padded, in_axes=(None, None, 0))
        nested = jax.jit(jax.vmap(inner, in_axes=(None, None, 0)))(
            sg, sc, jnp.asarray(rows.reshape(2, 3, -1))
        )
        flat = simulate_batch(sg, sc, jnp.asarray(rows), True, "native")
        for x, y in zip(nested, flat, strict=True):
            np.testing.assert_array_equal(np.asarray(x).reshape(y.shape), y)


@needs_kernel
def test_float32_matches_the_reference_to_rounding():
    for seed in range(0, 40, 4):
        graph, cluster, placements = random_case(seed)
        got = pj.simulate(graph, cluster, placements, dtype=np.float32, loop="native")
        assert got.makespan.dtype == np.float32
        want = pj.simulate_reference(graph, cluster, placements)
        np.testing.assert_allclose(got.makespan, want.makespan, rtol=1e-5)
        np.testing.assert_allclose(got.peak_memory, want.peak_memory, rtol=1e-6)


@needs_kernel
def test_a_device_out_of_range_is_an_error_naming_the_op():
    """`simulate` refuses it at the boundary; the kernel itself, called directly, fails with a
    message instead of reading out of bounds."""
    graph = layered(20, seed=0)
    pg = padded(graph)
    with precision.scope(F64):
        sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(pj.Cluster(2), F64)
        rows = np.zeros((1, pg.n_pad), np.int32)
        rows[0, 7] = 5
        with pytest.raises(Exception, match="op 7 placed on device 5 of 2"):
            jax.block_until_ready(simulate_batch(sg, sc, jnp.asarray(rows), True, "native"))


def test_native_without_the_kernel_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(native, "available", lambda: False)
    graph = layered(20, seed=0)
    with precision.scope(F64):
        sg, sc = SimGraph.from_padded(padded(graph), F64), sim_cluster(pj.Cluster(2), F64)
        rows = jnp.zeros((1, sg.cost.shape[0]), jnp.int32)
        with pytest.raises(RuntimeError, match="native simulator is not built"):
            native.simulate_placements(sg, sc, rows, True)


@needs_kernel
def test_outputs_do_not_depend_on_the_thread_count(monkeypatch):
    """13 placements of a random case split over 1, 2 or 3 threads (ranges of at least 4)."""
    graph, cluster, _ = random_case(7)
    pg = padded(graph)
    rows = np.zeros((13, pg.n_pad), np.int32)
    rows[:, : graph.n_ops] = np.random.default_rng(7).integers(
        0, cluster.n_devices, (13, graph.n_ops)
    )
    outputs = []
    with precision.scope(F64):
        sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(cluster, F64)
        for count in ("1", "2", "3"):
            monkeypatch.setenv("PLACETO_JAX_NATIVE_THREADS", count)
            assert native.threads() == int(count)
            outputs.append(native.simulate_placements(sg, sc, jnp.asarray(rows), cluster.broadcast))
    for other in outputs[1:]:
        for x, y in zip(outputs[0], other, strict=True):
            np.testing.assert_array_equal(x, y)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("PLACETO_JAX_NATIVE_THREADS", bad)
        with pytest.raises(ValueError, match=f"must be an integer >= 1, not '{bad}'"):
            native.threads()


def test_a_library_that_does_not_load_is_a_clear_error(monkeypatch, tmp_path):
    broken = tmp_path / "_native.so"
    broken.write_text("not a shared library")
    spec = importlib.util.spec_from_file_location(native.LIBRARY, broken)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(RuntimeError, match=r"does not load.*PLACETO_JAX_NATIVE=0"):
        native.available.__wrapped__()


def _variants_of(base: np.ndarray, n_devices: int, rng: np.random.Generator) -> list:
    """Sets of rows [2, N] near `base` [N], each one call: one op moved, three ops moved, an op
    of index 0 moved (often without parents: no shared prefix), the last op moved, none moved."""
    n = base.size
    calls = []
    for ops in [rng.integers(0, n, 1), rng.integers(0, n, 3), [0], [n - 1], []]:
        rows = np.repeat(base[None], 2, axis=0)
        rows[:, ops] = rng.integers(0, n_devices, (2, len(ops)))
        calls.append(rows)
    return calls


def _variants(graph, cluster, base, rows, dtype=F64):
    """`simulate_variants` of placements by op on `graph`'s default padding, as NumPy."""
    pg = padded(graph)
    padded_rows = np.zeros((rows.shape[0], pg.n_pad), np.int32)
    padded_rows[:, : graph.n_ops] = rows
    padded_base = np.zeros(pg.n_pad, np.int32)
    padded_base[: graph.n_ops] = base
    with precision.scope(dtype):
        sg, sc = SimGraph.from_padded(pg, dtype), sim_cluster(cluster, dtype)
        makespan, peak = jax.jit(native.simulate_variants, static_argnums=4)(
            sg, sc, jnp.asarray(padded_base), jnp.asarray(padded_rows), cluster.broadcast
        )
    return np.asarray(makespan), np.asarray(peak)


@needs_kernel
@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_variants_equal_the_reference_bit_for_bit(seed):
    """Placements near a base (moved ops with and without parents, all moved, none): the
    variants kernel, which shares the base's schedule up to the first completion of a moved
    op's parent, gives the reference's makespan and peak memory exactly (float64)."""
    graph, cluster, _ = random_case(seed)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, cluster.n_devices, graph.n_ops)
    for rows in _variants_of(base, cluster.n_devices, rng):
        makespan, peak = _variants(graph, cluster, base, rows)
        want = pj.simulate_reference(graph, cluster, rows)
        np.testing.assert_array_equal(makespan, want.makespan)
        np.testing.assert_array_equal(peak, want.peak_memory)


@needs_kernel
def test_variants_on_a_wide_graph_and_any_thread_count(monkeypatch):
    """A 300-op layered graph, one op of the middle moved to each other device (the prefix
    shared is long; the devices' speeds differ): equal to the full simulations, on 1 or 2
    threads."""
    graph = layered(300, seed=4)
    cluster = pj.Cluster(4, speed=[1.0, 2.0, 0.5, 1.5], delta1=5.7, delta2=25.0)
    base = np.random.default_rng(4).integers(0, 4, graph.n_ops)
    rows = np.repeat(base[None], 3, axis=0)
    rows[:, 150] = [d for d in range(4) if d != base[150]]
    want = pj.simulate(graph, cluster, rows, loop="native")
    monkeypatch.setattr(native, "VARIANT_OPS_PER_THREAD", 1)  # split even these few ops
    for count in ("1", "2"):
        monkeypatch.setenv("PLACETO_JAX_NATIVE_THREADS", count)
        jax.clear_caches()  # the thread count is read when traced: trace again
        makespan, peak = _variants(graph, cluster, base, rows)
        np.testing.assert_array_equal(makespan, want.makespan)
        np.testing.assert_array_equal(peak, want.peak_memory)


def test_variants_split_over_threads_only_when_each_gets_enough_ops(monkeypatch):
    monkeypatch.setenv("PLACETO_JAX_NATIVE_THREADS", "2")
    per_thread = native.VARIANT_OPS_PER_THREAD
    assert native.variant_threads(3, per_thread // 3) == 1  # one thread's worth in all
    assert native.variant_threads(3, 2 * per_thread // 3) == 2
    assert native.variant_threads(30, per_thread) == 2  # never more than threads()
    monkeypatch.setenv("PLACETO_JAX_NATIVE_THREADS", "1")
    assert native.variant_threads(30, per_thread) == 1


@needs_kernel
def test_variants_under_vmap_equal_one_call_per_base():
    """vmap over bases and their rows (a batch of lookahead episodes): each group's outputs
    are those of its own call."""
    graph, cluster = layered(60, seed=2), pj.Cluster(3, speed=[1.0, 2.0, 0.5])
    rng = np.random.default_rng(2)
    pg = padded(graph)
    bases = np.zeros((2, pg.n_pad), np.int32)
    bases[:, : graph.n_ops] = rng.integers(0, 3, (2, graph.n_ops))
    rows = np.repeat(bases[:, None], 2, axis=1)
    rows[0, :, 30], rows[1, :, 45] = [(bases[0, 30] + 1) % 3, (bases[0, 30] + 2) % 3], [0, 1]
    with precision.scope(F64):
        sg, sc = SimGraph.from_padded(pg, F64), sim_cluster(cluster, F64)
        batch = jax.vmap(native.simulate_variants, in_axes=(None, None, 0, 0, None))
        batched = jax.jit(batch, static_argnums=4)(
            sg, sc, jnp.asarray(bases), jnp.asarray(rows), cluster.broadcast
        )
    for i in range(2):
        makespan, peak = _variants(
            graph, cluster, bases[i, : graph.n_ops], rows[i, :, : graph.n_ops]
        )
        np.testing.assert_array_equal(batched[0][i], makespan)
        np.testing.assert_array_equal(batched[1][i], peak)
