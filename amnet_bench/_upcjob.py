"""What the ranks of ``amnet-bench upc`` run (importable by name, like any job).

- :func:`patterns_job` (every thread works): the four access patterns of the MuPC thesis
  ("A performance model for Unified Parallel C", §6.4, Tables 6.1-6.4) on a shared array of
  float64 with one block of ``block`` elements per thread (UPC's ``shared [] double *`` per
  thread), read and written one element at a time:

  ``baseline``  each access to a random element of a random *other* thread;
  ``vector``    ``batch`` consecutive elements of one random other thread, from a random start;
  ``coalesce``  ``batch`` elements of one random other thread, irregular small strides (1..8);
  ``local``     random elements of my own block (``X[i]`` with affinity to me);
  ``private``   the same offsets in a private numpy array (the floor ``local`` is held to);
  ``slice``     the vector pattern as one bulk slice, ``X[a:a+batch]`` (what upc_rt offers
                in place of a compiler's vectorisation).

  A batch is ``batch`` accesses and one ``upc.fence()`` (which completes relaxed writes and
  empties the remote-reference cache, so no batch hits lines another one loaded). Each
  thread cycles through 32 batches drawn beforehand (no draw is timed) for at least
  ``min_s`` seconds per pattern and operation, all threads together (a barrier before
  each), and returns its wall-clock and CPU seconds per access (median over its batches).

- :func:`node_peers_job` (2 ranks on one node, rank 0 times): ``X[i]`` of thread 1's element
  and of my own, a numpy scalar read, the bare loop, and ``ep.get`` of 8 bytes.
- :func:`net_peers_job` (4 ranks on 2 nodes, 2 per node, rank 0 times): ``X[i]`` of thread
  2's element beside ``ep.get`` of 8 bytes; a 1 MiB slice contiguous on thread 2 beside one
  ``ep.get`` of the same bytes; a 1 MiB column slice spread over threads 2 and 3 beside the
  two matching ``ep.vis.get_strided_nb`` calls.
- :func:`matmul_job` (every thread works): the naive matrix multiply of the MuPC thesis
  (Table 5.1), one shared element of B at a time, timed and with the conduit messages each
  process sent counted.

Every job checks that what it read is right before timing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._stats import median

PATTERNS = ("baseline", "vector", "coalesce", "local", "private", "slice")


def _batches(fn: Callable[[], Any], min_s: float, least: int = 3) -> tuple[list[float],
                                                                            float]:
    """Call ``fn()`` (one batch) until ``min_s`` seconds and ``least`` calls have passed;
    return each call's wall seconds and the CPU seconds of all of them."""
    pc = time.perf_counter
    out: list[float] = []
    c0, t_end = time.thread_time(), pc() + min_s
    while len(out) < least or pc() < t_end:
        t0 = pc()
        fn()
        out.append(pc() - t0)
    return out, time.thread_time() - c0


def _pattern_draws(rng: np.random.Generator, pattern: str, me: int, T: int, M: int,
                   batch: int) -> list[int]:
    """One batch's global indices (Python ints) for ``pattern``."""
    if pattern in ("local", "private"):
        offs = rng.integers(0, M, batch)
        return (offs + (me * M if pattern == "local" else 0)).tolist()
    others = [t for t in range(T) if t != me] or [me]
    if pattern == "baseline":
        ts = rng.choice(others, batch)
        return (ts * M + rng.integers(0, M, batch)).tolist()
    t = int(rng.choice(others))
    if pattern in ("vector", "slice"):
        start = int(rng.integers(0, M - batch + 1))
        return [t * M + start]
    steps = rng.integers(1, 9, batch)  # coalesce: irregular small strides
    offs = np.concatenate(([0], np.cumsum(steps[:-1])))
    start = int(rng.integers(0, M - int(offs[-1])))
    return (t * M + start + offs).tolist()


