"""The shared heap: ``all_alloc``, ``global_alloc``, ``alloc``, ``free`` (UPC 1.2 §7.2.3).

Every segment holds two heaps that grow towards each other (:class:`upc_rt._heap.Heap`):

- the **symmetric** heap, up from byte 0: ``all_alloc`` and ``global_alloc`` give the same
  offset on every thread, as SHMEM's symmetric heap does; its one allocator lives on thread 0
  and is reached by AM (MuPC keeps the state of global allocations on thread 0 too);
- each thread's **local** heap, down from the end: ``alloc`` (affinity to the caller).

The symmetric heap may use bytes below ``sym_limit``; each thread's local heap bytes at or
above its ``floor``; ``sym_limit <= floor`` on every thread. When the symmetric heap needs
more, its caller asks every thread to *cede* up to the new limit (a thread agrees when its
local heap lies above it, and raises its floor), then raises ``sym_limit``: the two never
overlap, and neither side needs a fixed split.

Space goes back the same way: a free that leaves the symmetric heap's top free lowers
``sym_limit`` to the end of its highest live block (rounded up to ``GROW_QUANTUM``), and the
freeing thread tells every thread to lower its floor to that *claim* before ``free`` returns.
Every change of the claim (a growth, a give-back) is numbered on thread 0 (``sym_epoch``) and
carries the claim as it stood then, an upper bound of what the symmetric heap uses until the
next change; a thread lowers its floor only for a change newer than the newest it applied
(``floor_epoch``), so a give-back overtaken by a later growth cannot lower a floor that the
growth needs. Raising (ceding) never depends on the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._errors import BoundsError
from ._layout import Layout, SharedPtr
from ._rt import GROW_QUANTUM, Runtime, current, remote_call


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a pointer points into: its name (for messages), layout, for ``alloc`` the
    owning thread (``owner``; -1 for symmetric allocations), and for a shared array its
    element type (``dtype``; None for the raw bytes of ``all_alloc``, ``global_alloc`` and
    ``alloc``)."""

    name: str
    layout: Layout
    owner: int = -1
    dtype: Any = None

    def extent(self, thread: int) -> tuple[int, int]:
        """Bytes ``[lo, hi)`` of this allocation in ``thread``'s segment."""
        lay = self.layout
        if self.owner >= 0:
            n = lay.n * lay.elemsize if thread == self.owner else 0
        else:
            n = lay.elemsize * lay.local_count(thread)
        return lay.base, lay.base + n

    def check(self, thread: int, addr: int, nbytes: int, what: str) -> None:
        """Raise BoundsError when bytes ``[addr, addr+nbytes)`` of ``thread`` leave it."""
        lo, hi = self.extent(thread)
        if addr < lo or addr + nbytes > hi:
            raise BoundsError(
                f"{what}: {nbytes} bytes at byte {addr - lo} of {self.name}'s part on thread "
                f"{thread} go past its end: that part holds {hi - lo} bytes")


def check_span(p: Any, thread: int, addr: int, nbytes: int, segment_size: int,
               what: str) -> None:
    """Raise BoundsError when bytes ``[addr, addr+nbytes)`` of ``thread`` leave what the
    pointer ``p`` points into: its allocation when it has one, else the segment."""
    a = p.alloc
    if isinstance(a, Allocation):
        a.check(thread, addr, nbytes, what)
    elif addr + nbytes > segment_size:
        raise BoundsError(f"{what}: {nbytes} bytes at byte {addr} of thread {thread}'s "
                          f"segment go past its end ({segment_size} bytes)")


