"""The loop driver: one rank's amnet progress on its asyncio loop, and ``await`` of handles.

A :class:`Driver` belongs to one rank(-thread) and one running loop. It watches the process's
descriptors (``LoopProgress.fds``: the shared-memory doorbell, the conduit, the rank-threads'
wake eventfd) with ``loop.add_reader`` and runs amnet's progress when one fires, so a rank
that awaits serves other ranks' AMs without spinning; where there is no descriptor (the mpi
conduit) a timer looks every :data:`TICK_S` while something is awaited or has just arrived,
and backs off to :data:`IDLE_TICK_S` while the rank is idle (an idle rank still answers within
that); elsewhere a timer looks every :data:`SAFETY_S` as a safety net.

``await handle`` first looks for up to :data:`SPIN_MAX_S` (no longer than the blocking
form's spin, and not at all where ranks outnumber cores or other awaits are pending: a
round trip within the node completes without the loop), then waits on a future that the
operation's completion resolves (``Op.notify``, on whichever thread completed it).
Cancelling that await forgets the future, not the operation: it completes in the
background, and an error it ends with goes to the loop's exception handler.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from .._errors import AMContextError
from ..core._loopdrive import LoopProgress
from ..core._ops import Op

#: an await looks this long at most before it yields to the loop (and no longer than the
#: blocking form would spin): a round trip within a node or a rank-thread's completes in it
SPIN_MAX_S = 200e-6
#: the timer of a rank with no descriptor for its conduit (mpi) or its doorbell
TICK_S = 0.001
#: that timer's longest period: it doubles from TICK_S at every look that finds nothing while
#: nothing is awaited, and is TICK_S again once something arrives or is awaited
IDLE_TICK_S = 0.008
#: the timer of the others: a safety net (every wake-up also comes on a descriptor)
SAFETY_S = 0.05
#: drains per wake-up before the loop gets a turn (the rest runs at the next iteration)
DRAINS = 8

_by_loop: dict[int, Driver] = {}  # id(loop) -> its driver
_by_rank: dict[int, Driver] = {}  # rank -> the driver of its loop (this process's ranks)
_lock = threading.Lock()


def current() -> Driver:
    """The driver of the running loop.

    Raises:
        AMContextError: no loop runs in this thread, or amnet's progress is not attached to
            it (``amnet.aio.run`` / ``amnet.aio.attach``).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise AMContextError("await of an amnet handle outside a running event loop: run the "
                             "coroutine with amnet.aio.run(main)") from None
    drv = _by_loop.get(id(loop))
    if drv is None or drv.loop is not loop:
        raise AMContextError("this event loop has no amnet progress attached: run the "
                             "coroutine with amnet.aio.run(main), or inside "
                             "'async with amnet.aio.attach():'")
    return drv


def of_rank(rank: int) -> Driver:
    """The driver of ``rank``'s loop (a rank of this process).

    Raises:
        AMContextError: ``rank`` runs no amnet.aio loop now.
    """
    drv = _by_rank.get(rank)
    if drv is None:
        raise AMContextError(f"rank {rank} runs no amnet.aio loop (amnet.aio.run) now")
    return drv