class Patterns:
    """The patterns of the module docstring on one shared array, made and checked once
    (collective: every thread); :meth:`measure` times them, as often as asked."""

    def __init__(self, upc: Any, plan: dict[str, Any]) -> None:
        self.upc = upc
        me, T = upc.MYTHREAD, upc.THREADS
        M, batch = plan["block"], plan["batch"]
        self.plan = plan
        self.X = X = upc.shared_array(T * M, "f8", M)
        X.local[:] = np.arange(me * M, (me + 1) * M, dtype=np.float64)
        self.priv = np.arange(M, dtype=np.float64)
        upc.barrier()
        self.rng = rng = np.random.default_rng(plan.get("seed", 0) * 1000 + me)
        # the reads land right (a few of each pattern)
        for pattern in ("baseline", "coalesce", "local"):
            idx = _pattern_draws(rng, pattern, me, T, M, batch)
            assert [float(X[g]) for g in idx] == [float(g) for g in idx], (me, pattern)
        g = _pattern_draws(rng, "vector", me, T, M, batch)[0]
        assert np.array_equal(X[g:g + batch], np.arange(g, g + batch, dtype=np.float64)), me
        upc.barrier()

    def measure(self, min_s: float, least: int = 3, mean: bool = False) -> dict[str, Any]:
        """``{"pattern/op": {"wall", "cpu", "batches"}}``: seconds per access, each pattern
        and operation timed for ``min_s`` and at least ``least`` batches by every thread
        together (a barrier before each); ``wall`` is the median batch's, or with ``mean``
        the mean (all the batches' time over their accesses, as a sum of accesses costs)."""
        upc, X, plan = self.upc, self.X, self.plan
        me, T = upc.MYTHREAD, upc.THREADS
        M, batch = plan["block"], plan["batch"]
        fence = upc.fence
        wbuf = np.full(batch, 1.5)
        out: dict[str, Any] = {}
        for pattern in plan["patterns"]:
            arr = self.priv if pattern == "private" else X
            for op in ("read", "write"):
                # drawn ahead, so no random draw is timed; a fence ends every batch, so a
                # batch never finds lines an earlier one loaded into the cache
                pool = [_pattern_draws(self.rng, pattern, me, T, M, batch) for _ in range(32)]
                turn = [0]

                def one(arr=arr, op=op, pattern=pattern, pool=pool, turn=turn) -> None:
                    idx = pool[turn[0] % 32]
                    turn[0] += 1
                    if pattern == "slice":
                        a = idx[0]
                        if op == "read":
                            X[a:a + batch]
                        else:
                            X[a:a + batch] = wbuf
                    elif pattern == "vector":
                        a = idx[0]
                        if op == "read":
                            for i in range(a, a + batch):
                                arr[i]
                        else:
                            for i in range(a, a + batch):
                                arr[i] = 1.5
                    elif op == "read":
                        for i in idx:
                            arr[i]
                    else:
                        for i in idx:
                            arr[i] = 1.5
                    if pattern != "private":
                        fence()

                upc.barrier()
                walls, cpu = _batches(one, min_s, least)
                n = len(walls)
                wall = sum(walls) / n if mean else median(walls)
                out[f"{pattern}/{op}"] = {"wall": wall / batch,
                                          "cpu": cpu / n / batch, "batches": n}
        upc.barrier()
        return out


def patterns_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """Every thread: seconds per access for each pattern and operation (see the module)."""
    import upc_rt as upc

    upc.init(cache=plan["cache"])
    out: dict[str, Any] = {"thread": upc.MYTHREAD}
    out.update(Patterns(upc, plan).measure(plan["min_s"]))
    out["cache"] = _stats_dict(upc.cache_stats())
    return out


def _stats_dict(s: Any) -> dict[str, Any]:
    return {k: getattr(s, k) for k in ("hits", "misses", "victim_hits", "writebacks",
                                       "invalidations", "enabled")}


def _interleaved(fns: dict[str, Callable[[], Any]], samples: int,
                 per: int) -> dict[str, list[float]]:
    """One untimed round, then ``samples`` rounds; in each, every function timed over ``per``
    back-to-back calls (one perf_counter pair); returns seconds per call, each sample."""
    pc = time.perf_counter
    out: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm up: first calls pay for imports, buffers, page faults
        for _ in range(per):
            fn()
    for _ in range(samples):
        for k, fn in fns.items():
            t0 = pc()
            for _ in range(per):
                fn()
            out[k].append((pc() - t0) / per)
    return out


def _loop_timer(body: str, idx: list[int], env: dict[str, Any]) -> Callable[[], None]:
    """A function running ``for i in idx: <body>`` (one batch of element accesses)."""
    code = f"def run():\n    for i in idx:\n        {body}\n"
    ns: dict[str, Any] = {"idx": idx, **env}
    exec(code, ns)  # a fixed loop around one access: no call per access is timed
    return ns["run"]


