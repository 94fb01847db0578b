"""Job functions for tests/test_rma.py: the extended API on every rank of a real job.

Each job packs many checks (the test file's runtime stays small) and raises AssertionError
naming what failed; ``amnet.run`` re-raises it in the test with the rank named. Jobs return
what they exercised so the tests can also check that nothing was skipped by accident.

Data is random and deterministic: ``data(key..., size=n)`` gives the same bytes on every
rank, so a target can recompute what a source wrote into its segment.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import amnet

SIZES = (0, 1, 7, 4096, 65537, (1 << 20) + 3)
WATCHDOG_S = 15.0


def data(*key: int, size: int) -> np.ndarray:
    """``size`` random bytes determined by ``key`` (ints >= 0)."""
    return np.random.default_rng([*key, 12345]).integers(0, 256, size, dtype=np.uint8)


def short_repr(x: Any) -> str:
    """``repr(x)``, except that big buffers are described, not printed."""
    if isinstance(x, bytes | bytearray | memoryview | np.ndarray) and len(x) > 16:
        return f"<{type(x).__name__} of {memoryview(x).nbytes} bytes>"
    return repr(x)


def expect(exc: type[BaseException], fn: Callable, *args: Any, **kwargs: Any) -> BaseException:
    """Call ``fn`` and check that it raises ``exc`` (or a subclass); return the exception.

    A call that blocks instead (bad input that was sent, and that its target refused, never
    completes) aborts the job after a while with a message naming the call.
    """
    what = f"{getattr(fn, '__qualname__', fn)}({', '.join(map(short_repr, args))})"
    watchdog = threading.Timer(WATCHDOG_S, amnet.abort, (7, f"{what} blocked for "
                               f"{WATCHDOG_S} s instead of raising {exc.__name__}"))
    watchdog.daemon = True
    watchdog.start()
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    except BaseException as e:
        raise AssertionError(f"{what} raised {type(e).__name__}: {e}, expected "
                             f"{exc.__name__}") from e
    finally:
        watchdog.cancel()
    raise AssertionError(f"{what} returned normally, expected {exc.__name__}")


def same(got: Any, want: np.ndarray, what: str) -> None:
    g = np.frombuffer(memoryview(got).cast("B"), dtype=np.uint8)
    if g.shape != want.shape or not np.array_equal(g, want):
        if g.shape != want.shape:
            raise AssertionError(f"{what}: {len(g)} bytes, {len(want)} expected")
        diff = np.flatnonzero(g != want)
        raise AssertionError(f"{what}: {len(diff)} of {len(want)} bytes differ from what was "
                             f"expected (the first at {int(diff[0])})")


def offsets(seg: int, size: int) -> list[tuple[str, int]]:
    return [("zero", 0), ("odd", 4097), ("end", seg - size)]


# -- put variants: (ep, dest, offset, data) ------------------------------------------------
def put_bytes(ep, d, off, x):
    assert ep.put(d, off, x.tobytes()) is None


def put_bytearray(ep, d, off, x):
    buf = bytearray(x.tobytes())
    ep.put(d, off, buf)
    buf[:] = bytes(len(buf))  # blocking put: the buffer is free again at once


def put_numpy(ep, d, off, x):
    ep.put(d, off, x.copy())


def put_memoryview_slice(ep, d, off, x):
    big = bytearray(3) + bytearray(x.tobytes()) + bytearray(5)
    ep.put(d, off, memoryview(big)[3:3 + len(x)])


def put_noncontiguous(ep, d, off, x):
    big = np.full(2 * len(x), 0xEE, dtype=np.uint8)
    big[::2] = x
    ep.put(d, off, big[::2])


def put_nb_scribbled(ep, d, off, x):
    """put_nb; the source is overwritten as soon as the call returns."""
    buf = bytearray(x.tobytes())
    h = ep.put_nb(d, off, buf)
    buf[:] = bytes(np.bitwise_not(x))
    assert h.wait() is None
    assert h.done and h.test()
    assert h.wait() is None  # waiting twice returns at once


def put_nbi_scribbled(ep, d, off, x):
    buf = x.copy()
    ep.put_nbi(d, off, buf)
    buf[:] = np.bitwise_not(x)
    ep.wait_nbi(puts=True, gets=False)
    assert ep.test_nbi()


PUTS = (put_bytes, put_bytearray, put_numpy, put_memoryview_slice, put_noncontiguous,
        put_nb_scribbled, put_nbi_scribbled)


# -- get variants: (ep, src, offset, size, expected) -----------------------------------------
def get_plain(ep, s, off, n, want):
    got = ep.get(s, off, n)
    assert type(got) is bytearray, type(got)
    same(got, want, "get()")


def get_into_bytearray(ep, s, off, n, want):
    out = bytearray(b"\xab" * (n + 5))
    got = ep.get(s, off, n, out=out)
    assert got is out
    same(out[:n], want, "get(out=bytearray)")
    assert out[n:] == b"\xab" * 5, "get wrote past nbytes"


def get_into_numpy(ep, s, off, n, want):
    out = np.full(n, 0xCD, dtype=np.uint8)
    assert ep.get(s, off, n, out) is out
    same(out, want, "get(out=numpy)")


def get_into_wide_numpy(ep, s, off, n, want):
    """``out`` of another dtype: filled byte for byte."""
    out = np.zeros(n // 8, dtype="<u8") if n % 8 == 0 else np.zeros(n, dtype=np.int8)
    assert ep.get(s, off, n, out=out) is out
    same(out.view(np.uint8), want, "get(out=wide numpy)")


def get_nb_plain(ep, s, off, n, want):
    h = ep.get_nb(s, off, n)
    got = h.wait()
    assert type(got) is bytearray
    assert h.wait() is got  # same value, at once
    assert h.done and h.test()
    same(got, want, "get_nb()")


def get_nb_tested(ep, s, off, n, want):
    out = np.zeros(n, dtype=np.uint8)
    h = ep.get_nb(s, off, n, out)
    while not h.test():
        pass
    assert h.done
    assert h.wait() is out
    same(out, want, "get_nb(out) + test()")


def get_nbi_waited(ep, s, off, n, want):
    out = bytearray(n)
    assert ep.get_nbi(s, off, n, out) is None
    ep.wait_nbi(puts=False, gets=True)
    assert ep.test_nbi()
    same(out, want, "get_nbi + wait_nbi(gets=True)")


GETS = (get_plain, get_into_bytearray, get_into_numpy, get_into_wide_numpy, get_nb_plain,
        get_nb_tested, get_nbi_waited)


def put_get(ep):
    """Every size x offset x put variant x get variant, to and from every rank (incl. self).

    Round k: rank r writes only to rank (r + k) % n, which checks afterwards that its whole
    segment is exactly what a replay of those writes gives.
    """
    n, r = ep.size, ep.rank
    seg = ep.segment.nbytes
    ep.segment[:] = data(r, 1, size=seg)
    ep.barrier()
    seen: set[tuple[str, str, int]] = set()
    for k in range(n):
        d, s = (r + k) % n, (r - k) % n
        before = ep.segment.copy()  # nobody writes my segment until after the next barrier
        ep.barrier()
        for si, size in enumerate(SIZES):
            for oi, (_, off) in enumerate(offsets(seg, size)):
                x = data(r, d, si, oi, size=size)
                put = PUTS[(oi * n + k) % len(PUTS)]
                get = GETS[(oi * n + k + si) % len(GETS)]
                put(ep, d, off, x)
                get(ep, d, off, size, x)
                seen.add((put.__name__, get.__name__, size))
        # a 0-byte put/get exactly at the end of the segment
        ep.put(d, seg, b"")
        assert ep.get(d, seg, 0) == bytearray()
        assert ep.statistics().inflight == 0
        ep.barrier()
        want = before
        for si, size in enumerate(SIZES):
            for oi, (_, off) in enumerate(offsets(seg, size)):
                want[off:off + size] = data(s, r, si, oi, size=size)
        same(ep.segment, want, f"segment of rank {r} after round {k} (writer {s})")
    ep.barrier()
    return sorted(seen)


# -- completion: handles, NBI, access regions, fence ----------------------------------------
def wait_for_files(paths: list[Path], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {[str(p) for p in paths]} never appeared")
        time.sleep(0.002)


def completion(ep, park_dir: str):
    """Handles, wait_all/wait_any, NBI counters, access regions and fence.

    The decisive part runs on rank 0 while the ranks of the last process are *parked*: they
    sleep, outside any amnet call (so nothing in their process makes AM progress), until
    rank 0 creates a file in ``park_dir``. Operations to them cannot complete meanwhile, so
    "pending" states are observed for certain, not by luck of timing.
    """
    n, r = ep.size, ep.rank
    seg = ep.segment.nbytes
    ep.segment[:] = data(r, 2, size=seg)
    ep.barrier()
    pattern = [data(q, 2, size=seg) for q in range(n)]

    # handles to every rank; wait_all / wait_any
    hs, want = [], []
    for q in range(n):
        off = 1000 + 64 * r
        hs.append(ep.get_nb(q, off, 64))
        want.append(pattern[q][off:off + 64])
    res = amnet.wait_all(hs)
    assert len(res) == n
    for q in range(n):
        same(res[q], want[q], f"wait_all result from rank {q}")
        assert hs[q].wait() is res[q]
    hs = [ep.get_nb(q, 2000, 8) for q in range(n)]
    i = amnet.wait_any(hs)
    assert 0 <= i < n and hs[i].done
    amnet.wait_all(hs)
    assert amnet.wait_all([]) == []
    expect(ValueError, amnet.wait_any, [])
    expect(TypeError, amnet.wait_all, [hs[0], 42])
    expect(TypeError, amnet.wait_any, ["handle"])
    ep.barrier()  # nobody reads rank 0's copy of the pattern any more

    B = n - 1  # another process than rank 0 in every topology tested
    assert not ep.same_process(B) or r != 0
    # With PSHM on and B on rank 0's node, puts and gets to B are direct copies, complete on
    # return (docs/design.md §5): nothing can be left pending, see completion_direct.
    direct = ep.bootstrap.allgather(ep.segment_view(B) is not None)[0]  # as rank 0 sees it
    assert direct or not ep.is_local(B) or not ep.config.pshm or r != 0
    region_put = data(3, 1, size=5000)
    nbi_put = data(3, 2, size=70000)
    nb_put = data(3, 3, size=300)
    checks: list[str] = []
    parked = range(0) if direct else range(B - ep.threads_per_proc + 1, B + 1)  # B's process
    release = Path(park_dir, "release")
    ep.barrier()
    if r in parked:
        Path(park_dir, f"parked.{r}").touch()
        wait_for_files([release], f"rank {r} parked")
    if r == 0 and direct:
        checks = completion_direct(ep, B, region_put, nbi_put, nb_put, pattern[B])
    elif r == 0:
        wait_for_files([Path(park_dir, f"parked.{q}") for q in parked], "rank 0")
        assert ep.statistics().inflight == 0
        try:
            # 1. operations in an access region are the region's, not wait_nbi's
            rbuf = region_put.copy()
            rout = np.zeros(4096, dtype=np.uint8)
            with ep.access_region() as region:
                assert ep.put_nbi(B, 100000, rbuf) is None
                ep.get_nbi(B, 200000, 4096, rout)
            rbuf[:] = 0  # the source may change at once
            assert isinstance(region.handle, amnet.Handle)
            assert not region.handle.done and not region.handle.test()
            assert ep.test_nbi() and ep.test_nbi(puts=True, gets=False)
            ep.wait_nbi()  # nothing implicit is pending outside the region: returns at once
            assert not region.handle.done
            checks.append("region pending, not counted by wait_nbi")
            # 2. an NBI get pending: only gets are incomplete
            gout = bytearray(100)
            ep.get_nbi(B, 300000, 100, gout)
            assert not ep.test_nbi()
            assert not ep.test_nbi(puts=False, gets=True)
            assert ep.test_nbi(puts=True, gets=False)
            ep.wait_nbi(puts=True, gets=False)  # returns at once
            checks.append("nbi get pending, puts=True/gets=False done")
            # 3. an NBI put pending too
            pbuf = bytearray(nbi_put.tobytes())
            ep.put_nbi(B, 400000, pbuf)
            pbuf[:] = bytes(len(pbuf))
            assert not ep.test_nbi(puts=True, gets=False)
            # a bulk put returns at once too, though nothing is copied (its source stays
            # untouched until the fence below)
            bbuf = nbi_put[::-1].copy()
            ep.put_nbi(B, 920000, bbuf, bulk=True)
            expect(TypeError, ep.put_nbi, B, 920000, bbuf, bulk=1)
            checks.append("nbi put pending")
            # 4. handles: pending ones test False; wait_any picks the one that can complete
            hb = ep.get_nb(B, 500000, 32)
            hp = ep.put_nb(B, 600000, nb_put)
            assert not hb.done and not hb.test() and not hp.test()
            hself = ep.get_nb(0, 700000, 16)
            assert amnet.wait_any([hb, hp, hself]) == 2
            assert hself.done and not hb.done and not hp.done
            same(hself.wait(), pattern[0][700000:700016], "get_nb from self")
            checks.append("wait_any picked the only completable handle")
            # 5. seven operations are in flight (fence has work to do)
            assert ep.statistics().inflight == 7, ep.statistics()
        finally:
            release.touch()  # the parked ranks go on into the barrier below, serving AMs
        ep.fence()
        st = ep.statistics()
        assert st.inflight == 0, st
        assert ep.test_nbi()
        assert region.handle.done and hb.done and hp.done
        assert region.handle.wait() is None and region.handle.wait() is None
        same(rout, pattern[B][200000:204096], "region get_nbi")
        same(gout, pattern[B][300000:300100], "get_nbi")
        same(hb.wait(), pattern[B][500000:500032], "get_nb")
        assert hp.wait() is None
        checks.append("fence completed region, nbi and nb operations")
        # what the puts wrote is visible to a get now
        same(ep.get(B, 100000, 5000), region_put, "region put_nbi after fence")
        same(ep.get(B, 400000, 70000), nbi_put, "put_nbi after fence")
        same(ep.get(B, 920000, 70000), bbuf, "put_nbi(bulk=True) after fence")
        same(ep.get(B, 600000, 300), nb_put, "put_nb after fence")
    ep.barrier()

    # every rank: put_nbi's to every rank, no wait, fence, then the data is there
    for q in range(n):
        ep.put_nbi(q, 800000 + 1000 * r, data(r, q, 9, size=777))
    ep.fence()
    assert ep.statistics().inflight == 0 and ep.test_nbi()
    for q in range(n):
        same(ep.get(q, 800000 + 1000 * r, 777), data(r, q, 9, size=777), f"fenced put to {q}")
    # a region after the fence: its handle completes its operations
    outs = [np.zeros(777, dtype=np.uint8) for _ in range(n)]
    with ep.access_region() as region:
        for q in range(n):
            ep.get_nbi(q, 800000 + 1000 * r, 777, outs[q])
            ep.put_nbi(q, 900000 + 1000 * r, data(r, q, 10, size=333))
    region.handle.wait()
    assert ep.statistics().inflight == 0
    for q in range(n):
        same(outs[q], data(r, q, 9, size=777), f"region get from {q}")
        same(ep.get(q, 900000 + 1000 * r, 333), data(r, q, 10, size=333), f"region put to {q}")
    expect(amnet.AMNetError, region.__enter__)  # a region is entered once
    ep.barrier()
    return checks


def completion_direct(ep, B: int, region_put, nbi_put, nb_put, pattern) -> list[str]:
    """What ``completion`` checks while B is parked, when B shares memory with me: every
    operation is complete when its call returns (no AM is sent) and fence finds nothing."""
    checks = []
    st0 = ep.statistics()
    assert st0.inflight == 0
    rbuf = region_put.copy()
    rout = np.zeros(4096, dtype=np.uint8)
    with ep.access_region() as region:
        assert ep.put_nbi(B, 100000, rbuf) is None
        ep.get_nbi(B, 200000, 4096, rout)
    rbuf[:] = 0
    assert isinstance(region.handle, amnet.Handle)
    assert region.handle.done and region.handle.test() and region.handle.wait() is None
    same(rout, pattern[200000:204096], "region get_nbi (direct)")
    checks.append("region done at exit (direct)")
    gout = bytearray(100)
    ep.get_nbi(B, 300000, 100, gout)
    assert ep.test_nbi() and ep.test_nbi(puts=False, gets=True)
    same(gout, pattern[300000:300100], "get_nbi (direct)")
    pbuf = bytearray(nbi_put.tobytes())
    ep.put_nbi(B, 400000, pbuf)
    pbuf[:] = bytes(len(pbuf))
    assert ep.test_nbi(puts=True, gets=False)
    checks.append("nbi put and get done on return (direct)")
    hb = ep.get_nb(B, 500000, 32)
    hp = ep.put_nb(B, 600000, nb_put)
    assert hb.done and hb.test() and hp.done and hp.test()
    assert amnet.wait_any([hb, hp]) in (0, 1)
    same(hb.wait(), pattern[500000:500032], "get_nb (direct)")
    assert hp.wait() is None
    checks.append("nb handles done on return (direct)")
    st1 = ep.statistics()
    assert st1.inflight == 0, st1
    if ep.threads_per_proc == 1:  # (the counters are the process's: other threads send)
        assert st1.conduit.sent == st0.conduit.sent, (st0, st1)  # no AM for any of them
        assert st1.pshm is None or st1.pshm.sent == st0.pshm.sent, (st0, st1)
    ep.fence()
    same(ep.get(B, 100000, 5000), region_put, "region put_nbi (direct)")
    same(ep.get(B, 400000, 70000), nbi_put, "put_nbi (direct)")
    same(ep.get(B, 600000, 300), nb_put, "put_nb (direct)")
    checks.append("fence found nothing to wait for (direct)")
    return checks


# -- atomics --------------------------------------------------------------------------------
INT_INFO = {d: np.iinfo(d) for d in ("i4", "i8", "u4", "u8")}


def wrap(x: int, dtype: str) -> int:
    bits = np.dtype(dtype).itemsize * 8
    x &= (1 << bits) - 1
    if dtype[0] == "i" and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def reference(op: str, dtype: str, old: Any, v: Any, v2: Any) -> Any:
    """What the word holds after ``op``: Python ints wrapped to the dtype, IEEE floats
    rounded to the dtype's precision."""
    if op == "get":
        return old
    if op in ("set", "swap"):
        new = v
    elif op == "cas":
        new = v2 if old == v else old
    elif op == "fmin":
        new = min(old, v)
    elif op == "fmax":
        new = max(old, v)
    elif dtype[0] == "f":
        f = np.float32 if dtype == "f4" else np.float64
        a, b = f(old), f(v)
        new = a + b if op == "fadd" else a - b
    else:
        new = {"fadd": old + v, "fsub": old - v, "fand": old & v, "for": old | v,
               "fxor": old ^ v}[op]
    if dtype[0] == "f":
        return float(np.float32(new)) if dtype == "f4" else float(new)
    return wrap(int(new), dtype)


