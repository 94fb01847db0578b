"""Remote memory access: put/get, their nbi forms, strided iput/iget and scalar p/g
(OpenSHMEM 1.5 §9.6; shmem4py's argument order), and the checks of their arrays that
put-with-signal and the collectives share.

Within the node a put or get is one direct copy to or from the target's segment (amnet's C
``ep.put``/``ep.get``). To another node a put goes out as amnet's ``put_nbi`` (the source
is copied, so it may be reused at once, as OpenSHMEM's ``put`` promises) and is complete
after :func:`shmem_rt.quiet`; a get there waits for its data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._context import CONTEXT
from ._init import current
from ._memory import check_pe, sym_offset
from ._state import PE
from ._team import ctx_pe

_ND = np.ndarray

_SHMEM_KINDS = frozenset("biufc")  # the numpy kinds OpenSHMEM has types for (and chars)


def buffer_of(a: Any, what: str, name: str, writable: bool) -> np.ndarray:
    """``a`` as a flat array in memory order (a view), checked as shmem4py checks."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype.kind not in _SHMEM_KINDS and a.dtype.char not in "cS":
        raise TypeError(f"{what}: {name} has dtype {a.dtype}, which OpenSHMEM has no type "
                        "for (use an integer, float or complex dtype)")
    flags = a.flags
    if writable and not flags.writeable:
        raise ValueError(f"{what}: {name} is read-only")
    if not (flags.c_contiguous or flags.f_contiguous):
        raise ValueError(f"{what}: {name} is not contiguous (use iput/iget for strided "
                         "transfers, or pass a contiguous copy)")
    return a if a.ndim == 1 else a.reshape(-1, order="A")


