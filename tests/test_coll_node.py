"""amnet.coll's node area (algorithm ``shm``, and hier's node steps) in real jobs: every
collective it carries, blocks of one round and of several, calls in flight, on processes,
rank-threads, 2 nodes, uneven nodes and with PSHM off (which takes the AM algorithms); the
flags' protocol itself in one process. The checks run inside the ranks
(tests/data/colljobs.py); the mismatch and conformance suites of tests/test_coll.py run on
the same topologies, the node area being the default there."""

from __future__ import annotations

import colljobs
import numpy as np
import pytest
from amnet.coll._shm import Area

import amnet
from amnet.pshm import COLL_HDR, COLL_SLOT


@pytest.mark.parametrize("topo,world,node,split", [
    (dict(n=3), True, True, True),
    (dict(n=4, threads_per_proc=2), True, True, True),
    (dict(n=4, nodes=2), False, True, False),
    (dict(n=5, nodes=3, threads_per_proc=1), False, True, False),
    (dict(n=3, pshm=False), False, False, False),
], ids=["3procs", "2procs-T2", "2nodes", "3nodes-uneven", "no-pshm"])
def test_node_area_collectives_in_every_topology(topo, world, node, split):
    got = amnet.run(colljobs.node_area, **topo, timeout=180)
    for r, g in enumerate(got):
        assert g["world"][0] is world and g["node"][0] is node, (r, g)
        # the split team (odd and even ranks) shares memory when its members sit on one node
        assert g["split"][0] is split, (r, g)
        for name in ("world", "node", "split"):
            shares, bcast, barrier, exchange = g[name]
            if shares:
                assert (bcast, barrier, exchange) == ("shm", "shm", "shm"), (r, name, g)
            else:
                assert "shm" not in (bcast, barrier, exchange), (r, name, g)
    if topo.get("nodes", 1) > 1:  # over nodes: hier, its node steps on the area
        assert got[0]["world"][1:3] == ["hier", "hier"]


def _areas(P: int, spin: bool = True) -> tuple[list, list]:
    buf = np.zeros(P * COLL_SLOT + 64, np.uint8)
    skip = -buf.ctypes.data % 64
    slots = [buf[skip + i * COLL_SLOT:skip + (i + 1) * COLL_SLOT] for i in range(P)]
    return slots, [Area(slots, i, None, COLL_HDR, spin=spin) for i in range(P)]


def test_flags_say_ready_only_for_the_same_call_and_step():
    """Member 0 publishes data of step 5 of the call with digest 7: a reader of that step
    and digest sees it, a reader with another digest sees a member in another call, a
    reader of a later step waits, until member 0 enters it without data (another call);
    DONE and the ring of calls."""
    _, (a0, a1) = _areas(2)
    wait = a1.cond(1, 5, 7, [0])
    assert not wait() and wait.bad == -1
    a0.publish(5, 7, True)
    assert wait() and wait.bad == -1
    other = a1.cond(1, 5, 8, [0])
    assert other() and other.bad == 0  # data of another call
    arrived = a1.cond(0, 5, 7, [0])
    assert arrived()
    later = a1.cond(1, 6, 7, [0])
    assert not later()
    a0.publish(6, 7, False)  # it entered step 6 without the data I wait for
    assert later() and later.bad == 0
    assert a0.words(0)[:3] == (6, 7, 5)
    drained = a0.cond(2, 5, 0, [1])
    assert not drained()
    a1.finish(5)
    assert drained() and a0.words(1)[3] == 5
    a1.finish(4)  # DONE never goes back
    assert a0.words(1)[3] == 5
    a0.enter(3, 11)
    assert a1.agree(3, 11) == -1 and a1.agree(3, 12) == 0 and a1.agree(4, 12) == -1


