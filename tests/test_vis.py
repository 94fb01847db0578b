"""VIS (``ep.vis``, docs/design.md §9) in real jobs, in the spirit of GASNet's testvis.

Property tests: hypothesis draws lists of transfers (vector, indexed, strided; random piece
lists cut differently on the two sides, zero-length entries, negative and permuted strides,
0 to 4 levels, local sides as buffers of every kind and as non-contiguous numpy arrays), and
ONE job per drawn list runs every case as a put and a get in every completion mode, against
a pure numpy reference, on every topology: in-node over PSHM, two rank-threads of one
process, across nodes, in-node over the conduit loopback, and across nodes with a small
``max_medium`` and a pipeline of 1 and 3 chunks. A fixed list of cases runs in one more job
per topology, so that what must be covered (big and chunked transfers, thousands of pieces,
every strided shape, empty transfers) is, whatever hypothesis draws. Then: every rank to every
other rank at once, bad input (refused before anything moves, in-node and across nodes, and
inside handlers), the configuration option, ``ep.vis`` itself, and gets between nodes while
another thread of the process drains (their requests must still leave in order).

The checks run inside the ranks (tests/data/visjobs.py) and raise AssertionError naming the
case; the jobs return what they exercised and the tests assert it, so that a check skipped by
mistake fails too.
"""

from __future__ import annotations

import functools
import re
from math import prod

import numpy as np
import pytest
import visjobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amnet
import amnet.vis
from amnet import Config, ConfigError

SEGMENT = 4 << 20
W = 1 << 14  # the window of a drawn case
BIG = visjobs.SLOT  # the window of a big fixed case
DTYPES = ("u1", "<i2", ">u4", "<f8", "c16")
NP_VARIANTS = ("c", "step", "rev", "T", "sub2d", "neg2d", "perm3")
WIDE = ("<u4", ">f8", "<i2")  # contiguous arrays of a wider type as explicit strided buffers

TOPOLOGIES = [
    pytest.param(dict(n=2), id="pshm"),
    pytest.param(dict(n=2, threads_per_proc=2), id="threads"),
    pytest.param(dict(n=2, nodes=2), id="nodes"),
    pytest.param(dict(n=2, pshm=False), id="loopback"),
    pytest.param(dict(n=2, nodes=2, max_medium=4096, vis_pipeline=1), id="nodes-mm4k-p1"),
    pytest.param(dict(n=2, nodes=2, max_medium=4096, vis_pipeline=3), id="nodes-mm4k-p3"),
    pytest.param(dict(n=2, nodes=2, conduit="tcp"), id="nodes-tcp"),
    pytest.param(dict(n=2, nodes=2, conduit="mpi", max_medium=4096, vis_pipeline=3),
                 id="nodes-mpi-mm4k-p3"),
]


def job(fn, topo, **kw):
    return amnet.run(fn, **topo, segment_size=SEGMENT, timeout=120, **kw)


def between_nodes(topo: dict) -> bool:
    """Whether rank 0 and rank 1 of ``topo`` talk through the conduit (not shared memory)."""
    return topo.get("nodes", 1) > 1 or topo.get("pshm") is False


# -- describing cases --------------------------------------------------------------------------
def nest(elemsz: int, count: list[int], order: list[int], neg: list[bool],
         gaps: list[int]) -> tuple[list[int], int, int]:
    """Strides whose elements never share a byte: the levels nested in ``order`` (innermost
    first), each stride the span of what is inside plus a gap, negative where ``neg``.
    Returns ``(strides, lo, hi)``: the region's bytes relative to its origin."""
    strides = [0] * len(count)
    span = elemsz
    for k in order:
        s = span + gaps[k]
        strides[k] = -s if neg[k] else s
        span += max(count[k] - 1, 0) * s
    return strides, *extent(elemsz, count, strides)


def extent(elemsz: int, count: list[int], strides: list[int]) -> tuple[int, int]:
    lo = sum(max(c - 1, 0) * s for c, s in zip(count, strides, strict=True) if s < 0)
    hi = sum(max(c - 1, 0) * s for c, s in zip(count, strides, strict=True) if s > 0)
    return lo, hi + elemsz