def steps(dtype: str) -> list[tuple]:
    """(op, value, value2) in order; the word starts at 0."""
    if dtype[0] == "f":
        big = 16777216.0  # 2**24: +1 is lost in float32, kept in float64
        return [("get", None, None), ("set", 1.5, None), ("swap", 2.25, None),
                ("cas", 2.25, 3.5), ("cas", 1.0, 9.0), ("fadd", 0.25, None),
                ("fsub", 1.5, None), ("fmin", -4.5, None), ("fmin", 100.0, None),
                ("fmax", 8.0, None), ("fmax", -1.0, None), ("fadd", 2, None),
                ("set", big, None), ("fadd", 1.0, None), ("fsub", big, None),
                ("set", float("inf"), None), ("fmin", 3.0, None), ("get", None, None)]
    info = INT_INFO[dtype]
    lo, hi = int(info.min), int(info.max)
    mixed = 0x5A5A5A5A & hi
    s = [("get", None, None), ("set", 100, None), ("swap", 37, None), ("cas", 37, 50),
         ("cas", 37, 99), ("fadd", 8, None), ("fsub", 3, None), ("fand", 0b110101, None),
         ("for", 0b1000000, None), ("fxor", mixed, None), ("fmin", 20, None),
         ("fmin", 1000, None), ("fmax", 7, None), ("fmax", 500, None),
         # wrap-around, both ways, as numpy's fixed-width ints do
         ("set", hi, None), ("fadd", 1, None), ("fsub", 1, None), ("fadd", hi, None),
         ("set", lo, None), ("fsub", 1, None), ("for", hi, None), ("fxor", hi, None),
         ("cas", 0, lo), ("fand", hi, None), ("get", None, None)]
    if dtype[0] == "i":
        s += [("set", -5, None), ("fadd", -10, None), ("fmin", -100, None),
              ("fmax", -1, None), ("fand", -2, None), ("fxor", -1, None), ("cas", 0, -7),
              ("fsub", -8, None)]
    return s


