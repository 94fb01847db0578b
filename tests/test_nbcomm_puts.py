"""amnet/nbcomm/_puts.py: the outstanding puts of the automatic nonblocking scheduler (the
autoNB paper's §3.1): per-destination FIFO lists, the bounding box, the precise scan, the
test of the oldest, the cap and completion at synchronization events. Handles are fakes here
(the module needs only ``done`` and ``wait()``); a property test drives random programs
against a model of what must be complete when."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amnet.nbcomm._puts import Puts


class FakeHandle:
    """A put in flight: complete once ``wait()`` ran or the network finished it (``finish``);
    ``done`` says which, as amnet.Handle.done does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.done = False
        self.waited = 0

    def finish(self) -> None:
        self.done = True

    def wait(self) -> None:
        self.waited += 1
        self.done = True


def _put(p: Puts, dest: int, lo: int, hi: int, name: str = "") -> FakeHandle:
    p.check(dest, lo, hi)  # what the scheduler does before every put
    h = FakeHandle(name or f"{dest}:{lo}-{hi}")
    p.add(dest, lo, hi, h)
    return h


def test_an_access_outside_the_box_costs_no_scan_and_completes_nothing():
    p = Puts(cap=100)
    hs = [_put(p, 1, 64 * i, 64 * i + 64) for i in range(10)]  # monotone: one box, 0..640
    assert p.stats.deferred == 10 and p.stats.scans == 0 and p.stats.fast_checks == 10
    assert p.check(1, 640, 700) == 0 and p.check(2, 0, 64) == 0  # past the box; another rank
    assert p.stats.scans == 0 and not any(h.waited for h in hs)
    assert len(p) == 10


def test_an_overlapping_access_completes_exactly_the_overlapping_puts():
    p = Puts(cap=100)
    hs = [_put(p, 1, 100 * i, 100 * i + 50) for i in range(5)]  # gaps between the puts
    assert p.check(1, 160, 190) == 0  # inside the box, in a gap: a scan finds nothing
    assert p.stats.scans == 1 and not any(h.waited for h in hs)
    assert p.check(1, 210, 310) == 2  # overlaps puts 2 and 3
    assert [h.waited for h in hs] == [0, 0, 1, 1, 0]
    assert p.outstanding(1) == [(0, 50), (100, 150), (400, 450)]
    assert p.stats.conflicts == 2
    assert p.check(1, 150, 400) == 0  # touching is not overlapping
    assert p.check(1, 0, 1000) == 3 and len(p) == 0 and 1 not in p.active


def test_the_oldest_put_is_tested_and_dropped_when_done():
    p = Puts(cap=100)
    hs = [_put(p, 3, 8 * i, 8 * i + 8) for i in range(4)]
    hs[0].finish()
    hs[1].finish()
    hs[3].finish()  # done, but behind an unfinished one: stays until then (FIFO)
    p.check(3, 1000, 1008)
    assert p.outstanding(3) == [(16, 24), (24, 32)] and p.stats.retired == 2
    hs[2].finish()
    p.check(3, 1000, 1008)
    assert p.outstanding(3) == [] and 3 not in p.active and p.stats.retired == 4
    assert not any(h.waited for h in hs)


def test_the_cap_completes_the_whole_list_before_the_next_put():
    p = Puts(cap=3)
    hs = [_put(p, 0, 10 * i, 10 * i + 5) for i in range(3)]
    h4 = _put(p, 0, 100, 105)
    assert all(h.waited == 1 for h in hs) and p.stats.cap_syncs == 1
    assert p.outstanding(0) == [(100, 105)] and not h4.waited


def test_a_sync_event_completes_every_list_in_fifo_order():
    p = Puts(cap=10)
    order: list[str] = []
    for dest in (0, 1, 2):
        for i in range(3):
            h = _put(p, dest, 10 * i, 10 * i + 10, f"{dest}.{i}")
            h.wait = lambda h=h: (order.append(h.name), FakeHandle.wait(h))  # type: ignore
    p.complete_all()
    assert len(p) == 0 and not p.active
    for dest in (0, 1, 2):
        mine = [n for n in order if n.startswith(f"{dest}.")]
        assert mine == [f"{dest}.0", f"{dest}.1", f"{dest}.2"]


@pytest.mark.parametrize("cap", [0, -1, 1.5, True, "8"])
def test_a_bad_cap_is_refused(cap):
    with pytest.raises(ValueError, match="cap of outstanding puts per destination"):
        Puts(cap=cap)


# -- random programs against a model ----------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 60), st.integers(1, 12)),
    st.tuples(st.just("access"), st.integers(0, 2), st.integers(0, 60), st.integers(0, 12)),
    st.tuples(st.just("finish"), st.integers(0, 40)),
    st.tuples(st.just("sync")),
)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(1, 5), program=st.lists(OPS, max_size=60))
def test_random_programs_keep_the_invariants(cap, program):
    """After any check, no outstanding put overlaps the access; outstanding puts to one rank
    never overlap each other; the box holds them all; a put leaves the list only completed
    (waited once, or found done); nothing is waited twice; a sync leaves
    nothing."""
    p = Puts(cap=cap)
    made: list[tuple[int, int, int, FakeHandle]] = []
    for op in program:
        if op[0] == "put":
            _, d, lo, n = op
            made.append((d, lo, lo + n, _put(p, d, lo, lo + n)))
        elif op[0] == "access":
            _, d, lo, n = op
            p.check(d, lo, lo + n)
            assert not [r for r in p.outstanding(d) if r[0] < lo + n and lo < r[1] and n]
        elif op[0] == "finish" and made:
            made[op[1] % len(made)][3].finish()
        elif op[0] == "sync":
            p.complete_all()
            assert len(p) == 0
        for d in range(3):
            out = sorted(p.outstanding(d))
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(out)), out
            pl = p.lists.get(d)
            if out:
                assert d in p.active and pl.lo <= out[0][0] and pl.hi >= max(r[1] for r in out)
                assert len(out) <= cap
    listed = {id(it[2]) for pl in p.lists.values() for it in pl.items}
    for _d, _lo, _hi, h in made:
        assert h.waited <= 1
        assert id(h) in listed or h.done  # left the list only completed


def test_check_time_samples_the_box_checks_and_times_every_scan(monkeypatch):
    from amnet.nbcomm import _puts

    clock = itertools.count()  # every clock read advances one "second"
    monkeypatch.setattr(_puts.time, "perf_counter", lambda: float(next(clock)))
    assert _puts.clock_overhead() == 1.0  # two reads with nothing between: one second
    monkeypatch.setattr(_puts, "clock_overhead", lambda: 0.25)
    p = Puts(cap=1000)
    _put(p, 1, 0, 64)  # a check of an empty list: not timed at all
    assert p.stats.check_seconds == 0
    for i in range(1, _puts.SAMPLE):  # box checks of a non-empty list: one in SAMPLE timed
        _put(p, 1, 64 * i, 64 * i + 64)
    assert p.stats.check_seconds == 0 and p.stats.fast_checks == _puts.SAMPLE
    _put(p, 1, 64 * _puts.SAMPLE, 64 * _puts.SAMPLE + 64)  # the SAMPLE-th: two reads apart
    assert p.stats.check_seconds == _puts.SAMPLE * (1.0 - 0.25)  # the clock's cost taken off
    before = p.stats.check_seconds
    assert p.check(1, 0, 8) == 1  # a scan (not a sampled check): timed alone, one second
    assert p.stats.scans == 1 and p.stats.check_seconds == before + 0.75
