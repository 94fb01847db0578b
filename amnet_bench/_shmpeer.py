"""The ``raw-shm`` and ``memcpy`` peers: the floors for any Python intra-node round trip and
for intra-node put/get bandwidth.

**raw-shm** (:func:`raw_shm_rtt`): two processes spinning in pure Python on int64 flags of
one anonymous shared page (``mmap.mmap(-1, 4096)``, made before a ``fork``: nothing is ever
named in ``/dev/shm``). Both see the page as ``memoryview(...).cast("q")``; the two flags are
``q[0]`` (byte 0) and ``q[8]`` (byte 64), on separate cache lines. Side A stores ``q[0] = i``
and spins until ``q[8] == i``; side B spins until ``q[0]`` changes and answers
``q[8] = q[0]``. Nothing else is in the loop: no call, no allocation but the loop counter.

A ``perf_counter`` call per round trip would cost about as much as the round trip itself, so
round trips are timed in batches (``batch`` round trips per batch, 1000 by default) after
``warmup`` untimed ones; each batch gives one sample, its time divided by ``batch``, and the
figures (median, p10, p90, min, mean) are over the batches.

With fewer than two usable cores (or both sides pinned to one) a pure spin would wait a whole
scheduler time slice per round trip; the sides then call ``os.sched_yield()`` in their wait
loops and the result says ``"spin": "yield"`` (``"busy"`` otherwise).

**memcpy** (:func:`memcpy_bw`): ``dst[:] = src`` of preallocated, touched ``uint8`` numpy
arrays of each size, one untimed copy first; each sample times enough back-to-back copies to
move at least ``min_bytes`` (at least one copy, at most :data:`MAX_COPIES`) and gives MB/s
(10^6 bytes per second). Repeated copies of the same buffers are cache-hot when they fit in
the cache, as repeated puts of one buffer are.

Both run in a fresh interpreter (this file run as a script, no amnet import in the child, and
the fork happens there, never in the caller); the child prints one line starting with
:data:`PREFIX` followed by the result as JSON. From the command line::

    python -m amnet_bench._shmpeer rtt ITERS WARMUP PIN [BATCH]
    python -m amnet_bench._shmpeer memcpy SIZE,SIZE,... REPS [PIN [MIN_BYTES]]

Placement (``pin``): ``none`` (the scheduler's choice) or ``split`` (side A on the first
usable core, side B on the second, via :func:`amnet_bench._rawzmq.pin_process`; memcpy on the
first).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

try:
    from ._rawzmq import pin_process
    from ._stats import stats
except ImportError:  # run as a script: this directory is sys.path[0]
    from _rawzmq import pin_process  # type: ignore[no-redef]
    from _stats import stats  # type: ignore[no-redef]

PREFIX = "AMNET_SHMPEER_RESULT "
PINS = ("none", "split")
TIMEOUT_S = 300.0
FLAG_A = 0  # q[0]: byte 0, A's store
FLAG_B = 8  # q[8]: byte 64, B's answer (another cache line)
STOP = -1
MAX_COPIES = 10_000  # per memcpy sample: small sizes stop here (about a millisecond at 8 B)


def _check_pin(pin: str) -> None:
    if pin not in PINS:
        raise ValueError(f"pin must be one of {', '.join(PINS)}, got {pin!r}")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _die_with_parent() -> None:
    """Linux: be killed when the parent (side A) dies, so side B can never spin on alone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- raw-shm: the two sides ---------------------------------------------------------------
def _side_b(q: memoryview, spin_yield: bool) -> None:
    last = 0
    if spin_yield:
        yield_ = os.sched_yield
        while True:
            while q[0] == last:
                yield_()
            last = q[0]
            if last == STOP:
                return
            q[8] = last
    while True:
        while q[0] == last:
            pass
        last = q[0]
        if last == STOP:
            return
        q[8] = last


