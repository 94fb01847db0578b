"""The OpenSHMEM side of ``amnet-bench shmem``: every experiment written once against
shmem4py's API, run by the peer (shmem4py on Open MPI's OpenSHMEM, this file as a script
under ``oshrun`` with the peer virtualenv's Python) and, for the OSU basics, by shmem_rt
(imported by :mod:`amnet_bench._shmemjob` and called with ``shmem_rt`` as ``shmem``).

Nothing here imports amnet: the peer's Python has numpy and shmem4py only. As a script::

    oshrun -np N PYTHON _shmem4pyjob.py 'PLAN-AS-JSON'

every PE prints one line, :data:`PREFIX` then ``{"pe": me, "result": ...}`` as JSON. The
plan's ``exp`` picks the experiment:

``putget``   PE 0 to PE 1: ``put`` + ``quiet`` and ``get`` of each size (paper Figs. 13/14)
``barrier``  ``barrier_all`` (Figs. 15/22)
``bcast``    ``broadcast`` from PE 0 of each size (Fig. 16)
``reduce``   the UPC reduction's work in SHMEM: a local sum of my part of the array, then
             ``sum_reduce`` of that one value (Figs. 17/18)
``apps``     CPI, Stream-Triad and RandomAccess (Figs. 19-21, 23, 24)
``osu``      OSU OpenSHMEM basics: 8 B put (+quiet), 8 B get, fetch-add, put bandwidth by
             size (a window of ``put_nbi`` then ``quiet``), ``barrier_all``

Times are seconds per operation: each sample is a batch of ``iters`` operations divided by
``iters``, after ``warmup`` untimed ones, a barrier before every batch.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PREFIX = "AMNET_SHMEM4PY_RESULT "


def batches(fn: Callable[[], Any], iters: int, samples: int, warmup: int,
            sync: Callable[[], Any]) -> list[float]:
    """``samples`` batch times of ``iters`` calls of ``fn``, divided by ``iters``."""
    for _ in range(warmup):
        fn()
    out = []
    pc = time.perf_counter
    for _ in range(samples):
        sync()
        t0 = pc()
        for _ in range(iters):
            fn()
        out.append((pc() - t0) / iters)
    return out


def iters_for(size: int, iters: int, budget: int = 64 << 20) -> int:
    """Fewer operations per batch for big messages: at most ``budget`` bytes a batch."""
    return max(2, min(iters, budget // max(size, 1)))


# -- the applications' numerics, shared with the upc_rt forms ------------------------------
def cpi_part(me: int, T: int, n: int) -> float:
    """My share of the midpoint rule for pi = integral of 4 / (1 + x^2) over [0, 1] with
    ``n`` intervals (intervals me, me + T, ...), in chunks so memory stays small."""
    h, s = 1.0 / n, 0.0
    for lo in range(me, n, T * 65536):
        i = np.arange(lo, min(n, lo + T * 65536), T, dtype=np.float64)
        x = h * (i + 0.5)
        s += float(np.sum(4.0 / (1.0 + x * x)))
    return s * h


def ra_stream(seed: int, count: int, table: int) -> tuple[np.ndarray, np.ndarray]:
    """One thread's RandomAccess updates: ``count`` (global index, value) pairs of a table
    of ``table`` (a power of two) uint64 words, from a seeded generator."""
    rng = np.random.default_rng(1_000_003 + seed)
    vals = rng.integers(0, 1 << 63, count, dtype=np.uint64)
    return (vals & np.uint64(table - 1)).astype(np.int64), vals


def ra_initial(lo: int, hi: int) -> np.ndarray:
    """The table's words ``lo..hi-1`` before any update: their global indices."""
    return np.arange(lo, hi, dtype=np.uint64)


def ra_expected(T: int, count: int, table: int, lo: int, hi: int) -> np.ndarray:
    """Words ``lo..hi-1`` after every thread's updates applied without a lost one."""
    want = ra_initial(lo, hi)
    for t in range(T):
        idx, vals = ra_stream(t, count, table)
        keep = (idx >= lo) & (idx < hi)
        np.bitwise_xor.at(want, idx[keep] - lo, vals[keep])
    return want


