"""More jobs for tests/test_upc.py (upcjobs.py holds the first ones): the shared heap giving
space back, element reads as snapshots, forall on n-D arrays, atomic domains against the
types they are used on, local_indices. Each runs in every rank (``amnet.run(fn)``), checks
what it can with assert (naming the thread) and returns facts for the test to check."""

from __future__ import annotations

import numpy as np

import upc_rt as upc


def _err(fn) -> str:
    """``fn()``'s exception as ``"Type: message"``, or ``"no error"``."""
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def heap_phases(ep, rounds: int = 2) -> list[str]:
    """Phases that each need most of the segment, one after another: symmetric (all_alloc
    of 5/8 of the segment per thread), then local (alloc of as much on every thread), then
    symmetric again, ``rounds`` times; the same with a shared array in place of all_alloc
    and a global_alloc by thread 1. Each phase frees what it took before the next starts.
    Returns what each step raised ("no error" when it fit)."""
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    big = ep.config.segment_size * 5 // 8
    out = []
    for r in range(rounds):
        p = upc.all_alloc(T, big)
        out.append(f"all_alloc {r}: no error")
        upc.barrier()
        if me == 0:
            upc.free(p)
        upc.barrier()
        out.append(f"alloc {r}: " + _err(lambda: upc.free(upc.alloc(big))))
        upc.barrier()
    X = upc.shared_array(big // 8 * T, "i8", big // 8)
    X.local[:] = me
    upc.barrier()
    if me == 0:
        upc.free(X)
    upc.barrier()
    out.append("alloc after array: " + _err(lambda: upc.free(upc.alloc(big))))
    upc.barrier()
    g = upc.global_alloc(T, big) if me == 1 % T else None
    upc.barrier()
    out.append("alloc beside global_alloc: " + _err(lambda: upc.alloc(big)))  # no room
    upc.barrier()
    if g is not None:
        upc.free(g)
    upc.barrier()
    out.append("alloc after global_alloc: " + _err(lambda: upc.free(upc.alloc(big))))
    upc.barrier()
    # local -> global: a local block in the way refuses the growth, its free lets it
    q = upc.alloc(big) if me == T - 1 else None
    upc.barrier()
    out.append("all_alloc beside alloc: " + _err(lambda: upc.all_alloc(T, big)))
    upc.barrier()
    if q is not None:
        upc.free(q)
    upc.barrier()
    p = upc.all_alloc(T, big)
    upc.barrier()
    if me == 0:
        upc.free(p)
    upc.barrier()
    # its space went back (the symmetric heap's limit is below it now): still a double free
    out.append("free again: " + _err(lambda: upc.free(p)))
    upc.barrier()
    return out


STRUCT = [("k", "i4"), ("v", "f8")]


def _sval(i: int, r: int) -> tuple[int, float]:
    return (i + 100 * r, i * 1.5 + r)


def struct_reads(ep, cache: bool = False) -> dict:
    """Element reads of a structured shared array are values, not views, on every route:
    two reads from another thread one after the other (another node: one scratch buffer;
    the cache when on), a read of a thread of my node and of my own element, then the owner
    overwrites them; relaxed, strict and n-D reads. Each read must keep what it read, and
    be writable without writing the array (a local struct, as ``s = X[i]`` in UPC).
    Returns, per route, what the reads held after the owners' writes."""
    upc.init(cache=cache)
    me, T = upc.MYTHREAD, upc.THREADS
    dt = np.dtype(STRUCT)
    X = upc.shared_array(4 * T, dt, 1)  # element i on thread i % T
    Y = upc.shared_array((2, 2 * T), dt, 1)  # the same, row-major
    other = (me + 1) % T
    routes = {"relaxed": lambda i: X[i], "strict": lambda i: X.strict[i],
              "nd": lambda i: Y[divmod(i, 2 * T)],
              "nd-strict": lambda i: Y.strict[divmod(i, 2 * T)]}
    out: dict = {}
    for r, (name, read) in enumerate(routes.items()):
        for i in upc.forall(0, 4 * T, affinity=X):
            X[i] = np.array(_sval(i, 2 * r), dt)
            Y[divmod(i, 2 * T)] = np.array(_sval(i, 2 * r), dt)
        upc.barrier()
        a, b, mine = read(other), read(other + 2 * T), read(me)
        upc.barrier()
        for i in upc.forall(0, 4 * T, affinity=X):  # the owners write after the reads
            X[i] = np.array(_sval(i, 2 * r + 1), dt)
            Y[divmod(i, 2 * T)] = np.array(_sval(i, 2 * r + 1), dt)
        upc.barrier()
        got = [a.item(), b.item(), mine.item()]
        # a value of my own: writable, and writing it writes nothing shared
        got.append(_err(lambda a=a: a.__setitem__("k", -7)))
        got.append(_err(lambda m=mine: m.__setitem__("v", -7.5)))
        got.append(read(other).item())
        upc.barrier()
        got.append(read(me).item())
        out[name] = got
        upc.barrier()
    X[other] = (other, -1.5)  # a tuple is one record, as numpy takes it
    upc.barrier()
    out["tuple"] = X[me].item()
    upc.barrier()
    if me == 0:
        X[0:2] = [(7, 7.5), (8, 8.5)]
    upc.barrier()
    out["tuples"] = [x.item() for x in X[0:2]]
    out["bad tuple"] = _err(lambda: X.__setitem__(other, (1, 2, 3)))
    out["subarray"] = _err(lambda: upc.shared_array(4, ("f8", 3), 1))  # refused, collectively
    V = upc.shared_array(4, [("v", "f8", 3)], 1)  # ... as the message says, it works
    V[me] = (np.arange(3.0) + me,)
    upc.barrier()
    out["named"] = V[other]["v"].tolist()
    out["want"] = {name: [_sval(other, 2 * r), _sval(other + 2 * T, 2 * r), _sval(me, 2 * r),
                          "no error", "no error", _sval(other, 2 * r + 1),
                          _sval(me, 2 * r + 1)]
                   for r, name in enumerate(routes)}
    return out


PADDED = np.dtype([("x1", "i1"), ("x2", "i2"), ("x3", "i4")], align=True)  # one pad byte


def struct_bytes(ep, cache: bool = False) -> dict:
    """A read of a structured element returns exactly the bytes stored, padding included
    (UPC copies bytes): each owner zeroes its elements' bytes through ``upc.cast``, then
    fills their fields; every thread reads every element relaxed, strict and n-D (garbage
    first left in numpy's free memory, where a field-wise copy would pick it up). Returns
    each route's elements as hex strings, and the bytes wanted."""
    upc.init(cache=cache)
    T = upc.THREADS
    X = upc.shared_array(2 * T, PADDED, 1)
    Y = upc.shared_array((2, T), PADDED, 1)
    for i in upc.forall(0, 2 * T, affinity=X):
        for A, k in ((X, i), (Y, divmod(i, T))):
            raw = upc.cast(A.ptr(k))[:PADDED.itemsize]
            raw[:] = 0
            v = raw.view(PADDED)
            v["x1"], v["x2"], v["x3"] = i + 1, 0x1c1c, -i
    upc.barrier()
    want = []
    for i in range(2 * T):
        w = np.zeros(1, PADDED)
        w["x1"], w["x2"], w["x3"] = i + 1, 0x1c1c, -i
        want.append(w.tobytes().hex())
    out: dict = {}
    routes = {"relaxed": lambda i: X[i], "strict": lambda i: X.strict[i],
              "nd": lambda i: Y[divmod(i, T)], "nd-strict": lambda i: Y.strict[divmod(i, T)]}
    for name, read in routes.items():
        got = []
        for i in range(2 * T):
            # freed to numpy's cache of small buffers: the next one of its size reuses it
            junk = np.full(PADDED.itemsize, 0x1c, np.uint8)
            del junk
            got.append(read(i).tobytes().hex())
        out[name] = got
    # slices and index arrays: one transfer or copy per thread, byte for byte too
    junk = np.full(2 * T * PADDED.itemsize, 0x1c, np.uint8)
    del junk
    out["slice"] = [x.tobytes().hex() for x in X[0:2 * T]]
    out["strided"] = [x.tobytes().hex() for x in X[1::2]] + [x.tobytes().hex() for x in X[0::2]]
    out["index"] = [x.tobytes().hex() for x in X[np.arange(2 * T)]]
    out["nd-slice"] = [x.tobytes().hex() for x in Y[0:2, :].reshape(-1)]
    out["want"] = want
    upc.barrier()
    return out


FORALL_CASES = [((5, 7), 1), ((5, 7), 3), ((5, 7), 7), ((5, 7), 10), ((5, 7), 0),
                ((5, 7), None), ((3, 8), 4), ((4, 2, 3), 4), ((4, 2, 3), 1), ((9,), 2)]


def forall_rows(ep) -> list:
    """``upc.forall(0, R, affinity=A)`` for arrays of several shapes and block sizes: the
    rows each thread runs (checked here against the pointer to each row's first element);
    then a row index past the end."""
    upc.init()
    me = upc.MYTHREAD
    out: list = []
    for shape, b in FORALL_CASES:
        A = upc.shared_array(shape, "i4", b)
        rows = list(upc.forall(0, shape[0], affinity=A))
        first = (0,) * (len(shape) - 1)
        for i in range(shape[0]):  # &A[i] has the affinity of &A[i][0]
            assert (i in rows) == (upc.threadof(A.ptr((i, *first))) == me), (me, shape, b, i)
        out.append(rows)
        out.append(list(upc.forall(shape[0] - 1, -1, -2, affinity=A)))  # stepping down
    A = upc.shared_array((5, 7), "i4", 3)
    out.append(_err(lambda: list(upc.forall(0, 6, affinity=A))))
    upc.barrier()
    return out


def atomic_types(ep) -> dict:
    """Atomic domains used on pointers of another type: refused before anything moves (the
    word keeps its value); the right type works, on a shared array and on raw bytes."""
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    F = upc.shared_array(T, "f8", 1)
    Q = upc.shared_array(T, "i8", 1)
    raw = upc.all_alloc(T, 16)  # bytes: block t (16 bytes) on thread t
    other = (me + 1) % T  # on another node in a job across nodes
    F[me] = 2.5
    Q[me] = 40
    upc.barrier()
    i8 = upc.atomic_domain(["add", "get"], "i8")
    i4 = upc.atomic_domain(["add", "get"], "i4")
    f8 = upc.atomic_domain(["add", "get"], "f8")
    out = {"i8 on f8": _err(lambda: i8.get(F.ptr(other))),
           "i8 add on f8": _err(lambda: i8.add(F.ptr(other), 1)),
           "i4 on i8": _err(lambda: i4.fetch_add(Q.ptr(other), 1)),
           "f8 on i8": _err(lambda: f8.fetch_add(Q.ptr(other), 1.0)),
           "i4 on 8-byte elements": _err(lambda: i4.get(upc.SharedPtr(other, 0, Q.ptr(other)
                                                                     .addrfield, 8, 1, T)))}
    upc.barrier()
    out["f8 after"] = float(F[other])  # nothing moved
    out["i8 after"] = int(Q[other])
    upc.barrier()
    out["f8 on f8"] = f8.fetch_add(F.ptr(other), 1.0)
    out["i8 on i8"] = i8.fetch_add(Q.ptr(other), 2)
    out["i8 on raw"] = i8.fetch_add(raw + 16 * other + 8, 3)  # UPC's shared void *
    upc.barrier()
    out["f8 end"] = float(F[me])
    out["i8 end"] = int(Q[me])
    out["raw end"] = i8.get(raw + 16 * me + 8)
    out["raw misaligned"] = _err(lambda: i8.get(raw + 16 * other + 4))
    upc.barrier()
    return out


LOCAL_CASES = [(13, 1), (13, 3), (13, 0), (13, None), (40, 7), ((5, 6), 4), ((5, 6), 1),
               ((3, 4, 5), 7), ((3, 4, 5), 0), ((2, 3), 10)]


def local_indices(ep) -> list:
    """``X.local_indices()`` for several shapes and block sizes: what it gives, checked
    here against ``X.local`` (thread 0 filled the array from a numpy reference)."""
    upc.init()
    out = []
    for shape, b in LOCAL_CASES:
        X = upc.shared_array(shape, "i8", b)
        ref = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) * 5 - 3
        if upc.MYTHREAD == 0:
            X[...] = ref
        upc.barrier()
        idx = X.local_indices()
        assert np.array_equal(X.local, ref[idx]), (upc.MYTHREAD, shape, b)
        assert np.array_equal(X[idx], X.local)  # a bulk read by them: the same elements
        out.append(idx.tolist() if isinstance(idx, np.ndarray) else [a.tolist() for a in idx])
        upc.barrier()
    return out


def barriers(ep) -> list[str]:
    """Split-phase and named barriers: work between notify and wait, matching names, an
    unnamed notify matching any name, a mismatch (BarrierMismatch on every thread, then the
    next barrier works), and the state errors."""
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    X = upc.shared_array(T, "i8", 1)
    for r in range(6):  # a write before notify is seen after wait, phase after phase
        X[(me + 1) % T] = 10 * r + me
        upc.notify(r if r % 2 else None)
        np.sort(np.arange(1000))  # local work between notify and wait
        upc.wait()
        assert X[me] == 10 * r + (me - 1) % T, (me, r)
        upc.barrier()
    upc.barrier("same name")
    upc.barrier(None if me == 0 else 42)  # an unnamed barrier matches any name
    out = [_err(lambda: upc.barrier("a" if me == 0 else "b"))]
    upc.barrier()  # the next barrier works
    out.append(_err(lambda: upc.barrier(7)))
    upc.notify()
    out.append(_err(upc.notify))
    upc.wait()
    out.append(_err(upc.wait))
    upc.barrier()
    return out
