"""Cluster defaults (the spec's placeto-k80 numbers), per-device fields, presets and validation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placeto_jax import PRESETS, Cluster

# The spec's defaults (docs/simulator.md, preset placeto-k80): 12 GB, 7.6 GB/s, 5.7 µs, 25 µs.
K80 = dict(speed=1.0, memory=12e9, bandwidth=7600.0, delta1=5.7, delta2=25.0)

# The cluster.py table: speed = TFLOPS / 4.37 (rounded to 2 places), GB, GB/s -> bytes/µs, µs.
PRESET_TABLE = {
    "placeto-k80": (1.0, 12e9, 7600.0, 5.7, 25.0),
    "p100": (2.13, 16e9, 12_000.0, 5.0, 15.0),
    "v100": (3.2, 16e9, 12_000.0, 4.0, 10.0),
    "v100-nvlink": (3.59, 16e9, 150_000.0, 4.0, 10.0),
    "a100": (4.46, 80e9, 300_000.0, 3.0, 8.0),
    "h100": (15.33, 80e9, 450_000.0, 3.0, 8.0),
}


def raises(match: str):
    return pytest.raises(ValueError, match=match)


def test_defaults_are_the_spec_numbers():
    c = Cluster(4)
    assert c.n_devices == 4
    assert c.speed == (1.0,) * 4
    assert c.memory == (12e9,) * 4
    assert c.bandwidth == (7600.0,) * 4
    assert (c.delta1, c.delta2, c.broadcast) == (5.7, 25.0, True)


def test_default_equals_k80_preset():
    preset = Cluster.preset("placeto-k80", 3)
    default = Cluster(3)
    assert preset.name == "placeto-k80"
    assert dataclasses.replace(preset, name=default.name) == default


def test_scalar_broadcasts_to_per_device_tuples():
    c = Cluster(3, speed=2, memory=1e9, bandwidth=np.float32(100.0))
    assert c.speed == (2.0, 2.0, 2.0)
    assert c.memory == (1e9,) * 3
    assert c.bandwidth == (100.0,) * 3
    for field in (c.speed, c.memory, c.bandwidth):
        assert isinstance(field, tuple) and all(type(x) is float for x in field)


def test_per_device_lists_and_arrays():
    c = Cluster(3, speed=[1, 2, 0.5], memory=np.array([1e9, 2e9, 3e9]), bandwidth=(10, 20, 30))
    assert c.speed == (1.0, 2.0, 0.5)
    assert c.memory == (1e9, 2e9, 3e9)
    assert c.bandwidth == (10.0, 20.0, 30.0)
    np.testing.assert_array_equal(c.speed_array, [1.0, 2.0, 0.5])
    np.testing.assert_array_equal(c.memory_array, [1e9, 2e9, 3e9])
    np.testing.assert_array_equal(c.bandwidth_array, [10.0, 20.0, 30.0])
    for arr in (c.speed_array, c.memory_array, c.bandwidth_array):
        assert arr.shape == (3,) and arr.dtype == np.float64


def test_numpy_integer_device_count():
    c = Cluster(np.int64(2))
    assert c.n_devices == 2 and type(c.n_devices) is int


def test_scalar_fields_are_normalised():
    c = Cluster(1, delta1=0, delta2=np.float32(2.5), broadcast=0)
    assert (c.delta1, c.delta2, c.broadcast) == (0.0, 2.5, False)
    assert type(c.delta1) is float and type(c.broadcast) is bool


def test_frozen_hashable_and_equal_by_value():
    c = Cluster(2)
    assert c == Cluster(2, speed=[1.0, 1.0]) and hash(c) == hash(Cluster(2, speed=(1, 1)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.delta1 = 0.0  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(PRESET_TABLE))
@pytest.mark.parametrize("n_devices", [1, 8])
def test_every_preset_constructs(name, n_devices):
    speed, memory, bandwidth, delta1, delta2 = PRESET_TABLE[name]
    c = Cluster.preset(name, n_devices)
    assert (c.name, c.n_devices) == (name, n_devices)
    assert c.speed == (speed,) * n_devices
    assert c.memory == (memory,) * n_devices
    assert c.bandwidth == (bandwidth,) * n_devices
    assert (c.delta1, c.delta2, c.broadcast) == (delta1, delta2, True)


def test_preset_table_is_complete():
    assert set(PRESETS) == set(PRESET_TABLE)
    assert PRESETS["placeto-k80"] == K80


def test_preset_overrides():
    c = Cluster.preset("h100", 2, delta1=1.0, speed=[1.0, 2.0], broadcast=False)
    assert (c.delta1, c.speed, c.broadcast) == (1.0, (1.0, 2.0), False)
    assert c.delta2 == 8.0 and c.name == "h100"


def test_unknown_preset():
    with raises(r"unknown cluster preset 'k80'.*placeto-k80"):
        Cluster.preset("k80", 2)


@pytest.mark.parametrize("n", [0, -1])
def test_too_few_devices(n):
    with raises(r"^n_devices must be at least 1"):
        Cluster(n)


@pytest.mark.parametrize("n", [2.0, True, "2", None])
def test_non_integer_devices(n):
    with raises(r"^n_devices must be an integer"):
        Cluster(n)


@pytest.mark.parametrize("field", ["speed", "memory", "bandwidth"])
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), [1.0, 0.0], [1.0, -2.0]])
def test_per_device_field_must_be_positive_and_finite(field, bad):
    with raises(rf"^{field} must be finite and > 0"):
        Cluster(2, **{field: bad})


@pytest.mark.parametrize("field", ["speed", "memory", "bandwidth"])
@pytest.mark.parametrize("bad", [[1.0, 1.0, 1.0], [1.0], [[1.0, 1.0]], []])
def test_per_device_field_wrong_length(field, bad):
    with raises(rf"^{field} needs one value or 2"):
        Cluster(2, **{field: bad})


@pytest.mark.parametrize("field", ["delta1", "delta2"])
@pytest.mark.parametrize("bad", [-1.0, -1e-9, float("nan"), float("inf")])
def test_delta_must_be_finite_and_non_negative(field, bad):
    with raises(rf"^{field} must be a finite number >= 0"):
        Cluster(2, **{field: bad})


@pytest.mark.parametrize(("field", "bad"), [("speed", "fast"), ("delta1", "x"), ("delta2", None)])
def test_non_numeric_field_is_named(field, bad):
    with raises(rf"^{field}\b"):
        Cluster(2, **{field: bad})


@pytest.mark.parametrize(
    ("speed", "expected"),
    [(1.0, 0), ([1.0, 3.0, 2.0], 1), ([2.0, 5.0, 5.0], 1), ([0.5, 0.25, 4.0], 2)],
)
def test_fastest_device(speed, expected):
    assert Cluster(3, speed=speed).fastest_device() == expected
