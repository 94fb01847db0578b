"""The conduit interface: how AM frames travel between processes (docs/design.md §7).

A conduit moves opaque *messages* between the processes of a job. A message is a header
(``bytes``, at most :data:`MAX_HEADER` long) and an optional payload (any bytes-like object,
of any length, carried as a separate frame, zero-copy where the transport allows). The AM core
(:mod:`amnet.core._engine`) builds and parses headers; a conduit never looks inside them.

Every conduit promises:

- **FIFO per pair**: messages from process A to process B arrive in the order A sent them.
- **Reliable while the job lives**: nothing is dropped except malformed input, which is
  counted in :meth:`Conduit.statistics` and never delivered.
- **Only the job gets in**: a conduit that listens admits a connection only once it proved
  that it holds the job's secret (``secret``), before reading any of its messages; a refused
  connection is counted (``refused``) and nothing it sent is delivered (docs/design.md,
  "Conduits"; :mod:`amnet._security`).
- **Sends never block on the receiver**: ``send`` queues and returns (the core relies on this
  so that a handler can always reply; see the AM guide's flow-control note).
- **Thread safety**: ``send`` may be called from several threads at once. ``recv`` and
  ``wait_readable`` are called by one thread at a time (the core's drain lock ensures it).
- **Waiting without burning a core**: ``wait_readable(timeout)`` sleeps until a message may
  be ready, so oversubscribed jobs do not livelock; a conduit with a descriptor (``pollable``,
  zmq and tcp) blocks on it, one without (``mpi``: MPI offers none) spins a while and then
  naps between looks.

Conduits are picked by name from :data:`CONDUITS` (``AMNET_CONDUIT``, default ``zmq``). A new
conduit subclasses :class:`Conduit` and registers with :func:`register_conduit`; the
conformance suite ``tests/test_conduit.py`` then runs against it unchanged. Conduits of
amnet itself are imported at the end of this module; another package makes its conduit
known to every job (``amnet-run`` too) with an entry point in the ``amnet.conduits`` group.
"""

from __future__ import annotations

# the interface itself lives below the conduits, which import it (no cycle through here)
from ._base import CONDUITS as CONDUITS
from ._base import MAX_HEADER as MAX_HEADER
from ._base import Conduit as Conduit
from ._base import ConduitStatistics as ConduitStatistics
from ._base import register_conduit as register_conduit


def get_conduit(name: str) -> type[Conduit]:
    """The conduit class registered as ``name``.

    Raises:
        ConfigError: no conduit has that name (the message lists those that exist).
    """
    if name not in CONDUITS:
        load_plugins()
    try:
        return CONDUITS[name]
    except KeyError:
        from .._errors import ConfigError

        raise ConfigError(f"unknown conduit {name!r}; registered conduits: "
                          f"{', '.join(sorted(CONDUITS))}") from None


ENTRY_POINT_GROUP = "amnet.conduits"


def load_plugins() -> None:
    """Import conduits other packages declare in the ``amnet.conduits`` entry-point group
    (``name = "package.module"``; importing the module registers the conduit). Only called
    when a name is not already registered, so ``zmq`` never pays for the scan."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in CONDUITS:
            try:
                ep.load()
            except Exception:  # a broken plugin must not stop jobs that do not use it
                continue


# The conduits register themselves on import; all of them are listed here, in one place.
from . import _mpi as _mpi  # noqa: E402
from . import _tcp as _tcp  # noqa: E402
from . import _zmq as _zmq  # noqa: E402

__all__ = ["CONDUITS", "MAX_HEADER", "Conduit", "ConduitStatistics", "get_conduit",
           "register_conduit"]
