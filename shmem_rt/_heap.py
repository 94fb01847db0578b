"""The symmetric heap: where collective allocations sit in every PE's segment.

Every PE runs the same allocator on the same sequence of collective calls, so an
allocation gets the same offset everywhere without a message; the call's collective check
(every PE passed the same size and alignment) is what makes that sequence the same.
First fit over a free list kept in address order, neighbours merged on free.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Iterator
from typing import Any

ALIGN = 64  # every allocation starts on a cache line unless asked for more


class NotAllocated(KeyError, ValueError):
    """``free`` of memory that is no live allocation: a ``KeyError``, as shmem4py raises
    (its heap is a dict of addresses), and a ``ValueError``, as shmem_rt's other bad
    arguments are."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _chain(obj: Any) -> Iterator[Any]:
    """``obj`` and what it is a view of, down to the exporter (numpy's ``base``, a
    memoryview's ``obj``)."""
    for _ in range(64):
        yield obj
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        if obj is None:
            return


class SymHeap:
    """Blocks of ``[lo, hi)`` handed out first-fit; ``used`` maps an allocation's offset to
    ``(start of its block, its block's size, its generation)``."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.free_offs: list[int] = [lo]
        self.free_sizes: dict[int, int] = {lo: hi - lo}
        self.used: dict[int, tuple[int, int, int]] = {}
        # the objects handed out for each allocation (by id, weakly) and its generation: a
        # stale handle (freed, its memory given to a later allocation) is told apart from
        # the live one at the same offset, so that freeing it twice frees nothing else
        self._gens = 0
        self._handed: dict[int, tuple[weakref.ref, int, int]] = {}

    @property
    def capacity(self) -> int:
        return self.hi - self.lo

    def largest_free(self) -> int:
        return max(self.free_sizes.values(), default=0)

    def in_use(self) -> int:
        return sum(n for _, n, _ in self.used.values())

    def alloc(self, size: int, align: int = ALIGN) -> int:
        """Offset of ``size`` new bytes aligned to ``align`` (a power of two).

        Raises:
            MemoryError: no free block fits (naming the size and what is free).
        """
        align = max(align, ALIGN)
        need = max(size, 1)
        for start in self.free_offs:
            bsize = self.free_sizes[start]
            off = -(-start // align) * align
            end = -(-(off + need) // ALIGN) * ALIGN
            if end - start <= bsize:
                self._take(start, bsize, end)
                self._gens += 1
                self.used[off] = (start, end - start, self._gens)
                return off
        raise MemoryError(
            f"the symmetric heap has no {size} free bytes (aligned to {align}): "
            f"{self.in_use()} of {self.capacity} bytes are in use and the largest free "
            f"block has {self.largest_free()} bytes; free some, or start the job with a "
            "larger segment (amnet-run --segment-size, AMNET_SEGMENT_SIZE)")

    def _take(self, start: int, bsize: int, end: int) -> None:
        i = bisect.bisect_left(self.free_offs, start)
        del self.free_offs[i]
        del self.free_sizes[start]
        if end < start + bsize:
            bisect.insort(self.free_offs, end)
            self.free_sizes[end] = start + bsize - end

    def hand_out(self, obj: Any, off: int) -> Any:
        """Remember ``obj`` (returned to the program) as a handle of the allocation now at
        ``off``; returns ``obj``."""
        return self._remember(obj, off, self.used[off][2])

    def inherit(self, new: Any, old: Any) -> Any:
        """``new`` (made on ``old``'s memory) is a handle of the allocation ``old`` is one
        of, if it is one; returns ``new``."""
        h = self._handle(old)
        return new if h is None else self._remember(new, h[1], h[2])

    def _remember(self, obj: Any, off: int, gen: int) -> Any:
        key, handed = id(obj), self._handed

        def gone(ref: weakref.ref) -> None:  # the id may be reused once obj is gone
            if handed.get(key, (None,))[0] is ref:
                del handed[key]

        handed[key] = (weakref.ref(obj, gone), off, gen)
        return obj

    def _handle(self, obj: Any) -> tuple[weakref.ref, int, int] | None:
        """The record of the first handed-out object in ``obj``'s chain, if any."""
        for x in _chain(obj):
            h = self._handed.get(id(x))
            if h is not None and h[0]() is x:
                return h
        return None

    def stale(self, obj: Any, off: int) -> bool:
        """Whether ``obj`` (memory at ``off``, where an allocation starts) is a handle of an
        allocation freed since: the first handed-out object in its chain was handed out for
        another allocation. Memory that no handed-out object leads to (a program's own
        ``np.frombuffer``) is judged by its offset alone."""
        h = self._handle(obj)
        return h is not None and (h[1] != off or self.used.get(off, (0, 0, 0))[2] != h[2])

    def size_of(self, off: int) -> int | None:
        """The usable bytes of the allocation at ``off`` (None: no allocation starts there)."""
        u = self.used.get(off)
        return None if u is None else u[0] + u[1] - off

    def free(self, off: int) -> None:
        """Give the allocation at ``off`` back.

        Raises:
            ValueError: no allocation starts at ``off``.
        """
        u = self.used.pop(off, None)
        if u is None:
            raise NotAllocated(f"offset {off} of the symmetric heap is not an allocation's "
                               "start (freed twice, or never returned by alloc)")
        start, n, _ = u
        i = bisect.bisect_left(self.free_offs, start)
        # merge with the next free block, then with the previous one
        if i < len(self.free_offs) and self.free_offs[i] == start + n:
            nxt = self.free_offs.pop(i)
            n += self.free_sizes.pop(nxt)
        if i > 0:
            prev = self.free_offs[i - 1]
            if prev + self.free_sizes[prev] == start:
                self.free_sizes[prev] += n
                return
        self.free_offs.insert(i, start)
        self.free_sizes[start] = n
