"""Jobs for tests/test_freethreading.py: amnet's shared state under threads that really run at
once (free-threaded CPython with the lock off), and the same jobs with the interpreter lock.

- ``tables_under_traffic``: every rank grows its handler table (``register_handlers``, six
  times) while the other ranks' AMs to it land, on its siblings' threads (in-line) and on the
  thread that receives for its process; each handler counts under the rank's lock. Every AM
  must run its handler exactly once.
- ``ops_from_two_threads``: a rank starts gets to another node from its own thread while the
  work a sibling's in-line AMs deferred starts gets of the same rank on whichever thread polls:
  every get must complete once, with the bytes it asked for (the op ids of one rank are taken
  by several threads).
- ``conditions_that_progress``: every rank waits for the other process's pings with a
  condition that makes progress itself (``ep.poll()``, and a node-local atomic, which polls
  now and then), while a sibling rank-thread receives: no wait may deadlock on the wake-up of
  the waiters that its own condition's progress does (SHMEM locks hung so on 3.13t).
- ``deferred_outside_drains``: the same waits, each look at the condition deferring work
  and polling: deferred work (which sends, and may block) never runs on a thread that holds
  the process's drain lock (a condition is also looked at inside a drain).

All but the last return whether the interpreter lock was on in the rank at the end.
"""

from __future__ import annotations

import sys
import threading

ROUNDS = 6
PER = 4  # handlers registered a round
BURST = 40  # pings to every other rank a round
KICKS = 30  # in-line AMs whose deferred work starts a get
GETS = 30  # gets a rank starts itself
WAIT_S = 60.0


class _State:
    def __init__(self, ep) -> None:
        self.ep = ep
        self.lock = threading.Lock()
        self.got: dict[str, int] = {}
        self.handles: list = []


ST: dict[int, _State] = {}


def _bump(tok, key: str) -> None:
    s = ST[tok.rank]
    with s.lock:  # handlers of one rank run on several threads at once
        s.got[key] = s.got.get(key, 0) + 1


def h_ping(tok, i):
    _bump(tok, "ping")


def _numbered(i: int):
    def h(tok):
        _bump(tok, f"h{i}")

    h.__name__ = h.__qualname__ = f"h_grown{i}"
    h.__module__ = __name__
    globals()[h.__name__] = h
    return h


GROWN = [_numbered(i) for i in range(ROUNDS * PER)]


def _gil() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def _wait(ep, pred, what: str) -> None:
    if not ep.wait_until(pred, timeout=WAIT_S):
        raise TimeoutError(f"rank {ep.rank}: {what} did not arrive in {WAIT_S} s")


def tables_under_traffic(ep) -> dict:
    s = ST[ep.rank] = _State(ep)
    ep.register_handlers([h_ping])
    others = [r for r in range(ep.size) if r != ep.rank]
    for k in range(ROUNDS):
        for i in range(BURST):
            for d in others:
                ep.request_short(d, h_ping, i)
        # the table grows while the pings above are still being run by other threads
        ep.register_handlers(GROWN[k * PER:(k + 1) * PER])
        for d in others:
            for h in GROWN[:(k + 1) * PER]:
                ep.request_short(d, h)
    n = len(others)
    want = {"ping": ROUNDS * BURST * n}
    for i in range(ROUNDS * PER):
        want[f"h{i}"] = (ROUNDS - i // PER) * n
    _wait(ep, lambda: all(s.got.get(k, 0) >= v for k, v in want.items()), "every AM")
    ep.barrier()
    with s.lock:
        got = dict(s.got)
    return {"got": got, "want": want, "gil": _gil()}


def h_kick(tok, k):
    ep = tok.endpoint
    s = ST[tok.rank]
    far = [r for r in range(ep.size) if not ep.is_local(r)]

    def start() -> None:  # on whichever thread of the process polls next
        h = ep.get_nb(far[k % len(far)], 8 * (k % 16), 8)
        with s.lock:
            s.handles.append((k % len(far), k % 16, h))

    ep.defer(start)


def _pattern(rank: int, i: int) -> bytes:
    return (rank * 1000 + i).to_bytes(8, "little")


def ops_from_two_threads(ep) -> dict:
    s = ST[ep.rank] = _State(ep)
    ep.register_handlers([h_kick])
    for i in range(16):
        ep.segment[8 * i:8 * i + 8] = memoryview(_pattern(ep.rank, i))
    ep.barrier()
    far = [r for r in range(ep.size) if not ep.is_local(r)]
    sibs = [r for r in range(ep.size) if r != ep.rank and ep.same_process(r)]
    mine = []
    for k in range(max(KICKS, GETS)):
        if k < KICKS:
            for d in sibs:  # in-line: its handler defers a get of rank d
                ep.request_short(d, h_kick, k)
        if k < GETS:
            mine.append((k % len(far), k % 16, ep.get_nb(far[k % len(far)], 8 * (k % 16), 8)))
    want = KICKS * len(sibs)
    _wait(ep, lambda: len(s.handles) >= want, "the deferred gets' starts")
    bad = []
    with s.lock:
        theirs = list(s.handles)
    for j, i, h in mine + theirs:
        got = bytes(h.wait())
        if got != _pattern(far[j], i):
            bad.append((far[j], i, got.hex()))
    ep.barrier()
    return {"gets": len(mine) + len(theirs), "want": GETS + want, "bad": bad,
            "inflight": ep.statistics().inflight, "gil": _gil()}


def _pings_awaited(ep, s: _State, look) -> int:
    """Rounds of pings to every rank of the other process, each round waited for with the
    condition ``look(want)`` (pings this rank has got); returns the pings it got in all."""
    far = [r for r in range(ep.size) if not ep.same_process(r)]
    per = BURST // 4
    a_round = per * len(far)
    ep.barrier()
    for k in range(ROUNDS * 4):
        for d in far:
            for i in range(per):
                ep.request_short(d, h_ping, i)
        _wait(ep, lambda want=(k + 1) * a_round: look(want), "the pings")
    ep.barrier()
    return ROUNDS * 4 * a_round


def _got_pings(s: _State, want: int) -> bool:
    with s.lock:
        return s.got.get("ping", 0) >= want


def conditions_that_progress(ep) -> dict:
    s = ST[ep.rank] = _State(ep)
    ep.register_handlers([h_ping])
    polls = 0

    def cond(want: int) -> bool:
        nonlocal polls
        polls += 1
        ep.poll()
        ep.atomic(ep.rank, 0, "fadd", 1)
        return _got_pings(s, want)

    want = _pings_awaited(ep, s, cond)
    return {"got": s.got.get("ping", 0), "want": want, "polls": polls,
            "atomics": ep.atomic(ep.rank, 0, "get"), "gil": _gil()}


def deferred_outside_drains(ep) -> dict:
    s = ST[ep.rank] = _State(ep)
    ep.register_handlers([h_ping])
    eng = ep._eng
    seen: list[bool] = []

    def cond(want: int) -> bool:
        eng.defer(lambda: seen.append(eng.hot.in_drain()), ep.rank)
        ep.poll()
        return _got_pings(s, want)

    _pings_awaited(ep, s, cond)
    return {"ran": len(seen), "in_drain": sum(seen)}


def gil_in_rank(ep) -> bool:
    """Whether the lock is on in this rank once amnet and its layers are imported."""
    import amnet.aio
    import amnet.coll  # noqa: F401
    import shmem_rt  # noqa: F401
    import upc_rt  # noqa: F401

    ep.barrier()
    return _gil()

