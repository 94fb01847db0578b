"""What the ranks of the ``am`` and ``rma`` suites run (importable by name, like any job).

Each job is a 2-rank job, one rank per simulated node: rank 0 times, rank 1 serves (its
handlers and the system handlers run while it waits for rank 0's ``bench_stop`` AM). Rank 0
returns its samples (seconds) as plain lists; rank 1 returns None. Handler state lives in
the module, one :class:`_State` per rank (the ranks of these jobs are separate processes,
but the state is keyed by rank all the same).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._rawzmq import pin_process

_STATES: dict[int, _State] = {}


class _State:
    __slots__ = ("got", "stop")

    def __init__(self) -> None:
        self.got = 0  # replies received by this rank
        self.stop = False


def _state(rank: int) -> _State:
    st = _STATES.get(rank)
    if st is None:
        st = _STATES[rank] = _State()
    return st


# -- handlers (every rank registers all of them, in this order) ---------------------------
def bench_ping(token: Any, i: int) -> None:
    token.reply_short(bench_pong, i)


def bench_pong(token: Any, i: int) -> None:
    _STATES[token.rank].got += 1


def bench_mping(token: Any, payload: Any, i: int) -> None:
    token.reply_medium(bench_mpong, payload, i)


def bench_mpong(token: Any, payload: Any, i: int) -> None:
    _STATES[token.rank].got += 1


def bench_stop(token: Any) -> None:
    _STATES[token.rank].stop = True


HANDLERS = [bench_ping, bench_pong, bench_mping, bench_mpong, bench_stop]


def _wait_mode(ep: Any) -> str:
    """How this rank waits: the mode ``auto`` resolved to at start (``ep.wait_mode``)."""
    return str(ep.wait_mode)


def _serve(ep: Any, st: _State) -> None:
    """Rank 1: run handlers until rank 0 says stop."""
    ep.wait_until(lambda: st.stop)


def _round_trips(ep: Any, st: _State, send: Any, warmup: int,
                 iters: int) -> tuple[list[float], float]:
    """``send(i)`` then wait for its reply, ``warmup`` untimed then ``iters`` timed; return
    the round trips and this thread's CPU time per timed round trip (seconds)."""
    pc = time.perf_counter
    wait_until = ep.wait_until
    want = [0]

    def arrived() -> bool:
        return st.got >= want[0]

    for i in range(warmup):
        want[0] = st.got + 1
        send(i)
        wait_until(arrived)
    out = [0.0] * iters
    c0 = time.thread_time()
    for i in range(iters):
        want[0] = st.got + 1
        t0 = pc()
        send(i)
        wait_until(arrived)
        out[i] = pc() - t0
    return out, (time.thread_time() - c0) / iters


def am_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Short AM round trips, then Medium round trips (echoed payload) per size.

    ``plan``: ``warmup``, ``iters``, ``sizes`` (Medium payload bytes), ``pin`` (see
    :func:`~amnet.bench._rawzmq.pin_process`; rank r is side r).
    """
    core = pin_process(plan.get("pin", "none"), ep.rank)
    ep.register_handlers(HANDLERS)
    st = _state(ep.rank)
    ep.barrier()
    if ep.rank != 0:
        _serve(ep, st)
        return None
    warmup, iters = plan["warmup"], plan["iters"]
    out: dict[str, Any] = {"wait_mode": _wait_mode(ep), "nodes": ep.nodes, "cpu": {},
                           "core": core}
    out["short"], out["cpu"]["short"] = _round_trips(
        ep, st, lambda i: ep.request_short(1, bench_ping, i), warmup, iters)
    medium = {}
    for size in plan["sizes"]:
        buf = np.full(size, 7, dtype=np.uint8)
        medium[str(size)], out["cpu"][str(size)] = _round_trips(
            ep, st, lambda i, b=buf: ep.request_medium(1, bench_mping, b, i), warmup, iters)
    out["medium"] = medium
    ep.request_short(1, bench_stop)
    return out


def _bandwidth(ep: Any, size: int, window: int, batches: int,
               warmup: int) -> tuple[float, float]:
    """Seconds for ``batches`` windows of ``window`` put_nbi of ``size`` bytes, each window
    ended by wait_nbi (after ``warmup`` untimed windows), and this thread's CPU seconds."""
    src = np.full(size, 3, dtype=np.uint8)
    put_nbi = ep.put_nbi
    offsets = [k * size for k in range(window)]
    for _ in range(warmup):
        for off in offsets:
            put_nbi(1, off, src)
        ep.wait_nbi()
    c0 = time.thread_time()
    t0 = time.perf_counter()
    for _ in range(batches):
        for off in offsets:
            put_nbi(1, off, src)
        ep.wait_nbi()
    return time.perf_counter() - t0, time.thread_time() - c0


def _latencies(op: Any, warmup: int, iters: int) -> list[float]:
    pc = time.perf_counter
    for _ in range(warmup):
        op()
    out = [0.0] * iters
    for i in range(iters):
        t0 = pc()
        op()
        out[i] = pc() - t0
    return out


def rma_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """put_nbi streaming per size (``plan["bw"]``: ``[[size, batches], ...]``, ``window``),
    then blocking put and get latency per size (``plan["lat_sizes"]``, ``lat_iters``)."""
    core = pin_process(plan.get("pin", "none"), ep.rank)
    ep.register_handlers(HANDLERS)
    st = _state(ep.rank)
    ep.barrier()
    if ep.rank != 0:
        _serve(ep, st)
        return None
    window, warmup = plan["window"], plan["warmup"]
    out: dict[str, Any] = {"wait_mode": _wait_mode(ep), "bw": {}, "bw_cpu": {}, "put": {},
                           "get": {}, "core": core}
    for size, batches in plan["bw"]:
        out["bw"][str(size)], out["bw_cpu"][str(size)] = _bandwidth(ep, size, window, batches,
                                                                    warmup)
    it = plan["lat_iters"]
    for size in plan["lat_sizes"]:
        data = np.full(size, 5, dtype=np.uint8)
        into = np.empty(size, dtype=np.uint8)
        out["put"][str(size)] = _latencies(lambda d=data: ep.put(1, 0, d), plan["lat_warmup"],
                                           it)
        out["get"][str(size)] = _latencies(lambda n=size, o=into: ep.get(1, 0, n, o),
                                           plan["lat_warmup"], it)
    ep.request_short(1, bench_stop)
    return out
