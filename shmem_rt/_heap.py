"""The symmetric heap: where collective allocations sit in every PE's segment.

Every PE runs the same allocator on the same sequence of collective calls, so an
allocation gets the same offset everywhere without a message; the call's collective check
(every PE passed the same size and alignment) is what makes that sequence the same.
First fit over a free list kept in address order, neighbours merged on free.
"""

from __future__ import annotations

import bisect

ALIGN = 64  # every allocation starts on a cache line unless asked for more


class SymHeap:
    """Blocks of ``[lo, hi)`` handed out first-fit; ``used`` maps an allocation's offset to
    ``(start of its block, its block's size)``."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.free_offs: list[int] = [lo]
        self.free_sizes: dict[int, int] = {lo: hi - lo}
        self.used: dict[int, tuple[int, int]] = {}

    @property
    def capacity(self) -> int:
        return self.hi - self.lo

    def largest_free(self) -> int:
        return max(self.free_sizes.values(), default=0)

    def in_use(self) -> int:
        return sum(n for _, n in self.used.values())

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
                self.used[off] = (start, end - start)
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
            raise ValueError(f"offset {off} of the symmetric heap is not an allocation's "
                             "start (freed twice, or never returned by alloc)")
        start, n = u
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
