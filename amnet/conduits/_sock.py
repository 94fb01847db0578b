"""What the built-in conduits (``zmq`` and ``tcp``) share: an address per process, peers'
addresses, connections opened on first use under one lock, counters per destination, and an
idle flag with the descriptor to block on (see :meth:`Conduit.idle_signal`), and the job's
secret, which every connection must prove it holds."""

from __future__ import annotations

import abc
import secrets
import threading
from collections.abc import Sequence
from typing import Any

from ._base import Conduit, ConduitStatistics


class SocketConduit(Conduit):
    """A conduit whose subclass sets ``_address`` and ``_fd`` (the descriptor that becomes
    readable when messages may have arrived) while it starts, makes a connection to a peer
    in ``_connect`` (its ``send`` takes ``_conns[proc]``, else ``_open(proc)``), and counts
    in ``_sent``, ``_bytes_sent`` (per destination, under that destination's lock),
    ``received``, ``bytes_received`` and ``dropped``."""

    def __init__(self, proc: int, procs: int, bind_host: str = "127.0.0.1",
                 curve: dict[str, str] | None = None, options: Any = None,
                 secret: str | None = None) -> None:
        super().__init__(proc, procs, bind_host, curve, options, secret)
        self._secret = secret or secrets.token_hex(16)
        self._address = ""
        self._fd = -1
        self._peers: list[str] = []
        self._conns: list[Any] = [None] * procs  # by process, once opened (_open)
        self._open_lock = threading.Lock()  # opening a connection, and closing
        self._closed = False
        # _idle[0]: nothing can be received until _fd is readable (idle_signal); a bytearray
        # so that the engine's C hot path reads it too
        self._idle = bytearray(1)
        self._sent = [0] * procs
        self._bytes_sent = [0] * procs
        self.received = self.bytes_received = self.dropped = 0

    @property
    def refused(self) -> int:
        """Connections refused: they did not prove they hold the job's secret."""
        return 0

    @property
    def address(self) -> str:
        return self._address

    def set_peers(self, addresses: Sequence[str]) -> None:
        self._peers = self._checked_peers(addresses)

    def idle_signal(self) -> tuple[int, bytearray]:
        return self._fd, self._idle

    def fileno(self) -> int:
        return self._fd

    def _open(self, proc: int) -> Any:
        """Process ``proc``'s connection, opened on first use (``send`` found none): under
        ``_open_lock``, so that threads sending at once open one, and never once the
        conduit is closed."""
        with self._open_lock:
            conn = self._conns[proc]
            if conn is None:
                if self._closed:
                    raise RuntimeError("the conduit is closed")
                conn = self._conns[proc] = self._connect(proc)
            return conn

    @abc.abstractmethod
    def _connect(self, proc: int) -> Any:
        """A new connection to process ``proc`` (``_open`` calls it under its lock)."""

    def _opened(self) -> int:
        """How many peers a connection was opened to."""
        return sum(c is not None for c in self._conns)

    def statistics(self) -> ConduitStatistics:
        return ConduitStatistics(
            self.name, self._address, sum(self._sent), self.received, sum(self._bytes_sent),
            self.bytes_received, self.dropped, self._opened(), self.refused)

    def _begin_close(self) -> bool:
        """Mark the conduit closed: True the first time, False after (close is idempotent)."""
        with self._open_lock:
            if self._closed:
                return False
            self._closed = True
            return True
