"""Builds the C extensions (the shared-memory network's primitives, the AM hot path); the
metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("amnet.pshm._native", ["amnet/pshm/_native.c"], extra_compile_args=["-O2"],
                  depends=["amnet/pshm/_atomic_table.h"]),
        Extension("amnet.core._hot", ["amnet/core/_hot.c"], extra_compile_args=["-O2"],
                  depends=["amnet/pshm/_atomic_table.h"]),
    ],
)
