"""Shared test setup. Tests run with JAX's defaults, as a user's program does: the library
chooses its own precision (the host simulator float64, the agent float32), so no test sets the
global `jax_enable_x64` flag; tests of the padded simulator core make float64 arrays inside
`precision.scope(np.float64)`.

Compiled programs go to a persistent compilation cache shared by the session's workers, so that
tests which build the same program again (a resumed run, a second CLI call) load it instead of
compiling it again. It lives in pytest's base temporary directory, which pytest removes after a
few sessions, unless `JAX_COMPILATION_CACHE_DIR` names a cache of the user's.

Compiling is most of the suite's time on this CPU, so the tests ask XLA for its lowest backend
optimisation level (about 30% less time here). `test_codegen.py` reruns the simulator's
bit-equality checks against the reference with the code users get (the default level);
`PLACETO_TEST_DEFAULT_CODEGEN=1` runs every test that way, and an `XLA_FLAGS` that sets
`xla_backend_optimization_level` itself is left as it is.
"""

import importlib.util
import os
from pathlib import Path
from types import ModuleType

OPTIMIZATION_FLAG = "--xla_backend_optimization_level"


def suite_xla_flags(environ) -> str:
    """The XLA_FLAGS the suite runs with: the given ones, at level 0 unless they set a level
    or PLACETO_TEST_DEFAULT_CODEGEN asks for the default."""
    flags = environ.get("XLA_FLAGS", "")
    if OPTIMIZATION_FLAG in flags or environ.get("PLACETO_TEST_DEFAULT_CODEGEN"):
        return flags
    return f"{flags} {OPTIMIZATION_FLAG}=0".strip()


os.environ["XLA_FLAGS"] = suite_xla_flags(os.environ)

import jax  # noqa: E402  (after XLA_FLAGS, which the CPU client reads when it is made)
import pytest  # noqa: E402
from jax.experimental.compilation_cache import compilation_cache as jax_cache  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def shared_compilation_cache(request, tmp_path_factory):
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    base = tmp_path_factory.getbasetemp()
    session_dir = base.parent if hasattr(request.config, "workerinput") else base  # xdist worker
    jax.config.update("jax_compilation_cache_dir", str(session_dir / "jax-compilation-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax_cache.reset_cache()  # in case a compile during collection checked for a cache


def _native_param():
    from placeto_jax.sim import native

    built = pytest.mark.skipif(not native.available(), reason="native kernel not built")
    return pytest.param("native", marks=built)


# The native CPU kernel as a `loop` parameter, skipped where it is not built (a machine without a
# C++ compiler; test_sim_native.py fails if one exists and the kernel is missing).
NATIVE = _native_param()


EXPERIMENTS = Path(__file__).parents[1] / "experiments"


def experiment(name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> ModuleType:
    """experiments/NAME.py as a module. With `monkeypatch`, the experiments folder is on the
    path for the test, for scripts that import their neighbours by name (as when run)."""
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(EXPERIMENTS))
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
