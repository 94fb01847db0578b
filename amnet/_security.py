"""Who may talk to a job's sockets: the job's secret, PLAIN or CURVE, and ``--insecure``.

Every socket of a job that listens (the launcher's bootstrap service, each process's conduit
socket) admits only connections that prove they hold the job's **secret**, before it reads
any of their messages. The secret is ``spec["token"]``, 128 random bits that ``amnet-run``
makes per job; it reaches agents on standard input or in the environment and ranks from
their agent, never on a command line (see :mod:`amnet.launch.spawners`). A stranger on the
same host, or anyone who can reach the ports, is refused (docs/user-guide.md, "Security").

- **zmq sockets** (the bootstrap service and the ``zmq`` conduit): a socket that binds gets
  a :class:`amnet._guard.Guard`, a ZAP handler that checks every handshake; a socket that
  connects calls :func:`apply_client` before ``connect``. On one host the mechanism is
  PLAIN with the secret as password: a check at connection time, nothing per message, and
  the password never leaves the host (a loopback or abstract Unix socket, which other users
  cannot read). When any agent runs on another host, ``amnet-run`` also makes CURVE keys for
  the job (:func:`make_job_keys`, ``spec["curve"]``): every socket is then a CURVE server or
  client, which encrypts and authenticates, and the guard admits only the job's client key.
- **The ``tcp`` conduit** opens each connection with a hello that carries an HMAC-SHA256 of
  the secret over the hello and a fresh nonce (:func:`hello_mac`); the receiver checks it
  before it reads anything more and refuses a nonce it has seen (no replay).

All processes of a job share one CURVE server key pair and one client key pair. The server's
public key is itself a secret of the job: it travels only inside the spec and never on the
wire (the CURVE handshake proves knowledge of it without sending it).

``--insecure`` (jobs across hosts only) turns encryption off: PLAIN's password and the tcp
conduit's hello then cross the network in clear, which keeps out whoever cannot see the job's
traffic, not whoever can.

This module is shared by the launcher (``amnet.launch``) and the ranks (``amnet.core``); it
imports neither.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Iterable, Mapping

import zmq

from ._errors import ConfigError

__all__ = [
    "INSECURE_WARNING", "KEY_NAMES", "CurveUnavailable", "apply_client", "apply_server",
    "bootstrap_exposed", "curve_key", "hello_mac", "is_local_host", "make_job_keys",
    "mechanism", "needs_curve", "require_curve",
]

#: the key names of a job's keys dict (values: 40-character z85 text)
KEY_NAMES = ("server_public", "server_secret", "client_public", "client_secret")

#: what ``--insecure`` (``amnet.run(..., insecure=True)``) says on stderr, one line
INSECURE_WARNING = (
    "WARNING: --insecure: CurveZMQ is OFF: this job's bootstrap and data traffic, and the "
    "secret that admits its connections, cross the network unencrypted; anyone who can watch "
    "that network can read the traffic, or take the secret and inject into the job")

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}


class CurveUnavailable(ConfigError):
    """Raised when a job needs CurveZMQ but the installed libzmq was built without it."""


def make_job_keys() -> dict[str, str]:
    """Fresh CURVE key pairs for one job: a server pair and a client pair, as z85 ``str``.

    Keys: ``server_public``, ``server_secret``, ``client_public``, ``client_secret``.

    Raises:
        CurveUnavailable: libzmq has no CURVE support.
    """
    require_curve()
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    return {"server_public": server_public.decode("ascii"),
            "server_secret": server_secret.decode("ascii"),
            "client_public": client_public.decode("ascii"),
            "client_secret": client_secret.decode("ascii")}


def require_curve(why: str = "this job needs CurveZMQ") -> None:
    """Raise :class:`CurveUnavailable` with a clear message if libzmq lacks CURVE."""
    if not zmq.has("curve"):
        raise CurveUnavailable(
            f"{why}, but this host's libzmq {zmq.zmq_version()} was built without CURVE "
            f"support (zmq.has('curve') is False): install a pyzmq wheel (they bundle "
            f"libzmq with CURVE) or a libzmq built with libsodium; on a trusted network, "
            f"--insecure runs the job without it")


def curve_key(keys: Mapping[str, str], name: str) -> bytes:
    """One of the job's CURVE keys (``KEY_NAMES``) as z85 bytes."""
    value = keys[name]
    return value.encode("ascii") if isinstance(value, str) else bytes(value)