def atomics(ep, k_ops: int = 150):
    """Contention on one word (rank 0's) and on every rank's word; then every op of every
    dtype against a Python reference, to another rank and to self."""
    n, r = ep.size, ep.rank
    ep.segment[:] = 0
    ep.barrier()
    # every rank adds 1 to rank 0's word k_ops times: the old values are a permutation
    mine = [ep.atomic(0, 0, "fadd", 1) for _ in range(k_ops)]
    assert all(type(v) is int for v in mine)
    assert mine == sorted(mine) and len(set(mine)) == k_ops
    # and to every rank's word, interleaved (u4 at 8, fsub on an i8 at 16)
    for _ in range(k_ops):
        for q in range(n):
            ep.atomic(q, 8, "fadd", 3, dtype="u4")
            ep.atomic(q, 16, "fsub", 2)
    ep.barrier()
    everyone = ep.bootstrap.allgather(mine)
    assert sorted(v for vs in everyone for v in vs) == list(range(n * k_ops))
    total = ep.atomic(0, 0, "get")
    assert total == n * k_ops, total
    assert int(ep.segment[8:12].view("<u4")[0]) == 3 * n * k_ops
    assert int(ep.segment[16:24].view("<i8")[0]) == -2 * n * k_ops
    assert ep.atomic(r, 8, "get", dtype="u4") == 3 * n * k_ops
    ep.barrier()

    done = []
    for target in ((r + 1) % n, r):
        base = 4096 + 1024 * r + (512 if target == r else 0)
        for di, dtype in enumerate(("i4", "i8", "u4", "u8", "f4", "f8")):
            off = base + 16 * di
            size = np.dtype(dtype).itemsize
            cur: Any = 0.0 if dtype[0] == "f" else 0
            for op, v, v2 in steps(dtype):
                old = ep.atomic(target, off, op, v, v2, dtype=dtype)
                assert old == cur and type(old) is type(cur), \
                    (dtype, op, v, v2, "old", old, "expected", cur)
                cur = reference(op, dtype, cur, v, v2)
                now = ep.atomic(target, off, "get", dtype=dtype)
                assert now == cur, (dtype, op, v, v2, "now", now, "expected", cur)
                raw = ep.get(target, off, size)
                assert bytes(raw) == np.array([cur], dtype="<" + dtype).tobytes(), \
                    (dtype, op, bytes(raw), cur)
                done.append((dtype, op))
    # the wrap-around of i8 max + 1 is numpy's
    off = 4096 + 1024 * r + 256
    ep.atomic(r, off, "set", 2**63 - 1)
    assert ep.atomic(r, off, "fadd", 1) == 2**63 - 1
    with np.errstate(over="ignore"):
        np_wrapped = int((np.array([2**63 - 1], dtype="<i8") + np.int64(1))[0])
    assert ep.atomic(r, off, "get") == np_wrapped == -(2**63)
    ep.barrier()
    return sorted(set(done))


