"""The ``tcp`` conduit: plain TCP sockets, no I/O thread.

Each process listens on one TCP port. A process opens one connection to each peer it sends
to, on its first send, and only ever writes to it; the peer only reads from it (as with the
zmq conduit's PUSH -> PULL pairs), so messages between two processes stay in order.

Compared with ``zmq``, no I/O thread stands between the caller and the kernel: ``send`` is
one ``sendmsg`` of the framed header and payload (no copy in user space), and ``recv`` reads
the socket in the caller's thread. A message costs no thread hand-offs, which on a machine
with few cores makes bulk transfers cut into many messages (VIS, ``amnet-bench vis``) about
twice as fast.

- **Sends never block.** What the kernel does not take at once (a socket buffer is some
  megabytes) waits in a per-peer backlog, copied unless ``copy=False``, and a flusher thread,
  started the first time that happens, sends it as the socket drains. It sleeps otherwise.
- **The first send to a peer connects**, in the caller's thread: at once when the peer
  is up (its address is published only once it listens); a peer that cannot be reached
  within 10 s raises ``ConnectionError`` where zmq would queue for ever. A message to a
  peer that has gone (its connection reset) is dropped: the launcher is ending the job.
- **Only the job gets in.** A connection opens with a hello that proves the sender holds
  the job's secret: an HMAC-SHA256, keyed with the secret, of the hello and a fresh random
  nonce (:func:`amnet._security.hello_mac`). The receiver reads the hello alone, checks it,
  and refuses a nonce it has seen before (a replayed hello), all before it reads a byte
  more; a refused connection is closed and counted in ``statistics().refused``. The check
  costs one HMAC per connection, nothing per message, and no round trip (the sender needs
  no answer, so a first send never waits for the peer to make progress).
- **No encryption.** The conduit refuses a job that needs CurveZMQ (any agent on another
  host, unless ``--insecure``); use ``zmq`` there.

Wire format: a connection opens with the hello (``b"AMNT"``, version, sender process,
receiver process, job size, 16-byte nonce, 32-byte MAC: 68 bytes); then each message is a
12-byte prefix (header length | has-payload bit, payload length), the header, the payload.
A connection whose prefix is wrong is closed and counted as dropped, since its stream can no
longer be trusted.
"""

from __future__ import annotations

import collections
import hmac
import itertools
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._security import hello_mac
from ._base import MAX_HEADER, register_conduit
from ._sock import SocketConduit

_PRE = struct.Struct("<IQ")  # header length | HAS_PAYLOAD, payload length
_HAS = 1 << 31
_HELLO = struct.Struct("<4sIIII16s")  # magic, version, sender, receiver, job size, nonce
_MAC = 32  # HMAC-SHA256 of the hello, keyed with the job's secret
_MAGIC, _VERSION = b"AMNT", 2
_RX = 1 << 18  # receive buffer per connection: many small messages per read
_BIG = 1 << 15  # a payload this large is read straight into its own buffer
_EPOLLIN = select.EPOLLIN
_CONNECT_S = 10.0  # how long a first send waits for the peer to accept
_NOSIG = socket.MSG_NOSIGNAL  # a dead peer is an error to handle, not a SIGPIPE
# the receive buffer holds a prefix, a header and anything below _BIG whole
if _RX < 12 + MAX_HEADER + _BIG:
    raise ImportError("amnet's tcp conduit: _RX is too small for its _BIG")


