"""Job functions for tests/test_vis.py: ``ep.vis`` (docs/design.md §9) in real jobs, in the
spirit of GASNet's testvis.

A *case* is plain data (lists, ints, strings; made by the test's hypothesis strategies or
written by hand) describing one VIS transfer of one kind, ``vector``, ``indexed`` or
``strided``, with both of its sides, once for a put and once for a get. Remote sides are byte
offsets relative to a *window* of ``case["win"]`` bytes in the target's segment; local sides
are buffer specs that :func:`make_buf` turns into real buffers (bytes, bytearray, memoryview,
numpy arrays of any dtype and strides). Every case runs as a put and as a get, each in four
modes: blocking, ``_nb`` (+ ``Handle.wait``), ``_nbi`` (+ ``ep.wait_nbi``) and ``_nbi`` inside
an access region (+ ``region.handle.wait``).

The reference is pure numpy index arithmetic, independent of amnet's code: each side of a
transfer is a list of byte *positions* (in the target window, or in a local buffer's own
bytes), in stream order; a put must leave ``window[rpos] == local stream``, a get
``local[pos] == window[rpos]``, and nothing else may change. Put sources are filled with
bytes >= 128 over a window of bytes < 128; a get's destination bytes start as the complement
of what must arrive; so a byte that was not written is always seen.

Jobs return what they exercised (every case, op and mode, its byte count, the VIS operations
that went between nodes), so that a check skipped by mistake fails in the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

import amnet

U8 = np.uint8
SLOT = 1 << 18  # bytes of each target's segment that one writer uses, at each end
OPS = ("put", "get")
MODES = ("block", "nb", "nbi", "region")
SUFFIX = {"block": "", "nb": "_nb", "nbi": "_nbi", "region": "_nbi"}
WATCHDOG_S = 20.0


# -- the reference: byte positions of each side, in stream order -----------------------------
def strided_index(origin: int, strides: list[int], elemsz: int, count: list[int]) -> np.ndarray:
    """The byte positions of a strided region in stream order: level len(count)-1 outermost,
    level 0 innermost, then the element's bytes (GASNet VIS)."""
    idx = np.array([origin], dtype=np.int64)
    for c, s in reversed(list(zip(count, strides, strict=True))):
        idx = (idx[:, None] + np.arange(c, dtype=np.int64) * s).ravel()
    return (idx[:, None] + np.arange(elemsz, dtype=np.int64)).ravel()


def pieces_index(pieces: list[tuple[int, int]]) -> np.ndarray:
    parts = [np.arange(o, o + n, dtype=np.int64) for o, n in pieces]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def remote_index(case: dict, op: str) -> np.ndarray:
    """Window-relative byte positions of the remote side of ``case`` for ``op``."""
    r = case["r" + op]
    if case["kind"] == "vector":
        return pieces_index(r)
    if case["kind"] == "indexed":
        return pieces_index([(o, case["rlen"]) for o in r])
    return strided_index(r[0], r[1], case["elemsz"], case["count"])


def case_total(case: dict) -> int:
    """Bytes one transfer of ``case`` moves (from its remote put side)."""
    return len(remote_index(case, "put"))