# -- rpc ------------------------------------------------------------------------------------
EPS: dict[int, Any] = {}  # rank -> endpoint (module globals are shared by rank-threads)
STORE: dict[tuple[int, int], Any] = {}
ERRORS: dict[int, list] = {}


class CustomError(Exception):
    pass


def rpc_echo(*args, **kwargs):
    return [list(args), kwargs]


def rpc_add(a, b=0):
    return a + b


def rpc_big(blob, tag):
    return [len(blob), hashlib.sha256(blob).hexdigest(), blob[::-1], tag]


def rpc_raise_value(msg):
    raise ValueError(msg)


def rpc_raise_custom(msg):
    raise CustomError(msg)


def rpc_poll(rank):
    EPS[rank].poll()  # handler context: not allowed
    return "polled"


def rpc_bad_result():
    return {1, 2}  # not msgpack-able


def rpc_record(rank, key, value):
    STORE[(rank, key)] = value


def rpc_lookup(rank, key):
    return STORE.get((rank, key), "missing")


def rpc_ff_raise(tag):
    raise KeyError(tag)


def rpc_errors(rank, src):
    return [e for e in ERRORS.get(rank, []) if e[2] == src]


@amnet.handler("short")
def short_only(token):
    pass


def not_registered():
    return 0


RPC_FNS = [rpc_echo, rpc_add, rpc_big, rpc_raise_value, rpc_raise_custom, rpc_poll,
           rpc_bad_result, rpc_record, rpc_lookup, rpc_ff_raise, rpc_errors, short_only]


