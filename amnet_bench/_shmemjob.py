"""What the ranks of ``amnet-bench shmem`` run (importable by name, like any job).

The upc_rt forms of the OpenSHMEM-for-UPC paper's experiments, each started with
``upc.init()`` (``plan["runtime"] == "amnet"``: upc_rt on amnet directly, the paper's
Berkeley UPC on GASNet) or ``upc.init(runtime="shmem")`` (upc_rt over shmem_rt, the paper's
SHMEM-UPC); the same experiments in shmem4py's API are :mod:`amnet_bench._shmem4pyjob`,
which :func:`osu_job` also runs on shmem_rt. Every rank returns its own figures (seconds
per operation, lists of samples; see :func:`amnet_bench._shmem4pyjob.batches`):

- :func:`putget_job` (2 threads; thread 0 times): ``upc.memput`` + ``upc.fence()`` and
  ``upc.memget`` of each size to / from thread 1's block (Figs. 13/14);
- :func:`barrier_job`: ``upc.barrier()`` (Figs. 15/22);
- :func:`bcast_job`: ``upc.all_broadcast`` of each size from thread 0, IN/OUT_ALLSYNC
  (Fig. 16);
- :func:`reduce_job`: ``upc.all_reduce`` (ADD) of a float64 array of each size, blocked
  over the threads (Figs. 17/18; with rank-threads, the threaded reduce);
- :func:`apps_job`: CPI, Stream-Triad and RandomAccess (Figs. 19-21, 23, 24).

Every job checks what it moved or computed before timing it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._shmem4pyjob import (
    batches,
    cpi_part,
    iters_for,
    ra_expected,
    ra_initial,
    ra_stream,
    triad,
)


def _upc(plan: dict[str, Any]) -> Any:
    import inspect

    import upc_rt as upc

    if "runtime" in inspect.signature(upc.init).parameters:
        upc.init(runtime=plan["runtime"])  # explicit: $AMNET_UPC_RUNTIME must not decide
    elif plan["runtime"] == "amnet":
        upc.init()
    else:
        raise RuntimeError("this upc_rt has no upc.init(runtime=...)")
    return upc


def putget_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    upc = _upc(plan)
    me, T = upc.MYTHREAD, upc.THREADS
    sizes = plan["sizes"]
    big = max(sizes)
    X = upc.all_alloc(T, big)  # shared [big] char[big*THREADS]
    loc = np.full(big, 7, np.uint8)
    out: dict[str, Any] = {"put": {}, "get": {}}
    upc.barrier()
    if me == 0:
        p = X + big  # thread 1's block
        for n in sizes:
            it = iters_for(n, plan["iters"])
            w = max(1, plan["warmup"] * it // plan["iters"])

            def put(n=n) -> None:
                upc.memput(p, loc, n)
                upc.fence()

            def get(n=n) -> None:
                upc.memget(loc, p, n)

            out["put"][str(n)] = batches(put, it, plan["samples"], w, lambda: None)
            out["get"][str(n)] = batches(get, it, plan["samples"], w, lambda: None)
        chk = np.zeros(big, np.uint8)
        upc.memget(chk, p, big)
        assert int(chk[big - 1]) == 7, "memput data did not arrive"
    upc.barrier()
    if me == 0:
        upc.free(X)
    return out


def barrier_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    upc = _upc(plan)
    return {"barrier": batches(upc.barrier, plan["iters"], plan["samples"], plan["warmup"],
                               upc.barrier)}


def bcast_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    upc = _upc(plan)
    me, T = upc.MYTHREAD, upc.THREADS
    flags = upc.IN_ALLSYNC | upc.OUT_ALLSYNC
    out: dict[str, Any] = {}
    for n in plan["sizes"]:
        S = upc.all_alloc(1, n)  # shared [] char[n] on thread 0
        D = upc.all_alloc(T, n)  # shared [n] char[n*THREADS]
        if me == 0:
            upc.memset(S, 5, n)
        upc.barrier()
        upc.all_broadcast(D, S, n, flags)
        got = np.zeros(n, np.uint8)
        upc.memget(got, D + me * n, n)
        assert int(got[n - 1]) == 5, "broadcast data did not arrive"
        it = iters_for(n, plan["iters"], 16 << 20)
        out[str(n)] = batches(lambda D=D, S=S, n=n: upc.all_broadcast(D, S, n, flags), it,
                              plan["samples"], max(1, plan["warmup"] * it // plan["iters"]),
                              upc.barrier)
        upc.barrier()
        if me == 0:
            upc.free(S)
            upc.free(D)
    return out


def reduce_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    upc = _upc(plan)
    me, T = upc.MYTHREAD, upc.THREADS
    flags = upc.IN_ALLSYNC | upc.OUT_ALLSYNC
    out: dict[str, Any] = {}
    D = upc.all_alloc(1, 8)  # the result, on thread 0
    for n in plan["sizes"]:
        nelems = max(T, n // 8)
        per = -(-nelems // T)
        A = upc.shared_array(per * T, "f8", per)
        A.local[:] = np.arange(me * per, (me + 1) * per, dtype=np.float64)
        upc.barrier()

        def call(A=A, nelems=nelems) -> None:
            upc.all_reduce(D, A, upc.ADD, nelems, flags=flags)

        call()
        if me == 0:
            got = np.zeros(1, np.float64)
            upc.memget(got, D, 8)
            assert float(got[0]) == nelems * (nelems - 1) / 2, (float(got[0]), nelems)
        it = iters_for(n, plan["iters"], 16 << 20)
        out[str(n)] = batches(call, it, plan["samples"],
                              max(1, plan["warmup"] * it // plan["iters"]), upc.barrier)
        upc.barrier()
        if me == 0:
            upc.free(A)
    return out


def apps_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """CPI (each thread's share of the integral, then ``upc.all_reduce``), Stream-Triad
    (``a = b + 3 c`` on my elements, a barrier after each pass), RandomAccess (XOR updates
    of random words of a shared table, each a remote read then write, no locks: lost
    updates are the errors, counted against the table computed without loss)."""
    upc = _upc(plan)
    me, T = upc.MYTHREAD, upc.THREADS
    pc = time.perf_counter
    flags = upc.IN_ALLSYNC | upc.OUT_ALLSYNC
    out: dict[str, Any] = {"cpi": [], "cpi_error": None, "triad": [], "ra": [],
                           "ra_errors": []}
    parts = upc.shared_array(T, "f8", 1)
    tot = upc.all_alloc(1, 8)
    got = np.zeros(1, np.float64)
    for _ in range(plan["samples"]):
        upc.barrier()
        t0 = pc()
        parts.local[0] = cpi_part(me, T, plan["cpi_n"])
        upc.all_reduce(tot, parts, upc.ADD, T, flags=flags)
        out["cpi"].append(pc() - t0)
    upc.memget(got, tot, 8)
    out["cpi_error"] = abs(float(got[0]) - np.pi)
    M = plan["triad_m"]
    a = upc.shared_array(M * T, "f8", M)
    b = upc.shared_array(M * T, "f8", M)
    c = upc.shared_array(M * T, "f8", M)
    b.local[:], c.local[:] = 1.0, 2.0
    out["triad"] = triad(a.local, b.local, c.local, upc.barrier, plan)
    L, count = plan["ra_words"], plan["ra_updates"]
    N = L * T
    table = upc.shared_array(N, "u8", L)
    idx, vals = ra_stream(me, count, N)
    pairs = list(zip(idx.tolist(), list(vals), strict=True))
    for _ in range(plan["samples"]):
        table.local[:] = ra_initial(me * L, (me + 1) * L)
        upc.barrier()
        t0 = pc()
        for i, v in pairs:
            table[i] = table[i] ^ v
        upc.fence()
        upc.barrier()
        out["ra"].append(pc() - t0)
        want = ra_expected(T, count, N, me * L, (me + 1) * L)
        out["ra_errors"].append(int(np.count_nonzero(table.local != want)))
    upc.barrier()
    if me == 0:
        for x in (parts, tot, a, b, c, table):
            upc.free(x)
    return out


def osu_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """The OSU basics of :func:`amnet_bench._shmem4pyjob.osu` on shmem_rt; then, in the same
    job, each operation again beside the same operation on amnet's endpoint, batch by batch
    (``out["amnet"]``; see :func:`_osu_amnet`)."""
    import shmem_rt

    from ._shmem4pyjob import osu

    shmem_rt.init()
    out = osu(shmem_rt, plan)
    out["amnet"] = _osu_amnet(ep, shmem_rt, plan)
    return out


def _paired(a: Any, b: Any, iters: int, samples: int, warmup: int,
            sync: Any) -> tuple[list[float], list[float]]:
    """Batches of ``a`` and of ``b`` taken in turn (a, b, a, b...): both see the same
    moments of a noisy machine, so their ratio is steadier than that of two runs."""
    ta: list[float] = []
    tb: list[float] = []
    batches(a, iters, 0, warmup, sync)
    batches(b, iters, 0, warmup, sync)
    for _ in range(samples):
        ta += batches(a, iters, 1, 0, sync)
        tb += batches(b, iters, 1, 0, sync)
    return ta, tb


def _osu_amnet(ep: Any, shmem: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """The floor shmem_rt's mapping sits on: each OSU operation as an amnet endpoint call at
    the symmetric objects' offsets (``ep.put``, complete when it returns; ``ep.get``;
    ``ep.atomic`` fadd; ``ep.barrier``; a window of ``ep.put_nbi`` then ``ep.wait_nbi``),
    in turns with shmem_rt's own (:func:`_paired`). ``out[k]``: amnet's samples;
    ``out["pair"][k]``: the median ratio shmem_rt / amnet of the turns (for bandwidths,
    amnet / shmem_rt: above 1 is the mapping's cost)."""
    me = ep.rank
    it, samples, warm = plan["iters"], plan["samples"], plan["warmup"]
    big = max(plan["bw_sizes"])
    sym = shmem.zeros(big, dtype=np.uint8)
    word = shmem.zeros(1, dtype=np.int64)
    ctr = shmem.zeros(1, dtype=np.int64)
    so, wo, co = (ep.segment_offset(x) for x in (sym, word, ctr))
    src = np.ones(big, np.uint8)
    one = np.ones(1, np.int64)
    out: dict[str, Any] = {"pair": {}, "bw": {}}
    nothing = lambda: None

    def keep(k: str, ts: list[float], ta: list[float], inverse: bool = False) -> None:
        if k.startswith("bw/"):
            out["bw"][k[3:]] = ta
        else:
            out[k] = ta
        r = [(a / s if inverse else s / a) for s, a in zip(ts, ta, strict=True)]
        # the upper of the middle two for an even count (as this suite always reported it,
        # --quick's 2 samples included), not their mean
        out["pair"][k] = sorted(r)[len(r) // 2]

    def put() -> None:
        shmem.put(word, one, 1)
        shmem.quiet()

    ep.barrier()
    if me == 0:
        keep("put8", *_paired(put, lambda: ep.put(1, wo, one), it, samples, warm, nothing))
        keep("get8", *_paired(lambda: shmem.get(one, word, 1), lambda: ep.get(1, wo, 8, one),
                              it, samples, warm, nothing))
        keep("fadd", *_paired(lambda: shmem.atomic_fetch_add(ctr, 1, 1),
                              lambda: ep.atomic(1, co, "fadd", 1), it, samples, warm,
                              nothing))
        window = plan["window"]
        for n in plan["bw_sizes"]:
            s = src[:n]

            def flood_shmem(n=n) -> None:
                for _ in range(window):
                    shmem.put_nbi(sym, src, 1, n)
                shmem.quiet()

            def flood_amnet(s=s) -> None:
                for _ in range(window):
                    ep.put_nbi(1, so, s)
                ep.wait_nbi()

            k = iters_for(n * window, max(2, it // window), 32 << 20)
            ts, ta = _paired(flood_shmem, flood_amnet, k, samples, 1, nothing)
            keep(f"bw/{n}", [n * window / x / 1e6 for x in ts],
                 [n * window / x / 1e6 for x in ta], inverse=True)  # MB/s
    ep.barrier()
    keep("barrier", *_paired(shmem.barrier_all, ep.barrier, it, samples, warm, ep.barrier))
    if me == 1:
        assert int(ctr[0]) >= 2 * it * samples, int(ctr[0])
        assert int(sym[big - 1]) == 1 and int(word[0]) == 1, "the puts did not arrive"
    ep.barrier()
    for x in (sym, word, ctr):
        shmem.free(x)
    return out


JOBS = {"putget": putget_job, "barrier": barrier_job, "bcast": bcast_job,
        "reduce": reduce_job, "apps": apps_job}
