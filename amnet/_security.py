"""CurveZMQ for a job's sockets (docs/design.md §7, "Security").

When any agent of a job runs on another host, ``amnet-run`` makes a fresh set of CURVE keys for
the job (:func:`make_job_keys`) and puts them in the job spec as ``spec["curve"]`` (``None``
when curve is off). Every socket of the job then uses them: a socket that binds (the launcher's
bootstrap ROUTER, a rank's data socket) calls :func:`apply_server`, a socket that connects to
one (an agent's or a rank's DEALER, a data PUSH/DEALER) calls :func:`apply_client`, both before
``bind``/``connect``.

All processes of the job share one server key pair and one client key pair. The server's
public key is itself a secret of the job: it travels only inside the spec and never on the
wire (the CURVE handshake proves knowledge of it without sending it), so a peer that lacks the
keys cannot complete the handshake; zmq drops its connection before a single message reaches
the application. A peer with the wrong keys fares the same. Accepted *client* keys are not
checked further: that would need a ZAP handler thread in every process that binds, and would
add nothing, as the client keys travel in the same spec as the server public key.

This module is shared by the launcher (``amnet.launch``) and the ranks (``amnet.core``); it
imports neither.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping

import zmq

from ._errors import ConfigError

__all__ = [
    "INSECURE_WARNING", "KEY_NAMES", "CurveUnavailable", "apply_client", "apply_server",
    "bootstrap_exposed", "is_local_host", "make_job_keys", "mechanism", "needs_curve",
    "require_curve",
]

#: the key names of a job's keys dict (values: 40-character z85 text)
KEY_NAMES = ("server_public", "server_secret", "client_public", "client_secret")

#: what ``--insecure`` (``amnet.run(..., insecure=True)``) says on stderr, one line
INSECURE_WARNING = (
    "WARNING: --insecure: CurveZMQ is OFF: this job's bootstrap and data traffic crosses the "
    "network unauthenticated and unencrypted; anyone who can reach its ports can read it or "
    "inject into it")

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


def _key(keys: Mapping[str, str], name: str) -> bytes:
    value = keys[name]
    return value.encode("ascii") if isinstance(value, str) else bytes(value)


def apply_server(sock: zmq.Socket, keys: Mapping[str, str] | None) -> None:
    """Make ``sock`` (a socket that binds: ROUTER, PULL) a CURVE server with the job's keys.

    Call it before ``bind``. A no-op when ``keys`` is ``None`` (curve off).

    Raises:
        CurveUnavailable: libzmq has no CURVE support.
    """
    if keys is None:
        return
    require_curve("the job spec asks for CurveZMQ")
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, _key(keys, "server_secret"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, _key(keys, "server_public"))


def apply_client(sock: zmq.Socket, keys: Mapping[str, str] | None) -> None:
    """Make ``sock`` (a socket that connects: DEALER, PUSH) a CURVE client of the job's servers.

    Call it before ``connect``. A no-op when ``keys`` is ``None`` (curve off).

    Raises:
        CurveUnavailable: libzmq has no CURVE support.
    """
    if keys is None:
        return
    require_curve("the job spec asks for CurveZMQ")
    sock.setsockopt(zmq.CURVE_SERVERKEY, _key(keys, "server_public"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, _key(keys, "client_public"))
    sock.setsockopt(zmq.CURVE_SECRETKEY, _key(keys, "client_secret"))


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
