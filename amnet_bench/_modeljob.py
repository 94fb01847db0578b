"""The ranks' side of ``amnet-bench model``: MuPC's performance model ("A performance model
for Unified Parallel C", Z. Zhang, ch. 6-7) for upc_rt, platform and programs measured in
the same job.

1. **The platform**: the four access patterns of §6.4 and the private floor, read and write,
   per element (:class:`amnet_bench._upcjob.Patterns`, the ``upc`` suite's), a
   read-modify-write of a cyclic table, with the cache on its miss, hit and write-back
   costs, and the cost of a barrier.
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
3. **Rounds**: every program runs once (a barrier after it, as in the thesis) between two
   measurements of the platform, ``samples`` times over, and each round is priced with the
   mean of the two, so a machine whose speed drifts over seconds (a shared or virtual one)
   moves the prediction and the run alike.

The suite (:mod:`amnet_bench.model`) predicts ``T = T_comp + sum_j N_j x (c(pattern_j) -
c(private)) + wait + barriers x c(barrier)`` per thread and round (Equation 6.1 with rates as
costs per access; the private cost is taken off because ``T_comp`` already made every
access, privately; ``wait``: requests to other nodes waiting for a busy owner's next poll)
and compares the slowest thread's prediction with the slowest thread's measurement: δ of
Equation 7.1.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ._upcjob import Patterns, _batches

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


def _once(fn: Any, upc: Any, barrier: bool) -> float:
    """Seconds of ``fn()`` (and of the barrier after it, with ``barrier``), after a
    barrier."""
    pc = time.perf_counter
    upc.barrier()
    t0 = pc()
    fn()
    if barrier:
        upc.barrier()
    t = pc() - t0
    if not barrier:
        upc.barrier()
    return t


class _Updates:
    """The platform's read-modify-write (``X[i] = X[i] + 1``) per element of a cyclic table
    for the baseline (random elements of other threads), local and private patterns, timed
    as :class:`~amnet_bench._upcjob.Patterns` times reads and writes (batches of ``batch``
    drawn ahead, a fence after each): a remote update waits for its read, and its write
    then queues before the next read to that thread, which separate read and write costs do
    not show."""

    def __init__(self, upc: Any, plan: dict[str, Any]) -> None:
        self.upc, self.plan = upc, plan
        me, T = upc.MYTHREAD, upc.THREADS
        M = plan["block"]
        self.X = upc.shared_array(T * M, "i8", 1)  # cyclic, as update tables are
        self.priv = np.zeros(M, np.int64)
        self.rng = np.random.default_rng((SEED, me, 7))
        self.others = [t for t in range(T) if t != me] or [me]

    def _draws(self, pattern: str) -> list[int]:
        upc, rng, M = self.upc, self.rng, self.plan["block"]
        offs = rng.integers(0, M, self.plan["batch"])
        if pattern == "private":
            return offs.tolist()
        owner = upc.MYTHREAD if pattern == "local" else rng.choice(self.others,
                                                                  self.plan["batch"])
        return (offs * upc.THREADS + owner).tolist()

    def measure(self, min_s: float, least: int = 3) -> dict[str, Any]:
        upc, batch = self.upc, self.plan["batch"]
        out: dict[str, Any] = {}
        for pattern in ("baseline", "local", "private"):
            arr = self.priv if pattern == "private" else self.X
            pool = [self._draws(pattern) for _ in range(32)]
            turn = [0]

            def one(arr=arr, pool=pool, turn=turn, pattern=pattern) -> None:
                idx = pool[turn[0] % 32]
                turn[0] += 1
                for i in idx:
                    arr[i] = arr[i] + 1
                if pattern != "private":
                    upc.fence()

            upc.barrier()
            walls, cpu = _batches(one, min_s, least)
            out[f"{pattern}/update"] = {"wall": sum(walls) / len(walls) / batch,
                                        "cpu": cpu / len(walls) / batch, "batches": len(walls)}
        upc.barrier()
        return out


class _CacheCosts:
    """With the remote-reference cache on, what §7.2 of the thesis needs: the cost of a read
    that misses (a line loaded: the miss penalty), of a read and of a write that hit a loaded
    line, and of writing a dirty line back at a fence, per access or line, against a thread on
    another node (``measure()`` returns None when every thread is on this node: nothing is
    cached)."""

    def __init__(self, ep: Any, upc: Any, plan: dict[str, Any]) -> None:
        self.upc, self.plan = upc, plan
        me, T = upc.MYTHREAD, upc.THREADS
        M = plan["block"]
        self.X = upc.shared_array(T * M, "f8", M)
        self.far = [t for t in range(T) if not ep.is_local(t)]
        self.line = ep.config.upc_cache_block_size // 8  # elements a line
        if self.far:
            t = self.far[me % len(self.far)]
            self.lines = [t * M + k * self.line for k in range(min(plan["batch"],
                                                                   M // self.line))]
            self.inline = list(range(t * M, t * M + self.line))
        upc.barrier()

    def measure(self, min_s: float, least: int = 3) -> dict[str, float] | None:
        upc, X = self.upc, self.X
        if not self.far:
            upc.barrier()
            return None
        lines, inline, line = self.lines, self.inline, self.line
        pc = time.perf_counter
        fence = upc.fence

        def misses() -> None:
            for i in lines:
                X[i]
            fence()

        upc.barrier()
        miss = _avg(_batches(misses, min_s, least)[0]) / len(lines)
        X[inline[0]]  # the line loaded

        def hits_r() -> None:
            for i in inline:
                X[i]

        def hits_w() -> None:
            for i in inline:
                X[i] = 1.5

        hr = _avg(_batches(hits_r, min_s, least)[0]) / line
        hw = _avg(_batches(hits_w, min_s, least)[0]) / line
        fence()
        wb: list[float] = []
        for _ in range(least):
            for i in lines:
                X[i] = 2.5  # a miss each (the line is loaded to be written), then dirty
            t0 = pc()
            fence()  # every dirty line back to its owner
            wb.append((pc() - t0) / len(lines))
        upc.barrier()
        return {"miss": miss, "hit_read": hr, "hit_write": hw, "writeback": _avg(wb)}


def _avg(xs: list[float]) -> float:
    """The mean: the platform's costs price sums of accesses, so a slow batch counts."""
    return sum(xs) / len(xs)


