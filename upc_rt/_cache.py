"""The remote-reference cache (MuPC §4.4.9 "Remote reference caching" and ch. 5): element
reads and relaxed element writes to threads on other nodes go through it.

- Direct-mapped and write-back, one segment of ``blocks`` lines per remote thread; a line is
  ``block_size`` bytes of the remote segment, aligned. Node-local threads are never cached:
  their memory is read directly, which is cheaper.
- A read or write miss loads the line (one ``ep.get``). Writes stay in the line, with a
  per-byte dirty mask, so only the bytes this thread wrote go back (no false sharing): a
  dirty line travels whole with its mask, batched per remote thread in a few upc_rt calls,
  and the owner stores the masked bytes (``np.copyto(where=mask)``), so writing back costs
  per line, not per run of dirty bytes.
- A conflict moves the incumbent to a small victim cache (``VICTIMS`` lines, oldest out
  first, written back if dirty when it leaves); a hit there swaps the line back.
- At every fence (so every barrier, notify, wait, lock, unlock and strict access, and
  ``ep.fence()``/``ep.barrier()`` through amnet's sync hook) dirty lines are written back
  and every line is invalidated; the fence returns once every owner has stored them. Bulk
  transfers write back first, so they never see stale data.

``upc.cache_stats()`` counts hits, misses, victim hits, lines written back and invalidations.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._rt import remote_call, touch

VICTIMS = 16  # lines in the victim cache


@dataclass(frozen=True, slots=True)
class CacheStats:
    """The cache's counters (``upc.cache_stats()``), since ``upc.init()``."""

    hits: int
    misses: int
    victim_hits: int
    writebacks: int  #: lines written back (at a fence, or when they left the victim cache)
    invalidations: int  #: fences that emptied the cache
    enabled: bool = True


class _Line:
    __slots__ = ("block", "data", "dirty", "mask", "thread")

    def __init__(self, thread: int, block: int, data: np.ndarray) -> None:
        self.thread = thread
        self.block = block
        self.data = data
        self.mask: np.ndarray | None = None
        self.dirty = False


