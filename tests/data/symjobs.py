"""Jobs for tests/test_symmetric.py: symmetric addressing and node-local atomics in C."""

from __future__ import annotations

import numpy as np

import amnet

OPS = [("fadd", 5, None), ("fsub", 7, None), ("swap", 9, None), ("cas", 9, 3),
       ("cas", 1, 4), ("fmin", -2, None), ("fmax", 11, None), ("set", 6, None),
       ("get", None, None)]
BITS = [("fand", 0b1100, None), ("for", 0b0011, None), ("fxor", 0b1111, None)]
DTYPES = {"i4": 0, "i8": 8, "u4": 16, "u8": 24, "f4": 32, "f8": 40}


NP = {"i4": np.int32, "i8": np.int64, "u4": np.uint32, "u8": np.uint64, "f4": np.float32,
      "f8": np.float64}


def _sequence(ep, dest, base, symmetric=False):
    """Every op on every dtype at ``base`` of ``dest``: by offset (``ep.atomic``) or by a
    local word at that offset (``ep.atomic_symmetric``)."""
    def run(op, v, v2, dt, off):
        if not symmetric:
            return ep.atomic(dest, off, op, v, v2, dtype=dt)
        word = ep.segment[off:off + int(dt[1])].view(NP[dt])
        return ep.atomic_symmetric(dest, word, op, v, v2)

    out = []
    for dt, off in DTYPES.items():
        for op, v, v2 in OPS + (BITS if dt[0] != "f" else []):
            if dt[0] == "f":
                v = None if v is None else float(v)
                v2 = None if v2 is None else float(v2)
            if dt[0] == "u" and v is not None and v < 0:
                v = 2
            out.append((dt, op, run(op, v, v2, dt, base + off)))
    big = run("fadd", 2**64 - 1, None, "u8", base + 24)  # wraps: u8 beyond i8
    out.append(("u8", "wrap", big, run("get", None, None, "u8", base + 24)))
    return out


def _near_far(ep):
    """Rank 0's peers: one on its node, one on the other."""
    return (next(r for r in range(ep.size) if r != 0 and ep.is_local(r)),
            next(r for r in range(ep.size) if not ep.is_local(r)))


