"""Builds the simulator's CPU kernel (src/placeto_jax/sim/native.cc) against the XLA FFI headers
that jaxlib ships. The build is optional: without a C++ compiler the package installs without it
and `simulate` runs the JAX loops (`placeto_jax.sim.native.available()` says which)."""

import os

import jaxlib
from setuptools import Extension, setup

native = Extension(
    "placeto_jax.sim._native",
    sources=["src/placeto_jax/sim/native.cc"],
    include_dirs=[os.path.join(os.path.dirname(jaxlib.__file__), "include")],
    language="c++",
    # -ffp-contract=off: no fused multiply-adds, so float64 outputs stay bit-equal to the reference.
    extra_compile_args=["-std=c++17", "-O2", "-ffp-contract=off", "-pthread"],
    extra_link_args=["-pthread"],
    optional=True,
)

setup(ext_modules=[native])
