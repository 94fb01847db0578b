"""amnet.nbcomm.Scheduler in real jobs. The differential test first: random programs of
memput / memget / barriers (hypothesis), some phases in aggregation regions, their ops
dropped at random from one iteration to the next (mispredicted prefetches), run with plain
blocking put/get and with the scheduler in the same job, within a node and across nodes:
every value read and the memory left must be the same. Then what the scheduler did
(stats) on a known program, and bad input."""

from __future__ import annotations

import functools
import random

import nbjobs
import numpy as np
import pytest
from conftest import assert_each_starts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amnet
from amnet.nbcomm import NBStats, Scheduler

OP = st.tuples(st.sampled_from(["put", "get"]), st.integers(0, 3), st.integers(0, 1023),
               st.integers(1, 64), st.integers(0, 255))
PHASE = st.tuples(st.booleans(), st.booleans(), st.lists(OP, min_size=1, max_size=10))
PROGRAM = st.lists(PHASE, min_size=1, max_size=4)
KEEP = st.lists(st.lists(st.booleans(), min_size=8, max_size=8), min_size=1, max_size=3)
TOPOS = {"node3": dict(n=3), "2nodes4": dict(n=4, nodes=2),
         "threads": dict(n=4, threads_per_proc=2)}


def job(fn, topo):
    return amnet.run(fn, **topo, timeout=120)


@pytest.mark.parametrize("topo", list(TOPOS))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=PROGRAM, keep=KEEP)
def test_random_programs_read_and_leave_what_blocking_calls_do(topo, program, keep):
    keep = [k if any(k) else [True] * 8 for k in keep]
    got = job(functools.partial(nbjobs.differential, program=program, iterations=3,
                                keep=keep), TOPOS[topo])
    for g in got:
        assert g["reads_same"] and g["mem_same"], (g, program, keep)


def test_a_program_that_uses_every_mechanism_still_reads_what_blocking_calls_do():
    rng = random.Random(5)
    program = [(p % 2 == 0, p == 2, [(rng.choice(["put", "get"]), rng.randint(0, 3),
                                      rng.randint(0, 1023), rng.randint(1, 64),
                                      rng.randint(0, 255)) for _ in range(10)])
               for p in range(4)]
    keep = [[True] * 8, [True, False] * 4, [False, True, True, True] * 2]
    got = job(functools.partial(nbjobs.differential, program=program, iterations=4,
                                keep=keep), TOPOS["2nodes4"])
    assert all(g["reads_same"] and g["mem_same"] and g["n_reads"] > 50 for g in got)
    total = {k: sum(g["stats"][k] for g in got) for k in got[0]["stats"]}
    for k in ("puts_deferred", "scans", "conflicts", "prefetch_hits",
              "prefetch_misses", "prefetches_wasted", "prefetches_invalidated", "chunks",
              "aggregated_calls", "region_fallbacks"):
        assert total[k] > 0, (k, total)  # each mechanism took part


def _known(ep) -> dict:
    """A halo-like loop: put to the right, get from the left (what its left put there),
    barrier; 4 iterations."""
    s = Scheduler(ep, max_puts_per_dest=8)
    right, left = (ep.rank + 1) % ep.size, (ep.rank - 1) % ep.size
    wrote = (ep.rank - 2) % ep.size  # who put what the left rank holds
    out = []
    for it in range(4):
        for k in range(6):
            s.memput(right, 1024 + 64 * k, bytes([it + k + ep.rank]) * 64)
        s.barrier()
        got = bytearray(64 * 6)
        for k in range(6):
            s.memget(left, 1024 + 64 * k, 64, memoryview(got)[64 * k:64 * (k + 1)])
        out.append(bytes(got) == b"".join(bytes([it + k + wrote]) * 64 for k in range(6)))
        s.barrier()
    with s.aggregate():  # strided puts: one VIS call
        for k in range(6):
            s.memput(right, 8192 + 128 * k, bytes([k]) * 64)
    s.barrier()
    got = bytearray(64)
    with s.aggregate():
        s.memget(left, 8192 + 128 * 5, 64, got)
    out.append(bytes(got) == bytes([5]) * 64)
    return {"ok": out, "stats": s.stats}


def test_a_known_loop_defers_puts_prefetches_gets_and_aggregates():
    for r in job(_known, dict(n=3, nodes=3)):
        st_: NBStats = r["stats"]
        assert all(r["ok"]), r
        assert st_.puts_deferred == 24 + 6 and st_.scans == 0 and st_.conflicts == 0
        assert st_.fast_checks >= 24 + 24  # every put and every get checked in O(1)
        # the get phase ran 4 times: recorded once, then 6 prefetches hit each time
        assert st_.prefetch_hits == 18 and st_.prefetches_issued == 18
        assert st_.prefetches_wasted == 0
        assert st_.aggregated_calls == 2 and st_.aggregated_ops == 7