def rpc(ep):
    n, r = ep.size, ep.rank
    EPS[r] = ep
    ep.register_handlers(RPC_FNS)
    ep.on_handler_error = lambda exc, name, src: ERRORS.setdefault(r, []).append(
        [type(exc).__name__, name, src, str(exc)])
    ep.barrier()
    blob = data(r, 7, size=(1 << 20) + 11).tobytes()
    assert len(blob) > ep.max_medium
    checked = []
    for d in range(n):
        # msgpack types travel and come back
        args = (1, -2, 2**62, "s", b"\x00\xff", [1, [2, "x"]], {"k": [1, 2], "z": None},
                3.5, True)
        h = ep.rpc(d, rpc_echo, *args, key="v", n=3)
        got = h.wait()
        assert got == [list(args), {"key": "v", "n": 3}], got
        assert h.wait() is got and h.done
        assert ep.rpc(d, rpc_echo, {1: "int key"}).wait() == [[{1: "int key"}], {}]
        h = ep.rpc(d, rpc_add, 2, b=3)
        while not h.test():
            pass
        assert h.wait() == 5
        assert ep.rpc(d, "rmajobs.rpc_add", 40, 2).wait() == 42  # by registered name
        # large arguments and result (> max_medium)
        length, digest, back, tag = ep.rpc(d, rpc_big, blob, tag=d).wait()
        assert (length, digest, tag) == (len(blob), hashlib.sha256(blob).hexdigest(), d)
        assert back == blob[::-1]
        # exceptions come back; the job goes on
        e = expect(ValueError, ep.rpc(d, rpc_raise_value, f"bad {r}->{d}").wait)
        assert type(e) is ValueError and str(e) == f"bad {r}->{d}", repr(e)
        assert any(f"rank {d}" in note for note in getattr(e, "__notes__", [])), e.__notes__
        assert isinstance(e.__cause__, amnet.RemoteTraceback)
        assert "rpc_raise_value" in str(e.__cause__)
        e = expect(amnet.RPCError, ep.rpc(d, rpc_raise_custom, "custom").wait)
        assert "CustomError" in str(e) and "custom" in str(e), str(e)
        assert f"rank {d}" in str(e) + " ".join(getattr(e, "__notes__", []))
        expect(amnet.AMContextError, ep.rpc(d, rpc_poll, d).wait)
        e = expect(TypeError, ep.rpc(d, rpc_bad_result).wait)
        assert "msgpack" in str(e), str(e)
        assert ep.rpc(d, rpc_add, 1, 1).wait() == 2
        # rpc_ff: the side effect is seen by a later rpc from the same rank (FIFO per pair)
        assert ep.rpc_ff(d, rpc_record, d, r, [r, d, "ff"]) is None
        assert ep.rpc(d, rpc_lookup, d, r).wait() == [r, d, "ff"]
        # an rpc_ff that raises goes to the target's on_handler_error
        ep.rpc_ff(d, rpc_ff_raise, f"ff {r}->{d}")
        errs = ep.rpc(d, rpc_errors, d, r).wait()
        assert len(errs) == 1 and errs[0][:3] == ["KeyError", "rmajobs.rpc_ff_raise", r], errs
        assert ep.rpc(d, rpc_errors, d, r).wait() == errs  # one failure, recorded once
        # bad input, raised before sending
        expect(amnet.HandlerNotRegistered, ep.rpc, d, not_registered)
        expect(amnet.HandlerNotRegistered, ep.rpc_ff, d, not_registered)
        expect(amnet.HandlerNotRegistered, ep.rpc, d, "rmajobs.nothing_by_that_name")
        expect(amnet.AMArgumentError, ep.rpc, d, rpc_echo, object())
        expect(amnet.AMArgumentError, ep.rpc, d, rpc_echo, x={1, 2})
        expect(amnet.AMArgumentError, ep.rpc_ff, d, rpc_record, d, r, object())
        expect(amnet.HandlerCategoryError, ep.rpc, d, short_only)
        checked.append(d)
    ep.barrier()
    # all the rpc_ff side effects, seen by their targets after everyone's rpcs completed
    assert sorted(k for k in STORE if k[0] == r) == [(r, s) for s in range(n)]
    assert len(ERRORS.get(r, [])) == n
    ep.on_handler_error = None
    ep.barrier()
    return checked


