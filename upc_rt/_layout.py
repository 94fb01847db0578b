"""UPC index arithmetic: where the elements of a shared array live, and pointers-to-shared.

Pure and self-contained (numpy only); shared arrays and bulk copies build on it. A shared
object has ``threads`` threads T, elements of ``elemsize`` E bytes and a block size B:
B >= 1 is blocked-cyclic, B == 0 is the "indefinite" block size (one infinite block, every
element on thread 0). Element i lives on thread ``(i // B) % T`` at phase ``i % B`` and local
element index ``(i // (B*T)) * B + i % B`` of that thread; each thread's piece starts at the
same byte offset ``base`` of its segment (symmetric allocation), so element i's address field
is ``base + E * local_index``. Pointer arithmetic follows UPC Language Specifications v1.2,
§6.4.2 "Pointer-to-shared arithmetic"; threadof/phaseof/addrfield/resetphase/affinitysize
follow its "Pointer-to-shared manipulation functions" (upc_threadof ... upc_affinitysize).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

__all__ = ["NULL_ADDR", "Layout", "Piece", "SharedPtr", "addrfield", "affinitysize",
           "phaseof", "resetphase", "runs", "threadof"]

NULL_ADDR = -1
"""The address field of a null pointer-to-shared (no real pointer has a negative one)."""
_I = TypeVar("_I", int, np.ndarray)
_FIELDS = ("thread", "phase", "addr", "elemsize", "blocksize", "threads", "alloc")


def _nonneg(name: str, v: object, low: int = 0) -> int:
    """``v`` as an int >= low. Raises TypeError (not an integer), ValueError (too small)."""
    i = operator.index(v)  # type: ignore[arg-type]
    if i < low:
        raise ValueError(f"{name} must be >= {low}, got {i}")
    return i


def affinitysize(totalsize: int, nbytes: int, threadid: int, threads: int) -> int:
    """Bytes of a ``totalsize``-byte object with ``nbytes``-byte blocks on thread ``threadid``.

    As upc_affinitysize (UPC v1.2, "Pointer-to-shared manipulation functions"), with
    THREADS passed in: ``nbytes == 0`` (indefinite) puts everything on thread 0. Raises
    ValueError naming the argument that is negative, ``threads`` < 1 or ``threadid`` not in
    [0, threads); TypeError for non-integers.
    """
    totalsize = _nonneg("totalsize", totalsize)
    nbytes = _nonneg("nbytes", nbytes)
    threads = _nonneg("threads", threads, 1)
    threadid = _nonneg("threadid", threadid)
    if threadid >= threads:
        raise ValueError(f"threadid {threadid} out of range for {threads} threads")
    if nbytes == 0:
        return totalsize if threadid == 0 else 0
    nblocks = totalsize // nbytes
    cutoff = nblocks % threads
    if threadid < cutoff:
        return -(-nblocks // threads) * nbytes
    if threadid > cutoff:
        return nblocks // threads * nbytes
    return nblocks // threads * nbytes + totalsize - nblocks * nbytes


def _compare(op: Callable[[int, int], bool]) -> Callable[[SharedPtr, object], bool]:
    def compare(self: SharedPtr, other: object) -> bool:
        return op(self.distance(other), 0) if isinstance(other, SharedPtr) else NotImplemented
    return compare


class SharedPtr:
    """An immutable, hashable pointer-to-shared: ``thread``, ``phase``, ``addr`` (byte offset
    in the thread's segment), the pointed-to type's ``elemsize``, ``blocksize`` (0:
    indefinite) and ``threads``, and an opaque ``alloc`` tag that arithmetic carries and
    equality ignores. ``p + i``, ``i + p``, ``p - i``, ``p - q`` and ordering follow UPC
    v1.2 §6.4.2 "Pointer-to-shared arithmetic". ``SharedPtr.null(...)`` is the null pointer:
    false, and arithmetic on it raises ValueError.

    The constructor raises ValueError for a thread, phase or address out of range or a bad
    type description (elemsize < 1, blocksize < 0, threads < 1), TypeError for non-integers.
    """

    __slots__ = _FIELDS

    def __init__(self, thread: int, phase: int, addr: int, elemsize: int, blocksize: int,
                 threads: int, alloc: Hashable = None) -> None:
        threads, blocksize = _nonneg("threads", threads, 1), _nonneg("blocksize", blocksize)
        if not 0 <= operator.index(thread) < threads:
            raise ValueError(f"thread {thread} out of range for {threads} threads")
        if not 0 <= operator.index(phase) < max(blocksize, 1):
            raise ValueError(f"phase {phase} out of range for block size {blocksize}")
        for name, v in zip(_FIELDS, (int(thread), int(phase), _nonneg("addr", addr),
                                     _nonneg("elemsize", elemsize, 1), blocksize, threads,
                                     alloc), strict=True):
            object.__setattr__(self, name, v)

    @staticmethod
    def _raw(*values: object) -> SharedPtr:
        """A pointer from ``_FIELDS`` values, unchecked (internal; also unpickles)."""
        p = object.__new__(SharedPtr)
        for name, v in zip(_FIELDS, values, strict=True):
            object.__setattr__(p, name, v)
        return p

    @staticmethod
    def null(elemsize: int, blocksize: int, threads: int) -> SharedPtr:
        """The null pointer of this type: thread 0, phase 0, address ``NULL_ADDR``."""
        return SharedPtr._raw(0, 0, NULL_ADDR, _nonneg("elemsize", elemsize, 1),
                              _nonneg("blocksize", blocksize), _nonneg("threads", threads, 1),
                              None)

    def __setattr__(self, *_: object) -> None:
        raise AttributeError("SharedPtr is immutable")

    __delattr__ = __setattr__

    def __reduce__(self) -> tuple[object, ...]:
        return (SharedPtr._raw, (*self._key(), self.alloc))

    def _key(self) -> tuple[int, ...]:
        return (self.thread, self.phase, self.addr, self.elemsize, self.blocksize, self.threads)

    is_null = property(lambda self: self.addr == NULL_ADDR, doc="Whether this is null.")
    threadof = property(lambda self: self.thread, doc="upc_threadof.")
    phaseof = property(lambda self: self.phase, doc="upc_phaseof.")
    addrfield = property(lambda self: self.addr, doc="upc_addrfield.")

    def resetphase(self) -> SharedPtr:
        """The same thread and address with phase 0 (upc_resetphase)."""
        return SharedPtr._raw(self.thread, 0, *self._key()[2:], self.alloc)

    def __bool__(self) -> bool:
        return not self.is_null

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, SharedPtr) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        kind = f"(B={self.blocksize}, E={self.elemsize})"
        if self.is_null:
            return f"<shared ptr NULL {kind}>"
        return f"<shared ptr thread {self.thread} phase {self.phase} addr {self.addr:#x} {kind}>"

    def __add__(self, i: object) -> SharedPtr:
        """``p + i`` (and ``i + p``, ``p - i``) for an integer i of either sign. Raises
        ValueError on a null pointer or a result before the start of the segment."""
        try:
            i = operator.index(i)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented
        if self.is_null:
            raise ValueError("arithmetic on a null pointer-to-shared")
        e, b = self.elemsize, self.blocksize
        if b == 0:
            thread, phase, addr = self.thread, 0, self.addr + e * i
        else:
            blocks, phase = divmod(self.phase + i, b)
            course, thread = divmod(self.thread + blocks, self.threads)
            addr = self.addr + e * (course * b + phase - self.phase)
        if addr < 0:
            raise ValueError(f"{self!r} + {i} points before the start of the segment")
        return SharedPtr._raw(thread, phase, addr, e, b, self.threads, self.alloc)

    __radd__ = __add__

    def __sub__(self, other: object) -> SharedPtr | int:
        """``p - i``: a pointer; ``p - q``: the element distance (``distance``)."""
        if isinstance(other, SharedPtr):
            return self.distance(other)
        try:
            return self + -operator.index(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    def distance(self, q: SharedPtr) -> int:
        """``self - q`` in elements. Raises TypeError when the element size, block size or
        THREADS differ; ValueError for a null pointer or pointers that cannot point into the
        same object (different alloc tags, misaligned, or different threads when B == 0)."""
        if self._key()[3:] != q._key()[3:]:
            raise TypeError(f"pointers to different types: {self!r} - {q!r}")
        if self.is_null or q.is_null:
            raise ValueError("arithmetic on a null pointer-to-shared")
        if self.alloc is not None and q.alloc is not None and self.alloc != q.alloc:
            raise ValueError(f"{self!r} and {q!r} do not point into the same object")
        e, b = self.elemsize, self.blocksize
        if b == 0:
            d, r = divmod(self.addr - q.addr, e)
        else:  # whole courses between the block starts, then threads, then phases
            d, r = divmod((self.addr - self.phase * e) - (q.addr - q.phase * e), b * e)
            d = (d * self.threads + self.thread - q.thread) * b + self.phase - q.phase
        if r or (b == 0 and self.thread != q.thread):
            raise ValueError(f"{self!r} and {q!r} are not the same object")
        return d

    __lt__, __le__ = _compare(operator.lt), _compare(operator.le)
    __gt__, __ge__ = _compare(operator.gt), _compare(operator.ge)


def threadof(p: SharedPtr) -> int:
    """upc_threadof: the thread p points to."""
    return p.thread


def phaseof(p: SharedPtr) -> int:
    """upc_phaseof: p's phase (0 for the indefinite block size and for null)."""
    return p.phase


def addrfield(p: SharedPtr) -> int:
    """upc_addrfield: p's byte offset in its thread's segment."""
    return p.addr


def resetphase(p: SharedPtr) -> SharedPtr:
    """upc_resetphase: p with phase 0."""
    return p.resetphase()


@dataclass(frozen=True, slots=True, eq=False)
class Piece:
    """One thread's share of a slice, its elements in slice order (compared by identity).

    Element k (0 <= k < count) has local index ``local_start + k * local_stride``, or
    ``local[k]`` where ``local`` is an int64 array; it goes to position ``pos_start + k *
    pos_stride`` of the slice result, or ``pos[k]``. An array is given only where the values
    are not an arithmetic progression; then ``*_start`` is its first value and ``*_stride``
    0. Strides are 1 when count == 1. Local indices rise with k for a positive slice step
    and fall for a negative one; positions always rise. Arrays are read-only.
    """

    thread: int
    count: int
    local_start: int = 0
    local_stride: int = 1
    local: np.ndarray | None = None
    pos_start: int = 0
    pos_stride: int = 1
    pos: np.ndarray | None = None

    def local_indices(self) -> np.ndarray:
        """The local indices as an int64 array."""
        return _values(self.local_start, self.local_stride, self.local, self.count)

    def positions(self) -> np.ndarray:
        """The result positions as an int64 array."""
        return _values(self.pos_start, self.pos_stride, self.pos, self.count)

    def pos_slice(self) -> slice | None:
        """The positions as a slice of the result; None when they are an array."""
        if self.pos is not None:
            return None
        return slice(self.pos_start, self.pos_start + self.pos_stride * (self.count - 1) + 1,
                     self.pos_stride)

    def runs(self) -> list[tuple[int, int]]:
        """The local indices as maximal runs of consecutive integers, ``(lowest, length)``,
        in slice order (for a negative step each run is read from its top down)."""
        if self.local is None and (self.count == 1 or abs(self.local_stride) == 1):
            last = self.local_start + self.local_stride * (self.count - 1)
            return [(min(self.local_start, last), self.count)]
        loc = self.local_indices()
        sign = 1 if loc[1] > loc[0] else -1
        cut = np.concatenate(([0], np.flatnonzero(np.diff(loc) != sign) + 1, [self.count]))
        low = np.minimum(loc[cut[:-1]], loc[cut[1:] - 1])
        return list(zip(low.tolist(), np.diff(cut).tolist(), strict=True))


def runs(piece: Piece) -> list[tuple[int, int]]:
    """``piece.runs()``: its local indices as contiguous runs ``(lowest, length)``."""
    return piece.runs()


def _values(start: int, stride: int, array: np.ndarray | None, count: int) -> np.ndarray:
    if array is not None:
        return array
    return start + stride * np.arange(count, dtype=np.int64)


def _progression(a: np.ndarray) -> tuple[int, int, np.ndarray | None]:
    """(start, stride, None) when ``a`` is an arithmetic progression, else (a[0], 0, a)."""
    d = np.diff(a)
    if len(a) == 1 or (d == d[0]).all():
        return int(a[0]), int(d[0]) if len(a) > 1 else 1, None
    a = np.ascontiguousarray(a, dtype=np.int64)
    a.flags.writeable = False
    return int(a[0]), 0, a


@dataclass(frozen=True, slots=True)
class Layout:
    """The distribution of an ``n``-element shared array (see the module docstring); its
    pointers (``ptr``) carry ``tag`` as their alloc tag, or the layout itself if tag is None.
    Raises ValueError for n < 0, elemsize < 1, blocksize < 0, threads < 1 or base < 0, and
    TypeError for non-integers.
    """

    n: int
    elemsize: int
    blocksize: int
    threads: int
    base: int = 0
    tag: Hashable = None

    def __post_init__(self) -> None:
        for name, low in (("n", 0), ("elemsize", 1), ("blocksize", 0), ("threads", 1),
                          ("base", 0)):
            object.__setattr__(self, name, _nonneg(name, getattr(self, name), low))

    # Unchecked maps for ints and int64 arrays alike, any sign (floor division throughout).
    def _own(self, i: _I) -> _I:
        return i * 0 if self.blocksize == 0 else (i // self.blocksize) % self.threads

    def _loc(self, i: _I) -> _I:
        b = self.blocksize
        return i if b == 0 else (i // (b * self.threads)) * b + i % b

    def _glob(self, t: int, j: _I) -> _I:
        b = self.blocksize
        return j if b == 0 else ((j // b) * self.threads + t) * b + j % b

    def _below(self, t: int, x: int) -> int:
        """How many of thread t's elements have an index below x (x >= 0)."""
        b = self.blocksize
        if b == 0:
            return x if t == 0 else 0
        blocks, rest = divmod(x, b)
        laps, last = divmod(blocks, self.threads)
        return (laps + (t < last)) * b + (rest if t == last else 0)

    def _index(self, i: int, end_ok: bool = False) -> int:
        i = operator.index(i)
        if not 0 <= i < self.n + end_ok:
            raise IndexError(f"index {i} out of range for length {self.n}")
        return i

    def _indices(self, idx: np.ndarray) -> np.ndarray:
        a = np.asarray(idx)
        if a.size and a.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, not {a.dtype}")
        a = a.astype(np.int64, copy=False)
        if a.size and (a.min() < 0 or a.max() >= self.n):
            raise IndexError(f"index out of range for length {self.n}")
        return a

    def owner(self, i: int) -> int:
        """Element i's thread. Raises IndexError (naming the length) unless 0 <= i < n."""
        return self._own(self._index(i))

    def phase(self, i: int) -> int:
        """Element i's phase (0 when B == 0). Raises IndexError unless 0 <= i < n."""
        i = self._index(i)
        return i % self.blocksize if self.blocksize else 0

    def local_index(self, i: int) -> int:
        """Element i's index among its thread's elements. Raises IndexError."""
        return self._loc(self._index(i))

    def addr(self, i: int) -> int:
        """Element i's address field (byte offset in its thread's segment). Raises IndexError."""
        return self.base + self.elemsize * self.local_index(i)

    def owners(self, idx: np.ndarray) -> np.ndarray:
        """``owner`` of each index, int64. Raises IndexError, or TypeError for non-integers."""
        return self._own(self._indices(idx))

    def local_indices(self, idx: np.ndarray) -> np.ndarray:
        """``local_index`` of each index, int64. Raises IndexError or TypeError."""
        return self._loc(self._indices(idx))

    def row_owners(self, rows: np.ndarray, row: int) -> np.ndarray:
        """The thread of the first element of each row in ``rows``, the array seen as rows of
        ``row`` elements (the product of an n-D array's trailing dimensions): the affinity
        UPC gives ``&A[i]``, a row of ``shared [B] T A[R][C]``, is that of ``&A[i][0]``.
        int64. Raises IndexError naming the row count unless 0 <= rows < n // row, ValueError
        for row < 1, TypeError for non-integers."""
        row = _nonneg("row", row, 1)
        a = np.asarray(rows)
        if a.size and a.dtype.kind not in "iu":
            raise TypeError(f"row indices must be integers, not {a.dtype}")
        a = a.astype(np.int64, copy=False)
        nrows = self.n // row
        if a.size and (a.min() < 0 or a.max() >= nrows):
            bad = int(a.min()) if a.min() < 0 else int(a.max())
            raise IndexError(f"row {bad} out of range for {nrows} rows")
        return self._own(a * row)

    def thread_indices(self, t: int) -> np.ndarray:
        """The indices of thread t's elements in its local order (local element j is
        ``global_index(t, j)``): its blocks in rising order, each block's elements in order.
        int64, ascending. Raises IndexError unless 0 <= t < threads."""
        return self._glob(operator.index(t),
                          np.arange(self.local_count(t), dtype=np.int64))

    def local_count(self, t: int) -> int:
        """How many elements thread t holds. Raises IndexError unless 0 <= t < threads."""
        t = operator.index(t)
        if not 0 <= t < self.threads:
            raise IndexError(f"thread {t} out of range for {self.threads} threads")
        return self._below(t, self.n)

    def max_local(self) -> int:
        """The most elements a thread holds (UPC localsizeof / elemsize): thread 0's count."""
        return self._below(0, self.n)

    def global_index(self, t: int, j: int) -> int:
        """The index of thread t's local element j. Raises IndexError naming the bound."""
        t, j, count = operator.index(t), operator.index(j), self.local_count(t)
        if not 0 <= j < count:
            raise IndexError(f"local index {j} out of range for thread {t}'s {count} elements")
        return self._glob(t, j)

    def ptr(self, i: int) -> SharedPtr:
        """The pointer to element i, 0 <= i <= n (n: one past the end). Raises IndexError."""
        i, b = self._index(i, end_ok=True), self.blocksize
        return SharedPtr._raw(self._own(i), i % b if b else 0,
                              self.base + self.elemsize * self._loc(i), self.elemsize, b,
                              self.threads, self if self.tag is None else self.tag)

    def index_of(self, p: SharedPtr) -> int:
        """The index (0..n) of the element p points to. Raises ValueError if p is null or
        does not point into this layout (type, alloc tag, thread, alignment or phase
        disagree), IndexError naming the length if its index is outside [0, n]."""
        b, tag = self.blocksize, self if self.tag is None else self.tag
        j, r = divmod(p.addr - self.base, self.elemsize)
        if (p.is_null or p._key()[3:] != (self.elemsize, b, self.threads) or r
                or (p.alloc is not None and p.alloc != tag)
                or (j % b != p.phase if b else p.thread != 0)):
            raise ValueError(f"{p!r} does not point into {self!r}")
        return self._index(self._glob(p.thread, j), end_ok=True)

    def pieces(self, start: int, stop: int, step: int = 1) -> list[Piece]:
        """Per-thread descriptions of ``a[start:stop:step]`` (bounds as ``slice.indices(n)``
        gives them): a Piece for each thread holding selected elements, in thread order.

        Cost: O(threads) for B == 0, one thread, or |step| == 1 (then each thread's local
        indices are one run; its positions an array only where its share spans several
        blocks); else O(threads + min(elements, period)), the period being B*T/gcd(step,
        B*T) elements, plus the arrays of threads whose shares are not progressions (none
        when each thread gets at most one element a period, or step is a multiple of B*T).
        Raises ValueError for step 0, IndexError when a selected index is outside [0, n).
        """
        start, stop, step = map(operator.index, (start, stop, step))
        if step == 0:
            raise ValueError("slice step cannot be zero")
        m = len(range(start, stop, step))
        if m == 0:
            return []
        for i in (start, start + (m - 1) * step):  # the first and last selected
            self._index(i)
        b, nt = self.blocksize, self.threads
        if b == 0 or nt == 1:  # local index == global index
            return [Piece(0, m, start, step if m > 1 else 1, None, 0, 1)]
        if abs(step) == 1:
            return self._unit_pieces(start, m, step)
        period = b * nt // math.gcd(step, b * nt)  # then the selection repeats ...
        shift = step * period // (b * nt) * b  # ... each thread's local indices moved so
        k0 = np.arange(min(period, m), dtype=np.int64)  # positions in the first period
        own = self._own(start + step * k0)
        order = np.argsort(own.astype(np.int16) if nt < 2**15 else own, kind="stable")
        bounds = np.cumsum(np.bincount(own, minlength=nt)).tolist()
        out = []
        for t in range(nt):
            ks = k0[order[bounds[t - 1] if t else 0:bounds[t]]]
            if len(ks) == 0:
                continue
            ls = self._loc(start + step * ks)
            count = int(((m - ks + period - 1) // period).sum())
            need = min(count - 1, len(ks))  # the distinct steps between its elements
            dk = np.diff(np.append(ks, ks[0] + period))
            dl = np.diff(np.append(ls, ls[0] + shift))
            if (dk[:need] == dk[0]).all() and (dl[:need] == dl[0]).all():
                one = count == 1
                out.append(Piece(t, count, int(ls[0]), 1 if one else int(dl[0]), None,
                                 int(ks[0]), 1 if one else int(dk[0])))
                continue
            laps = np.arange(count // len(ks) + 2, dtype=np.int64)[:, None]
            out.append(Piece(t, count, *_progression((ls + shift * laps).ravel()[:count]),
                             *_progression((ks + period * laps).ravel()[:count])))
        return out

    def _unit_pieces(self, start: int, m: int, step: int) -> list[Piece]:
        """``pieces`` for step +1 or -1: a thread's local indices are one run."""
        low, b = (start if step == 1 else start - m + 1), self.blocksize
        out = []
        for t in range(self.threads):
            lo, hi = self._below(t, low), self._below(t, low + m)
            count, first = hi - lo, (lo if step == 1 else hi - 1)
            if count == 0:
                continue
            if count <= 2 or b == 1 or lo // b == (hi - 1) // b:  # positions: a progression
                g = self._glob(t, first)
                d = (self._glob(t, first + step) - g) * step if count > 1 else 1
                out.append(Piece(t, count, first, step if count > 1 else 1, None,
                                 (g - start) * step, d))
            else:
                pos = (self._glob(t, np.arange(lo, hi, dtype=np.int64)[::step]) - start) * step
                out.append(Piece(t, count, first, step, None, *_progression(pos)))
        return out
