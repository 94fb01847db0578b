"""The automatic nonblocking scheduler on an endpoint: blocking-looking memput/memget that
overlap their communication, after "Automatic Nonblocking Communication for Partitioned
Global Address Space Programs" (Chen, Iancu, Yelick; ICS 2007), §3.

- ``memput`` starts a nonblocking put (the core copies the source, so the caller may reuse it
  at once) and remembers it (:mod:`amnet.nbcomm._puts`); it completes at the next
  synchronization event, or earlier when an access overlaps it or its list is full.
- ``memget`` first completes this rank's outstanding puts that overlap it, then is served
  from a prefetch issued at phase entry (:mod:`amnet.nbcomm._gets`) or gets the data itself.
- ``sync(event)`` and ``barrier(name)`` are synchronization events: every put completes, the
  phase ends (unused prefetches retired, between notify and wait for the barrier) and the
  next one starts, keyed by ``event`` or by the caller's source line.
- ``with s.aggregate():`` queues the region's memputs and memgets per rank and issues one VIS
  call per rank at exit (the strided form when the pieces are evenly spaced and of one
  size): §3.3. An access conflicting with the queue ends the region early (what is queued is
  issued, the rest runs as outside a region).

Every access of this rank to other ranks' segments must go through the scheduler, or be
separated from its accesses by a synchronization event: it cannot see what it is not told.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import RankError, SegmentBoundsError
from ._gets import Gets, GetStats
from ._puts import Puts, PutStats


@dataclass(frozen=True)
class NBStats:
    """What the scheduler did (``Scheduler.stats``; counters since it was made)."""

    puts_deferred: int  #: memputs made nonblocking
    fast_checks: int  #: conflict checks answered by a bounding box alone
    scans: int  #: conflict checks that scanned a list
    conflicts: int  #: puts completed early because an access overlapped them
    cap_syncs: int  #: put lists completed whole on reaching max_puts_per_dest
    puts_retired: int  #: puts found complete by the test of the oldest
    check_seconds: float  #: time spent in put conflict checks
    phases: int  #: phases entered (synchronization events)
    gets: int  #: memgets from other ranks (recorded for the phase's next run)
    prefetches_issued: int
    prefetch_hits: int  #: memgets served from a prefetch
    prefetch_misses: int  #: memgets that matched none (got directly, or aggregated)
    prefetches_wasted: int  #: prefetches never used in their phase
    prefetches_invalidated: int  #: prefetches a put of this rank overlapped
    unprofitable: int  #: gets not prefetched: the copy costs more than the overlap
    chunks: int  #: prefetch chunks released
    bytes_copied: int  #: bytes copied out of prefetch buffers
    aggregated_calls: int  #: VIS calls issued by aggregation regions
    aggregated_ops: int  #: memputs and memgets they carried
    region_fallbacks: int  #: aggregation regions ended early by a conflict


@dataclass
class _AggStats:
    calls: int = 0
    ops: int = 0
    fallbacks: int = 0


def _copy_rate() -> float:
    """Bytes per second this machine copies a 1 MiB buffer at (the profitability test's
    price of a copy out of a prefetch buffer)."""
    a, b = np.ones(1 << 20, np.uint8), np.empty(1 << 20, np.uint8)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        b[:] = a
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / max(best, 1e-9)


class Scheduler:
    """Automatic nonblocking memput/memget on ``ep`` (see the module).

    Args:
        ep: the endpoint (one scheduler per rank-thread).
        max_puts_per_dest: outstanding puts to one rank before they all complete.
        prefetch: prefetch the recorded gets of a phase when it runs again.
        prefetch_chunk: prefetches in flight per source rank.
        aggregate: whether ``aggregate()`` regions aggregate (False: they change nothing).

    Raises:
        ValueError: a cap or chunk that is not an int of at least 1.
    """

    def __init__(self, ep: Any, max_puts_per_dest: int = 256, prefetch: bool = True,
                 prefetch_chunk: int = 64, aggregate: bool = True) -> None:
        self.ep = ep
        self.me = ep.rank
        self._size = ep.size
        self._seg = ep.segment.nbytes
        self._puts = Puts(max_puts_per_dest, PutStats())
        self._gets = Gets(ep.rank, ep.get_nb, chunk=prefetch_chunk, copy_rate=_copy_rate(),
                          stats=GetStats())
        self._prefetch = bool(prefetch)
        self._aggregate = bool(aggregate)
        self._agg: dict[int, tuple[list, list]] | None = None  # rank -> (puts, gets) queued
        self._aggst = _AggStats()
        self._gets.enter(("start",))

    def __repr__(self) -> str:
        return f"<amnet.nbcomm.Scheduler of rank {self.me}: {len(self._puts)} puts outstanding>"

    # -- checks -----------------------------------------------------------------------------
    def _where(self, rank: Any, offset: Any, nbytes: int, what: str) -> tuple[int, int]:
        if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or not (
                0 <= int(rank) < self._size):
            raise RankError(f"{what}: rank {rank!r} is not an int in range({self._size})")
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or offset < 0:
            raise SegmentBoundsError(f"{what}: offset {offset!r} is not an int >= 0")
        offset = int(offset)
        if offset + nbytes > self._seg:
            raise SegmentBoundsError(f"{what}: bytes {offset}..{offset + nbytes} of rank "
                                     f"{rank} leave its segment of {self._seg} bytes")
        return int(rank), offset

    # -- puts and gets ----------------------------------------------------------------------
    def memput(self, dest: int, offset: int, data: Any) -> None:
        """Put the bytes of ``data`` at ``offset`` of ``dest``'s segment; returns at once,
        and ``data`` may be reused at once. Later memgets by this rank see it.

        Raises:
            RankError, SegmentBoundsError: a bad target (nothing is sent).
            TypeError: ``data`` is not bytes-like.
        """
        try:
            mv = memoryview(data).cast("B")
        except TypeError:
            raise TypeError(f"memput: data must be bytes-like, got {type(data).__name__}"
                            ) from None
        n = mv.nbytes
        if not (type(dest) is int and type(offset) is int and 0 <= dest < self._size
                and 0 <= offset and offset + n <= self._seg):  # the common case costs less
            dest, offset = self._where(dest, offset, n, "memput")
        if n == 0:
            return
        lo, hi = offset, offset + n
        if self._gets.all:  # prefetches of this phase that the put may make stale
            self._gets.conflict(dest, lo, hi)
        agg = self._agg
        if agg is not None:
            q = agg.get(dest)
            if q is not None and (_overlaps(q[0], lo, hi) or _overlaps(q[1], lo, hi)):
                self._end_region()  # a conflict ends the region early
            else:
                self._puts.check(dest, lo, hi)
                agg.setdefault(dest, ([], []))[0].append((lo, n, bytes(mv)))
                return
        self._puts.check(dest, lo, hi)
        self._puts.add(dest, lo, hi, self.ep.put_nb(dest, offset, mv))

    def memget(self, src: int, offset: int, nbytes: int, out: Any) -> Any:
        """Get ``nbytes`` at ``offset`` of ``src``'s segment into ``out`` (a writable
        bytes-like of at least ``nbytes``); returns ``out``, filled -- except inside an
        aggregation region, where it is filled at the region's end.

        Raises:
            RankError, SegmentBoundsError: a bad source; TypeError, ValueError: a bad
            ``out`` (nothing is sent).
        """
        nbytes = _count(nbytes, "memget")
        src, offset = self._where(src, offset, nbytes, "memget")
        try:
            view = memoryview(out).cast("B")
        except TypeError:
            raise TypeError(f"memget: out must be a writable bytes-like, got "
                            f"{type(out).__name__}") from None
        if view.readonly or view.nbytes < nbytes:
            raise ValueError(f"memget: out must be writable and hold {nbytes} bytes "
                             f"({view.nbytes}{', read-only' if view.readonly else ''})")
        if nbytes == 0:
            return out
        buf = np.frombuffer(view, np.uint8)
        lo, hi = offset, offset + nbytes
        agg = self._agg
        if agg is not None:
            q = agg.get(src)
            if q is not None and _overlaps(q[0], lo, hi):
                self._end_region()
        self._puts.check(src, lo, hi)  # my earlier puts there complete first
        if self._agg is not None:  # queued instead of prefetched (§3.3)
            self._agg.setdefault(src, ([], []))[1].append((lo, nbytes, buf[:nbytes]))
            return out
        if self._prefetch and src != self.me:
            if self._gets.memget(src, offset, nbytes, buf):
                return out
        self.ep.get(src, offset, nbytes, buf[:nbytes])
        return out

    # -- synchronization events -------------------------------------------------------------
    def sync(self, event: Hashable = None) -> None:
        """A synchronization event (a fence, a strict access, a lock, a collective): every
        outstanding put completes, the phase ends and the next one starts, keyed by
        ``event`` (default: the caller's source line)."""
        key = event if event is not None else _call_site()
        self._end_region()
        self._puts.complete_all()
        self._gets.leave()
        self._gets.enter(key)

    def fence(self) -> None:
        """:meth:`sync`, then ``ep.fence()``."""
        key = _call_site()
        self.sync(key)
        self.ep.fence()

    def barrier(self, name: Any = None, event: Hashable = None) -> None:
        """A split-phase barrier as a synchronization event: puts complete, notify, the
        phase's unused prefetches are retired while the others arrive, wait."""
        key = event if event is not None else _call_site()
        self.notify(name)
        self.wait(key)

    def notify(self, name: Any = None) -> None:
        """The first half of a split-phase barrier (``ep.barrier_notify``): every put
        completes, the barrier is announced, and the phase's unused prefetches are retired
        while the other ranks arrive. The phase ends here; :meth:`wait` starts the next."""
        self._end_region()
        self._puts.complete_all()
        self.ep.barrier_notify(name)
        self._gets.leave()

    def wait(self, event: Hashable = None) -> None:
        """The second half (``ep.barrier_wait``): the next phase starts, keyed by ``event``
        (default: the caller's source line)."""
        key = event if event is not None else _call_site()
        self.ep.barrier_wait()
        self._gets.enter(key)

    def touch(self, rank: int, offset: int, nbytes: int, write: bool) -> None:
        """This rank is about to access ``nbytes`` at ``offset`` of ``rank``'s segment
        other than through the scheduler (an element access, an atomic, a nonblocking copy
        managed by hand): the outstanding puts it overlaps complete first, and a write
        invalidates the prefetches it overlaps. Inside an aggregation region, an overlap with
        the queue ends the region first.

        Raises:
            RankError, SegmentBoundsError: a bad range; ValueError: a bad ``nbytes``.
        """
        nbytes = _count(nbytes, "touch")
        rank, offset = self._where(rank, offset, nbytes, "touch")
        lo, hi = offset, offset + nbytes
        if hi <= lo:
            return
        agg = self._agg
        if agg is not None:
            q = agg.get(rank)
            if q is not None and (_overlaps(q[0], lo, hi) or (write and _overlaps(q[1], lo, hi))):
                self._end_region()
        if write:
            self._gets.conflict(rank, lo, hi)
        self._puts.check(rank, lo, hi)

    # -- aggregation ------------------------------------------------------------------------
    @contextmanager
    def aggregate(self) -> Iterator[None]:
        """An aggregation region: the memputs and memgets in it are queued per rank and go
        as one VIS call per rank at its end. A memget's ``out`` is filled only then, and
        must not be read before; sources may be reused at once (they are copied)."""
        if not self._aggregate or self._agg is not None:
            yield
            return
        self._agg = {}
        try:
            yield
        finally:
            self._end_region(early=False)

    def _end_region(self, early: bool = True) -> None:
        agg, self._agg = self._agg, None
        if agg is None:
            return
        if early:
            self._aggst.fallbacks += 1
        vis = self.ep.vis
        for rank, (puts, gets) in agg.items():
            if puts:
                h = _put_all(vis, rank, puts)
                for lo, n, _ in puts:
                    self._puts.add(rank, lo, lo + n, h)
                self._aggst.calls += 1
                self._aggst.ops += len(puts)
            if gets:
                _get_all(vis, rank, gets)
                self._aggst.calls += 1
                self._aggst.ops += len(gets)

    # -- statistics -------------------------------------------------------------------------
    @property
    def stats(self) -> NBStats:
        p, g, a = self._puts.stats, self._gets.stats, self._aggst
        return NBStats(p.deferred, p.fast_checks, p.scans, p.conflicts, p.cap_syncs, p.retired,
                       p.check_seconds, g.phases, g.recorded, g.issued, g.hits, g.misses,
                       g.wasted, g.invalidated, g.unprofitable, g.chunks, g.bytes_copied,
                       a.calls, a.ops, a.fallbacks)


def _count(nbytes: Any, what: str) -> int:
    """``nbytes`` checked: an int >= 0 (ValueError otherwise)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | np.integer) or nbytes < 0:
        raise ValueError(f"{what}: nbytes must be an int >= 0, got {nbytes!r}")
    return int(nbytes)


def _call_site() -> Hashable:
    """The source line that called the scheduler's synchronization event."""
    f = sys._getframe(2)
    return (f.f_code, f.f_lineno)


def _overlaps(items: list, lo: int, hi: int) -> bool:
    return any(o < hi and lo < o + n for o, n, _ in items)


def _stride(items: list) -> int | None:
    """The common distance between consecutive pieces of one size, if there is one."""
    if len(items) < 2 or any(n != items[0][1] for _, n, _ in items):
        return None
    s = items[1][0] - items[0][0]
    if s < items[0][1]:
        return None
    for a, b in itertools.pairwise(items):
        if b[0] - a[0] != s:
            return None
    return s


def _put_all(vis: Any, rank: int, puts: list) -> Any:
    """One nonblocking VIS put of a region's queued puts to ``rank``."""
    s = _stride(puts)
    if s is not None:
        n = puts[0][1]
        src = b"".join(d for _, _, d in puts)
        return vis.put_strided_nb(rank, puts[0][0], [s], src, 0, [n], n, [len(puts)])
    return vis.put_vector_nb(rank, [(o, n) for o, n, _ in puts], [d for _, _, d in puts])


def _get_all(vis: Any, rank: int, gets: list) -> None:
    """One VIS get of a region's queued gets from ``rank``, into their buffers."""
    s = _stride(gets)
    if s is not None:
        n = gets[0][1]
        packed = np.empty(n * len(gets), np.uint8)
        vis.get_strided(rank, packed, 0, [n], gets[0][0], [s], n, [len(gets)])
        for i, (_, _, out) in enumerate(gets):
            out[:] = packed[i * n:(i + 1) * n]
        return
    vis.get_vector(rank, [out for _, _, out in gets], [(o, n) for o, n, _ in gets])
