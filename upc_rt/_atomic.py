"""UPC 1.3 atomics (``upc_atomic.h``): ``upc.atomic_domain(ops, dtype)`` and its
operations on shared words, on amnet's atomics (hardware atomics on words of my node, an AM
to the owner otherwise), and ``upc.forall``.

Operation names follow UPC 1.3 (``UPC_GET``, ``UPC_SET``, ``UPC_CSWAP``, ``UPC_ADD`` ...),
lower-cased: get, set, cswap, add, sub, mult, inc, dec, and, or, xor, min, max. Each
fetching method returns the old value: ``D.fetch_add(p, 1)``; ``D.add(p, 1)`` returns None.
``swap`` is a fetching set, ``cas`` a compare-and-swap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ._alloc import Allocation
from ._layout import SharedPtr
from ._rt import current, touch

OPS = ("get", "set", "cswap", "add", "sub", "mult", "inc", "dec", "and", "or", "xor",
       "min", "max")
_ALIASES = {"swap": "set", "cas": "cswap", "fetch_add": "add", "fetch_sub": "sub",
            "fetch_mult": "mult", "fetch_inc": "inc", "fetch_dec": "dec",
            "fetch_and": "and", "fetch_or": "or", "fetch_xor": "xor", "fetch_min": "min",
            "fetch_max": "max"}
_DTYPES = {"i4": "i4", "int32": "i4", "u4": "u4", "uint32": "u4", "i8": "i8",
           "int64": "i8", "u8": "u8", "uint64": "u8", "f4": "f4", "float32": "f4",
           "f8": "f8", "float64": "f8", "int": "i4", "long": "i8", "float": "f4",
           "double": "f8"}
_AMNET = {"get": "get", "set": "swap", "cswap": "cas", "add": "fadd", "sub": "fsub",
          "and": "fand", "or": "for", "xor": "fxor", "min": "fmin", "max": "fmax"}


class AtomicDomain:
    """A set of atomic operations on one type (``upc_atomicdomain_t``); made by
    :func:`atomic_domain`.

    Raises (every operation), before anything is sent: ValueError for an operation not in
    the domain; TypeError for a pointer that is not one, or that points to another type
    than the domain's (naming both); upc_rt.BoundsError for a word past the end of its
    allocation; amnet.AtomicError for a word not aligned to the type's size.
    """

    __slots__ = ("dtype", "ops")

    def __init__(self, ops: Iterable[str], dtype: Any) -> None:
        want = set()
        for o in ops:
            name = _ALIASES.get(str(o).lower(), str(o).lower())
            if name not in OPS:
                raise ValueError(f"upc.atomic_domain(): unknown operation {o!r}; UPC 1.3 has "
                                 f"{', '.join(OPS)}")
            want.add(name)
        key = np.dtype(dtype).str[1:] if not isinstance(dtype, str) or dtype not in _DTYPES \
            else _DTYPES[dtype]
        if key not in _DTYPES.values():
            raise TypeError(f"upc.atomic_domain(): atomics work on i4, u4, i8, u8, f4, f8, "
                            f"not {dtype!r}")
        if key[0] == "f" and want & {"and", "or", "xor"}:
            raise ValueError("upc.atomic_domain(): and/or/xor need an integer type")
        self.ops = frozenset(want)
        self.dtype = np.dtype(key)

    def __repr__(self) -> str:
        return f"<upc atomic domain {sorted(self.ops)} on {self.dtype}>"

    def _run(self, op: str, p: Any, v: Any = None, v2: Any = None) -> Any:
        if op not in self.ops:
            raise ValueError(f"upc atomic {op}: not in this domain's operations "
                             f"({', '.join(sorted(self.ops))})")
        rt = current(f"upc atomic {op}")
        if not isinstance(p, SharedPtr) or p.is_null:
            raise TypeError(f"upc atomic {op}: expected a non-null pointer-to-shared, got {p!r}")
        size = self.dtype.itemsize
        self._check_type(op, p)
        if isinstance(p.alloc, Allocation):
            p.alloc.check(p.thread, p.addr, size, f"upc atomic {op}")
        if rt.cache is not None:
            rt.cache.flush("atomic")
        touch(rt, p.thread, p.addr, size, op != "get")  # auto_nb: it may hold a put there
        dt = self.dtype.str[1:]
        ep = rt.net
        if op == "mult":  # no native multiply: a compare-and-swap loop at the word
            old = ep.atomic(p.thread, p.addr, "get", dtype=dt)
            while True:
                seen = ep.atomic(p.thread, p.addr, "cas", old, self.dtype.type(old * v).item(),
                                 dtype=dt)
                if seen == old:
                    return old
                old = seen
        if op in ("inc", "dec"):
            return ep.atomic(p.thread, p.addr, "fadd" if op == "inc" else "fsub", 1, dtype=dt)
        return ep.atomic(p.thread, p.addr, _AMNET[op], v, v2, dtype=dt)

    def _check_type(self, op: str, p: SharedPtr) -> None:
        """Refuse a pointer to another type than this domain's (UPC leaves it undefined;
        the bits would be read as the wrong type). A pointer into a shared array knows its
        dtype: it must be the domain's. A pointer that carries none must point to elements
        of the domain type's size, or be a byte pointer (element size 1: the raw memory of
        ``all_alloc``, ``global_alloc`` and ``alloc``, UPC's ``shared void *``, which is
        what ``upc_atomic_relaxed`` takes), whose word must then be aligned.

        Raises: TypeError naming both types (or sizes)."""
        a = p.alloc
        have = a.dtype if isinstance(a, Allocation) else None
        if have is not None:
            if have != self.dtype:
                raise TypeError(f"upc atomic {op}: this domain's type is {self.dtype}, but the "
                                f"pointer points into {a.name}, of {have}: use a domain of "
                                f"{have} (atomics must be used on their own type)")
        elif p.elemsize not in (1, self.dtype.itemsize):
            raise TypeError(f"upc atomic {op}: this domain's type is {self.dtype} "
                            f"({self.dtype.itemsize} bytes), but the pointer points to "
                            f"elements of {p.elemsize} bytes")

    # fetching forms return the old value
    def get(self, p: SharedPtr) -> Any:
        return self._run("get", p)

    def set(self, p: SharedPtr, v: Any) -> None:
        self._run("set", p, v)

    def swap(self, p: SharedPtr, v: Any) -> Any:
        return self._run("set", p, v)

    def cas(self, p: SharedPtr, expected: Any, desired: Any) -> Any:
        """Compare-and-swap (UPC_CSWAP): returns the old value (== expected on success)."""
        return self._run("cswap", p, expected, desired)

    def fetch_add(self, p: SharedPtr, v: Any) -> Any:
        return self._run("add", p, v)

    def add(self, p: SharedPtr, v: Any) -> None:
        self._run("add", p, v)

    def fetch_sub(self, p: SharedPtr, v: Any) -> Any:
        return self._run("sub", p, v)

    def sub(self, p: SharedPtr, v: Any) -> None:
        self._run("sub", p, v)

    def fetch_mult(self, p: SharedPtr, v: Any) -> Any:
        return self._run("mult", p, v)

    def mult(self, p: SharedPtr, v: Any) -> None:
        self._run("mult", p, v)

    def fetch_inc(self, p: SharedPtr) -> Any:
        return self._run("inc", p)

    def inc(self, p: SharedPtr) -> None:
        self._run("inc", p)

    def fetch_dec(self, p: SharedPtr) -> Any:
        return self._run("dec", p)

    def dec(self, p: SharedPtr) -> None:
        self._run("dec", p)

    def fetch_and(self, p: SharedPtr, v: Any) -> Any:
        return self._run("and", p, v)

    def fetch_or(self, p: SharedPtr, v: Any) -> Any:
        return self._run("or", p, v)

    def fetch_xor(self, p: SharedPtr, v: Any) -> Any:
        return self._run("xor", p, v)

    def fetch_min(self, p: SharedPtr, v: Any) -> Any:
        return self._run("min", p, v)

    def fetch_max(self, p: SharedPtr, v: Any) -> Any:
        return self._run("max", p, v)


def atomic_domain(ops: Iterable[str], dtype: Any = "i8") -> AtomicDomain:
    """``upc_all_atomicdomain_alloc``: a domain for ``ops`` on ``dtype`` (no communication:
    every thread may make its own).

    Args:
        ops: an iterable of operation names, case-insensitive: UPC 1.3's ``UPC_GET`` ...
            without the prefix (get, set, cswap, add, sub, mult, inc, dec, and, or, xor,
            min, max), or the names of the methods that run them (swap = set, cas = cswap,
            fetch_add = add, fetch_sub = sub, ... fetch_max = max). An operation allows both
            its fetching and its plain method (``"add"``: ``D.add`` and ``D.fetch_add``).
        dtype: the type of the words: i4, u4, i8, u8, f4 or f8 (numpy names and
            int/long/float/double too). The domain works only on pointers to that type.

    Raises:
        ValueError: an unknown operation, or a bitwise one on a float type.
        TypeError: a type atomics do not support.
    """
    current("upc.atomic_domain()")
    return AtomicDomain(ops, dtype)


def forall(start: int, stop: int, step: int = 1, affinity: Any = None) -> Iterator[int]:
    """``upc_forall``: the indices of ``range(start, stop, step)`` whose affinity is
    MYTHREAD. ``affinity``: None for ``i`` itself (``i % THREADS``), an int for "all of them
    on thread affinity % THREADS", a shared array ``A`` for ``&A[i]`` (where its element i
    lives; for an n-D array, row i, which UPC gives the affinity of its first element
    ``&A[i][0]``), or a function of ``i`` returning an int or a pointer-to-shared.

    Raises:
        IndexError: with a shared array, an ``i`` that is not an index (a row index for an
            n-D array) of it, naming the array and the bound.
        TypeError: an affinity of another kind.
    """
    from ._array import SharedArray

    rt = current("upc.forall()")
    me, T = rt.MYTHREAD, rt.THREADS
    r = range(start, stop, step)
    if affinity is None:
        idx = np.arange(start, stop, step, dtype=np.int64)
        return iter(idx[idx % T == me].tolist())
    if isinstance(affinity, SharedArray):
        idx = np.arange(start, stop, step, dtype=np.int64)
        if not idx.size:
            return iter(())
        row = math.prod(affinity.shape[1:])  # an n-D array: row i goes where &A[i][0] is
        try:
            if row == 0:
                raise IndexError(f"its rows hold no elements (shape {affinity.shape})")
            own = affinity.layout.row_owners(idx, row) if len(affinity.shape) > 1 \
                else affinity.layout.owners(idx)
        except IndexError as e:
            raise IndexError(f"upc.forall(): affinity {affinity.name}: {e}") from None
        return iter(idx[own == me].tolist())
    if isinstance(affinity, int | np.integer) and not isinstance(affinity, bool):
        return iter(r if int(affinity) % T == me else ())
    if callable(affinity):
        def gen() -> Iterator[int]:
            for i in r:
                a = affinity(i)
                t = a.thread if isinstance(a, SharedPtr) else int(a) % T
                if t == me:
                    yield i
        return gen()
    raise TypeError(f"upc.forall(): affinity must be None, an int, a shared array or a "
                    f"function, got {type(affinity).__name__}")
