"""The ``zmq`` conduit: one bound PULL socket per process, one PUSH per peer it talks to.

A PUSH -> PULL pair is one TCP connection, so messages between two processes stay in order.
High-water marks are off (0) so a send never blocks on a slow receiver: a handler can always
reply, and flow control is the application's (as with GASNet's AMs, a rank that floods
another without waiting for replies buffers in memory). Payloads travel as a second frame;
with ``copy=False`` large ones are sent without a copy. A message with more than two frames,
or a header longer than :data:`~amnet.conduits.MAX_HEADER`, is dropped and counted.

Only the job gets in: the PULL socket's context has a :class:`amnet._guard.Guard`, which
admits a PUSH only when its handshake proves it holds the job's secret (PLAIN with the secret
as password on one host; CURVE with the job's keys across hosts). Anything else is refused by
zmq before a single message is read, and counted in ``statistics().refused``. The check costs
nothing per message.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Sequence
from typing import Any

import zmq

from .._guard import Guard
from .._security import apply_client
from ._base import MAX_HEADER, register_conduit
from ._sock import SocketConduit

_EVENTS, _POLLIN, _NOBLOCK, _RCVMORE, _SNDMORE = (
    int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK), int(zmq.RCVMORE), int(zmq.SNDMORE))
# The hot path calls the Cython socket methods directly: pyzmq's Python-level wrappers add
# about half a microsecond per call, a sizeable share of a small AM's cost.
_bsend = zmq.backend.Socket.send
_brecv = zmq.backend.Socket.recv


@register_conduit("zmq")
class ZmqConduit(SocketConduit):
    """zmq over TCP (loopback on one host). See the module docstring."""

    def __init__(self, proc: int, procs: int, bind_host: str = "127.0.0.1",
                 curve: dict[str, str] | None = None, options: Any = None,
                 secret: str | None = None) -> None:
        super().__init__(proc, procs, bind_host, curve, options, secret)
        self._curve = curve
        self._zctx = zmq.Context(io_threads=1)
        pull = self._zctx.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVHWM, 0)
        pull.setsockopt(zmq.LINGER, 0)
        seg = getattr(options, "segment_size", 64 << 20) if options is not None else 64 << 20
        # the largest message a peer sends is a put/get of a whole segment plus the header
        pull.setsockopt(zmq.MAXMSGSIZE, max(seg, 16 << 20) + 2 * MAX_HEADER)
        try:
            self._guard = Guard(self._zctx, pull, self._secret, curve or None)
        except BaseException:
            pull.close(linger=0)
            self._zctx.term()
            raise
        port = pull.bind_to_random_port(f"tcp://{bind_host}")
        self._pull = pull
        self._address = f"tcp://{bind_host}:{port}"
        self._locks = [threading.Lock() for _ in range(procs)]
        self._rcvtimeo = -1
        self._poller: Any = None
        # _idle[0] is up once EVENTS said "nothing" (see recv)
        self._fd = self._pull.getsockopt(zmq.FD)
        fdp = select.poll()
        fdp.register(self._fd, select.POLLIN)
        self._fd_poll = fdp.poll
        self._poller_fds: tuple[int, ...] = ()

    def _connect(self, proc: int) -> Any:
        sock = self._zctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.LINGER, 500)
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        apply_client(sock, self._curve or None, self._secret)
        sock.connect(self._peers[proc])
        return sock

    def send(self, proc: int, header: bytes, payload: Any = None, copy: bool = True) -> None:
        sock = self._conns[proc]
        if sock is None:
            sock = self._open(proc)
        with self._locks[proc]:
            if payload is None:
                _bsend(sock, header, 0)
            else:
                _bsend(sock, header, _SNDMORE)
                _bsend(sock, payload, 0, copy)
                self._bytes_sent[proc] += len(payload) if isinstance(payload, bytes) else \
                    memoryview(payload).nbytes
            self._sent[proc] += 1  # per destination, under its lock: no update is lost

    def recv(self, ready: bool = False) -> tuple[bytes, Any] | None:
        # pyzmq raises zmq.Again on an empty NOBLOCK recv, which costs several times a
        # successful recv; asking for EVENTS first is the cheaper way to find out, and is
        # skipped when the caller was just told the socket is readable.
        # Cheaper still when idle: once EVENTS said "nothing", libzmq has drained the
        # socket's signal descriptor and signals it again only when a message arrives, so a
        # zero-timeout poll(2) of that descriptor (~0.3 us) answers "still nothing".
        idle = self._idle
        if idle[0] and not ready:
            if not self._fd_poll(0):
                return None
            idle[0] = 0
        get = self._pull.get
        while ready or get(_EVENTS) & _POLLIN:
            ready = False
            try:
                m = self._take(_NOBLOCK)
            except zmq.Again:
                self._idle[0] = 1
                return None
            if m is not None:
                return m
        self._idle[0] = 1
        return None

    def recv_wait(self, timeout: float | None) -> tuple[bytes, Any] | None:
        # one blocking recv (with a receive timeout) instead of poll + recv
        # rounded down: a caller waiting for a delayed message due in 0.7 ms must not sleep 1
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        self._idle[0] = 0  # libzmq may consume the descriptor's signal in here
        if ms != self._rcvtimeo:
            self._pull.setsockopt(zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms
        try:
            m = self._take(0)
        except zmq.Again:
            return None
        return m if m is not None else self.recv()

    def _take(self, flags: int) -> tuple[bytes, Any] | None:
        """Receive one message; None if it was malformed (dropped and counted)."""
        pull = self._pull
        header = _brecv(pull, flags)
        payload = None
        get = pull.get
        if get(_RCVMORE):
            frame = _brecv(pull, 0, False)
            payload = frame.buffer
            if get(_RCVMORE):  # more than two frames: not ours
                while get(_RCVMORE):
                    _brecv(pull, 0)
                self.dropped += 1
                return None
            self.bytes_received += payload.nbytes
        if len(header) > MAX_HEADER:
            self.dropped += 1
            return None
        self.received += 1
        return header, payload

    def wait_readable(self, timeout: float | None) -> bool:
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        self._idle[0] = 0
        return bool(self._pull.poll(ms, zmq.POLLIN))

    def wait_readable_fds(self, fds: Sequence[int], timeout: float | None) -> bool:
        if not fds:
            return self.wait_readable(timeout)
        self._idle[0] = 0
        poller = self._poller
        if poller is None or self._poller_fds != tuple(fds):
            poller = zmq.Poller()
            poller.register(self._pull, zmq.POLLIN)
            for fd in fds:
                poller.register(fd, zmq.POLLIN)
            self._poller, self._poller_fds = poller, tuple(fds)
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        return bool(poller.poll(ms))

    @property
    def refused(self) -> int:
        return self._guard.refused

    def close(self, linger: float = 0.5) -> None:
        if not self._begin_close():
            return
        ms = max(0, int(linger * 1000))
        for sock in self._conns:
            if sock is not None:
                sock.close(linger=ms)
        self._pull.close(linger=0)
        self._zctx.term()  # ends the guard's thread too
        self._guard.join()
