"""Jobs for tests/test_upc.py: each runs in every rank (``amnet.run(fn)``), checks what it
can with assert (naming the thread) and returns facts for the test to check."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

import amnet
import upc_rt as upc

BLOCKS = (1, 3, 0, None)


def _ref(n: int, k: int) -> np.ndarray:
    return (np.arange(n) * 7 + k) % 1000


def suite(ep, cache: bool = False, seed: int = 0) -> dict:
    """Every operation once, checked against numpy models."""
    upc.init(cache=cache)
    me, T = upc.MYTHREAD, upc.THREADS
    assert (me, T) == (ep.rank, ep.size)
    from upc_rt import MYTHREAD  # resolved for this thread

    assert MYTHREAD == me
    rng = np.random.default_rng(seed)  # same draws on every thread
    facts: dict = {"rank": me}
    for k, bs in enumerate(BLOCKS):
        n = 37
        X = upc.shared_array(n, "i8", bs)
        ref = _ref(n, k)
        for i in upc.forall(0, n, affinity=X):
            X[i] = int(ref[i])
        assert np.array_equal(X.local, ref[X.layout.owners(np.arange(n)) == me])
        upc.barrier()
        got = [int(X[i]) for i in range(n)]
        assert got == ref.tolist(), (me, bs, got)
        for _ in range(6):
            a, b = sorted(rng.integers(-n - 3, n + 3, 2).tolist())
            s = int(rng.choice([1, 2, 3, -1, -2, 5]))
            assert np.array_equal(X[a:b:s], ref[a:b:s]), (me, bs, a, b, s)
        idx = rng.integers(0, n, 9)
        assert np.array_equal(X[idx], ref[idx])
        upc.barrier()
        # each thread rewrites one slice in bulk, in turn
        a, b = sorted(rng.integers(0, n, 2).tolist())
        s = int(rng.choice([1, 2, 3]))
        if me == k % T:
            X[a:b:s] = -np.arange(len(range(a, b, s)))
        upc.barrier()
        ref[a:b:s] = -np.arange(len(range(a, b, s)))
        assert np.array_equal(X[:], ref), (me, bs)
        # pointers agree with the array
        p = X.ptr(0)
        for i in (1, 5, 17, 36):
            q = X.ptr(i)
            assert p + i == q and q - p == i and (q > p)
            assert upc.threadof(q) == X.layout.owner(i)
        upc.barrier()
        upc.free(X) if me == 0 else None
        upc.barrier()
    # strict, 2-D, other dtypes
    F = upc.shared_array((4, 6), "f4", 5)
    if me == 0:
        for i in range(4):
            for j in range(6):
                F[i, j] = i * 10 + j + 0.5
    upc.barrier()
    full = np.array([[i * 10 + j + 0.5 for j in range(6)] for i in range(4)], "f4")
    assert np.array_equal(F[:, :], full) and np.array_equal(F[2], full[2])
    assert F.strict[3, 5] == full[3, 5]
    upc.barrier()
    F.strict[me % 4, 0] = -1
    upc.barrier()
    assert F[me % 4, 0] == -1
    # memget / memput / memcpy / memset and their _nb forms
    A = upc.all_alloc(2 * T, 64)
    mine = A + 64 * (2 * me)  # my first block (block 2*me is on thread (2*me) % T)
    blk = A + 64 * me  # block me lives on thread me
    upc.memput(blk, bytes([me + 1]) * 64, 64)
    upc.barrier()
    nxt = (me + 1) % T
    buf = bytearray(64)
    upc.memget(buf, A + 64 * nxt, 64)
    assert buf == bytes([nxt + 1]) * 64, (me, A, bytes(buf))
    h = upc.memget_nb(buf, A + 64 * ((me + T - 1) % T), 64)
    h.sync()
    assert buf == bytes([(me + T - 1) % T + 1]) * 64
    upc.barrier()
    upc.memcpy(A + 64 * (T + me), A + 64 * nxt, 64)  # block T+me: thread me again
    upc.memcpy_nb(A + 64 * (T + me) + 0, A + 64 * nxt, 8).sync()
    upc.barrier()
    upc.memset(A + 64 * me, 0xAB, 10)
    upc.memput_nb(blk, b"\x07" * 4, 4).sync()
    upc.barrier()
    view = upc.cast(A + 64 * me)
    if view is not None:
        assert bytes(view[:10]) == b"\x07" * 4 + b"\xab" * 6, bytes(view[:10])
    upc.memget(buf, A + 64 * (T + me), 64)
    assert buf == bytes([nxt + 1]) * 64, (me, A, bytes(buf))
    del mine
    # heaps: global_alloc, alloc, free; churn
    g = upc.global_alloc(T, 128) if me == 0 else None
    loc = [upc.alloc(int(s)) for s in rng.integers(1, 5000, 20)]
    for q in loc[::2]:
        upc.free(q)
    loc = [upc.alloc(3000) for _ in range(5)] + loc[1::2]
    for q in loc:
        upc.free(q)
    if g is not None:
        upc.free(g)
    upc.barrier()
    # atomics and locks
    C = upc.shared_array(T, "i8", 1)
    D = upc.atomic_domain(["add", "get", "cas", "mult"], "i8")
    tickets = [D.fetch_add(C.ptr(0), 1) for _ in range(5)]
    L = upc.all_lock_alloc()
    for _ in range(5):
        with L:
            C[1 % T] = C[1 % T] + 1 if T > 1 else C[0]
    upc.barrier()
    if T > 1:
        assert C[1] == 5 * T, C[1]
    else:
        assert C[0] == 5
    facts["tickets"] = tickets
    W = upc.shared_array(T, "i8", 1)
    assert D.cas(W.ptr(T - 1), 0, 1) in (0, 1)
    upc.barrier()
    assert D.get(W.ptr(T - 1)) == 1
    upc.barrier()
    if me == 0:
        D.mult(W.ptr(T - 1), 6)
    upc.barrier()
    assert D.get(W.ptr(T - 1)) == 6
    facts["cache"] = dataclasses.asdict(upc.cache_stats())
    upc.barrier()
    return facts


def lock_fifo(ep) -> list[int]:
    """Thread 0 holds the lock while 1, 2, ... queue in that order; the grants must follow."""
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    L = upc.all_lock_alloc()  # the first lock: hosted by thread 0
    assert L.host == 0
    turn = upc.shared_array(T, "i8", 1)
    count = upc.shared_array(1, "i8", 1)
    seq = upc.shared_array(T, "i8", 1)
    D = upc.atomic_domain(["add"], "i8")
    rt = upc._rt.current()
    upc.barrier()
    if me == 0:
        L.lock()
        for k in range(1, T):
            turn.strict[k] = 1
            deadline = time.monotonic() + 30
            while len(rt.locks[L.lid].queue) < k:  # thread k's request has arrived
                upc.poll()
                assert time.monotonic() < deadline, "a lock request never arrived"
        L.unlock()
    else:
        while turn.strict[me] == 0:
            upc.poll()
        L.lock()
        seq.strict[D.fetch_add(count.ptr(0), 1)] = me  # the order the grants came in
        L.unlock()
    upc.barrier()
    return [int(seq[i]) for i in range(T - 1)]


def release_hazard(ep, rounds: int = 8, cache: bool = False) -> list[int]:
    """MuPC Table 4.1: thread 0 writes X (on thread 3, another node) inside the critical
    section; thread 2 takes the lock next and must read the new value (with the cache on,
    the write waits in thread 0's cache until a fence)."""
    upc.init(cache=cache)
    me = upc.MYTHREAD
    X = upc.shared_array(4, "i8", 1)
    flag = upc.shared_array(4, "i8", 1)
    L = upc.all_lock_alloc()  # hosted by thread 0
    seen = []
    upc.barrier()
    for r in range(1, rounds + 1):
        if me == 0:
            with L:
                flag.strict[2] = r  # thread 2 may now queue for the lock
                X[3] = r  # relaxed, to another node: in flight for 20 ms
        elif me == 2:
            while flag.strict[2] != r:
                upc.poll()
            with L:
                seen.append(int(X[3]))
        upc.barrier()
    return seen


def mismatch(ep) -> list[str]:
    upc.init()
    me = upc.MYTHREAD
    out = []
    for call in (lambda: upc.all_alloc(4, 8 * (1 + me)),
                 lambda: upc.shared_array(10 + me, "f8", 1),
                 lambda: upc.shared_array(10, "f8" if me == 0 else "i4", 1)):
        try:
            call()
        except amnet.CollectiveMismatch as e:
            out.append(str(e))
        else:
            out.append("no error")
    X = upc.shared_array(5, "i8", 1)  # the next collective still works
    X[me] = me
    upc.barrier()
    out.append(str(X[0]))
    return out


def bad_input(ep) -> dict:
    out: dict = {}

    def catch(key, fn):
        try:
            fn()
        except Exception as e:
            out[key] = f"{type(e).__name__}: {e}"
        else:
            out[key] = "no error"

    catch("before_init", lambda: upc.shared_array(4))
    catch("mythread_before_init", lambda: upc.MYTHREAD)
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    X = upc.shared_array(10, "i2", 2)
    catch("index", lambda: X[10])
    catch("index_set", lambda: X.__setitem__(-11, 1))
    catch("fit", lambda: X.__setitem__(me, 70000))
    catch("fit_remote", lambda: X.__setitem__((me * 2 + 2) % 10, 1.5))
    catch("fit_slice", lambda: X.__setitem__(slice(0, 4), [1, 2, 3, 1 << 20]))
    A = upc.all_alloc(T, 32)
    catch("memget_past_end", lambda: upc.memget(bytearray(64), A, 40))
    catch("memput_past_end", lambda: upc.memput(A + 8, b"x" * 32, 32))
    L = upc.all_lock_alloc()
    catch("unlock_not_held", L.unlock)
    q = upc.alloc(64)
    upc.free(q)
    catch("double_free", lambda: upc.free(q))
    catch("free_inside", lambda: upc.free(A + 1))
    catch("alloc_too_big", lambda: upc.alloc(1 << 40))
    upc.barrier()
    catch("all_alloc_too_big", lambda: upc.all_alloc(T, 1 << 40))
    catch("lock_after_free", lambda: (upc.lock_free(L) if me == 0 else None,
                                      upc.barrier(), L.lock()))
    upc.barrier()
    assert [int(v) for v in X[:]] == [0] * 10, X[:]  # nothing was written
    return out


def churn(ep, rounds: int = 60) -> int:
    """Symmetric and local allocations interleaved, freed in shuffled order: no failure."""
    upc.init()
    rng = np.random.default_rng(upc.MYTHREAD)
    live, big = [], 0
    for r in range(rounds):
        p = upc.all_alloc(upc.THREADS, int(np.random.default_rng(r).integers(1, 40000)))
        live.append(("s", p))
        live.append(("l", upc.alloc(int(rng.integers(1, 60000)))))
        if r % 3 == 2:
            for kind, q in live:
                if kind == "l" or upc.MYTHREAD == 0:
                    upc.free(q)
            live.clear()
            upc.barrier()
    # after everything is freed, most of the segment is one allocation again
    for kind, q in live:
        if kind == "l" or upc.MYTHREAD == 0:
            upc.free(q)
    upc.barrier()
    big = upc.alloc(ep.config.segment_size // 2)
    upc.free(big)
    upc.barrier()
    return 1


ND_KEYS = [
    (slice(None), slice(4, 8)),  # whole rows of a few threads' columns: a grid per thread
    (slice(1, None, 3), slice(None, None, -2)),  # rows stepped, columns reversed
    (slice(None, None, -1), slice(2, 7, 2)),  # rows reversed
    (Ellipsis, 3),  # one column
    (2,),  # one row
    (slice(0, 5), slice(1, 2)),  # a column as a 2-D slice
    (slice(3, 3), slice(None)),  # empty
    (np.array([5, 0, 2]), slice(1, 6)),  # index array rows: the general path
]


def nd_slices(ep, cache: bool = False) -> int:
    """2-D and 3-D slices read and written in bulk, against numpy, for block sizes whose
    rows line up with the layout's period (one 2-level transfer per thread) and ones that
    do not (the general path)."""
    upc.init(cache=cache)
    me, T = upc.MYTHREAD, upc.THREADS
    checked = 0
    for shape, bs in [((9, 8), 2), ((9, 8), 8), ((9, 8), 3), ((9, 8), 0), ((9, 8), None),
                      ((4, 3, 8), 4), ((4, 3, 8), 1)]:
        X = upc.shared_array(shape, "i8", bs)
        ref = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) * 3 + 1
        if me == 0:
            X[...] = ref
        upc.barrier()
        keys = ND_KEYS if len(shape) == 2 else [
            (slice(None), 1, slice(None)), (slice(1, 4, 2), slice(None), slice(0, 8, 3)),
            (Ellipsis, slice(None, None, -1)), (0, 2)]
        for key in keys:
            assert np.array_equal(X[key], ref[key]), (me, shape, bs, key, X[key], ref[key])
            checked += 1
        upc.barrier()
        for k, key in enumerate(keys):  # each key written by one thread, in turn
            if k % T == me:
                vals = -np.arange(ref[key].size, dtype=np.int64).reshape(ref[key].shape) - k
                X[key] = vals
            ref[key] = -np.arange(ref[key].size, dtype=np.int64).reshape(ref[key].shape) - k
            upc.barrier()
            assert np.array_equal(X[...], ref), (me, shape, bs, key)
            checked += 1
            upc.barrier()  # everyone checked before the next write
    return checked


def index_keys(ep) -> list[str]:
    """Index keys numpy accepts give numpy's answer; bad ones IndexError naming the array;
    a numpy float is refused for an int array held locally as it is remotely."""
    upc.init()
    X = upc.shared_array(300, "i8", 3)
    ref = np.arange(300) * 2
    if upc.MYTHREAD == 0:
        X[:] = ref
    upc.barrier()
    for key in (np.array([1, 2, 299], np.uint16), np.array([5], np.uint8),
                ref % 3 == 0, [], np.array(3), [-1, -300]):
        assert np.array_equal(X[key], ref[key]), (key, X[key], ref[key])
    errors = []
    for key in (slice(1, 9, 0), (slice(1.5, None),), np.array([300]), [-301]):
        try:
            X[key]
        except IndexError as e:
            errors.append(str(e).split(":")[0])
    for t in range(upc.THREADS):
        try:
            X[t * 3] = np.float64(3.7)  # element t*3 lives on thread t
        except ValueError as e:
            errors.append(f"float on thread {t}: {str(e)[:10]}")
    upc.barrier()
    return errors


FLAG_PAIRS = [(i, o) for i in ("IN_NOSYNC", "IN_MYSYNC", "IN_ALLSYNC")
              for o in ("OUT_NOSYNC", "OUT_MYSYNC", "OUT_ALLSYNC")]


def _bytes(k: int, n: int) -> np.ndarray:
    return ((np.arange(n) * 13 + k * 7) % 256).astype(np.uint8)


def collectives(ep, cache: bool = False) -> int:
    """The eight UPC collectives against numpy models: every IN/OUT flag pair with the
    default algorithm, every algorithm with the default flags."""
    from amnet.coll import ALGORITHMS

    upc.init(cache=cache)
    me, T = upc.MYTHREAD, upc.THREADS
    n = 12
    A = upc.all_alloc(T, n)  # block k on thread k: sources for any root
    A1 = upc.all_alloc(T, n * T)  # shared [n*T]: gather destinations, scatter sources
    D = upc.shared_array(n * T, "u1", n)  # shared [n] char[n*T]
    S = upc.shared_array(n * T, "u1", n)
    G = upc.shared_array(n * T * T, "u1", n * T)  # shared [n*T] char[n*T*T]
    H = upc.shared_array(n * T * T, "u1", n * T)
    checked = 0
    runs = [(getattr(upc, i) | getattr(upc, o), (w, a)) for i, o in FLAG_PAIRS
            for w in ("broadcast", "scatter", "gather", "gather_all", "exchange", "permute")
            for a in ALGORITHMS[w]]  # every collective x flag pair x algorithm
    runs += [(0, None)]  # and all six, one after another, with the defaults
    for k, (flags, only) in enumerate(runs):
        alg = None if only is None else only[1]

        def want(w: str, only=only) -> bool:
            return only is None or only[0] == w

        root = k % T
        upc.memput(A + root * n, _bytes(k, n), n)  # the root's block, by every thread
        S.local[:] = _bytes(k + me, n)
        upc.memput(A1 + root * n * T, np.concatenate([_bytes(k + t, n) for t in range(T)]),
                   n * T)
        G.local[:] = np.concatenate([_bytes(100 * me + j + k, n) for j in range(T)])
        upc.barrier()
        if want("broadcast"):
            upc.all_broadcast(D, A + root * n, n, flags, algorithm=alg)
            upc.barrier()
            assert np.array_equal(D[:], np.tile(_bytes(k, n), T)), (me, k, "broadcast")
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        if want("scatter"):
            upc.all_scatter(D, A1 + root * n * T, n, flags, algorithm=alg)
            upc.barrier()
            assert np.array_equal(D.local, _bytes(k + me, n)), (me, k, "scatter")
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        if want("gather"):
            upc.barrier()  # everyone read A1 above before it is overwritten
            upc.all_gather(A1 + root * n * T, S, n, flags, algorithm=alg)
            upc.barrier()
            got = np.empty(n * T, np.uint8)
            upc.memget(got, A1 + root * n * T, n * T)
            assert np.array_equal(got, np.concatenate([_bytes(k + t, n) for t in range(T)]))
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        if want("gather_all"):
            upc.all_gather_all(H, S, n, flags, algorithm=alg)
            upc.barrier()
            assert np.array_equal(H.local, np.concatenate([_bytes(k + t, n)
                                                           for t in range(T)])), (me, k)
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        if want("exchange"):
            upc.all_exchange(H, G, n, flags, algorithm=alg)
            upc.barrier()
            assert np.array_equal(H.local, np.concatenate(
                [_bytes(100 * i + me + k, n) for i in range(T)])), (me, k, "exchange")
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        if want("permute"):
            perm = [(i + 1 + k) % T for i in range(T)]
            P = upc.shared_array(T, "i4", 1)
            P[me] = perm[me]
            upc.barrier()
            upc.all_permute(D, S, P if k % 2 else perm, n, flags, algorithm=alg)
            upc.barrier()
            assert np.array_equal(D.local, _bytes(k + perm.index(me), n)), (me, k, "permute")
            upc.free(P) if me == 0 else None
            checked += 1
            upc.barrier()  # all checked before the next call writes (NOSYNC enters at once)
        upc.barrier()
    # reductions: every op on a blocked-cyclic array, and NONCOMM_FUNC on 2x2 matrices
    algs = list(ALGORITHMS["gather_all"])  # what the reductions' gather of totals runs
    for k, (i, o) in enumerate(FLAG_PAIRS):
        flags = getattr(upc, i) | getattr(upc, o)
        for j, (op, dt, func) in enumerate(((upc.ADD, "i8", None), (upc.MULT, "f8", None),
                                            (upc.MIN, "i4", None), (upc.MAX, "u2", None),
                                            (upc.XOR, "i8", None), (upc.LOGAND, "u1", None),
                                            (upc.FUNC, "i8", np.maximum))):
            alg = algs[(7 * k + j) % len(algs)]  # each flag pair meets every algorithm
            nel, bs = 17 + k, 3
            X = upc.shared_array(nel, dt, bs)
            ref = ((np.arange(nel) * 5 + k) % 9 + (1 if op in (upc.MULT, upc.LOGAND) else 0)
                   ).astype(dt)
            if op == upc.MULT:
                ref = (ref % 2 + 1).astype(dt)
            for idx in upc.forall(0, nel, affinity=X):
                X[idx] = ref[idx]
            R = upc.shared_array(1, dt, 1)
            Y = upc.shared_array(nel, dt, bs)
            upc.barrier()
            upc.all_reduce(R.ptr(0), X, op, nel, bs, func, flags, algorithm=alg)
            upc.all_prefix_reduce(Y, X, op, nel, bs, func, flags, algorithm=alg)
            upc.barrier()
            f = {upc.ADD: np.add, upc.MULT: np.multiply, upc.MIN: np.minimum,
                 upc.MAX: np.maximum, upc.XOR: np.bitwise_xor, upc.FUNC: np.maximum,
                 upc.LOGAND: lambda a, b: np.logical_and(a, b).astype(a.dtype)}[op]
            acc = [ref[0]]
            for v in ref[1:]:
                acc.append(f(np.array(acc[-1:], dt), np.array([v], dt))[0])
            assert R[0] == acc[-1], (me, k, op, R[0], acc[-1])
            assert np.array_equal(Y[:], np.array(acc, dt)), (me, k, op)
            checked += 2
            upc.barrier()
            if me == 0:
                for arr in (X, R, Y):
                    upc.free(arr)
    # NONCOMM_FUNC: matrices as 4 consecutive int64 in a structured... element-wise here:
    # a non-commutative associative op on scalars, (a, b) -> a (keep the first)
    X = upc.shared_array(11, "i8", 2)
    for idx in upc.forall(0, 11, affinity=X):
        X[idx] = 100 + idx
    R = upc.shared_array(1, "i8", 1)
    Y = upc.shared_array(11, "i8", 2)
    upc.barrier()
    upc.all_reduce(R, X, upc.NONCOMM_FUNC, 11, 2, lambda a, b: a)
    upc.all_prefix_reduce(Y, X, upc.NONCOMM_FUNC, 11, 2, lambda a, b: a)
    assert R[0] == 100 and np.array_equal(Y[:], np.full(11, 100)), (R[0], Y[:])
    return checked + 1


def coll_bad(ep) -> list[str]:
    """Layouts that do not fit, bad flags, a perm that is not one: refused on every thread
    before anything moves; then a collective works."""
    upc.init()
    T = upc.THREADS
    D = upc.shared_array(8 * T, "u1", 8)
    W = upc.shared_array(8 * T, "u1", 4)  # blocks of 4 bytes, not 8
    S = upc.shared_array(8, "u1", 0)
    small = upc.all_alloc(1, 4)
    Q = upc.shared_array(17, "i8", 3)  # with 2 threads: 9 elements on thread 0, 8 on 1
    Q2 = upc.shared_array(17, "i8", 3)
    R = upc.shared_array(1, "i8", 1)
    out = []
    for call in (lambda: upc.all_broadcast(W, S, 8),
                 lambda: upc.all_broadcast(D, S, 0),
                 lambda: upc.all_broadcast(D, S, 8, upc.IN_MYSYNC | upc.IN_NOSYNC),
                 lambda: upc.all_broadcast(D, S, 8, 1 << 20),
                 lambda: upc.all_permute(D, D, [0] * T, 8),
                 lambda: upc.all_broadcast(D, small, 8),  # src holds 4 bytes
                 lambda: upc.all_reduce(D, D, "SUM", 8, 8),
                 lambda: upc.all_reduce(D, D, upc.ADD, 8, 4),  # blk_size differs
                 lambda: upc.all_reduce(D.ptr(0), Q, upc.ADD, 18, 3),  # past thread 1's part
                 # the threads disagree about the op (same sizes: only upc_rt can tell)
                 lambda: upc.all_reduce(R, Q, upc.MAX if upc.MYTHREAD else upc.ADD, 17, 3),
                 lambda: upc.all_prefix_reduce(Q2, Q, upc.ADD, 17 - upc.MYTHREAD, 3)):
        try:
            call()
            out.append("no error")
        except (ValueError, TypeError, upc.BoundsError, amnet.CollectiveMismatch) as e:
            out.append(f"{type(e).__name__}: {e}")
    upc.all_broadcast(D, S, 8)
    return out


def nb_halo(ep) -> dict:
    """upc.memput/memget in a loop of barriers under auto_nb: the right values, and the
    scheduler at work (puts deferred, gets prefetched from the second run of the phase)."""
    from upc_rt._rt import current

    upc.init()
    T, me = upc.THREADS, upc.MYTHREAD
    X = upc.shared_array(64 * T, "i8", blocksize=64)
    ok = []
    for it in range(4):
        upc.memput(X.ptr(64 * ((me + 1) % T)), np.full(64, it * 10 + me, np.int64), 64 * 8)
        upc.barrier()
        out = np.zeros(64, np.int64)
        upc.memget(out, X.ptr(64 * ((me + 1) % T)), 64 * 8)  # what I put: a conflict check
        ok.append(bool((out == it * 10 + me).all()))
        upc.memget(out, X.ptr(64 * ((me + 2) % T)), 64 * 8)  # another thread's put
        ok.append(bool((out == it * 10 + (me + 1) % T).all()))
        upc.barrier()
    nb = current().nb
    return {"ok": ok, "nb": nb is not None, "stats": None if nb is None else nb.stats}


def cache_write_back(ep, rounds: int = 3) -> dict:
    """Threads 0 and 1 (node 0) write interleaved elements of the same lines of thread 2's
    and 3's pieces (node 1) through their caches -- false sharing at every line -- and
    enough lines that some leave the victim cache (written back during the writes); after a
    barrier every element holds its writer's value. Threads 2 and 3 check theirs."""
    upc.init(cache=True)
    me, T = upc.MYTHREAD, upc.THREADS
    M = 6000  # elements a thread: 12000 bytes of i2, more lines than sets + victims
    X = upc.shared_array(T * M, "i2", M)
    upc.barrier()
    for r in range(1, rounds + 1):
        if me < 2:
            for owner in (2, 3):
                for k in range(me, M, 2):  # every other element: both writers in each line
                    X[owner * M + k] = (r * 7 + k + owner) % 30000 * (1 if me == 0 else -1)
        upc.barrier()
        if me >= 2:
            k = np.arange(M)
            want = (r * 7 + k + me) % 30000 * np.where(k % 2 == 0, 1, -1)
            assert np.array_equal(X.local, want.astype("i2")), (me, r)
        upc.barrier()
    return dataclasses.asdict(upc.cache_stats())


def attentive(ep) -> dict:
    """Thread 0 reads an element of thread 1 (another node) and puts a flag there while
    thread 1 only reads its own elements, waiting for the flag for at most 100000 reads:
    with ``upc_poll_every`` set, those reads poll and serve thread 0; with 0 nothing does
    until thread 1 next waits."""
    upc.init()
    me = upc.MYTHREAD
    X = upc.shared_array(2 * 64, "f8", 64)
    F = upc.shared_array(2, "i8", 1)
    if me == 1:
        X.local[:] = np.arange(64)
    upc.barrier()
    out: dict = {"every": ep.config.upc_poll_every}
    if me == 0:
        out["read"] = float(X[64 + 5])
        F[1] = 1
        upc.fence()
    else:
        n = 0
        while F.local[0] == 0 and n < 100_000:
            X[64 + n % 64]
            n += 1
        out["reads"] = n
    upc.barrier()
    return out
