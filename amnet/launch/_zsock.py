"""A plain zmq socket driven by an asyncio loop, without missed wake-ups.

zmq's notification file descriptor is edge-triggered, and any operation on the socket (a send
included) may consume the edge while messages wait. So the inbox is drained whenever the fd is
readable, right after every send, and on a slow safety timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq

SAFETY_TICK_S = 0.1


class LoopSocket:
    """Calls ``on_frames(frames)`` for every message that arrives on ``sock``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: zmq.Socket,
                 on_frames: Callable[[list[bytes]], None]) -> None:
        self.loop, self.sock, self.on_frames = loop, sock, on_frames
        self._fd = sock.getsockopt(zmq.FD)
        loop.add_reader(self._fd, self.drain)
        self._timer = loop.call_later(SAFETY_TICK_S, self._tick)
        self._closed = False

    def drain(self) -> None:
        sock = self.sock
        while not self._closed and sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.on_frames(frames)

    def send(self, frames: list[bytes]) -> bool:
        """Queue one message; False when zmq refused it (no route, high-water mark)."""
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK)
            ok = True
        except zmq.ZMQError:
            ok = False
        self.loop.call_soon(self.drain)
        return ok

    def _tick(self) -> None:
        self.drain()
        if not self._closed:
            self._timer = self.loop.call_later(SAFETY_TICK_S, self._tick)

    def close(self, linger_ms: int) -> None:
        if self._closed:
            return
        self._closed = True
        self._timer.cancel()
        self.loop.remove_reader(self._fd)
        self.sock.close(linger=linger_ms)