def case_total(case: dict) -> int:
    """Bytes one transfer of ``case`` moves, from its description."""
    if case["kind"] == "vector":
        return sum(n for _, n in case["rput"])
    if case["kind"] == "indexed":
        return len(case["rput"]) * case["rlen"]
    return case["elemsz"] * prod(case["count"])


@st.composite
def composition(draw, total: int, k: int) -> list[int]:
    """``k`` lengths (zeros allowed) that add up to ``total``."""
    if k == 0:
        return []
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=k - 1, max_size=k - 1)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


def buf_spec(draw, n: int, writable: bool) -> list:
    kinds = ["bytearray", "mv", "np", "np"] + ([] if writable else ["bytes"])
    kind = draw(st.sampled_from(kinds))
    if kind != "np":
        return [kind, n, "u1", "c"]
    dts = [d for d in DTYPES if n % np.dtype(d).itemsize == 0]
    return ["np", n, draw(st.sampled_from(dts)), draw(st.sampled_from(NP_VARIANTS))]


def disjoint(draw, lens: list[int], room: int) -> list[int]:
    """Offsets in [0, room) of pieces of ``lens`` that share no byte, in a random order."""
    gaps = draw(composition(room - sum(lens), len(lens) + 1))
    order = draw(st.permutations(range(len(lens))))
    offs, pos = [0] * len(lens), 0
    for g, j in zip(gaps, order, strict=False):
        pos += g
        offs[j] = pos
        pos += lens[j]
    return offs


def anywhere(draw, lens: list[int], room: int) -> list[int]:
    """Offsets in [0, room) of pieces of ``lens`` (they may overlap: sources only)."""
    return [draw(st.integers(0, room - n)) for n in lens]


def strided_side(draw, elemsz: int, count: list[int], room: int | None,
                 overlap: bool) -> tuple[int, list[int], int]:
    """``(origin, strides, needed)`` of one side of a strided case: its levels nested in a
    random order (transposes), strides of random signs with gaps, sometimes (``overlap``, a
    source) a stride that makes elements share bytes. With ``room`` the region is placed at
    random in ``[0, room)``; else at a small offset, ``needed`` bytes in all."""
    L = len(count)
    order = draw(st.permutations(range(L)))
    neg = [draw(st.booleans()) for _ in range(L)]
    gaps = [draw(st.integers(0, 9)) for _ in range(L)]
    strides, lo, hi = nest(elemsz, count, order, neg, gaps)
    if room is not None and hi - lo > room:
        strides, lo, hi = nest(elemsz, count, order, neg, [0] * L)
    if overlap and L and draw(st.booleans()):
        strides[draw(st.integers(0, L - 1))] = draw(st.integers(-elemsz, elemsz))
        lo, hi = extent(elemsz, count, strides)
    slack = draw(st.integers(0, max(0, room - (hi - lo)))) if room is not None else \
        draw(st.integers(0, 16))
    return -lo + slack, strides, -lo + slack + hi


