"""The ranks' side of ``amnet-bench model``: MuPC's performance model ("A performance model
for Unified Parallel C", Z. Zhang, ch. 6-7) for upc_rt, platform and programs measured in
the same job.

1. **The platform**: the four access patterns of §6.4 and the private floor, read and write,
   per element (:func:`amnet.bench._upcjob.patterns_job`, the ``upc`` suite's), and the cost
   of a barrier.
2. **The programs** of §7.1, written as the thesis writes them, element by element, on 1-D
   shared arrays with the index arithmetic spelled out (the access form the patterns time):

   ``histogram``  a cyclic table; each thread increments ``updates`` random entries
                  (``A[l] = A[l] + 1``; collisions allowed, as in the thesis);
   ``matmul``     the naive ``C = A x B`` (rows of A and C cyclic striped, B cyclic: its
                  columns are cyclic over the threads);
   ``sobel``      the Sobel kernel of §7.1.3 on an image in row blocks, 12 element reads of
                  O and a write of E per pixel.

   Each program describes itself as **reference partitions** (§6.5): per partition the
   operation, the number of accesses this thread makes, and its pattern mix, counted from
   the thread's own index sets (what a compiler's dependence analysis would find). Each is
   also run with private numpy arrays in place of the shared ones: the computation cost
   ``T_comp`` of §6.6.
3. **The run**: every program timed (a barrier after it, as in the thesis), ``samples``
   times.

The suite predicts ``T = T_comp + sum_j N_j x (c(pattern_j) - c(private)) + barriers x
c(barrier)`` per thread (Equation 6.1 with rates as costs per access; the private cost is
taken off because ``T_comp`` already made every access, privately) and compares the
slowest thread's prediction with the slowest thread's measurement: δ of Equation 7.1.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._upcjob import _batches, patterns_job

SEED = 2006  # the thesis's year


class _Histogram:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        self.n = p["size"]
        self.A = upc.shared_array(self.n, "i8", 1)
        self.locs = np.random.default_rng((SEED, self.me)).integers(
            0, self.n, p["updates"]).tolist()
        self.P = np.zeros(self.n, np.int64)

    def run(self, A: Any) -> None:
        for lo in self.locs:
            A[lo] = A[lo] + 1

    def shared(self) -> None:
        self.run(self.A)

    def private(self) -> None:
        self.run(self.P)

    def partitions(self) -> list[dict[str, Any]]:
        local = sum(1 for lo in self.locs if lo % self.T == self.me)
        remote = len(self.locs) - local
        return [{"name": "A[loc]++", "op": "update",
                 "counts": {"local": local, "baseline": remote}}]


class _Matmul:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        n = self.n = p["n"]
        T = self.T
        self.cols = n // T  # block striped (the thesis's M1, M2): N divisible by THREADS
        self.A = upc.shared_array(n * n, "f8", n * n // T)  # shared [M1] double A[N][N]
        self.B = upc.shared_array(n * n, "f8", self.cols)  # shared [M2] double B[N][N]
        self.C = upc.shared_array(n * n, "f8", n * n // T)
        rows = [i for i in range(n) if i // (n // T) == self.me]  # upc_forall ...; &A[i][0]
        self.rows = rows
        rng = np.random.default_rng((SEED, 1))
        a, b = rng.random((n, n)), rng.random((n, n))
        self.a, self.b = a, b
        for i in rows:
            self.A[i * n:(i + 1) * n] = a[i]
            self.C[i * n:(i + 1) * n] = 0.0
        mine = slice(self.me * self.cols, (self.me + 1) * self.cols)  # my columns of B
        for k in range(n):  # (k * n + j) // cols % T == j // cols: block k*T + j // cols
            self.B[k * n + mine.start:k * n + mine.stop] = b[k, mine]
        self.Pa, self.Pb, self.Pc = a.ravel().copy(), b.ravel().copy(), np.zeros(n * n)

    def run(self, A: Any, B: Any, C: Any) -> None:
        n = self.n
        for i in self.rows:
            for j in range(n):
                c = 0.0
                for k in range(n):
                    c += A[i * n + k] * B[k * n + j]
                C[i * n + j] = c

    def shared(self) -> None:
        self.run(self.A, self.B, self.C)

    def private(self) -> None:
        self.run(self.Pa, self.Pb, self.Pc)

    def partitions(self) -> list[dict[str, Any]]:
        n, r = self.n, len(self.rows)
        b_local = self.cols * n * r  # B[k][j] is mine for my columns j, every k
        return [{"name": "A[i][k]", "op": "read", "counts": {"local": r * n * n}},
                {"name": "B[k][j]", "op": "read",
                 "counts": {"local": b_local, "vector": r * n * n - b_local}},
                {"name": "C[i][j]", "op": "write", "counts": {"local": r * n}}]

    def check(self) -> bool:
        self.upc.barrier()
        n = self.n
        want = self.a @ self.b
        return all(np.allclose(np.asarray(self.C[i * n:(i + 1) * n]), want[i])
                   for i in self.rows)


class _Sobel:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        n = self.n = p["rows"] * self.T  # N x N, N / THREADS rows a thread
        self.R = p["rows"]
        self.O = upc.shared_array(n * n, "f8", n * self.R)  # shared [B] int O[N][N]
        self.E = upc.shared_array(n * n, "f8", n * self.R)
        lo = self.me * self.R
        y = np.arange(n, dtype=np.float64)[:, None]
        x = np.arange(n, dtype=np.float64)[None, :]
        img = ((y - n / 2) ** 2 + (x - n / 3) ** 2 < (n / 4) ** 2) * 200.0 + 3 * x
        self.O.local[:] = img[lo:lo + self.R].ravel()
        self.PO, self.PE = img.ravel().copy(), np.zeros(n * n)
        self.rows = [i for i in range(max(lo, 1), min(lo + self.R, n - 1))]

    def run(self, img: Any, edge: Any) -> None:
        n = self.n
        sqrt = np.sqrt
        for i in self.rows:
            up, mid, dn = (i - 1) * n, i * n, (i + 1) * n
            for j in range(1, n - 1):
                d1 = img[up + j + 1] - img[up + j - 1]
                d1 += 2 * (img[mid + j + 1] - img[mid + j - 1])
                d1 += img[dn + j + 1] - img[dn + j - 1]
                d2 = img[up + j - 1] - img[dn + j - 1]
                d2 += 2 * (img[up + j] - img[dn + j])
                d2 += img[up + j + 1] - img[dn + j + 1]
                m = sqrt(d1 * d1 + d2 * d2)
                edge[mid + j] = 255.0 if m > 255 else m

    def shared(self) -> None:
        self.run(self.O, self.E)

    def private(self) -> None:
        self.run(self.PO, self.PE)

    def partitions(self) -> list[dict[str, Any]]:
        n, lo, hi = self.n, self.me * self.R, (self.me + 1) * self.R
        per = n - 2  # pixels a row
        out = [{"name": "E[i][j]", "op": "write", "counts": {"local": len(self.rows) * per}},
               {"name": "O[i][j+-1]", "op": "read", "counts": {"local": 2 * len(self.rows) *
                                                                per}}]
        for name, off in (("O[i-1][*]", -1), ("O[i+1][*]", 1)):
            local = remote = 0
            for i in self.rows:
                if lo <= i + off < hi:
                    local += 5 * per
                else:
                    remote += 5 * per
            out.append({"name": name, "op": "read",
                        "counts": {"local": local, "vector": remote}})
        return out

    def check(self) -> bool:
        self.upc.barrier()
        n = self.n
        self.private()  # the same code on private copies: the reference
        return all(np.array_equal(np.asarray(self.E[i * n + 1:i * n + n - 1]),
                                  self.PE[i * n + 1:i * n + n - 1]) for i in self.rows)


KERNELS = {"histogram": _Histogram, "matmul": _Matmul, "sobel": _Sobel}


def _timed(fn: Any, upc: Any, samples: int, barrier: bool) -> list[float]:
    """Seconds of ``fn()`` (and of the barrier after it, with ``barrier``), each round after
    a barrier; the first round a warm-up."""
    pc = time.perf_counter
    out = []
    for rnd in range(samples + 1):
        upc.barrier()
        t0 = pc()
        fn()
        if barrier:
            upc.barrier()
        t = pc() - t0
        if not barrier:
            upc.barrier()
        if rnd:
            out.append(t)
    return out


def _updates(upc: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """The platform's read-modify-write (``X[i] = X[i] + 1``) per element of a cyclic table
    for the baseline (random elements of other threads), local and private patterns, timed
    as ``patterns_job`` times reads and writes (batches of ``batch`` drawn ahead, a fence
    after each): a remote update waits for its read, and its write then queues before the
    next read to that thread, which separate read and write costs do not show."""
    me, T = upc.MYTHREAD, upc.THREADS
    M, batch = plan["block"], plan["batch"]
    X = upc.shared_array(T * M, "i8", 1)  # cyclic, as update tables are (``shared int A[N]``)
    priv = np.zeros(M, np.int64)
    rng = np.random.default_rng((SEED, me, 7))
    others = [t for t in range(T) if t != me] or [me]

    def draws(pattern: str) -> list[int]:
        offs = rng.integers(0, M, batch)
        if pattern == "private":
            return offs.tolist()
        owner = me if pattern == "local" else rng.choice(others, batch)
        return (offs * T + owner).tolist()

    out: dict[str, Any] = {}
    for pattern in ("baseline", "local", "private"):
        arr = priv if pattern == "private" else X
        pool = [draws(pattern) for _ in range(32)]
        turn = [0]

        def one(arr=arr, pool=pool, turn=turn, pattern=pattern) -> None:
            idx = pool[turn[0] % 32]
            turn[0] += 1
            for i in idx:
                arr[i] = arr[i] + 1
            if pattern != "private":
                upc.fence()

        upc.barrier()
        walls, cpu = _batches(one, plan["min_s"])
        out[f"{pattern}/update"] = {"wall": float(np.median(walls)) / batch,
                                    "cpu": cpu / len(walls) / batch, "batches": len(walls)}
    upc.barrier()
    return out


def _cache_costs(ep: Any, upc: Any, plan: dict[str, Any]) -> dict[str, float] | None:
    """With the remote-reference cache on, what §7.2 of the thesis needs: the cost of a read
    that misses (a line loaded: the miss penalty), of a read and of a write that hit a loaded
    line, and of writing a dirty line back at a fence, per access or line, against a thread on
    another node (None when every thread is on this node: nothing is cached)."""
    me, T = upc.MYTHREAD, upc.THREADS
    far = [t for t in range(T) if not ep.is_local(t)]
    M, batch = plan["block"], plan["batch"]
    X = upc.shared_array(T * M, "f8", M)
    upc.barrier()
    if not far:
        return None
    line = ep.config.upc_cache_block_size // 8  # elements a line
    t = far[me % len(far)]
    lines = [t * M + k * line for k in range(min(batch, M // line))]
    pc = time.perf_counter
    fence = upc.fence

    def misses() -> None:
        for i in lines:
            X[i]
        fence()

    walls, _ = _batches(misses, plan["min_s"])
    miss = float(np.median(walls)) / len(lines)
    inline = list(range(t * M, t * M + line))
    X[inline[0]]  # the line loaded

    def hits_r() -> None:
        for i in inline:
            X[i]

    def hits_w() -> None:
        for i in inline:
            X[i] = 1.5

    hr = float(np.median(_batches(hits_r, plan["min_s"])[0])) / line
    hw = float(np.median(_batches(hits_w, plan["min_s"])[0])) / line
    fence()
    wb: list[float] = []
    for _ in range(max(3, int(plan["min_s"] / 0.01))):
        for i in lines:
            X[i] = 2.5  # a miss each (the line is loaded to be written), then dirty
        t0 = pc()
        fence()  # one vector put of every dirty line
        wb.append((pc() - t0) / len(lines))
    upc.barrier()
    return {"miss": miss, "hit_read": hr, "hit_write": hw, "writeback": float(np.median(wb))}


def model_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    import upc_rt as upc

    platform = patterns_job(ep, plan["platform"])  # initializes upc_rt with the cache asked
    platform.update(_updates(upc, plan["platform"]))
    cache = _cache_costs(ep, upc, plan["platform"]) if plan["platform"]["cache"] else None
    pc = time.perf_counter
    upc.barrier()
    t0 = pc()
    for _ in range(plan["barriers"]):
        upc.barrier()
    barrier_s = (pc() - t0) / plan["barriers"]
    out: dict[str, Any] = {"thread": upc.MYTHREAD, "platform": platform, "cache": cache,
                           "barrier_s": barrier_s, "kernels": {}}
    for name in plan["kernels"]:
        k = KERNELS[name](upc, plan["params"][name])
        upc.barrier()
        comp = _timed(k.private, upc, plan["samples"], barrier=False)
        s0 = upc.cache_stats()
        actual = _timed(k.shared, upc, plan["samples"], barrier=True)
        s1 = upc.cache_stats()
        runs = plan["samples"] + 1  # the warm-up run counted too
        stats = {f: (getattr(s1, f) - getattr(s0, f)) / runs
                 for f in ("hits", "misses", "victim_hits", "writebacks")}
        ok = k.check() if hasattr(k, "check") else True
        out["kernels"][name] = {"actual": actual, "comp": comp, "barriers": 1,
                                "partitions": k.partitions(), "cache_stats": stats,
                                "ok": bool(ok)}
    return out