# -- bad input ------------------------------------------------------------------------------
def bad_calls(ep, d: int, seg: int) -> int:
    """Every kind of bad input to rank ``d``; each must raise before anything is sent."""
    n = ep.size
    count = 0

    def x(exc, fn, *a, **kw):
        nonlocal count
        expect(exc, fn, *a, **kw)
        count += 1

    out = bytearray(16)
    # dest out of range
    for bad in (n, -1, n + 100, True, "1", None):
        x(amnet.RankError, ep.put, bad, 0, b"x")
        x(amnet.RankError, ep.get, bad, 0, 1)
        x(amnet.RankError, ep.put_nb, bad, 0, b"x")
        x(amnet.RankError, ep.get_nb, bad, 0, 1)
        x(amnet.RankError, ep.put_nbi, bad, 0, b"x")
        x(amnet.RankError, ep.get_nbi, bad, 0, 1, out)
        x(amnet.RankError, ep.atomic, bad, 0, "fadd", 1)
        x(amnet.RankError, ep.rpc, bad, rpc_add, 1)
        x(amnet.RankError, ep.rpc_ff, bad, rpc_add, 1)
    # rpc arguments too big for one message
    x(amnet.PayloadTooLarge, ep.rpc, d, rpc_add, bytes(max(seg, 16 << 20) + 1))
    # outside the target segment
    B = amnet.SegmentBoundsError
    for off, nb in ((seg - 3, 10), (-1, 1), (seg + 1, 0), (seg, 1), (2**70, 1), (-(2**70), 0)):
        x(B, ep.put, d, off, b"z" * nb)
        x(B, ep.put_nb, d, off, np.ones(nb, dtype=np.uint8))
        x(B, ep.put_nbi, d, off, bytearray(nb))
        x(B, ep.get, d, off, nb)
        x(B, ep.get_nb, d, off, nb)
        x(B, ep.get_nbi, d, off, nb, bytearray(nb))
    for off, dtype in ((seg, "i8"), (seg, "i4"), (-8, "i8"), (seg + 8, "u8"), (2**70, "f8")):
        x(B, ep.atomic, d, off, "fadd", 1, dtype=dtype)
        x(B, ep.atomic, d, off, "get", dtype=dtype)
    x(B, ep.get, d, seg - 8, 16, out)
    # negative nbytes
    x(ValueError, ep.get, d, 0, -1)
    x(ValueError, ep.get_nb, d, 0, -1)
    x(ValueError, ep.get_nbi, d, 0, -1, out)
    # bad atomics
    A = amnet.AtomicError
    x(A, ep.atomic, d, 0, "fmul", 1)
    x(A, ep.atomic, d, 0, "FADD", 1)
    x(A, ep.atomic, d, 0, "fadd", 1, dtype="i2")
    x(A, ep.atomic, d, 0, "fadd", 1, dtype="f2")
    x(A, ep.atomic, d, 4, "fadd", 1, dtype="i8")  # misaligned
    x(A, ep.atomic, d, 2, "set", 1, dtype="i4")
    x(A, ep.atomic, d, 3, "get", dtype="u8")
    x(A, ep.atomic, d, 12, "swap", 1.0, dtype="f8")
    for op in ("fand", "for", "fxor"):  # bitwise on floats
        x(A, ep.atomic, d, 0, op, 1, dtype="f8")
        x(A, ep.atomic, d, 0, op, 1, dtype="f4")
    for v, dtype in ((2**31, "i4"), (-(2**31) - 1, "i4"), (-1, "u4"), (2**32, "u4"),
                     (2**63, "i8"), (-(2**63) - 1, "i8"), (-1, "u8"), (2**64, "u8")):
        x(A, ep.atomic, d, 0, "set", v, dtype=dtype)
    x(A, ep.atomic, d, 0, "fadd", 1.5, dtype="i8")  # a float for an int dtype
    x(A, ep.atomic, d, 0, "fadd", "3")
    x(A, ep.atomic, d, 0, "fadd", True)
    x(A, ep.atomic, d, 0, "fadd", None)
    x(A, ep.atomic, d, 0, "cas", 1)  # cas needs value2
    x(A, ep.atomic, d, 0, "fadd", 1, 2)  # only cas takes value2
    # out buffers
    x(ValueError, ep.get, d, 0, 10, out=bytearray(5))
    x(ValueError, ep.get, d, 0, 10, out=np.zeros(9, dtype=np.uint8))
    x(ValueError, ep.get_nb, d, 0, 10, bytearray(9))
    x(ValueError, ep.get_nbi, d, 0, 10, bytearray(9))
    ro = np.zeros(10, dtype=np.uint8)
    ro.flags.writeable = False
    x(TypeError, ep.get, d, 0, 10, out=bytes(10))
    x(TypeError, ep.get, d, 0, 10, out=ro)
    x(TypeError, ep.get_nb, d, 0, 10, memoryview(bytes(10)))
    x(TypeError, ep.get, d, 0, 10, out=np.zeros(20, dtype=np.uint8)[::2])
    x(TypeError, ep.get, d, 0, 10, out=42)
    x(TypeError, ep.get_nbi, d, 0, 10, None)
    # data / offsets / sizes of the wrong type
    x(TypeError, ep.put, d, 0, 42)
    x(TypeError, ep.put, d, 0, "text")
    x(TypeError, ep.put_nb, d, 0, [1, 2, 3])
    x(TypeError, ep.put, d, 1.5, b"x")
    x(TypeError, ep.get, d, "0", 1)
    x(TypeError, ep.get, d, 0, 1.0)
    return count


