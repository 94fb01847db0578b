"""The engine's progress: draining the queues and the conduit, waiting, sleeping, and what
an event loop needs to drive it (a part of :class:`amnet.core._engine.Engine`; C's twin:
amnet/core/_hot_progress.c).

The rules (how many messages a drain runs before its caller re-checks its condition, the
conduit throttle, when a spinning thread gives its core away) have one owner, the C hot path
(amnet/core/_hot.h): this module reads DRAIN_BUDGET from it and asks ``hot.conduit_due()``,
``hot.conduit_rearm()`` and ``hot.idle()``; what only Python does is here: messages held back by
``AMNET_NET_LATENCY_US``, the blocking sleep on the doorbell, the conduit and the wake eventfd,
and the wait of a thread while another one drains.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import JobAborted
from . import _hot
from ._current import _tls

if TYPE_CHECKING:
    pass

BLOCK_SLICE_S = 0.05  # a sleeping rank re-checks aborts this often
WAKE_GRACE_S = 0.002  # a wake-up this late after a slice timed out is not a missed one
DRAIN_BUDGET = _hot.DRAIN_BUDGET
yield_core = getattr(os, "sched_yield", lambda: time.sleep(0))
SPIN_THEN_BLOCK_S = 100e-6  # auto on an uncrowded host: spin this long, then block
SPIN_THEN_NAP_S = 10e-3  # the same where the conduit cannot block (mpi): then nap
CONDUIT_POLL_S = 5e-6  # with PSHM on, an idle conduit is looked at this often


class Progress:
    """Engine methods that make progress and wait (self is the :class:`Engine`)."""

    # -- receiving ------------------------------------------------------------------------
    def drain(self, pred: Callable[[], Any] | None = None, wait: float | None = None,
              pure: bool = False) -> int:
        """Run what has arrived (the caller holds ``drain_lock``); return how many ran.

        Stops early once ``pred()`` holds. ``wait`` (seconds) lets the first receive block
        that long. With ``AMNET_NET_LATENCY_US`` set, messages from other nodes wait in
        ``delayed`` until their time has come (all get the same delay, so FIFO per pair
        holds).
        """
        n = 0
        if self.delayed or self.deferred:
            # drain_net runs those due; the caller's wait is up to the next one. Deferred
            # work (sends) must not wait behind a sleep: the caller runs it next.
            wait = None
        net = self.pshm
        if net is not None:
            k = self.hot.drain()
            if k:
                n += k
                wait = None
                if pred is not None and pred():
                    return n
            if wait is not None and wait < 0.001:
                wait = None  # the conduit's poll counts whole ms: look again instead
            if wait is not None:  # sleep on the doorbell and the conduit together
                net.sleep(lambda fds, t: self._block(fds, t, pred, pure), wait)
                wait = None
                n += self.hot.drain()
                # what woke us may have completed the wait without a message (a node
                # collective's flag): then the conduit is left for the next drain, as after
                # messages that did (a look at it costs as much as a small collective)
                if pred is not None and pred():
                    return n
        if wait is None:
            if not self.hot.conduit_due():
                return n  # the throttle: the conduit was looked at less than CONDUIT_POLL_S ago
            if self.net_in_c:  # the common case of drain_net, in C
                return n + self.hot.drain_net(pred)
        return n + self.drain_net(pred, wait, pure)

    def drain_net(self, pred: Callable[[], Any] | None, wait: float | None = None,
                  pure: bool = False) -> int:
        """Run what the conduit brought (and delayed messages now due); return how many ran.
        The C hot path calls this (throttled) after draining the shared-memory queues when
        messages may be held back (``AMNET_NET_LATENCY_US``); else it runs its common case
        itself (``Hot.drain_net``: no wait, nothing held back), and this serves waits."""
        n = 0
        delayed = self.delayed
        if delayed:
            now = time.monotonic()
            while delayed and delayed[0][0] <= now and n < DRAIN_BUDGET:
                _, header, payload = delayed.popleft()
                self.net_dispatch(header, payload)
                n += 1
            if n:
                wait = None
        conduit = self.conduit
        latency = self.latency
        seen = 0
        while seen < DRAIN_BUDGET:
            if wait is None:
                m = conduit.recv()
            elif self.wake_fd is None:  # one thread: nothing but a message ends the wait
                m = conduit.recv_wait(wait)
                if m is None:  # one thread: nothing else could have woken it
                    self._expired(wait, pred, lambda: False)
                wait = None
            else:
                m = conduit.recv() if self._block((), wait, pred, pure) else None
                wait = None
            if m is None:
                break
            seen += 1
            if latency and self._remote(m[0]):
                delayed.append((time.monotonic() + latency, m[0], m[1]))
                continue
            self.net_dispatch(m[0], m[1])
            n += 1
            if pred is not None and pred():
                break
        if seen:
            self.hot.conduit_rearm()  # it brought something: look again next time
        return n

    def _block(self, fds: Any, t: float, pred: Callable[[], Any] | None,
               pure: bool = False) -> bool:
        """The drainer's one blocking point: sleep up to ``t`` seconds until the conduit
        or one of ``fds`` (the shared-memory doorbell) is readable, or another thread of
        this process nudges (``wake_fd``: an in-line AM ran a handler, work was deferred).
        Returns whether anything may be ready.

        The sleeping flag is set (seq_cst), with this thread's rank and, when ``pure`` (an
        engine wait on plain attributes), ``pred`` published, before the last look at
        ``pred`` and the deferred work, so whatever completes the wait after that look sees
        it and wakes us: deferred work always; an in-line AM when ``pred()`` now holds, or,
        for a caller's predicate (never run on another thread), when the AM was for this
        thread's rank. A sibling's AMs that do not concern this wait leave it asleep.
        """
        wake = self.wake_fd
        woken = False
        if wake is None:
            # the sleeping flag is up: a store that completes the wait without a message
            # (a node collective's flag) after this look rings the doorbell
            if pred is not None and pred():
                return True
            ready = self.conduit.wait_readable_fds(fds, t)
        else:
            hot = self.hot
            hot.sleep_begin(pred if pure else None, self._my_slot())
            try:
                if self.deferred or (pred is not None and pred()):
                    return True
                ready = self.conduit.wait_readable_fds((*fds, wake), t)
            finally:
                hot.sleep_end()
                try:
                    os.eventfd_read(wake)
                    woken = True  # a nudge came, if only as the wait timed out
                except (BlockingIOError, OSError):
                    pass
        if not ready and not woken:
            self._expired(t, pred, lambda: self._late_nudge(wake))
        return ready

    @staticmethod
    def _late_nudge(wake: int | None) -> bool:
        """Whether a nudge comes within ``WAKE_GRACE_S`` (one on its way as a sleep timed
        out is no missed wake-up); consumes it."""
        if wake is None or not select.select([wake], [], [], WAKE_GRACE_S)[0]:
            return False
        try:
            os.eventfd_read(wake)
        except (BlockingIOError, OSError):
            pass
        return True

    def _my_slot(self) -> int:
        """The calling thread's rank-thread index in this process, -1 for another thread
        (the progress thread)."""
        ctx = getattr(_tls, "rank", None)
        t = -1 if ctx is None else ctx.rank - self.first
        return t if 0 <= t < self.T else -1

    def _expired(self, t: float, pred: Callable[[], Any] | None,
                 late: Callable[[], bool]) -> None:
        """A blocking wait of ``t`` seconds ended with nothing ready and nobody having tried
        to wake it: count a whole slice, and a missed wake-up when the wait was satisfied
        all along (its condition held, or deferred work waited to be sent) and no wake-up
        comes within ``WAKE_GRACE_S`` either (``late()``: one may have been on its way as the
        wait timed out): statistics()."""
        if t >= BLOCK_SLICE_S:
            missed = (self._deferred_due() or (pred is not None and pred())) and not late()
            with self.stats_lock:
                self.slices_expired += 1
                self.wakeups_missed += bool(missed)

    def _late_gen(self, gen: int) -> bool:
        """A wake-up (a new ``gen``) comes within ``WAKE_GRACE_S`` (see :meth:`_expired`)."""
        with self.cond:
            return self.cond.wait_for(lambda: self.gen != gen, WAKE_GRACE_S)

    def next_due(self) -> float | None:
        return self.delayed[0][0] if self.delayed else None

    # -- progress -------------------------------------------------------------------------
    def poll(self, deferred: bool = True) -> int:
        """Run what has arrived, if no other thread of this process is doing it (0 when one
        is); then the deferred work, unless not ``deferred`` (a wait for a full queue,
        ``_queue_full``: deferred work sends, and could wait for that queue again)."""
        if not self.drain_lock.acquire(False):
            if deferred and self.deferred:
                self.run_deferred()
            return 0
        try:
            n = self.drain()
        finally:
            self.drain_lock.release()
        if self.hot.waiters:  # they re-check whenever the drainer lets go of the lock
            self._wake()
        if deferred and self.deferred:
            self.run_deferred()
        return n

    def wake_waiters(self) -> None:
        """After a drain that ran something: wake the threads waiting on the drainer."""
        if self.hot.waiters:
            self._wake()

    def _wake(self) -> None:
        with self.cond:
            self.gen += 1
            self.cond.notify_all()

    def wait_slow(self, pred: Callable[[], Any], timeout: float | None, spun: bool) -> bool:
        """The C ``wait_until`` hands over here: it is not lock-free, it blocks, or it spun
        ``spin_s`` without anything arriving (``spun``: block at once)."""
        return self.wait_until(pred, timeout, spun=spun)

    def wait_until(self, pred: Callable[[], Any], timeout: float | None = None,
                   max_block: float = BLOCK_SLICE_S, spun: bool = False,
                   pure: bool = False) -> bool:
        """Make progress until ``pred()`` is true (True) or ``timeout`` passes (False).

        ``spun``: the caller already spun ``spin_s`` with nothing arriving (block now).
        ``pure``: ``pred`` only reads plain attributes (an operation's ``done``, a counter):
        another thread may call it to decide whether its in-line AM should wake this one.

        Raises:
            JobAborted: the job is being torn down.
        """
        if pred():
            if self.deferred:
                self.run_deferred()
            return True
        boot = self.boot
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        lock = self.drain_lock
        spin_s = self.spin_s
        # when polling last found nothing (None: it just did find something)
        idle = now - spin_s - 1.0 if spun and spin_s != float("inf") else None
        while True:
            if self.deferred:  # what was deferred goes out before this thread blocks
                self.run_deferred()
                if pred():
                    return True
            if lock.acquire(False):
                try:
                    if spin_s == 0.0 or (idle is not None
                                         and time.monotonic() - idle > spin_s):
                        # one blocking receive: returns at once if something is there
                        t = max_block
                        due = self.next_due()
                        if due is not None or deadline is not None:
                            now = time.monotonic()
                            if due is not None:
                                t = min(t, max(0.0, due - now))
                            if deadline is not None:
                                t = min(t, max(0.0, deadline - now))
                        n = self.drain(pred, t, pure)
                    else:
                        n = self.drain(pred)
                        if not n and idle is None:
                            idle = time.monotonic()
                finally:
                    lock.release()
                if self.hot.waiters:
                    self._wake()
                if n:
                    idle = None
                elif spin_s:
                    # after releasing: peers get the core now and then (the rule and its
                    # count are the C spin phase's); without PSHM at every empty poll, as
                    # the conduit's I/O thread may need the interpreter lock (tcp's is Python)
                    if self.pshm is None:
                        yield_core()
                    else:
                        self.hot.idle()
            else:
                # Another thread of this process drains: sleep until it made progress. It
                # wakes us (a new ``gen``) after every drain that ran something and whenever
                # it lets go of the lock; we count ourselves a waiter and note ``gen`` before
                # the last look at ``pred``, and only sleep while it still holds the lock, so
                # no wake-up is lost. ``pred`` runs outside ``cond``: a condition may make
                # progress itself (an atomic polls every 64 calls), and progress wakes the
                # waiters under ``cond``, which is not reentrant.
                with self.cond:
                    self.hot.waiters += 1
                    gen = self.gen
                try:
                    if not pred() and lock.locked():
                        with self.cond:
                            t0 = time.perf_counter()
                            woke = self.cond.wait_for(lambda g=gen: self.gen != g, max_block)
                            self.drain_wait_s += time.perf_counter() - t0  # under cond
                        if not woke:
                            self._expired(max_block, pred, lambda g=gen: self._late_gen(g))
                finally:
                    with self.cond:
                        self.hot.waiters -= 1
            if self.deferred:
                self.run_deferred()
            if pred():
                return True
            if boot is not None and boot.aborted is not None:
                raise boot.aborted
            if deadline is not None and time.monotonic() >= deadline:
                return bool(pred())

    def _progress_loop(self) -> None:
        lock = self.drain_lock
        while not self._stop:
            with lock:
                if self.closed:
                    return
                t = BLOCK_SLICE_S
                due = self.next_due()
                if due is not None:
                    t = min(t, max(0.0, due - time.monotonic()))
                self.drain(None, t)
            if self.hot.waiters:  # they re-check whenever the drainer lets go of the lock
                self._wake()
            if self.deferred:  # what its handlers deferred goes out now, not at the
                try:  # rank-thread's next call (a failure of it ends the job:
                    self.run_deferred()  # deferred_failed)
                except JobAborted:
                    return

    # -- an event loop driving progress (amnet.aio, through amnet/core/_loopdrive.py) -----
    def loop_attach(self) -> None:
        """An event loop watches this process's descriptors now (counted per process: the
        loops of several rank-threads attach at once). While one does, every message to this
        process through the shared memory rings its doorbell: a loop never says when it
        sleeps (``PshmNetwork.set_ring_always``)."""
        with self.cond:
            self.loops += 1
            if self.loops == 1 and self.pshm is not None:
                self.pshm.set_ring_always(True)

    def loop_detach(self) -> None:
        """A loop no longer watches (see :meth:`loop_attach`)."""
        with self.cond:
            self.loops -= 1
            if self.loops == 0 and self.pshm is not None and not self.closed:
                self.pshm.set_ring_always(False)

    def loop_poll(self) -> int:
        """Run what has arrived, the conduit looked at now (not throttled: a zmq descriptor
        is edge-triggered, and says "maybe" only once); how many ran.

        Raises:
            JobAborted: the job is being torn down.
        """
        self.hot.conduit_rearm()
        n = self.poll()
        err = self.abort_error()
        if err is not None:
            raise err
        return n
