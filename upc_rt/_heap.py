"""The allocator of upc_rt's shared heap: a coalescing free list over one byte range.

Each rank's segment holds two heaps that grow towards each other: the symmetric heap
(``upc_all_alloc``/``upc_global_alloc``, state on thread 0) grows up from ``lo`` and each
thread's local heap (``upc_alloc``) grows down from ``hi``. A :class:`Heap` manages one of
them; the caller negotiates the boundary and passes it to :meth:`Heap.alloc` as ``limit``.

Free space is a sorted list of disjoint, non-adjacent extents (adjacent ones are merged the
moment a block is freed, so freeing everything always gives back the whole range as one
extent); live blocks are a dict plus a sorted list of their starts. Pure Python, thread-safe.
"""

from __future__ import annotations

import operator
import threading
from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict

_FREED_RECORD = 4096  # how many freed offsets are remembered, to say "already freed"


def _as_int(value: object, what: str) -> int:
    """``value`` as an int; ValueError for bools, non-integers and negative numbers."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{what} must be an integer, not {value!r}")
    if n < 0:
        raise ValueError(f"{what} must not be negative, got {n}")
    return n


class Heap:
    """First-fit allocator of aligned blocks in ``[lo, hi)``.

    ``lo`` is rounded up and ``hi`` down to a multiple of ``align``; the attributes ``lo`` and
    ``hi`` hold the managed range. ``direction="up"`` takes the lowest free addresses first (the
    high-water mark stays low); ``"down"`` the highest (the low-water mark stays high).
    ``name`` appears in error messages. Raises ValueError for a bad range, align or direction.
    """

    def __init__(
        self, lo: int, hi: int, *, align: int = 64, direction: str = "up", name: str = "shared heap"
    ) -> None:
        lo, hi, align = _as_int(lo, "lo"), _as_int(hi, "hi"), _as_int(align, "align")
        if align == 0:
            raise ValueError("align must be positive")
        if direction not in ("up", "down"):
            raise ValueError(f"direction must be 'up' or 'down', not {direction!r}")
        self.align, self.direction, self.name = align, direction, name
        self.lo = -(-lo // align) * align
        self.hi = max(self.lo, hi // align * align)
        self._fs: list[int] = [self.lo] if self.hi > self.lo else []  # free extent starts
        self._fe: list[int] = [self.hi] if self.hi > self.lo else []  # ... and their ends
        self._live: dict[int, int] = {}  # start -> size
        self._ls: list[int] = []  # live starts, sorted
        self._used = 0
        self._freed: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    # -- allocation ---------------------------------------------------------------------------

    def _limit(self, limit: int | None) -> int:
        """The limit as an aligned bound inside [lo, hi] (rounded towards this heap's start)."""
        if limit is None:
            return self.hi if self.direction == "up" else self.lo
        try:
            lim = operator.index(limit)
        except TypeError:
            raise ValueError(f"limit must be an integer or None, not {limit!r}")
        if self.direction == "up":
            return min(max(lim // self.align * self.align, self.lo), self.hi)
        return min(max(-(-lim // self.align) * self.align, self.lo), self.hi)

    def _extents(self) -> list[tuple[int, int]]:
        return list(zip(self._fs, self._fe, strict=True))

    def _largest(self, lim: int) -> int:
        if self.direction == "up":
            return max((min(e, lim) - s for s, e in self._extents() if s < lim), default=0)
        return max((e - max(s, lim) for s, e in self._extents() if e > lim), default=0)

    def _take(self, size: int, lim: int) -> int | None:
        """Cut ``size`` bytes from the first fitting free extent (by address in this heap's
        direction) that respects ``lim``; the block's offset, or None when none fits."""
        fs, fe = self._fs, self._fe
        if self.direction == "up":
            for i, s in enumerate(fs):
                if s + size > lim:
                    return None
                if fe[i] - s >= size:
                    if fe[i] - s == size:
                        del fs[i], fe[i]
                    else:
                        fs[i] = s + size
                    return s
            return None
        for i in range(len(fs) - 1, -1, -1):
            s, e = fs[i], fe[i]
            if e - size < lim:
                return None
            if e - s >= size:
                if e - s == size:
                    del fs[i], fe[i]
                else:
                    fe[i] = e - size
                return e - size
        return None

    def alloc(self, nbytes: int, *, limit: int | None = None, op: str = "alloc") -> int:
        """Allocate ``nbytes`` (rounded up to ``align``; 0 gets a distinct ``align``-byte block)
        and return the block's offset, a multiple of ``align``.

        ``limit``: for "up" the block ends at or below it, for "down" it starts at or above it.
        ``op`` prefixes error messages (e.g. ``"upc_all_alloc"``). Raises ValueError for a
        negative or non-integer size or limit, MemoryError (naming the size asked, the heap and
        the largest free block usable under ``limit``) when nothing fits; no state changes then.
        """
        n = _as_int(nbytes, "size")
        size = max(1, -(-n // self.align)) * self.align
        with self._lock:
            lim = self._limit(limit)
            off = self._take(size, lim)
            if off is None:
                raise MemoryError(
                    f"{op}: cannot allocate {n} bytes in the {self.name}: the largest free "
                    f"block is {self._largest(lim)} bytes"
                )
            self._live[off] = size
            insort(self._ls, off)
            self._used += size
            self._freed.pop(off, None)
            return off

    def free(self, offset: int, *, op: str = "free") -> int:
        """Free the block that starts at ``offset`` and return its size; its space is merged with
        free neighbours at once. Raises ValueError, saying why, when ``offset`` is not the start
        of a live block: outside the heap, inside a live block, already freed, never allocated.
        """
        off = _as_int(offset, "offset")
        with self._lock:
            size = self._live.pop(off, None)
            if size is None:
                raise ValueError(f"{op}: offset {off} in the {self.name} {self._why(off)}")
            del self._ls[bisect_left(self._ls, off)]
            self._used -= size
            self._freed[off] = None
            if len(self._freed) > _FREED_RECORD:
                self._freed.popitem(last=False)
            fs, fe = self._fs, self._fe
            end = off + size
            i = bisect_left(fs, off)
            if i > 0 and fe[i - 1] == off:  # merge with the left neighbour
                i -= 1
                fe[i] = end
            else:
                fs.insert(i, off)
                fe.insert(i, end)
            if i + 1 < len(fs) and fs[i + 1] == end:  # ... and with the right one
                fe[i] = fe[i + 1]
                del fs[i + 1], fe[i + 1]
            return size

    def _why(self, off: int) -> str:
        """Why ``off`` (not a live block's start) cannot be freed; call with the lock held."""
        block = self._containing(off)
        if off in self._freed:
            if block is None:
                return "was already freed (double free)"
            # its space went to a later block: say both
            return (
                f"was already freed (double free); it is inside the live block at {block[0]} "
                f"({block[1]} bytes) now"
            )
        if not self.lo <= off < self.hi:
            return f"was never allocated here: it lies outside the heap [{self.lo}, {self.hi})"
        if block is not None:
            return (
                f"was never allocated here: it is inside the live block at {block[0]} "
                f"({block[1]} bytes), not its start"
            )
        return "was never allocated here (it lies in free space)"

    # -- queries ------------------------------------------------------------------------------

    def _containing(self, addr: int) -> tuple[int, int] | None:
        j = bisect_right(self._ls, addr) - 1
        if j >= 0:
            start = self._ls[j]
            if addr < start + self._live[start]:
                return start, self._live[start]
        return None

    def size_of(self, offset: int) -> int:
        """Size of the live block that starts at ``offset``; ValueError if there is none."""
        off = _as_int(offset, "offset")
        with self._lock:
            size = self._live.get(off)
            if size is None:
                raise ValueError(f"offset {off} in the {self.name} {self._why(off)}")
            return size

    def block_containing(self, addr: int) -> tuple[int, int] | None:
        """``(start, size)`` of the live block holding byte ``addr``, or None (O(log n))."""
        with self._lock:
            return self._containing(addr)

    @property
    def high_water(self) -> int:
        """End of the highest live block; ``lo`` when the heap is empty."""
        with self._lock:
            return self._ls[-1] + self._live[self._ls[-1]] if self._ls else self.lo

    @property
    def low_water(self) -> int:
        """Start of the lowest live block; ``hi`` when the heap is empty."""
        with self._lock:
            return self._ls[0] if self._ls else self.hi

    def largest_free(self, limit: int | None = None) -> int:
        """Largest block :meth:`alloc` could return under ``limit`` (None: no limit)."""
        with self._lock:
            return self._largest(self._limit(limit))

    def used(self) -> int:
        """Bytes in live blocks (sizes as rounded up to ``align``)."""
        return self._used

    def live_blocks(self) -> int:
        """Number of live blocks."""
        return len(self._live)

    def free_extents(self) -> list[tuple[int, int]]:
        """The free extents as ``(start, size)``, by address."""
        with self._lock:
            return [(s, e - s) for s, e in self._extents()]

    def check(self) -> None:
        """Raise AssertionError unless the state is consistent: free extents sorted, aligned,
        non-empty, coalesced and inside [lo, hi); live blocks the same and disjoint from them;
        free plus used bytes cover the whole range."""
        with self._lock:
            a, fs, fe, live = self.align, self._fs, self._fe, self._live
            if len(fs) != len(fe) or self._ls != sorted(live) or len(self._ls) != len(live):
                raise AssertionError("free-list or live-start index out of step")
            spans = [(s, e, "free") for s, e in self._extents()]
            spans += [(s, s + n, "live") for s, n in live.items()]
            spans.sort()
            prev_end, prev_kind = self.lo, "live"
            for s, e, kind in spans:
                if s % a or e % a or not s < e or s < prev_end or e > self.hi:
                    raise AssertionError(f"bad or overlapping {kind} extent [{s}, {e})")
                if kind == prev_kind == "free" and s == prev_end:
                    raise AssertionError(f"free extents not coalesced at {s}")
                prev_end, prev_kind = e, kind
            if any(fs[i] >= fs[i + 1] for i in range(len(fs) - 1)):
                raise AssertionError("free extents not sorted")
            if self._used != sum(live.values()):
                raise AssertionError("used() out of step")
            if sum(fe) - sum(fs) + self._used != self.hi - self.lo:
                raise AssertionError("free + used bytes do not cover [lo, hi)")
