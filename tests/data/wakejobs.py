"""Jobs for tests/test_wakeups.py: waits that must end when what they wait for happens (a
message, work deferred by a handler, another rank-thread's in-line AM), never at the end of a
blocking slice. Each returns its process's counters of blocking slices that expired and of
missed wake-ups (``ep.statistics()``), with what it checked."""

from __future__ import annotations

import numpy as np

import amnet
import upc_rt as upc


def _slices(ep) -> dict:
    st = ep.statistics()
    return {"rank": ep.rank, "mode": ep.wait_mode, "expired": st.slices_expired,
            "missed": st.wakeups_missed}


def lock_handoffs(ep, rounds: int) -> dict:
    """Every thread takes one lock ``rounds`` times, hosted by thread 0 (which competes for
    it too), and increments an element of the last thread inside: each unlock at the host
    grants the lock to the next waiter with a send its handler deferred."""
    upc.init()
    X = upc.shared_array(upc.THREADS, "i8", 1)
    L = upc.all_lock_alloc()
    assert L.host == 0, L
    upc.barrier()
    before = _slices(ep)
    last = upc.THREADS - 1
    for _ in range(rounds):
        with L:
            X[last] = X[last] + 1
    out = _slices(ep)  # before the barrier: its wait for the slowest rank is not counted
    upc.barrier()
    out["expired"] -= before["expired"]
    out["missed"] -= before["missed"]
    out["total"] = int(X[last])
    upc.barrier()
    return out


def collectives(ep, rounds: int) -> dict:
    """``rounds`` of broadcast, reduce-to-all, exchange, gather-to-all and barrier on the
    world team, each checked."""
    t = ep.coll.world
    n, me = ep.size, ep.rank
    src = np.array([me + 1], np.int64)
    one = np.zeros(1, np.int64)
    sx = np.arange(n, dtype=np.int64) + 100 * me
    dx = np.zeros(n, np.int64)
    ga = np.zeros(n, np.int64)
    ep.barrier()
    before = _slices(ep)
    for r in range(rounds):
        t.broadcast(one, np.array([r], np.int64), root=r % n)
        assert one[0] == r, (me, r, one)
        t.reduce_all(one, src, "add")
        assert one[0] == n * (n + 1) // 2, (me, one)
        t.exchange(dx, sx)
        assert dx.tolist() == [100 * p + me for p in range(n)], (me, dx)
        t.gather_all(ga, src)
        assert ga.tolist() == list(range(1, n + 1)), (me, ga)
        t.barrier()
    out = _slices(ep)
    ep.barrier()
    out["expired"] -= before["expired"]
    out["missed"] -= before["missed"]
    return out


def inline_wakes(ep, rounds: int) -> dict:
    """Rank-threads of one process ping-pong with in-line AMs while the others of the
    process block: rank 2k waits for rank 2k+1's request (run in-line by 2k+1's thread),
    then answers; nothing crosses a process, so only a nudge can end a sleeping wait."""
    got = []

    def ping(token, k):
        got.append(k)

    ep.register_handlers([ping])
    me = ep.rank
    peer = me ^ 1
    ep.barrier()
    before = _slices(ep)
    for r in range(rounds):
        if me % 2 == 0:
            assert ep.wait_until(lambda r=r: len(got) > r, timeout=60), (me, r)
            ep.request_short(peer, ping, r)
        else:
            ep.request_short(peer, ping, r)
            assert ep.wait_until(lambda r=r: len(got) > r, timeout=60), (me, r)
    assert got == list(range(rounds)), (me, got)
    out = _slices(ep)
    out["expired"] -= before["expired"]
    out["missed"] -= before["missed"]
    ep.barrier()
    return out


def _writes() -> int:
    """The process's write system calls so far (every thread's)."""
    with open("/proc/self/io") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("syscw:"))


def inline_nudges(ep, ams: int) -> dict:
    """Rank 0 sends ``ams`` in-line AMs to rank 1 (a rank-thread of its process) that sleeps
    in a wait only the last one completes: every AM may complete the wait, so each nudges
    the sleeper, but one write to its eventfd wakes it; returns the process's write system
    calls during the sends."""
    seen = []

    def note(token, k):
        seen.append(k)

    ep.register_handlers([note])
    ep.barrier()
    out = {"rank": ep.rank, "mode": ep.wait_mode}
    if ep.rank == 1:
        assert ep.wait_until(lambda: len(seen) == ams, timeout=60)
    else:
        import time

        time.sleep(0.05)  # rank 1 is asleep by now (block mode: it sleeps at once)
        w0 = _writes()
        for k in range(ams):
            ep.request_short(1, note, k)
        out["writes"] = _writes() - w0
    ep.barrier()
    return out


__all__ = ["amnet", "collectives", "inline_nudges", "inline_wakes", "lock_handoffs"]
