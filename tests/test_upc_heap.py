"""upc_rt._heap.Heap, the shared-heap allocator: a model-checked churn (hypothesis stateful and a
long seeded sequence) in both directions, with and without a limit, then the fixed cases:
error messages, frees that are not frees, water marks, block lookup, zero-size blocks."""

from __future__ import annotations

import random
import re
import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from upc_rt._heap import Heap

LO, HI, ALIGN = 4096, 4096 + 64 * 256, 64


def rounded(n: int) -> int:
    return max(1, -(-n // ALIGN)) * ALIGN


def expected_offset(heap: Heap, size: int, limit: int | None) -> int | None:
    """Where first fit in the heap's direction must put ``size`` bytes (None: nowhere)."""
    extents = heap.free_extents()
    if heap.direction == "up":
        lim = heap.hi if limit is None else limit // ALIGN * ALIGN
        return next((s for s, n in extents if n >= size and s + size <= lim), None)
    lim = heap.lo if limit is None else -(-limit // ALIGN) * ALIGN
    return next(
        (s + n - size for s, n in reversed(extents) if n >= size and s + n - size >= lim), None
    )


def state(heap: Heap) -> tuple:
    return heap.free_extents(), heap.used(), heap.live_blocks(), heap.high_water, heap.low_water


class HeapChurn(RuleBasedStateMachine):
    """Allocations and frees against a model (a dict of live blocks), checked after every step."""

    direction = "up"

    def __init__(self) -> None:
        super().__init__()
        self.heap = Heap(LO, HI, align=ALIGN, direction=self.direction)
        self.live: dict[int, int] = {}

    @rule(
        nbytes=st.one_of(st.integers(0, 3 * ALIGN), st.integers(0, HI - LO + ALIGN)),
        limit=st.one_of(st.none(), st.integers(LO - ALIGN, HI + ALIGN)),
    )
    def alloc(self, nbytes: int, limit: int | None) -> None:
        size = rounded(nbytes)
        want = expected_offset(self.heap, size, limit)
        before = state(self.heap)
        if want is None:
            with pytest.raises(
                MemoryError,
                match=rf"cannot allocate {nbytes} bytes in the shared "
                rf"heap: the largest free block is {self.heap.largest_free(limit)}",
            ):
                self.heap.alloc(nbytes, limit=limit)
            assert state(self.heap) == before
            assert self.heap.largest_free(limit) < size
            return
        off = self.heap.alloc(nbytes, limit=limit)
        assert off == want and off % ALIGN == 0 and LO <= off and off + size <= HI
        if limit is not None:
            assert off + size <= limit if self.direction == "up" else off >= limit
        assert all(off + size <= s or s + n <= off for s, n in self.live.items())
        assert self.heap.size_of(off) == size
        self.live[off] = size

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        off = data.draw(st.sampled_from(sorted(self.live)))
        assert self.heap.free(off) == self.live.pop(off)
        with pytest.raises(ValueError, match="already freed"):
            self.heap.free(off)

    @rule(addr=st.integers(LO - ALIGN, HI + ALIGN))
    def lookup(self, addr: int) -> None:
        want = next(((s, n) for s, n in self.live.items() if s <= addr < s + n), None)
        assert self.heap.block_containing(addr) == want
        if want is not None and want[0] != addr:
            with pytest.raises(ValueError, match="inside the live block"):
                self.heap.free(addr)

    @invariant()
    def consistent(self) -> None:
        self.heap.check()
        h = self.heap
        assert h.used() == sum(self.live.values()) and h.live_blocks() == len(self.live)
        assert h.high_water == max((s + n for s, n in self.live.items()), default=LO)
        assert h.low_water == min(self.live, default=HI)

    def teardown(self) -> None:
        for off in list(self.live):
            self.heap.free(off)
        self.heap.check()
        assert self.heap.free_extents() == [(LO, HI - LO)]
        assert self.heap.alloc(HI - LO) == LO


class HeapChurnDown(HeapChurn):
    direction = "down"


_settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestChurnUp = HeapChurn.TestCase
TestChurnUp.settings = _settings
TestChurnDown = HeapChurnDown.TestCase
TestChurnDown.settings = _settings


@pytest.mark.parametrize("direction", ["up", "down"])
def test_long_churn_never_fragments_into_failure(direction: str) -> None:
    rng = random.Random(20240611)
    heap = Heap(0, 1 << 20, align=ALIGN, direction=direction)
    live: list[int] = []
    for step in range(6000):
        if live and (rng.random() < 0.45 or heap.largest_free() < 8192):
            heap.free(live.pop(rng.randrange(len(live))))
        else:
            nbytes = rng.choice([0, 1, 63, 64, 65, 200, 1000, 4096, 8000])
            live.append(heap.alloc(nbytes))
        if step % 500 == 0:
            heap.check()
    for off in live:
        heap.free(off)
    heap.check()
    assert heap.free_extents() == [(0, 1 << 20)] and heap.used() == 0
    assert heap.alloc(1 << 20) == 0


def test_memory_error_names_bytes_and_largest_block_and_changes_nothing() -> None:
    heap = Heap(0, 2 << 20, align=ALIGN, name="shared heap")
    a = heap.alloc(1 << 20)
    heap.alloc(65536)
    heap.free(a)
    before = state(heap)
    with pytest.raises(MemoryError) as err:
        heap.alloc(1048576, limit=65536, op="upc_all_alloc")
    assert str(err.value) == (
        "upc_all_alloc: cannot allocate 1048576 bytes in the shared heap: "
        "the largest free block is 65536 bytes"
    )
    assert state(heap) == before
    heap.check()
    with pytest.raises(MemoryError, match=r"^alloc: cannot allocate 3000000 bytes .* 1048576 b"):
        heap.alloc(3_000_000)
    assert state(heap) == before


def test_bad_sizes_and_limits_raise_value_error() -> None:
    heap = Heap(0, 4096)
    for bad in (-1, 1.5, "64", None, True):
        with pytest.raises(ValueError, match="size must"):
            heap.alloc(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit must"):
        heap.alloc(64, limit=1.0)  # type: ignore[arg-type]
    assert heap.used() == 0 and heap.free_extents() == [(0, 4096)]


def test_bad_frees_have_distinct_messages() -> None:
    heap = Heap(0, 64 * 16, align=64)
    a = heap.alloc(200)  # [0, 256)
    b = heap.alloc(64)
    messages = []
    for off, pattern in [
        (512, r"never allocated here \(it lies in free space\)"),
        (a + 64, r"inside the live block at 0 \(256 bytes\), not its start"),
        (4096, r"outside the heap \[0, 1024\)"),
    ]:
        with pytest.raises(ValueError, match=pattern) as err:
            heap.free(off)
        messages.append(str(err.value))
    assert heap.free(b) == 64
    with pytest.raises(ValueError, match=r"^free: offset 256 in the shared heap was already freed"):
        heap.free(b)
    with pytest.raises(ValueError, match="already freed"):
        heap.size_of(b)
    assert heap.size_of(a) == 256
    assert len(set(messages)) == 3 and all("free: offset" in m for m in messages)
    assert heap.live_blocks() == 1
    heap.check()


def test_double_free_inside_a_later_block_says_both() -> None:
    """A freed block's start that a later, larger block now covers (found by the churn
    above): freeing it again is a double free, and the message names the block it is in."""
    heap = Heap(0, 64 * 16, align=64, direction="down")
    a = heap.alloc(64)  # [960, 1024)
    b = heap.alloc(64)  # [896, 960)
    heap.free(a)
    heap.free(b)
    c = heap.alloc(129)  # [832, 1024): covers b's start, not at its own
    assert c < b < c + heap.size_of(c)
    with pytest.raises(ValueError, match=rf"^free: offset {b} in the shared heap was already "
                       rf"freed \(double free\); it is inside the live block at {c} "
                       rf"\(192 bytes\) now$"):
        heap.free(b)
    assert heap.live_blocks() == 1
    heap.check()


@pytest.mark.parametrize("direction", ["up", "down"])
def test_water_marks(direction: str) -> None:
    heap = Heap(1024, 2048, align=64, direction=direction)
    assert (heap.high_water, heap.low_water) == (1024, 2048)
    a, b, c = heap.alloc(64), heap.alloc(100), heap.alloc(64)
    if direction == "up":
        assert (a, b, c) == (1024, 1088, 1216) and heap.high_water == 1280
        heap.free(c)
        assert heap.high_water == 1216
        heap.free(a)
        assert heap.high_water == 1216 and heap.low_water == 1088
        assert heap.alloc(0) == 1024  # first fit by address reuses the hole
    else:
        assert (a, b, c) == (1984, 1856, 1792) and heap.low_water == 1792
        heap.free(c)
        assert heap.low_water == 1856
        heap.free(a)
        assert heap.low_water == 1856 and heap.high_water == 1984
        assert heap.alloc(0) == 1984
    heap.free(b)
    heap.check()


def test_limit_bounds_blocks_and_largest_free() -> None:
    up = Heap(0, 1024, align=64, direction="up")
    assert up.largest_free(limit=300) == 256 and up.largest_free() == 1024
    assert up.alloc(256, limit=300) == 0
    with pytest.raises(MemoryError, match="the largest free block is 0 bytes"):
        up.alloc(1, limit=300)
    down = Heap(0, 1024, align=64, direction="down")
    assert down.largest_free(limit=700) == 320  # the limit rounds up to 704
    assert down.alloc(320, limit=700) == 704
    with pytest.raises(MemoryError, match="largest free block is 0 bytes"):
        down.alloc(1, limit=700)
    assert down.alloc(64, limit=-5) == 640


def test_block_containing_and_zero_size() -> None:
    heap = Heap(100, 1000, align=64)  # managed range rounds inward to [128, 960)
    assert (heap.lo, heap.hi) == (128, 960)
    z1, z2 = heap.alloc(0), heap.alloc(0)
    big = heap.alloc(130)
    assert (z1, z2, big) == (128, 192, 256) and heap.size_of(z1) == 64
    assert heap.block_containing(191) == (128, 64)
    assert heap.block_containing(192) == (192, 64)
    assert heap.block_containing(300) == (256, 192)
    assert heap.block_containing(448) is None and heap.block_containing(0) is None
    assert heap.used() == 320 and heap.live_blocks() == 3


def test_two_threads_churn_safely() -> None:
    heap = Heap(0, 1 << 20, align=64)

    def churn(seed: int) -> None:
        rng, mine = random.Random(seed), []
        for _ in range(3000):
            if mine and rng.random() < 0.5:
                heap.free(mine.pop())
            else:
                mine.append(heap.alloc(rng.randrange(0, 2000)))
        for off in mine:
            heap.free(off)

    threads = [threading.Thread(target=churn, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    heap.check()
    assert heap.free_extents() == [(0, 1 << 20)]


def test_constructor_rejects_bad_arguments() -> None:
    for kwargs in ({"align": 0}, {"direction": "sideways"}):
        with pytest.raises(ValueError, match=re.escape(next(iter(kwargs)))):
            Heap(0, 1024, **kwargs)  # type: ignore[arg-type]
    empty = Heap(64, 64)
    assert empty.free_extents() == [] and empty.largest_free() == 0
    with pytest.raises(MemoryError):
        empty.alloc(0)


# -- the symmetric heap's boundary protocol (upc_rt/_alloc.py) --------------------------------
# Thread 0's symmetric heap grows by asking every thread to cede space ("cede") and gives it
# back ("give") after a free of its top. The calls run here on fake runtimes, their messages
# delivered in random order between concurrent operations, as on a real job.
SEG, NT = 1 << 20, 3


def _runtime(t: int):
    from types import SimpleNamespace

    return SimpleNamespace(
        MYTHREAD=t, THREADS=NT, lock=threading.Lock(), floor=0, floor_epoch=0,
        local_heap=Heap(0, SEG, direction="down", name=f"local heap of thread {t}"),
        sym_heap=Heap(0, SEG, direction="up") if t == 0 else None, sym_limit=0, sym_epoch=0)


def _sym_alloc(nbytes: int):
    """upc_rt._alloc.sym_alloc as a generator of calls: yields ``(dest, name, *args)`` or a
    list of them (started together) and gets their results back."""
    off, end, claim, epoch = yield (0, "galloc", nbytes, "upc_all_alloc")
    if end:
        oks = yield [(t, "cede", end, claim, epoch) for t in range(NT)]
        if any(ok is not True for ok in oks):
            yield from _give_back((yield (0, "sfree", off)))
            return None
        yield (0, "grow", end)
    return off


def _sym_free(off: int):
    yield from _give_back((yield (0, "free", off, True)))


def _give_back(freed):
    _, claim, epoch = freed
    if epoch:
        yield [(t, "give", claim, epoch) for t in range(NT)]


def _boundary_run(seed: int, steps: int = 400) -> None:
    from upc_rt._alloc import _round
    from upc_rt._rt import CALLS

    rng = random.Random(seed)
    rts = [_runtime(t) for t in range(NT)]
    ops: list[list] = []  # [generator, outstanding calls, their results, is a list]
    done: list[int] = []  # symmetric blocks whose allocation returned
    local: list[tuple[int, int]] = []

    def start(gen) -> None:
        op = [gen, [], [], False]
        ops.append(op)
        advance(op, None)

    def advance(op, value, error: BaseException | None = None) -> None:
        try:
            req = op[0].send(value) if error is None else op[0].throw(error)
        except StopIteration as stop:
            ops.remove(op)
            if stop.value is not None:
                done.append(stop.value)
            return
        except MemoryError:  # the heap is full: the operation failed (nothing to undo)
            ops.remove(op)
            return
        op[3] = isinstance(req, list)
        op[1] = [(i, r) for i, r in enumerate(req if op[3] else [req])]
        op[2] = [None] * len(op[1])

    def deliver(op, rng: random.Random) -> None:
        """Run one outstanding call of ``op`` at its destination; when it was the last one,
        hand the results (or the call's MemoryError) back to the operation."""
        i, (dest, name, *args) = op[1].pop(rng.randrange(len(op[1])))
        try:
            op[2][i] = CALLS[name](rts[dest], 0, 0, *args)
        except MemoryError as e:
            op[1].clear()
            advance(op, None, e)
            return
        if not op[1]:
            advance(op, op[2] if op[3] else op[2][0])

    def check() -> None:
        lim = rts[0].sym_limit
        for rt in rts:
            assert lim <= rt.floor <= rt.local_heap.low_water, (seed, lim, rt.floor)
            for off in done:  # usable symmetric blocks lie below every floor
                assert off + rts[0].sym_heap.size_of(off) <= rt.floor, (seed, off, rt.floor)

    for _ in range(steps):
        r = rng.random()
        if r < 0.2:
            start(_sym_alloc(rng.choice([1, 5000, 70000, 200000, 400000])))
        elif r < 0.3 and done:
            start(_sym_free(done.pop(rng.randrange(len(done)))))
        elif r < 0.4:
            t = rng.randrange(NT)
            try:
                local.append((t, rts[t].local_heap.alloc(rng.choice([64, 100000, 300000]),
                                                         limit=rts[t].floor)))
            except MemoryError:
                pass
        elif r < 0.5 and local:
            t, off = local.pop(rng.randrange(len(local)))
            rts[t].local_heap.free(off)
        elif ops:  # deliver one outstanding call of one operation (any order)
            deliver(rng.choice(ops), rng)
        check()
    while ops:  # let everything in flight finish, in random order
        deliver(rng.choice(ops), rng)
        check()
    # at rest, every thread leaves the symmetric heap exactly what it uses: nothing is lost
    top = _round(rts[0].sym_heap.high_water)
    assert rts[0].sym_limit == top, (seed, rts[0].sym_limit, top)
    assert [rt.floor for rt in rts] == [top] * NT, (seed, [rt.floor for rt in rts], top)
    for off in list(done):
        done.remove(off)
        start(_sym_free(off))
        while ops:
            deliver(ops[0], rng)
    assert rts[0].sym_limit == 0 and [rt.floor for rt in rts] == [0] * NT


@pytest.mark.parametrize("seed", range(40))
def test_boundary_protocol_keeps_heaps_apart_and_gives_everything_back(seed: int) -> None:
    _boundary_run(seed)


def test_give_back_overtaken_by_a_growth_does_not_lower_its_floor() -> None:
    """A thread gets a growth's cede before an older give-back (they come from different
    threads): the give-back is stale and must not lower the floor the growth set."""
    from upc_rt._rt import CALLS

    rt = _runtime(1)
    rt.floor, rt.floor_epoch = 5 << 16, 3
    assert CALLS["cede"](rt, 2, 0, 2 << 16, 2 << 16, 5) is True  # growth #5: claim 128 KiB
    assert (rt.floor, rt.floor_epoch) == (2 << 16, 5)  # the claim then, not the old floor
    CALLS["give"](rt, 0, 0, 0, 4)  # give-back #4, sent before growth #5, arrives after it
    assert (rt.floor, rt.floor_epoch) == (2 << 16, 5)
    CALLS["give"](rt, 0, 0, 1 << 16, 6)
    assert (rt.floor, rt.floor_epoch) == (1 << 16, 6)
    rt.local_heap.alloc(SEG - (3 << 16), limit=rt.floor)  # leaves [0, 192 KiB) free
    assert CALLS["cede"](rt, 2, 0, 4 << 16, 4 << 16, 7) == 3 << 16  # refused: names its low
    assert (rt.floor, rt.floor_epoch) == (1 << 16, 7)


# -- over shmem: a heap's state travels as bytes (upc_rt._net) -------------------------------
@pytest.mark.parametrize("direction", ["up", "down"])
def test_heap_state_survives_the_trip_through_bytes(direction: str) -> None:
    # runtime "shmem" keeps each thread's allocator state in its region and runs the calls on
    # a copy read back from bytes: the copy must allocate, free and refuse as the original
    from upc_rt._net import _dump_heap, _load_heap
    from upc_rt._rt import _pack, _unpack

    rng = random.Random(7)
    h = Heap(LO, HI, direction=direction, name="shared heap")
    live: list[int] = []
    for _ in range(300):
        if live and rng.random() < 0.45:
            h.free(live.pop(rng.randrange(len(live))))
        else:
            try:
                live.append(h.alloc(rng.randrange(1, 700)))
            except MemoryError:
                pass
        h2 = _load_heap(_unpack(_pack(_dump_heap(h))))
        h2.check()
        assert (h2.free_extents(), h2.used(), h2.live_blocks(), h2.high_water,
                h2.low_water) == (h.free_extents(), h.used(), h.live_blocks(), h.high_water,
                                  h.low_water)
        h = h2
    gone = h.alloc(64)
    h.free(gone)
    h3 = _load_heap(_unpack(_pack(_dump_heap(h))))
    with pytest.raises(ValueError, match="already freed"):
        h3.free(gone)