class _In:
    """One accepted connection: its read state. Until its hello proved the job's secret it
    holds only room for the hello (a stranger costs the conduit 68 bytes)."""

    __slots__ = ("big", "bigpos", "buf", "end", "header", "hello", "mv", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(_HELLO.size + _MAC)
        self.mv = memoryview(self.buf)
        self.end = 0
        self.hello = False  # the peer's hello was read and proved the secret
        self.big: Any = None  # a large payload being read into its own buffer
        self.bigpos = 0
        self.header = b""


class _Out:
    """One connection to a peer: its send lock and backlog."""

    __slots__ = ("backlog", "dead", "lock", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.backlog: collections.deque = collections.deque()  # memoryviews, in order
        self.dead = False  # the peer is gone: further messages to it are dropped


def _nbytes(payload: Any) -> int:
    return len(payload) if isinstance(payload, bytes) else memoryview(payload).nbytes


@register_conduit("tcp")
class TcpConduit(SocketConduit):
    """Plain TCP, read and written by the calling threads. See the module docstring."""

    encrypts = False

    def __init__(self, proc: int, procs: int, bind_host: str = "127.0.0.1",
                 curve: dict[str, str] | None = None, options: Any = None,
                 secret: str | None = None) -> None:
        super().__init__(proc, procs, bind_host, curve, options, secret)
        self._refused = 0
        self._nonces: set[bytes] = set()  # of the hellos admitted: a replay is refused
        if curve:
            from .._errors import ConfigError

            raise ConfigError("the tcp conduit does not encrypt, and this job uses CurveZMQ "
                              "(it reaches beyond this host): use AMNET_CONDUIT=zmq, or "
                              "--insecure on a trusted network")
        seg = getattr(options, "segment_size", 64 << 20) if options is not None else 64 << 20
        # the largest message a peer sends is a put/get of a whole segment (as zmq's limit)
        self._max_payload = max(seg, 16 << 20) + 2 * MAX_HEADER
        ls = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET,
                           socket.SOCK_STREAM)
        ls.bind((bind_host, 0))
        ls.listen(max(16, procs))
        ls.setblocking(False)
        self._listen = ls
        port = ls.getsockname()[1]
        host = f"[{bind_host}]" if ":" in bind_host else bind_host
        self._address = f"tcp://{host}:{port}"
        self._in: dict[int, _In] = {}
        self._inbox: collections.deque = collections.deque()
        self._ep = select.epoll()
        self._ep.register(ls.fileno(), _EPOLLIN)
        self._fd = self._ep.fileno()  # _idle[0] is up once a look found nothing to deliver
        efd_poll = select.poll()  # poll(2), not select(2): no limit on descriptor numbers
        efd_poll.register(self._fd, select.POLLIN)
        self._fd_poll = efd_poll.poll
        self._pending: set[int] = set()  # peers with a backlog, for the flusher
        self._fcond = threading.Condition(threading.Lock())
        self._flusher: threading.Thread | None = None
        self._wake = -1  # an eventfd that wakes the flusher
        self._poller: Any = None
        self._poller_fds: tuple[int, ...] = ()

    # -- sending ------------------------------------------------------------------------
    def _connect(self, proc: int) -> _Out:
        host, _, port = self._peers[proc][len("tcp://"):].rpartition(":")
        host = host.strip("[]")
        deadline = time.monotonic() + _CONNECT_S
        while True:
            try:
                sock = socket.create_connection((host, int(port)), timeout=_CONNECT_S)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"the tcp conduit could not reach process "
                                          f"{proc} at {self._peers[proc]}: {e}") from e
                time.sleep(0.01)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = _HELLO.pack(_MAGIC, _VERSION, self.proc, proc, self.procs, os.urandom(16))
        sock.sendall(hello + hello_mac(self._secret, hello[-16:], hello[:-16]))
        sock.setblocking(False)
        return _Out(sock)

    def send(self, proc: int, header: bytes, payload: Any = None, copy: bool = True) -> None:
        out = self._conns[proc]
        if out is None:
            out = self._open(proc)
        if payload is None:
            frame: list = [_PRE.pack(len(header), 0) + header]
            n = 0
        else:
            n = _nbytes(payload)
            frame = [_PRE.pack(len(header) | _HAS, n) + header, payload]
        with out.lock:
            self._sent[proc] += 1
            self._bytes_sent[proc] += n
            if out.dead:
                return
            if not out.backlog:
                try:
                    k = out.sock.sendmsg(frame, (), _NOSIG)
                except BlockingIOError:
                    k = 0
                except OSError:
                    out.dead = True  # the peer is gone; the launcher ends the job
                    return
                if k == len(frame[0]) + n:
                    return
                self._queue(proc, out, frame, k, copy)
            else:
                self._queue(proc, out, frame, 0, copy)
                self._flush(proc, out)

    def _queue(self, proc: int, out: _Out, frame: list, skip: int, copy: bool) -> None:
        """Put what the kernel did not take of ``frame`` (all but ``skip`` bytes) in the
        backlog, copied unless ``copy`` is False, and have the flusher send it."""
        for part in frame:
            m = memoryview(part).cast("B")
            if skip >= len(m):
                skip -= len(m)
                continue
            m = m[skip:]
            skip = 0
            out.backlog.append(m if (not copy or isinstance(part, bytes)) else
                               memoryview(bytes(m)))
        if proc not in self._pending:
            with self._fcond:
                self._pending.add(proc)
                if self._flusher is None:
                    self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                    self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                                     name="amnet-tcp-flusher")
                    self._flusher.start()
                else:
                    os.eventfd_write(self._wake, 1)  # it may be polling other sockets
                self._fcond.notify()

    def _flush(self, proc: int, out: _Out) -> None:
        """Send what the backlog holds, as far as the kernel takes it (caller holds the lock)."""
        bl = out.backlog
        while bl:
            try:
                k = out.sock.sendmsg(list(itertools.islice(bl, 64)), (), _NOSIG)
            except BlockingIOError:
                return
            except OSError:
                out.dead = True
                bl.clear()
                break
            while k:
                head = bl[0]
                if k >= len(head):
                    k -= len(head)
                    bl.popleft()
                else:
                    bl[0] = head[k:]
                    k = 0
        self._pending.discard(proc)

    def _flush_loop(self) -> None:
        """The flusher thread: send backlogs as their sockets drain, sleep when none. A
        new backlog (or close) wakes it through ``_wake`` while it polls the others."""
        fcond, wake = self._fcond, self._wake
        while True:
            try:
                with fcond:
                    while not self._pending and not self._closed:
                        fcond.wait()
                    if self._closed:
                        return
                    procs = tuple(self._pending)
                pl = select.poll()
                pl.register(wake, select.POLLIN)
                outs = {}
                for proc in procs:
                    out = self._conns[proc]
                    fd = -1 if out is None or out.dead else out.sock.fileno()
                    if fd < 0:
                        self._pending.discard(proc)  # nothing more will go to it
                        continue
                    outs[fd] = (proc, out)
                    pl.register(fd, select.POLLOUT)
                for fd, _ in pl.poll(1000):
                    if fd == wake:
                        try:
                            os.eventfd_read(wake)
                        except BlockingIOError:
                            pass
                        continue
                    proc, out = outs[fd]
                    with out.lock:
                        if out.sock.fileno() >= 0:  # not closed by close()
                            self._flush(proc, out)
            except Exception as e:  # never die: a backlog would stay unsent
                print(f"amnet: the tcp conduit's flusher: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
                time.sleep(0.01)

    # -- receiving ----------------------------------------------------------------------
    def recv(self, ready: bool = False) -> tuple[bytes, Any] | None:
        inbox = self._inbox
        if inbox:
            return inbox.popleft()
        idle = self._idle
        if idle[0] and not ready:
            return None if self._quiet() else self._look(0.0)
        return self._look(0.0)

    def _quiet(self) -> bool:
        """The epoll descriptor is not readable (nothing arrived since the last look)."""
        if self._fd_poll(0):
            self._idle[0] = 0
            return False
        return True

    def _look(self, timeout: float) -> tuple[bytes, Any] | None:
        """Read what the ready sockets hold (waiting up to ``timeout`` s, -1: forever) and
        return the first message, if any."""
        inbox = self._inbox
        self._idle[0] = 0  # it is 1 only while nothing, not even inbox, waits (idle_signal)
        for _ in range(4):  # a new connection, a hello or part of a message: look again
            evs = self._ep.poll(timeout)
            for fd, ev in evs:
                self._event(fd, ev)
            if inbox:
                return inbox.popleft()
            if not evs:
                break
            timeout = 0.0
        self._idle[0] = 1
        return None

    def _event(self, fd: int, ev: int) -> None:
        conn = self._in.get(fd)
        if conn is not None:
            self._read(conn)
        elif fd == self._listen.fileno():
            self._accept()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._in[sock.fileno()] = _In(sock)
            self._ep.register(sock.fileno(), _EPOLLIN)

    def _drop_conn(self, conn: _In) -> None:
        fd = conn.sock.fileno()
        self._in.pop(fd, None)
        try:
            self._ep.unregister(fd)
        except (FileNotFoundError, OSError):
            pass
        conn.sock.close()

    def _read(self, conn: _In) -> None:
        sock = conn.sock
        big = conn.big
        if big is not None:  # the rest of a large payload, straight into its buffer
            while True:  # while the kernel has more of it
                try:
                    k = sock.recv_into(big[conn.bigpos:])
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    k = 0
                if not k:
                    self.dropped += 1  # the peer left in the middle of a message
                    return self._drop_conn(conn)
                conn.bigpos += k
                if conn.bigpos == len(big):
                    self._deliver(conn.header, big)
                    conn.big = None
                    return
        end = conn.end
        try:
            k = sock.recv_into(conn.mv[end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            k = 0
        if not k:  # the peer closed its side (it finished, or died)
            if not conn.hello:
                self._refused += 1  # it left without proving the secret
            elif end:
                self.dropped += 1  # in the middle of a message
            return self._drop_conn(conn)
        end += k
        if not conn.hello:
            conn.end = end
            if end == len(conn.buf) and self._admit(conn):
                self._read(conn)  # the messages behind the hello, into the real buffer
            return
        buf, mv = conn.buf, conn.mv
        pos = 0
        inbox = self._inbox
        while end - pos >= 12:
            w, pl = _PRE.unpack_from(buf, pos)
            hl = w & ~_HAS
            if hl > MAX_HEADER or pl > self._max_payload or (pl and not w & _HAS):
                self.dropped += 1  # not ours: the stream cannot be trusted any more
                return self._drop_conn(conn)
            a = pos + 12 + hl
            if end >= a + pl:
                header = bytes(mv[pos + 12:a])
                if w & _HAS:
                    self.bytes_received += pl
                    inbox.append((header, memoryview(buf[a:a + pl])))
                else:
                    inbox.append((header, None))
                self.received += 1
                pos = a + pl
                continue
            if end >= a and pl >= _BIG:  # read the rest straight into the payload's buffer
                big = memoryview(np.empty(pl, dtype=np.uint8))
                have = end - a
                big[:have] = mv[a:end]
                conn.header = bytes(mv[pos + 12:a])
                conn.big, conn.bigpos = big, have
                pos = end
            break
        if pos:
            rest = end - pos
            if rest:
                mv[:rest] = mv[pos:end]
            end = rest
        conn.end = end

    def _admit(self, conn: _In) -> bool:
        """Check the hello that ``conn.buf`` holds whole: True and ready for messages if it
        proves the job's secret, else the connection is refused (closed, counted)."""
        hello, mac = bytes(conn.buf[:_HELLO.size]), bytes(conn.buf[_HELLO.size:])
        magic, version, src, dst, procs, nonce = _HELLO.unpack(hello)
        if (magic != _MAGIC or version != _VERSION or procs != self.procs or src >= procs
                or dst != self.proc or nonce in self._nonces
                or not hmac.compare_digest(mac, hello_mac(self._secret, nonce, hello[:-16]))):
            self._refused += 1
            self._drop_conn(conn)
            return False
        self._nonces.add(nonce)
        conn.hello = True
        conn.buf = bytearray(_RX)
        conn.mv = memoryview(conn.buf)
        conn.end = 0
        return True

    @property
    def refused(self) -> int:
        return self._refused

    def _deliver(self, header: bytes, payload: Any) -> None:
        self.received += 1
        self.bytes_received += len(payload)
        self._inbox.append((header, payload))

    def recv_wait(self, timeout: float | None) -> tuple[bytes, Any] | None:
        inbox = self._inbox
        if inbox:
            return inbox.popleft()
        self._idle[0] = 0
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:  # an accepted connection, a flushed backlog or half a message: go on
            m = self._look(-1 if deadline is None else max(0.0, deadline - time.monotonic()))
            if m is not None or (deadline is not None and time.monotonic() >= deadline):
                return m

    def wait_readable(self, timeout: float | None) -> bool:
        if self._inbox:
            return True
        self._idle[0] = 0
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        return bool(self._fd_poll(ms))

    def wait_readable_fds(self, fds: Sequence[int], timeout: float | None) -> bool:
        if self._inbox:
            return True
        self._idle[0] = 0
        poller = self._poller
        if poller is None or self._poller_fds != tuple(fds):
            poller = select.poll()
            for fd in (self._fd, *fds):
                poller.register(fd, select.POLLIN)
            self._poller, self._poller_fds = poller, tuple(fds)
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        return bool(poller.poll(ms))

    def close(self, linger: float = 0.5) -> None:
        if not self._begin_close():
            return
        with self._fcond:
            self._fcond.notify()
            if self._flusher is not None:
                os.eventfd_write(self._wake, 1)
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(1.0)
            if not self._flusher.is_alive():
                os.close(self._wake)
        deadline = time.monotonic() + max(0.0, linger)
        for proc, out in enumerate(self._conns):
            if out is None:
                continue
            with out.lock:
                while out.backlog and not out.dead:
                    self._flush(proc, out)
                    left = deadline - time.monotonic()
                    if not out.backlog or left <= 0:
                        break
                    pl = select.poll()
                    pl.register(out.sock.fileno(), select.POLLOUT)
                    pl.poll(int(left * 1000) + 1)
                try:
                    out.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                out.sock.close()
        for conn in list(self._in.values()):
            conn.sock.close()
        self._in.clear()
        self._listen.close()
        self._ep.close()


__all__ = ["TcpConduit"]
