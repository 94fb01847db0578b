"""The core AM API of the Endpoint: requests, handler registration, progress, segment."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from ._handlers import HandlerTable, verify_tables


@dataclass(frozen=True, slots=True)
class AMStatistics:
    """Counters of one process's AM engine, a frozen snapshot (``ep.statistics()``)."""

    handlers_run: int  # user and system handlers run by this process
    refused: int  # messages dropped because a header field was malformed or out of range
    delayed: int  # messages waiting for AMNET_NET_LATENCY_US to pass
    inflight: int  # this rank's operations not yet complete
    conduit: Any  # the conduit's ConduitStatistics
    pshm: Any  # the shared-memory network's PshmStatistics, or None (PSHM off, one process)
    #: seconds this process's rank-threads spent waiting while another of them drained
    #: (one thread receives at a time); 0.0 in a process of one rank-thread
    drain_wait_s: float = 0.0
    #: blocking waits of this process that slept a whole slice (50 ms) with nothing waking
    #: them: normal while a rank waits long for a peer, never for a wait already satisfied
    slices_expired: int = 0
    #: of those, the waits that were satisfied all along (their condition held, or work
    #: deferred by a handler was waiting to be sent): missed wake-ups, 0 in a healthy job
    wakeups_missed: int = 0


class AMMixin:
    __slots__ = ()

    # request_short/request_medium/request_long, poll and wait_until are C methods of
    # amnet.core._hot.EndpointBase (the hot path); they hand anything they do not handle to
    # the engine's Python methods.

    # -- handlers -------------------------------------------------------------------------
    def register_handlers(self, handlers: Iterable[Callable]) -> None:
        """Add handlers to this rank's table (collective: every rank, same list).

        Raises:
            HandlerMismatch: ranks registered different lists (raised on every rank).
            TypeError / ValueError: an entry is not callable, or a name is registered twice.
        """
        rs = self._live()
        self._eng.forbid_in_handler("ep.register_handlers()")
        fns = list(handlers)
        names = HandlerTable.names_of(fns)
        for n in names:
            if n in rs.table.by_name:
                raise ValueError(f"handler {n!r} is already registered")
        before = len(rs.table.fns)
        rs.table.add(fns, names)  # before the collective: peers may use them as soon as it ends
        try:
            tables = self._ctx.collective("allgather", value=rs.table.names)
            verify_tables(tables, "ep.register_handlers()")
        except BaseException:
            rs.table.truncate(before)  # every rank raises, so every table rolls back alike
            raise

    @property
    def handlers(self) -> tuple[str, ...]:
        """The names in this rank's handler table, by index."""
        return tuple(self._rs.table.names)

    @property
    def on_handler_error(self) -> Callable[[BaseException, str, int], Any] | None:
        """Called as ``fn(exception, handler_name, source_rank)`` when a handler raises,
        instead of aborting the job. None (the default) aborts."""
        return self._rs.on_handler_error

    @on_handler_error.setter
    def on_handler_error(self, fn: Callable[[BaseException, str, int], Any] | None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError("on_handler_error must be a callable or None")
        self._rs.on_handler_error = fn

    # -- progress -------------------------------------------------------------------------
    def defer(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run ``fn(*args, **kwargs)`` after the current handler returns, outside handler
        context, where it may send: how a handler forwards work to a third rank (a handler
        itself sends only its one reply). It runs at this process's next poll or wait,
        before any of its threads blocks, on whichever thread makes that progress (so reach
        this rank through this endpoint, not through per-thread state). It runs inside that
        call, so it should start operations rather than wait long for them. Outside a
        handler it runs at the next amnet call. An exception it raises ends the job like a
        handler's, naming ``fn`` and this rank (``on_handler_error`` sees it first).

        Raises:
            TypeError: ``fn`` is not callable.
            InitError: this rank already finalized.
        """
        if not callable(fn):
            raise TypeError(f"ep.defer() takes a callable, got {type(fn).__name__}")
        rs = self._live()
        self._eng.defer(functools.partial(fn, *args, **kwargs), rs.rank)

    @property
    def wait_mode(self) -> str:
        """How this rank waits, as ``auto`` resolved it: ``"spin"``, ``"block"``, or
        ``"spin-then-block"`` (spin up to 100 µs after the last message, then block; on the
        mpi conduit, which has no descriptor to block on, up to 10 ms, then nap)."""
        spin_s = self._eng.spin_s
        return "block" if spin_s == 0.0 else "spin" if spin_s == float("inf") else \
            "spin-then-block"

    # -- segment --------------------------------------------------------------------------
    @property
    def segment(self) -> np.ndarray:
        """My segment: a writable numpy uint8 array of ``config.segment_size`` bytes."""
        return self._rs.segment

    def segment_view(self, rank: int) -> np.ndarray | None:
        """Rank ``rank``'s segment as a writable numpy uint8 array when I can address it
        directly, else None: the ranks of my process, and with PSHM on (the default) every
        rank of my node (``ep.is_local(r)``). Writes through it are plain stores: order
        them against other ranks with a synchronising event: a barrier, an AM, or an atomic
        flag (``ep.fence()`` orders this thread's stores but tells nobody).

        Raises:
            RankError: ``rank`` is not a rank of this job.
        """
        rank = self._eng.check_dest(rank)
        if rank == self.rank:
            return self._rs.segment
        return self._eng.local_segment(rank)

    def statistics(self) -> AMStatistics:
        """A snapshot of this process's AM counters and its conduit's."""
        eng = self._eng
        return AMStatistics(eng.handled + eng.hot.handled, eng.refused, len(eng.delayed),
                            self._rs.inflight, eng.conduit.statistics(),
                            None if eng.pshm is None else eng.pshm.statistics(),
                            eng.drain_wait_s, eng.slices_expired, eng.wakeups_missed)
