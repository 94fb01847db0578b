"""The conduit interface and its registry, below the conduits (docs/design.md §7).

What every conduit builds on: the :class:`Conduit` base class, its statistics, the header
limit and :func:`register_conduit`. Conduits import this module; :mod:`amnet.conduits`,
the public face of the interface, re-exports all of it and imports amnet's own conduits, so
that they register. The promises a conduit keeps are told there.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

#: Longest header a conduit must carry (the AM header with 16 arguments is 148 bytes).
MAX_HEADER = 256


@dataclass(frozen=True, slots=True)
class ConduitStatistics:
    """Counters of one conduit, a frozen snapshot (``Conduit.statistics()``)."""

    name: str
    address: str
    sent: int
    received: int
    bytes_sent: int  # payload bytes only (headers are not counted)
    bytes_received: int
    dropped: int  # malformed messages refused (never delivered)
    peers: int  # processes this conduit has opened a connection to
    refused: int = 0  # connections refused: they did not prove they hold the job's secret


class Conduit(abc.ABC):
    """One process's endpoint on a transport.

    Args:
        proc: this process's index in the job.
        procs: the number of processes.
        bind_host: the IP address to listen on (``127.0.0.1`` when the job is on one host).
        curve: the job's CurveZMQ keys (see :mod:`amnet._security`), or None for none.
        options: the job's resolved configuration.
        secret: the job's secret, which every process of the job holds (``spec["token"]``);
            a conduit admits only connections that prove they hold it. None: a fresh random
            one, which admits no one (a job of one process).
    """

    name: ClassVar[str] = "?"
    #: Whether :meth:`fileno` is a descriptor to block on (False: it is -1, and the waits
    #: spin, then nap between looks).
    pollable: ClassVar[bool] = True
    #: Whether traffic is encrypted where it needs to be (jobs across hosts).
    encrypts: ClassVar[bool] = True

    def __init__(self, proc: int, procs: int, bind_host: str = "127.0.0.1",
                 curve: dict[str, str] | None = None, options: Any = None,
                 secret: str | None = None) -> None:
        self.proc = proc
        self.procs = procs

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """Where other processes reach this one; published in the job's address table."""

    @abc.abstractmethod
    def set_peers(self, addresses: Sequence[str]) -> None:
        """Learn every process's address (index = process). Connections may open lazily."""

    def _checked_peers(self, addresses: Sequence[str]) -> list[str]:
        """``addresses`` as a list, refused unless there is one per process: the first step
        of every conduit's :meth:`set_peers`."""
        if len(addresses) != self.procs:
            raise ValueError(f"expected {self.procs} addresses, got {len(addresses)}")
        return list(addresses)

    @abc.abstractmethod
    def send(self, proc: int, header: bytes, payload: Any = None, copy: bool = True) -> None:
        """Queue one message for process ``proc`` and return without waiting for it.

        ``payload`` (optional, bytes-like) travels as its own frame. With ``copy=False`` the
        conduit may keep a reference to ``payload`` until the bytes are on the wire: the
        caller must not change it until the message is known to be delivered.
        """

    #: Payloads of at least this many bytes may go out with :meth:`send_direct` (None: the
    #: conduit gains nothing by it; the core then copies, through :meth:`send`).
    direct_min: int | None = None

    def send_direct(self, proc: int, header: bytes, payload: Any) -> Callable[[], bool]:
        """Send like :meth:`send`, from ``payload`` itself, and return ``done()``: true once
        the conduit no longer needs ``payload`` (local completion: the caller may reuse it).

        The caller keeps ``payload`` unchanged until then and receives meanwhile (a peer may
        need this process to take its messages before it can take ours). The default copies
        (``send(copy=True)``), so its ``done()`` is true at once; a conduit that can hand the
        caller's buffer to its transport (``mpi``: an ``MPI_Isend`` of a put's data, instead
        of a bounce copy) overrides it and sets :attr:`direct_min`.
        """
        self.send(proc, header, payload, True)
        return _always

    @abc.abstractmethod
    def recv(self, ready: bool = False) -> tuple[bytes, Any] | None:
        """The next message as ``(header, payload or None)``, or None if none is ready.

        ``payload`` is a buffer that stays valid while it is referenced. Malformed input is
        dropped and counted, never returned. ``ready=True`` says the caller was just told
        the conduit is readable (a hint that may skip a readiness check; never a promise).
        """

    def recv_wait(self, timeout: float | None) -> tuple[bytes, Any] | None:
        """Like :meth:`recv`, but block up to ``timeout`` seconds (None: forever) for a
        message. Conduits may override it with something cheaper than wait + recv."""
        if self.wait_readable(timeout):
            return self.recv(True)
        return None

    @abc.abstractmethod
    def wait_readable(self, timeout: float | None) -> bool:
        """Block up to ``timeout`` seconds (None: forever) until a message may be ready."""

    def wait_readable_fds(self, fds: Sequence[int], timeout: float | None) -> bool:
        """Block up to ``timeout`` seconds until a message may be ready or one of ``fds``
        (level-triggered descriptors, such as the shared-memory doorbell) is readable.
        Returns whether anything may be ready. The default polls :meth:`fileno` with
        ``select``; conduits whose descriptor is edge-triggered override it."""
        import select

        if not fds:
            return self.wait_readable(timeout)
        r, _, _ = select.select([self.fileno(), *fds], [], [], timeout)
        return bool(r)

    def set_lander(self, land: Callable[[bytes, int], Any] | None) -> None:
        """Optional: ``land(header, n)`` says where the ``n``-byte payload of the message
        ``header`` is to be stored (a writable buffer of ``n`` bytes, in a rank's segment) or
        None. A conduit that can receive a payload straight into that buffer does (the
        ``mpi`` conduit, for payloads of its bulk messages) and returns the buffer itself as
        the payload, which the core then does not copy again. The default ignores it."""
        return None

    def idle_signal(self) -> tuple[int, bytearray] | None:
        """A cheap "still nothing" test for the engine's hot path, or None (the default: the
        engine calls :meth:`recv`). ``(fd, flag)``: while ``flag[0]`` is nonzero the conduit
        has nothing to receive until ``fd`` becomes readable, so a zero-timeout poll of
        ``fd`` answers for it; the conduit clears the flag whenever that stops being true."""
        return None

    @abc.abstractmethod
    def fileno(self) -> int:
        """A file descriptor that becomes readable when messages may have arrived; -1 for a
        conduit that is not ``pollable``."""

    def count_dropped(self) -> None:
        """Count a message the core refused (a malformed or out-of-range header)."""
        self.dropped = getattr(self, "dropped", 0) + 1

    @abc.abstractmethod
    def statistics(self) -> ConduitStatistics:
        """A snapshot of the counters."""

    @abc.abstractmethod
    def close(self, linger: float = 0.5) -> None:
        """Flush for at most ``linger`` seconds, then release everything. Idempotent."""


def _always() -> bool:
    return True


#: Every registered conduit class by name.
CONDUITS: dict[str, type[Conduit]] = {}


def register_conduit(name: str) -> Callable[[type[Conduit]], type[Conduit]]:
    """Class decorator: register a :class:`Conduit` subclass as ``name``."""

    def deco(cls: type[Conduit]) -> type[Conduit]:
        if name in CONDUITS and CONDUITS[name] is not cls:
            raise ValueError(f"a conduit named {name!r} is already registered")
        cls.name = name
        CONDUITS[name] = cls
        return cls

    return deco


for _cls in (Conduit, ConduitStatistics):  # their public name: reprs, pickles and help say
    _cls.__module__ = "amnet.conduits"  # amnet.conduits.X, where users import them
del _cls
