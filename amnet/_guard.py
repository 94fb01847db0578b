"""The gatekeeper of a job's zmq sockets that bind: a ZAP handler thread per zmq context.

Every socket of a job that binds (the launcher's bootstrap ROUTER, each process's ``zmq``
conduit PULL) admits only connections that prove, in zmq's handshake, that they hold the
job's secret (see :mod:`amnet._security` for what the secret is and how clients present it).
zmq asks the *ZAP handler* of the socket's context (RFC 27, ZeroMQ Authentication Protocol)
about every handshake; :class:`Guard` is that handler:

- with the PLAIN mechanism (every job whose sockets stay on this host, and ``--insecure``
  jobs) it admits user ``amnet`` with the job's secret as password;
- with CURVE (jobs across hosts) it admits only the job's client public key; the CURVE
  handshake itself already needs the job's server public key, which never crosses the wire.

A connection refused here is closed by zmq before any of its messages reaches the
application, and costs the job nothing after the handshake: PLAIN and the ZAP handler do
nothing per message. The guard also watches its socket's events (``zmq_socket_monitor``) to
count what it refused: failed handshakes (a wrong secret, no secret, another mechanism) and
connections that closed without ever completing one (garbage that is not ZMTP at all).

The thread sleeps in ``zmq_poll`` between handshakes and ends when its context is
terminated (``ctx.term()`` raises ``ContextTerminated`` in it; it closes its sockets and
returns, which lets ``term`` finish).
"""

from __future__ import annotations

import hmac
import itertools
import threading
from collections.abc import Callable, Mapping

import zmq
import zmq.utils.z85

#: the user name of PLAIN credentials (the password is the job's secret)
PLAIN_USER = b"amnet"
#: the ZAP domain of every server socket of a job
ZAP_DOMAIN = b"amnet"
_ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_ids = itertools.count()


class Guard:
    """Serves ZAP for ``ctx`` and makes ``sock`` (a socket of ``ctx`` that binds) a server
    that admits only the job's processes. Call it before ``sock.bind``.

    Args:
        ctx: the zmq context of ``sock``; it must have no other ZAP handler.
        sock: the server socket (ROUTER, PULL).
        secret: the job's secret (``spec["token"]``).
        curve: the job's CURVE keys, or None for PLAIN (see :mod:`amnet._security`).
        on_refused: called (from the guard's thread) once for every refused connection.
        count_silent: count a connection that closed without completing a handshake (garbage
            that is not ZMTP) as refused too. Right for a conduit's socket, whose peers stay
            connected until the whole job ends; wrong for the bootstrap service, which its
            clients leave as their processes end.

    ``refused`` counts refused connections.

    Raises:
        CurveUnavailable: ``curve`` is given and libzmq has no CURVE support.
    """

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket, secret: str,
                 curve: Mapping[str, str] | None = None,
                 on_refused: Callable[[], None] | None = None,
                 count_silent: bool = True) -> None:
        from ._security import apply_server, curve_key

        self._password = secret.encode()
        self._client_key = None if curve is None else zmq.utils.z85.decode(
            curve_key(curve, "client_public"))
        self._on_refused = on_refused
        self._silent = count_silent
        self.failed = self.disconnected = 0
        if curve is None:
            sock.plain_server = True
        else:
            apply_server(sock, curve)  # first: it may raise, and nothing is open yet
        sock.zap_domain = ZAP_DOMAIN
        zap = ctx.socket(zmq.REP)
        zap.linger = 0
        try:
            zap.bind(_ZAP_ENDPOINT)
        except zmq.ZMQError:
            zap.close()
            raise RuntimeError("amnet: this zmq context already has a ZAP handler") from None
        addr = f"inproc://amnet-guard-{next(_ids)}"
        sock.monitor(addr, (zmq.EVENT_DISCONNECTED if count_silent else 0) | _FAILED)
        mon = ctx.socket(zmq.PAIR)
        mon.linger = 0
        mon.connect(addr)
        self._zap, self._mon = zap, mon
        self._thread = threading.Thread(target=self._serve, name="amnet-guard", daemon=True)
        self._thread.start()

    @property
    def refused(self) -> int:
        # every refused connection disconnects, with or without a failed handshake before
        return max(self.failed, self.disconnected) if self._silent else self.failed

    def _admit(self, mechanism: bytes, credentials: list[bytes]) -> bool:
        if mechanism == b"PLAIN" and self._client_key is None and len(credentials) == 2:
            user, password = credentials
            return (hmac.compare_digest(user, PLAIN_USER)
                    and hmac.compare_digest(password, self._password))
        if mechanism == b"CURVE" and self._client_key is not None and len(credentials) == 1:
            return hmac.compare_digest(credentials[0], self._client_key)
        return False

    def _serve(self) -> None:
        zap, mon = self._zap, self._mon
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(mon, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if zap in ready:
                    self._answer(zap.recv_multipart())
                if mon in ready:
                    self._event(mon.recv_multipart())
        except zmq.ContextTerminated:
            pass
        finally:
            zap.close(linger=0)
            mon.close(linger=0)

    def _event(self, frames: list[bytes]) -> None:
        """One monitor event (the first frame: event number, 16 bits, then a 32-bit value)."""
        event = int.from_bytes(frames[0][:2], "little")
        if event & _FAILED:
            self.failed += 1
            self._tell()
        elif event == zmq.EVENT_DISCONNECTED:
            self.disconnected += 1
            if self.disconnected > self.failed:
                self._tell()  # it never even started a handshake

    def _tell(self) -> None:
        if self._on_refused is not None:
            try:
                self._on_refused()
            except Exception:  # the guard must go on answering handshakes
                pass

    def _answer(self, request: list[bytes]) -> None:
        """One ZAP request (RFC 27): version, request id, domain, address, identity,
        mechanism, credentials...; the reply: version, request id, status, text, user, meta."""
        # a REP socket must answer every request, so a short one (libzmq never sends one) is
        # refused too rather than left unanswered
        version, rid, domain, _address, _identity, mechanism, *credentials = (
            request + [b""] * 6)[:max(6, len(request))]
        ok = (len(request) >= 6 and domain == ZAP_DOMAIN
              and self._admit(mechanism, credentials))
        self._zap.send_multipart([version or b"1.0", rid, b"200" if ok else b"400",
                                  b"OK" if ok else b"not a process of this job", b"", b""])

    def join(self, timeout: float = 5.0) -> None:
        """Wait for the thread to end (after the context was terminated)."""
        self._thread.join(timeout)


__all__ = ["PLAIN_USER", "ZAP_DOMAIN", "Guard"]