@pytest.mark.parametrize("spin", [True, False], ids=["spin", "yield-at-once"])
def test_run_does_a_whole_small_call_and_waits_through_the_engine(spin):
    """Area.run, what the fast path calls: member 1 (not ready) waits through the wait
    function it is given and says 0 when that gives up; once member 0 has run its part,
    member 1 completes the call, and a reduce_all folds in member order. Without the spin
    (ranks outnumber cores) the same."""
    _, (a0, a1) = _areas(2, spin)
    assert a0.spins is spin and a1.spins is spin
    waits = []

    def give_up(cond, timeout):
        waits.append(timeout)
        return cond()

    src = np.arange(4, dtype=np.float64)
    dst = np.zeros(4)
    assert a1.run(1, 1, 9, 0, None, dst, None, give_up, 0.5) == 0 and waits == [0.5]
    assert a0.run(1, 1, 9, 0, src, np.zeros(4), None, give_up, 0.5) == 1  # the root
    assert a1.run(1, 1, 9, 0, None, dst, None, give_up, 0.5) == 1
    assert np.array_equal(dst, src)
    s0, s1 = np.array([1.0, np.nan]), np.array([2.0, 3.0])
    d0, d1 = np.zeros(2), np.zeros(2)
    assert a0.run(3, 2, 4, 0, s0, d0, (0, "d"), give_up, 0.5) == 0  # waits for member 1
    assert a1.run(3, 2, 4, 0, s1, d1, (0, "d"), give_up, 0.5) == 1
    assert a0.run(3, 2, 4, 0, s0, d0, (0, "d"), give_up, 0.5) == 1
    assert d0.tobytes() == d1.tobytes() == np.add(s0, s1).tobytes()


def _at(buf: np.ndarray, addr: int, n: int) -> np.ndarray:
    """n bytes of buf starting at the first address >= its start that is addr mod 4096."""
    skip = (addr - buf.ctypes.data) % 4096
    return buf[skip:skip + n]


@pytest.mark.parametrize("ahead", [8, 24, 56, 0, 64, 100])
def test_copies_are_whole_at_every_distance_mod_4k(ahead):
    """The fast path copies a block that lands 1-63 bytes past its source modulo 4 KiB from
    the end (a forward copy stalls there on 4 KiB aliasing): broadcasts and a gather_all of
    blocks of such sizes, copied in and out at such distances, arrive whole."""
    slots, (a0, a1) = _areas(2)
    d0 = slots[0][COLL_HDR:].ctypes.data  # member 0's data area
    rng = np.random.default_rng(ahead)
    pool = np.zeros(8 << 20, np.uint8)
    look = lambda cond, timeout: cond()  # the engine's wait: one look
    for seq, n in enumerate((4096, 4096 + 64 + 13, COLL_SLOT - COLL_HDR - 5)):
        src = _at(pool[:2 << 20], d0 - ahead, n)  # the data area is `ahead` past it
        src[:] = rng.integers(0, 256, n, dtype=np.uint8)
        dst = _at(pool[2 << 20:4 << 20], d0 + ahead, n)  # `ahead` past the data area
        mine = np.zeros(n, np.uint8)
        assert a0.run(1, seq, 5, 0, src, mine, None, look, 0.1) == 1
        assert a1.run(1, seq, 5, 0, None, dst, None, look, 0.1) == 1
        assert np.array_equal(dst, src) and np.array_equal(mine, src), n
    m = 20000  # gather_all: every member's block out of the data areas into one result
    s0, s1 = (_at(pool[(4 + i) << 20:(5 + i) << 20], d0 - ahead, m) for i in range(2))
    s0[:] = rng.integers(0, 256, m, dtype=np.uint8)
    s1[:] = rng.integers(0, 256, m, dtype=np.uint8)
    r0 = _at(pool[6 << 20:7 << 20], d0 + ahead, 2 * m)
    r1 = np.zeros(2 * m, np.uint8)
    assert a0.run(2, 3, 6, 0, s0, r0, None, look, 0.1) == 0  # waits for member 1
    assert a1.run(2, 3, 6, 0, s1, r1, None, look, 0.1) == 1
    assert a0.run(2, 3, 6, 0, s0, r0, None, look, 0.1) == 1
    want = np.concatenate([s0, s1])
    assert np.array_equal(r0, want) and np.array_equal(r1, want)


@pytest.mark.parametrize("topo", [dict(n=4), dict(n=4, threads_per_proc=2)],
                         ids=["4procs", "2procs-T2"])
def test_a_destroyed_team_gives_its_slot_back(topo):
    """20 teams split, used and destroyed in turn, more than a rank has node-area slots:
    each still gets one (the slot of the one destroyed before it, its flags clean)."""
    got = amnet.run(colljobs.destroy_and_split, **topo, timeout=120)
    assert got == [[True] * 20] * 4