class Cache:
    """One rank's cache (see the module docstring)."""

    def __init__(self, rt: Any, blocks: int, block_size: int) -> None:
        self.rt = rt
        self.ep = rt.ep
        self.nsets = blocks
        self.L = block_size
        self.seg_size = rt.port.segment_size
        self.sets: dict[int, list[_Line | None]] = {}
        self.victims: OrderedDict[tuple[int, int], _Line] = OrderedDict()
        self.hits = self.misses = self.victim_hits = self.writebacks = 0
        self.invalidations = 0
        self.live = 0  # lines held (main + victim): a fence with none does nothing
        self.sent: list[Any] = []  # write-backs in flight (handles), waited for at a fence
        # a call carries lines up to this many bytes (data and mask): a medium AM's payload
        self.budget = max(rt.ep.max_medium - 1024, 0)
        rt.port.add_sync_hook(self._on_sync)

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.victim_hits, self.writebacks,
                          self.invalidations)

    # -- lookup -----------------------------------------------------------------------------
    def _line(self, t: int, block: int) -> _Line:
        lines = self.sets.get(t)
        if lines is None:
            lines = self.sets[t] = [None] * self.nsets
        s = block % self.nsets
        ln = lines[s]
        if ln is not None and ln.block == block:
            self.hits += 1
            return ln
        v = self.victims.pop((t, block), None)
        if v is not None:
            self.victim_hits += 1
            self.live -= 1
        else:
            self.misses += 1
            lo = block * self.L
            data = np.empty(min(self.L, self.seg_size - lo), np.uint8)
            touch(self.rt, t, lo, len(data), False)  # auto_nb: its puts there land first
            self.ep.get(t, lo, len(data), data)
            v = _Line(t, block, data)
        if ln is not None:
            self._to_victims(ln)
        lines[s] = v
        self.live += 1
        return v

    def _to_victims(self, ln: _Line) -> None:
        self.victims[(ln.thread, ln.block)] = ln
        if len(self.victims) > VICTIMS:
            _, old = self.victims.popitem(last=False)
            self.live -= 1
            if old.dirty:
                self._write_back({old.thread: [old]})

    # -- access -----------------------------------------------------------------------------
    def read(self, t: int, addr: int, n: int) -> bytes:
        """``n`` bytes of thread ``t``'s segment at ``addr``, through the cache."""
        L = self.L
        block, off = divmod(addr, L)
        if off + n <= L:
            return self._line(t, block).data[off:off + n].tobytes()
        out = bytearray()
        while n:
            block, off = divmod(addr, L)
            k = min(n, L - off)
            out += self._line(t, block).data[off:off + k].tobytes()
            addr += k
            n -= k
        return bytes(out)

    def write(self, t: int, addr: int, data: bytes) -> None:
        """Write ``data`` at ``addr`` of thread ``t``'s segment into the cache (written
        back at the next fence, or when its line leaves the victim cache)."""
        L = self.L
        src = np.frombuffer(data, np.uint8)
        pos = 0
        while pos < len(src):
            block, off = divmod(addr + pos, L)
            k = min(len(src) - pos, L - off)
            ln = self._line(t, block)
            ln.data[off:off + k] = src[pos:pos + k]
            if ln.mask is None:
                ln.mask = np.zeros(len(ln.data), bool)
            ln.mask[off:off + k] = True
            ln.dirty = True
            pos += k

    # -- fences -----------------------------------------------------------------------------
    def _on_sync(self, event: str) -> None:
        self.flush(event)

    def flush(self, event: str = "fence") -> None:
        """Write back every dirty byte and empty the cache; return once every owner has
        stored what this cache wrote back (now or when lines left the victim cache)."""
        if not self.live:
            self._settle()
            return
        dirty: dict[int, list[_Line]] = {}
        for lines in self.sets.values():
            for ln in lines:
                if ln is not None and ln.dirty:
                    dirty.setdefault(ln.thread, []).append(ln)
        for ln in self.victims.values():
            if ln.dirty:
                dirty.setdefault(ln.thread, []).append(ln)
        self.sets.clear()
        self.victims.clear()
        self.live = 0
        self.invalidations += 1
        if dirty:
            self._write_back(dirty)
        self._settle()

    def _settle(self) -> None:
        sent, self.sent = self.sent, []
        for h in sent:
            h.wait()

    def _write_back(self, dirty: dict[int, list[_Line]]) -> None:
        """Send the dirty lines to their owners (``self.sent`` holds the calls): whole lines
        with their masks, as many to a call as a medium AM holds; a line too big for one
        goes as a vector put of its dirty runs."""
        for t, lines in dirty.items():
            batch: list[list[Any]] = []
            size = 0
            for ln in lines:
                base = ln.block * self.L
                n = len(ln.data)
                touch(self.rt, t, base, n, True)
                self.writebacks += 1
                if 2 * n + 32 > self.budget:
                    self._put_runs(t, ln)
                    continue
                if size + 2 * n + 32 > self.budget:
                    self.sent.append(self.rt.start_call(t, "cache_wb", batch))
                    batch, size = [], 0
                batch.append([base, ln.data.tobytes(), ln.mask.tobytes()])
                size += 2 * n + 32
            if batch:
                self.sent.append(self.rt.start_call(t, "cache_wb", batch))

    def _put_runs(self, t: int, ln: _Line) -> None:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], ln.mask.view(np.int8), [0]))))
        base = ln.block * self.L
        dst, src = [], []
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            dst.append((base + a, b - a))
            src.append(ln.data[a:b].copy())
        self.ep.vis.put_vector_nbi(t, dst, src)


@remote_call("cache_wb")
def _store_lines(rt: Any, src: int, opid: int, lines: list[list[Any]]) -> None:
    """At the owner (handler context): a remote cache's dirty lines, ``[offset, data,
    mask]`` each; the bytes whose mask byte is set land in my segment.

    Raises ValueError (to the caller) for a line outside my segment or a mask that does
    not match its data."""
    seg = rt.seg(rt.MYTHREAD)
    for off, data, mask in lines:
        n = len(data)
        if not (isinstance(off, int) and 0 <= off and off + n <= len(seg)) or len(mask) != n:
            raise ValueError(f"cache write-back of {n} bytes at {off!r}: outside the "
                             f"segment of {len(seg)} bytes or a mask of {len(mask)} bytes")
        np.copyto(seg[off:off + n], np.frombuffer(data, np.uint8),
                  where=np.frombuffer(mask, np.bool_))
