"""Compiled programs of a long experiment, released between its parts."""

from __future__ import annotations

import gc

import jax

from placeto_jax.rl.train import forget_compiled_runs


def release_compiled_programs() -> None:
    """Drop every cached compiled program (a jitted function compiles again at its next call)
    and free those nothing else holds. XLA's CPU backend maps each compiled object's code and
    data into memory (three mappings apiece), and Linux refuses new mappings past
    `vm.max_map_count` (65,530 by default), which LLVM reports as "Cannot allocate memory":
    the improve experiment's ptb part held 31,600 mappings at its peak on its own, and failed
    so after the cifar10 and benchmark parts had left theirs."""
    forget_compiled_runs()
    jax.clear_caches()
    gc.collect()
