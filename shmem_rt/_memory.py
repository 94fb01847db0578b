"""The symmetric heap's API (alloc/free and the numpy constructors), addresses and
accessibility (OpenSHMEM 1.5 §9.3-9.4, shmem4py's names and arguments), and what the
layers above check and allocate: a PE number, a symmetric object's offset, a symmetric
word (a signal's, a lock's) and a signal word's offset."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

import amnet

from ._context import CONTEXT
from ._heap import ALIGN, NotAllocated
from ._init import current
from ._state import PE


class MALLOC(enum.IntFlag):
    """Allocation hints (accepted; amnet's heap has one kind of memory)."""

    ATOMICS_REMOTE = 1
    SIGNAL_REMOTE = 2


MALLOC_ATOMICS_REMOTE = MALLOC.ATOMICS_REMOTE
MALLOC_SIGNAL_REMOTE = MALLOC.SIGNAL_REMOTE


def my_pe() -> int:
    """This PE's number (its amnet rank)."""
    return current().me


def n_pes() -> int:
    """How many PEs the job has."""
    return current().npes


def pe_accessible(pe: int) -> bool:
    """Whether ``pe`` is a PE of the job (every PE is reachable)."""
    st = current()
    return _is_int(pe) and 0 <= pe < st.npes


def addr_accessible(addr: Any, pe: int) -> bool:
    """Whether ``addr`` (an array) is symmetric, so that ``pe`` has it too."""
    st = current()
    return pe_accessible(pe) and isinstance(addr, np.ndarray) and offset_or_none(st, addr) \
        is not None


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def check_pe(st: PE, pe: Any, what: str) -> int:
    """``pe`` as an int in ``range(n_pes)``.

    Raises:
        TypeError: ``pe`` is no int. amnet.RankError: out of range.
    """
    if not _is_int(pe):
        raise TypeError(f"{what}: pe must be an int, got {type(pe).__name__}")
    pe = int(pe)
    if not 0 <= pe < st.npes:
        raise amnet.RankError(f"{what}: pe {pe} is not a PE of this job (0..{st.npes - 1})")
    return pe


def offset_or_none(st: PE, a: Any) -> int | None:
    off = st.ep.segment_offset(a)
    return None if off < st.heap.lo else off


def sym_offset(st: PE, a: Any, what: str, name: str) -> int:
    """The offset that names array ``a`` on every PE.

    Raises:
        ValueError: ``a`` is not in the symmetric heap.
    """
    off = st.ep.segment_offset(a)
    if off < st.heap.lo:
        raise ValueError(
            f"{what}: {name} is not symmetric: it must be (a view of) memory from "
            "shmem.alloc/new_array/array/zeros/empty/ones/full, which every PE allocated "
            "together")
    return off


def ptr(target: np.ndarray, pe: int) -> np.ndarray | None:
    """A numpy view of ``target`` (symmetric) on PE ``pe`` when ``pe`` is on my node (its
    memory is then read and written directly), else None.

    Raises:
        TypeError, ValueError, amnet.RankError: as for :func:`put`.
    """
    st = current()
    pe = check_pe(st, pe, "shmem.ptr()")
    if not isinstance(target, np.ndarray):
        raise TypeError("shmem.ptr(): target must be a numpy array")
    off = sym_offset(st, target, "shmem.ptr()", "target")
    seg = st.view(pe)
    if seg is None:
        return None
    a = np.ndarray(target.shape, target.dtype, buffer=seg, offset=off, strides=target.strides)
    a.flags.writeable = target.flags.writeable
    return a


# -- allocation (collective) ----------------------------------------------------------------
def _agree(st: PE, what: str, *values: int) -> None:
    """Every PE passed the same ``values`` to the collective ``what`` (a gather to all:
    also the barrier a symmetric allocation needs).

    Raises:
        ValueError: on every PE, naming the first PE whose values differ from PE 0's.
    """
    mine = np.array(values, dtype=np.int64)
    allv = np.empty((st.npes, len(values)), dtype=np.int64)
    st.ep.coll.world.gather_all(allv, mine)
    for p in range(st.npes):
        if not np.array_equal(allv[p], allv[0]):
            raise ValueError(
                f"{what}: PE {p} passed {tuple(int(v) for v in allv[p])} but PE 0 passed "
                f"{tuple(int(v) for v in allv[0])}; a symmetric allocation is collective: "
                "every PE must pass the same arguments")


def _align(align: Any, what: str) -> int:
    if align is None or align == 0:
        return ALIGN
    if not _is_int(align) or align < 0 or align & (align - 1):
        raise ValueError(f"{what}: align must be a power of two, got {align!r}")
    return int(align)


def _hints(hints: Any, what: str) -> None:
    if hints is None:
        return
    if not _is_int(hints) or hints < 0 or int(hints) & ~int(MALLOC.ATOMICS_REMOTE
                                                           | MALLOC.SIGNAL_REMOTE):
        raise ValueError(f"{what}: hints must be a combination of MALLOC_ATOMICS_REMOTE "
                         f"and MALLOC_SIGNAL_REMOTE, got {hints!r}")


def alloc_offset(st: PE, nbytes: int, align: int, what: str, clear: bool) -> int:
    """Allocate ``nbytes`` symmetric bytes (collective) and return their offset.

    Every PE allocates (and zeroes) first, then all agree, which is also the barrier that
    keeps a fast PE from writing into a PE's block before that PE made and cleared it.
    """
    try:
        off = st.heap.alloc(nbytes, align)
    except MemoryError as e:
        off, err = -1, e
    else:
        if clear:
            st.seg[off:off + nbytes] = 0
    try:
        _agree(st, what, nbytes, align)
    except ValueError:
        if off >= 0:
            st.heap.free(off)
        raise
    if off < 0:
        raise err
    return off


def new_word(dtype: Any, what: str) -> np.ndarray:
    """A symmetric word of ``dtype`` (8 bytes, zero; collective), as one numpy element: a
    signal's or a lock's."""
    st = current()
    off = alloc_offset(st, 8, 8, what, True)
    return st.heap.hand_out(np.ndarray((1,), dtype, buffer=st.seg, offset=off), off)


def signal_word(signal: Any, what: str) -> np.ndarray:
    """``signal`` checked as a signal word (what :func:`shmem_rt.new_signal` makes).

    Raises:
        TypeError: it is no uint64 array of one element.
    """
    if not isinstance(signal, np.ndarray) or signal.dtype != np.uint64 or signal.size != 1:
        raise TypeError(f"{what}: signal must be a symmetric uint64 array of one element "
                        "(shmem.new_signal() makes one)")
    return signal


def signal_offset(st: PE, signal: Any, what: str) -> int:
    """The offset of signal word ``signal`` (checked: :func:`signal_word`, symmetric)."""
    return sym_offset(st, signal_word(signal, what), what, "signal")


def alloc(count: int, size: int = 1, align: int | None = None, hints: int | None = None,
          clear: bool = True) -> memoryview:
    """Allocate ``count * size`` bytes of symmetric memory (collective: every PE passes the
    same arguments, and none returns before all allocated), zeroed when ``clear``.

    Returns a writable memoryview; :func:`fromalloc` makes a numpy array of it.

    Raises:
        ValueError: a negative size, a bad ``align`` or ``hints``, or PEs that passed
            different arguments (on every PE). MemoryError: the heap has no such block
            (on every PE).
    """
    st = current()
    what = "shmem.alloc()"
    if not _is_int(count) or not _is_int(size) or count < 0 or size < 0:
        raise ValueError(f"{what}: count and size must be ints >= 0, got {count!r}, {size!r}")
    nbytes = int(count) * int(size)
    a = _align(align, what)
    _hints(hints, what)
    if nbytes == 0:  # as shmem_malloc(0): no block (an empty buffer names no offset)
        _agree(st, what, nbytes, a)
        return memoryview(bytearray(0))
    off = alloc_offset(st, nbytes, a, what, bool(clear))
    return st.heap.hand_out(memoryview(st.seg[off:off + nbytes]), off)


def free(mem: memoryview | np.ndarray) -> None:
    """Give symmetric memory back (collective): ``mem`` is what :func:`alloc` returned or
    an array made by :func:`new_array` and the constructors. No PE frees before every PE
    called it.

    Raises:
        TypeError: ``mem`` is neither a memoryview nor a numpy array.
        NotAllocated: (a ``KeyError``, as in shmem4py, and a ``ValueError``) ``mem`` is
            not the start of a live allocation: never allocated, a view that does not start
            one, or freed already (also when its memory was given to a later allocation,
            which is left alone). ValueError: PEs freed different allocations.
    """
    st = current()
    if not isinstance(mem, memoryview | np.ndarray):
        raise TypeError("shmem.free() takes what shmem.alloc returned or a symmetric numpy "
                        f"array, got {type(mem).__name__}")
    if memoryview(mem).nbytes == 0:  # what alloc(0) gave: nothing to free (as shmem_free(NULL))
        _agree(st, "shmem.free()", -1)
        return
    off = st.ep.segment_offset(mem)
    if off < st.heap.lo or st.heap.size_of(off) is None:
        raise NotAllocated("shmem.free(): that memory is not an allocation of the symmetric "
                           "heap (freed already, or a view that does not start one)")
    if st.heap.stale(mem, off):
        raise NotAllocated("shmem.free(): that allocation was freed already; its memory now "
                           "belongs to a later allocation, which this call leaves alone")
    _agree(st, "shmem.free()", off)
    st.heap.free(off)


def fromalloc(mem: memoryview, shape: int | Sequence[int] | None = None, dtype: Any = None,
              order: str = "C") -> np.ndarray:
    """A numpy array of ``dtype`` and ``shape`` on the memory :func:`alloc` returned.

    Raises:
        ValueError: ``shape`` of ``dtype`` does not fit ``mem`` exactly (naming both
            sizes), or ``mem``'s size is no multiple of the item size.
    """
    dtype = np.dtype(dtype)
    nbytes = memoryview(mem).nbytes
    if shape is None:
        shape = nbytes // dtype.itemsize
    dims = (int(shape),) if _is_int(shape) else tuple(shape)
    need = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize \
        if all(_is_int(d) and d >= 0 for d in dims) else nbytes  # -1: numpy's reshape fits it
    if need != nbytes or nbytes % dtype.itemsize:
        raise ValueError(f"shmem.fromalloc(): shape {dims} of {dtype} needs {need} bytes; "
                         f"the memory has {nbytes} ({nbytes // dtype.itemsize} elements of "
                         f"{dtype.itemsize} bytes" + (f" and {nbytes % dtype.itemsize} more"
                                                       if nbytes % dtype.itemsize else "")
                         + ")")
    a = np.frombuffer(mem, dtype)
    tmp = a.reshape(shape, order=order)
    a.shape = tmp.shape
    if tmp.ndim > 1:
        a.strides = tmp.strides
    pe = CONTEXT.pe
    return a if pe is None else pe.heap.inherit(a, mem)


def new_array(shape: int | Sequence[int], dtype: Any = float, order: str = "C", *,
              align: int | None = None, hints: int | None = None,
              clear: bool = True) -> np.ndarray:
    """A symmetric array (collective)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.intp))
    mem = alloc(count, dtype.itemsize, align, hints, clear)
    return fromalloc(mem, shape, dtype, order)


def del_array(a: np.ndarray) -> None:
    """Free a symmetric array (collective)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"shmem.del_array() takes a numpy array, got {type(a).__name__}")
    free(a)