# -- the experiments, in shmem4py's API -----------------------------------------------------
def putget(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    me = shmem.my_pe()
    sizes = plan["sizes"]
    big = max(sizes)
    sym = shmem.zeros(big, dtype=np.uint8)
    loc = np.full(big, 7, np.uint8)
    out: dict[str, Any] = {"put": {}, "get": {}}
    shmem.barrier_all()
    for n in sizes:
        it = iters_for(n, plan["iters"])
        w = max(1, plan["warmup"] * it // plan["iters"])
        if me == 0:
            def put(n=n) -> None:
                shmem.put(sym, loc, 1, n)
                shmem.quiet()

            def get(n=n) -> None:
                shmem.get(loc, sym, 1, n)

            out["put"][str(n)] = batches(put, it, plan["samples"], w, lambda: None)
            out["get"][str(n)] = batches(get, it, plan["samples"], w, lambda: None)
        shmem.barrier_all()
    if me == 1:
        assert int(sym[big - 1]) == 7, "put data did not arrive"
    shmem.barrier_all()
    shmem.free(sym)
    return out


def barrier(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    return {"barrier": batches(shmem.barrier_all, plan["iters"], plan["samples"],
                               plan["warmup"], shmem.barrier_all)}


def bcast(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    me = shmem.my_pe()
    out: dict[str, Any] = {}
    for n in plan["sizes"]:
        src = shmem.full(n, 5 if me == 0 else 0, dtype=np.uint8)
        dst = shmem.zeros(n, dtype=np.uint8)
        shmem.broadcast(dst, src, 0)
        assert int(dst[n - 1]) == 5, "broadcast data did not arrive"
        it = iters_for(n, plan["iters"], 16 << 20)
        out[str(n)] = batches(lambda dst=dst, src=src: shmem.broadcast(dst, src, 0), it,
                              plan["samples"], max(1, plan["warmup"] * it // plan["iters"]),
                              shmem.barrier_all)
        shmem.barrier_all()
        shmem.free(src)
        shmem.free(dst)
    return out


def reduce(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    me, T = shmem.my_pe(), shmem.n_pes()
    out: dict[str, Any] = {}
    src = shmem.zeros(1)
    dst = shmem.zeros(1)
    for n in plan["sizes"]:
        nelems = max(T, n // 8)
        per = -(-nelems // T)
        lo, hi = min(me * per, nelems), min((me + 1) * per, nelems)
        part = np.arange(lo, hi, dtype=np.float64)

        def call(part=part) -> None:
            src[0] = part.sum()
            shmem.sum_reduce(dst, src)

        call()
        assert float(dst[0]) == nelems * (nelems - 1) / 2, (float(dst[0]), nelems)
        it = iters_for(n, plan["iters"], 16 << 20)
        out[str(n)] = batches(call, it, plan["samples"],
                              max(1, plan["warmup"] * it // plan["iters"]), shmem.barrier_all)
    shmem.barrier_all()
    shmem.free(src)
    shmem.free(dst)
    return out


def triad(a: Any, b: Any, c: Any, barrier: Callable[[], Any],
          plan: dict[str, Any]) -> list[float]:
    """Stream-Triad on this thread's part of the arrays, ``a = b + 3 c`` (b is 1, c is 2):
    seconds per pass of ``plan["samples"]`` samples of ``plan["triad_iters"]`` passes, a
    ``barrier()`` after each; the result checked."""
    pc = time.perf_counter
    out = []
    for _ in range(plan["samples"]):
        barrier()
        t0 = pc()
        for _ in range(plan["triad_iters"]):
            np.add(b, 3.0 * c, out=a)
            barrier()
        out.append((pc() - t0) / plan["triad_iters"])
    assert float(a[-1]) == 7.0
    return out


def apps(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    me, T = shmem.my_pe(), shmem.n_pes()
    pc = time.perf_counter
    out: dict[str, Any] = {"cpi": [], "cpi_error": None, "triad": [], "ra": [],
                           "ra_errors": []}
    part, tot = shmem.zeros(1), shmem.zeros(1)
    for _ in range(plan["samples"]):
        shmem.barrier_all()
        t0 = pc()
        part[0] = cpi_part(me, T, plan["cpi_n"])
        shmem.sum_reduce(tot, part)
        out["cpi"].append(pc() - t0)
    out["cpi_error"] = abs(float(tot[0]) - math.pi)
    M = plan["triad_m"]
    a, b, c = shmem.zeros(M), shmem.full(M, 1.0), shmem.full(M, 2.0)
    out["triad"] = triad(a, b, c, shmem.barrier_all, plan)
    L, count = plan["ra_words"], plan["ra_updates"]
    N = L * T
    table = shmem.zeros(L, dtype=np.uint64)
    idx, vals = ra_stream(me, count, N)
    pes, offs = (idx // L).tolist(), (idx % L).tolist()
    vl = list(vals)  # np.uint64 scalars: XOR stays unsigned
    one = np.zeros(1, np.uint64)
    for _ in range(plan["samples"]):
        table[:] = ra_initial(me * L, (me + 1) * L)
        shmem.barrier_all()
        t0 = pc()
        for pe, off, v in zip(pes, offs, vl, strict=True):
            shmem.get(one, table[off:off + 1], pe)
            one[0] ^= v
            shmem.put(table[off:off + 1], one, pe)
        shmem.quiet()
        shmem.barrier_all()
        out["ra"].append(pc() - t0)
        want = ra_expected(T, count, N, me * L, (me + 1) * L)
        out["ra_errors"].append(int(np.count_nonzero(table != want)))
    shmem.barrier_all()
    for x in (part, tot, a, b, c, table):
        shmem.free(x)
    return out


def osu(shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    me = shmem.my_pe()
    it, samples, warm = plan["iters"], plan["samples"], plan["warmup"]
    big = max(plan["bw_sizes"])
    sym = shmem.zeros(big, dtype=np.uint8)
    word = shmem.zeros(1, dtype=np.int64)
    ctr = shmem.zeros(1, dtype=np.int64)
    src = np.ones(big, np.uint8)
    one = np.ones(1, np.int64)
    out: dict[str, Any] = {}
    shmem.barrier_all()
    if me == 0:
        def put8() -> None:
            shmem.put(word, one, 1)
            shmem.quiet()

        out["put8"] = batches(put8, it, samples, warm, lambda: None)
        out["get8"] = batches(lambda: shmem.get(one, word, 1), it, samples, warm,
                              lambda: None)
        out["fadd"] = batches(lambda: shmem.atomic_fetch_add(ctr, 1, 1), it, samples, warm,
                              lambda: None)
        window = plan["window"]
        out["bw"] = {}
        for n in plan["bw_sizes"]:
            def flood(n=n) -> None:
                for _ in range(window):
                    shmem.put_nbi(sym, src, 1, n)
                shmem.quiet()

            k = iters_for(n * window, max(2, it // window), 32 << 20)
            t = batches(flood, k, samples, 1, lambda: None)
            out["bw"][str(n)] = [n * window / s / 1e6 for s in t]  # MB/s
    shmem.barrier_all()
    out["barrier"] = batches(shmem.barrier_all, it, samples, warm, shmem.barrier_all)
    if me == 1:
        assert int(ctr[0]) >= it * samples, int(ctr[0])
    shmem.barrier_all()
    for x in (sym, word, ctr):
        shmem.free(x)
    return out


EXPERIMENTS = {"putget": putget, "barrier": barrier, "bcast": bcast, "reduce": reduce,
               "apps": apps, "osu": osu}


def main(argv: list[str]) -> int:
    plan = json.loads(argv[1])
    from shmem4py import shmem

    result = EXPERIMENTS[plan["exp"]](shmem, plan)
    sys.stdout.write(PREFIX + json.dumps({"pe": shmem.my_pe(), "result": result}) + "\n")
    sys.stdout.flush()
    shmem.barrier_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
