"""amnet/nbcomm/_gets.py: the get prefetcher of the automatic nonblocking scheduler (the autoNB
paper's §3.2): phases recorded, then prefetched in chunks per source with flow control,
exact matches served from the prefetch buffers, misses recorded, prefetches invalidated by
an overlapping put, unused ones retired and dropped from the record, the profitability test.
Remote memory is a dict of numpy arrays here, and a fake get reads it when it is *issued*
(the earliest a real one could), so a stale prefetch would show."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amnet.nbcomm._gets import Gets

ME = 0


class Remote:
    """Ranks 0..3's memory, and the gets started on it."""

    def __init__(self) -> None:
        self.mem = {r: np.arange(256, dtype=np.uint8) + r for r in range(4)}
        self.started: list[tuple[int, int, int]] = []
        self.waits = 0

    def start_get(self, src, off, n, out):
        self.started.append((src, off, n))
        out[:] = self.mem[src][off:off + n]  # a snapshot at issue time
        remote = self

        class H:
            done = False

            def test(self):
                return self.done

            def wait(self):
                remote.waits += 1
                self.done = True

        return H()

    def read(self, src, off, n):
        return self.mem[src][off:off + n].copy()


def _get(g: Gets, r: Remote, src: int, off: int, n: int) -> np.ndarray:
    out = np.zeros(n, np.uint8)
    if not g.memget(src, off, n, out):
        out[:] = r.read(src, off, n)  # a miss: the scheduler gets it itself
    return out


def _phase(g: Gets, r: Remote, key, gets):
    g.enter(key)
    got = [_get(g, r, *x) for x in gets]
    g.leave()
    return got


def test_the_first_run_records_and_later_runs_prefetch_at_entry():
    r = Remote()
    g = Gets(ME, r.start_get, copy_rate=float("inf"))
    gets = [(1, 0, 8), (2, 16, 8), (1, 64, 32)]
    _phase(g, r, "A", gets)
    assert r.started == [] and g.stats.misses == 3 and g.stats.recorded == 3
    g.enter("A")
    assert sorted(r.started) == sorted(gets)  # all issued at entry, before any memget
    got = [_get(g, r, *x) for x in gets]
    g.leave()
    assert g.stats.hits == 3 and g.stats.wasted == 0 and g.stats.bytes_copied == 48
    assert [x.tobytes() for x in got] == [r.read(*x).tobytes() for x in gets]
    _phase(g, r, "B", gets)  # another phase key: nothing recorded for it yet
    assert g.stats.hits == 3 and g.stats.misses == 6


def test_chunks_per_source_are_released_as_earlier_ones_complete():
    r = Remote()
    g = Gets(ME, r.start_get, chunk=2, copy_rate=float("inf"))
    gets = [(1, 8 * i, 8) for i in range(5)] + [(2, 0, 8)]
    _phase(g, r, "A", gets)
    g.enter("A")
    assert r.started == [(1, 0, 8), (1, 8, 8), (2, 0, 8)]  # a chunk of 2 from rank 1
    assert g.stats.chunks == 2
    _get(g, r, 1, 0, 8)  # waits for the first; the second is not known done yet
    assert len(r.started) == 3
    _get(g, r, 1, 8, 8)  # chunk done: the next one goes
    assert r.started[3:] == [(1, 16, 8), (1, 24, 8)]
    _get(g, r, 1, 32, 8)  # its chunk not released yet: completes the one in flight first
    assert r.started[5:] == [(1, 32, 8)]
    g.leave()
    assert g.stats.hits == 3 and g.stats.wasted == 3  # (1, 16), (1, 24) and (2, 0) unused


def test_unused_prefetches_are_waited_for_and_dropped_from_the_record():
    r = Remote()
    g = Gets(ME, r.start_get, copy_rate=float("inf"))
    _phase(g, r, "A", [(1, 0, 8), (2, 0, 8)])
    _phase(g, r, "A", [(1, 0, 8)])  # (2, 0, 8) prefetched, never used
    assert g.stats.wasted == 1 and r.waits == 2
    n = len(r.started)
    _phase(g, r, "A", [(1, 0, 8)])
    assert r.started[n:] == [(1, 0, 8)]  # dropped from the record: not prefetched again