def _round(n: int) -> int:
    return -(-n // GROW_QUANTUM) * GROW_QUANTUM


def _sizes(what: str, nblocks: Any, nbytes: Any) -> tuple[int, int]:
    for name, v in (("nblocks", nblocks), ("nbytes", nbytes)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{what}: {name} must be >= 0, got {v}")
    return nblocks, nbytes


def _grow(rt: Runtime, end: int, claim: int, epoch: int, what: str) -> None:
    """Ask every thread to cede its segment below ``end`` to the symmetric heap, then raise
    thread 0's limit (a normal context: it waits). ``claim`` and ``epoch``: the change of the
    claim this growth is (see the module docstring).

    Raises:
        MemoryError: a thread's local heap uses bytes below ``end``.
    """
    handles = [rt.start_call(t, "cede", end, claim, epoch) for t in range(rt.THREADS)]
    refused = [(t, low) for t, h in enumerate(handles) if (low := h.wait()) is not True]
    if refused:
        t, low = refused[0]
        raise MemoryError(f"{what}: the shared heap cannot grow to {end} bytes per thread: "
                          f"thread {t}'s local heap (upc_alloc) uses bytes from {low} up")
    rt.call(0, "grow", end)


def _give_back(rt: Runtime, freed: list[int]) -> None:
    """After a free of the symmetric heap at thread 0 (``freed``: its ``[size, claim,
    epoch]``): when the claim changed (epoch > 0), every thread lowers its floor to it, and
    this returns once all have (a normal context: it waits)."""
    _, claim, epoch = freed
    if epoch:
        for h in [rt.start_call(t, "give", claim, epoch) for t in range(rt.THREADS)]:
            h.wait()


def sym_alloc(rt: Runtime, nbytes: int, what: str) -> int:
    """A block of ``nbytes`` at the same offset on every thread (thread 0's normal
    context, or any thread through :func:`global_alloc`)."""
    off, end, claim, epoch = rt.call(0, "galloc", nbytes, what)
    if end:
        try:
            _grow(rt, end, claim, epoch, what)
        except BaseException:
            _give_back(rt, rt.call(0, "sfree", off))
            raise
    return off


def _claim(rt: Runtime) -> int:
    """Thread 0, lock held: what every thread leaves to the symmetric heap now: its limit or
    the end of its highest live block (a block whose growth is under way included), rounded
    up to ``GROW_QUANTUM``, whichever is higher."""
    return max(rt.sym_limit, _round(rt.sym_heap.high_water))


@remote_call("galloc")
def _galloc(rt: Runtime, src: int, opid: int, nbytes: int, what: str) -> list[int]:
    heap = rt.sym_heap
    with rt.lock:
        try:
            return [heap.alloc(nbytes, limit=rt.sym_limit, op=what), 0, 0, 0]
        except MemoryError:
            off = heap.alloc(nbytes, op=what)  # anywhere: MemoryError if the heap is full
            rt.sym_epoch += 1
            return [off, _round(off + heap.size_of(off)), _claim(rt), rt.sym_epoch]


def _sym_free(rt: Runtime, off: int, always: bool) -> list[int]:
    """Thread 0, lock held: free the symmetric block at ``off``; when that frees the heap's
    top, lower the limit. Returns ``[size, claim, epoch]``, epoch 0 when the claim did not
    change (``always``: a new epoch anyway, for a block whose growth failed and may have
    raised some floors). Raises ValueError when ``off`` is not a live block."""
    size = rt.sym_heap.free(off, op="upc_free")
    top = _round(rt.sym_heap.high_water)
    if top >= rt.sym_limit and not always:
        return [size, 0, 0]
    rt.sym_limit = min(rt.sym_limit, top)
    rt.sym_epoch += 1
    return [size, _claim(rt), rt.sym_epoch]


@remote_call("sfree")
def _sfree(rt: Runtime, src: int, opid: int, off: int) -> list[int]:
    with rt.lock:
        return _sym_free(rt, off, True)


def _lower(rt: Runtime, claim: int, epoch: int) -> None:
    """Lock held: a change of the symmetric heap's claim newer than any applied here lowers
    this thread's floor to that claim (an older one says nothing about now)."""
    if epoch > rt.floor_epoch:
        rt.floor_epoch = epoch
        rt.floor = min(rt.floor, claim)


@remote_call("cede")
def _cede(rt: Runtime, src: int, opid: int, end: int, claim: int, epoch: int) -> Any:
    with rt.lock:
        _lower(rt, claim, epoch)
        low = rt.local_heap.low_water
        if low < end:
            return low
        rt.floor = max(rt.floor, end)
        return True


@remote_call("give")
def _give(rt: Runtime, src: int, opid: int, claim: int, epoch: int) -> None:
    with rt.lock:
        _lower(rt, claim, epoch)


@remote_call("grow")
def _grow_limit(rt: Runtime, src: int, opid: int, end: int) -> None:
    with rt.lock:
        rt.sym_limit = max(rt.sym_limit, end)


@remote_call("free")
def _free(rt: Runtime, src: int, opid: int, addr: int, sym: bool | None) -> list[int]:
    """Free ``addr`` here: a symmetric block (``sym`` True, at thread 0), a local one
    (False), or, for a pointer that does not say (None), whichever heap holds it."""
    with rt.lock:
        if sym is None:
            sym = rt.sym_heap is not None and rt.local_heap.block_containing(addr) is None \
                and addr < _claim(rt)
        if not sym or rt.sym_heap is None:
            return [rt.local_heap.free(addr, op="upc_free"), 0, 0]
        return _sym_free(rt, addr, False)


@remote_call("lalloc")
def _lalloc(rt: Runtime, src: int, opid: int, nbytes: int) -> int:
    """``nbytes`` of this thread's local heap, above its floor."""
    with rt.lock:
        return rt.local_heap.alloc(nbytes, limit=rt.floor, op="upc_alloc")


# -- the API ------------------------------------------------------------------------------
def all_alloc(nblocks: int, nbytes: int) -> SharedPtr:
    """``upc_all_alloc``: collective; ``nblocks`` blocks of ``nbytes`` bytes, block ``i`` on
    thread ``i % THREADS``, at the same offset on every thread. Returns a pointer to the
    first byte (thread 0), of block size ``nbytes`` and element size 1.

    Raises:
        amnet.CollectiveMismatch: threads passed different arguments (on every thread).
        MemoryError: the shared heap cannot hold it (naming the bytes and the largest free
            block). TypeError / ValueError: non-int or negative arguments (on every thread).
    """
    rt = current("upc.all_alloc()")
    args = [nblocks, nbytes] if all(type(v) is int for v in (nblocks, nbytes)) else \
        [repr(nblocks), repr(nbytes)]

    def decide() -> int:
        nb, n = _sizes("upc_all_alloc", nblocks, nbytes)
        per = -(-nb // rt.THREADS) * n
        return sym_alloc(rt, per, "upc_all_alloc")

    off = rt.collective("upc_all_alloc", args, decide)
    return _pointer(rt, "upc_all_alloc", off, nblocks, nbytes)


def global_alloc(nblocks: int, nbytes: int) -> SharedPtr:
    """``upc_global_alloc``: as :func:`all_alloc`, called by one thread.

    Raises: MemoryError, TypeError, ValueError (as all_alloc).
    """
    rt = current("upc.global_alloc()")
    nb, n = _sizes("upc_global_alloc", nblocks, nbytes)
    off = sym_alloc(rt, -(-nb // rt.THREADS) * n, "upc_global_alloc")
    return _pointer(rt, "upc_global_alloc", off, nb, n)


def _pointer(rt: Runtime, kind: str, off: int, nblocks: int, nbytes: int) -> SharedPtr:
    lay = Layout(nblocks * nbytes, 1, nbytes, rt.THREADS, off)
    a = Allocation(f"the {kind}({nblocks}, {nbytes}) at offset {off}", lay)
    return SharedPtr(0, 0, off, 1, nbytes, rt.THREADS, alloc=a)


def alloc(nbytes: int) -> SharedPtr:
    """``upc_alloc``: ``nbytes`` with affinity to the calling thread (indefinite block size:
    pointer arithmetic stays on this thread).

    Raises:
        MemoryError: this thread's local heap cannot hold it (naming the bytes and the
            largest free block). TypeError / ValueError: a bad size.
    """
    rt = current("upc.alloc()")
    _sizes("upc_alloc", 1, nbytes)
    if rt.shm is not None:  # my heap's state is in my region, under its SHMEM lock
        off = rt.call(rt.MYTHREAD, "lalloc", nbytes)
    else:
        off = _lalloc(rt, rt.MYTHREAD, 0, nbytes)
    lay = Layout(nbytes, 1, 0, rt.THREADS, off)
    a = Allocation(f"the upc_alloc({nbytes}) of thread {rt.MYTHREAD} at offset {off}", lay,
                   rt.MYTHREAD)
    return SharedPtr(rt.MYTHREAD, 0, off, 1, 0, rt.THREADS, alloc=a)


def free(p: Any) -> None:
    """``upc_free``: release what ``all_alloc``, ``global_alloc``, ``alloc`` or
    ``shared_array`` returned (any one thread may free it, once). When that frees the top of
    the symmetric heap, its space goes back to every thread's local heap before this
    returns (a round of calls to every thread), so ``alloc`` can use it after a barrier.

    Raises:
        ValueError: ``p`` is not the start of a live allocation (never allocated, or freed
            already: the message says which).
        TypeError: ``p`` is not a pointer-to-shared or shared array.
    """
    rt = current("upc.free()")
    arr = getattr(p, "_upc_storage", None)
    if arr is not None:
        p = arr()
    if not isinstance(p, SharedPtr):
        raise TypeError(f"upc.free() takes a pointer-to-shared or a shared array, got "
                        f"{type(p).__name__}")
    if p.is_null:
        return  # upc_free(NULL) does nothing
    a = p.alloc
    if isinstance(a, Allocation) and (p.addrfield != a.layout.base or p.phaseof != 0
                                      or (a.owner >= 0 and p.threadof != a.owner)):
        raise ValueError(f"upc.free(): {p!r} points inside {a.name}, not at its start")
    if not isinstance(a, Allocation):
        owner, sym = p.threadof, None
    else:  # a local block at its owner; a symmetric one at thread 0, where its heap lives
        owner, sym = max(a.owner, 0), a.owner < 0
    _give_back(rt, rt.call(owner, "free", p.addrfield, sym))
