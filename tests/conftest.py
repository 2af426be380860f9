"""Shared test setup: float64 everywhere so the simulator can be compared exactly; the agent's
tests opt into float32 (how the agent runs) with `pytestmark = pytest.mark.usefixtures("float32")`.
"""

import jax
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def float32():
    with jax.enable_x64(False):
        yield