def _same(a, b):
    assert a == b, [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def _by_rank_0(ep, clear: int, check):
    """Every segment's first ``clear`` bytes zeroed, then rank 0 runs ``check(near, far)``
    (its peers: ``_near_far``) while the others wait; returns its result (None elsewhere)."""
    ep.segment[:clear] = 0
    ep.barrier()
    results = check(*_near_far(ep)) if ep.rank == 0 else None
    ep.barrier()
    return results


def atomics_c_vs_owner(ep):
    """The same atomics on a word of my node (C, in the caller) and of the other node (at
    the owner): the same old values and the same final words."""
    def check(near, far):
        a = _sequence(ep, near, 0)
        _same(a, _sequence(ep, far, 0))
        return len(a)

    return _by_rank_0(ep, 4096, check)


def atomics_symmetric(ep):
    """ep.atomic_symmetric on a node-local peer gives what ep.atomic gives (the same old
    values, the same words); anything it cannot do in C is NotImplemented, untouched."""
    def check(near, far):
        a = _sequence(ep, near, 0)
        _same(a, _sequence(ep, near, 1024, symmetric=True))
        view = ep.segment_view(near)
        assert bytes(view[:48]) == bytes(view[1024:1072])  # the same words after
        seg = ep.segment
        w = seg[2048:2056].view(np.int64)
        NI = NotImplemented
        assert ep.atomic_symmetric(far, w, "fadd", 1) is NI  # another node
        assert ep.atomic_symmetric(near, seg[2048:2064].view(np.int64), "fadd", 1) is NI
        assert ep.atomic_symmetric(near, seg[2049:2057].view(np.int64), "fadd", 1) is NI
        assert ep.atomic_symmetric(near, np.zeros(1, np.int64), "fadd", 1) is NI  # not mine
        assert ep.atomic_symmetric(near, seg[2048:2056].view(">i8"), "fadd", 1) is NI
        assert ep.atomic_symmetric(near, seg[2048:2050].view(np.float16), "get") is NI
        assert ep.atomic_symmetric(near, w, "fadd", np.int64(1)) is NI  # the Python path
        assert ep.atomic_symmetric(near, w, "fadd", 2**63) is NI  # does not fit i8
        assert ep.atomic_symmetric(near, w, "fand", 1.0) is NI
        assert ep.atomic_symmetric(near, w, "nope", 1) is NI
        assert ep.atomic_symmetric(near, w, "cas", 1) is NI  # cas needs value2
        assert ep.atomic_symmetric(True, w, "fadd", 1) is NI
        assert int(view[2048:2056].view(np.int64)[0]) == 0  # none of them touched it
        return len(a)

    return _by_rank_0(ep, 8192, check)


def handler_atomic(ep):
    """A handler runs an atomic on its own rank's word; one on any other rank's word is
    refused there with AMContextError."""
    got = []

    def h(token, off):
        e = token.endpoint
        got.append(e.atomic(e.rank, off, "fadd", 1))
        word = e.segment[off:off + 8].view(np.int64)
        assert e.atomic_symmetric(e.rank, word, "fadd", 0) is not NotImplemented  # mine
        for other in (r for r in range(e.size) if r != e.rank):  # on my node or not
            assert e.atomic_symmetric(other, word, "fadd", 1) is NotImplemented
            try:
                e.atomic(other, off, "fadd", 1)
            except amnet.AMContextError:
                got.append("refused")

    ep.register_handlers([h])
    ep.segment[:64] = 0
    ep.barrier()
    for r in range(ep.size):
        ep.request_short(r, h, 8)
    ep.barrier()
    ep.wait_until(lambda: len([g for g in got if g != "refused"]) == ep.size)
    ep.barrier()
    assert int(ep.segment[8:16].view(np.int64)[0]) == ep.size
    return sorted(g for g in got if g != "refused"), got.count("refused")


def symmetric(ep):
    """segment_offset, put_symmetric and get_symmetric on every kind of peer and buffer."""
    seg = ep.segment
    seg[:8192] = 0
    ep.barrier()
    assert ep.segment_offset(seg[100:200]) == 100
    assert ep.segment_offset(seg[256:512].view(np.int64)[::2]) == 256  # strided: its start
    assert ep.segment_offset(np.zeros(8)) == -1
    assert ep.segment_offset(bytearray(8)) == -1
    assert ep.segment_offset(seg[len(seg) - 8:]) == len(seg) - 8
    local = seg[1024:1056].view(np.int64)  # 4 words, the same offset everywhere
    done = {}
    data = np.arange(4, dtype=np.int64) + 100 * ep.rank
    for r in range(ep.size):
        for writer in range(ep.size):  # one writer at a time: no torn words to read
            if writer == ep.rank:
                ok = ep.put_symmetric(r, local, data)
                done[r] = ok
                assert ok == (ep.segment_view(r) is not None), (r, ok)
                assert not ep.put_symmetric(r, local[:2], data)  # longer than local
                assert not ep.put_symmetric(r, seg[1024:1088].view(np.int64)[::2], data[:2])
                assert not ep.put_symmetric(r, np.zeros(4, np.int64), data)  # not mine
                assert not ep.put_symmetric(True, local, data)  # not a plain int rank
            ep.barrier()
    last = max(w for w in range(ep.size) if ep.is_local(w))  # the last writer of my words
    assert list(local) == [100 * last + k for k in range(4)], list(local)
    for r in range(ep.size):
        out = np.zeros(4, np.int64)
        ok = ep.get_symmetric(r, local, out)
        assert ok == done[r]
        if ok:
            assert list(out) == list(ep.segment_view(r)[1024:1056].view(np.int64)), out
        assert not ep.get_symmetric(r, local, np.zeros(2, np.int64))  # out too short
        ro = np.zeros(4, np.int64)
        ro.flags.writeable = False
        assert not ep.get_symmetric(r, local, ro)
    ep.barrier()
    return sorted(r for r, ok in done.items() if ok)
