"""What the ranks of the ``am`` and ``rma`` suites run (importable by name, like any job).

Each job is a 2-rank job: :func:`am_job` and :func:`rma_job` one rank per simulated node,
:func:`node_am_job` and :func:`node_rma_job` both ranks on one node (2 processes or 2 threads
of one process, see :mod:`amnet_bench._node`). Rank 0 times, rank 1 serves (its handlers and
the system handlers run while it waits for rank 0's ``bench_stop`` AM). Rank 0
returns its samples (seconds) as plain lists; rank 1 returns None. Handler state lives in
the module, one :class:`_State` per rank (the ranks of these jobs are separate processes,
but the state is keyed by rank all the same).
"""

from __future__ import annotations

import functools
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
    :func:`~amnet_bench._rawzmq.pin_process`; rank r is side r).
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
               warmup: int, bulk: bool = False) -> tuple[float, float]:
    """Seconds for ``batches`` windows of ``window`` put_nbi of ``size`` bytes, each window
    ended by wait_nbi (after ``warmup`` untimed windows), and this thread's CPU seconds.
    ``bulk``: ``put_nbi(..., bulk=True)`` (the source is left alone until wait_nbi)."""
    src = np.full(size, 3, dtype=np.uint8)
    put_nbi = functools.partial(ep.put_nbi, bulk=True) if bulk else ep.put_nbi
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


def _copies(size: int, window: int, batches: int, warmup: int) -> float:
    """Seconds for the copies a copying put_nbi stream makes of its source: ``batches``
    windows of ``window`` copies of ``size`` bytes into ``window`` buffers (as the conduit's
    bounce buffers, mapped already)."""
    src = np.full(size, 3, dtype=np.uint8)
    bufs = [np.empty(size, dtype=np.uint8) for _ in range(window)]
    for _ in range(warmup):
        for b in bufs:
            np.copyto(b, src)
    t0 = time.perf_counter()
    for _ in range(batches):
        for b in bufs:
            np.copyto(b, src)
    return time.perf_counter() - t0


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
    if plan.get("bulk"):  # the same streams with put_nbi(..., bulk=True), and the copies
        out["bw_bulk"] = {str(size): _bandwidth(ep, size, window, batches, warmup, True)[0]
                          for size, batches in plan["bw"]}
        out["bw_copy"] = {str(size): _copies(size, window, batches, warmup)
                          for size, batches in plan["bw"]}
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


