"""What amnet knows about itself as an installed package (shared by its command lines)."""

from __future__ import annotations


def package_version() -> str:
    """amnet's version, from the installed package's metadata (``amnet.__version__`` when
    amnet runs from a tree that was never installed)."""
    from importlib import metadata

    try:
        return metadata.version("amnet")
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__
