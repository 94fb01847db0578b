"""Point-to-point synchronisation (wait_until/test and their all/any/some/vector forms,
signal_wait_until), ordering (fence, quiet) and the barriers (OpenSHMEM 1.5 §9.10-9.11).

A wait reads the word where it is: another PE's put or atomic within the node is a store
into this PE's memory, seen without a message; from another node it arrives as an AM that
the wait's progress runs. The wait spins while amnet spins (the ``spin`` wait mode) and
otherwise re-reads the word after slices that grow from 20 µs to 1 ms, serving AMs
meanwhile; with more PEs than cores (amnet's ``block`` wait mode) every slice is 2 ms of
real sleep, so the PEs share the cores.
"""

from __future__ import annotations

import enum
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _state
from ._state import SLEEPING


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

SLICE_S, MAX_SLICE_S = 20e-6, 1e-3
#: With more ranks than cores (amnet's ``block`` wait mode) a slice really sleeps: amnet
#: turns a wait shorter than its conduit's 1 ms poll into polling, which would keep every
#: core busy while the PE that is to store the word waits for one.
BLOCK_SLICE_S = 2e-3
SPIN_READS = 50  # reads of the word (a few µs) before the first wait with progress
NAP_S = 10e-6  # a wait's nap when other PEs share its process (the kernel makes it ~60 µs)


def _slices(st: _state.PE) -> tuple[float, float]:
    if st.ep.wait_mode == "block":
        return BLOCK_SLICE_S, BLOCK_SLICE_S
    return SLICE_S, MAX_SLICE_S


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


def wait(st: _state.PE, pred: Callable[[], Any], what: str) -> None:
    """Make progress until ``pred()`` holds (see the module's docstring)."""
    for _ in range(SPIN_READS):  # a PE on my node may be about to store it
        if pred():
            return
    port = st.port
    s, top = _slices(st)
    with port.waiting(what):
        if st.siblings and s < BLOCK_SLICE_S:
            # PEs of my process share one interpreter lock: a spinning wait would keep the
            # sibling that is to store the word from running for a whole switch interval
            # (5 ms). Sleeping a moment hands it the lock (and polls between the naps).
            while True:
                port.poll()
                if pred():
                    return
                time.sleep(NAP_S)
                if pred():
                    return
        if st.nudging:  # a sleep that a store into my memory can end: see PE.touched
            ep = st.ep
            while True:
                ep.atomic(st.me, SLEEPING, "fadd", 1)
                try:
                    if port.wait_until(pred, timeout=s):
                        return
                finally:
                    ep.atomic(st.me, SLEEPING, "fadd", -1)
                s = min(2 * s, top)
        if not st.any_other:  # only messages change my memory, and each one ends a wait
            port.wait_until(pred)
            return
        while not port.wait_until(pred, timeout=s):
            s = min(2 * s, top)


def wait_remote(st: _state.PE, check: Callable[[], Any], what: str) -> None:
    """Make progress until ``check()`` holds, where ``check`` itself communicates (reads a
    word on another node): it runs between waits, never as a wait's condition (a
    condition runs inside the progress engine, where a blocking call must not)."""
    port = st.port
    s, top = _slices(st)
    with port.waiting(what):
        while not check():
            port.wait_until(_never, timeout=s)
            s = min(2 * s, top)


def _never() -> bool:
    return False


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
    wait(_state.current(), lambda: op(flat[0], value), what)


def test(ivar: np.ndarray, cmp: Any, value: Any) -> bool:
    """Whether ``ivar`` compares true with ``value`` now (after one poll)."""
    what = "shmem.test()"
    op = _OPS[parse_cmp(cmp, what)]
    flat = _ivar(ivar, what, True)
    _state.current().port.poll()
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
    st = _state.current()
    if kind == "all":
        wait(st, lambda: _all(flat, uf, mask, v), what)
        return None
    if not mask.any():  # nothing takes part: OpenSHMEM returns at once
        return None if kind == "any" else []
    if kind == "any":
        wait(st, lambda: _first(flat, uf, mask, v) is not None, what)
        return _first(flat, uf, mask, v)
    wait(st, lambda: bool(_some(flat, uf, mask, v)), what)
    return _some(flat, uf, mask, v)


def _test_form(kind: str, ivars, cmp, values, status, vector: bool):
    what = f"shmem.test_{kind}{'_vector' if vector else ''}()"
    flat, uf, mask, v = _setup(ivars, cmp, status, what, values, vector)
    _state.current().port.poll()
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
    from ._rma import signal_offset

    what = "shmem.signal_wait_until()"
    op = _OPS[parse_cmp(cmp, what)]
    st = _state.current()
    off = signal_offset(st, signal, what)
    flat = signal.reshape(-1)
    wait(st, lambda: op(int(flat[0]), value), what)
    return st.ep.atomic(st.me, off, "get", dtype="u8")


# -- ordering -------------------------------------------------------------------------------
def quiet(ctx: Any = None) -> None:
    """Complete every put, nbi operation and put-with-signal this PE started (on any
    context: completing more than a context's own is allowed)."""
    st = getattr(_state._tls, "pe", None)
    if ctx is None and st is not None and not st.pending and not st.finalized:
        return
    st = _state.current()
    if ctx is not None:
        from ._team import check_ctx

        check_ctx(ctx, "shmem.quiet()")
    if st.pending:
        _complete(st, "shmem.quiet()")


def _complete(st: _state.PE, what: str) -> None:
    """Complete this PE's puts (a timeout's diagnosis says the PE waits in ``what``)."""
    with st.port.waiting(what):
        st.ep.wait_nbi()
    st.pending = False


def fence(ctx: Any = None) -> None:
    """Order this PE's puts to each PE: those before arrive before those after. shmem_rt
    completes them (as :func:`quiet`), which orders them everywhere."""
    quiet(ctx)


# -- barriers -------------------------------------------------------------------------------
def barrier_all() -> None:
    """:func:`quiet`, then wait until every PE entered (OpenSHMEM's ``shmem_barrier_all``)."""
    st = getattr(_state._tls, "pe", None)
    if st is None or st.pending or st.finalized:
        st = _state.current()
        if st.pending:
            _complete(st, "shmem.barrier_all(), completing this PE's puts")
    st.teams.world_barrier("shmem.barrier_all()")


def sync_all() -> None:
    """Wait until every PE entered, without completing this PE's puts."""
    _state.current().teams.world_barrier("shmem.sync_all()")


def sync(team: Any = None) -> None:
    """Wait until every member of ``team`` (default: the world) entered."""
    if team is None:
        return sync_all()
    from ._team import team_rec

    team_rec(team, "shmem.sync()").sync()