class Driver:
    """One rank's progress on its loop (see the module)."""

    def __init__(self, ep: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.ep = ep
        self.rank = ep.rank
        self.loop = loop
        self.thread = threading.get_ident()
        self.lp = LoopProgress.of(ep)
        self.waiting: dict[int, tuple[Any, list[asyncio.Future]]] = {}  # id(op) -> futures
        # id(op) -> (op, callbacks(op, error)) of when_all and the like (no future per
        # operation)
        self.calls: dict[int, tuple[Any, list[Callable[[Any, Any], None]]]] = {}
        self.checks: list[tuple[Callable[[], bool], asyncio.Future]] = []  # other awaitables
        self.tasks: set[asyncio.Task] = set()  # coroutines handlers handed to the loop
        self.failed: BaseException | None = None
        self.main: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tick_s = TICK_S if self.lp.needs_tick else SAFETY_S
        self._again = False  # a drain is scheduled for the next iteration
        self._awake = 0  # the sleeping flag is down until the _asleep(self._awake) runs
        self.closed = False

    # -- life ---------------------------------------------------------------------------
    def start(self) -> None:
        with _lock:
            if self.rank in _by_rank:
                raise AMContextError(f"rank {self.rank} already runs an amnet.aio loop")
            _by_rank[self.rank] = self
            _by_loop[id(self.loop)] = self
        self.lp.attach()
        for fd in self.lp.fds:
            self.loop.add_reader(fd, self._readable, fd)
        self._arm()

    def close(self) -> None:
        self.closed = True
        for fd in self.lp.fds:
            try:
                self.loop.remove_reader(fd)
            except (ValueError, OSError):
                pass
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.lp.detach()
        for op, _ in list(self.waiting.values()) + list(self.calls.values()):
            if isinstance(op, Op):
                op.notify = None
        self.waiting.clear()
        self.calls.clear()
        with _lock:
            _by_rank.pop(self.rank, None)
            _by_loop.pop(id(self.loop), None)

    def fail(self, exc: BaseException) -> None:
        """End ``amnet.aio.run``'s main coroutine with ``exc`` (a handler's deferred work or
        the progress itself failed)."""
        if self.failed is None:
            self.failed = exc
        if self.main is not None and not self.main.done():
            self.main.cancel()

    # -- progress -----------------------------------------------------------------------
    def _arm(self) -> None:
        self._timer = self.loop.call_later(self._tick_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        found = self.progress()
        if self.lp.needs_tick:
            if found or self.waiting or self.calls or self.checks or self.lp.inflight():
                self._tick_s = TICK_S
            else:
                self._tick_s = min(2 * self._tick_s, IDLE_TICK_S)
        if not self.closed:
            self._arm()

    def _hurry(self) -> None:
        """Look within TICK_S from now (an await began: the timer may be backed off, or be
        the safety net while a check needs looking at without a message)."""
        if (self._timer is not None and self._tick_s > TICK_S
                and self._timer.when() - self.loop.time() > TICK_S):  # (never postponed)
            self._timer.cancel()
            if self.lp.needs_tick:
                self._tick_s = TICK_S
            self._timer = self.loop.call_later(TICK_S, self._tick)

    def _readable(self, fd: int) -> None:
        if self.lp.needs_tick:  # something arrived: the timer looks often again
            self._tick_s = TICK_S
        self.lp.reset(fd)
        self.progress()

    def progress(self) -> bool:
        """Run what has arrived (a few drains; more at the next iteration), then settle the
        awaits whose checks hold. True if anything had arrived."""
        if self.closed:  # a drain scheduled before the loop let go of this rank
            return False
        self._again = False
        found = False
        try:
            for _ in range(DRAINS):
                if not self.lp.poll():
                    break
                found = True
            else:
                if not self._again:
                    self._again = True
                    self.loop.call_soon(self.progress)
        except BaseException as e:  # JobAborted: the awaits and main end with it
            self._abort(e)
            return True
        if self.checks:
            self._run_checks()
        if self.lp.can_wake:
            # the loop runs on (the callbacks this drain scheduled first: the tasks it woke):
            # senders on this node need not ring until it may block again. The latest
            # drain's _asleep raises the flag (after what it woke), earlier ones do nothing.
            if not self._awake:
                self.lp.awake(True)
            self._awake += 1
            self.loop.call_soon(self._asleep, self._awake)
        return found

    def _asleep(self, gen: int) -> None:
        """Raise the sleeping flag before the loop may block (this callback runs before the
        loop waits again: it was scheduled with call_soon), then look once more: what was
        published before the flag went up is run now; after it, senders ring. Only the
        latest drain's call does it (``gen``)."""
        if gen != self._awake:
            return
        self._awake = 0
        if self.closed:
            return
        self.lp.awake(False)
        if self.lp.pending():
            self.progress()

    def _abort(self, exc: BaseException) -> None:
        for _, futs in list(self.waiting.values()):
            for f in futs:
                if not f.done():
                    f.set_exception(exc)
        for _, f in self.checks:
            if not f.done():
                f.set_exception(exc)
        self.checks.clear()
        calls, self.calls = self.calls, {}
        for _, cbs in calls.values():
            for cb in cbs:
                cb(None, exc)
        self.fail(exc)

    def _run_checks(self) -> None:
        keep = []
        for check, fut in self.checks:
            if fut.done():
                continue
            try:
                ok = check()
            except BaseException as e:
                fut.set_exception(e)
                continue
            if ok:
                fut.set_result(None)
            else:
                keep.append((check, fut))
        self.checks = keep

    def spin(self, done: Callable[[], bool]) -> None:
        """Look for up to SPIN_MAX_S (see the module) while ``done()`` is false."""
        lp = self.lp
        if self.waiting or self.calls or self.checks or lp.spin_s <= 0.0 or lp.in_handler():
            return
        end = time.perf_counter() + min(lp.spin_s, SPIN_MAX_S)
        poll = lp.poll
        while not done():
            poll()
            if time.perf_counter() > end:
                return

    # -- waiting for operations ---------------------------------------------------------
    def watch(self, op: Any) -> asyncio.Future:
        """A future resolved (to None) once ``op`` is done."""
        fut = self.loop.create_future()
        key = id(op)
        entry = self.waiting.get(key)
        if entry is not None:
            entry[1].append(fut)
        elif isinstance(op, Op):
            self._observe(op, self.waiting, fut)
        else:  # not an amnet.Op (a region's): looked at after every drain
            self.checks.append((lambda: op.done, fut))
            self._hurry()
        return fut

    def call_when_done(self, op: Op, cb: Callable[[Any, BaseException | None], None]) -> None:
        """``cb(op, None)`` on the loop's thread once ``op`` (an amnet.Op not yet done) is
        done (``cb(None, exc)`` if the job is torn down first): no future of its own."""
        entry = self.calls.get(id(op))
        if entry is not None:
            entry[1].append(cb)
        else:
            self._observe(op, self.calls, cb)

    def _observe(self, op: Op, table: dict[int, tuple[Any, list]], first: Any) -> None:
        """Start watching ``op``: ``first`` (a future or a callback) in ``table`` (``waiting``
        or ``calls``), and ``op.notify`` set (settled at once if it completed meanwhile)."""
        if self.lp.needs_tick and not self.waiting and not self.calls:
            self._hurry()
        table[id(op)] = (op, [first])
        op.notify = self._notified
        if op.done:  # completed as it was being watched
            op.notify = None
            self._settle(op)

    def watch_check(self, check: Callable[[], bool]) -> asyncio.Future:
        """A future resolved once ``check()`` holds (looked at after every drain)."""
        fut = self.loop.create_future()
        self.checks.append((check, fut))
        # a check may hold without a message to this process (another rank-thread's progress
        # completed it): look soon, not at the safety net's (or an idle mpi rank's) pace
        self._hurry()
        return fut

    def _notified(self, op: Op) -> None:
        """``op.notify``: on the thread that completed it."""
        op.notify = None
        if threading.get_ident() == self.thread:
            self._settle(op)
        else:
            try:
                self.loop.call_soon_threadsafe(self._settle, op)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def _settle(self, op: Any) -> None:
        key = id(op)
        if self.calls:
            entry = self.calls.pop(key, None)
            if entry is not None:
                for cb in entry[1]:
                    cb(op, None)
        entry = self.waiting.pop(key, None)
        if entry is None:
            return
        live = [f for f in entry[1] if not f.done()]
        for f in live:
            f.set_result(None)
        if not live and op.error is not None:  # every await of it was cancelled
            self.loop.call_exception_handler({
                "message": f"an amnet operation whose await was cancelled failed on rank "
                           f"{self.rank}", "exception": op.error})
