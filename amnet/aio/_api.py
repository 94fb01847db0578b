"""``amnet.aio.run``, ``attach``, and handing work from a handler to its rank's loop."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import uvloop

from .._errors import AMContextError
from ..core import _runtime
from . import _driver


def run(main: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kwargs: Any) -> Any:
    """Run ``main(ep, *args, **kwargs)`` on a new uvloop with this rank's amnet progress
    attached, and return its result. Called by every rank (and rank-thread) that wants a
    loop; ``ep`` is the rank's endpoint (``amnet.init()`` is called if it was not).

    While it runs, every amnet handle is awaitable, the rank serves other ranks' AMs
    whenever its loop is idle (woken by its descriptors, not spinning), and handlers may
    hand work to the loop (:func:`defer`).

    Raises:
        AMContextError: this rank already runs an amnet.aio loop, or a loop runs in this
            thread already.
        Exception: what ``main`` raised; what a coroutine handed to the loop by a handler
            raised (``main`` is cancelled then); JobAborted when the job is torn down.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise AMContextError("amnet.aio.run() inside a running event loop: await main(ep) "
                             "inside 'async with amnet.aio.attach() as ep:' instead")
    ep = _runtime.endpoint() or _runtime.init()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_main(ep, main, args, kwargs))


async def _main(ep: Any, main: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    async with attach(ep) as _:
        drv = _driver.current()
        task = asyncio.ensure_future(main(ep, *args, **kwargs))
        drv.main = task
        try:
            return await task
        except asyncio.CancelledError:
            if drv.failed is not None:
                raise drv.failed from None
            raise
        finally:
            if not task.done():
                task.cancel()


@contextlib.asynccontextmanager
async def attach(ep: Any = None) -> AsyncIterator[Any]:
    """Attach this rank's amnet progress to the running loop for the ``async with`` block
    (an asyncio application of its own: ``amnet.aio.run`` does this); yields the endpoint.

    Raises:
        AMContextError: no loop runs, or this rank's progress is attached to a loop already.
    """
    loop = asyncio.get_running_loop()
    ep = ep or _runtime.endpoint() or _runtime.init()
    drv = _driver.Driver(ep, loop)
    drv.start()
    try:
        yield ep
    finally:
        drv.close()
        for t in list(drv.tasks):
            t.cancel()


def loop_of(target: Any) -> asyncio.AbstractEventLoop:
    """The loop of a rank of this process: ``target`` is a handler's token, an endpoint or
    a rank number.

    Raises:
        AMContextError: that rank runs no amnet.aio loop now.
    """
    return _driver.of_rank(_rank(target)).loop


def defer(target: Any, fn: Any, *args: Any) -> None:
    """Hand work to a rank's loop, to run after the calling handler has returned (UPC++'s
    LPC): the documented way for a handler to do what it may not (block, send requests,
    wait). ``target``: the handler's token (the rank it ran for), an endpoint, or a rank of
    this process. ``fn``: a coroutine function (called with ``args``; the coroutine runs as a
    task of the loop), a coroutine object, or a plain function (called with ``args``). May be
    called from any thread of the process.

    An exception of that work ends the rank's ``amnet.aio.run`` with it.

    Raises:
        AMContextError: that rank runs no amnet.aio loop now.
        TypeError: ``fn`` is none of those.
    """
    drv = _driver.of_rank(_rank(target))
    if not (inspect.iscoroutine(fn) or callable(fn)):
        raise TypeError(f"amnet.aio.defer: {fn!r} is neither a coroutine nor callable")
    drv.loop.call_soon_threadsafe(_start, drv, fn, args)


def _rank(target: Any) -> int:
    if isinstance(target, int):
        return target
    ep = getattr(target, "endpoint", None)  # a token
    if ep is not None:
        return ep.rank
    rank = getattr(target, "rank", None)
    if isinstance(rank, int):
        return rank
    raise TypeError(f"not a token, an endpoint or a rank: {target!r}")


def _start(drv: _driver.Driver, fn: Any, args: tuple) -> None:
    if drv.closed:
        return
    try:
        coro = fn if inspect.iscoroutine(fn) else fn(*args)
    except BaseException as e:
        drv.fail(e)
        return
    if inspect.iscoroutine(coro):
        task = drv.loop.create_task(coro)
        drv.tasks.add(task)
        task.add_done_callback(lambda t: _finished(drv, t))


def _finished(drv: _driver.Driver, task: asyncio.Task) -> None:
    drv.tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        drv.fail(task.exception())
