"""shmem_rt in real jobs (tests/test_shmem.py): every routine checked inside the PEs against a
numpy model. ``suite`` runs all of them in one job and returns a few facts for the test to
check again; a failed check raises AssertionError on its PE (amnet.run re-raises it, naming
the rank)."""

from __future__ import annotations

import numpy as np

import amnet
import shmem_rt as shmem

INT_TYPES = ("i4", "i8", "u4", "u8")


def raises(exc, fn, *args, match: str | tuple = (), **kw) -> str:
    """``fn(*args, **kw)`` raises ``exc`` whose message holds every string in ``match``."""
    try:
        fn(*args, **kw)
    except exc as e:
        msg = str(e)
        for m in (match,) if isinstance(match, str) else match:
            assert m in msg, f"{fn.__name__}: {m!r} not in {msg!r}"
        return msg
    except Exception as e:  # the wrong kind
        raise AssertionError(f"{fn.__name__} raised {type(e).__name__}: {e}, "
                             f"not {exc.__name__}") from e
    raise AssertionError(f"{fn.__name__}{args} did not raise {exc.__name__}")


def eq(got, want, what: str) -> None:
    assert np.array_equal(np.asarray(got), np.asarray(want)), f"{what}: {got!r} != {want!r}"


# -- start, identity, memory ------------------------------------------------------------------
def check_init(me: int, n: int) -> None:
    shmem.init()
    shmem.init()  # twice: harmless
    assert shmem.my_pe() == me and shmem.n_pes() == n
    assert shmem.info_get_version() == (1, 5)
    assert (shmem.MAJOR_VERSION, shmem.MINOR_VERSION) == (1, 5)
    name = shmem.info_get_name()
    assert isinstance(name, str) and name == shmem.VENDOR_STRING
    got = shmem.init_thread(shmem.THREAD_MULTIPLE)
    assert got == shmem.THREAD_FUNNELED and isinstance(got, shmem.THREAD)
    assert shmem.query_thread() == shmem.THREAD_FUNNELED
    assert shmem.init_thread(shmem.THREAD_SINGLE) == shmem.THREAD_SINGLE
    assert shmem.query_thread() == shmem.THREAD_SINGLE
    raises(ValueError, shmem.init_thread, 17, match="thread level")
    assert all(shmem.pe_accessible(p) for p in range(n))
    assert not shmem.pe_accessible(n) and not shmem.pe_accessible(-1)
    shmem.pcontrol(0)


def local_pes(n: int) -> list[int]:
    """World PEs on my node, from TEAM_SHARED."""
    t = shmem.TEAM_SHARED
    return [t.translate_pe(i, shmem.TEAM_WORLD) for i in range(t.n_pes())]


def check_memory(ep, me: int, n: int) -> None:
    offs = []
    mem = shmem.alloc(10, 8)
    assert isinstance(mem, memoryview) and mem.nbytes == 80 and not mem.readonly
    a = shmem.fromalloc(mem, dtype="i8")
    eq(a, np.zeros(10, "i8"), "alloc clears")
    b = shmem.fromalloc(mem, (4, 5), "i4", "F")
    assert b.shape == (4, 5) and b.dtype == np.int32 and b.flags.f_contiguous
    offs.append(ep.segment_offset(a))
    z = shmem.zeros((3, 4), "f8")
    o = shmem.ones(5, "i4")
    f = shmem.full(4, 7, dtype="u8")
    f2 = shmem.full((2, 2), 2.5)
    e = shmem.empty(6, "i2")
    ar = shmem.array(np.arange(6, dtype="i8").reshape(2, 3) * (me + 1))
    na = shmem.new_array(8, "c16")
    al = shmem.zeros(3, "i8", align=4096)
    assert ep.segment_offset(al) % 4096 == 0
    eq(z, np.zeros((3, 4)), "zeros")
    eq(o, np.ones(5, "i4"), "ones")
    eq(f, np.full(4, 7, "u8"), "full")
    assert f2.dtype == np.float64 and (f2 == 2.5).all() and f2.shape == (2, 2)
    assert e.shape == (6,) and e.dtype == np.int16
    eq(ar, np.arange(6).reshape(2, 3) * (me + 1), "array")
    assert na.dtype == np.complex128 and (na == 0).all()
    objs = [a, z, o, f, f2, e, ar, na, al]
    offs = np.array([ep.segment_offset(x) for x in objs], dtype=np.int64)
    # the same offset on every PE
    every = shmem.zeros((n, len(objs)), "i8")
    mine_offs = shmem.array(offs)
    shmem.fcollect(every.reshape(-1), mine_offs)
    assert (every == every[0]).all(), every
    shmem.free(mine_offs)
    shmem.free(every)
    # symmetric: a put to my right neighbour lands in its copy of the same object
    right, left = (me + 1) % n, (me - 1) % n
    shmem.put(ar, np.full((2, 3), 100 + me, "i8"), right)
    shmem.barrier_all()
    eq(ar, np.full((2, 3), 100 + left), "put into shmem.array")
    shmem.barrier_all()
    # addresses and accessibility
    assert shmem.addr_accessible(z, right)
    assert not shmem.addr_accessible(np.zeros(3), right)
    assert not shmem.addr_accessible(z, n)
    mine = local_pes(n)
    assert me in mine
    for p in range(n):
        v = shmem.ptr(o, p)
        if p in mine:
            assert v is not None and v.shape == o.shape and v.dtype == o.dtype, p
        else:
            assert v is None, (p, mine)
    v = shmem.ptr(o, me)
    assert np.shares_memory(v, o)
    v2 = shmem.ptr(ar[1], mine[-1])  # a view: the same element on that PE
    if mine[-1] == me:
        assert np.shares_memory(v2, ar[1])
    shmem.barrier_all()
    if len(mine) > 1:  # write a PE of my node through ptr, read it back with get
        p = mine[(mine.index(me) + 1) % len(mine)]
        shmem.ptr(o, p)[2] = 1000 + me
        shmem.barrier_all()
        got = np.empty(5, "i4")
        shmem.get(got, o, me)
        src = mine[(mine.index(me) - 1) % len(mine)]
        assert got[2] == 1000 + src, (got, src)
    shmem.barrier_all()
    raises(ValueError, shmem.ptr, np.zeros(3), 0, match="not symmetric")
    raises(amnet.RankError, shmem.ptr, o, n, match=f"pe {n}")
    # free and allocate again: the heap gives the same offsets everywhere
    off_na = ep.segment_offset(na)
    shmem.del_array(na)
    na2 = shmem.zeros(8, "c16")
    assert ep.segment_offset(na2) == off_na
    for x in (a, z, o, f, f2, e, ar, na2, al):
        if x is a:
            shmem.free(mem)
        else:
            shmem.free(x)
    raises(ValueError, shmem.free, z, match="not an allocation")
    # ... a KeyError too, as shmem4py raises; also when the memory was given to a later
    # allocation meanwhile, which the second free leaves alone
    raises(KeyError, shmem.free, z, match="not an allocation")
    old = shmem.zeros(4, "i8")
    off_old = ep.segment_offset(old)
    shmem.free(old)
    new = shmem.full(4, 7, "i8")
    assert ep.segment_offset(new) == off_old  # the same place
    for stale in (old, old[:2], memoryview(old)):
        raises(KeyError, shmem.free, stale, match="freed already")
    shmem.barrier_all()
    assert (new == 7).all()
    again = shmem.zeros(4, "i8")  # the heap still knows new's block is taken
    assert ep.segment_offset(again) != off_old
    shmem.free(again)
    mem2 = shmem.alloc(4, 8)
    arr = shmem.fromalloc(mem2, 4, "i8")
    shmem.free(arr)  # an array made on alloc's memory frees it
    raises(KeyError, shmem.free, mem2, match="freed already")
    shmem.free(new)
    raises(TypeError, shmem.free, None, match="takes what shmem.alloc returned")
    small = shmem.alloc(4, 8)
    raises(ValueError, shmem.fromalloc, small, 16, "i8",
           match="shape (16,) of int64 needs 128 bytes; the memory has 32 (4 elements")
    raises(ValueError, shmem.fromalloc, small, None, "V5", match="and 2 more")
    assert shmem.fromalloc(small, -1, "i4").shape == (8,)  # numpy's -1 still fits it
    shmem.free(small)
    # zero-size objects
    zz = shmem.zeros(0, "i8")
    assert zz.size == 0
    shmem.free(zz)
    # a collective mismatch: every PE raises, none hangs, and the heap goes on
    if n > 1:
        raises(ValueError, shmem.alloc, 8 + (me == n - 1) * 8, 1,
               match=("shmem.alloc()", f"PE {n - 1} passed (16,", "PE 0 passed (8,"))
    raises(ValueError, shmem.alloc, -1, match="count and size")
    raises(ValueError, shmem.alloc, 8, 1, 3, match="power of two")
    raises(ValueError, shmem.alloc, 8, 1, None, 8, match="MALLOC_")
    m = shmem.alloc(4, 8, hints=shmem.MALLOC_ATOMICS_REMOTE | shmem.MALLOC_SIGNAL_REMOTE)
    shmem.free(m)
    x = shmem.zeros(4, "i8")
    shmem.barrier_all()
    shmem.p(x, me, right)
    shmem.barrier_all()
    assert x[0] == left
    shmem.free(x)