def _midpoint(a: Any, b: Any) -> Any:
    """The mean of two platform records of the same shape (numbers averaged, the rest
    taken from ``a``)."""
    if isinstance(a, dict):
        return {k: _midpoint(v, b[k]) for k, v in a.items()}
    if isinstance(a, float):
        return (a + b) / 2
    return a


def model_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """Every thread: ``samples`` rounds, each every kernel run once, privately (``comp``) and
    on the shared arrays (``actual``), between two measurements of the platform whose mean
    the round keeps, so that a prediction meets the runs its figures bracket; a first round
    (a warm-up) is not kept."""
    import upc_rt as upc

    pp = plan["platform"]
    upc.init(cache=pp["cache"])
    patterns = Patterns(upc, pp)
    updates = _Updates(upc, pp)
    cache = _CacheCosts(ep, upc, pp) if pp["cache"] else None
    kernels = {name: KERNELS[name](upc, plan["params"][name]) for name in plan["kernels"]}
    pc = time.perf_counter

    def measure() -> dict[str, Any]:
        platform = patterns.measure(pp["min_s"], pp["least"], mean=True)
        platform.update(updates.measure(pp["min_s"], pp["least"]))
        cc = cache.measure(pp["min_s"], pp["least"]) if cache is not None else None
        upc.barrier()
        t0 = pc()
        for _ in range(plan["barriers"]):
            upc.barrier()
        return {"platform": platform, "cache": cc,
                "barrier_s": (pc() - t0) / plan["barriers"]}

    rounds = []
    before = measure()
    for rnd in range(plan["samples"] + 1):
        ks: dict[str, Any] = {}
        for name, k in kernels.items():
            comp = _once(k.private, upc, barrier=False)
            s0 = upc.cache_stats()
            actual = _once(k.shared, upc, barrier=True)
            s1 = upc.cache_stats()
            ks[name] = {"actual": actual, "comp": comp, "barriers": 1,
                        "cache_stats": {f: getattr(s1, f) - getattr(s0, f)
                                        for f in ("hits", "misses", "victim_hits",
                                                  "writebacks")}}
        after = measure()
        if rnd:  # the platform on both sides of the runs: their mean prices them
            rounds.append({**_midpoint(before, after), "kernels": ks})
        before = after
    ok = {name: bool(k.check()) if hasattr(k, "check") else True
          for name, k in kernels.items()}
    spans = not all(ep.is_local(t) for t in range(upc.THREADS))
    return {"thread": upc.MYTHREAD, "node": ep.node, "rounds": rounds, "ok": ok,
            "poll_every": int(ep.config.upc_poll_every) if spans else 0,
            "partitions": {name: k.partitions() for name, k in kernels.items()}}
