"""``await`` of amnet's handles, futures and promises of their completion (UPC++'s
``as_future``, ``promise`` with ``finalize``, ``when_all``, ``then``), on the running loop's
driver."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

from .._errors import AMContextError
from ..core._ops import Handle, Op
from . import _driver


class HandleAwait:
    """What ``await handle`` runs (``Handle.__await__``)."""

    __slots__ = ("h",)

    def __init__(self, h: Handle) -> None:
        self.h = h

    def __await__(self) -> Generator[Any, None, Any]:
        op = self.h._op
        if not op.done:
            drv = _driver.current()
            drv.spin(lambda: op.done)
            if not op.done:
                yield from drv.watch(op).__await__()
        if op.error is not None:
            raise op.error
        return op.value


class PolledAwait:
    """``await`` of another amnet handle (a collective's, a layer's): anything with
    ``test()`` (progress, then whether it is complete) and ``wait()`` or ``sync()`` (its
    result, at once once complete: UPC's ``upc_handle_t`` has ``sync``)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __await__(self) -> Generator[Any, None, Any]:
        obj = self.obj
        if not obj.test():
            drv = _driver.current()
            drv.spin(obj.test)
            if not obj.test():
                yield from drv.watch_check(obj.test).__await__()
        finish = getattr(obj, "wait", None) or obj.sync
        return finish()


def awaitable(obj: Any) -> Any:
    """The awaitable for ``obj``: an amnet Handle (``put_nb``, ``get_nb``, ``rpc``, a
    region's, an extension's), or any handle with ``test()`` and ``wait()`` or ``sync()``
    (a collective's ``*_nb``, upc_rt's ``memget_nb``, a layer's).

    Raises:
        TypeError: ``obj`` is neither.
    """
    if isinstance(obj, Handle):
        return HandleAwait(obj)
    if callable(getattr(obj, "test", None)) and (callable(getattr(obj, "wait", None))
                                                 or callable(getattr(obj, "sync", None))):
        return PolledAwait(obj)
    raise TypeError(f"cannot await {obj!r}: not an amnet handle (nothing with test() and "
                    "wait() or sync())")


def as_future(h: Any) -> asyncio.Future:
    """A future of the running loop that ``h`` completes: its result, or its error
    (``h``: an amnet handle, see :func:`awaitable`).

    Raises:
        AMContextError: no amnet.aio loop runs in this thread.
    """
    drv = _driver.current()
    aw = awaitable(h)
    out = drv.loop.create_future()
    if isinstance(aw, HandleAwait):
        op = h._op
        done = drv.loop.create_future()
        if op.done:
            done.set_result(None)
        else:
            done = drv.watch(op)

        def settle(_: Any) -> None:
            if out.done():
                return
            if op.error is not None:
                out.set_exception(op.error)
            else:
                out.set_result(op.value)
        done.add_done_callback(settle)
        return out
    task = drv.loop.create_task(_await(aw))
    task.add_done_callback(lambda t: _copy(t, out))
    return out


async def _await(aw: Any) -> Any:
    return await aw


def _copy(src: asyncio.Future, dst: asyncio.Future) -> None:
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


class _AllOf:
    """The state of one :func:`when_all`: its future, the results, how many are left."""

    __slots__ = ("drv", "exceptions", "left", "out", "results", "tasks")

    def __init__(self, drv: _driver.Driver, n: int, exceptions: bool) -> None:
        self.drv = drv
        self.out = drv.loop.create_future()
        self.results: list[Any] = [None] * n
        self.left = n
        self.exceptions = exceptions
        self.tasks: list[asyncio.Future] = []  # what it wrapped (not amnet handles)

    def cancel_tasks(self, out: asyncio.Future) -> None:
        """``out`` was cancelled: so are the tasks it wrapped, as ``gather`` does (amnet
        operations go on: cancelling forgets them, see :func:`when_all`)."""
        if out.cancelled():
            for t in self.tasks:
                t.cancel()

    def handle_done(self, i: int, op: Any, error: BaseException | None) -> None:
        """An amnet operation ``op`` completed (``op`` None: the job is being torn down)."""
        if op is not None:
            error = op.error
            self.one(i, op.value, error)
        else:
            self.one(i, None, error, abort=True)

    def future_done(self, i: int, fut: asyncio.Future) -> None:
        if fut.cancelled():
            if not self.out.done():  # as gather: a cancelled child cancels the whole
                self.one(i, None, asyncio.CancelledError())
            else:  # (cancelled with it, or after it ended): nothing to report
                self.left -= 1
        else:
            error = fut.exception()
            self.one(i, None if error is not None else fut.result(), error)

    def one(self, i: int, value: Any, error: BaseException | None, abort: bool = False) -> None:
        out = self.out
        if error is not None:
            if out.cancelled():
                if not abort:  # nobody awaits it now: report it
                    self.drv.loop.call_exception_handler({
                        "message": f"an amnet operation of a cancelled when_all failed on "
                                   f"rank {self.drv.rank}", "exception": error})
            elif (abort or not self.exceptions) and not out.done():
                out.set_exception(error)
        self.results[i] = error if error is not None else value
        self.left -= 1
        if self.left == 0 and not out.done():
            out.set_result(self.results)


def when_all(*aws: Any, return_exceptions: bool = False) -> asyncio.Future:
    """A future of the running loop done once every one of ``aws`` completed: the list of
    their results, in order (UPC++'s ``when_all``; ``asyncio.gather``'s answer, without a task
    per amnet handle: an amnet ``Handle`` completes the future's count directly, anything
    else awaitable is wrapped in a task as ``gather`` would).

    The first error (an rpc that raised, a coroutine's exception) becomes the future's at
    once, and the other operations go on; with ``return_exceptions=True`` errors are put in
    the list instead. Cancelling the future (a timeout, a cancelled await) forgets it, not
    the amnet operations: they complete, and an error one of them ends with then goes to the
    loop's exception handler; the tasks it made for coroutines and other awaitables are
    cancelled, as ``gather`` cancels its children.

    Raises:
        AMContextError: no amnet.aio loop runs in this thread.
        TypeError: one of ``aws`` is not awaitable (before anything is watched).
    """
    drv = _driver.current()
    for a in aws:
        if not isinstance(a, Handle) and not (asyncio.isfuture(a) or asyncio.iscoroutine(a)):
            awaitable(a)  # TypeError if it is none of amnet's handles either
    state = _AllOf(drv, len(aws), return_exceptions)
    results = state.results
    done = 0
    first: BaseException | None = None
    for i, a in enumerate(aws):
        if isinstance(a, Handle):
            op = a._op
            if op.done:  # complete already (a copy within the node): no callback at all
                if op.error is None:
                    results[i] = op.value
                else:
                    results[i] = op.error
                    first = first or op.error
                done += 1
            elif isinstance(op, Op):
                drv.call_when_done(op, partial(state.handle_done, i))
            else:  # a region's: looked at after every drain
                drv.watch(op).add_done_callback(partial(_settled_check, state, i, op))
            continue
        if asyncio.isfuture(a) or asyncio.iscoroutine(a):
            fut = asyncio.ensure_future(a, loop=drv.loop)
        else:
            fut = drv.loop.create_task(_await(awaitable(a)))
        if fut is not a:
            state.tasks.append(fut)
        fut.add_done_callback(partial(state.future_done, i))
    state.left -= done
    out = state.out
    if state.tasks:
        out.add_done_callback(state.cancel_tasks)
    if not out.done():  # (a callback above may have settled it already)
        if first is not None and not return_exceptions:
            out.set_exception(first)
        elif state.left == 0:
            out.set_result(results)
    return out


def _settled_check(state: _AllOf, i: int, op: Any, fut: asyncio.Future) -> None:
    if fut.cancelled():
        return
    error = fut.exception()
    if error is not None:  # the job is being torn down
        state.one(i, None, error, abort=True)
    else:
        state.one(i, op.value, op.error)


def on_complete(h: Any, callback: Callable[[asyncio.Future], Any]) -> asyncio.Future:
    """Run ``callback(future)`` on the loop once ``h`` completes (the future holds its result
    or its error); returns that future (:func:`as_future`)."""
    fut = as_future(h)
    fut.add_done_callback(callback)
    return fut


class Promise:
    """Counts operations to one completion, as UPC++'s ``promise``: :meth:`require` each
    handle (or :meth:`require_anonymous` a count, fulfilled with :meth:`fulfill_anonymous`),
    then :meth:`finalize` gives a future done once all have completed: None, or the first
    error one of them ended with. Made and used on one amnet.aio loop."""

    def __init__(self) -> None:
        self._count = 1  # the finalize itself, as UPC++ counts it
        self._error: BaseException | None = None
        self._fut: asyncio.Future | None = None
        self._finalized = False
        self._loop = _driver.current().loop

    def require(self, h: Any) -> None:
        """Count ``h``: the promise is fulfilled only once it completed.

        Raises:
            AMContextError: after :meth:`finalize`.
        """
        self._check("require")
        self._count += 1
        on_complete(h, self._one_done)

    def require_anonymous(self, n: int = 1) -> None:
        self._check("require_anonymous")
        if n < 0:
            raise ValueError(f"require_anonymous({n}): the count must be >= 0")
        self._count += n

    def fulfill_anonymous(self, n: int = 1) -> None:
        """Fulfil ``n`` anonymous dependencies.

        Raises:
            ValueError: more than were required are fulfilled.
        """
        if n < 0 or n > self._count - (0 if self._finalized else 1):
            raise ValueError(f"fulfill_anonymous({n}): only {self._count - 1} dependencies "
                             "are outstanding")
        self._fulfil(n)

    def finalize(self) -> asyncio.Future:
        """No more dependencies: the future of their completion.

        Raises:
            AMContextError: called twice.
        """
        self._check("finalize")
        self._finalized = True
        self._fut = self._loop.create_future()
        self._fulfil(1)
        return self._fut

    @property
    def outstanding(self) -> int:
        """Dependencies not yet fulfilled (the one of finalize included until it is called)."""
        return self._count

    def _check(self, what: str) -> None:
        if self._finalized:
            raise AMContextError(f"Promise.{what}() after finalize()")

    def _one_done(self, fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None and self._error is None:
            self._error = fut.exception()
        self._fulfil(1)

    def _fulfil(self, n: int) -> None:
        self._count -= n
        if self._count == 0 and self._fut is not None and not self._fut.done():
            if self._error is not None:
                self._fut.set_exception(self._error)
            else:
                self._fut.set_result(None)