# -- RMA --------------------------------------------------------------------------------------
def check_rma(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    rng = np.random.default_rng(7)
    for dt in ("i1", "u2", "i4", "i8", "u8", "f4", "f8", "c8", "c16"):
        N = 37
        t = shmem.zeros(N, dt)
        src = (np.arange(N) * 3 + me).astype(dt)
        shmem.barrier_all()
        shmem.put(t, src, right)
        shmem.barrier_all()
        eq(t, (np.arange(N) * 3 + left).astype(dt), f"put {dt}")
        out = np.zeros(N, dt)
        shmem.get(out, t, right)
        eq(out, (np.arange(N) * 3 + me).astype(dt), f"get {dt}")
        # size: only the first k move
        shmem.barrier_all()
        shmem.put(t, np.full(N, 99, dt), right, size=5)
        shmem.barrier_all()
        want = (np.arange(N) * 3 + left).astype(dt)
        want[:5] = 99
        eq(t, want, f"put size=5 {dt}")
        out[:] = 0
        shmem.get(out, t, left, 3)
        eq(out[:3], np.full(3, 99, dt), f"get size=3 {dt}")
        assert (out[3:] == 0).all()
        # no size: the shorter of target and source decides
        shmem.barrier_all()
        shmem.put(t, np.full(4, 55, dt), right)
        shmem.barrier_all()
        want[:4] = 55
        eq(t, want, f"put of a shorter source {dt}")
        small = np.zeros(2, dt)
        shmem.get(small, t, left)
        eq(small, np.full(2, 55, dt), f"get into a shorter target {dt}")
        shmem.barrier_all()
        shmem.free(t)
    # 2-D symmetric arrays, nbi, and a source reused at once
    t = shmem.zeros((4, 6), "f8")
    s = rng.random((n, 4, 6))
    shmem.barrier_all()
    buf = s[me].copy()
    shmem.put_nbi(t, buf, right)
    buf[:] = -1  # put_nbi copied it
    shmem.quiet()
    shmem.barrier_all()
    eq(t, s[left], "put_nbi 2-D")
    g = np.zeros((4, 6))
    shmem.get_nbi(g, t, left)
    shmem.quiet()
    eq(g, s[(left - 1) % n], "get_nbi")
    shmem.barrier_all()
    shmem.free(t)
    # large transfers (several network messages to another node)
    N = 50_000
    t = shmem.zeros(N, "i8")
    shmem.barrier_all()
    shmem.put(t, np.arange(N, dtype="i8") * 7 + me, right)
    shmem.barrier_all()
    eq(t, np.arange(N) * 7 + left, "large put")
    got = np.zeros(N, "i8")
    shmem.get(got, t, right)
    eq(got, np.arange(N) * 7 + me, "large get")
    got[:] = 0
    shmem.get_nbi(got, t, left)
    shmem.quiet()
    eq(got, np.arange(N) * 7 + (left - 1) % n, "large get_nbi")
    shmem.barrier_all()
    shmem.put_nbi(t, np.arange(N, dtype="i8") - me, right)
    shmem.iput(t[N // 2:], np.arange(N, dtype="i8"), right, 2, 3)
    shmem.barrier_all()
    want = np.arange(N) - left
    want[N // 2::2] = np.arange(N)[::3][:N // 4]
    eq(t, want, "large put_nbi + iput")
    got[:] = 0
    shmem.iget(got, t, right, 1, 2)
    want = np.arange(N) - me  # what my right neighbour holds
    want[N // 2::2] = np.arange(N)[::3][:N // 4]
    eq(got[:N // 2], want[::2], "large iget")
    shmem.barrier_all()
    shmem.free(t)
    # strided: iput/iget against numpy slicing
    for tst, sst, size in ((1, 1, None), (3, 2, 4), (2, 5, 3), (1, 3, None), (4, 1, 6)):
        T = shmem.full(24, -1, dtype="i8")
        S = shmem.array(np.arange(24, dtype="i8") + 100 * me)
        shmem.barrier_all()
        shmem.iput(T, S, right, tst, sst, size)
        shmem.barrier_all()
        k = size if size is not None else min(-(-24 // tst), -(-24 // sst))
        want = np.full(24, -1, "i8")
        want[::tst][:k] = (np.arange(24) + 100 * left)[::sst][:k]
        eq(T, want, f"iput tst={tst} sst={sst} size={size}")
        got = np.full(24, -7, "i8")
        shmem.iget(got, S, left, tst, sst, size)
        want = np.full(24, -7, "i8")
        want[::tst][:k] = (np.arange(24) + 100 * left)[::sst][:k]
        eq(got, want, f"iget tst={tst} sst={sst} size={size}")
        shmem.barrier_all()
        shmem.free(S)
        shmem.free(T)
    # p/g
    for dt, v in (("i4", -5), ("u8", 2**63 + 9), ("f8", 2.5), ("c16", 1 + 2j), ("i2", 300)):
        x = shmem.zeros(3, dt)
        shmem.barrier_all()
        shmem.p(x, v + me if dt != "u8" else v, right)
        shmem.barrier_all()
        want = np.array([v + left if dt != "u8" else v], dt)[0]
        assert x[0] == want and (x[1:] == 0).all(), (dt, x, want)
        got = shmem.g(x, left)
        assert got == np.array([v + (left - 1) % n if dt != "u8" else v], dt)[0]
        assert isinstance(got, np.generic) and got.dtype == np.dtype(dt)
        shmem.barrier_all()
        shmem.free(x)
    # fence/quiet order: data then flag, seen in that order
    data = shmem.zeros(64, "i8")
    flag = shmem.zeros(1, "i8")
    shmem.barrier_all()
    shmem.put(data, np.arange(64, dtype="i8") + me, right)
    shmem.fence()
    shmem.p(flag, 1, right)
    shmem.quiet()
    shmem.wait_until(flag, shmem.CMP_EQ, 1)
    eq(data, np.arange(64) + left, "data before flag (fence)")
    shmem.barrier_all()
    shmem.free(flag)
    shmem.free(data)


# -- atomics ----------------------------------------------------------------------------------
def check_atomics(me: int, n: int) -> list[int]:
    right, left = (me + 1) % n, (me - 1) % n
    for dt in INT_TYPES:
        nb = 8 * np.dtype(dt).itemsize
        mask = (1 << nb) - 1
        slots = shmem.zeros(32, dt)  # slot k: written by my left neighbour only

        def s(k, slots=slots):
            return slots[k:k + 1]

        def wrap(v, mask=mask, nb=nb, dt=dt):
            return np.array(v & mask, dtype=f"u{nb // 8}").view(dt)[()]

        shmem.barrier_all()
        # a model of my right neighbour's slots as I change them
        shmem.atomic_set(s(0), 5, right)
        assert shmem.atomic_fetch(s(0), right) == 5
        assert shmem.atomic_swap(s(0), 9, right) == 5
        assert shmem.atomic_compare_swap(s(0), 1, 3, right) == 9  # no match: unchanged
        assert shmem.atomic_compare_swap(s(0), 9, 12, right) == 9
        assert shmem.atomic_fetch_inc(s(0), right) == 12
        shmem.atomic_inc(s(0), right)
        assert shmem.atomic_fetch_add(s(0), 10, right) == 14
        shmem.atomic_add(s(0), 6, right)
        assert shmem.atomic_fetch(s(0), right) == 30
        shmem.atomic_set(s(1), 0b1100, right)
        assert shmem.atomic_fetch_and(s(1), 0b1010, right) == 0b1100
        shmem.atomic_and(s(1), 0b1110, right)  # 1000
        assert shmem.atomic_fetch_or(s(1), 0b0011, right) == 0b1000
        shmem.atomic_or(s(1), 0b0100, right)  # 1111
        assert shmem.atomic_fetch_xor(s(1), 0b0101, right) == 0b1111
        shmem.atomic_xor(s(1), 0b1111, right)  # 0101
        assert shmem.atomic_fetch(s(1), right) == 0b0101
        # wrap-around: add to the largest value
        top = (1 << (nb - 1)) - 1 if dt[0] == "i" else mask
        shmem.atomic_set(s(2), top, right)
        shmem.atomic_add(s(2), 1, right)
        assert shmem.atomic_fetch(s(2), right) == wrap(top + 1), dt
        # the nbi fetching forms
        fetch = np.zeros(1, dt)
        shmem.atomic_set(s(3), 40, right)
        # (the call, its operands after the fetch buffer and the word, the old value fetched)
        for call, operands, old in (
                (shmem.atomic_fetch_nbi, (), 40),
                (shmem.atomic_swap_nbi, (41,), 40),
                (shmem.atomic_compare_swap_nbi, (41, 50), 41),
                (shmem.atomic_fetch_inc_nbi, (), 50),
                (shmem.atomic_fetch_add_nbi, (4,), 51),
                (shmem.atomic_fetch_and_nbi, (0b110000,), 55),  # 55 & 48 = 48
                (shmem.atomic_fetch_or_nbi, (1,), 48),  # 49
                (shmem.atomic_fetch_xor_nbi, (3,), 49)):  # 50
            call(fetch, s(3), *operands, right)
            shmem.quiet()
            assert fetch[0] == old, (call.__name__, dt)
        assert shmem.atomic_fetch(s(3), right) == 50
        # atomic_op / atomic_fetch_op with every AMO, against a model
        model = 0
        shmem.atomic_set(s(4), 0, right)
        for op, v in ((shmem.AMO_SET, 21), (shmem.AMO_INC, None), (shmem.AMO_ADD, 7),
                      (shmem.AMO_AND, 0b11110), (shmem.AMO_OR, 0b1), (shmem.AMO_XOR, 0b101),
                      ("add", 2), ("set", 3)):
            nxt = {"set": lambda m, v: v, "inc": lambda m, v: m + 1,
                   "add": lambda m, v: m + v, "and": lambda m, v: m & v,
                   "or": lambda m, v: m | v, "xor": lambda m, v: m ^ v}[str(op)](model, v)
            shmem.atomic_op(s(4), v, op, right)
            assert shmem.atomic_fetch(s(4), right) == nxt, (op, nxt)
            shmem.atomic_set(s(5), model, right)
            assert shmem.atomic_fetch_op(s(5), v, op, right) == model, op
            assert shmem.atomic_fetch(s(5), right) == nxt
            shmem.atomic_set(s(6), model, right)
            shmem.atomic_fetch_op_nbi(fetch, s(6), v, op, right)
            shmem.quiet()
            assert fetch[0] == model and shmem.atomic_fetch(s(6), right) == nxt, op
            model = nxt
        shmem.barrier_all()
        # what my left neighbour did, seen in my memory
        assert slots[0] == 30 and slots[1] == 0b0101 and slots[3] == 50 and slots[4] == model
        shmem.barrier_all()
        shmem.free(slots)
    # floats: fetch, set, swap (and their nbi)
    for dt in ("f4", "f8"):
        x = shmem.zeros(1, dt)
        shmem.barrier_all()
        shmem.atomic_set(x, 1.5 + me, right)
        assert shmem.atomic_swap(x, 2.25, right) == 1.5 + me
        shmem.barrier_all()
        assert x[0] == 2.25 and shmem.atomic_fetch(x, left) == 2.25
        f = np.zeros(1, dt)
        shmem.atomic_fetch_nbi(f, x, left)
        shmem.quiet()
        assert f[0] == 2.25
        shmem.barrier_all()
        shmem.atomic_op(x, 0.5, shmem.AMO_SET, me)
        assert x[0] == 0.5
        shmem.barrier_all()
        shmem.free(x)
    # contended: every PE on the same words of PE 0 and PE n-1
    K = 20
    ctr = shmem.zeros(4, "i8")
    bits = shmem.zeros(1, "u8")
    shmem.barrier_all()
    tickets = []
    for _ in range(K):
        tickets.append(int(shmem.atomic_fetch_inc(ctr[0:1], 0)))
        shmem.atomic_add(ctr[1:2], 3, n - 1)
        shmem.atomic_inc(ctr[2:3], n - 1)
    shmem.atomic_or(bits, 1 << me, n - 1)
    shmem.atomic_fetch_add(ctr[3:4], me, 0)
    shmem.barrier_all()
    if me == 0:
        assert ctr[0] == K * n and ctr[3] == n * (n - 1) // 2, ctr
    if me == n - 1:
        assert ctr[1] == 3 * K * n and ctr[2] == K * n, ctr
        assert bits[0] == (1 << n) - 1
    shmem.barrier_all()
    shmem.free(bits)
    shmem.free(ctr)
    return tickets


# -- signals ----------------------------------------------------------------------------------
def check_signals(me: int, n: int, big: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    sig = shmem.new_signal()
    assert sig.dtype == np.uint64 and sig.size == 1 and sig[0] == 0
    assert shmem.signal_fetch(sig) == 0
    t = shmem.zeros(big, "i8")
    shmem.barrier_all()
    for k, (size, put) in enumerate(((16, shmem.put_signal), (big, shmem.put_signal_nbi),
                                     (1000, shmem.put_signal))):
        src = np.arange(size, dtype="i8") * (k + 1) + me
        put(t, src, right, sig, 7 + k + 10 * me, shmem.SIGNAL_SET)
        if put is shmem.put_signal_nbi:
            shmem.quiet()
        want = 7 + k + 10 * left
        assert shmem.signal_wait_until(sig, shmem.CMP_EQ, want) == want
        assert shmem.signal_fetch(sig) == want
        eq(t[:size], np.arange(size) * (k + 1) + left, f"put_signal data size {size}")
        shmem.barrier_all()
    # SIGNAL_ADD from every PE to PE 0, each into its own block
    acc = shmem.new_signal()
    blocks = shmem.zeros((n, 8), "f8")
    shmem.barrier_all()
    shmem.put_signal_nbi(blocks[me], np.full(8, me + 0.5), 0, acc, me + 1, shmem.SIGNAL_ADD)
    shmem.put_signal(blocks[me], np.full(8, me + 0.5), 0, acc, 1, 1)  # 1: SIGNAL_ADD
    shmem.quiet()
    if me == 0:
        total = n * (n + 1) // 2 + n
        assert shmem.signal_wait_until(acc, shmem.CMP_GE, total) == total
        eq(blocks, np.repeat(np.arange(n) + 0.5, 8).reshape(n, 8), "signal add blocks")
    shmem.barrier_all()
    # a uint64 value over 2**63
    shmem.put_signal(t, np.zeros(1, "i8"), right, sig, 2**64 - 2, shmem.SIGNAL_SET, size=1)
    assert shmem.signal_wait_until(sig, ">", 2**63) == 2**64 - 2
    shmem.barrier_all()
    raises(ValueError, shmem.put_signal, t, t, right, sig, 1, 5, match="sigop")
    raises(TypeError, shmem.put_signal, t, t, right, t[:1], 1, shmem.SIGNAL_SET,
           match="uint64")
    raises(ValueError, shmem.put_signal, t, t, right, sig, -1 << 64, shmem.SIGNAL_SET,
           match="uint64")
    shmem.del_signal(acc)
    shmem.free(blocks)
    shmem.free(t)
    shmem.del_signal(sig)


# -- point-to-point synchronisation ---------------------------------------------------------
def check_waits(me: int, n: int) -> None:
    right = (me + 1) % n
    for dt in ("i4", "i8", "u4", "u8"):
        iv = shmem.zeros(4, dt)
        flag = shmem.zeros(1, "i8")
        assert not shmem.test(flag, shmem.CMP_EQ, 1)
        assert shmem.test(flag, "==", 0) and shmem.test(flag, "le", 0)
        shmem.barrier_all()
        # my right neighbour's ivars 1 and 3 become 1, then its flag 1
        shmem.p(iv[1:2], 1, right)
        shmem.p(iv[3:4], 1, right)
        shmem.fence()
        shmem.atomic_set(flag, 1, right)
        shmem.wait_until(flag, shmem.CMP_EQ, 1)
        shmem.wait_until(flag, ">", 0)
        st = np.array([0, 1, 0, 0], "i4")
        assert shmem.wait_until_any(iv, shmem.CMP_EQ, 1) == 1
        assert shmem.wait_until_any(iv, shmem.CMP_EQ, 1, st) == 3
        assert shmem.wait_until_some(iv, shmem.CMP_EQ, 1) == [1, 3]
        assert shmem.wait_until_some(iv, shmem.CMP_NE, 1, [0, 1, 0, 1]) == [0, 2]
        shmem.wait_until_all(iv, shmem.CMP_GE, 0)
        shmem.wait_until_all(iv, shmem.CMP_EQ, 1, [1, 0, 1, 0])
        assert shmem.test_all(iv, shmem.CMP_GE, 0)
        assert not shmem.test_all(iv, shmem.CMP_EQ, 1)
        assert shmem.test_all(iv, shmem.CMP_EQ, 0, [0, 1, 0, 1])
        assert shmem.test_any(iv, shmem.CMP_GT, 0) == 1
        assert shmem.test_any(iv, shmem.CMP_GT, 5) is None
        assert shmem.test_any(iv, shmem.CMP_GT, 0, [0, 1, 1, 1]) is None
        assert shmem.test_some(iv, shmem.CMP_LT, 1) == [0, 2]
        assert shmem.test_some(iv, shmem.CMP_GT, 1) == []
        vals = np.array([0, 1, 2, 1])
        shmem.wait_until_all_vector(iv, shmem.CMP_LE, vals)
        assert shmem.wait_until_any_vector(iv, shmem.CMP_EQ, vals) == 0
        assert shmem.wait_until_any_vector(iv, shmem.CMP_EQ, vals, [1, 0, 0, 0]) == 1
        assert shmem.wait_until_some_vector(iv, shmem.CMP_EQ, vals) == [0, 1, 3]
        assert shmem.wait_until_some_vector(iv, shmem.CMP_EQ, vals, [0, 0, 0, 1]) == [0, 1]
        assert shmem.test_all_vector(iv, shmem.CMP_LE, vals)
        assert not shmem.test_all_vector(iv, shmem.CMP_EQ, vals)
        assert shmem.test_all_vector(iv, shmem.CMP_EQ, vals, [0, 0, 1, 0])
        assert shmem.test_any_vector(iv, shmem.CMP_LT, vals) == 2
        assert shmem.test_any_vector(iv, shmem.CMP_LT, vals, [0, 0, 1, 0]) is None
        assert shmem.test_some_vector(iv, shmem.CMP_NE, vals) == [2]
        # everything masked out, or nothing there
        assert shmem.wait_until_any(iv, shmem.CMP_EQ, 7, [1, 1, 1, 1]) is None
        assert shmem.wait_until_some(iv, shmem.CMP_EQ, 7, [1, 1, 1, 1]) == []
        shmem.wait_until_all(iv, shmem.CMP_EQ, 7, [1, 1, 1, 1])
        empty = shmem.zeros(0, dt)
        assert shmem.wait_until_any(empty, "==", 0) is None
        assert shmem.wait_until_some_vector(empty, "==", []) == []
        shmem.barrier_all()
        shmem.free(empty)
        shmem.free(flag)
        shmem.free(iv)
    # a wait that must wait: my left neighbour sets my word after a delay
    w = shmem.zeros(1, "i4")
    shmem.barrier_all()
    import time

    time.sleep(0.02)
    shmem.atomic_add(w, 2, right)
    shmem.wait_until(w, shmem.CMP_GE, 2)
    shmem.barrier_all()
    shmem.free(w)
    # bad calls
    iv = shmem.zeros(2, "i8")
    raises(ValueError, shmem.wait_until, iv[:1], 9, 0, match="cmp must be")
    raises(ValueError, shmem.test, iv[:1], "=~", 0, match="cmp must be")
    raises(ValueError, shmem.test_all, iv, "<>", 0, match="cmp must be")
    raises(TypeError, shmem.wait_until, np.zeros(1, "f8"), "==", 0, match="dtype float64")
    raises(ValueError, shmem.wait_until, iv, "==", 0, match="exactly one element")
    raises(ValueError, shmem.signal_wait_until, np.zeros(1, "u8"), "==", 0,
           match="not symmetric")
    shmem.barrier_all()
    shmem.free(iv)


# -- teams and collectives --------------------------------------------------------------------
def coll_checks(team, tag: str) -> None:
    """Every collective on ``team``, against numpy. Every PE calls it (the symmetric buffers
    are allocated by all, as OpenSHMEM requires); only the members run the collectives."""
    n = shmem.n_pes()
    I8 = shmem.zeros(8 * n * n + 64, "i8")  # source and target areas of each dtype
    J8 = shmem.zeros(8 * n * n + 64, "i8")
    F8 = shmem.zeros(4 * n + 8, "f8")
    G8 = shmem.zeros(4 * n + 8, "f8")
    I4 = shmem.zeros(3 * n + 3, "i4")
    J4 = shmem.zeros(3 * n + 3, "i4")
    if team:
        _coll_member(team, tag, I8, J8, F8, G8, I4, J4)
    shmem.barrier_all()
    for a in (J4, I4, G8, F8, J8, I8):
        shmem.free(a)


def _coll_member(team, tag, I8, J8, F8, G8, I4, J4) -> None:
    tn, ti = team.n_pes(), team.my_pe()
    members = [team.translate_pe(i) for i in range(tn)]
    assert members[ti] == shmem.my_pe()
    # broadcast from every root, the root's own target included
    for root in range(tn):
        src, dst = I8[:6], J8[:6]
        src[:] = np.arange(6) + 10 * ti
        dst[:] = -1
        shmem.broadcast(dst, src, root, team=team)
        eq(dst, np.arange(6) + 10 * root, f"{tag} broadcast root {root}")
        dst[:] = -1
        shmem.broadcast(dst, src, root, 0, team)  # nothing moves
        shmem.broadcast(dst, src, root, 4, team)
        eq(dst, np.r_[np.arange(4) + 10 * root, [-1, -1]], f"{tag} broadcast size 4")
        team.sync()
    # collect: member i gives i + 1 elements
    tot = tn * (tn + 1) // 2
    src, dst = F8[:tn], G8[:tot + 3]
    src[:] = (ti + 1) * 1.5
    dst[:] = 0
    shmem.collect(dst, src, ti + 1, team)
    want = np.concatenate([np.full(i + 1, (i + 1) * 1.5) for i in range(tn)])
    eq(dst[:tot], want, f"{tag} collect")
    assert (dst[tot:] == 0).all()
    # fcollect
    src, dst = I4[:3], J4[:3 * tn]
    src[:] = np.arange(3) + 100 * members[ti]
    shmem.fcollect(dst, src, team=team)
    shmem.fcollect(dst, src, 0, team)
    shmem.alltoall(dst, src, 0, team)
    shmem.reduce(dst, src, shmem.OP_MAX, 0, team)
    eq(dst, np.concatenate([np.arange(3) + 100 * m for m in members]), f"{tag} fcollect")
    # alltoall: block j of member i -> block i of member j
    B = 2
    src, dst = I8[:B * tn], J8[:B * tn]
    src[:] = ti * 1000 + np.arange(B * tn)
    dst[:] = -1
    shmem.alltoall(dst, src, B, team)
    want = np.concatenate([i * 1000 + np.arange(B * ti, B * ti + B) for i in range(tn)])
    eq(dst, want, f"{tag} alltoall")
    team.sync()
    # alltoalls with strides
    tst, sst, B = 2, 3, 2
    src, dst = I8[:B * tn * sst], J8[:B * tn * tst]
    src[:] = ti * 1000 + np.arange(B * tn * sst)
    dst[:] = -1
    shmem.alltoalls(dst, src, tst, sst, B, team)
    want = np.full(B * tn * tst, -1, "i8")
    for i in range(tn):
        for k in range(B):
            want[(i * B + k) * tst] = i * 1000 + (ti * B + k) * sst
    eq(dst, want, f"{tag} alltoalls")
    team.sync()
    # reduce with every op, and the named forms
    ints = np.array([(m * 37 + 5) % 64 for m in members], "i8")  # member i's value
    flt = np.array([1.0 + 0.5 * m for m in members])
    src_i, dst_i, src_f, dst_f = I8[:3], J8[:3], F8[:2], G8[:2]
    src_i[:] = [ints[ti], ints[ti] + 1, -ints[ti]]
    src_f[:] = [flt[ti], -flt[ti]]
    all_i = np.stack([ints, ints + 1, -ints], axis=1)  # (members, 3)
    all_f = np.stack([flt, -flt], axis=1)
    models = {"and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce,
              "xor": np.bitwise_xor.reduce, "max": np.max, "min": np.min, "sum": np.sum,
              "prod": np.prod}
    for op in shmem.OP:
        name = str(op)
        named = getattr(shmem, f"{name}_reduce")
        shmem.reduce(dst_i, src_i, op, team=team)
        eq(dst_i, models[name](all_i, axis=0), f"{tag} reduce {name} i8")
        dst_i[:] = 0
        named(dst_i, src_i, 2, team)
        eq(dst_i[:2], models[name](all_i, axis=0)[:2], f"{tag} {name}_reduce size 2")
        assert dst_i[2] == 0
        if name in ("sum", "prod", "max", "min"):
            shmem.reduce(dst_f, src_f, name, team=team)
            assert np.allclose(dst_f, models[name](all_f, axis=0)), (tag, name, dst_f)
        else:
            raises(TypeError, shmem.reduce, dst_f, src_f, op, team=team, match=name)
    # in place
    x = I8[:1]
    x[0] = ti + 1
    shmem.sum_reduce(x, x, team=team)
    assert x[0] == tn * (tn + 1) // 2
    team.sync()
    shmem.sync(team)


def check_teams(me: int, n: int, world_shares: bool) -> dict:
    W, S = shmem.TEAM_WORLD, shmem.TEAM_SHARED
    assert W and S and not shmem.TEAM_INVALID
    assert W.my_pe() == me and W.n_pes() == n
    assert shmem.team_my_pe(W) == me and shmem.team_n_pes(W) == n
    # as shmem4py: the methods raise for TEAM_INVALID; the C API's functions return -1
    raises(RuntimeError, shmem.TEAM_INVALID.my_pe, match="TEAM_INVALID is not a team")
    raises(RuntimeError, shmem.TEAM_INVALID.n_pes, match="TEAM_INVALID is not a team")
    assert shmem.team_my_pe(shmem.TEAM_INVALID) == -1 == shmem.team_n_pes(shmem.TEAM_INVALID)
    node = local_pes(n)
    assert node == sorted(node) and S.my_pe() == node.index(me)
    assert S.translate_pe() == me and W.translate_pe(me, S) == node.index(me)
    for p in range(n):
        assert W.translate_pe(p, S) == (node.index(p) if p in node else -1)
        assert shmem.team_translate_pe(W, p, W) == p
    assert W.translate_pe(n) == -1 and W.translate_pe(0, shmem.TEAM_INVALID) == -1
    raises(ValueError, shmem.TEAM_INVALID.translate_pe, 0, match="TEAM_INVALID")
    assert W.get_config() == {"num_contexts": 0} == shmem.team_get_config(W)
    assert shmem.Team(W) == W and shmem.Team() == shmem.TEAM_INVALID
    shmem.sync(W)
    W.sync()
    shmem.team_sync(S)
    S.sync()
    shmem.sync_all()
    shmem.sync()
    shmem.barrier_all()
    coll_checks(W, "world")
    coll_checks(S, "shared")
    # even PEs
    ev = W.split_strided(0, 2)
    if me % 2 == 0:
        assert ev and ev.my_pe() == me // 2 and ev.n_pes() == (n + 1) // 2
        assert [ev.translate_pe(i) for i in range(ev.n_pes())] == list(range(0, n, 2))
        assert ev.translate_pe(0, S) == (node.index(0) if 0 in node else -1)
    else:
        assert ev == shmem.TEAM_INVALID and not ev and shmem.team_my_pe(ev) == -1
    coll_checks(ev, "evens")
    # odd PEs with two contexts, through the module function and config
    od = shmem.team_split_strided(W, 1, 2, n // 2, {"num_contexts": 2}) if n > 1 else None
    coll_checks(od or shmem.TEAM_INVALID, "odds")
    if od is not None:
        if me % 2:
            assert od.get_config() == {"num_contexts": 2}
            assert od.my_pe() == me // 2 and shmem.team_translate_pe(od, 0, W) == 1
            # a split of a split: its last member only
            last = od.split_strided(od.n_pes() - 1, 1, 1, num_contexts=1)
            if od.my_pe() == od.n_pes() - 1:
                assert last.n_pes() == 1 and last.translate_pe(0) == me
                assert last.get_config() == {"num_contexts": 1}
                last.destroy()
                assert not last
            else:
                assert not last
            shmem.team_destroy(od)
            assert not od
        else:
            assert not od
    # 2-D: rows of 2
    xt, yt = W.split_2d(2)
    assert xt.my_pe() == me % 2 and xt.n_pes() == len([p for p in range(n) if p // 2 == me // 2])
    assert yt.my_pe() == me // 2 and yt.n_pes() == len(range(me % 2, n, 2))
    assert xt.translate_pe(0) == me - me % 2 and yt.translate_pe(0) == me % 2
    coll_checks(xt, "xaxis")
    xs, ys = shmem.team_split_2d(W, n, {"num_contexts": 1})
    assert xs.n_pes() == n and ys.n_pes() == 1 and xs.get_config()["num_contexts"] == 1
    for t in (xt, yt, xs, ys):
        t.destroy()
    with W.split_strided(0, 1, n) as whole:
        assert whole.n_pes() == n
        coll_checks(whole, "whole")
    assert not whole
    # bad splits raise on every member
    raises(ValueError, W.split_strided, 0, 1, n + 1, match=("do not fit", f"{n} PEs"))
    raises(ValueError, W.split_strided, n, 1, 1, match="do not fit")
    raises(ValueError, W.split_strided, 0, 1, 1, bogus=1, match="unknown team config")
    if n > 1:  # different arguments on different members
        raises(ValueError, W.split_strided, 0, 1, 1 + (me == 1),
               match="every member must pass the same")
    raises(ValueError, ev.sync if not ev else shmem.TEAM_INVALID.sync, match="TEAM_INVALID")
    raises(TypeError, shmem.sync, "world", match="shmem_rt.Team")
    if ev:
        alias = shmem.Team(ev)
        assert alias == ev and alias
        ev.destroy()
        raises(ValueError, ev.sync, match="destroyed")
        # a destroyed team, and every alias of it, is TEAM_INVALID (shmem4py's destroy
        # leaves the handle SHMEM_TEAM_INVALID)
        assert ev == shmem.TEAM_INVALID and alias == shmem.TEAM_INVALID and not alias
        raises(RuntimeError, alias.my_pe, match="a destroyed team is not a team")
    # a negative stride: the members in reverse order (the reference implementation takes
    # any stride that keeps every member in the parent team)
    rev = W.split_strided(n - 1, -1, n)
    assert rev.n_pes() == n and rev.my_pe() == n - 1 - me
    assert [rev.translate_pe(i) for i in range(n)] == list(range(n - 1, -1, -1))
    coll_checks(rev, "reversed")
    rev.destroy()
    down = W.split_strided(n - 1, -2)  # size None: as many as fit, n-1, n-3, ...
    if (n - 1 - me) % 2 == 0:
        assert down.n_pes() == len(range(n - 1, -1, -2)) and down.my_pe() == (n - 1 - me) // 2
    else:
        assert not down
    down.destroy()
    one = W.split_strided(n - 1, 5, 1)  # one member: any stride
    assert bool(one) == (me == n - 1) and (not one or one.n_pes() == 1)
    one.destroy()
    zero = W.split_strided(0, 0, n)  # a stride of 0 counts as 1, as the reference's
    assert zero.n_pes() == n and zero.my_pe() == me
    zero.destroy()
    # refused as shmem4py refuses (RuntimeError) and as shmem_rt's bad arguments (ValueError)
    raises(RuntimeError, W.split_strided, n, 1, 1, match="do not fit")
    if n > 1:
        raises(ValueError, W.split_strided, 0, -1, 2, match=("do not fit", "in 0.."))
        raises(ValueError, W.split_strided, 1, 1, n, match=("do not fit", f"0..{n - 1}"))
    # destroy() is collective and gives its amnet.coll team's node-area slot back: more
    # splits, one after another, than a rank has slots, and each gets one where the world
    # has one (without giving back, the splits above would have taken them all)
    shared = []
    for _ in range(10):
        t = W.split_strided(0, 1, n)
        shared.append(t._rec.coll.shares_memory)
        coll_checks(t, "again")
        t.destroy()
    assert shared == [world_shares] * 10, (world_shares, shared)
    W.destroy()  # nothing for the predefined teams
    assert W and W.n_pes() == n
    shmem.barrier_all()
    return {"node": node}


# -- locks ------------------------------------------------------------------------------------
def check_locks(me: int, n: int, K: int = 10) -> None:
    lock = shmem.new_lock()
    ctr = shmem.zeros(1, "i8")
    shmem.barrier_all()
    for _ in range(K):  # a read-modify-write on PE n-1 made atomic by the lock
        shmem.set_lock(lock)
        v = shmem.g(ctr, n - 1)
        shmem.p(ctr, v + 1, n - 1)
        shmem.clear_lock(lock)
    for _ in range(K):
        while shmem.test_lock(lock):
            pass
        shmem.p(ctr, shmem.g(ctr, n - 1) + 1, n - 1)
        shmem.clear_lock(lock)
    shmem.barrier_all()
    assert shmem.g(ctr, n - 1) == 2 * K * n
    # a held lock: test_lock says so
    if me == 0:
        shmem.set_lock(lock)
    shmem.barrier_all()
    if me != 0:
        assert shmem.test_lock(lock) is True
    shmem.barrier_all()
    if me == 0:
        shmem.clear_lock(lock)
    shmem.barrier_all()
    # the Lock class
    L = shmem.Lock()
    for _ in range(K):
        with L:
            shmem.p(ctr, shmem.g(ctr, 0) + 1, 0)
        assert L.acquire(True) is True
        shmem.p(ctr, shmem.g(ctr, 0) + 1, 0)
        L.release()
    shmem.barrier_all()
    if me == 0:
        assert ctr[0] == 2 * K * n + (2 * K * n if n == 1 else 0), ctr
    shmem.barrier_all()
    while not L.acquire(blocking=False):
        pass
    L.release()
    shmem.barrier_all()
    L.destroy()
    raises(ValueError, L.acquire, match="destroyed")
    raises(TypeError, shmem.set_lock, np.zeros(1, "i4"), match="64-bit")
    raises(ValueError, shmem.set_lock, np.zeros(1, "i8"), match="not symmetric")
    shmem.del_lock(lock)
    shmem.free(ctr)


# -- contexts ---------------------------------------------------------------------------------
def check_contexts(me: int, n: int) -> None:
    right, left = (me + 1) % n, (me - 1) % n
    t = shmem.zeros(8, "i8")
    c = shmem.zeros(1, "i8")
    shmem.barrier_all()
    ctx = shmem.Ctx.create()
    assert ctx and ctx.get_team() == shmem.TEAM_WORLD and ctx != shmem.CTX_DEFAULT
    shmem.put(t, np.arange(8, dtype="i8") + me, right, ctx=ctx)
    ctx.fence()
    shmem.atomic_inc(c, right, ctx=ctx)
    ctx.quiet()
    shmem.quiet(ctx)
    shmem.fence(ctx)
    shmem.barrier_all()
    eq(t, np.arange(8) + left, "put on a context")
    assert c[0] == 1
    out = np.zeros(8, "i8")
    shmem.get(out, t, left, ctx=ctx)
    eq(out, np.arange(8) + (left - 1) % n, "get on a context")
    assert shmem.g(c, left, ctx=shmem.CTX_DEFAULT) == 1
    shmem.barrier_all()
    shmem.p(c, 5, me, shmem.CTX_DEFAULT)
    assert c[0] == 5 and bool(shmem.CTX_DEFAULT) and not shmem.CTX_INVALID
    assert shmem.CTX_DEFAULT.get_team() == shmem.TEAM_WORLD
    alias = shmem.Ctx(ctx)
    assert alias == ctx and alias != shmem.CTX_INVALID
    ctx.destroy()
    assert not ctx
    # as shmem4py: a destroyed context is CTX_INVALID (its aliases too), and destroying it
    # again (or CTX_DEFAULT) does nothing
    assert ctx == shmem.CTX_INVALID and alias == shmem.CTX_INVALID and not alias
    assert hash(ctx) == hash(shmem.CTX_INVALID)
    ctx.destroy()
    shmem.CTX_DEFAULT.destroy()
    assert shmem.CTX_DEFAULT and shmem.CTX_DEFAULT != shmem.CTX_INVALID
    raises(ValueError, shmem.put, t, out, right, ctx=ctx, match="invalid")
    raises(ValueError, shmem.put, t, out, right, ctx=shmem.CTX_INVALID, match="invalid")
    raises(ValueError, shmem.atomic_inc, c, right, ctx=shmem.CTX_INVALID, match="invalid")
    raises(ValueError, shmem.quiet, shmem.CTX_INVALID, match="invalid")
    raises(TypeError, shmem.put, t, out, right, ctx="ctx", match="shmem_rt.Ctx")
    raises(ValueError, shmem.Ctx.create, 64, match="options")
    raises(ValueError, shmem.Ctx.create, 0, shmem.TEAM_INVALID, match="TEAM_INVALID")
    shmem.barrier_all()
    with shmem.ctx_create(shmem.CTX_PRIVATE | shmem.CTX_SERIALIZED) as c2:
        assert shmem.ctx_get_team(c2) == shmem.TEAM_WORLD
        shmem.p(c, 6, right, c2)
    assert not c2
    shmem.barrier_all()
    assert c[0] == 6
    # a context on the odd PEs: PE numbers are team-relative
    sig_area = shmem.zeros(8, "u1")
    od = shmem.TEAM_WORLD.split_strided(1, 2) if n > 1 else shmem.TEAM_INVALID
    if od:
        tn, ti = od.n_pes(), od.my_pe()
        tctx = od.create_ctx()
        assert tctx.get_team() == od
        tr = (ti + 1) % tn  # my right neighbour in the team
        shmem.put(t, np.full(8, 1000 + me, "i8"), tr, ctx=tctx)
        shmem.atomic_add(c, 10, tr, ctx=tctx)
        tctx.quiet()
        od.sync()
        src = od.translate_pe((ti - 1) % tn)
        eq(t, np.full(8, 1000 + src), "put on a team context")
        assert c[0] == 16
        assert shmem.g(t, tr, tctx) == 1000 + me
        tsig = np.ndarray((1,), np.uint64, buffer=sig_area)  # a view: symmetric
        od.sync()
        shmem.put_signal(t[:2], np.full(2, 7 + me, "i8"), tr, tsig, 1, shmem.SIGNAL_ADD,
                         ctx=tctx)
        assert shmem.signal_wait_until(tsig, shmem.CMP_EQ, 1) == 1
        assert (t[:2] == 7 + src).all()
        assert shmem.atomic_fetch(c, tr, tctx) == 16
        od.sync()
        assert shmem.atomic_compare_swap(c, 16, 17, (ti - 1) % tn, tctx) == 16
        raises(amnet.RankError, shmem.put, t, out, tn, ctx=tctx,
               match=("not a member", f"0..{tn - 1}"))
        shmem.ctx_destroy(tctx)
        assert not tctx
        c3 = shmem.ctx_create(0, od)
        assert shmem.ctx_get_team(c3) == od
        c3.destroy()
        od.destroy()
    shmem.barrier_all()
    shmem.free(sig_area)
    shmem.free(c)
    shmem.free(t)


# -- bad calls raise before anything moves --------------------------------------------------
def check_errors(me: int, n: int) -> None:
    right = (me + 1) % n
    t = shmem.zeros(8, "i8")
    sig = shmem.new_signal()
    shmem.barrier_all()
    s = np.arange(8, dtype="i8") + 1
    plain = np.zeros(8, "i8")
    raises(ValueError, shmem.put, plain, s, right, match=("shmem.put()", "not symmetric"))
    raises(ValueError, shmem.get, plain, plain, right, match=("source", "not symmetric"))
    raises(ValueError, shmem.put_nbi, plain, s, right, match="not symmetric")
    raises(ValueError, shmem.iput, plain, s, right, 2, 1, match="not symmetric")
    raises(ValueError, shmem.atomic_add, plain[:1], 1, right, match="not symmetric")
    raises(ValueError, shmem.put_signal, t, s, right, np.zeros(1, "u8"), 1,
           shmem.SIGNAL_SET, match=("signal", "not symmetric"))
    for bad in (n, -1, n + 5):
        raises(amnet.RankError, shmem.put, t, s, bad, match=(f"pe {bad}", f"0..{n - 1}"))
        raises(amnet.RankError, shmem.get, plain, t, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.put_nbi, t, s, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.get_nbi, plain, t, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.iput, t, s, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.iget, plain, t, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.p, t, 1, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.g, t, bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.atomic_inc, t[:1], bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.atomic_fetch, t[:1], bad, match=f"pe {bad}")
        raises(amnet.RankError, shmem.put_signal, t, s, bad, sig, 1, shmem.SIGNAL_SET,
               match=f"pe {bad}")
        raises(amnet.RankError, shmem.broadcast, t, t, bad, match=f"root {bad}")
    raises(TypeError, shmem.put, t, s, 0.5, match="pe must be an int")
    raises(TypeError, shmem.put, t, s.astype("i4"), right, match=("int64", "int32"))
    raises(TypeError, shmem.get, s.astype("f8"), t, right, match=("float64", "int64"))
    raises(TypeError, shmem.iput, t, s.astype("u8"), right, match="same")
    raises(TypeError, shmem.reduce, t, s.astype("i4"), match="same")
    raises(ValueError, shmem.put, t, s, right, 9, match=("size 9", "(8)"))
    raises(ValueError, shmem.put, t[:4], s, right, 5, match=("size 5", "(4)"))
    raises(ValueError, shmem.get, plain, t, right, -1, match="size must be")
    raises(ValueError, shmem.iput, t, s, right, 2, 1, 5, match=("size 5", "(4)"))
    raises(ValueError, shmem.iput, t, s, right, 0, match="tst must be an int >= 1")
    raises(ValueError, shmem.iget, plain, t, right, 1, -2, match="sst must be")
    raises(ValueError, shmem.put, t, np.arange(16, dtype="i8")[::2], right,
           match="not contiguous")
    t2 = shmem.zeros((4, 4), "i8")
    raises(ValueError, shmem.put, t2[:, :2], np.zeros((4, 2), "i8"), right,
           match=("target", "not contiguous"))
    raises(ValueError, shmem.get, plain.reshape(2, 4)[:, ::2], t, right, match="contiguous")
    ro = np.zeros(8, "i8")
    ro.flags.writeable = False
    raises(ValueError, shmem.get, ro, t, right, match="read-only")
    raises(TypeError, shmem.put, [1, 2], s, right, match="numpy array")
    raises(TypeError, shmem.put, np.zeros(2, "U3"), np.zeros(2, "U3"), right,
           match="no type")
    raises(ValueError, shmem.broadcast, t, t, 0, 9, match="size 9")
    raises(ValueError, shmem.fcollect, t, t, 9, match="size 9")
    # atomics
    i2 = shmem.zeros(1, "i2")
    f8 = shmem.zeros(2, "f8")
    raises(TypeError, shmem.atomic_add, i2, 1, right, match=("int16", "int32, int64"))
    raises(TypeError, shmem.atomic_fetch, i2, right, match="int16")
    raises(TypeError, shmem.atomic_add, f8[:1], 1.0, right, match="float64")
    raises(TypeError, shmem.atomic_fetch_and, f8[:1], 1, right, match="float64")
    raises(TypeError, shmem.atomic_compare_swap, f8[:1], 1.0, 2.0, right, match="float64")
    raises(TypeError, shmem.atomic_op, f8[:1], 1.0, shmem.AMO_ADD, right, match="float64")
    raises(ValueError, shmem.atomic_add, t[:2], 1, right, match="exactly one element")
    raises(TypeError, shmem.atomic_add, t[:1], 1.5, right, match="not an integer")
    raises(TypeError, shmem.atomic_add, t[:1], "1", right, match="number")
    raises(ValueError, shmem.atomic_op, t[:1], 1, "mul", right, match="op must be one of")
    raises(TypeError, shmem.atomic_fetch_add_nbi, np.zeros(1, "i4"), t[:1], 1, right,
           match=("int32", "int64"))
    raises(TypeError, shmem.atomic_fetch_nbi, np.zeros(2, "i8"), t[:1], right,
           match="one element")
    raises(ValueError, shmem.reduce, t, t, "mean", match="op must be one of")
    i4 = shmem.zeros(1, "i4")
    raises(amnet.AtomicError, shmem.atomic_set, i4, 2**40, right,
           match=("does not fit", "2147483647"))
    shmem.free(i4)
    shmem.barrier_all()
    # collectives whose arguments differ across PEs raise on every PE, and go on after
    if n > 1:
        r, o = shmem.zeros(4, "i8"), shmem.ones(4, "i8")
        raises(amnet.CollectiveMismatch, shmem.reduce, r, o, "sum", 3 + (me == 1),
               match="disagree")
        raises(amnet.CollectiveMismatch, shmem.reduce, r, o, "max" if me == n - 1 else "sum",
               match="disagree")
        shmem.reduce(r, o, "sum")
        assert (r == n).all()
        shmem.free(o)
        shmem.free(r)
    # nothing moved: every PE's t is still zero
    assert (t == 0).all(), t
    assert (t2 == 0).all() and i2[0] == 0 and (f8 == 0).all()
    shmem.barrier_all()
    for a in (f8, i2, t2, t):
        shmem.free(a)
    shmem.del_signal(sig)


def check_finalize() -> None:
    shmem.finalize()
    shmem.finalize()  # twice: nothing
    raises(amnet.InitError, shmem.my_pe, match="finalize")
    raises(amnet.InitError, shmem.zeros, 3, match="finalize")
    raises(amnet.InitError, shmem.init, match="finalize")


def suite(ep, big: int = 20000) -> dict:
    """Every check, in one job."""
    me, n = ep.rank, ep.size
    check_init(me, n)
    check_memory(ep, me, n)
    check_rma(me, n)
    tickets = check_atomics(me, n)
    check_signals(me, n, big)
    check_waits(me, n)
    facts = check_teams(me, n, ep.coll.world.shares_memory)
    check_locks(me, n)
    check_contexts(me, n)
    check_errors(me, n)
    heap = shmem._init.current().heap
    left = dict(heap.used)  # everything was given back
    check_finalize()
    return {"rank": me, "tickets": tickets, "heap_left": left, **facts}
