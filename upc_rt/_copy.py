"""Bulk copies: ``memget``, ``memput``, ``memcpy``, ``memset`` (UPC 1.2 §7.2.5) and the
UPC 1.3 non-blocking ``memget_nb``, ``memput_nb``, ``memcpy_nb``.

As in UPC, the shared side is ``n`` bytes *on one thread* (``threadof(p)``), from
``addrfield(p)`` on; the copy must stay inside that thread's part of the allocation. A target
on my node is a direct numpy copy (no AM); another node's is one ``ep.get``/``ep.put``.
``memput``/``memset`` are relaxed: the source may be reused at once, and the bytes reach the
target by the next fence (barrier, lock operation, strict access).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amnet import Port

from ._alloc import check_span
from ._layout import SharedPtr
from ._rt import Runtime, current, touch


def _shared(rt: Runtime, p: Any, n: Any, what: str) -> tuple[int, int, Any]:
    """(thread, addr, its segment or None), after checking ``p`` and ``n``."""
    if not isinstance(p, SharedPtr):
        raise TypeError(f"{what}: expected a pointer-to-shared, got {type(p).__name__}")
    if p.is_null:
        raise ValueError(f"{what}: the pointer is null")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"{what}: the byte count must be an int >= 0, got {n!r}")
    check_span(p, p.thread, p.addr, int(n), rt.segment_size, what)
    return p.thread, p.addr, rt.seg(p.thread)


def _local(buf: Any, n: int, writable: bool, what: str) -> np.ndarray:
    """The first ``n`` bytes of ``buf`` as a uint8 array."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(f"{what}: {type(buf).__name__} is not a buffer") from None
    if not mv.c_contiguous:
        raise ValueError(f"{what}: the local buffer must be contiguous")
    if writable and mv.readonly:
        raise TypeError(f"{what}: the destination buffer is read-only")
    b = np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv,
                      dtype=np.uint8)
    if len(b) < n:
        raise ValueError(f"{what}: the local buffer holds {len(b)} bytes, fewer than {n}")
    return b[:n]


def _coherent(rt: Runtime) -> None:
    if rt.cache is not None:
        rt.cache.flush("bulk")


def memget(dst: Any, p: SharedPtr, n: int) -> None:
    """Copy ``n`` bytes from the shared memory at ``p`` (on thread ``threadof(p)``) into the
    writable local buffer ``dst``.

    Raises:
        upc_rt.BoundsError: the bytes leave p's allocation on that thread (naming it).
        TypeError / ValueError: bad pointer, count or buffer (nothing moves).
    """
    rt = current("upc.memget()")
    t, addr, seg = _shared(rt, p, n, "upc.memget()")
    out = _local(dst, n, True, "upc.memget()")
    if seg is not None:
        out[:] = seg[addr:addr + n]
    elif n:
        _coherent(rt)
        if rt.nb is not None:
            rt.nb.memget(t, addr, n, out)
        else:
            rt.net.get(t, addr, n, out)


def memput(p: SharedPtr, src: Any, n: int) -> None:
    """Copy ``n`` bytes of the local buffer ``src`` to the shared memory at ``p`` (relaxed;
    ``src`` may be reused at once).

    Raises: as :func:`memget`.
    """
    rt = current("upc.memput()")
    t, addr, seg = _shared(rt, p, n, "upc.memput()")
    data = _local(src, n, False, "upc.memput()")
    if seg is not None:
        seg[addr:addr + n] = data
    elif n:
        _coherent(rt)
        _put(rt, t, addr, data)


def _put(rt: Runtime, t: int, addr: int, data: Any) -> None:
    """A relaxed put to another node: the scheduler's with auto_nb, else an implicit-handle
    put (completed by the next fence)."""
    if rt.nb is not None:
        rt.nb.memput(t, addr, data)
    else:
        rt.net.put_nbi(t, addr, data)


def memcpy(dst: SharedPtr, src: SharedPtr, n: int) -> None:
    """Copy ``n`` bytes from the shared memory at ``src`` to that at ``dst`` (either may be
    on any thread: a third-party copy through this thread when neither is on my node).

    Raises: as :func:`memget`, for either pointer.
    """
    rt = current("upc.memcpy()")
    ts, sa, sseg = _shared(rt, src, n, "upc.memcpy() source")
    td, da, dseg = _shared(rt, dst, n, "upc.memcpy() destination")
    if not n:
        return
    _coherent(rt)
    if sseg is not None:
        data = sseg[sa:sa + n]
    else:
        data = np.empty(n, np.uint8)
        if rt.nb is not None:
            rt.nb.memget(ts, sa, n, data)
        else:
            rt.net.get(ts, sa, n, data)
    if dseg is not None:
        dseg[da:da + n] = data
    else:
        _put(rt, td, da, data)


