"""Releasing compiled programs gives their code mappings back (Linux: /proc/self/maps)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from placeto_jax.reproduce.programs import release_compiled_programs

MAPS = Path("/proc/self/maps")


@jax.jit
def _sorted_tanh(x):
    return jnp.sort(jnp.tanh(x) @ x.T, axis=0)


def _mappings() -> int:
    return len(MAPS.read_text().splitlines())


@pytest.mark.skipif(not MAPS.exists(), reason="needs /proc/self/maps")
def test_released_programs_give_back_their_mappings():
    release_compiled_programs()
    before = _mappings()
    for n in range(8, 28):  # 20 shapes: 20 programs, held only by the jitted function's cache
        _sorted_tanh(jnp.ones((n, 4))).block_until_ready()
    held = _mappings()
    assert held >= before + 20  # at least one mapping per program (three per object on CPU)
    release_compiled_programs()
    assert _mappings() <= held - (held - before) // 2  # most of them (the rest: heap growth)
    assert float(_sorted_tanh(jnp.ones((2, 2)))[0, 0]) == pytest.approx(2 * float(jnp.tanh(1.0)))