# -- node-local jobs (the ``am`` and ``rma`` suites' node sections) ------------------------
# Time batches of operations, never one: a perf_counter pair costs about 0.1 µs, as much as
# what is measured at this scale. Each sample is one batch's time divided by its size.
def _batches(iters: int, batch: int) -> tuple[int, int]:
    """(batch, number of batches): ``iters`` rounded up to whole batches of ``batch``."""
    batch = max(1, min(batch, iters))
    return batch, -(-iters // batch)


def _short_batches(ep: Any, st: _State, warmup: int, iters: int, batch: int,
                   turns: Any = None) -> tuple[list[float], float]:
    """Short-AM round trips to rank 1 (``request_short(1, bench_ping, i)``, then
    ``ep.wait_until`` until the ``bench_pong`` reply handler ran), ``warmup`` untimed, then
    batches; return seconds per round trip per batch and this thread's CPU seconds per timed
    round trip. ``turns(batch)``, when given, runs after each batch (its CPU time not
    counted): the other side of a comparison made in turns."""
    batch, nb = _batches(iters, batch)
    pc = time.perf_counter
    wait_until = ep.wait_until
    request_short = ep.request_short
    want = [0]

    def arrived() -> bool:
        return st.got >= want[0]

    for i in range(warmup):
        want[0] = st.got + 1
        request_short(1, bench_ping, i)
        wait_until(arrived)
    samples = [0.0] * nb
    other = 0.0
    c0 = time.thread_time()
    for b in range(nb):
        t0 = pc()
        for i in range(batch):
            want[0] = st.got + 1
            request_short(1, bench_ping, i)
            wait_until(arrived)
        samples[b] = (pc() - t0) / batch
        if turns is not None:
            c1 = time.thread_time()
            turns(batch)
            other += time.thread_time() - c1
    return samples, (time.thread_time() - c0 - other) / (nb * batch)


def _pin_node(ep: Any, pin: str) -> int | None:
    """``split``: rank r on the r-th usable core; the whole process when the other rank is
    another process (:func:`~amnet_bench._rawzmq.pin_process`), only this rank's thread when
    both ranks are threads of one process. ``none``: not pinned (None)."""
    import os

    if pin == "none" or not ep.same_process(1 - ep.rank):
        return pin_process(pin, ep.rank)
    try:
        cores = sorted(os.sched_getaffinity(0))
        cpu = cores[ep.rank % len(cores)]
        os.sched_setaffinity(0, {cpu})  # Linux: 0 is the calling thread
    except (AttributeError, OSError):
        return None
    return cpu


def node_am_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Short-AM round trips between the two ranks of one node, timed in batches.

    ``plan``: ``warmup``, ``iters``, ``batch``, ``pin``. Rank 1 serves in ``ep.wait_until``
    (with in-line AMs it has nothing to do: rank 0's sends run the handlers themselves).
    In-line, rank 0 also times the python calls loop (the in-line floor,
    :func:`amnet_bench._shmpeer.python_calls_loop`) in turns with its batches, a batch of one
    then a batch of the other: ``calls`` (seconds per round trip per batch) and ``turns``
    (amnet / calls, batch by batch).
    """
    core = _pin_node(ep, plan.get("pin", "none"))
    ep.register_handlers(HANDLERS)
    st = _state(ep.rank)
    ep.barrier()
    if ep.rank != 0:
        _serve(ep, st)
        return None
    inline = ep.same_process(1)
    calls: list[float] = []
    turns = None
    if inline:  # the floor in turns with amnet's batches: the machine's speed drifts
        from ._shmpeer import python_calls_loop

        floor = python_calls_loop()
        floor(plan["warmup"])

        def turns(n: int) -> None:
            calls.append(floor(n))

    samples, cpu = _short_batches(ep, st, plan["warmup"], plan["iters"], plan["batch"],
                                  turns)
    ep.request_short(1, bench_stop)
    out = {"wait_mode": _wait_mode(ep), "core": core, "same_process": inline,
           "short": samples, "cpu": cpu, "batch": _batches(plan["iters"], plan["batch"])[0]}
    if inline:
        out["calls"] = calls
        out["turns"] = [a / b for a, b in zip(samples, calls, strict=True)]
    return out


def _op_batches(op: Any, warmup: int, iters: int, batch: int) -> list[float]:
    """``op()`` ``warmup`` times untimed, then in batches: seconds per op per batch."""
    batch, nb = _batches(iters, batch)
    pc = time.perf_counter
    for _ in range(warmup):
        op()
    samples = [0.0] * nb
    for b in range(nb):
        t0 = pc()
        for _ in range(batch):
            op()
        samples[b] = (pc() - t0) / batch
    return samples


def node_rma_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Blocking put/get latency (batched) and bandwidth between the two ranks of one node.

    ``plan``: ``lat_sizes``, ``lat_warmup``, ``lat_iters``, ``lat_batch``; ``bw_sizes``,
    ``bw_warmup`` (untimed operations per size), ``bw_samples``, ``bw_bytes`` (bytes moved
    per sample, at least one operation); ``pin``. Latency samples are seconds per operation;
    bandwidth samples are MB/s (10^6 bytes/s) of back-to-back blocking ``ep.put(1, 0, a)``
    / ``ep.get(1, 0, n, out)`` of a preallocated numpy array.
    """
    core = _pin_node(ep, plan.get("pin", "none"))
    ep.register_handlers(HANDLERS)
    st = _state(ep.rank)
    ep.barrier()
    if ep.rank != 0:
        _serve(ep, st)
        return None
    put, get = ep.put, ep.get
    out: dict[str, Any] = {"wait_mode": _wait_mode(ep), "core": core,
                           "same_process": ep.same_process(1),
                           "direct": ep.segment_view(1) is not None,
                           "put": {}, "get": {}, "put_bw": {}, "get_bw": {}, "bw_ops": {}}
    for size in plan["lat_sizes"]:
        data = np.full(size, 5, dtype=np.uint8)
        into = np.empty(size, dtype=np.uint8)
        out["put"][str(size)] = _op_batches(lambda d=data: put(1, 0, d), plan["lat_warmup"],
                                            plan["lat_iters"], plan["lat_batch"])
        out["get"][str(size)] = _op_batches(lambda n=size, o=into: get(1, 0, n, o),
                                            plan["lat_warmup"], plan["lat_iters"],
                                            plan["lat_batch"])
    pc = time.perf_counter
    for size in plan["bw_sizes"]:
        data = np.full(size, 5, dtype=np.uint8)
        into = np.empty(size, dtype=np.uint8)
        into.fill(1)  # touch every page
        ops = max(1, -(-plan["bw_bytes"] // size))
        out["bw_ops"][str(size)] = ops
        for name, op in (("put_bw", lambda d=data: put(1, 0, d)),
                         ("get_bw", lambda n=size, o=into: get(1, 0, n, o))):
            for _ in range(plan["bw_warmup"]):
                op()
            samples = [0.0] * plan["bw_samples"]
            for k in range(plan["bw_samples"]):
                t0 = pc()
                for _ in range(ops):
                    op()
                samples[k] = size * ops / (pc() - t0) / 1e6
            out[name][str(size)] = samples
    ep.request_short(1, bench_stop)
    return out