def apply_server(sock: zmq.Socket, keys: Mapping[str, str] | None) -> None:
    """Make ``sock`` (a socket that binds: ROUTER, PULL) a CURVE server with the job's keys.

    Call it before ``bind``. A no-op when ``keys`` is ``None`` (curve off). Only the half
    of the job's guard that picks the mechanism: every server socket of a job gets a
    :class:`amnet._guard.Guard`, which calls this.

    Raises:
        CurveUnavailable: libzmq has no CURVE support.
    """
    if keys is None:
        return
    require_curve("the job spec asks for CurveZMQ")
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, curve_key(keys, "server_secret"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, curve_key(keys, "server_public"))


def apply_client(sock: zmq.Socket, keys: Mapping[str, str] | None, secret: str) -> None:
    """Make ``sock`` (a socket that connects: DEALER, PUSH) present the job's credentials.

    With ``keys``, a CURVE client of the job's servers; without, PLAIN credentials: user
    ``amnet``, the job's ``secret`` as password. Call it before ``connect``.

    Raises:
        CurveUnavailable: ``keys`` are given and libzmq has no CURVE support.
        ValueError: ``secret`` is empty.
    """
    if keys is not None:
        require_curve("the job spec asks for CurveZMQ")
        sock.setsockopt(zmq.CURVE_SERVERKEY, curve_key(keys, "server_public"))
        sock.setsockopt(zmq.CURVE_PUBLICKEY, curve_key(keys, "client_public"))
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve_key(keys, "client_secret"))
        return
    if not secret:
        raise ValueError("a job's sockets need the job's secret (spec['token'])")
    from ._guard import PLAIN_USER

    sock.setsockopt(zmq.PLAIN_USERNAME, PLAIN_USER)
    sock.setsockopt(zmq.PLAIN_PASSWORD, secret.encode())


def hello_mac(secret: str, nonce: bytes, hello: bytes) -> bytes:
    """The tcp conduit's proof of the job's secret: HMAC-SHA256 keyed with the secret over
    a label, the connection's ``nonce`` and its ``hello`` (sender, receiver, job size)."""
    return hmac.new(secret.encode(), b"amnet-tcp-hello\0" + nonce + hello,
                    hashlib.sha256).digest()


def mechanism(sock: zmq.Socket) -> str:
    """The security mechanism ``sock`` was set up with: ``"CURVE"``, ``"NULL"``, ..."""
    value = sock.getsockopt(zmq.MECHANISM)
    names = {zmq.NULL: "NULL", zmq.PLAIN: "PLAIN", zmq.CURVE: "CURVE", zmq.GSSAPI: "GSSAPI"}
    return names.get(value, str(value))


def is_local_host(host: str) -> bool:
    """True when ``host`` names this machine (loopback, ``localhost``, our host name)."""
    if host in _LOCAL_NAMES or host == socket.gethostname():
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bootstrap_exposed(bootstrap_addr: str | None) -> bool:
    """True when ``--bootstrap-addr`` binds the bootstrap service beyond loopback."""
    if not bootstrap_addr:
        return False
    a = bootstrap_addr.removeprefix("tcp://")
    host = a.rpartition(":")[0] if a.count(":") == 1 or a.startswith("[") else a
    return not is_local_host(host)


def needs_curve(agent_hosts: Iterable[str | None], bootstrap_addr: str | None = None) -> bool:
    """Whether a job must use CurveZMQ.

    ``agent_hosts`` are the hosts its agents run on, ``None`` for a host not known in advance
    (inside a Slurm or MPI allocation); curve is needed when any of them is not this host, or
    when the bootstrap service is bound to an address beyond loopback.
    """
    if bootstrap_exposed(bootstrap_addr):
        return True
    return any(h is None or not is_local_host(h) for h in agent_hosts)