def _sync_all() -> None:
    current().ep.coll.barrier()


def array(obj: Any, dtype: Any = None, *, order: str = "K", align: int | None = None,
          hints: int | None = None) -> np.ndarray:
    """A symmetric copy of ``obj`` (collective; every PE passes an ``obj`` of the same
    shape and dtype)."""
    tmp = np.asarray(obj, dtype=dtype, order=order)
    a = new_array(tmp.size, tmp.dtype, align=align, hints=hints, clear=False)
    a.shape = tmp.shape
    if tmp.ndim > 1:
        a.strides = tmp.strides
    np.copyto(a, tmp, casting="no")
    _sync_all()
    return a


def empty(shape: int | Sequence[int], dtype: Any = float, order: str = "C", *,
          align: int | None = None, hints: int | None = None) -> np.ndarray:
    return new_array(shape, dtype, order, align=align, hints=hints, clear=False)


def zeros(shape: int | Sequence[int], dtype: Any = float, order: str = "C", *,
          align: int | None = None, hints: int | None = None) -> np.ndarray:
    return new_array(shape, dtype, order, align=align, hints=hints, clear=True)


def ones(shape: int | Sequence[int], dtype: Any = float, order: str = "C", *,
         align: int | None = None, hints: int | None = None) -> np.ndarray:
    a = new_array(shape, dtype, order, align=align, hints=hints, clear=False)
    np.copyto(a, 1, casting="unsafe")
    _sync_all()
    return a


def full(shape: int | Sequence[int], fill_value: Any, dtype: Any = None, order: str = "C",
         *, align: int | None = None, hints: int | None = None) -> np.ndarray:
    if dtype is None:
        dtype = np.array(fill_value).dtype
    a = new_array(shape, dtype, order, align=align, hints=hints, clear=False)
    np.copyto(a, fill_value, casting="unsafe")
    _sync_all()
    return a
