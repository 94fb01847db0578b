"""A blocked rank is woken by whatever completes its wait -- a message for it, a send that a
handler deferred, another rank-thread's in-line AM -- never by the end of a blocking slice
(``BLOCK_SLICE_S``, 50 ms). Measured by counting, not by wall time: ``ep.statistics()``
counts the slices that expired and, of those, the ones whose wait was satisfied all along
(``wakeups_missed``). The jobs run in block mode (``wait_mode="block"``), the default where
ranks outnumber cores, and are in tests/data/wakejobs.py."""

from __future__ import annotations

import functools

import pytest
import wakejobs

import amnet

ROUNDS = 40

LOCK_TOPOLOGIES = [
    pytest.param(dict(n=4, nodes=2), id="2nodes-T1"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="2nodes-T2"),
    pytest.param(dict(n=4, threads_per_proc=2), id="node-T2"),
    pytest.param(dict(n=4, nodes=2, progress_thread=True), id="2nodes-T1-progress-thread"),
]


def _check(res: list[dict], rounds: int) -> None:
    assert all(r["mode"] == "block" for r in res), res
    # a whole slice may pass on a crowded machine (a peer off its core for 50 ms, counted by
    # every thread of a process that waits); a wait that was already satisfied when its
    # slice ended, with nobody having tried to wake it, may not
    assert sum(r["missed"] for r in res) == 0, res
    assert max(r["expired"] for r in res) <= rounds // 4, res


@pytest.mark.parametrize("topo", LOCK_TOPOLOGIES)
def test_a_lock_hand_off_waits_for_no_slice(topo):
    """The host of a lock competes for it: its unlock grants the lock to the next waiter
    with a send its handler deferred, which once waited for the host's next 50 ms slice
    (a lock-heavy program ran 100x slower across nodes)."""
    res = amnet.run(functools.partial(wakejobs.lock_handoffs, rounds=ROUNDS), **topo,
                    wait_mode="block", segment_size="1M", timeout=120)
    assert all(r["total"] == ROUNDS * topo["n"] for r in res), res
    _check(res, ROUNDS)


@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=4, threads_per_proc=2), id="node-T2"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="2nodes-T2"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2, conduit="tcp"), id="2nodes-T2-tcp"),
    pytest.param(dict(n=4, threads_per_proc=2, progress_thread=True),
                 id="node-T2-progress-thread"),
])
def test_collectives_with_rank_threads_wait_for_no_slice(topo):
    """Collectives whose messages between rank-threads of one process run in-line: the
    rank-thread asleep in a receive is woken by its neighbour's AM (they once took 12-50 ms
    a call with the CPU idle)."""
    res = amnet.run(functools.partial(wakejobs.collectives, rounds=ROUNDS), **topo,
                    wait_mode="block", segment_size="1M", timeout=120)
    _check(res, ROUNDS)


@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=2, threads_per_proc=2), id="T2"),
    pytest.param(dict(n=4, threads_per_proc=2, nodes=2), id="2nodes-T2"),
])
def test_an_inline_am_wakes_a_sleeping_rank_thread(topo):
    res = amnet.run(functools.partial(wakejobs.inline_wakes, rounds=ROUNDS), **topo,
                    wait_mode="block", segment_size="1M", timeout=120)
    _check(res, ROUNDS)


def test_inline_ams_to_a_sleeping_rank_thread_wake_it_once():
    """Each in-line AM to a sleeping rank-thread may complete its wait, so each nudges it;
    but once its eventfd is written it is awake (or waits for the interpreter lock to be),
    and a write per AM until then cost a system call each (an in-line round trip ran at
    twice its time whenever the other rank-thread slept)."""
    res = amnet.run(functools.partial(wakejobs.inline_nudges, ams=2000), n=2,
                    threads_per_proc=2, wait_mode="block", timeout=120)
    assert all(r["mode"] == "block" for r in res), res
    assert res[0]["writes"] < 100, res  # one per sleep of rank 1, not one per AM (2000)