def bad_input(ep):
    """Bad input raises before sending (the conduit's sent counter does not move while one
    rank at a time makes its bad calls) and nothing is written anywhere."""
    n, r = ep.size, ep.rank
    seg = ep.segment.nbytes
    ep.register_handlers([rpc_add])
    pattern = data(r, 5, size=seg)
    ep.segment[:] = pattern
    ep.barrier()
    count = 0
    for turn in range(n):
        ep.bootstrap.barrier()  # the others wait here, sending nothing
        if r == turn:
            st0 = ep.statistics()
            for d in range(n):
                count += bad_calls(ep, d, seg)
            st1 = ep.statistics()
            assert st1.conduit.sent == st0.conduit.sent, (st0, st1)
            assert st1.conduit.bytes_sent == st0.conduit.bytes_sent
            assert st1.pshm is None or st1.pshm.sent == st0.pshm.sent, (st0, st1)
            assert st1.inflight == 0
    ep.bootstrap.barrier()
    ep.barrier()
    same(ep.segment, pattern, f"rank {r}'s segment after the bad calls")
    assert ep.statistics().refused == 0  # nothing malformed reached this process
    ep.barrier()
    # the job goes on: good operations work
    d = (r + 1) % n
    ep.put(d, 64 * r, b"good" * 16)
    assert ep.get(d, 64 * r, 64) == b"good" * 16
    word = data(d, 5, size=seg)[8192 + 8 * r:8200 + 8 * r].view("<i8")
    assert ep.atomic(d, 8192 + 8 * r, "fadd", 5) == int(word[0])
    assert ep.rpc(d, rpc_add, 2, 2).wait() == 4
    ep.barrier()
    return count
