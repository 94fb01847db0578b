"""The outstanding puts of the automatic nonblocking scheduler, after "Automatic Nonblocking
Communication for Partitioned Global Address Space Programs" (Chen, Iancu, Yelick; ICS 2007),
§3.1 and its Figure 1.

A blocking memput becomes a nonblocking put (its source copied by the core, so the caller may
reuse it at once) that is remembered here until it has to complete. Puts are kept in one
FIFO list per destination rank, so a conflict check only looks at puts to the same rank; each
list keeps the *bounding box* of its puts' remote byte ranges, so an access outside it (the
common case for monotone address streams) is known conflict-free in O(1), and only an access
inside it scans the list. A put completes:

- at a synchronization event: :meth:`Puts.complete_all` completes every list;
- when an access to its destination overlaps it: :meth:`Puts.check` completes the
  overlapping ones (their ranges never overlap each other: a put that overlapped an earlier
  one completed that one first, the paper's invariant);
- when its list reaches the cap: the whole list completes first;
- on its own: every check tests the oldest put of the list it looks at, and drops it (and
  the ones after it) once done.

This module knows nothing of endpoints: a put is a *handle* with ``done`` (whether it
completed, without polling: a check must stay cheap) and ``wait()`` (complete it), as amnet's
:class:`amnet.Handle` has.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol


class Pending(Protocol):
    """What the list needs of a nonblocking operation."""

    @property
    def done(self) -> bool: ...  # completed (asked without polling: a check stays cheap)

    def wait(self) -> Any: ...


@dataclass
class PutStats:
    """Counters of :class:`Puts` (the scheduler's ``stats`` reports them)."""

    deferred: int = 0  #: puts made nonblocking
    fast_checks: int = 0  #: accesses found conflict-free by the bounding box alone
    scans: int = 0  #: accesses inside a box: the list scanned
    conflicts: int = 0  #: puts completed early because an access overlapped them
    cap_syncs: int = 0  #: lists completed whole because they reached the cap
    retired: int = 0  #: puts found complete by the test of the oldest
    #: time spent in conflict checks: each scan timed, the O(1) checks of a non-empty list
    #: estimated from one in :data:`SAMPLE` timed (a clock read costs about what such a
    #: check does, more on some virtual machines), the clock's own cost taken off each
    #: timed interval (:func:`clock_overhead`)
    check_seconds: float = 0.0


#: One O(1) conflict check in SAMPLE is timed, and counts for SAMPLE (a power of 2).
SAMPLE = 16


def clock_overhead(pairs: int = 101) -> float:
    """What two back-to-back ``time.perf_counter()`` reads measure with nothing between
    them (the median of ``pairs``): the part of a timed interval that is the clock's own
    cost, taken off every timed check. About 0.05 µs on a plain Linux VM, a microsecond or
    more where reading the clock is a system call (gVisor)."""
    pc = time.perf_counter
    gaps = []
    for _ in range(pairs):
        t0 = pc()
        gaps.append(pc() - t0)
    gaps.sort()
    return gaps[len(gaps) // 2]


class PutList:
    """The outstanding puts to one destination, oldest first: ``(lo, hi, handle)`` with
    ``[lo, hi)`` the remote byte range, and the bounding box ``[lo, hi)`` of them all (empty:
    ``lo >= hi``). The box may be larger than its puts' union (it shrinks on scans), never
    smaller."""

    __slots__ = ("hi", "items", "lo")

    def __init__(self) -> None:
        self.items: deque[tuple[int, int, Pending]] = deque()
        self.lo = 0
        self.hi = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, lo: int, hi: int, handle: Pending) -> None:
        if not self.items:
            self.lo, self.hi = lo, hi
        else:
            if lo < self.lo:
                self.lo = lo
            if hi > self.hi:
                self.hi = hi
        self.items.append((lo, hi, handle))

    def reset_box(self) -> None:
        """The box of what is left (after puts left the list)."""
        if self.items:
            self.lo = min(it[0] for it in self.items)
            self.hi = max(it[1] for it in self.items)
        else:
            self.lo = self.hi = 0


class Puts:
    """Every outstanding put of one scheduler (one rank), by destination.

    ``cap``: the most puts one list holds (at least 1); a put that would exceed it first
    completes the whole list.
    """

    def __init__(self, cap: int, stats: PutStats | None = None) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"the cap of outstanding puts per destination must be an int of "
                             f"at least 1, got {cap!r}")
        self.cap = cap
        self.stats = stats if stats is not None else PutStats()
        self.lists: dict[int, PutList] = {}
        self.active: set[int] = set()  # destinations whose list is not empty
        self._tick = 0  # checks of non-empty lists, for sampling their time
        self._clock = clock_overhead()

    def __len__(self) -> int:
        return sum(len(self.lists[d]) for d in self.active)

    def outstanding(self, dest: int) -> list[tuple[int, int]]:
        """The remote ranges of the puts to ``dest`` not yet known complete, oldest first."""
        pl = self.lists.get(dest)
        return [] if pl is None else [(lo, hi) for lo, hi, _ in pl.items]

    def add(self, dest: int, lo: int, hi: int, handle: Pending) -> None:
        """Remember a put to ``dest`` of remote bytes ``[lo, hi)`` just started. The caller
        checked the range first (:meth:`check`), so it overlaps no outstanding put."""
        pl = self.lists.get(dest)
        if pl is None:
            pl = self.lists[dest] = PutList()
        if len(pl.items) >= self.cap:
            self.stats.cap_syncs += 1
            self._complete(dest, pl)
        pl.add(lo, hi, handle)
        self.active.add(dest)
        self.stats.deferred += 1

    def check(self, dest: int, lo: int, hi: int) -> int:
        """An access (read or write) of ``dest``'s bytes ``[lo, hi)`` is about to happen:
        complete every outstanding put to ``dest`` that overlaps it (oldest first); test the
        oldest put and drop the completed ones at the head. Returns how many puts completed
        because of the overlap."""
        pl = self.lists.get(dest)
        st = self.stats
        if pl is None or not pl.items:
            st.fast_checks += 1
            return 0
        self._tick += 1
        timed = not self._tick & (SAMPLE - 1)
        t0 = time.perf_counter() if timed else 0.0
        items = pl.items
        while items and items[0][2].done:  # the oldest done: drop it (the paper's test)
            items.popleft()
            st.retired += 1
        if not items:
            self.active.discard(dest)
            pl.lo = pl.hi = 0
            st.fast_checks += 1
        elif hi <= pl.lo or lo >= pl.hi or hi <= lo:
            st.fast_checks += 1
        else:
            return self._scan(dest, pl, lo, hi, t0)
        if timed:
            st.check_seconds += SAMPLE * max(0.0, time.perf_counter() - t0 - self._clock)
        return 0

    def _scan(self, dest: int, pl: PutList, lo: int, hi: int, t0: float) -> int:
        """The access is inside ``pl``'s box: complete the puts it overlaps. The scan is
        timed each time, the waits are not (``t0``: when the check began if it is a sampled
        one, else 0)."""
        t1 = time.perf_counter()
        if t0:
            self.stats.check_seconds += SAMPLE * max(0.0, t1 - t0 - self._clock)
        st, items, n = self.stats, pl.items, 0
        st.scans += 1
        hit = [it for it in items if it[0] < hi and lo < it[1]]
        if hit:
            keep = [it for it in items if not (it[0] < hi and lo < it[1])]
            items.clear()
            items.extend(keep)
            pl.reset_box()
            if not items:
                self.active.discard(dest)
            n = len(hit)
            st.conflicts += n
        st.check_seconds += max(0.0, time.perf_counter() - t1 - self._clock)
        for it in hit:  # completing them is the access's cost, not the check's
            it[2].wait()
        return n

    def complete(self, dest: int) -> None:
        """Complete every outstanding put to ``dest``."""
        pl = self.lists.get(dest)
        if pl is not None:
            self._complete(dest, pl)

    def complete_all(self) -> None:
        """A synchronization event: complete every outstanding put, oldest first in each
        list."""
        for dest in list(self.active):
            self._complete(dest, self.lists[dest])

    def _complete(self, dest: int, pl: PutList) -> None:
        items = pl.items
        while items:
            items[0][2].wait()
            items.popleft()
        pl.lo = pl.hi = 0
        self.active.discard(dest)
