"""The calling rank-thread's PE: shmem_rt's per-thread context, as trio's run context is
(a typed ``threading.local`` and its one instance, in a module that imports nothing of
shmem_rt).

A PE is an amnet rank, a process or a rank-thread of one, so "this PE" is per thread. Every
module reads it here, as ``CONTEXT.pe``: the hot paths (put, get, p, g, the atomics, quiet,
barrier_all) read the attribute itself, which costs no call; the rest ask
:func:`shmem_rt._init.current`, which starts the PE on its first call. Only
:mod:`shmem_rt._init` sets it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._state import PE


class PEContext(threading.local):
    """Per thread: ``pe``, the PE this rank-thread is (None before it started)."""

    pe: PE | None = None


CONTEXT: Final = PEContext()
