"""The get prefetcher of the automatic nonblocking scheduler, after "Automatic Nonblocking
Communication for Partitioned Global Address Space Programs" (Chen, Iancu, Yelick; ICS 2007),
§3.2, §4.2 and Figure 2.

A *phase* is what one rank runs between two synchronization events; it is keyed by the event
that opened it (an explicit id, or the event's call site). The first time a phase runs, its
gets are only recorded, in program order. Every later time, at phase entry, the recorded
gets are issued at once as nonblocking gets into runtime buffers (prefetches), in chunks of
``chunk`` per source rank: the next chunk of a source is released once the earlier ones of
that source completed (the flow control of §4.2). A memget that matches a prefetch exactly
(source, offset, length) waits for it and copies its buffer; one that matches nothing is a
miss, which the caller issues normally. Either way it goes into the phase's new record, so a
prefetch never used is dropped from the record. A put by this rank that overlaps a prefetch
not yet used *invalidates* it (its data may predate the put), so the next matching memget is
a miss. When the phase ends, the prefetches never used are waited for (their buffers are
not reused while a get may still write them) and counted as wasted.

Profitability: a get is prefetched only if, the last time the phase ran, the time from phase
entry to the memget (the overlap a prefetch can win) exceeded the cost of copying its bytes
out of the runtime buffer.

Correctness needs every access of this rank to remote memory to go through the scheduler
(or a synchronization event between them): the prefetcher cannot see a write it is not
told of. Gets from the rank itself are never prefetched.

This module knows nothing of endpoints: ``start_get(src, offset, nbytes, out)`` starts a
nonblocking get into ``out`` and returns a handle with ``test()`` and ``wait()``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

Get = tuple[int, int, int]  # source rank, offset, nbytes


@dataclass
class GetStats:
    """Counters of :class:`Gets` (the scheduler's ``stats`` reports them)."""

    phases: int = 0  #: phases entered
    recorded: int = 0  #: gets recorded (every memget of a phase)
    issued: int = 0  #: prefetches issued
    hits: int = 0  #: memgets served from a prefetch
    misses: int = 0  #: memgets that matched no prefetch (issued normally by the caller)
    wasted: int = 0  #: prefetches never used in their phase
    invalidated: int = 0  #: prefetches dropped because a put of this rank overlapped them
    unprofitable: int = 0  #: recorded gets not prefetched (copy costs more than overlap)
    chunks: int = 0  #: chunks released
    bytes_copied: int = 0  #: bytes copied from prefetch buffers


class Prefetch:
    """One prefetched get: its buffer and handle (None until its chunk is released)."""

    __slots__ = ("buf", "get", "handle", "live", "waited")

    def __init__(self, get: Get) -> None:
        self.get = get
        self.buf: np.ndarray | None = None
        self.handle: Any = None
        self.live = True  # False once used or invalidated
        self.waited = False  # its get is known complete


class Gets:
    """The prefetcher of one rank (see the module).

    Args:
        me: this rank (never prefetched from).
        start_get: starts a nonblocking get, returns its handle.
        chunk: prefetches in flight per source (the paper's 64).
        copy_rate: bytes per second a prefetch buffer is copied at (for profitability).
    """

    def __init__(self, me: int, start_get: Callable[[int, int, int, Any], Any],
                 chunk: int = 64, copy_rate: float = 4e9,
                 stats: GetStats | None = None) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"prefetch chunk must be an int of at least 1, got {chunk!r}")
        self.me = me
        self.start_get = start_get
        self.chunk = chunk
        self.copy_rate = float(copy_rate)
        self.stats = stats if stats is not None else GetStats()
        self.records: dict[Hashable, list[tuple[Get, float]]] = {}  # key -> (get, overlap)
        self.key: Hashable = None
        self.t0 = 0.0
        self.seen: list[tuple[Get, float]] = []  # this phase's gets so far
        self.match: dict[Get, deque[Prefetch]] = {}  # live prefetches by what they fetch
        self.queued: dict[int, deque[Prefetch]] = {}  # per source: not yet released
        self.flying: dict[int, deque[Prefetch]] = {}  # per source: released, not known done
        self.all: list[Prefetch] = []  # every prefetch of this phase

    # -- phases -----------------------------------------------------------------------------
    def enter(self, key: Hashable) -> None:
        """A phase starts (right after the synchronization event ``key``): issue the first
        chunk of every source's prefetches from the phase's record."""
        self.key = key
        self.t0 = time.perf_counter()
        self.seen = []
        self.stats.phases += 1
        for get, overlap in self.records.get(key, ()):
            if get[0] == self.me:
                continue
            if overlap <= get[2] / self.copy_rate:
                self.stats.unprofitable += 1
                continue
            pf = Prefetch(get)
            self.all.append(pf)
            self.match.setdefault(get, deque()).append(pf)
            self.queued.setdefault(get[0], deque()).append(pf)
        for src in list(self.queued):
            self._release(src)

    def leave(self) -> None:
        """The phase ends (a synchronization event): wait for the prefetches never used,
        and keep this run's gets as the phase's record."""
        st = self.stats
        for pf in self.all:
            if pf.handle is not None and not pf.waited:  # done before its buffer goes
                pf.handle.wait()
            if pf.live:
                st.wasted += 1
        if self.key is not None:
            self.records[self.key] = self.seen
        self.key = None
        self.seen = []
        self.match.clear()
        self.queued.clear()
        self.flying.clear()
        self.all = []

    # -- gets and puts ----------------------------------------------------------------------
    def memget(self, src: int, offset: int, nbytes: int, out: np.ndarray) -> bool:
        """A memget of ``nbytes`` at ``offset`` of ``src`` into ``out`` (uint8, writable):
        True if a prefetch served it (``out`` is filled), False for a miss (the caller gets
        it itself). Either way it is recorded for the phase's next run."""
        get = (src, offset, nbytes)
        st = self.stats
        self.seen.append((get, time.perf_counter() - self.t0))
        st.recorded += 1
        q = self.match.get(get)
        pf = None
        while q:
            cand = q.popleft()
            if cand.live:
                pf = cand
                break
        if pf is None:
            st.misses += 1
            self.progress()
            return False
        if pf.handle is None:  # its chunk not released yet: release up to it
            while pf.handle is None:
                self._complete_chunk(src)
        pf.handle.wait()
        pf.waited = True
        out[:nbytes] = pf.buf
        pf.live = False
        st.hits += 1
        st.bytes_copied += nbytes
        self.progress()
        return True

    def conflict(self, dest: int, lo: int, hi: int) -> None:
        """This rank puts ``[lo, hi)`` of ``dest``: prefetches of it not yet used are stale
        (their data may predate the put), so they are invalidated (waited for at the end of
        the phase if in flight, never issued if not)."""
        if lo >= hi:
            return
        for pf in self.all:
            s, off, n = pf.get
            if pf.live and s == dest and off < hi and lo < off + n:
                pf.live = False  # a queued one is skipped at its release
                self.stats.invalidated += 1

    def progress(self) -> None:
        """Release the next chunk of every source whose chunk in flight completed."""
        for src in list(self.flying):
            fl = self.flying[src]
            while fl and fl[0].handle.test():
                fl.popleft()
            if not fl and self.queued.get(src):
                self._release(src)

    # -- chunks -----------------------------------------------------------------------------
    def _release(self, src: int) -> None:
        """Issue the next chunk of ``src``'s queued prefetches (skipping invalidated ones)."""
        q = self.queued.get(src)
        fl = self.flying.setdefault(src, deque())
        n = 0
        while q and n < self.chunk:
            pf = q.popleft()
            if not pf.live:
                continue
            s, off, nbytes = pf.get
            pf.buf = np.empty(nbytes, np.uint8)
            pf.handle = self.start_get(s, off, nbytes, pf.buf)
            fl.append(pf)
            n += 1
            self.stats.issued += 1
        if n:
            self.stats.chunks += 1
        if q is not None and not q:
            del self.queued[src]

    def _complete_chunk(self, src: int) -> None:
        """Wait for ``src``'s chunk in flight and release the next one."""
        fl = self.flying.get(src)
        while fl:
            fl.popleft().handle.wait()
        self._release(src)
