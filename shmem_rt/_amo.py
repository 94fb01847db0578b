"""Atomic memory operations (OpenSHMEM 1.5 §9.7; shmem4py's names and argument order).

Each runs amnet's ``ep.atomic`` on the target word: within the node a hardware atomic in
the caller (C), across nodes at the owner, so atomics from every PE on a word are atomic
against each other. A target is a symmetric array of one element of int32, int64, uint32,
uint64 (every operation), float32 or float64 (fetch, set, swap only, as OpenSHMEM says).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ._context import CONTEXT
from ._init import current
from ._memory import check_pe, sym_offset
from ._state import PE
from ._team import ctx_pe

_ND = np.ndarray

_INT = {np.dtype(np.int32): "i4", np.dtype(np.int64): "i8", np.dtype(np.uint32): "u4",
        np.dtype(np.uint64): "u8"}
_ANY = {**_INT, np.dtype(np.float32): "f4", np.dtype(np.float64): "f8"}


def _target(st: PE, a: Any, what: str, table: dict, name: str = "target",
            symmetric: bool = True) -> tuple[int, str]:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    dt = table.get(a.dtype)
    if dt is None:
        kinds = ("int32, int64, uint32, uint64" if table is _INT
                 else "int32, int64, uint32, uint64, float32, float64")
        raise TypeError(f"{what}: {name} has dtype {a.dtype}; this atomic takes {kinds}")
    if a.size != 1:
        raise ValueError(f"{what}: {name} must have exactly one element, has {a.size}")
    if not symmetric:
        return 0, dt
    return sym_offset(st, a, what, name), dt


def _value(v: Any, dt: str, what: str, name: str = "value") -> int | float:
    t = type(v)
    if t is int and dt[0] != "f":
        return v
    if t is float and dt[0] == "f":
        return v
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise TypeError(f"{what}: {name} must be a number, got {type(v).__name__}")
    if dt[0] == "f":
        return float(v)
    if isinstance(v, float | np.floating):
        if v != int(v):
            raise TypeError(f"{what}: {name} {v!r} is not an integer, and the target is")
    return int(v)


def _run(what: str, op: str, target: Any, pe: Any, value: Any = None, value2: Any = None,
         table: dict = _INT, ctx: Any = None) -> Any:
    st = CONTEXT.pe
    if ctx is None and st is not None and not st.finalized and type(target) is _ND \
            and target.dtype.kind in ("iu" if table is _INT else "iuf"):
        # a PE on my node: one C call (plain values, one native word in my segment)
        old = st.ep.atomic_symmetric(pe, target, op, value, value2)
        if old is not NotImplemented:
            if st.nudging and op != "get":
                st.touched(pe)
            return old
        # another node: straight to amnet's atomic when the values are plain ints
        if target.size == 1 and type(pe) is int and 0 <= pe < st.npes \
                and (value is None or type(value) is int) \
                and (value2 is None or type(value2) is int):
            dt = table.get(target.dtype)
            if dt is not None and dt[0] != "f":
                off = st.ep.segment_offset(target)
                if off >= st.heap.lo:
                    return st.ep.atomic(pe, off, op, value, value2, dt)
    st = current()
    if ctx is not None:
        pe = ctx_pe(ctx, pe, what)
    off, dt = _target(st, target, what, table)
    if type(pe) is not int or not 0 <= pe < st.npes:
        pe = check_pe(st, pe, what)
    if value is not None:
        value = _value(value, dt, what)
    if value2 is not None:
        value2 = _value(value2, dt, what)
    old = st.ep.atomic(pe, off, op, value, value2, dt)
    if st.nudging and op != "get":
        st.touched(pe)
    return old


def atomic_fetch(source: np.ndarray, pe: int, ctx: Any = None) -> Any:
    """The value of ``source`` (symmetric) on ``pe``, read atomically."""
    return _run("shmem.atomic_fetch()", "get", source, pe, table=_ANY, ctx=ctx)


def atomic_set(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    """Set ``target`` on ``pe`` to ``value`` atomically."""
    _run("shmem.atomic_set()", "set", target, pe, value, table=_ANY, ctx=ctx)


def atomic_swap(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> Any:
    """Set ``target`` on ``pe`` to ``value``; return the old value."""
    return _run("shmem.atomic_swap()", "swap", target, pe, value, table=_ANY, ctx=ctx)


def atomic_compare_swap(target: np.ndarray, cond: Any, value: Any, pe: int,
                        ctx: Any = None) -> Any:
    """Set ``target`` on ``pe`` to ``value`` if it equals ``cond``; return the old value."""
    return _run("shmem.atomic_compare_swap()", "cas", target, pe, cond, value, ctx=ctx)


def atomic_fetch_inc(target: np.ndarray, pe: int, ctx: Any = None) -> Any:
    return _run("shmem.atomic_fetch_inc()", "fadd", target, pe, 1, ctx=ctx)


def atomic_inc(target: np.ndarray, pe: int, ctx: Any = None) -> None:
    _run("shmem.atomic_inc()", "fadd", target, pe, 1, ctx=ctx)


def atomic_fetch_add(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> Any:
    """Add ``value`` to ``target`` on ``pe``; return the old value."""
    st = CONTEXT.pe
    # the OSU figure's operation: a PE on my node in one C call, without _run's layers
    if ctx is None and st is not None and not st.finalized and type(target) is _ND \
            and target.dtype.kind in "iu":
        old = st.ep.atomic_symmetric(pe, target, "fadd", value)
        if old is not NotImplemented:
            if st.nudging:
                st.touched(pe)
            return old
    return _run("shmem.atomic_fetch_add()", "fadd", target, pe, value, ctx=ctx)


def atomic_add(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    _run("shmem.atomic_add()", "fadd", target, pe, value, ctx=ctx)


def atomic_fetch_and(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> Any:
    return _run("shmem.atomic_fetch_and()", "fand", target, pe, value, ctx=ctx)


def atomic_and(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    _run("shmem.atomic_and()", "fand", target, pe, value, ctx=ctx)


def atomic_fetch_or(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> Any:
    return _run("shmem.atomic_fetch_or()", "for", target, pe, value, ctx=ctx)


def atomic_or(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    _run("shmem.atomic_or()", "for", target, pe, value, ctx=ctx)


def atomic_fetch_xor(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> Any:
    return _run("shmem.atomic_fetch_xor()", "fxor", target, pe, value, ctx=ctx)


def atomic_xor(target: np.ndarray, value: Any, pe: int, ctx: Any = None) -> None:
    _run("shmem.atomic_xor()", "fxor", target, pe, value, ctx=ctx)


# -- the nbi fetching forms: the old value lands in ``fetch`` (local), complete by quiet ----
def _nbi(what: str, fetch: Any, result_of: Any) -> None:
    current()
    if not isinstance(fetch, np.ndarray) or fetch.size != 1 or not fetch.flags.writeable:
        raise TypeError(f"{what}: fetch must be a writable numpy array of one element")
    old = result_of()
    fetch.reshape(-1)[0] = old


def _same(what: str, fetch: Any, target: Any) -> None:
    if isinstance(fetch, np.ndarray) and isinstance(target, np.ndarray) \
            and fetch.dtype != target.dtype:
        raise TypeError(f"{what}: fetch has dtype {fetch.dtype} and target {target.dtype}; "
                        "they must be the same")


def atomic_fetch_nbi(fetch: np.ndarray, source: np.ndarray, pe: int, ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_nbi()"
    _same(w, fetch, source)
    _nbi(w, fetch, lambda: _run(w, "get", source, pe, table=_ANY, ctx=ctx))


def atomic_swap_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, pe: int,
                    ctx: Any = None) -> None:
    w = "shmem.atomic_swap_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "swap", target, pe, value, table=_ANY, ctx=ctx))


def atomic_compare_swap_nbi(fetch: np.ndarray, target: np.ndarray, cond: Any, value: Any,
                            pe: int, ctx: Any = None) -> None:
    w = "shmem.atomic_compare_swap_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "cas", target, pe, cond, value, ctx=ctx))


def atomic_fetch_inc_nbi(fetch: np.ndarray, target: np.ndarray, pe: int,
                         ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_inc_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "fadd", target, pe, 1, ctx=ctx))


def atomic_fetch_add_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, pe: int,
                         ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_add_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "fadd", target, pe, value, ctx=ctx))


def atomic_fetch_and_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, pe: int,
                         ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_and_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "fand", target, pe, value, ctx=ctx))


def atomic_fetch_or_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, pe: int,
                        ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_or_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "for", target, pe, value, ctx=ctx))


def atomic_fetch_xor_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, pe: int,
                         ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_xor_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: _run(w, "fxor", target, pe, value, ctx=ctx))


class AMO(enum.StrEnum):
    """The operations of :func:`atomic_op` and :func:`atomic_fetch_op` (shmem4py's)."""

    SET = "set"
    INC = "inc"
    ADD = "add"
    AND = "and"
    OR = "or"
    XOR = "xor"


AMO_SET, AMO_INC, AMO_ADD = AMO.SET, AMO.INC, AMO.ADD
AMO_AND, AMO_OR, AMO_XOR = AMO.AND, AMO.OR, AMO.XOR
_AMO_OPS = {"set": "swap", "inc": "fadd", "add": "fadd", "and": "fand", "or": "for",
            "xor": "fxor"}


def _amo_op(op: Any, what: str) -> tuple[str, str]:
    name = str(op).lower() if isinstance(op, str) else None
    if name not in _AMO_OPS:
        raise ValueError(f"{what}: op must be one of {', '.join(_AMO_OPS)} (AMO_*), got "
                         f"{op!r}")
    return name, _AMO_OPS[name]


def atomic_op(target: np.ndarray, value: Any, op: Any, pe: int, ctx: Any = None) -> None:
    """Apply ``op`` (an :class:`AMO`) with ``value`` to ``target`` on ``pe``."""
    w = "shmem.atomic_op()"
    name, aop = _amo_op(op, w)
    _run(w, aop, target, pe, 1 if name == "inc" else value,
         table=_ANY if name == "set" else _INT, ctx=ctx)


def atomic_fetch_op(target: np.ndarray, value: Any, op: Any, pe: int, ctx: Any = None) -> Any:
    """:func:`atomic_op` returning the old value."""
    w = "shmem.atomic_fetch_op()"
    name, aop = _amo_op(op, w)
    return _run(w, aop, target, pe, 1 if name == "inc" else value,
                table=_ANY if name == "set" else _INT, ctx=ctx)


def atomic_fetch_op_nbi(fetch: np.ndarray, target: np.ndarray, value: Any, op: Any, pe: int,
                        ctx: Any = None) -> None:
    w = "shmem.atomic_fetch_op_nbi()"
    _same(w, fetch, target)
    _nbi(w, fetch, lambda: atomic_fetch_op(target, value, op, pe, ctx))