def _region_gets(ep) -> dict:
    """A gather burst in an aggregation region, 3 times: one VIS call each time, never
    prefetched piece by piece (the paper's §3.3: region gets go to the queue, not to the
    prefetch list), and right every time."""
    s = Scheduler(ep)
    left = (ep.rank - 1) % ep.size
    ep.segment[:4096] = np.arange(4096, dtype=np.uint8) ^ ep.rank
    s.barrier()
    ok = []
    for _ in range(3):
        outs = [bytearray(32) for _ in range(8)]
        with s.aggregate():
            for k in range(8):
                s.memget(left, 100 + 300 * k, 32, outs[k])
        want = np.arange(4096, dtype=np.uint8) ^ left
        ok.append(all(bytes(o) == want[100 + 300 * k:132 + 300 * k].tobytes()
                      for k, o in enumerate(outs)))
        s.barrier()
    return {"ok": ok, "stats": s.stats}


def test_region_gets_are_aggregated_not_prefetched():
    for r in job(_region_gets, dict(n=2, nodes=2)):
        assert r["ok"] == [True] * 3, r
        st_: NBStats = r["stats"]
        assert st_.aggregated_calls == 3 and st_.aggregated_ops == 24
        assert st_.prefetches_issued == 0 and st_.gets == 0 and st_.prefetch_misses == 0


def _split(ep) -> dict:
    """notify/wait as a split-phase barrier (a phase keyed by wait's line), and touch()."""
    s = Scheduler(ep)
    right, left = (ep.rank + 1) % ep.size, (ep.rank - 1) % ep.size
    ok = []
    for it in range(3):
        s.memput(right, 0, bytes([it + 1]) * 32)
        s.notify()
        s.wait()  # the next phase: one get, prefetched from the second time on
        got = bytearray(32)
        s.memget(left, 0, 32, got)  # what left's left put there
        ok.append(bytes(got) == bytes([it + 1]) * 32)
        s.barrier()
    s.memput(right, 64, b"a" * 16)
    s.touch(right, 72, 8, write=True)  # overlaps the put: it completes first
    ep.put(right, 72, b"b" * 8)
    s.barrier()
    ok.append(bytes(ep.segment[64:80]) == b"a" * 8 + b"b" * 8)
    return {"ok": ok, "stats": s.stats}


def test_notify_wait_and_touch():
    for r in job(_split, dict(n=2, nodes=2)):
        assert all(r["ok"]), r
        # the put touched completed first: by the overlap check, or found done before it
        assert r["stats"].prefetch_hits == 2 and r["stats"].conflicts <= 1


def _bad(ep) -> list[str]:
    s = Scheduler(ep)
    seg = ep.segment.nbytes
    out = []
    for call in (lambda: s.memput(ep.size, 0, b"x"), lambda: s.memput(0, -1, b"x"),
                 lambda: s.memput(0, seg - 1, b"xy"), lambda: s.memput(0, 0, 5),
                 lambda: s.memget(0, 0, 8, bytes(8)), lambda: s.memget(0, 0, 8, bytearray(4)),
                 lambda: s.memget(True, 0, 8, bytearray(8)),
                 lambda: s.memget(0, 0, -1, bytearray(8)),
                 lambda: Scheduler(ep, max_puts_per_dest=0),
                 lambda: Scheduler(ep, prefetch_chunk=0)):
        try:
            call()
            out.append("no error")
        except (amnet.AMNetError, TypeError, ValueError, IndexError) as e:
            out.append(f"{type(e).__name__}: {e}")
    s.barrier()
    return [*out, str(s.stats.puts_deferred)]


def test_bad_input_raises_before_anything_is_sent():
    got = job(_bad, dict(n=2))
    want = ["RankError: memput: rank 2 is not an int in range(2)",
            "SegmentBoundsError: memput: offset -1 is not an int >= 0",
            "SegmentBoundsError: memput: bytes",
            "TypeError: memput: data must be bytes-like, got int",
            "ValueError: memget: out must be writable and hold 8 bytes (8, read-only)",
            "ValueError: memget: out must be writable and hold 8 bytes (4)",
            "RankError: memget: rank True is not an int in range(2)",
            "ValueError: memget: nbytes must be an int >= 0, got -1",
            "ValueError: the cap of outstanding puts per destination",
            "ValueError: prefetch chunk must be an int of at least 1",
            "0"]
    assert_each_starts(got, want)
