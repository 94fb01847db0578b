"""Moving output without ever blocking an event loop.

The launcher writes to its own stdout/stderr (a terminal, a pager, a notebook stream) from a
thread of its own, and its pumps wait for each write: a reader that stalls (``| less``,
Ctrl-Z) slows the job's output down to its pace but never freezes the launcher's loop, so
timeouts, pings and teardown go on. The agent writes to its pipe to the launcher with
non-blocking writes and stops reading its ranks' pipes while too much is queued
(backpressure down to the ranks).
"""

from __future__ import annotations

import asyncio
import collections
import os
import queue
import threading
import time
from collections.abc import Callable


class ThreadWriter:
    """Calls a blocking ``write(bytes)`` on a daemon thread, in order."""

    def __init__(self, write: Callable[[bytes], None], name: str) -> None:
        self._write = write
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"amnet-{name}", daemon=True)
        self._thread.start()

    async def write(self, data: bytes) -> None:
        """Queue ``data`` and return once it is written (empty ``data``: wait for the queue)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((data, loop, fut))
        await fut

    def write_nowait(self, data: bytes) -> None:
        self._q.put((data, None, None))

    def close(self) -> asyncio.Future | None:
        """Let the thread write what is queued, then end. Returns a future done when it has
        (``None`` outside an event loop)."""
        try:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
        except RuntimeError:
            loop = fut = None
        self._q.put((None, loop, fut))
        return fut

    def join(self, timeout: float = 5.0) -> None:
        """Close, then wait up to ``timeout`` s for the thread to end: before the process
        exits, so that the thread is not stopped mid-write by the interpreter's shutdown."""
        self._q.put((None, None, None))
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            data, loop, fut = self._q.get()
            if data:
                self._write(data)
            if fut is not None:
                try:
                    loop.call_soon_threadsafe(_resolve, fut)
                except RuntimeError:  # its loop closed (the job failed to start): no one waits
                    pass
            if data is None:
                return


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class FdOut:
    """Non-blocking writes to one of the agent's output fds, with a bounded backlog."""

    HIGH = 1 << 20  # queued bytes above which the relays feeding it pause

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop, self.fd = loop, fd
        os.set_blocking(fd, False)
        self.q: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.dead = False  # the reader is gone: output is dropped
        self._waiting: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self.size >= self.HIGH

    def when_drained(self, resume: Callable[[], None]) -> None:
        self._waiting.append(resume)

    def write(self, data: bytes) -> None:
        if self.dead or not data:
            return
        if not self.q:
            try:
                n = os.write(self.fd, data)
            except BlockingIOError:
                n = 0
            except OSError:
                self._die()
                return
            data = data[n:]
            if not data:
                return
            self.loop.add_writer(self.fd, self._flush)
        self.q.append(data)
        self.size += len(data)

    def _flush(self) -> None:
        while self.q:
            try:
                n = os.write(self.fd, self.q[0])
            except BlockingIOError:
                return
            except OSError:
                self._die()
                return
            self.size -= n
            if n < len(self.q[0]):
                self.q[0] = self.q[0][n:]
                return
            self.q.popleft()
        self.loop.remove_writer(self.fd)
        self._wake()

    def _die(self) -> None:
        self.dead = True
        if self.q:
            self.loop.remove_writer(self.fd)
        self.q.clear()
        self.size = 0
        self._wake()

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        for resume in waiting:
            resume()

    async def drained(self) -> None:
        while self.q and not self.dead:
            fut = self.loop.create_future()
            self.when_drained(lambda f=fut: _resolve(f))
            await fut


DRAIN_S = 1.0  # after a spawned process exits: how long its pipes may stay silent


class Pump:
    """Forwards whole lines from a spawned process's pipe; keeps the last few for diagnoses."""

    def __init__(self, reader: asyncio.StreamReader, out: ThreadWriter) -> None:
        self.reader, self.out = reader, out
        self.tail: list[str] = []
        self.busy = False
        self.last = time.monotonic()

    def idle(self) -> bool:
        return not self.busy and time.monotonic() - self.last > DRAIN_S

    async def run(self) -> None:
        buf = b""
        while True:
            chunk = await self.reader.read(1 << 16)
            self.last = time.monotonic()
            if not chunk:
                break
            data = buf + chunk
            cut = data.rfind(b"\n") + 1
            buf = data[cut:]
            if cut:
                await self._out(data[:cut])
        if buf:
            await self._out(buf + b"\n")

    async def _out(self, data: bytes) -> None:
        lines = data.decode("utf-8", "replace").splitlines()
        self.tail = (self.tail + [ln for ln in lines if ln.strip()])[-3:]
        self.busy = True  # a stalled reader of our output is not a silent pipe
        try:
            await self.out.write(data)
        finally:
            self.busy = False
            self.last = time.monotonic()


def stdout_writer(stream) -> Callable[[bytes], None]:
    """A writer of raw bytes onto a text or binary stream, flushed per call.

    Once the reader has gone (``amnet-run ... | head``), output is dropped and the job goes on.
    """
    buf = getattr(stream, "buffer", None)
    closed = False

    def write(data: bytes) -> None:
        nonlocal closed
        if closed:
            return
        try:
            if buf is not None:
                buf.write(data)
                buf.flush()
            else:
                stream.write(data.decode("utf-8", "replace"))
                stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            closed = True

    return write
