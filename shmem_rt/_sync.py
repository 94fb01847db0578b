"""Point-to-point synchronisation (wait_until/test and their all/any/some/vector forms,
signal_wait_until), ordering (fence, quiet) and the barriers (OpenSHMEM 1.5 §9.10-9.11).

A wait reads the word where it is (:meth:`shmem_rt._state.PE.wait`, which says how it
spins, sleeps and is woken); a quiet completes the puts to other nodes
(:meth:`shmem_rt._state.PE.complete`).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._context import CONTEXT
from ._init import current
from ._memory import signal_offset
from ._team import check_ctx, team_rec


class CMP(enum.IntEnum):
    """Comparisons (shmem4py's values, which are Open MPI's)."""

    EQ = 0
    NE = 1
    GT = 2
    LE = 3
    LT = 4
    GE = 5


CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, CMP_GE = (CMP.EQ, CMP.NE, CMP.GT, CMP.LE, CMP.LT,
                                                  CMP.GE)
_OPS: dict[int, Callable[[Any, Any], Any]] = {
    CMP.EQ: operator.eq, CMP.NE: operator.ne, CMP.GT: operator.gt, CMP.LE: operator.le,
    CMP.LT: operator.lt, CMP.GE: operator.ge}
_UFUNCS = {CMP.EQ: np.equal, CMP.NE: np.not_equal, CMP.GT: np.greater,
           CMP.LE: np.less_equal, CMP.LT: np.less, CMP.GE: np.greater_equal}
_STR = {"==": CMP.EQ, "!=": CMP.NE, ">": CMP.GT, "<=": CMP.LE, "<": CMP.LT, ">=": CMP.GE}

def parse_cmp(cmp: Any, what: str) -> CMP:
    """``cmp`` as a :class:`CMP` (also ``"=="``... and ``"eq"``..., as shmem4py takes).

    Raises:
        ValueError: no comparison.
    """
    if isinstance(cmp, str):
        c = _STR.get(cmp, CMP.__members__.get(cmp.upper()))  # (CMP.EQ is 0: no `or`)
        if c is not None:
            return c
    elif isinstance(cmp, int | np.integer) and not isinstance(cmp, bool) and cmp in _OPS:
        return CMP(int(cmp))
    raise ValueError(f"{what}: cmp must be a CMP (CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, "
                     f"CMP_GE) or one of '==', '!=', '>', '<=', '<', '>=', got {cmp!r}")


def _ivar(ivar: Any, what: str, one: bool) -> np.ndarray:
    if not isinstance(ivar, np.ndarray):
        raise TypeError(f"{what}: ivar must be a numpy array, got {type(ivar).__name__}")
    if ivar.dtype.kind not in "iu":
        raise TypeError(f"{what}: ivar has dtype {ivar.dtype}; point-to-point "
                        "synchronisation takes integer words")
    if one and ivar.size != 1:
        raise ValueError(f"{what}: ivar must have exactly one element, has {ivar.size}")
    if not (ivar.flags.c_contiguous or ivar.flags.f_contiguous):
        raise ValueError(f"{what}: ivars must be contiguous")
    return ivar.reshape(-1, order="A")


def wait_until(ivar: np.ndarray, cmp: Any, value: Any) -> None:
    """Wait until ``ivar`` (one element, usually symmetric) compares true with ``value``.

    Raises:
        TypeError: ivar no integer numpy array. ValueError: not one element, bad cmp.
    """
    what = "shmem.wait_until()"
    op = _OPS[parse_cmp(cmp, what)]
    flat = _ivar(ivar, what, True)
    current().wait(lambda: op(flat[0], value), what)


def test(ivar: np.ndarray, cmp: Any, value: Any) -> bool:
    """Whether ``ivar`` compares true with ``value`` now (after one poll)."""
    what = "shmem.test()"
    op = _OPS[parse_cmp(cmp, what)]
    flat = _ivar(ivar, what, True)
    current().port.poll()
    return bool(op(flat[0], value))


def _mask(status: Any, n: int, what: str) -> np.ndarray:
    """Which ivars take part: status 0 (or no status) means it does."""
    if status is None:
        return np.ones(n, dtype=bool)
    s = np.asarray(status)
    if s.ndim != 1 or s.size < n or s.dtype.kind not in "iub":
        raise ValueError(f"{what}: status must be a sequence of at least {n} ints")
    return s[:n] == 0


def _values(values: Any, n: int, dtype: np.dtype, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=dtype)
    if v.ndim != 1 or v.size < n:
        raise ValueError(f"{what}: values must be a sequence of at least {n} numbers")
    return v[:n]


def _setup(ivars: Any, cmp: Any, status: Any, what: str, values: Any = None,
           vector: bool = False) -> tuple[np.ndarray, Any, np.ndarray, Any]:
    c = parse_cmp(cmp, what)
    flat = _ivar(ivars, what, False)
    mask = _mask(status, flat.size, what)
    v = _values(values, flat.size, flat.dtype, what) if vector else values
    return flat, _UFUNCS[c], mask, v


def _all(flat, uf, mask, v) -> bool:
    return bool(np.all(uf(flat, v)[mask]))


def _first(flat, uf, mask, v) -> int | None:
    hit = np.flatnonzero(uf(flat, v) & mask)
    return int(hit[0]) if hit.size else None


def _some(flat, uf, mask, v) -> list[int]:
    return [int(i) for i in np.flatnonzero(uf(flat, v) & mask)]


def _wait_form(kind: str, ivars, cmp, values, status, vector: bool):
    what = f"shmem.wait_until_{kind}{'_vector' if vector else ''}()"
    flat, uf, mask, v = _setup(ivars, cmp, status, what, values, vector)
    st = current()
    if kind == "all":
        st.wait(lambda: _all(flat, uf, mask, v), what)
        return None
    if not mask.any():  # nothing takes part: OpenSHMEM returns at once
        return None if kind == "any" else []
    if kind == "any":
        st.wait(lambda: _first(flat, uf, mask, v) is not None, what)
        return _first(flat, uf, mask, v)
    st.wait(lambda: bool(_some(flat, uf, mask, v)), what)
    return _some(flat, uf, mask, v)


def _test_form(kind: str, ivars, cmp, values, status, vector: bool):
    what = f"shmem.test_{kind}{'_vector' if vector else ''}()"
    flat, uf, mask, v = _setup(ivars, cmp, status, what, values, vector)
    current().port.poll()
    if kind == "all":
        return _all(flat, uf, mask, v)
    return _first(flat, uf, mask, v) if kind == "any" else _some(flat, uf, mask, v)


def wait_until_all(ivars: np.ndarray, cmp: Any, value: Any,
                   status: Sequence[int] | None = None) -> None:
    """Wait until every ivar whose ``status`` is 0 compares true with ``value``."""
    return _wait_form("all", ivars, cmp, value, status, False)


def wait_until_any(ivars: np.ndarray, cmp: Any, value: Any,
                   status: Sequence[int] | None = None) -> int | None:
    """Wait until one ivar (status 0) compares true; return its index (None: none takes
    part)."""
    return _wait_form("any", ivars, cmp, value, status, False)


def wait_until_some(ivars: np.ndarray, cmp: Any, value: Any,
                    status: Sequence[int] | None = None) -> list[int]:
    """Wait until at least one ivar (status 0) compares true; return the indices of all
    that do."""
    return _wait_form("some", ivars, cmp, value, status, False)


def wait_until_all_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                          status: Sequence[int] | None = None) -> None:
    """:func:`wait_until_all` with one value per ivar."""
    return _wait_form("all", ivars, cmp, values, status, True)


def wait_until_any_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                          status: Sequence[int] | None = None) -> int | None:
    return _wait_form("any", ivars, cmp, values, status, True)


def wait_until_some_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                           status: Sequence[int] | None = None) -> list[int]:
    return _wait_form("some", ivars, cmp, values, status, True)


def test_all(ivars: np.ndarray, cmp: Any, value: Any,
             status: Sequence[int] | None = None) -> bool:
    return _test_form("all", ivars, cmp, value, status, False)


def test_any(ivars: np.ndarray, cmp: Any, value: Any,
             status: Sequence[int] | None = None) -> int | None:
    return _test_form("any", ivars, cmp, value, status, False)


def test_some(ivars: np.ndarray, cmp: Any, value: Any,
              status: Sequence[int] | None = None) -> list[int]:
    return _test_form("some", ivars, cmp, value, status, False)


def test_all_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                    status: Sequence[int] | None = None) -> bool:
    return _test_form("all", ivars, cmp, values, status, True)


def test_any_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                    status: Sequence[int] | None = None) -> int | None:
    return _test_form("any", ivars, cmp, values, status, True)


def test_some_vector(ivars: np.ndarray, cmp: Any, values: Sequence[Any],
                     status: Sequence[int] | None = None) -> list[int]:
    return _test_form("some", ivars, cmp, values, status, True)


def signal_wait_until(signal: np.ndarray, cmp: Any, value: int) -> int:
    """Wait until this PE's ``signal`` compares true with ``value``; return the signal's
    value then."""
    what = "shmem.signal_wait_until()"
    op = _OPS[parse_cmp(cmp, what)]
    st = current()
    off = signal_offset(st, signal, what)
    flat = signal.reshape(-1)
    st.wait(lambda: op(int(flat[0]), value), what)
    return st.ep.atomic(st.me, off, "get", dtype="u8")


# -- ordering -------------------------------------------------------------------------------
def quiet(ctx: Any = None) -> None:
    """Complete every put, nbi operation and put-with-signal this PE started (on any
    context: completing more than a context's own is allowed)."""
    st = CONTEXT.pe
    if ctx is None and st is not None and not st.pending and not st.finalized:
        return
    st = current()
    if ctx is not None:
        check_ctx(ctx, "shmem.quiet()")
    st.complete("shmem.quiet()")


def fence(ctx: Any = None) -> None:
    """Order this PE's puts to each PE: those before arrive before those after. shmem_rt
    completes them (as :func:`quiet`), which orders them everywhere."""
    quiet(ctx)


# -- barriers -------------------------------------------------------------------------------
def barrier_all() -> None:
    """:func:`quiet`, then wait until every PE entered (OpenSHMEM's ``shmem_barrier_all``)."""
    st = CONTEXT.pe
    if st is None or st.pending or st.finalized:
        st = current()
        st.complete("shmem.barrier_all(), completing this PE's puts")
    st.teams.world_barrier("shmem.barrier_all()")


def sync_all() -> None:
    """Wait until every PE entered, without completing this PE's puts."""
    current().teams.world_barrier("shmem.sync_all()")


def sync(team: Any = None) -> None:
    """Wait until every member of ``team`` (default: the world) entered."""
    if team is None:
        return sync_all()
    team_rec(team, "shmem.sync()").sync()
