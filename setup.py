"""Builds the C extension of the shared-memory network; the metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("amnet.pshm._native", ["amnet/pshm/_native.c"], extra_compile_args=["-O2"]),
    ],
)