def test_a_put_invalidates_the_prefetches_it_overlaps():
    r = Remote()
    g = Gets(ME, r.start_get, chunk=1, copy_rate=float("inf"))
    gets = [(1, 0, 16), (1, 32, 16), (1, 64, 16)]
    _phase(g, r, "A", gets)
    g.enter("A")  # (1, 0) in flight, the others queued
    r.mem[1][8:40] = 7  # this rank's put of [8, 40) at rank 1 ...
    g.conflict(1, 8, 40)  # ... overlaps the first two prefetches
    got = [_get(g, r, *x) for x in gets]
    g.leave()
    assert [x.tobytes() for x in got] == [r.read(*x).tobytes() for x in gets]
    assert g.stats.invalidated == 2 and g.stats.hits == 1 and g.stats.misses == 5
    assert (1, 32, 16) not in r.started  # the queued one was never issued


def test_gets_from_myself_and_unprofitable_gets_are_not_prefetched():
    r = Remote()
    g = Gets(ME, r.start_get, copy_rate=1.0)  # copying costs a second a byte: never worth it
    _phase(g, r, "A", [(1, 0, 8), (ME, 0, 8)])
    _phase(g, r, "A", [(1, 0, 8), (ME, 0, 8)])
    assert r.started == [] and g.stats.unprofitable == 1  # (ME, ...) skipped before the test


def test_a_get_read_twice_in_a_phase_is_prefetched_twice():
    r = Remote()
    g = Gets(ME, r.start_get, copy_rate=float("inf"))
    _phase(g, r, "A", [(1, 0, 8), (1, 0, 8)])
    _phase(g, r, "A", [(1, 0, 8), (1, 0, 8)])
    assert g.stats.hits == 2 and r.started == [(1, 0, 8), (1, 0, 8)]


@pytest.mark.parametrize("chunk", [0, -2, 2.0, True])
def test_a_bad_chunk_is_refused(chunk):
    with pytest.raises(ValueError, match="prefetch chunk"):
        Gets(ME, Remote().start_get, chunk=chunk)


# -- random programs: the prefetcher never changes what is read ------------------------------
ACCESS = st.tuples(st.sampled_from(["get", "put"]), st.integers(0, 3), st.integers(0, 200),
                   st.integers(1, 40), st.integers(0, 255))


@settings(max_examples=200, deadline=None)
@given(chunk=st.integers(1, 3), program=st.lists(ACCESS, max_size=12),
       runs=st.lists(st.tuples(st.lists(st.booleans(), max_size=12), st.integers(0, 255)),
                     min_size=1, max_size=4))
def test_random_phases_read_what_blocking_gets_read(chunk, program, runs):
    """One phase run several times; each run drops some of its accesses (the pattern
    changes: mispredicted prefetches) and other ranks write their memory between runs (at
    the synchronization event). Every value read equals what a blocking get reads at that
    point of the program."""
    r = Remote()
    g = Gets(ME, r.start_get, chunk=chunk, copy_rate=float("inf"))
    for keep, salt in [([True] * len(program), 0), *runs]:
        for rank in range(4):  # other ranks' writes, before the event opening the phase
            r.mem[rank][(salt * 7 + rank) % 200:][:30] ^= np.uint8(salt)
        g.enter("loop")
        for (kind, rank, off, n, v), on in zip(program, keep + [True] * len(program),
                                               strict=False):
            if not on:
                continue
            if kind == "put":
                g.conflict(rank, off, off + n)
                r.mem[rank][off:off + n] = v
            else:
                want = r.read(rank, off, n)
                assert _get(g, r, rank, off, n).tobytes() == want.tobytes()
        g.leave()
