"""Shared test setup: float64 everywhere so the simulator can be compared exactly; the agent's
tests opt into float32 (how the agent runs) with `pytestmark = pytest.mark.usefixtures("float32")`.

Compiled programs go to a persistent compilation cache shared by the session's workers, so that
tests which build the same program again (a resumed run, a second CLI call) load it instead of
compiling it again. It lives in pytest's base temporary directory, which pytest removes after a
few sessions, unless `JAX_COMPILATION_CACHE_DIR` names a cache of the user's.
"""

import os

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache as jax_cache

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="session", autouse=True)
def shared_compilation_cache(request, tmp_path_factory):
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    base = tmp_path_factory.getbasetemp()
    session_dir = base.parent if hasattr(request.config, "workerinput") else base  # xdist worker
    jax.config.update("jax_compilation_cache_dir", str(session_dir / "jax-compilation-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax_cache.reset_cache()  # in case a compile during collection checked for a cache


@pytest.fixture
def float32():
    with jax.enable_x64(False):
        yield