def local_strided(draw, elemsz: int, count: list[int], writable: bool) -> list:
    total = elemsz * prod(count)
    if draw(st.booleans()):
        dts = [d for d in DTYPES if elemsz % np.dtype(d).itemsize == 0]
        return ["numpy", draw(st.sampled_from(dts)), draw(st.sampled_from(NP_VARIANTS))]
    origin, strides, needed = strided_side(draw, elemsz, count, None, overlap=not writable)
    buflen = -(-(needed + draw(st.integers(0, 20))) // 16) * 16
    kinds = ["bytearray", "mv", "np1", *WIDE] + ([] if writable else ["bytes"])
    assert total == 0 or needed <= buflen
    return ["explicit", draw(st.sampled_from(kinds)), buflen, origin, strides]


@st.composite
def vector_case(draw) -> dict:
    k = draw(st.integers(0, 5))
    cap = (W // 2) // max(k, 1)
    lput: list = []
    lens: list[int] = []
    for i in range(k):
        if i and draw(st.integers(0, 4)) == 0:  # a source buffer listed again
            j = draw(st.integers(0, i - 1))
            lput.append(["dup", j])
            lens.append(lens[j])
            continue
        lput.append(buf_spec(draw, draw(st.integers(0, cap)), writable=False))
        lens.append(lput[-1][1])
    total = sum(lens)
    lo = 0 if total == 0 else 1
    lget = [buf_spec(draw, n, True)
            for n in draw(composition(total, draw(st.integers(lo, 5))))]
    rl = draw(composition(total, draw(st.integers(lo, 6))))
    rput = [[o, n] for o, n in zip(disjoint(draw, rl, W), rl, strict=True)]
    rl = draw(composition(total, draw(st.integers(lo, 6))))
    rget = [[o, n] for o, n in zip(anywhere(draw, rl, W), rl, strict=True)]
    return {"kind": "vector", "rput": rput, "rget": rget, "lput": lput, "lget": lget}


@st.composite
def indexed_case(draw) -> dict:
    if draw(st.integers(0, 7)) == 0:  # nothing to move
        rlen, nr = 0, draw(st.integers(0, 3))
        llen = draw(st.integers(0, 5))
        nl = draw(st.integers(0, 3)) if llen == 0 else 0
    else:
        u = draw(st.one_of(st.integers(1, 64), st.integers(64, 2048)))
        k1, k2 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        if u * k1 * k2 > W // 2:
            k1 = k2 = 1
        m = draw(st.integers(1, min(8, (W // 2) // (u * k1 * k2))))
        rlen, llen, nr, nl = u * k1, u * k2, k2 * m, k1 * m
    lput = [buf_spec(draw, llen, False) for _ in range(nl)]
    for i in range(1, nl):
        if draw(st.integers(0, 5)) == 0:
            lput[i] = ["dup", draw(st.integers(0, i - 1))]
    return {"kind": "indexed", "rlen": rlen, "llen": llen,
            "rput": disjoint(draw, [rlen] * nr, W), "rget": anywhere(draw, [rlen] * nr, W),
            "lput": lput, "lget": [buf_spec(draw, llen, True) for _ in range(nl)]}


@st.composite
def strided_case(draw) -> dict:
    L = draw(st.integers(0, 4))
    count = [draw(st.integers(1, 6)) for _ in range(L)]
    if L and draw(st.integers(0, 9)) == 0:
        count[draw(st.integers(0, L - 1))] = 0
    emax = max(1, (W // 2) // max(prod(count), 1))
    elemsz = draw(st.one_of(st.integers(1, min(16, emax)), st.integers(1, emax)))
    if draw(st.integers(0, 14)) == 0:
        elemsz = 0
    rput = strided_side(draw, elemsz, count, W, overlap=False)[:2]
    rget = strided_side(draw, elemsz, count, W, overlap=True)[:2]
    return {"kind": "strided", "elemsz": elemsz, "count": count,
            "rput": list(rput), "rget": list(rget),
            "lput": local_strided(draw, elemsz, count, writable=False),
            "lget": local_strided(draw, elemsz, count, writable=True)}


@st.composite
def any_case(draw) -> dict:
    case = draw(st.one_of(vector_case(), indexed_case(), strided_case()))
    case.update(seed=draw(st.integers(0, 2**32 - 1)), end=draw(st.booleans()),
                form=draw(st.integers(0, 2)), win=W)
    return case


_SEEDS = iter(range(1000, 2000))


def fixed(kind: str, win: int = W, end: bool = False, form: int = 0, **kw) -> dict:
    return {"kind": kind, "win": win, "end": end, "form": form, "seed": next(_SEEDS), **kw}


def _strided_fixed() -> list[dict]:
    out = []
    # 4 levels, permuted and negative strides on both sides; numpy views and a wide buffer
    e, c = 4, [4, 3, 5, 2]
    rs, lo, hi = nest(e, c, [2, 0, 3, 1], [True, False, False, True], [1, 2, 0, 5])
    gs, glo, ghi = nest(e, c, [3, 2, 1, 0], [False, True, True, False], [0, 3, 0, 0])
    ls, llo, lhi = nest(e, c, [1, 3, 0, 2], [True, True, False, False], [2, 0, 0, 1])
    assert hi - lo + 7 <= W and W - ghi + glo >= 0
    out.append(fixed("strided", end=True, elemsz=e, count=c, rput=[-lo + 7, rs],
                     rget=[W - ghi, gs], lput=["numpy", ">u4", "perm3"],
                     lget=["explicit", "<u4", -(-(lhi - llo + 3) // 16) * 16, -llo + 3, ls]))
    # the same as transposes of numpy arrays the other way round, and 3 levels of u1 -> i2
    out.append(fixed("strided", form=1, elemsz=2, count=[6, 5, 3],
                     rput=[0, [2, 36, 12]], rget=[100, [-2, 36, 12]],
                     lput=["explicit", "bytes", 192, 0, [30, 2, 10]],
                     lget=["numpy", "<i2", "T"]))
    # no level (one element) bigger than max_medium 4096, at the end of the window
    out.append(fixed("strided", end=True, elemsz=9000, count=[], rput=[W - 9000, []],
                     rget=[3, []], lput=["numpy", "<f8", "step"],
                     lget=["explicit", "bytearray", 9024, 17, []]))
    # big and chunked at the default max_medium (64K): elements larger than a chunk, too
    out.append(fixed("strided", win=BIG, form=2, elemsz=1000, count=[7, 30],
                     rput=[6000, [-1000, 7100]], rget=[0, [1000, 7000]],
                     lput=["numpy", "<f8", "neg2d"], lget=["numpy", "<i2", "T"]))
    out.append(fixed("strided", win=BIG, elemsz=70000, count=[3], rput=[0, [70005]],
                     rget=[BIG - 70000, [-80000]], lput=["numpy", "u1", "rev"],
                     lget=["explicit", "mv", 210000, 0, [70000]]))
    # many one-byte elements, a negative stride on the get's local side
    out.append(fixed("strided", elemsz=1, count=[5000], rput=[0, [3]], rget=[10001, [-2]],
                     lput=["numpy", "u1", "step"], lget=["explicit", "np1", 15008, 14997, [-3]]))
    # overlapping sources (stride 0 and a stride below elemsz) on both sides
    out.append(fixed("strided", elemsz=8, count=[5, 3], rput=[64, [8, 40]],
                     rget=[0, [0, 8]], lput=["explicit", "bytearray", 32, 0, [0, 8]],
                     lget=["numpy", "<f8", "sub2d"]))
    out.append(fixed("strided", elemsz=8, count=[5, 3], rput=[0, [8, 40]], rget=[5, [3, 7]],
                     lput=["explicit", "mv", 64, 4, [2, 1]], lget=["explicit", "<u4", 240, 0,
                                                                 [16, 80]]))
    # nothing to move: a zero count, a zero elemsz
    out.append(fixed("strided", elemsz=5, count=[3, 0, 2], rput=[0, [5, 15, 0]],
                     rget=[0, [5, 15, 0]], lput=["explicit", "bytearray", 0, 0, [1, 1, 1]],
                     lget=["numpy", "u1", "c"]))
    out.append(fixed("strided", elemsz=0, count=[4], rput=[0, [1]], rget=[9, [-3]],
                     lput=["numpy", "c16", "T"], lget=["explicit", "bytearray", 0, 0, [2]]))
    return out


def _fixed_cases() -> list[dict]:
    rng = np.random.default_rng(5)
    out = []
    # big vectors, chunked at the default max_medium; a source buffer listed twice
    out.append(fixed("vector", win=BIG, end=True, form=1,
                     lput=[["np", 90000, "<u4", "step"], ["bytes", 70001, "u1", "c"],
                           ["mv", 5, "u1", "c"], ["dup", 1]],
                     rput=[[140000, 100000], [0, 130007]],
                     rget=[[1000, 200000], [50000, 30007]],
                     lget=[["np", 120000, ">u4", "T"], ["bytearray", 110007, "u1", "c"]]))
    # thousands of small pieces (the vectorized scatter and gather, many descriptors)
    order = rng.permutation(3000)
    out.append(fixed("vector", form=1, lput=[["np", 6000, "<i2", "rev"]],
                     rput=[[5 * int(j), 2] for j in order],
                     rget=[[int(o), 2] for o in rng.integers(0, W - 2, 3000)],
                     lget=[["bytearray", 6000, "u1", "c"]]))
    # zero-length entries, one exactly at the window's end (the segment's for rank 0)
    out.append(fixed("vector", end=True, form=2,
                     lput=[["bytes", 0, "u1", "c"], ["bytearray", 10, "u1", "c"],
                           ["np", 0, "u1", "c"]],
                     rput=[[5, 0], [100, 4], [W, 0], [0, 6]], rget=[[0, 0], [W - 10, 10]],
                     lget=[["np", 10, "<i2", "neg2d"], ["mv", 0, "u1", "c"]]))
    out.append(fixed("vector", lput=[], rput=[], rget=[], lget=[]))
    # indexed: big pieces (chunked), many one-byte pieces, nothing to move
    out.append(fixed("indexed", win=BIG, rlen=6000, llen=8000,
                     rput=[130000, 0, 60000, 200000], rget=[1000, 1000, 3000, BIG - 6000],
                     lput=[["np", 8000, "<u4", "T"], ["bytes", 8000, "u1", "c"], ["dup", 0]],
                     lget=[["np", 8000, "c16", "neg2d"], ["mv", 8000, "u1", "c"],
                           ["np", 8000, "<i2", "step"]]))
    out.append(fixed("indexed", end=True, rlen=1, llen=7,
                     rput=[int(x) for x in rng.permutation(W)[:700]],
                     rget=[int(x) for x in rng.integers(0, W, 700)],
                     lput=[["bytearray", 7, "u1", "c"]] * 100,
                     lget=[["np", 7, "u1", "rev"]] * 100))
    out.append(fixed("indexed", rlen=0, llen=3, rput=[0, 5, W], rget=[1, 1], lput=[],
                     lget=[]))
    return out + _strided_fixed()


FIXED = _fixed_cases()


def check_cases(got: list, cases: list[dict], topo: dict) -> None:
    """What the ranks of a run_cases job exercised: every case, op and mode, the bytes each
    moved, the job's options, and the path the transfers took."""
    totals = [case_total(c) for c in cases]
    want = [[i, op, mode, totals[i]] for i in range(len(cases)) for mode in visjobs.MODES
            for op in visjobs.OPS]
    nonempty = sum(1 for x in totals if x)
    remote = between_nodes(topo)
    for r, res in enumerate(got):
        assert res["done"] == want, f"rank {r}"
        assert res["max_medium"] == topo.get("max_medium", 64 << 10)
        assert res["vis_pipeline"] == topo.get("vis_pipeline", 4)
        assert res["refused"] == 0  # no VIS message was dropped as malformed or out of order
        p = res["probe"]
        if not remote:  # direct copies, no message
            assert res["local"] == [True]
            assert p["put_ops"] == p["get_ops"] == 0, p
            continue
        # one operation per call with something to move, whatever its piece count
        assert p["put_ops"] == p["get_ops"] == 4 * nonempty, (p, nonempty)
        if cases is not FIXED:
            continue
        if topo.get("max_medium") == 4096:
            # chunks beyond the first window of 2P went out as acknowledgements came back,
            # and gets took more than the two stages first requested
            assert p["put_most"] > 2 * topo["vis_pipeline"] + 4, p
            assert p["get_most"] > 2 + 4, p
        else:
            assert p["put_most"] >= 4, p  # the 230007-byte vector: at least 4 chunks of 64K


def coverage(cases: list[dict]) -> dict[str, int]:
    """What the cases cover, counted from their descriptions."""
    cov: dict[str, int] = {}

    def add(k: str, cond: bool = True) -> None:
        if cond:
            cov[k] = cov.get(k, 0) + 1

    for c in cases:
        kind, total = c["kind"], case_total(c)
        add(kind)
        add("empty", total == 0)
        add("chunked at 64K", total > 64 << 10)
        add(f"{kind} piece > 4096", kind != "strided" and any(
            n > 4096 for n in ([n for _, n in c["rput"]] if kind == "vector" else [c["rlen"]])))
        if kind == "vector":
            add("vector cut differently", [n for _, n in c["rput"]] != [n for _, n in c["rget"]])
            add("zero-length entry", any(n == 0 for _, n in c["rput"]))
        if kind == "strided":
            L = len(c["count"])
            add(f"levels {L}")
            add("negative stride", any(s < 0 for s in c["rput"][1] + c["rget"][1]))
            add("numpy local", c["lput"][0] == "numpy" or c["lget"][0] == "numpy")
            add("explicit local", c["lput"][0] == "explicit" or c["lget"][0] == "explicit")
            add("elemsz > 4096", c["elemsz"] > 4096)
        add("source listed twice", kind != "strided" and any(s[0] == "dup" for s in c["lput"]))
        add("numpy lists", c["form"] == 1)
        add("at the end", c["end"])
    return cov


def test_fixed_cases_cover_what_must_be_covered():
    cov = coverage(FIXED)
    for k in ("vector", "indexed", "strided", "empty", "chunked at 64K", "vector piece > 4096",
              "indexed piece > 4096", "vector cut differently", "zero-length entry",
              "levels 0", "levels 1", "levels 2", "levels 3", "levels 4", "negative stride",
              "numpy local", "explicit local", "elemsz > 4096", "source listed twice",
              "numpy lists", "at the end"):
        assert cov.get(k, 0) > 0, k


def test_reference_is_numpy_striding():
    """The reference's strided positions are numpy's own: a region read through
    ``as_strided`` (levels reversed, then the element's bytes) holds the same bytes."""
    mem = np.arange(4096, dtype=np.int64).astype(np.uint8)
    for e, c, s, o in [(3, [4, 2], [5, -40], 100), (1, [], [], 7), (2, [3, 2, 2], [-2, 7, 30], 64),
                       (4, [2, 3], [4, 8], 0)]:
        pos = visjobs.strided_index(o, s, e, c)
        view = np.lib.stride_tricks.as_strided(mem[o:], shape=(*reversed(c), e),
                                               strides=(*reversed(s), 1))
        assert view.tobytes() == mem[pos].tobytes()
    for variant in NP_VARIANTS:
        for dtype in DTYPES:
            base, view, idx = visjobs.np_view(12, dtype, variant)
            base.reshape(-1)[:] = np.arange(base.size)
            assert view.reshape(-1).tolist() == base.reshape(-1)[idx].tolist(), variant
            assert variant in ("c", "rev") or not view.flags.c_contiguous or view.size < 2


# -- on every topology: the fixed cases, then hypothesis's --------------------------------------
@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_fixed_cases_match_the_reference(marked, topo):
    got = job(functools.partial(visjobs.run_cases, cases=FIXED), topo)
    check_cases(got, FIXED, topo)


# drawn cases on the paths that pack and pipeline differently (the fixed cases above run on
# every topology): within a node, between rank-threads, across nodes with a large and a small
# max_medium, over mpi (CI time)
DRAWN_TOPOLOGIES = [t for t in TOPOLOGIES
                    if t.id in ("pshm", "threads", "nodes", "nodes-mm4k-p3", "nodes-mpi-mm4k-p3")]


@pytest.mark.parametrize("topo", DRAWN_TOPOLOGIES)
@settings(max_examples=6, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.filter_too_much])
@given(cases=st.lists(any_case(), min_size=20, max_size=30))
def test_drawn_cases_match_the_reference(marked, topo, cases):
    got = job(functools.partial(visjobs.run_cases, cases=cases), topo)
    check_cases(got, cases, topo)


# -- every rank to every other rank at once ---------------------------------------------------
def test_every_rank_to_every_other_rank_at_once(marked):
    n, rounds = 4, 3
    got = amnet.run(functools.partial(visjobs.fanout, rounds=rounds), n=n, nodes=2,
                    segment_size=SEGMENT, max_medium=4096, vis_pipeline=2, timeout=120)
    check_fanout(got, rounds)


def check_fanout(got: list, rounds: int) -> None:
    """What every rank of a ``visjobs.fanout`` job on 2 nodes (2 ranks each) returned."""
    n = len(got)
    for r, res in enumerate(got):
        others = [p for p in range(n) if p != r]
        k = len(others) * rounds
        assert res["counts"] == {"put": k, "get": k, "checked_areas": k}
        assert res["refused"] == 0
        assert res["local"] == [p // 2 == r // 2 for p in others]
        far = [(p, rnd) for p in others for rnd in range(rounds) if p // 2 != r // 2]
        moving = sum(1 for p, rnd in far if visjobs.fan_desc(r, p, rnd)["pos"].size)
        assert moving >= 4
        assert res["probe"]["put_ops"] == res["probe"]["get_ops"] == moving, res["probe"]


# -- bad input ----------------------------------------------------------------------------------
BAD_COUNTS = {"RankError": 42, "SegmentBoundsError": 14, "ValueError": 40, "TypeError": 35}


@pytest.mark.parametrize("topo", [pytest.param(dict(n=2), id="pshm"),
                                  pytest.param(dict(n=2, nodes=2), id="nodes")])
def test_bad_input_is_refused_before_anything_moves(marked, topo):
    got = job(visjobs.bad_input, topo)
    for r, res in enumerate(got):
        t = (r + 1) % 2
        assert res["counts"] == BAD_COUNTS
        assert res["allowed"] == 41
        assert res["local"] is not between_nodes(topo)
        # ep.vis: one object per endpoint, named by its rank, an amnet.vis.VIS
        assert res["same"] and res["is_VIS"]
        assert f"rank {r}" in res["repr"], res["repr"]
        # inside a request handler (from my neighbour) and a reply handler: AMContextError
        ctx = {kind: (tag, rec) for kind, tag, rec in res["ctx"]}
        assert set(ctx) == {"request", "reply"} and len(res["ctx"]) == 2, res["ctx"]
        assert ctx["request"][0] == 100 + t and ctx["reply"][0] == 100 + r
        for kind, (_, rec) in ctx.items():
            assert len(rec) == 8
            for name, exc, msg in rec:
                method = name.split()[0]
                assert exc == "AMContextError", (kind, name, exc, msg)
                assert f"ep.vis.{method}() inside {kind} handler" in msg, msg


@pytest.mark.parametrize("bad", [0, 65, "x", -1])
def test_bad_vis_pipeline_is_a_config_error_naming_the_option(marked, monkeypatch, bad):
    expected = "an int from 1 to 64"
    with pytest.raises(ConfigError, match=rf"bad value {re.escape(repr(bad))} for "
                       rf"vis_pipeline \(from vis_pipeline=\): expected {expected}"):
        amnet.run(visjobs.noop, n=2, vis_pipeline=bad, timeout=30)
    monkeypatch.setenv("AMNET_VIS_PIPELINE", str(bad))
    with pytest.raises(ConfigError, match=r"vis_pipeline \(from AMNET_VIS_PIPELINE\): "
                       f"expected {expected}"):
        amnet.run(visjobs.noop, n=2, timeout=30)


def test_vis_pipeline_values():
    assert Config.resolve(env={}).vis_pipeline == 4
    for v in ("1", "64", " 7 "):
        assert Config.resolve(env={"AMNET_VIS_PIPELINE": v}).vis_pipeline == int(v)
    assert Config.resolve(env={"AMNET_VIS_PIPELINE": "9"},
                          overrides={"vis_pipeline": 2}).vis_pipeline == 2


def test_amnet_vis_exports_VIS():
    assert amnet.vis.__all__ == ["VIS"]
    assert isinstance(amnet.vis.VIS, type) and amnet.vis.VIS.__name__ == "VIS"
    for kind in ("vector", "indexed", "strided"):
        for op in ("put", "get"):
            for sfx in ("", "_nb", "_nbi"):
                assert callable(getattr(amnet.vis.VIS, f"{op}_{kind}{sfx}"))


# -- gets between nodes while another thread of the process drains ---------------------------
@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=2, nodes=2, progress_thread=True), id="nodes-progress-thread"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="nodes-threads"),
])
def test_get_requests_go_out_in_order_when_another_thread_drains(marked, topo):
    reps = 300
    got = amnet.run(functools.partial(visjobs.get_stages, reps=reps, npieces=700), **topo,
                    segment_size=1 << 20, max_medium=4096, timeout=60)
    for res in got:
        assert res["reps"] == reps and res["refused"] == 0
        assert res["probe"]["get_ops"] == reps and res["probe"]["get_most"] == 3
