"""The ranks' side of the collectives part of ``amnet-bench hybrid``: amnet's collectives on
the world team (``ep.coll.world``, every rank of every node), default algorithms, in one job
of one procs x threads split.

For each collective of ``plan["collectives"]`` and block size of ``plan["sizes"]`` (the
barrier has no size): a barrier, then ``samples + 1`` rounds of ``calls`` calls, the first
round a warm-up that is not kept. Every call is timed on its own; its result is checked
against a model (:func:`check`) once its clock has stopped, so the check is never in the
figure and a wrong answer is reported, not measured. A rank returns, per case, its mean
seconds per call for every kept round, and the first wrong results it saw.

The calls (``k``: the call's number in its case, warm-up included; ``P`` ranks; ``n`` bytes
a block):

- ``broadcast``: the root ``k % P`` (it moves round the ranks) sends ``n`` bytes;
- ``reduce_all``: every rank's ``max(1, n // 8)`` int64s summed (``ADD``);
- ``gather_all``: every rank's ``n`` bytes to block ``i`` of every rank's ``P x n`` bytes;
- ``exchange``: block ``j`` of rank ``i``'s ``P x n`` bytes to block ``i`` of rank ``j``'s;
- ``barrier``: no data (nothing to check).

The data depend on ``k``, so a call that leaves its destination as the call before left it
is wrong too.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

COLLECTIVES = ("broadcast", "reduce_all", "gather_all", "exchange", "barrier")
UNSIZED = ("barrier",)
MAX_ERRORS = 3  # wrong results a rank reports per case (the first ones)


def cases(collectives: list[str], sizes: list[int]) -> list[tuple[str, int | None]]:
    """The (collective, block size) cases of a plan, in the order they run; None: no size."""
    return [(w, None) if w in UNSIZED else (w, n)
            for w in collectives for n in ([None] if w in UNSIZED else sizes)]


def key(what: str, n: int | None) -> str:
    """A case's name in a rank's result: ``broadcast/4096``, ``barrier``."""
    return what if n is None else f"{what}/{n}"


def _block(tag: int, n: int, k: int) -> np.ndarray:
    """The ``n`` bytes of block ``tag`` in call ``k``."""
    return ((np.arange(n, dtype=np.int64) * 7 + tag * 31 + k * 13) % 251).astype(np.uint8)


def _ints(n: int) -> int:
    """reduce_all's int64s for a block of ``n`` bytes."""
    return max(1, n // 8)


def source(what: str, n: int, P: int, me: int, k: int) -> np.ndarray | None:
    """Rank ``me``'s source of call ``k`` (None: a broadcast's non-root sends nothing)."""
    if what == "broadcast":
        return _block(k % P, n, k) if me == k % P else None
    if what == "reduce_all":
        return np.arange(_ints(n), dtype=np.int64) * 3 + me * 5 + k
    if what == "gather_all":
        return _block(me, n, k)
    return np.concatenate([_block(me * P + j, n, k) for j in range(P)])  # exchange


def expect(what: str, n: int, P: int, me: int, k: int) -> np.ndarray:
    """The model: what rank ``me``'s destination holds after call ``k``."""
    if what == "broadcast":
        return _block(k % P, n, k)
    if what == "reduce_all":  # sum over r of (3 i + 5 r + k)
        return np.arange(_ints(n), dtype=np.int64) * 3 * P + 5 * P * (P - 1) // 2 + P * k
    if what == "gather_all":
        return np.concatenate([_block(r, n, k) for r in range(P)])
    return np.concatenate([_block(s * P + me, n, k) for s in range(P)])  # exchange


def check(what: str, n: int, P: int, me: int, k: int, got: np.ndarray) -> str | None:
    """None when ``got`` is the model's answer for call ``k`` on rank ``me``, else what
    differs: the first element, the value got and the value expected."""
    want = expect(what, n, P, me, k)
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    if got.shape != want.shape:
        return f"{what}, {n} B, call {k}, rank {me}: {got.shape} elements, expected {want.shape}"
    i = int(np.flatnonzero(got != want)[0])
    return (f"{what}, {n} B, call {k}, rank {me}: element {i} is {got[i]}, expected "
            f"{want[i]} ({int(np.count_nonzero(got != want))} of {want.size} differ)")


def _call(team: Any, what: str, n: int | None) -> tuple[Any, np.ndarray | None]:
    """(call(src, k), destination) of one case on ``team``: the destination is reused by
    every call of the case."""
    if what == "barrier":
        return (lambda src, k: team.barrier()), None
    from amnet.coll import ADD

    P = team.size
    if what == "reduce_all":
        dst = np.zeros(_ints(n), np.int64)
        return (lambda src, k: team.reduce_all(dst, src, ADD)), dst
    if what == "broadcast":
        dst = np.zeros(n, np.uint8)
        return (lambda src, k: team.broadcast(dst, src, root=k % P)), dst
    dst = np.zeros(n * P, np.uint8)
    if what == "gather_all":
        return (lambda src, k: team.gather_all(dst, src)), dst
    return (lambda src, k: team.exchange(dst, src)), dst


def coll_part(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """Every rank: ``{"seconds": {case: [mean seconds per call, per kept round]},
    "errors": [the first wrong results of each case, as :func:`check` says them],
    "wrong": how many calls gave a wrong result}``."""
    team = ep.coll.world
    P, me = team.size, team.index
    pc = time.perf_counter
    seconds: dict[str, list[float]] = {}
    errors: list[str] = []
    wrong_in_all = 0
    for what, n in cases(plan["collectives"], plan["sizes"]):
        call, dst = _call(team, what, n)
        wrong = 0
        secs = []
        team.barrier()
        for rnd in range(plan["samples"] + 1):
            total = 0.0
            for c in range(plan["calls"]):
                k = rnd * plan["calls"] + c
                src = None if n is None else source(what, n, P, me, k)
                t0 = pc()
                call(src, k)
                total += pc() - t0
                if dst is not None:
                    bad = check(what, n, P, me, k, dst)
                    if bad is not None:
                        wrong += 1
                        if wrong <= MAX_ERRORS:
                            errors.append(bad)
            if rnd:
                secs.append(total / plan["calls"])
        seconds[key(what, n)] = secs
        wrong_in_all += wrong
    return {"seconds": seconds, "errors": errors, "wrong": wrong_in_all}


# -- the suite's side: what a job's records say ----------------------------------------------


def verify(recs: list[dict[str, Any]], split: str) -> None:
    """Refuse a job whose collectives gave a wrong answer on any rank.

    Raises:
        BenchError: naming the split, the first wrong result and how many calls were wrong.
    """
    errs = [e for r in recs for e in r["errors"]]
    if errs:
        from ._registry import BenchError

        raise BenchError(f"collectives ({split}) computed a wrong answer, not measured: "
                         f"{errs[0]} ({sum(r['wrong'] for r in recs)} wrong results in all)")


def job_seconds(recs: list[dict[str, Any]]) -> dict[str, float]:
    """One job's figure per case: the slowest rank's mean seconds per call in each round,
    the median over rounds."""
    from ._stats import median

    return {case: median([max(x) for x in zip(*(r["seconds"][case] for r in recs),
                                              strict=True)])
            for case in recs[0]["seconds"]}