def count_of(t: np.ndarray, s: np.ndarray, size: Any, what: str, tst: int = 1,
             sst: int = 1) -> int:
    """How many elements move: ``size`` (default: as many as both hold at those strides).

    Raises:
        TypeError: different dtypes. ValueError: a bad ``size``, or more than one holds.
    """
    if t.dtype != s.dtype:
        raise TypeError(f"{what}: target has dtype {t.dtype} and source {s.dtype}; they "
                        "must be the same")
    tsize = -(-t.size // tst)
    ssize = -(-s.size // sst)
    if size is None:
        return min(tsize, ssize)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ValueError(f"{what}: size must be an int >= 0, got {size!r}")
    if size > tsize or size > ssize:
        raise ValueError(f"{what}: size {size} is more than the target ({tsize}) or the "
                         f"source ({ssize}) holds")
    return int(size)


def _checked(what: str, target: Any, source: Any, pe: Any, size: Any, ctx: Any,
             put: bool) -> tuple[PE, int, np.ndarray, int]:
    """The general route's checks of a put (``put``) or get: the PE (a world PE), the
    local side cut to the elements that move, and the symmetric side's offset."""
    st = current()
    pe = ctx_pe(ctx, pe, what)
    t = buffer_of(target, what, "target", True)
    s = buffer_of(source, what, "source", False)
    n = count_of(t, s, size, what)
    off = sym_offset(st, t if put else s, what, "target" if put else "source")
    pe = check_pe(st, pe, what)
    local = s if put else t
    return st, pe, local if n == local.size else local[:n], off


def _put(what: str, target: Any, source: Any, pe: Any, size: Any, ctx: Any) -> None:
    st, pe, s, off = _checked(what, target, source, pe, size, ctx, True)
    if st.local[pe]:
        st.ep.put(pe, off, s)
        if st.nudging:
            st.touched(pe)
    else:  # amnet copies the source: it may be reused at once, as OpenSHMEM's put says
        st.ep.put_nbi(pe, off, s)
        st.pending = True


def _get(what: str, target: Any, source: Any, pe: Any, size: Any, ctx: Any,
         nbi: bool) -> None:
    st, pe, t, off = _checked(what, target, source, pe, size, ctx, False)
    if nbi and not st.local[pe]:
        st.ep.get_nbi(pe, off, t.nbytes, t)
        st.pending = True
    else:
        st.ep.get(pe, off, t.nbytes, t)


def _fast(target: Any, source: Any, pe: Any, size: Any, put: bool) -> bool:
    """The common put (``put``) or get without the general route's checks: plain 1-D
    arrays of one dtype, whole or cut to ``size`` elements that both hold. To a PE on my
    node one C call (``ep.put_symmetric``/``get_symmetric``); to another node amnet's
    ``put_nbi`` (completed by :func:`quiet`) or ``get`` at the symmetric side's offset.
    False: nothing was done (the general route raises what is wrong)."""
    st = CONTEXT.pe
    if st is None or st.finalized or type(target) is not _ND or type(source) is not _ND \
            or target.dtype != source.dtype:
        return False
    if size is not None:
        if type(size) is not int or target.ndim != 1 or source.ndim != 1 \
                or not 0 < size <= min(target.size, source.size):
            return False
        target, source = target[:size], source[:size]
    ep = st.ep
    if put:
        if ep.put_symmetric(pe, target, source):
            if st.nudging:
                st.touched(pe)
            return True
    elif ep.get_symmetric(pe, source, target):
        return True
    if type(pe) is not int or not 0 <= pe < st.npes or st.local[pe] or target.ndim != 1 \
            or source.ndim != 1 or target.dtype.kind not in _SHMEM_KINDS:
        return False
    sym, loc = (target, source) if put else (source, target)
    if not (loc.flags.c_contiguous and sym.flags.c_contiguous) \
            or (put and not sym.flags.writeable) or (not put and not loc.flags.writeable):
        return False
    off = ep.segment_offset(sym)
    if off < st.heap.lo:
        return False
    if loc.size != sym.size:  # size None: the shorter of the two
        n = min(loc.size, sym.size)
        loc = loc[:n]
    if put:
        ep.put_nbi(pe, off, loc)
        st.pending = True
    else:
        ep.get(pe, off, loc.nbytes, loc)
    return True


def put(target: np.ndarray, source: np.ndarray, pe: int, size: int | None = None,
        ctx: Any = None) -> None:
    """Copy ``size`` elements of ``source`` (local) into ``target`` (symmetric) on PE
    ``pe``. ``source`` may be reused when it returns; the data is at ``pe`` after
    :func:`quiet` (at once within the node).

    Raises:
        TypeError: not numpy arrays, different dtypes. ValueError: not contiguous, target
            not symmetric or read-only, ``size`` too large. amnet.RankError: bad ``pe``.
    """
    if ctx is None and _fast(target, source, pe, size, True):
        return
    _put("shmem.put()", target, source, pe, size, ctx)


def get(target: np.ndarray, source: np.ndarray, pe: int, size: int | None = None,
        ctx: Any = None) -> None:
    """Copy ``size`` elements of ``source`` (symmetric) on PE ``pe`` into ``target``
    (local); the data is there when it returns.

    Raises: as :func:`put` (``source`` must be symmetric, ``target`` writable).
    """
    if ctx is None and _fast(target, source, pe, size, False):
        return
    _get("shmem.get()", target, source, pe, size, ctx, False)


def put_nbi(target: np.ndarray, source: np.ndarray, pe: int, size: int | None = None,
            ctx: Any = None) -> None:
    """:func:`put` that may return before ``source`` is read: reuse ``source`` only after
    :func:`quiet` (shmem_rt copies it anyway, so reuse is safe at once)."""
    if ctx is None and _fast(target, source, pe, size, True):
        return
    _put("shmem.put_nbi()", target, source, pe, size, ctx)


def get_nbi(target: np.ndarray, source: np.ndarray, pe: int, size: int | None = None,
            ctx: Any = None) -> None:
    """:func:`get` completed by :func:`quiet`: read ``target`` only after it."""
    _get("shmem.get_nbi()", target, source, pe, size, ctx, True)


def strides_of(tst: Any, sst: Any, what: str) -> tuple[int, int]:
    """The target's and the source's strides, checked.

    Raises:
        ValueError: a stride that is no int >= 1.
    """
    for name, v in (("tst", tst), ("sst", sst)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"{what}: {name} must be an int >= 1, got {v!r}")
    return int(tst), int(sst)


def _strided(what: str, target: Any, source: Any, pe: Any, tst: Any, sst: Any, size: Any,
             ctx: Any, put: bool) -> None:
    """iput (``put``) or iget: the checks, then one strided copy on the target's segment
    within the node, or a VIS transfer (a put completed by :func:`shmem_rt.quiet`)."""
    st = current()
    pe = ctx_pe(ctx, pe, what)
    tst, sst = strides_of(tst, sst, what)
    t = buffer_of(target, what, "target", True)
    s = buffer_of(source, what, "source", False)
    n = count_of(t, s, size, what, tst, sst)
    off = sym_offset(st, t if put else s, what, "target" if put else "source")
    pe = check_pe(st, pe, what)
    if n == 0:
        return
    seg = st.view(pe)
    isz = t.itemsize
    if put:
        data = s[::sst][:n]
        if seg is not None:
            np.ndarray((n,), t.dtype, buffer=seg, offset=off, strides=(tst * isz,))[:] = data
            if st.nudging:
                st.touched(pe)
        else:
            st.ep.vis.put_strided_nbi(pe, off, [tst * isz], np.ascontiguousarray(data), 0,
                                      [isz], isz, [n])
            st.pending = True
    elif seg is not None:
        t[::tst][:n] = np.ndarray((n,), t.dtype, buffer=seg, offset=off,
                                  strides=(sst * isz,))
    else:
        tmp = np.empty(n, t.dtype)
        st.ep.vis.get_strided(pe, tmp, None, None, off, [sst * isz], isz, [n])
        t[::tst][:n] = tmp


def iput(target: np.ndarray, source: np.ndarray, pe: int, tst: int = 1, sst: int = 1,
         size: int | None = None, ctx: Any = None) -> None:
    """Strided put: element ``i * sst`` of ``source`` to element ``i * tst`` of ``target``
    on ``pe``, for ``i < size`` (default: as many as both hold).

    Raises: as :func:`put`, and ValueError for a stride < 1.
    """
    _strided("shmem.iput()", target, source, pe, tst, sst, size, ctx, True)


def iget(target: np.ndarray, source: np.ndarray, pe: int, tst: int = 1, sst: int = 1,
         size: int | None = None, ctx: Any = None) -> None:
    """Strided get: element ``i * sst`` of ``source`` on ``pe`` to element ``i * tst`` of
    ``target``, for ``i < size``.

    Raises: as :func:`get`, and ValueError for a stride < 1.
    """
    _strided("shmem.iget()", target, source, pe, tst, sst, size, ctx, False)


# element types whose one-element p/g are one amnet atomic (a word store or load)
_WORD = {np.dtype(np.int32): "i4", np.dtype(np.int64): "i8", np.dtype(np.uint32): "u4",
         np.dtype(np.uint64): "u8", np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}


def p(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    """Write one element, ``value``, to the first element of ``target`` (symmetric) on
    ``pe`` (OpenSHMEM's ``shmem_p``)."""
    st = CONTEXT.pe
    if ctx is None and st is not None and not st.finalized and type(target) is _ND \
            and type(pe) is int and 0 <= pe < st.npes:
        dt = _WORD.get(target.dtype)
        if dt is not None and type(value) is (float if dt[0] == "f" else int):
            off = st.ep.segment_offset(target)
            if off >= st.heap.lo and target.size:
                st.ep.atomic(pe, off, "set", value, None, dt)
                if st.nudging:
                    st.touched(pe)
                return
    a = buffer_of(target, "shmem.p()", "target", True)
    put(a[:1], np.array([value], dtype=a.dtype), pe, 1, ctx)


def g(source: np.ndarray, pe: int, ctx: Any = None) -> Any:
    """The first element of ``source`` (symmetric) on ``pe``, as a numpy scalar
    (OpenSHMEM's ``shmem_g``)."""
    st = CONTEXT.pe
    if ctx is None and st is not None and not st.finalized and type(source) is _ND \
            and type(pe) is int and 0 <= pe < st.npes:
        dt = _WORD.get(source.dtype)
        if dt is not None:
            off = st.ep.segment_offset(source)
            if off >= st.heap.lo and source.size:
                return source.dtype.type(st.ep.atomic(pe, off, "get", None, None, dt))
    a = buffer_of(source, "shmem.g()", "source", False)
    out = np.empty(1, dtype=a.dtype)
    get(out, a[:1], pe, 1, ctx)
    return out[0]
