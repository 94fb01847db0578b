"""The team collectives (OpenSHMEM 1.5 §9.9; shmem4py's argument orders and size rules):
broadcast, collect, fcollect, alltoall, alltoalls and the reductions, each one call of the
team's ``amnet.coll`` team (so mismatched calls raise ``amnet.CollectiveMismatch`` on every
member instead of hanging)."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

import amnet
import amnet.coll as C

from ._rma import buffer_of, strides_of
from ._state import WORLD, TeamRec
from ._team import TEAM_WORLD, Team, team_rec


# -- collectives ----------------------------------------------------------------------------
def _team_of(team: Any, what: str) -> tuple[TeamRec, bool]:
    t = TEAM_WORLD if team is None else team
    return team_rec(t, what), t._id == WORLD


def _arrays(target: Any, source: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    t = buffer_of(target, what, "target", True)
    s = buffer_of(source, what, "source", False)
    if t.dtype != s.dtype:
        raise TypeError(f"{what}: target has dtype {t.dtype} and source {s.dtype}; they "
                        "must be the same")
    return t, s


def _size(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ValueError(f"{what}: size must be an int >= 0, got {size!r}")
    return int(size)


def broadcast(target: np.ndarray, source: np.ndarray, root: int, size: int | None = None,
              team: Team | None = None) -> None:
    """``size`` elements of ``source`` on member ``root`` into ``target`` on every member
    (the root's too, as OpenSHMEM 1.5 says)."""
    what = "shmem.broadcast()"
    rec, _ = _team_of(team, what)
    t, s = _arrays(target, source, what)
    n = min(t.size, s.size) if size is None else _size(size, what)
    if n > t.size or n > s.size:
        raise ValueError(f"{what}: size {n} is more than target ({t.size}) or source "
                         f"({s.size}) holds")
    if isinstance(root, bool) or not isinstance(root, int | np.integer) \
            or not 0 <= root < rec.n:
        raise amnet.RankError(f"{what}: root {root!r} is not a member of the team "
                              f"(0..{rec.n - 1})")
    if n:  # (amnet.coll moves at least one byte)
        rec.coll.broadcast(t[:n], s[:n], root=int(root))


def collect(target: np.ndarray, source: np.ndarray, size: int | None = None,
            team: Team | None = None) -> None:
    """Every member's ``size`` elements (sizes may differ), concatenated in member order,
    into ``target`` on every member."""
    what = "shmem.collect()"
    rec, _ = _team_of(team, what)
    t, s = _arrays(target, source, what)
    n = s.size if size is None else _size(size, what)
    if n > s.size:
        raise ValueError(f"{what}: size {n} is more than source ({s.size}) holds")
    sizes = np.empty(rec.n, dtype=np.int64)
    rec.coll.gather_all(sizes, np.array([n], dtype=np.int64))
    total = int(sizes.sum())
    if total > t.size:
        raise ValueError(f"{what}: the members' blocks add up to {total} elements but "
                         f"target holds {t.size}")
    m = int(sizes.max()) if rec.n else 0
    if m == 0:
        return
    mine = np.zeros(m, dtype=s.dtype)
    mine[:n] = s[:n]
    allb = np.empty((rec.n, m), dtype=s.dtype)
    rec.coll.gather_all(allb, mine)
    pos = 0
    for i in range(rec.n):
        k = int(sizes[i])
        t[pos:pos + k] = allb[i, :k]
        pos += k


def fcollect(target: np.ndarray, source: np.ndarray, size: int | None = None,
             team: Team | None = None) -> None:
    """Every member's ``size`` elements (the same size everywhere), in member order, into
    ``target`` on every member."""
    what = "shmem.fcollect()"
    rec, _ = _team_of(team, what)
    t, s = _arrays(target, source, what)
    n = s.size if size is None else _size(size, what)
    if n > s.size or n * rec.n > t.size:
        raise ValueError(f"{what}: size {n} times {rec.n} members is more than target "
                         f"({t.size}) holds, or more than source ({s.size})")
    if n:
        rec.coll.gather_all(t[:n * rec.n], s[:n])


def alltoall(target: np.ndarray, source: np.ndarray, size: int | None = None,
             team: Team | None = None) -> None:
    """Block j (``size`` elements) of member i's ``source`` into block i of member j's
    ``target``."""
    what = "shmem.alltoall()"
    rec, _ = _team_of(team, what)
    t, s = _arrays(target, source, what)
    if size is None:
        n, rem = divmod(min(t.size, s.size), rec.n)
        if rem:
            raise ValueError(f"{what}: {min(t.size, s.size)} elements do not split into "
                             f"{rec.n} equal blocks; pass size")
    else:
        n = _size(size, what)
    if n * rec.n > t.size or n * rec.n > s.size:
        raise ValueError(f"{what}: size {n} times {rec.n} members is more than target "
                         f"({t.size}) or source ({s.size}) holds")
    if n:
        rec.coll.exchange(t[:n * rec.n], s[:n * rec.n])


def alltoalls(target: np.ndarray, source: np.ndarray, tst: int = 1, sst: int = 1,
              size: int | None = None, team: Team | None = None) -> None:
    """:func:`alltoall` with strides: element k of the block for member j is
    ``source[(j * size + k) * sst]``, and it lands at ``target[(i * size + k) * tst]``."""
    what = "shmem.alltoalls()"
    rec, _ = _team_of(team, what)
    tst, sst = strides_of(tst, sst, what)
    t, s = _arrays(target, source, what)
    tsize, ssize = -(-t.size // tst), -(-s.size // sst)
    if size is None:
        n, rem = divmod(min(tsize, ssize), rec.n)
        if rem:
            raise ValueError(f"{what}: the strided elements do not split into {rec.n} "
                             "equal blocks; pass size")
    else:
        n = _size(size, what)
    if n * rec.n > tsize or n * rec.n > ssize:
        raise ValueError(f"{what}: size {n} times {rec.n} members is more than target or "
                         "source holds at those strides")
    if n:
        packed = np.ascontiguousarray(s[::sst][:n * rec.n])
        out = np.empty(n * rec.n, dtype=t.dtype)
        rec.coll.exchange(out, packed)
        t[::tst][:n * rec.n] = out


class OP(enum.StrEnum):
    """Reduction operations (shmem4py's)."""

    AND = "and"
    OR = "or"
    XOR = "xor"
    MAX = "max"
    MIN = "min"
    SUM = "sum"
    PROD = "prod"


OP_AND, OP_OR, OP_XOR, OP_MAX, OP_MIN, OP_SUM, OP_PROD = (OP.AND, OP.OR, OP.XOR, OP.MAX,
                                                          OP.MIN, OP.SUM, OP.PROD)
_COLL_OPS = {"and": C.AND, "or": C.OR, "xor": C.XOR, "max": C.MAX, "min": C.MIN,
             "sum": C.ADD, "prod": C.MULT}


def reduce(target: np.ndarray, source: np.ndarray, op: Any = OP_SUM,
           size: int | None = None, team: Team | None = None) -> None:
    """``target[k]`` on every member = ``op`` over the members' ``source[k]``, for
    ``k < size``.

    Raises:
        ValueError: an unknown op. TypeError: a bitwise op on floats, max/min on complex.
    """
    what = "shmem.reduce()"
    name = str(op).lower() if isinstance(op, str) else None
    if name not in _COLL_OPS:
        raise ValueError(f"{what}: op must be one of {', '.join(_COLL_OPS)} (OP_*), got "
                         f"{op!r}")
    rec, _ = _team_of(team, what)
    t, s = _arrays(target, source, what)
    kind = t.dtype.kind
    if name in ("and", "or", "xor") and kind not in "iu":
        raise TypeError(f"{what}: op {name!r} takes integer arrays, not {t.dtype}")
    if name in ("max", "min") and kind == "c":
        raise TypeError(f"{what}: op {name!r} does not order complex numbers")
    n = min(t.size, s.size) if size is None else _size(size, what)
    if n > t.size or n > s.size:
        raise ValueError(f"{what}: size {n} is more than target ({t.size}) or source "
                         f"({s.size}) holds")
    if n:
        src = s[:n].copy() if np.shares_memory(t, s) else s[:n]
        rec.coll.reduce_all(t[:n], src, _COLL_OPS[name])


def _named(name: str):
    def fn(target: np.ndarray, source: np.ndarray, size: int | None = None,
           team: Team | None = None) -> None:
        reduce(target, source, name, size, team)

    fn.__name__ = fn.__qualname__ = f"{name}_reduce"
    fn.__doc__ = f":func:`reduce` with ``op=OP_{name.upper()}``."
    return fn


and_reduce = _named("and")
or_reduce = _named("or")
xor_reduce = _named("xor")
max_reduce = _named("max")
min_reduce = _named("min")
sum_reduce = _named("sum")
prod_reduce = _named("prod")