def node_peers_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0 of 2 on one node: element reads beside their floors (seconds per access)."""
    import upc_rt as upc

    upc.init()
    M, per = plan["block"], plan["per"]
    X = upc.shared_array(2 * M, "f8", M)
    X.local[:] = np.arange(ep.rank * M, (ep.rank + 1) * M, dtype=np.float64)
    upc.barrier()
    if ep.rank != 0:
        upc.barrier()
        return None
    rng = np.random.default_rng(7)
    offs = rng.integers(0, M, plan["accesses"]).tolist()
    remote = [M + o for o in offs]
    a = np.arange(M, dtype=np.float64)
    buf = np.empty(1, np.float64)
    assert [float(X[i]) for i in remote[:50]] == [float(i) for i in remote[:50]]
    assert [float(X[i]) for i in offs[:50]] == [float(a[i]) for i in offs[:50]]
    get = ep.get
    fns = {
        "x_remote": _loop_timer("X[i]", remote, {"X": X}),
        "x_local": _loop_timer("X[i]", offs, {"X": X}),
        "numpy": _loop_timer("a[i]", offs, {"a": a}),
        "loop": _loop_timer("pass", offs, {}),
        "ep_get": _loop_timer("get(1, base + i * 8, 8, buf)", offs,
                              {"get": get, "buf": buf, "base": X.base}),
    }
    got = _interleaved(fns, plan["samples"], per)
    n = len(offs)
    upc.barrier()
    return {k: [s / n for s in v] for k, v in got.items()}


def net_peers_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0 of 4 on 2 nodes (2 per node): element and 1 MiB slice reads from the other
    node beside ``ep.get`` / ``ep.vis`` of the same bytes (seconds per read)."""
    import upc_rt as upc

    upc.init()
    me = ep.rank
    M = plan["block"]
    X = upc.shared_array(4 * M, "f8", M)
    X.local[:] = np.arange(me * M, (me + 1) * M, dtype=np.float64)
    nbytes = plan["slice_bytes"]
    mc = nbytes // 8  # the contiguous slice: mc elements, all on thread 2
    Xc = upc.shared_array(4 * mc, "f8", mc)
    Xc.local[:] = np.arange(me * mc, (me + 1) * mc, dtype=np.float64)
    rows = nbytes // 32  # the spread slice: Xs[:, 4:8] of (rows, 8), block 2: threads 2, 3
    Xs = upc.shared_array((rows, 8), "f8", 2)
    flat = np.arange(rows * 8, dtype=np.float64).reshape(rows, 8)
    Xs.local[:] = flat[:, 2 * me:2 * me + 2].ravel()
    upc.barrier()
    if me != 0:
        upc.barrier()
        return None
    rng = np.random.default_rng(11)
    offs = rng.integers(0, M, plan["accesses"]).tolist()
    remote = [2 * M + o for o in offs]
    buf = np.empty(1, np.float64)
    assert [float(X[i]) for i in remote[:20]] == [float(i) for i in remote[:20]]
    whole = np.empty(mc, np.float64)
    spread = np.empty((rows, 4), np.float64)
    vis, get = ep.vis, ep.get
    base_c, base_s = Xc.base, Xs.base

    def slice_contig() -> None:
        Xc[2 * mc:3 * mc]

    def get_contig() -> None:
        get(2, base_c, nbytes, whole)

    def slice_spread() -> None:
        Xs[:, 4:8]

    def vis_spread() -> None:
        h2 = vis.get_strided_nb(2, spread, 0, [32], base_s, [16], 16, [rows])
        h3 = vis.get_strided_nb(3, spread, 16, [32], base_s, [16], 16, [rows])
        h2.wait()
        h3.wait()

    assert np.array_equal(Xc[2 * mc:3 * mc], np.arange(2 * mc, 3 * mc, dtype=np.float64))
    get_contig()
    assert np.array_equal(whole, np.arange(2 * mc, 3 * mc, dtype=np.float64))
    assert np.array_equal(Xs[:, 4:8], flat[:, 4:8])
    vis_spread()
    assert np.array_equal(spread, flat[:, 4:8])
    n = len(offs)
    elem = _interleaved({"x_remote": _loop_timer("X[i]", remote, {"X": X}),
                         "ep_get": _loop_timer("get(2, base + i * 8, 8, buf)", offs,
                                               {"get": get, "buf": buf, "base": X.base})},
                        plan["samples"], 1)
    out: dict[str, Any] = {k: [s / n for s in v] for k, v in elem.items()}
    out.update(_interleaved({"slice_contig": slice_contig, "get_contig": get_contig,
                             "slice_spread": slice_spread, "vis_spread": vis_spread},
                            plan["samples"], plan["per_slice"]))
    upc.barrier()
    return out


def matmul_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """Every thread: the naive C = A B (rows blocked per thread, B read one shared element at
    a time); returns its seconds, the conduit messages its process sent, its cache counters."""
    import upc_rt as upc

    upc.init(cache=plan["cache"])
    me, T = upc.MYTHREAD, upc.THREADS
    N = plan["n"]
    R = N // T
    A = upc.shared_array((N, N), "f8", N * R)
    B = upc.shared_array((N, N), "f8", N * R)
    C = upc.shared_array((N, N), "f8", N * R)
    full_a = (np.arange(N * N).reshape(N, N) % 7 - 3).astype(np.float64)
    full_b = (np.arange(N * N).reshape(N, N) % 5 - 2).astype(np.float64)
    A.local[:] = full_a[me * R:(me + 1) * R].ravel()
    B.local[:] = full_b[me * R:(me + 1) * R].ravel()
    upc.barrier()
    sent0 = ep.statistics().conduit.sent
    t0 = time.perf_counter()
    for i in upc.forall(0, N, 1, affinity=lambda i: A.ptr((i, 0))):
        for j in range(N):
            s = 0.0
            for k in range(N):
                s += A[i, k] * B[k, j]
            C[i, j] = s
    upc.barrier()
    seconds = time.perf_counter() - t0
    sent = ep.statistics().conduit.sent - sent0
    want = full_a @ full_b
    assert np.array_equal(C.local.reshape(R, N), want[me * R:(me + 1) * R]), me
    return {"thread": me, "seconds": seconds, "sent": sent,
            "cache": _stats_dict(upc.cache_stats())}
