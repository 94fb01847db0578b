"""Start and end, thread levels and the library's identity (OpenSHMEM 1.5 §9.1), and
:func:`current`, the calling rank-thread's PE, which starts it on its first call.

The lowest of shmem_rt's layers (docs/design.md §11, "shmem_rt"): it imports only what
they all share (the PE's state, the per-thread context, ``rc``).
"""

from __future__ import annotations

import enum
from typing import NoReturn

import amnet

from ._context import CONTEXT
from ._rc import rc
from ._state import PE, Teams

MAJOR_VERSION = 1
MINOR_VERSION = 5
VENDOR_STRING = "amnet shmem_rt"


class THREAD(enum.IntEnum):
    """Thread levels (shmem4py's values, which are Open MPI's)."""

    SINGLE = 0
    FUNNELED = 1
    SERIALIZED = 2
    MULTIPLE = 3


THREAD_SINGLE = THREAD.SINGLE
THREAD_FUNNELED = THREAD.FUNNELED
THREAD_SERIALIZED = THREAD.SERIALIZED
THREAD_MULTIPLE = THREAD.MULTIPLE

#: What a PE provides: it is one amnet rank, and every call must come from that rank's own
#: thread (a rank-thread when the job maps several PEs onto the threads of one process).
PROVIDED = THREAD.FUNNELED


def info_get_version() -> tuple[int, int]:
    """The OpenSHMEM version implemented: ``(1, 5)``."""
    return (MAJOR_VERSION, MINOR_VERSION)


def info_get_name() -> str:
    """The vendor string: ``"amnet shmem_rt"``."""
    return VENDOR_STRING


def current() -> PE:
    """The calling rank-thread's PE, initialised on its first call as shmem4py initialises
    on import (``shmem.init()`` made explicitly is the same, and collective; ``shmem_rt.rc``
    says how, or that the program does it).

    Raises:
        amnet.InitError: after ``shmem.finalize()`` on this PE, or before ``shmem.init()``
            with ``shmem_rt.rc.initialize`` False.
    """
    pe = CONTEXT.pe
    if pe is None:
        start()
        pe = CONTEXT.pe
    if pe.finalized:
        raise amnet.InitError(f"shmem_rt call after {pe.ended_by} on this PE")
    return pe


def init() -> None:
    """Join the job as a PE (collective): ``amnet.init()`` unless this rank already made
    its endpoint, then a barrier. Any shmem_rt call does it first if it was not done, as
    shmem4py does on import; calling it again is harmless.

    Raises:
        amnet.InitError: after :func:`finalize` on this PE.
    """
    pe = CONTEXT.pe
    if pe is not None:
        if pe.finalized:
            raise amnet.InitError("shmem.init() after shmem.finalize() on this PE: a PE "
                                  "starts once")
        return
    ep = amnet.endpoint() or amnet.init()
    pe = ep.extension("shmem")
    pe.teams = Teams(pe)  # the predefined teams, before the first barrier
    pe.initialized = True
    CONTEXT.pe = pe
    pe.port.add_sync_hook(_at_rank_end)
    ep.coll.barrier()


def start() -> None:
    """A PE's start on its first shmem_rt call, as ``shmem_rt.rc`` says (shmem4py's start
    at import): :func:`init`, or :func:`init_thread` with ``rc.thread_level`` when
    ``rc.threads``.

    Raises:
        amnet.InitError: ``rc.initialize`` is False (the program must call init first).
        ValueError: ``rc.thread_level`` is no level.
    """
    if not rc.initialize:
        raise amnet.InitError("shmem_rt call before shmem.init(): shmem_rt.rc.initialize is "
                              "False (or SHMEM4PY_RC_INITIALIZE says so), so the program "
                              "starts each PE with shmem.init() or shmem.init_thread()")
    if rc.threads:
        lvl = rc.thread_level
        level = THREAD.__members__.get(lvl.upper()) if isinstance(lvl, str) else None
        if level is None:
            raise ValueError("shmem_rt.rc.thread_level must be one of "
                             f"{', '.join(t.name.lower() for t in THREAD)}, got {lvl!r}")
        init_thread(level)
    else:
        init()


def _at_rank_end(event: str) -> None:
    """amnet's hook at the rank's ``amnet.finalize()`` (its end): finalize the PE there
    when ``rc`` says so and the program did not; else the PE just ends with its rank (a
    later call raises instead of waiting for PEs that are gone)."""
    if event != "finalize":
        return
    pe = CONTEXT.pe
    if pe is None or pe.finalized:
        return
    if rc.finalizes():
        finalize()
    else:
        pe.finalized = True
        pe.ended_by = "amnet.finalize()"


def init_thread(requested: int = THREAD_MULTIPLE) -> THREAD:
    """:func:`init`, returning the thread level provided: ``requested`` or
    :data:`PROVIDED` (FUNNELED), whichever is lower.

    Raises:
        ValueError: ``requested`` is no thread level.
    """
    req = _level(requested, "shmem.init_thread()")
    init()
    pe = CONTEXT.pe
    pe.thread_level = min(req, PROVIDED)
    return THREAD(pe.thread_level)


def query_thread() -> THREAD:
    """The thread level this PE was given (:func:`init` gives FUNNELED)."""
    pe = current()
    return THREAD(PROVIDED if pe.thread_level is None else pe.thread_level)


def _level(x: object, what: str) -> int:
    try:
        return int(THREAD(x))
    except (ValueError, TypeError):
        raise ValueError(f"{what}: {x!r} is no thread level; levels are "
                         f"{', '.join(f'THREAD_{t.name}' for t in THREAD)}") from None


def finalize() -> None:
    """Leave (collective): complete this PE's operations, then a barrier. Later calls on
    this PE raise ``amnet.InitError``; amnet's own endpoint stays for the rest of the
    program (it ends at exit)."""
    pe = CONTEXT.pe
    if pe is None or pe.finalized:
        return
    pe.complete("shmem.quiet()")  # what shmem.quiet() does
    pe.ep.coll.barrier()
    pe.finalized = True


def global_exit(status: int = 0) -> NoReturn:
    """End the whole job with exit status ``status`` (every PE, at once, through
    ``amnet.abort``). amnet ends a job at once only as a failure, so ``global_exit(0)`` ends
    just this PE (``SystemExit(0)``), as a normal return from its program would.

    Raises:
        TypeError: ``status`` is no int.
    """
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"shmem.global_exit() status must be an int, got "
                        f"{type(status).__name__}")
    if status:
        amnet.abort((status & 255) or 1, f"shmem.global_exit({status})")
    raise SystemExit(0)


def pcontrol(level: int = 1) -> None:
    """Profiling control (OpenSHMEM's ``shmem_pcontrol``): accepted, nothing to change."""
    int(level)