def _rtt_local(iters: int, warmup: int, pin: str, batch: int) -> dict[str, Any]:
    """Side A in this process, side B in a forked child; the result dict (seconds)."""
    import mmap

    _check_pin(pin)
    if iters < 1 or warmup < 0 or batch < 1:
        raise ValueError(f"need iters >= 1, warmup >= 0, batch >= 1; got {iters}, {warmup}, "
                         f"{batch}")
    batch = min(batch, iters)
    batches = -(-iters // batch)
    page = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED | MAP_ANONYMOUS: shared across fork
    q = memoryview(page).cast("q")
    cores = _usable_cores()
    spin_yield = cores < 2  # one core for both sides: a pure spin would wait a time slice
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # side B
        code = 0
        try:
            _die_with_parent()
            if os.getppid() != parent:  # A died before the death signal was armed
                os._exit(1)
            pin_process(pin, 1)
            _side_b(q, spin_yield)
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            code = 1
        finally:
            os._exit(code)
    # side A; B's core is pin_process's choice for side 1
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    core_a = pin_process(pin, 0)
    core_b = None if core_a is None else usable[1 % len(usable)]
    samples = [0.0] * batches
    pc = time.perf_counter
    yield_ = os.sched_yield
    try:
        if spin_yield:
            for i in range(1, warmup + 1):
                q[0] = i
                while q[8] != i:
                    yield_()
            for b in range(batches):
                first = warmup + 1 + b * batch
                t0 = pc()
                for i in range(first, first + batch):
                    q[0] = i
                    while q[8] != i:
                        yield_()
                samples[b] = (pc() - t0) / batch
        else:
            for i in range(1, warmup + 1):
                q[0] = i
                while q[8] != i:
                    pass
            for b in range(batches):
                first = warmup + 1 + b * batch
                t0 = pc()
                for i in range(first, first + batch):
                    q[0] = i
                    while q[8] != i:
                        pass
                samples[b] = (pc() - t0) / batch
    finally:
        q[0] = STOP
        _, status = os.waitpid(pid, 0)
        q.release()
        page.close()
    if status != 0:
        raise RuntimeError(f"raw-shm side B exited with wait status {status}")
    return {"peer": "raw-shm", "unit": "s", "what": "round trip", "pin": pin,
            "cores": None if core_a is None else [core_a, core_b],
            "usable_cores": cores, "spin": "yield" if spin_yield else "busy",
            "warmup": warmup, "batch": batch, "batches": batches,
            "round_trips": batch * batches, **stats(samples)}


# -- memcpy -------------------------------------------------------------------------------
def _memcpy_local(sizes: Sequence[int], reps: int, pin: str, min_bytes: int) -> dict[str, Any]:
    import numpy as np

    _check_pin(pin)
    if reps < 1 or not sizes or min(sizes) < 1:
        raise ValueError(f"need reps >= 1 and sizes >= 1 byte; got {reps}, {list(sizes)}")
    core = pin_process(pin, 0)
    pc = time.perf_counter
    out: dict[str, Any] = {"peer": "memcpy", "unit": "MB/s", "pin": pin, "core": core,
                           "reps": reps, "min_bytes": min_bytes, "sizes": {}}
    for size in sizes:
        src = np.full(size, 7, dtype=np.uint8)  # allocated and touched
        dst = np.zeros(size, dtype=np.uint8)
        dst.fill(1)  # touch every page of the destination
        dst[:] = src  # one untimed copy
        copies = max(1, min(MAX_COPIES, -(-min_bytes // size)))
        samples = [0.0] * reps
        for r in range(reps):
            t0 = pc()
            for _ in range(copies):
                dst[:] = src
            samples[r] = size * copies / (pc() - t0) / 1e6
        out["sizes"][str(size)] = {"bytes": size, "copies_per_sample": copies, **stats(samples)}
        del src, dst
    return out


# -- the callers' side --------------------------------------------------------------------
def _run_child(args: list[str], timeout: float) -> dict[str, Any]:
    """Run this file as a script with ``args`` in its own session; the result line's JSON.
    Any failure is an :class:`amnet_bench.BenchError` naming the command."""
    from amnet_bench._child import run_command

    return run_command([sys.executable, os.path.abspath(__file__), *args],
                       f"the shm peer `{' '.join(args)}`", PREFIX, timeout)


def raw_shm_rtt(iters: int = 100_000, warmup: int = 10_000, pin: str = "none",
                batch: int = 1000, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """The raw-shm round trip, measured in a fresh interpreter and a child it forks.

    ``iters`` timed round trips (rounded up to whole batches; a batch is ``min(batch,
    iters)`` round trips) after ``warmup`` untimed ones. Returns ``{"peer": "raw-shm",
    "unit": "s", "median", "p10", "p90", "min", "max", "mean", "n", "samples", ...}``: seconds
    per round trip, one sample per batch, plus the placement (``pin``, ``cores``), the wait
    (``spin``: ``busy`` or ``yield``) and the batching. Raises ``ValueError`` for bad
    arguments, :class:`amnet_bench.BenchError` when the peer fails.
    """
    _check_pin(pin)
    if iters < 1 or warmup < 0 or batch < 1:
        raise ValueError(f"need iters >= 1, warmup >= 0, batch >= 1; got {iters}, {warmup}, "
                         f"{batch}")
    return _run_child(["rtt", str(iters), str(warmup), pin, str(batch)], timeout)


def memcpy_bw(sizes: Sequence[int], reps: int = 10, pin: str = "none",
              min_bytes: int = 64 << 20, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """numpy ``dst[:] = src`` bandwidth per size, measured in a fresh interpreter.

    Returns ``{"peer": "memcpy", "unit": "MB/s", "sizes": {str(size): {"bytes",
    "copies_per_sample", "median", "p10", "p90", "min", "max", "mean", "n", "samples"}},
    ...}``: ``reps`` samples per size, each MB/s (10^6 bytes/s) over at least ``min_bytes``
    copied (at most :data:`MAX_COPIES` copies). Raises ``ValueError`` for bad arguments,
    :class:`amnet_bench.BenchError` when the peer fails.
    """
    _check_pin(pin)
    sizes = [int(s) for s in sizes]
    if reps < 1 or not sizes or min(sizes) < 1 or min_bytes < 0:
        raise ValueError(f"need reps >= 1, sizes >= 1 byte, min_bytes >= 0; got {reps}, "
                         f"{sizes}, {min_bytes}")
    return _run_child(["memcpy", ",".join(map(str, sizes)), str(reps), pin, str(min_bytes)],
                      timeout)


# -- python calls: the in-line floor --------------------------------------------------------
class _CallToken:
    """What a handler needs of a token, in plain Python: ``rank`` and an in-line reply."""

    __slots__ = ("rank",)

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def reply_short(self, handler: Any, *args: int) -> None:
        handler(_CallToken(0), *args)


def python_calls_loop() -> Callable[[int], float]:
    """The **python calls** loop: ``run(n)`` makes ``n`` round trips with plain Python
    functions standing in for amnet, in one thread (``request_short(1, ping, i)`` calls
    ``ping(token, i)``, whose ``token.reply_short(pong, i)`` calls ``pong``, which counts;
    ``wait_until(arrived)`` calls ``arrived()`` once) and returns the seconds per round trip.
    What an in-line AM round trip (2 rank-threads of one process) is made of in Python, and
    nothing else."""
    got = [0]
    want = [0]

    def ping(tok: _CallToken, i: int) -> None:
        tok.reply_short(pong, i)

    def pong(tok: _CallToken, i: int) -> None:
        got[tok.rank] += 1

    def request_short(dest: int, handler: Any, *args: int) -> None:
        handler(_CallToken(dest), *args)

    def wait_until(pred: Any) -> bool:
        return bool(pred())

    def arrived() -> bool:
        return got[0] >= want[0]

    pc = time.perf_counter

    def run(n: int) -> float:
        t0 = pc()
        for i in range(n):
            want[0] = got[0] + 1
            request_short(1, ping, i)
            wait_until(arrived)
        return (pc() - t0) / max(1, n)

    return run


def python_calls_rtt(iters: int = 100_000, warmup: int = 10_000,
                     batch: int = 1000) -> dict[str, Any]:
    """The **python calls** peer (:func:`python_calls_loop`), ``warmup`` round trips
    untimed, then timed in batches like raw-shm; returns :func:`stats` of seconds per round
    trip."""
    run = python_calls_loop()
    run(warmup)
    batch = max(1, min(batch, iters))
    nb = -(-iters // batch)
    return stats([run(batch) for _ in range(nb)])


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("rtt", "memcpy"):
        raise SystemExit("usage: _shmpeer rtt ITERS WARMUP PIN [BATCH] | "
                         "memcpy SIZE,SIZE REPS [PIN [MIN_BYTES]]")
    try:
        if argv[0] == "rtt":
            res = _rtt_local(int(argv[1]), int(argv[2]), argv[3],
                             int(argv[4]) if len(argv) > 4 else 1000)
        else:
            sizes = [int(s) for s in argv[1].split(",") if s]
            res = _memcpy_local(sizes, int(argv[2]), argv[3] if len(argv) > 3 else "none",
                                int(argv[4]) if len(argv) > 4 else 64 << 20)
    except (ValueError, IndexError) as e:
        raise SystemExit(f"_shmpeer: {e}")
    print(PREFIX + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