# -- local buffers ---------------------------------------------------------------------------
def np_view(nitems: int, dtype: str, variant: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A numpy view of ``nitems`` items, laid out as ``variant`` in a C-contiguous base.

    Returns ``(base, view, idx)``: ``idx`` is the base item index of each item of the view,
    in the view's C order (the same slicing applied to an index array).
    """
    a = next((d for d in range(2, int(nitems ** 0.5) + 1) if nitems % d == 0), 1)
    b = nitems // a
    recipes: dict[str, tuple[tuple[int, ...], Callable]] = {
        "c": ((nitems,), lambda x: x),
        "step": ((2 * nitems + 1,), lambda x: x[1::2]),
        "rev": ((nitems,), lambda x: x[::-1]),
        "T": ((b, a), lambda x: x.T),
        "sub2d": ((a, b + 2), lambda x: x[:, 1:b + 1]),
        "neg2d": ((2 * a, b), lambda x: x[::-2, ::-1]),
        "perm3": ((b, 1, a), lambda x: x.transpose(2, 0, 1)),
    }
    shape, recipe = recipes[variant]
    base = np.zeros(shape, dtype=dtype)
    view = recipe(base)
    idx = recipe(np.arange(base.size, dtype=np.int64).reshape(shape)).ravel()
    assert view.size == nitems and np.shares_memory(view, base) | (nitems == 0)
    return base, view, idx


class Buf:
    """One local buffer: ``obj`` is what the VIS call gets; its bytes live in ``base`` (a
    bytearray or a C-contiguous numpy array); ``pos`` are the positions, in ``base``'s bytes,
    of the bytes it contributes to the stream, in stream order."""

    def __init__(self, base: Any, obj: Any, pos: np.ndarray, frozen: bool = False) -> None:
        self.base = base
        self.obj = obj
        self.pos = pos
        self.frozen = frozen  # passed as bytes: made from base by freeze()
        self.numpy = isinstance(obj, np.ndarray)

    def raw(self) -> np.ndarray:
        """A writable uint8 view of all of base's bytes."""
        if isinstance(self.base, bytearray):
            return np.frombuffer(self.base, dtype=U8) if self.base else np.zeros(0, U8)
        return self.base.reshape(-1).view(U8)

    def snapshot(self) -> np.ndarray:
        return self.raw().copy()

    def freeze(self) -> None:
        if self.frozen:
            self.obj = bytes(self.base)

    def stream(self) -> np.ndarray:
        if self.frozen:
            return np.frombuffer(self.obj, dtype=U8)[self.pos]
        return self.raw()[self.pos]


def make_buf(spec: list, rng: np.random.Generator) -> Buf:
    """A buffer of ``spec = [kind, nbytes, dtype, variant]``, its bytes random."""
    kind, n, dtype, variant = spec
    if kind in ("bytes", "bytearray"):
        b = Buf(bytearray(n), None, np.arange(n, dtype=np.int64), frozen=kind == "bytes")
        b.obj = b.base
    elif kind == "mv":
        big = bytearray(n + 7)
        b = Buf(big, memoryview(big)[3:3 + n], 3 + np.arange(n, dtype=np.int64))
    elif kind == "np":
        it = np.dtype(dtype).itemsize
        base, view, idx = np_view(n // it, dtype, variant)
        pos = (idx[:, None] * it + np.arange(it, dtype=np.int64)).ravel()
        b = Buf(base, view, pos)
    else:
        raise AssertionError(f"unknown buffer kind {kind!r}")
    b.raw()[:] = rng.integers(0, 256, b.raw().size, dtype=U8)
    return b


def make_list(specs: list, rng: np.random.Generator) -> list[Buf]:
    """Buffers of a vector or indexed local side; ``["dup", j]`` is buffer ``j`` again (an
    overlapping source)."""
    out: list[Buf] = []
    for spec in specs:
        out.append(out[spec[1]] if spec[0] == "dup" else make_buf(spec, rng))
    return out


def make_strided_local(spec: list, elemsz: int, count: list[int],
                       rng: np.random.Generator) -> tuple[Buf, int | None, Any]:
    """The local side of a strided case: ``(buffer, offset, strides)``.

    ``["explicit", buftype, buflen, origin, strides]``: a contiguous buffer and its region;
    ``["numpy", dtype, variant]``: a numpy view whose C-order bytes are the stream (offset and
    strides None).
    """
    if spec[0] == "numpy":
        total = elemsz * prod(count)
        b = make_buf(["np", total, spec[1], spec[2]], rng)
        return b, None, None
    _, buftype, buflen, origin, strides = spec
    pos = strided_index(origin, strides, elemsz, count)
    if buftype in ("bytes", "bytearray"):
        b = Buf(bytearray(buflen), None, pos, frozen=buftype == "bytes")
        b.obj = b.base
    elif buftype == "mv":
        big = bytearray(buflen + 5)
        b = Buf(big, memoryview(big)[5:], pos + 5)
    elif buftype == "np1":
        base = np.zeros(buflen, dtype=U8)
        b = Buf(base, base, pos)
    else:  # a contiguous 2-d array of a wider type (buflen: a multiple of 16)
        base = np.zeros((2, buflen // (2 * np.dtype(buftype).itemsize)), dtype=buftype)
        assert base.nbytes == buflen
        b = Buf(base, base, pos)
    b.raw()[:] = rng.integers(0, 256, b.raw().size, dtype=U8)
    return b, origin, strides


# -- forms of the integer arguments --------------------------------------------------------
def ints(xs: list[int], form: int) -> Any:
    """A list of ints as Python ints (0), a numpy int64 array (1) or numpy scalars (2)."""
    if form == 1:
        return np.array(xs, dtype=np.int64)
    if form == 2:
        return [np.int64(x) if i % 2 else np.int32(x) for i, x in enumerate(xs)]
    return list(xs)


def pairs(ps: list[tuple[int, int]], form: int) -> Any:
    if form == 1:
        return np.array(ps, dtype=np.int64).reshape(-1, 2)
    if form == 2:
        return [(np.int64(o), np.uint32(n)) for o, n in ps]
    return [(o, n) for o, n in ps]


def build(case: dict, op: str, base: int, rng: np.random.Generator) -> tuple[list[Buf], str,
                                                                          tuple, np.ndarray]:
    """The local buffers, the method name, the arguments after the rank, and the remote
    positions (window-relative) of one transfer of ``case``."""
    kind, form, put = case["kind"], case["form"], op == "put"
    r, loc = case["r" + op], case["l" + op]
    rpos = remote_index(case, op)
    if kind == "strided":
        e, count = case["elemsz"], case["count"]
        b, loff, lstr = make_strided_local(loc, e, count, rng)
        bufs = [b]
        if put:
            b.raw()[:] |= 0x80
        b.freeze()
        cnt = ints(count, form) if form != 1 else tuple(count)
        ro, rstr = base + r[0], ints(r[1], form)
        lstr = lstr if lstr is None else ints(lstr, form)
        if put:
            args = (ro, rstr, b.obj, loff, lstr, e, cnt)
        else:
            args = (b.obj, loff, lstr, ro, rstr, e, cnt)
        return bufs, f"{op}_strided", args, rpos
    bufs = make_list(loc, rng)
    for b in bufs:
        if put:
            b.raw()[:] |= 0x80
        b.freeze()
    objs = [b.obj for b in bufs]
    if kind == "vector":
        rl = pairs([(base + o, n) for o, n in r], form)
        return bufs, f"{op}_vector", ((rl, objs) if put else (objs, rl)), rpos
    offs = ints([base + o for o in r], form)
    if put:
        args = (offs, case["rlen"], objs, case["llen"])
    else:
        args = (objs, case["llen"], offs, case["rlen"])
    return bufs, f"{op}_indexed", args, rpos


# -- running ---------------------------------------------------------------------------------
def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape:
        raise AssertionError(f"{what}: {got.size} bytes, {want.size} expected")
    if not np.array_equal(got, want):
        diff = np.flatnonzero(got != want)
        raise AssertionError(f"{what}: {len(diff)} of {want.size} bytes differ from the "
                             f"reference (the first at {int(diff[0])}: got {int(got[diff[0]])}, "
                             f"expected {int(want[diff[0]])})")


def call(ep: Any, fn: Callable, args: tuple, mode: str,
         after: Callable[[], None] | None = None) -> None:
    """Run a VIS call in ``mode`` to completion; ``after`` runs as soon as the call returned
    (before completion)."""
    if mode == "block":
        assert fn(*args) is None
        if after:
            after()
    elif mode == "nb":
        h = fn(*args)
        assert isinstance(h, amnet.Handle), type(h)
        if after:
            after()
        assert h.wait() is None
        assert h.done and h.test()
    elif mode == "nbi":
        assert fn(*args) is None
        if after:
            after()
        ep.wait_nbi()
        assert ep.test_nbi()
    else:
        with ep.access_region() as region:
            assert fn(*args) is None
            if after:
                after()
        assert region.handle.wait() is None
        assert region.handle.done
        assert ep.test_nbi()  # the region's operation was not an implicit one of wait_nbi


def scribble(bufs: list[Buf]) -> None:
    """Overwrite every writable source buffer (once each, however often it is listed)."""
    seen = set()
    for b in bufs:
        if id(b) in seen or b.frozen:
            continue
        seen.add(id(b))
        raw = b.raw()
        raw[:] = ~raw


def put_once(ep: Any, t: int, base: int, case: dict, mode: str, rng: np.random.Generator,
             what: str) -> tuple[np.ndarray, int]:
    """One put of ``case``; returns the window as it is now, and the bytes moved."""
    win = case["win"]
    fill = rng.integers(0, 128, win, dtype=U8)
    ep.put(t, base, fill)
    bufs, name, args, rpos = build(case, "put", base, rng)
    parts = [b.stream() for b in bufs]
    stream = np.concatenate(parts) if parts else np.zeros(0, U8)
    assert len(stream) == len(rpos), (what, len(stream), len(rpos))
    call(ep, getattr(ep.vis, name + SUFFIX[mode]), (t, *args), mode,
         after=lambda: scribble(bufs))
    got = np.frombuffer(ep.get(t, base, win), dtype=U8)
    want = fill.copy()
    want[rpos] = stream
    same(got, want, f"{what}: the target window after the put")
    return got, len(stream)


def get_once(ep: Any, t: int, base: int, case: dict, mode: str, rng: np.random.Generator,
             window: np.ndarray, what: str) -> int:
    """One get of ``case`` from a window that holds ``window``; returns the bytes moved."""
    bufs, name, args, rpos = build(case, "get", base, rng)
    stream = window[rpos]
    wants, k = [], 0
    for b in bufs:
        m = len(b.pos)
        raw = b.raw()
        raw[b.pos] = ~stream[k:k + m]  # every byte to be written differs from what must arrive
        want = raw.copy()
        want[b.pos] = stream[k:k + m]
        wants.append(want)
        k += m
    assert k == len(stream), (what, k, len(stream))
    call(ep, getattr(ep.vis, name + SUFFIX[mode]), (t, *args), mode)
    for i, (b, want) in enumerate(zip(bufs, wants, strict=True)):
        same(b.snapshot(), want, f"{what}: local buffer {i} after the get")
    return k


# -- counting the operations that went between nodes ---------------------------------------
_PROBE_LOCK = threading.Lock()
PROBE: dict[int, dict[str, int]] = {}


def install_probe() -> None:
    """Count, per initiating rank, the VIS operations that took the between-nodes path
    (``amnet.vis._remote.start``) and the requests (chunks or get stages) of the largest."""
    from amnet.vis import _remote

    with _PROBE_LOCK:
        if getattr(_remote.start, "_vis_probe", False):
            return
        orig = _remote.start

        def start(port, peer, is_get, remote, local, nbi, depth):
            op = orig(port, peer, is_get, remote, local, nbi, depth)
            k = "get" if is_get else "put"
            with _PROBE_LOCK:
                c = PROBE.setdefault(port.rank, {})
                c[k + "_ops"] = c.get(k + "_ops", 0) + 1
                c[k + "_reqs"] = c.get(k + "_reqs", 0) + len(op.reqs)
                c[k + "_most"] = max(c.get(k + "_most", 0), len(op.reqs))
            return op

        start._vis_probe = True  # type: ignore[attr-defined]
        _remote.start = start


def probe(rank: int) -> dict[str, int]:
    with _PROBE_LOCK:
        c = dict(PROBE.get(rank, {}))
    return {k: c.get(k, 0) for k in ("put_ops", "put_reqs", "put_most", "get_ops",
                                     "get_reqs", "get_most")}


# -- the property job -------------------------------------------------------------------------
def run_cases(ep: Any, cases: list[dict]) -> dict:
    """Every rank runs every case against the other ranks in turn (each rank writes only
    its own slot of a target's segment: slot ``rank`` from the start, or from the end when
    ``case["end"]``, so rank 0's end windows end at the segment's last byte)."""
    install_probe()
    n, r = ep.size, ep.rank
    seg = len(ep.segment)
    assert seg >= 2 * n * SLOT, "segment too small for the slots"
    others = [p for p in range(n) if p != r]
    done = []
    ep.barrier()
    for i, case in enumerate(cases):
        t = others[i % len(others)]
        base = seg - r * SLOT - case["win"] if case["end"] else r * SLOT
        window = None
        for mi, mode in enumerate(MODES):
            what = f"rank {r} -> {t}, case {i} ({case['kind']}), put {mode}"
            rng = np.random.default_rng([case["seed"], r, i, mi, 0])
            window, nb = put_once(ep, t, base, case, mode, rng, what)
            done.append([i, "put", mode, nb])
            what = f"rank {r} <- {t}, case {i} ({case['kind']}), get {mode}"
            rng = np.random.default_rng([case["seed"], r, i, mi, 1])
            nb = get_once(ep, t, base, case, mode, rng, window, what)
            done.append([i, "get", mode, nb])
        after = np.frombuffer(ep.get(t, base, case["win"]), dtype=U8)
        same(after, window, f"rank {r}, case {i}: the target window after the gets")
    ep.barrier()
    return {"done": done, "probe": probe(r), "max_medium": ep.max_medium,
            "refused": ep.statistics().refused,
            "vis_pipeline": ep.config.vis_pipeline,
            "local": [ep.is_local(p) for p in others]}


# -- every rank to every other rank at once ---------------------------------------------------
AREA = 12288  # bytes of a target's segment each writer owns in the fan-out job


def fan_desc(w: int, t: int, rnd: int) -> dict:
    """What writer ``w`` puts into its area of ``t``'s segment in round ``rnd`` (the same on
    every rank): a case-like description and its data."""
    rng = np.random.default_rng([w, t, rnd, 77])
    kind = ("vector", "indexed", "strided")[(w + t + rnd) % 3]
    if kind == "vector":
        lens = rng.integers(0, 2000, 5)
        order = rng.permutation(5)
        offs, pos = np.zeros(5, dtype=np.int64), 0
        for j in order:
            pos += int(rng.integers(0, 40))
            offs[j] = pos
            pos += int(lens[j])
        desc = {"kind": kind, "rput": [(int(o), int(n)) for o, n in zip(offs, lens, strict=True)]}
    elif kind == "indexed":
        rlen = int(rng.integers(1, 300))
        slots = rng.permutation(AREA // rlen)[:int(rng.integers(1, 30))]
        desc = {"kind": kind, "rlen": rlen, "rput": [int(s) * rlen for s in slots]}
    else:
        e, count = int(rng.integers(1, 9)), [int(rng.integers(1, 20)), int(rng.integers(1, 12))]
        s0 = e + int(rng.integers(0, 4))
        s1 = -(s0 * count[0] + int(rng.integers(0, 10)))
        origin = -s1 * (count[1] - 1)
        desc = {"kind": kind, "elemsz": e, "count": count, "rput": [origin, [s0, s1]]}
    pos = remote_index(desc, "put")
    assert pos.size == 0 or (pos.min() >= 0 and pos.max() < AREA)
    desc["data"] = rng.integers(0, 256, pos.size, dtype=U8)
    desc["pos"] = pos
    return desc


def fan_view(d: dict) -> np.ndarray:
    """A non-contiguous numpy view holding exactly a strided description's bytes."""
    e, c = d["elemsz"], d["count"]
    return np.zeros((c[0], c[1], e), dtype=U8).transpose(1, 0, 2)[::-1]


def fan_call(ep: Any, op: str, t: int, d: dict, mode: str) -> tuple[Any, Callable]:
    """Start the put or the get of ``d`` with rank ``t``; returns what the call returned and
    a function giving, once it completed, the bytes a get delivered (in stream order)."""
    base = ep.rank * AREA
    fn = getattr(ep.vis, f"{op}_{d['kind']}{SUFFIX[mode]}")
    put = op == "put"
    if d["kind"] == "strided":
        v = fan_view(d)
        if put:
            v[...] = d["data"].reshape(v.shape)  # its C-order bytes are the stream
            args = (base + d["rput"][0], d["rput"][1], v, None, None, d["elemsz"], d["count"])
        else:
            args = (v, None, None, base + d["rput"][0], d["rput"][1], d["elemsz"],
                    d["count"])
        return fn(t, *args), lambda: np.ascontiguousarray(v).reshape(-1)
    buf = d["data"].copy() if put else np.zeros(d["pos"].size, dtype=U8)
    if d["kind"] == "vector":
        rl = [(base + o, n) for o, n in d["rput"]]
        args = (rl, [buf]) if put else ([buf], rl)
    else:
        offs, rlen = [base + o for o in d["rput"]], d["rlen"]
        bufs = list(buf.reshape(len(offs), rlen))
        args = (offs, rlen, bufs, rlen) if put else (bufs, rlen, offs, rlen)
    return fn(t, *args), lambda: buf


def fanout(ep: Any, rounds: int = 3) -> dict:
    """Every rank puts to every other rank at once (round 0: ``_nb`` handles, round 1:
    ``_nbi``, round 2: blocking, all ranks concurrently), then each checks what every writer
    left in its own segment; then every rank gets its data back from every other rank at
    once, the same ways."""
    install_probe()
    n, r = ep.size, ep.rank
    others = [p for p in range(n) if p != r]
    seg = ep.segment
    assert n * AREA <= len(seg)
    counts = {"put": 0, "get": 0, "checked_areas": 0}
    for rnd in range(rounds):
        mode = ("nb", "nbi", "block")[rnd % 3]
        seg[:n * AREA] = 0
        ep.barrier()
        hs = [fan_call(ep, "put", p, fan_desc(r, p, rnd), mode)[0] for p in others]
        if mode == "nb":
            amnet.wait_all(hs)
        elif mode == "nbi":
            ep.wait_nbi()
        counts["put"] += len(hs)
        ep.barrier()
        for w in others:
            d = fan_desc(w, r, rnd)
            want = np.zeros(AREA, dtype=U8)
            want[d["pos"]] = d["data"]
            same(seg[w * AREA:(w + 1) * AREA], want, f"rank {r}: writer {w}'s area, round {rnd}")
            counts["checked_areas"] += 1
        ep.barrier()
        started = [(p, fan_desc(r, p, rnd)) for p in others]
        calls = [fan_call(ep, "get", p, d, mode) for p, d in started]
        if mode == "nb":
            amnet.wait_all([h for h, _ in calls])
        elif mode == "nbi":
            ep.wait_nbi()
        for (p, d), (_, got) in zip(started, calls, strict=True):
            same(got(), d["data"], f"rank {r}: {d['kind']} get back from {p}, round {rnd}")
            counts["get"] += 1
        ep.barrier()
    return {"counts": counts, "probe": probe(r), "local": [ep.is_local(p) for p in others],
            "refused": ep.statistics().refused}


# -- bad input ---------------------------------------------------------------------------------
EPS: dict[int, Any] = {}  # rank -> endpoint (module globals are shared by rank-threads)
CTX: dict[int, list] = {}  # rank -> what VIS calls raised inside handlers on that rank
_CTX_LOCK = threading.Lock()


def outcome(fn: Callable[[], Any]) -> list[str]:
    """[exception type name, message], or ["no error", ""]."""
    try:
        fn()
    except BaseException as e:  # recorded: the test says which type was right
        return [type(e).__name__, str(e)]
    return ["no error", ""]


def ctx_calls(ep: Any, peer: int) -> list[tuple[str, Callable[[], Any]]]:
    """VIS calls a handler must not make (each would write b"EVIL" or read 4 bytes at offset
    ``HEAD`` - 4 of a watched area if it went through)."""
    o = HEAD - 4
    v = ep.vis
    return [
        ("put_vector", lambda: v.put_vector(peer, [(o, 4)], [b"EVIL"])),
        ("put_vector_nb", lambda: v.put_vector_nb(peer, [(o, 4)], [b"EVIL"])),
        ("put_indexed_nbi", lambda: v.put_indexed_nbi(peer, [o], 4, [b"EVIL"], 4)),
        ("put_strided", lambda: v.put_strided(peer, o, [], b"EVIL", 0, [], 4, [])),
        ("get_vector_nbi", lambda: v.get_vector_nbi(peer, [bytearray(4)], [(o, 4)])),
        ("get_indexed", lambda: v.get_indexed(peer, [bytearray(4)], 4, [o], 4)),
        ("get_strided_nb", lambda: v.get_strided_nb(peer, bytearray(4), 0, [], o, [], 4, [])),
        ("put_vector to myself", lambda: v.put_vector(ep.rank, [(o, 4)], [b"EVIL"])),
    ]


def h_vis_ctx(tok, tag):
    ep = EPS[tok.rank]
    rec = [[name, *outcome(fn)] for name, fn in ctx_calls(ep, tok.source)]
    with _CTX_LOCK:
        CTX.setdefault(tok.rank, []).append(["request", tag, rec])
    tok.reply_short(h_vis_ctx_rep, tag)


def h_vis_ctx_rep(tok, tag):
    ep = EPS[tok.rank]
    rec = [[name, *outcome(fn)] for name, fn in ctx_calls(ep, tok.source)]
    with _CTX_LOCK:
        CTX.setdefault(tok.rank, []).append(["reply", tag, rec])


CTX_HANDLERS = [h_vis_ctx, h_vis_ctx_rep]
HEAD = 4096  # the watched bytes at each end of a target's segment
SCRATCH = 2 * HEAD  # where allowed calls write (nobody watches it)


def expect(exc: type[BaseException], fn: Callable, *args: Any) -> BaseException:
    """Call ``fn`` and check that it raises exactly ``exc``; return the exception. A call that
    blocks instead aborts the job after a while, naming the call."""
    what = f"{getattr(fn, '__name__', fn)}{tuple(args)!r}"[:300]
    dog = threading.Timer(WATCHDOG_S, amnet.abort, (7, f"{what} blocked for {WATCHDOG_S} s "
                                                    f"instead of raising {exc.__name__}"))
    dog.daemon = True
    dog.start()
    try:
        fn(*args)
    except BaseException as e:
        if type(e) is not exc:
            raise AssertionError(f"{what} raised {type(e).__name__}: {e}, expected "
                                 f"{exc.__name__}") from e
        return e
    finally:
        dog.cancel()
    raise AssertionError(f"{what} returned normally, expected {exc.__name__}")


def bad_input(ep: Any) -> dict:
    """Each rank feeds bad arguments to every VIS method (blocking, _nb, _nbi) against its
    right neighbour and checks, after each refused call, that neither the watched ends of the
    target's segment nor the local destination buffers changed. Then the calls that look
    wrong but are allowed (exact segment end, overlapping sources, interleaved views, zero
    counts, transfers to myself) run and are checked; then a handler and a reply handler try
    VIS calls."""
    n, r = ep.size, ep.rank
    t = (r + 1) % n
    S = len(ep.segment)
    EPS[r] = ep
    if "visjobs.h_vis_ctx" not in ep.handlers:
        ep.register_handlers(CTX_HANDLERS)
    rng = np.random.default_rng([r, 99])
    head = rng.integers(0, 256, HEAD, dtype=U8)
    tail = rng.integers(0, 256, HEAD, dtype=U8)
    ep.barrier()
    ep.put(t, 0, head)
    ep.put(t, S - HEAD, tail)
    out = bytearray(rng.integers(0, 256, 64, dtype=U8).tobytes())  # local destinations
    arr = rng.integers(0, 256, 64, dtype=U8)
    wide = rng.integers(0, 1 << 30, 16, dtype=np.int32)
    frozen = rng.integers(0, 256, 64, dtype=U8)
    frozen.setflags(write=False)
    watched = [out, arr, wide, frozen]
    kept = [bytes(memoryview(x).cast("B")) if isinstance(x, bytearray) else x.tobytes()
            for x in watched]
    counts: dict[str, int] = {}

    def unchanged(what: str) -> None:
        same(np.frombuffer(ep.get(t, 0, HEAD), dtype=U8), head,
             f"{what}: the head of rank {t}'s segment")
        same(np.frombuffer(ep.get(t, S - HEAD, HEAD), dtype=U8), tail,
             f"{what}: the tail of rank {t}'s segment")
        for i, (x, k) in enumerate(zip(watched, kept, strict=True)):
            now = bytes(x) if isinstance(x, bytearray) else x.tobytes()
            assert now == k, f"{what}: local buffer {i} changed"

    def no(exc: type[BaseException], msg: str, name: str, *args: Any) -> None:
        """``ep.vis.<name>`` and its _nb and _nbi forms refuse ``args`` with ``exc``, a
        message holding ``msg``, and move nothing."""
        for sfx in ("", "_nb", "_nbi"):
            e = expect(exc, getattr(ep.vis, name + sfx), *args)
            assert msg in str(e), f"{name}{sfx}: {type(e).__name__}({str(e)!r}) lacks {msg!r}"
            assert f"ep.vis.{name}{sfx}()" in str(e) or exc is amnet.RankError, str(e)
            if sfx == "_nbi":
                ep.wait_nbi()  # nothing was started
        unchanged(f"{name}{args!r}"[:200])
        counts[exc.__name__] = counts.get(exc.__name__, 0) + 1

    # -- RankError
    for bad in (n, -1, n + 100, True, "1", 1.0, None):
        msg = "out of range" if type(bad) is int else "must be an int"
        no(amnet.RankError, msg, "put_vector", bad, [(0, 1)], [b"x"])
        no(amnet.RankError, msg, "get_vector", bad, [out], [(0, 64)])
        no(amnet.RankError, msg, "put_indexed", bad, [0], 1, [b"x"], 1)
        no(amnet.RankError, msg, "get_indexed", bad, [out], 64, [0], 64)
        no(amnet.RankError, msg, "put_strided", bad, 0, [], b"x", 0, [], 1, [])
        no(amnet.RankError, msg, "get_strided", bad, out, 0, [], 0, [], 64, [])
    # -- SegmentBoundsError: remote pieces or regions outside the segment
    B, where = amnet.SegmentBoundsError, f"outside rank {t}'s segment of {S} bytes"
    no(B, where, "put_vector", t, [(S - 4, 5)], [b"12345"])
    no(B, where, "put_vector", t, [(0, 1), (-1, 1)], [b"ab"])
    no(B, where, "put_vector", t, [(S + 1, 0)], [])
    no(B, where, "put_vector", t, [(2**62, 1)], [b"x"])
    no(B, where, "get_vector", t, [out], [(S - 63, 64)])
    no(B, where, "get_vector", t, [out], [(0, 32), (-32, 32)])
    no(B, where, "put_indexed", t, [0, S - 3], 4, [b"abcdefgh"], 8)
    no(B, where, "get_indexed", t, [out], 64, [S - 63], 64)
    no(B, where, "put_strided", t, S - 4, [], b"abcde", 0, [], 5, [])
    no(B, where, "put_strided", t, S - 100, [100], b"ab", 0, [1], 1, [2])  # last byte at S
    no(B, where, "put_strided", t, 0, [-8], b"ab", 0, [1], 1, [2])  # first byte at -8
    no(B, where, "put_strided", t, 40, [4, -20], b"x" * 12, 0, [1, 3], 1, [3, 4])  # -20
    no(B, where, "get_strided", t, out, 0, [2], 0, [-1], 2, [2])  # a source may overlap
    no(B, where, "get_strided", t, arr, None, None, S - 64, [32, 8], 1, [2, 32])
    # -- ValueError: negative lengths and counts
    V = ValueError
    no(V, "negative length", "put_vector", t, [(0, -1)], [])
    no(V, "negative length", "get_vector", t, [], [(0, 2), (4, -2)])
    no(V, "dst_len must be >= 0, got -1", "put_indexed", t, [0], -1, [], 0)
    no(V, "src_len must be >= 0, got -1", "put_indexed", t, [], 0, [b""], -1)
    no(V, "src_len must be >= 0, got -4", "get_indexed", t, [], 0, [0], -4)
    no(V, "count[1] must be >= 0", "put_strided", t, 0, [1, 1], b"", 0, [1, 1], 1, [1, -1])
    no(V, "elemsz must be >= 0", "get_strided", t, out, 0, [], 0, [], -1, [])
    # entries beyond int64
    no(V, "does not fit in int64", "put_indexed", t, [0], 2**70, [b"a"], 1)
    no(V, "does not fit in int64", "get_indexed", t, [out], 64, [0], 2**63)
    no(V, "does not fit in int64", "put_vector", t, [(0, 1), (2**70, 1)], [b"ab"])
    # totals that differ
    no(V, "must be equal", "put_vector", t, [(0, 4)], [b"abc"])
    no(V, "must be equal", "get_vector", t, [out], [(0, 4)])
    no(V, "must be equal", "put_indexed", t, [0, 8], 4, [b"abc"], 3)
    no(V, "must be equal", "get_indexed", t, [out], 64, [0, 100], 33)
    # destinations whose pieces overlap
    no(V, "destination pieces overlap", "put_vector", t, [(0, 4), (2, 4)], [b"abcdefgh"])
    no(V, "destination pieces overlap", "put_vector", t, [(10, 4), (0, 11)], [b"x" * 15])
    no(V, "destination pieces overlap", "put_indexed", t, [0, 3], 4, [b"abcdefgh"], 8)
    no(V, "overlaps itself", "put_strided", t, 0, [2], b"abcdefgh", 0, [4], 4, [2])
    no(V, "overlaps itself", "put_strided", t, 0, [8, 6], b"x" * 16, 0, [4, 8], 4, [2, 2])
    no(V, "overlaps itself", "put_strided", t, 64, [0], b"abcdabcd", 0, [4], 4, [2])
    no(V, "share memory", "get_vector", t, [arr[0:40], arr[30:64]], [(0, 74)])
    no(V, "share memory", "get_indexed", t, [arr[0:8], arr[4:12]], 8, [0, 8], 8)
    no(V, "share memory", "get_vector", t, [wide[:8], wide.view(U8)[28:40]], [(0, 44)])
    no(V, "overlaps itself", "get_strided", t, arr, 0, [2], 0, [4], 4, [2])
    self_overlap = np.lib.stride_tricks.as_strided(arr, shape=(4, 4), strides=(2, 1))
    no(V, "overlaps itself", "get_strided", t, self_overlap, None, None, 0, [4], 4, [4])
    no(V, "overlaps itself", "get_vector", t, [self_overlap], [(0, 16)])
    # local regions outside their buffers, numpy arrays that do not fit the region
    no(V, "outside the src buffer", "put_strided", t, 0, [], b"abc", 1, [], 3, [])
    no(V, "outside the src buffer", "put_strided", t, 0, [4], b"abcdefgh", 4, [-5], 4, [2])
    no(V, "outside the dst buffer", "get_strided", t, out, 60, [], 0, [], 8, [])
    no(V, "holds 10 bytes", "put_strided", t, 0, [], np.zeros(10, U8), None, None, 8, [])
    no(V, "holds 64 bytes", "get_strided", t, arr, None, None, 0, [], 32, [])
    no(V, "holds 64 bytes", "get_strided", t, wide, None, None, 0, [8], 8, [4])
    no(V, "not a whole number", "put_strided", t, 0, [2], np.zeros(4, np.int32), None, None,
       2, [8])
    no(V, "not a whole number", "get_strided", t, wide, None, None, 0, [2], 2, [32])
    # strides and count of different lengths, too many levels, buffers of the wrong size
    no(V, "must match", "put_strided", t, 0, [1, 2], b"ab", 0, [1], 1, [2])
    no(V, "must match", "get_strided", t, out, 0, [1, 64], 0, [1], 1, [2])
    no(V, "at most 31", "put_strided", t, 0, [1] * 32, b"x", 0, [1] * 32, 1, [1] * 32)
    no(V, "exactly 4 bytes", "put_indexed", t, [0, 8], 4, [b"abcd", b"abc"], 4)
    no(V, "exactly 32 bytes", "get_indexed", t, [out], 32, [0, 32], 32)
    no(V, "(offset, nbytes) pairs", "put_vector", t, [(0, 1, 2)], [b"x"])
    # -- TypeError: not ints (floats, bools), not bytes-like, read-only destinations
    T = TypeError
    no(T, "must be an int", "put_vector", t, [(0.0, 1)], [b"x"])
    no(T, "must be an int", "put_vector", t, [(0, 1.0)], [b"x"])
    no(T, "must be an int", "get_vector", t, [out], [(None, 64)])
    no(T, "must be an int", "put_indexed", t, [0.5], 1, [b"x"], 1)
    # bools, alone or among ints (numpy would make [8, True] an int64 array: [8, 1])
    no(T, "must be an int, got bool", "put_indexed", t, [True], 1, [b"x"], 1)
    no(T, "must be an int, got bool", "put_indexed", t, [8, True], 1, [b"ab"], 2)
    no(T, "must be an int, got bool", "get_indexed", t, [out], 32, [np.int64(0), np.True_], 32)
    no(T, "must be an int, got bool", "put_vector", t, [(True, 1)], [b"x"])
    no(T, "must be an int, got bool", "put_vector", t, [(0, 1), (4, True)], [b"xy"])
    no(T, "must be an int, got bool", "get_vector", t, [out], [(0, 63), (np.False_, 1)])
    no(T, "dst_len must be an int", "put_indexed", t, [0], 1.0, [b"x"], 1)
    no(T, "src_len must be an int", "put_indexed", t, [0], 1, [b"x"], True)
    no(T, "dst_len must be an int", "get_indexed", t, [out], 64.0, [0], 64)
    no(T, "dst_offset must be an int", "put_strided", t, 0.0, [], b"x", 0, [], 1, [])
    no(T, "dst_offset must be an int", "put_strided", t, True, [], b"x", 0, [], 1, [])
    no(T, "src_offset must be an int", "put_strided", t, 0, [], b"x", 0.0, [], 1, [])
    no(T, "src_offset must be an int", "get_strided", t, out, 0, [], False, [], 1, [])
    no(T, "dst_strides entry must be an int", "put_strided", t, 0, [1.0], b"ab", 0, [1],
       1, [2])
    no(T, "src_strides entry must be an int", "put_strided", t, 0, [1], b"ab", 0, [True],
       1, [2])
    no(T, "count entry must be an int", "put_strided", t, 0, [1], b"ab", 0, [1], 1, [2.0])
    no(T, "count entry must be an int", "get_strided", t, out, 0, [1], 0, [1], 1, [True])
    no(T, "elemsz must be an int", "put_strided", t, 0, [], b"x", 0, [], 1.0, [])
    no(T, "elemsz must be an int", "put_strided", t, 0, [], b"x", 0, [], True, [])
    no(T, "must be a sequence", "put_strided", t, 0, 1, b"x", 0, [1], 1, [1])
    no(T, "must be bytes-like", "put_vector", t, [(0, 3)], ["abc"])
    no(T, "must be bytes-like", "put_indexed", t, [0], 3, [3], 3)
    no(T, "must be bytes-like", "put_strided", t, 0, [], "abc", 0, [], 3, [])
    no(T, "must be a list of buffers", "put_vector", t, [(0, 3)], b"abc")
    no(T, "holds Python objects", "put_vector", t, [(0, 16)],
       [np.array([1, None], dtype=object)])
    no(T, "read-only", "get_vector", t, [bytes(64)], [(0, 64)])
    no(T, "read-only", "get_vector", t, [out, memoryview(bytes(8))], [(0, 72)])
    no(T, "read-only", "get_indexed", t, [frozen], 64, [0], 64)
    no(T, "read-only", "get_strided", t, bytes(8), 0, [], 0, [], 8, [])
    no(T, "read-only", "get_strided", t, frozen, None, None, 0, [], 64, [])
    no(T, "contiguous", "get_strided", t, arr[::2], 0, [], 0, [], 8, [])
    # nothing moved, and nothing is pending
    ep.wait_nbi()
    assert ep.test_nbi()

    # -- allowed: exact ends, overlapping sources, interleaved views, nothing to move, myself
    allowed = 0
    v = ep.vis

    def get_back(off: int, nb: int) -> bytes:
        return bytes(ep.get(t, off, nb))

    v.put_vector(t, [(S - 4, 4)], [b"END!"])  # the last 4 bytes of the segment
    tail[-4:] = np.frombuffer(b"END!", dtype=U8)
    v.put_vector(t, [(S, 0), (0, 0)], [])  # empty pieces at both ends
    v.put_indexed(t, [S - 8, 0], 4, [b"1234abcd"], 8)
    head[:4] = np.frombuffer(b"abcd", dtype=U8)
    tail[-8:-4] = np.frombuffer(b"1234", dtype=U8)
    v.put_strided(t, S - 101, [100], b"YZ", 0, [1], 1, [2])  # last byte at S - 1
    tail[-101] = ord("Y")
    tail[-1] = ord("Z")
    unchanged("the allowed calls at the segment ends")
    allowed += 4
    x = b"WXYZ"
    v.put_vector(t, [(SCRATCH, 4), (SCRATCH + 8, 4)], [x, x])  # one source twice
    assert get_back(SCRATCH, 12) == b"WXYZ" + bytes(get_back(SCRATCH + 4, 4)) + b"WXYZ"
    v.put_strided(t, SCRATCH + 16, [4], b"abcd", 0, [0], 4, [3])  # source stride 0
    assert get_back(SCRATCH + 16, 12) == b"abcd" * 3
    v.put_strided(t, SCRATCH + 32, [8, 4], b"abcdefghijklmnop", 0, [4, 8], 4, [2, 2])
    assert get_back(SCRATCH + 32, 16) == b"abcdijklefghmnop"  # interleaved, not overlapping
    two = bytearray(12)
    v.get_vector(t, [two], [(SCRATCH, 8), (SCRATCH + 4, 4)])  # sources overlap
    assert bytes(two) == get_back(SCRATCH, 8) + get_back(SCRATCH + 4, 4)
    three = bytearray(12)
    v.get_strided(t, three, 0, [4], SCRATCH + 16, [0], 4, [3])  # remote source stride 0
    assert bytes(three) == b"abcd" * 3
    inter = np.zeros(16, dtype=U8)
    v.get_vector(t, [inter[0::2], inter[1::2]], [(SCRATCH + 16, 16)])  # disjoint views
    src16 = np.frombuffer(get_back(SCRATCH + 16, 16), dtype=U8)
    assert inter[0::2].tobytes() == src16[:8].tobytes()
    assert inter[1::2].tobytes() == src16[8:].tobytes()
    rows = np.zeros((2, 8), dtype=U8)
    v.get_indexed(t, list(rows), 8, [SCRATCH + 16, SCRATCH + 16], 8)  # the same piece twice
    assert rows.tobytes() == src16[:8].tobytes() * 2
    allowed += 7
    before = get_back(SCRATCH, 64)
    for sfx in ("", "_nb", "_nbi"):  # nothing to move: completes at once
        for h in (getattr(v, "put_vector" + sfx)(t, [], []),
                  getattr(v, "put_vector" + sfx)(t, [(SCRATCH, 0)] * 3, [b"", bytearray()]),
                  getattr(v, "get_vector" + sfx)(t, [], [(SCRATCH, 0)]),
                  getattr(v, "put_indexed" + sfx)(t, [SCRATCH, SCRATCH + 1], 0, [], 5),
                  getattr(v, "get_indexed" + sfx)(t, [], 7, [], 0),
                  getattr(v, "put_strided" + sfx)(t, SCRATCH, [1], b"", 0, [1], 1, [0]),
                  getattr(v, "put_strided" + sfx)(t, SCRATCH, [1, 1], b"", 0, [1, 1], 0,
                                                  [4, 4]),
                  getattr(v, "get_strided" + sfx)(t, bytearray(), 0, [5], SCRATCH, [3], 9,
                                                  [0]),
                  getattr(v, "get_strided" + sfx)(t, np.zeros((0, 3)), None, None, SCRATCH,
                                                  [], 0, [])):
            if sfx == "_nb":
                assert isinstance(h, amnet.Handle) and h.test() and h.done
            else:
                assert h is None
        assert ep.test_nbi()
        allowed += 9
    assert get_back(SCRATCH, 64) == before
    one = bytearray(3)
    v.get_strided(t, one, 0, [], SCRATCH, [], 3, [])  # count [] is one element
    assert bytes(one) == before[:3]
    mine = S // 2  # to and from my own segment (no one watches it)
    v.put_vector(r, [(mine + 4, 4), (mine, 4)], [b"selfSELF"])
    assert bytes(ep.segment[mine:mine + 8]) == b"SELFself"
    back = bytearray(8)
    v.get_strided(r, back, 0, [4], mine + 4, [-4], 4, [2])  # a negative stride
    assert bytes(back) == b"selfSELF"
    allowed += 3
    unchanged("the allowed calls")
    ep.barrier()

    # -- inside handlers: AMContextError, and nothing moved
    ep.request_short(t, h_vis_ctx, 100 + r)
    if not ep.wait_until(lambda: any(e[0] == "reply" for e in CTX.get(r, [])), timeout=30):
        raise AssertionError(f"rank {r}: no reply from the handler on rank {t}")
    ep.barrier()  # every handler of the job ran
    unchanged("the VIS calls inside handlers")
    ep.barrier()
    with _CTX_LOCK:
        ctx = list(CTX.get(r, []))
    return {"counts": counts, "allowed": allowed, "ctx": ctx, "same": ep.vis is ep.vis,
            "repr": repr(ep.vis), "is_VIS": isinstance(ep.vis, amnet.vis.VIS),
            "local": ep.is_local(t)}


def noop(ep: Any) -> int:
    return ep.rank


# -- the order of a get's requests when another thread drains ---------------------------------
def get_stages(ep: Any, reps: int, npieces: int) -> dict:
    """Every rank gets ``npieces`` one-byte pieces (three request stages at max_medium 4096)
    from a rank of the other node, ``reps`` times, while another thread of its process (a
    rank-thread, or the progress thread) drains: the replies of a request may then run
    while the call is still sending its first requests."""
    install_probe()
    n, r = ep.size, ep.rank
    t = (r + n // 2) % n
    offs = [2 * i for i in range(npieces)]
    ep.segment[:2 * npieces] = np.arange(2 * npieces, dtype=np.int64).astype(U8)
    want = bytes(np.arange(0, 2 * npieces, 2, dtype=np.int64).astype(U8))
    ep.barrier()
    for i in range(reps):
        bufs = [bytearray(1) for _ in range(npieces)]
        ep.vis.get_indexed(t, bufs, 1, offs, 1)
        assert b"".join(bufs) == want, f"rank {r}: get {i} from {t} delivered wrong bytes"
    ep.barrier()
    return {"reps": reps, "refused": ep.statistics().refused, "probe": probe(r)}