def memset(p: SharedPtr, c: int, n: int) -> None:
    """Set ``n`` bytes at ``p`` to ``c`` (0..255; relaxed).

    Raises: as :func:`memget`; ValueError for ``c`` outside 0..255.
    """
    rt = current("upc.memset()")
    if isinstance(c, bool) or not isinstance(c, int | np.integer) or not 0 <= c <= 255:
        raise ValueError(f"upc.memset(): the byte value must be 0..255, got {c!r}")
    t, addr, seg = _shared(rt, p, n, "upc.memset()")
    if seg is not None:
        seg[addr:addr + n] = c
    elif n:
        _coherent(rt)
        _put(rt, t, addr, np.full(n, c, np.uint8))


class CopyHandle:
    """The handle of a non-blocking copy (UPC 1.3 ``upc_handle_t``): ``sync()`` waits for
    it, ``test()`` says whether it completed. Neither buffer may be touched until then."""

    __slots__ = ("_after", "_h")

    def __init__(self, h: Any = None, after: Any = None) -> None:
        self._h = h  # an amnet.Handle, or None when the copy completed at once
        self._after = after  # a memcpy_nb's second step, run once the get completed

    def _step(self) -> None:
        if self._after is not None and (self._h is None or self._h.done):
            after, self._after = self._after, None
            self._h = after()

    def test(self) -> bool:
        """Poll once; True when the copy completed (``upc_sync_attempt``)."""
        if self._h is not None and not self._h.done:
            self._h.test()
        self._step()
        return self._h is None or self._h.test()

    def __await__(self) -> Any:
        """``await handle`` in a coroutine that ``amnet.aio.run`` runs: ``sync()`` without
        blocking the loop."""
        return Port.awaitable(self).__await__()

    def sync(self) -> None:
        """Wait until the copy completed (``upc_sync``)."""
        while True:
            if self._h is not None:
                self._h.wait()
            if self._after is None:
                return
            self._step()


def memget_nb(dst: Any, p: SharedPtr, n: int) -> CopyHandle:
    """:func:`memget`, returning at once; ``dst`` holds the bytes after ``sync()``."""
    rt = current("upc.memget_nb()")
    t, addr, seg = _shared(rt, p, n, "upc.memget_nb()")
    out = _local(dst, n, True, "upc.memget_nb()")
    if seg is not None or not n:
        out[:] = seg[addr:addr + n] if n else out
        return CopyHandle()
    _coherent(rt)
    touch(rt, t, addr, n, False)
    return CopyHandle(rt.net.get_nb(t, addr, n, out))


def memput_nb(p: SharedPtr, src: Any, n: int) -> CopyHandle:
    """:func:`memput`, returning at once; complete at the target after ``sync()``
    (``src`` may be reused at once)."""
    rt = current("upc.memput_nb()")
    t, addr, seg = _shared(rt, p, n, "upc.memput_nb()")
    data = _local(src, n, False, "upc.memput_nb()")
    if seg is not None or not n:
        seg[addr:addr + n] = data if n else seg[addr:addr]
        return CopyHandle()
    _coherent(rt)
    touch(rt, t, addr, n, True)
    return CopyHandle(rt.net.put_nb(t, addr, data))


def memcpy_nb(dst: SharedPtr, src: SharedPtr, n: int) -> CopyHandle:
    """:func:`memcpy`, returning at once; complete after ``sync()``."""
    rt = current("upc.memcpy_nb()")
    ts, sa, sseg = _shared(rt, src, n, "upc.memcpy_nb() source")
    td, da, dseg = _shared(rt, dst, n, "upc.memcpy_nb() destination")
    if not n:
        return CopyHandle()
    _coherent(rt)
    if sseg is not None:
        data = np.array(sseg[sa:sa + n])
        if dseg is not None:
            dseg[da:da + n] = data
            return CopyHandle()
        touch(rt, td, da, n, True)
        return CopyHandle(rt.net.put_nb(td, da, data))
    data = np.empty(n, np.uint8)
    touch(rt, ts, sa, n, False)
    h = rt.net.get_nb(ts, sa, n, data)

    def put() -> Any:
        if dseg is not None:
            dseg[da:da + n] = data
            return None
        touch(rt, td, da, n, True)
        return rt.net.put_nb(td, da, data)

    return CopyHandle(h, put)
