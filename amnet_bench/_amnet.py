"""What amnet_bench takes from amnet's private modules, in one place.

amnet_bench is not part of amnet: it uses amnet's public API, plus these few of amnet's
private names. Every such import is here and nowhere else in amnet_bench, so that when amnet
moves one of them this module is the one to change. Each is imported on first use: a name
amnet moved breaks only what uses it, never ``amnet-bench --list`` or ``--help``.

- :func:`reexec_if_shadowed`: ``amnet._safepath`` (``python -m amnet_bench`` run where a
  folder named ``amnet`` shadows the installed package);
- :func:`parse_size`: ``amnet._config``, the size syntax of amnet's options (``64K``);
- :func:`package_version`: ``amnet._meta``, amnet's version as the reports give it;
- :func:`mpich_network_path`: ``amnet.conduits._mpi.MPICH_NETWORK_PATH``, the MPICH
  settings the mpi conduit uses for its network path (the ``tcp`` MPI path);
- :func:`registered_conduits`: the registry of ``amnet.conduits`` (public; ``--conduit``).
"""

from __future__ import annotations

from typing import Any


def reexec_if_shadowed() -> None:
    """Start this ``python -m`` command again with ``python -P`` when a folder named
    ``amnet`` in the current directory shadows amnet (``amnet._safepath``)."""
    from amnet._safepath import reexec_if_shadowed as reexec

    reexec()


def parse_size(text: Any) -> int:
    """A byte count in amnet's option syntax (``8``, ``64K``, ``1M``). Raises ValueError or
    TypeError for anything else."""
    from amnet._config import parse_size as parse

    return parse(text)


def package_version() -> str:
    """amnet's version (``amnet._meta.package_version``)."""
    from amnet._meta import package_version as version

    return version()


def mpich_network_path() -> dict[str, str]:
    """The MPICH settings that put the mpi conduit's traffic on MPICH's network module
    (TCP through libfabric), as ``amnet-run --conduit mpi`` sets them."""
    from amnet.conduits._mpi import MPICH_NETWORK_PATH

    return dict(MPICH_NETWORK_PATH)


def registered_conduits(*wanted: str) -> set[str]:
    """The names of amnet's registered conduits; the plug-ins' too (loaded first) when one of
    ``wanted`` is not a built-in one."""
    from amnet.conduits import CONDUITS, load_plugins

    if any(n not in CONDUITS for n in wanted):
        load_plugins()
    return set(CONDUITS)
