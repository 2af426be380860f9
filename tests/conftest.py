"""Shared test setup: float64 everywhere so the simulator can be compared exactly."""

import jax

jax.config.update("jax_enable_x64", True)
