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
    check_seconds: float = 0.0  #: time spent in conflict checks


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
        t0 = time.perf_counter()
        items = pl.items
        while items and items[0][2].done:  # the oldest done: drop it (the paper's test)
            items.popleft()
            st.retired += 1
        n = 0
        if not items:
            self.active.discard(dest)
            pl.lo = pl.hi = 0
            st.fast_checks += 1
        elif hi <= pl.lo or lo >= pl.hi or hi <= lo:
            st.fast_checks += 1
        else:
            st.scans += 1
            hit = [it for it in items if it[0] < hi and lo < it[1]]
            if hit:
                for it in hit:
                    it[2].wait()
                n = len(hit)
                st.conflicts += n
                keep = [it for it in items if not (it[0] < hi and lo < it[1])]
                items.clear()
                items.extend(keep)
                pl.reset_box()
                if not items:
                    self.active.discard(dest)
        st.check_seconds += time.perf_counter() - t0
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
