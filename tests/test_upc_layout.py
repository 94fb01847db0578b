"""upc_rt._layout against a reference model written independently here: elements dealt out
to threads one at a time (blocked-cyclic, or all to thread 0 for the indefinite block size),
and pointer arithmetic as "the index p points to, plus i, mapped back"."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from upc_rt._layout import (
    Layout,
    Piece,
    SharedPtr,
    addrfield,
    affinitysize,
    phaseof,
    resetphase,
    runs,
    threadof,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- the reference model

def deal(count: int, b: int, t: int) -> list[tuple[int, int, int]]:
    """(thread, phase, local index) of elements 0..count-1, dealt out element by element:
    B to a thread, then the next thread, wrapping around; B == 0: all to thread 0."""
    held = [0] * t
    out = []
    thread = phase = 0
    for _ in range(count):
        if b == 0:
            out.append((0, 0, held[0]))
            held[0] += 1
            continue
        out.append((thread, phase, held[thread]))
        held[thread] += 1
        phase += 1
        if phase == b:
            phase, thread = 0, (thread + 1) % t
    return out


def held_by(lay: Layout) -> list[int]:
    counts = [0] * lay.threads
    for t, _, _ in deal(lay.n, lay.blocksize, lay.threads):
        counts[t] += 1
    return counts


def model_ptr(lay: Layout, place: list[tuple[int, int, int]], i: int) -> SharedPtr:
    t, ph, j = place[i]
    return SharedPtr(t, ph, lay.base + lay.elemsize * j, lay.elemsize, lay.blocksize,
                     lay.threads)


def model_pieces(lay: Layout, sel: range) -> dict[int, tuple[list[int], list[int]]]:
    """thread -> (local indices, result positions) of its selected elements, slice order."""
    place = deal(lay.n, lay.blocksize, lay.threads)
    per: dict[int, tuple[list[int], list[int]]] = {}
    for k, g in enumerate(sel):
        t, _, j = place[g]
        loc, pos = per.setdefault(t, ([], []))
        loc.append(j)
        pos.append(k)
    return dict(sorted(per.items()))


def is_progression(xs: list[int]) -> bool:
    return all(xs[i + 1] - xs[i] == xs[1] - xs[0] for i in range(len(xs) - 1))


def model_runs(loc: list[int]) -> list[tuple[int, int]]:
    """Group consecutive local indices (moving by +1, or -1 for descending ones)."""
    sign = 1 if len(loc) < 2 or loc[1] > loc[0] else -1
    groups: list[list[int]] = []
    for j in loc:
        if groups and j == groups[-1][-1] + sign:
            groups[-1].append(j)
        else:
            groups.append([j])
    return [(min(g), len(g)) for g in groups]


def model_affinity(total: int, nbytes: int, t: int, threads: int) -> int:
    """Bytes on thread t, dealing the bytes out one at a time."""
    if nbytes == 0:
        return total if t == 0 else 0
    return sum(1 for i in range(total) if (i // nbytes) % threads == t)


# ---------------------------------------------------------------- strategies

block_sizes = st.one_of(st.just(0), st.just(1), st.integers(2, 6), st.integers(7, 40))


@st.composite
def layouts(draw: st.DrawFn, min_n: int = 0, max_n: int = 150) -> Layout:
    return Layout(draw(st.integers(min_n, max_n)), draw(st.sampled_from([1, 2, 4, 8, 12])),
                  draw(block_sizes), draw(st.integers(1, 9)), draw(st.integers(0, 5)) * 64)


@st.composite
def slices(draw: st.DrawFn, n: int) -> range:
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    step = draw(st.one_of(st.none(), st.integers(-13, 13).filter(bool),
                          st.integers(-200, 200).filter(bool)))
    return range(*slice(draw(bound), draw(bound), step).indices(n))


# ---------------------------------------------------------------- element placement

@FAST
@given(layouts())
def test_placement_matches_model(lay: Layout) -> None:
    place = deal(lay.n, lay.blocksize, lay.threads)
    for i, (t, ph, j) in enumerate(place):
        assert (lay.owner(i), lay.phase(i), lay.local_index(i)) == (t, ph, j)
        assert lay.addr(i) == lay.base + lay.elemsize * j
        assert lay.global_index(t, j) == i
    idx = np.arange(lay.n)
    assert lay.owners(idx).tolist() == [p[0] for p in place]
    assert lay.local_indices(idx[::-1]).tolist() == [p[2] for p in place][::-1]
    assert lay.owners(idx).dtype == np.int64 and lay.local_indices(idx).dtype == np.int64
    counts = held_by(lay)
    assert [lay.local_count(t) for t in range(lay.threads)] == counts
    assert lay.max_local() == max(counts)
    for t in range(lay.threads):
        nbytes = lay.blocksize * lay.elemsize
        assert affinitysize(lay.n * lay.elemsize, nbytes, t, lay.threads) == \
            counts[t] * lay.elemsize


@FAST
@given(st.integers(0, 300), st.integers(0, 40), st.integers(1, 9))
def test_affinitysize_matches_model_and_sums_to_total(total: int, nbytes: int,
                                                       threads: int) -> None:
    sizes = [affinitysize(total, nbytes, t, threads) for t in range(threads)]
    assert sizes == [model_affinity(total, nbytes, t, threads) for t in range(threads)]
    assert sum(sizes) == total


# ---------------------------------------------------------------- pointer arithmetic

@FAST
@given(layouts(min_n=1), st.data())
def test_pointer_arithmetic_matches_model(lay: Layout, data: st.DataObject) -> None:
    place = deal(lay.n + 1, lay.blocksize, lay.threads)  # n: one past the end
    i = data.draw(st.integers(0, lay.n))
    j = data.draw(st.integers(0, lay.n))
    k = j - i
    p, q = lay.ptr(i), lay.ptr(j)
    assert p == model_ptr(lay, place, i) and q == model_ptr(lay, place, j)
    assert p + k == q and k + p == q and q - k == p
    assert p - q == i - j and q - p == j - i
    assert (p < q, p <= q, p > q, p >= q) == (i < j, i <= j, i > j, i >= j)
    assert (p == q) == (i == j) and (p != q) == (i != j)
    assert lay.index_of(p + k) == j
    assert (p + k).alloc is lay and resetphase(q) == q.resetphase()
    t, ph, loc = place[j]
    assert (threadof(q), phaseof(q), addrfield(q)) == (t, ph, lay.base + lay.elemsize * loc)


@FAST
@given(layouts(min_n=1, max_n=60))
def test_stepping_one_element_at_a_time_walks_the_model(lay: Layout) -> None:
    place = deal(lay.n + 1, lay.blocksize, lay.threads)
    p = lay.ptr(0)
    for i in range(lay.n + 1):
        assert p == model_ptr(lay, place, i)
        p += 1
    for i in range(lay.n + 1, 0, -1):
        p -= 1
        assert p == model_ptr(lay, place, i - 1)
        assert p - lay.ptr(0) == i - 1


@pytest.mark.parametrize("b", [0, 1, 3])
def test_pointer_before_the_segment_start_is_refused(b: int) -> None:
    lay = Layout(10, 8, b, 4)
    with pytest.raises(ValueError, match="before the start"):
        lay.ptr(0) - 1
    shifted = Layout(10, 8, b, 4, base=1024)
    assert (shifted.ptr(0) - 1) + 1 == shifted.ptr(0)  # out of the object, still a pointer


# ---------------------------------------------------------------- slices

def check_pieces(lay: Layout, sel: range) -> list[Piece]:
    got = lay.pieces(sel.start, sel.stop, sel.step)
    want = model_pieces(lay, sel)
    assert [pc.thread for pc in got] == list(want)
    for pc in got:
        loc, pos = want[pc.thread]
        assert pc.count == len(loc)
        assert pc.local_indices().tolist() == loc and pc.positions().tolist() == pos
        assert pc.local_indices().dtype == np.int64 and pc.positions().dtype == np.int64
        # a progression is always given as one, and an array only when it is not one
        assert (pc.local is None) == is_progression(loc)
        assert (pc.pos is None) == is_progression(pos)
        if pc.count == 1:
            assert pc.local_stride == pc.pos_stride == 1
        if pc.local is not None:
            assert (pc.local_start, pc.local_stride) == (loc[0], 0)
            assert not pc.local.flags.writeable
        if pc.pos is None:
            assert np.arange(len(sel))[pc.pos_slice()].tolist() == pos
        else:
            assert pc.pos_slice() is None and (pc.pos_start, pc.pos_stride) == (pos[0], 0)
            assert not pc.pos.flags.writeable
        assert pc.runs() == runs(pc) == model_runs(loc)
    return got


@FAST
@given(layouts(), st.data())
def test_pieces_match_model(lay: Layout, data: st.DataObject) -> None:
    check_pieces(lay, data.draw(slices(lay.n)))


def test_pieces_exhaustive_small() -> None:
    for b in range(5):
        for t in range(1, 6):
            lay = Layout(23, 4, b, t)
            for step in (*range(-7, 0), *range(1, 8), 20, -20):
                for start in (None, 0, 1, 5, 22):
                    for stop in (None, 0, 3, 17, -1):
                        check_pieces(lay, range(*slice(start, stop, step).indices(23)))


def test_step_one_gives_each_thread_one_run_of_local_indices() -> None:
    lay = Layout(1000, 8, 7, 3)
    for pc in lay.pieces(5, 990, 1):
        assert pc.local_stride == 1 and len(pc.runs()) == 1
        assert pc.pos is not None  # its blocks are spread over the result
    for pc in lay.pieces(989, 4, -1):
        assert pc.local_stride == -1 and len(pc.runs()) == 1


@pytest.mark.parametrize(("b", "t", "step"), [(1, 8, 1), (1, 8, -1), (1, 5, 3), (4, 3, 12),
                                              (4, 3, -24), (0, 4, 7), (6, 1, 5), (2, 4, 10)])
def test_regular_selections_are_progressions_even_when_huge(b: int, t: int, step: int) -> None:
    n = 10**15  # no per-element work can finish
    lay = Layout(n, 8, b, t)
    sel = slice(None, None, step).indices(n)
    got = lay.pieces(*sel)
    assert got and all(pc.local is None and pc.pos is None for pc in got)
    assert sum(pc.count for pc in got) == len(range(*sel))
    for pc in got:  # spot-check the progressions' first and second elements
        for k in range(min(pc.count, 2)):
            g = lay.global_index(pc.thread, pc.local_start + k * pc.local_stride)
            assert g == sel[0] + (pc.pos_start + k * pc.pos_stride) * step


def test_step_one_within_one_block_per_thread_is_progressions() -> None:
    lay = Layout(10**15, 8, 10**9, 4)
    got = lay.pieces(10**9 - 5, 3 * 10**9 + 5, 1)
    assert [pc.thread for pc in got] == [0, 1, 2, 3]
    assert all(pc.local is None and pc.pos is None for pc in got)
    assert [(pc.local_start, pc.count, pc.pos_start) for pc in got] == \
        [(10**9 - 5, 5, 0), (0, 10**9, 5), (0, 10**9, 10**9 + 5), (0, 5, 2 * 10**9 + 5)]


def test_empty_slice() -> None:
    assert Layout(10, 8, 2, 3).pieces(4, 4, 1) == []
    assert Layout(0, 8, 2, 3).pieces(*slice(None).indices(0)) == []


# ---------------------------------------------------------------- worked examples (B=3, T=4)

def test_worked_example_blocked_three_four_threads() -> None:
    # shared [3] double x[16] on 4 threads: blocks 0-2 | 3-5 | 6-8 | 9-11 on threads 0..3,
    # then 12-14 on thread 0 again and 15 on thread 1.
    x = Layout(16, 8, 3, 4)
    assert x.owners(np.arange(16)).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0, 1]
    assert [x.local_count(t) for t in range(4)] == [6, 4, 3, 3] and x.max_local() == 6
    assert [affinitysize(16 * 8, 3 * 8, t, 4) for t in range(4)] == [48, 32, 24, 24]
    dp = x.ptr(5)
    assert repr(dp) == "<shared ptr thread 1 phase 2 addr 0x10 (B=3, E=8)>"
    dp1 = dp + 9  # x[14]: thread 0's sixth element (local index 5, address 5 * 8)
    assert (dp1.thread, dp1.phase, dp1.addr) == (0, 2, 40) and x.index_of(dp1) == 14
    assert (dp + 3).thread == 2 and (dp + 3).phase == 2 and x.index_of(dp + 3) == 8
    assert dp1 - dp == 9 and dp - dp1 == -9 and dp < dp1
    assert dp.resetphase() == SharedPtr(1, 0, 16, 8, 3, 4)
    got = x.pieces(*slice(2, 15).indices(16))
    t0 = got[0]
    assert (t0.local_start, t0.local_stride, t0.count) == (2, 1, 4)
    assert t0.positions().tolist() == [0, 10, 11, 12]
    assert [(pc.local_start, pc.count, pc.pos_start, pc.pos_stride) for pc in got[1:]] == \
        [(0, 3, 1, 1), (0, 3, 4, 1), (0, 3, 7, 1)]


def test_worked_example_indefinite_and_cyclic() -> None:
    y = Layout(10, 4, 0, 3)  # shared [] int y[10]: all on thread 0
    assert y.owners(np.arange(10)).tolist() == [0] * 10
    assert [y.local_count(t) for t in range(3)] == [10, 0, 0]
    assert (y.ptr(2) + 5) == y.ptr(7) and (y.ptr(7).thread, y.ptr(7).phase) == (0, 0)
    assert [affinitysize(40, 0, t, 3) for t in range(3)] == [40, 0, 0]
    z = Layout(10, 4, 1, 3)  # shared int z[10]: cyclic
    assert z.ptr(4) == SharedPtr(1, 0, 4, 4, 1, 3) and z.ptr(4) + 2 == z.ptr(6)
    got = z.pieces(0, 10, 1)
    assert [(pc.local_start, pc.local_stride, pc.count, pc.pos_start, pc.pos_stride)
            for pc in got] == [(0, 1, 4, 0, 3), (0, 1, 3, 1, 3), (0, 1, 3, 2, 3)]


# ---------------------------------------------------------------- SharedPtr as a value

def test_pointer_is_an_immutable_hashable_value() -> None:
    lay = Layout(20, 8, 2, 3, tag="A")
    p = lay.ptr(7)
    with pytest.raises(AttributeError):
        p.thread = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.addr
    same = SharedPtr(p.thread, p.phase, p.addr, 8, 2, 3, alloc="other tag")
    assert p == same and hash(p) == hash(same) and len({p, same, lay.ptr(8)}) == 2
    assert p.alloc == "A" and (p + 3).alloc == "A" and p.resetphase().alloc == "A"
    assert p != SharedPtr(p.thread, p.phase, p.addr, 4, 2, 3) and p != "p"
    assert (p.threadof, p.phaseof, p.addrfield) == (p.thread, p.phase, p.addr)
    back = pickle.loads(pickle.dumps(p))
    assert back == p and back.alloc == "A"
    assert bool(p)


def test_null_pointer() -> None:
    null = SharedPtr.null(8, 4, 2)
    assert not null and null.is_null and null == SharedPtr.null(8, 4, 2)
    assert (threadof(null), phaseof(null)) == (0, 0)
    assert repr(null) == "<shared ptr NULL (B=4, E=8)>"
    assert pickle.loads(pickle.dumps(null)) == null and not pickle.loads(pickle.dumps(null))
    for op in (lambda: null + 1, lambda: null - 1, lambda: null - Layout(4, 8, 4, 2).ptr(0),
               lambda: Layout(4, 8, 4, 2).ptr(0) < null):
        with pytest.raises(ValueError, match="null"):
            op()
    with pytest.raises(ValueError, match="does not point into"):
        Layout(4, 8, 4, 2).index_of(null)


def test_pointer_errors() -> None:
    a, b = Layout(20, 8, 2, 3, tag="a"), Layout(20, 8, 2, 3, tag="b")
    with pytest.raises(TypeError, match="different types"):
        a.ptr(1) - Layout(20, 4, 2, 3).ptr(1)
    with pytest.raises(TypeError):
        assert a.ptr(1) < Layout(20, 8, 3, 3).ptr(1)
    with pytest.raises(ValueError, match="same object"):
        a.ptr(1) - b.ptr(1)
    with pytest.raises(ValueError, match="not the same object"):
        Layout(20, 8, 2, 3).ptr(1) - SharedPtr(0, 1, 12, 8, 2, 3)  # misaligned blocks
    with pytest.raises(ValueError, match="not the same object"):
        SharedPtr(1, 0, 8, 8, 0, 3) - SharedPtr(0, 0, 8, 8, 0, 3)
    with pytest.raises(ValueError, match="not the same object"):
        SharedPtr(0, 0, 9, 8, 0, 3) - SharedPtr(0, 0, 8, 8, 0, 3)
    p = a.ptr(1)
    for op in (lambda: 1 - p, lambda: p + 1.5, lambda: p - "x", lambda: p + p,
               lambda: p < 3):
        with pytest.raises(TypeError):
            op()
    for args, what in [((3, 0, 0, 8, 2, 3), "thread"), ((0, 2, 0, 8, 2, 3), "phase"),
                       ((0, 1, 0, 8, 0, 3), "phase"), ((0, 0, -8, 8, 2, 3), "addr"),
                       ((0, 0, 0, 0, 2, 3), "elemsize"), ((0, 0, 0, 8, -1, 3), "blocksize"),
                       ((0, 0, 0, 8, 2, 0), "threads")]:
        with pytest.raises(ValueError, match=what):
            SharedPtr(*args)
    with pytest.raises(TypeError):
        SharedPtr(0, 0, 1.5, 8, 2, 3)  # type: ignore[arg-type]


def test_index_of_rejects_foreign_pointers() -> None:
    a = Layout(20, 8, 2, 3, base=64, tag="a")
    assert a.index_of(a.ptr(20)) == 20 and a.index_of(SharedPtr(0, 1, 72, 8, 2, 3)) == 1
    for p in (Layout(20, 8, 2, 3, base=64, tag="b").ptr(3), Layout(20, 8, 2, 4).ptr(3),
              SharedPtr(0, 1, 65, 8, 2, 3), SharedPtr(0, 0, 72, 8, 2, 3)):
        with pytest.raises(ValueError, match="does not point into"):
            a.index_of(p)
    with pytest.raises(ValueError, match="does not point into"):
        Layout(20, 8, 0, 3).index_of(SharedPtr(1, 0, 0, 8, 0, 3))
    with pytest.raises(IndexError, match="length 20"):
        a.index_of(a.ptr(20) + 1)
    with pytest.raises(IndexError, match="length 20"):
        a.index_of(a.ptr(0) - 1)


# ---------------------------------------------------------------- bad inputs

def test_layout_and_index_errors() -> None:
    for args, what in [((-1, 8, 2, 3), "n"), ((4, 0, 2, 3), "elemsize"),
                       ((4, 8, -2, 3), "blocksize"), ((4, 8, 2, 0), "threads"),
                       ((4, 8, 2, 3, -8), "base")]:
        with pytest.raises(ValueError, match=what):
            Layout(*args)
    with pytest.raises(TypeError):
        Layout(4.0, 8, 2, 3)  # type: ignore[arg-type]
    lay = Layout(10, 8, 2, 3)
    for f in (lay.owner, lay.phase, lay.local_index, lay.addr):
        for i in (-1, 10):
            with pytest.raises(IndexError, match="length 10"):
                f(i)
    with pytest.raises(IndexError, match="length 10"):
        lay.ptr(11)
    with pytest.raises(IndexError, match="length 10"):
        lay.owners(np.array([0, 10]))
    with pytest.raises(IndexError, match="length 10"):
        lay.local_indices(np.array([-1]))
    with pytest.raises(TypeError, match="integers"):
        lay.owners(np.array([1.0]))
    assert lay.owners(np.array([], dtype=float)).tolist() == []
    with pytest.raises(IndexError, match="3 threads"):
        lay.local_count(3)
    with pytest.raises(IndexError, match="3 threads"):
        lay.global_index(-1, 0)
    with pytest.raises(IndexError, match="4 elements"):
        lay.global_index(0, 4)
    with pytest.raises(IndexError):
        Layout(10, 8, 0, 3).global_index(1, 0)
    with pytest.raises(ValueError, match="step"):
        lay.pieces(0, 10, 0)
    with pytest.raises(IndexError, match="length 10"):
        lay.pieces(0, 11, 1)
    with pytest.raises(IndexError, match="length 10"):
        lay.pieces(-1, 5, 1)
    with pytest.raises(IndexError, match="length 10"):
        lay.pieces(9, -2, -1)


@pytest.mark.parametrize(("args", "what"), [((-1, 4, 0, 2), "totalsize"),
                                            ((8, -4, 0, 2), "nbytes"),
                                            ((8, 4, -1, 2), "threadid"),
                                            ((8, 4, 2, 2), "threadid"),
                                            ((8, 4, 0, 0), "threads")])
def test_affinitysize_errors(args: tuple[int, ...], what: str) -> None:
    with pytest.raises(ValueError, match=what):
        affinitysize(*args)


# ---------------------------------------------------------------- bulk plans of n-D slices

class _Arr:
    """What upc_rt._bulk._plan reads of a SharedArray."""

    def __init__(self, shape: tuple[int, ...], b: int, t: int) -> None:
        self.shape, self._B, self._T = shape, b, t
        self._n = int(np.prod(shape))
        self._lay = Layout(self._n, 8, b, t)
        self.name = "test array"


def _dim_key(draw, d: int):
    kind = draw(st.sampled_from(["all", "slice", "int"]))
    if kind == "all":
        return slice(None)
    if kind == "int":
        return draw(st.integers(-d, d - 1))
    return slice(draw(st.one_of(st.none(), st.integers(-d - 2, d + 2))),
                 draw(st.one_of(st.none(), st.integers(-d - 2, d + 2))),
                 draw(st.sampled_from([1, 2, 3, -1, -2, 5])))


@st.composite
def nd_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=2, max_size=3)))
    t = draw(st.integers(1, 5))
    b = draw(st.sampled_from([0, 1, 2, 3, 4, 8, shape[-1], 2 * shape[-1]]))
    key = tuple(_dim_key(draw, d) for d in shape)
    return shape, b, t, key


@FAST
@given(nd_cases())
def test_nd_plan_matches_the_model(case):
    from upc_rt._bulk import _plan

    shape, b, t, key = case
    a = _Arr(shape, b, t)
    pieces, got_shape, (rows, lrow, prow) = _plan(a, key)
    want = np.arange(a._n).reshape(shape)[key]
    assert got_shape == want.shape
    flat = want.ravel()
    model = deal(a._n, b, t)
    seen = np.full(flat.size, -1)
    for pc in pieces:
        loc, pos = pc.local_indices(), pc.positions()
        for r in range(rows):
            for li, p in zip(loc + r * lrow, pos + r * prow, strict=True):
                g = flat[p]
                assert (model[g][0], model[g][2]) == (pc.thread, li), (g, pc, r)
                assert seen[p] == -1
                seen[p] = g
    assert (seen == flat).all()
    assert rows == 1 or (lrow, prow) != (0, 0)


@pytest.mark.parametrize(("shape", "b", "t", "key", "grid", "threads"), [
    ((9, 8), 2, 4, (slice(None), slice(4, 8)), (9, 2, 4), [2, 3]),
    ((9, 8), 1, 2, (slice(1, None, 2), slice(None, None, -1)), (4, 8, 8), [0, 1]),
    ((9, 8), 0, 3, (slice(None), 5), (9, 8, 1), [0]),
    ((4, 3, 8), 4, 2, (slice(None), 1, slice(None)), (4, 12, 8), [0, 1]),
])
def test_aligned_rows_are_one_grid_per_thread(shape, b, t, key, grid, threads):
    from upc_rt._bulk import _plan

    pieces, _, got = _plan(_Arr(shape, b, t), key)
    assert got == grid
    assert [pc.thread for pc in pieces] == threads


def test_unaligned_rows_take_the_general_path():
    from upc_rt._bulk import _plan

    pieces, shape, grid = _plan(_Arr((9, 8), 3, 2), (slice(None), slice(0, 4)))
    assert grid == (1, 0, 0) and shape == (9, 4)
    assert sum(pc.count for pc in pieces) == 36


# ---------------------------------------------------------------- rows and a thread's elements

@FAST
@given(st.lists(st.integers(0, 6), min_size=1, max_size=3), block_sizes, st.integers(1, 9))
def test_row_owners_are_the_owners_of_each_rows_first_element(dims: list[int], b: int,
                                                               t: int) -> None:
    # shared [b] T A[R][C...]: row i (&A[i]) has the affinity of &A[i][0...0]
    shape = (dims[0] + 1, *dims[1:])  # at least one row
    row = int(np.prod(shape[1:]))
    lay = Layout(int(np.prod(shape)), 8, b, t)
    place = deal(lay.n, b, t)
    if row == 0:  # rows without elements have no affinity
        with pytest.raises(ValueError, match="row must be >= 1"):
            lay.row_owners(np.arange(shape[0]), row)
        return
    want = [place[i * row][0] for i in range(shape[0])]
    assert lay.row_owners(np.arange(shape[0]), row).tolist() == want
    assert lay.row_owners(np.arange(shape[0])[::-1], row).tolist() == want[::-1]
    assert lay.row_owners(np.arange(lay.n), 1).tolist() == [p[0] for p in place]
    for bad in (shape[0], -1):
        with pytest.raises(IndexError, match=rf"row {bad} out of range for {shape[0]} rows"):
            lay.row_owners(np.array([0, bad]), row)
    with pytest.raises(TypeError, match="integers"):
        lay.row_owners(np.array([0.5]), row)


@FAST
@given(layouts())
def test_thread_indices_list_each_threads_elements_in_local_order(lay: Layout) -> None:
    place = deal(lay.n, lay.blocksize, lay.threads)
    for t in range(lay.threads):
        mine = sorted((j, i) for i, (tt, _, j) in enumerate(place) if tt == t)
        got = lay.thread_indices(t)
        assert got.dtype == np.int64 and got.tolist() == [i for _, i in mine]
        assert [j for j, _ in mine] == list(range(len(mine)))  # local order has no gaps
    with pytest.raises(IndexError, match="out of range"):
        lay.thread_indices(lay.threads)
