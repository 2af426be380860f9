"""Measured op costs (`cost_model="measure"`): positive times, size ordering and the cache.

Each test uses its own cache file, so every op is compiled and timed afresh; functions are tiny.
"""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from placeto_jax.files import atomic_write
from placeto_jax.graphs import measure, trace

S, F32 = jax.ShapeDtypeStruct, jnp.float32


def from_jax(*args, **kwargs):
    """`from_jax` at the jaxpr level, the level whose equations `measure` times."""
    return trace.from_jax(*args, level="jaxpr", **kwargs)


def tiny(x, w):
    return jnp.tanh(x @ w).sum()


def trace_tiny(cache, n: int = 8):
    return from_jax(tiny, S((n, n), F32), S((n, n), F32), cost_model="measure", cache=cache)


def test_measured_costs_are_positive(tmp_path):
    g = trace_tiny(tmp_path / "times.json")
    assert g.names == ("dot_general", "tanh", "reduce_sum")
    assert np.all(g.cost > 0)


def test_bigger_matmul_measures_more(tmp_path):
    cache = tmp_path / "times.json"
    small = from_jax(jnp.matmul, S((8, 8), F32), S((8, 8), F32), cost_model="measure", cache=cache)
    big = from_jax(
        jnp.matmul, S((512, 512), F32), S((512, 512), F32), cost_model="measure", cache=cache
    )
    assert big.cost[0] > small.cost[0]


def test_scan_is_measured_as_a_whole(tmp_path):
    def loop(x):
        return jax.lax.scan(lambda c, _: (jnp.sin(c), None), x, length=4)[0]

    g = from_jax(loop, S((4,), F32), cost_model="measure", cache=tmp_path / "t.json")
    assert g.op_types == ("scan",)
    assert g.cost[0] > 0


def test_cache_is_written_atomically_and_reused(tmp_path, monkeypatch):
    cache = tmp_path / "sub" / "times.json"
    writes = []

    def recording_write(path):
        writes.append(path)
        return atomic_write(path)

    monkeypatch.setattr(measure, "atomic_write", recording_write)
    first = trace_tiny(cache)
    assert writes == [cache]
    assert [p.name for p in cache.parent.iterdir()] == ["times.json"]  # no temp file left
    times = json.loads(cache.read_text())
    assert len(times) == 3 and all(v > 0 for v in times.values())

    def no_timing(*args, **kwargs):
        raise AssertionError("timed an op that was cached")

    monkeypatch.setattr(measure, "median_time_us", no_timing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed timing would fall back with a warning
        second = trace_tiny(cache)
    np.testing.assert_array_equal(second.cost, first.cost)

    timed = []
    monkeypatch.setattr(measure, "median_time_us", lambda fn, args, **kw: timed.append(args) or 1.0)
    trace_tiny(cache, n=4)  # a different shape is a different key
    assert len(timed) == 3
    assert len(json.loads(cache.read_text())) == 6


def test_cache_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(measure.CACHE_ENV, str(tmp_path))
    from_jax(jnp.sin, S((3,), F32), cost_model="measure")
    assert list(json.loads((tmp_path / "op_times.json").read_text())) == [
        measure.signature(jax.make_jaxpr(jnp.sin)(S((3,), F32)).eqns[0])
    ]


def test_corrupt_cache_is_ignored_and_rewritten(tmp_path):
    cache = tmp_path / "times.json"
    cache.write_text("{not json")
    with pytest.warns(UserWarning, match="ignoring unreadable op time cache"):
        g = trace_tiny(cache)
    assert sorted(json.loads(cache.read_text()).values()) == sorted(g.cost)


def test_unknown_cost_model_lists_both():
    with pytest.raises(ValueError, match="'roofline', 'measure'"):
        from_jax(jnp.sin, S((2,), F32), cost_model="profiled")


def test_median_time_is_the_middle_of_the_timed_calls_after_the_warmup(monkeypatch):
    clock = iter([0.0, 0.4, 1.0, 1.1, 2.0, 3.0])  # timed calls of 0.4, 0.1 and 1.0 s (mean 0.5)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: next(clock))
    calls = []
    us = measure.median_time_us(lambda x: calls.append(x) or "placed", (7,), repeats=3, warmup=2)
    assert calls == [7] * 5  # 2 untimed, 3 timed
    assert us == pytest.approx(0.4e6)
