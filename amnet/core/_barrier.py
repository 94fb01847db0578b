"""Split-phase barriers over AMs: a dissemination barrier that also checks names.

Round ``k`` (of ``ceil(log2 n)``), rank ``r`` sends what it knows to ``(r + 2**k) % n`` and
waits for the message of ``(r - 2**k) % n``; after the last round every rank has heard,
directly or not, from every other. What travels is the smallest and largest name hash seen
(with the ranks that passed them), so every rank learns of a name mismatch in the same
barrier and raises :class:`amnet.BarrierMismatch` naming two ranks that disagreed. An
anonymous barrier (``name=None``) carries no name and matches anything.

Rounds advance on whichever thread makes progress (the arrival handler forwards), so a rank
that notified and went back to computing does not hold the others up.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from .._errors import BarrierMismatch, BarrierStateError

BIG = (1 << 63) - 1


def name_hash(name: Any) -> int:
    """The int64 a barrier name travels as.

    Raises:
        TypeError: the name is not None, an int or a str.
    """
    if isinstance(name, bool) or not isinstance(name, int | str):
        raise TypeError(f"a barrier name must be None, an int or a str, got "
                        f"{type(name).__name__}")
    if isinstance(name, int) and -(1 << 63) <= name <= BIG:
        return name
    digest = hashlib.blake2b(repr(name).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class Barrier:
    """The barrier state of one rank (see the module docstring)."""

    def __init__(self, eng: Any, rank: int) -> None:
        self.eng = eng
        self.rank = rank
        n = eng.size
        self.rounds = max(0, (n - 1).bit_length())
        # re-entrant: sending a round's message may find a shared-memory queue full, and
        # the sender then runs arriving messages, this barrier's among them
        self.lock = threading.RLock()
        self.epoch = 0  # barriers notified so far; the current one is self.epoch
        self.pending = False
        self.done = False
        self.round = 0
        self.sent = False
        self.name: Any = None
        self.state = (0, BIG, -1, -BIG - 1, -1)  # has_name, min hash, its rank, max, its rank
        self.arrivals: dict[tuple[int, int], tuple[int, ...]] = {}

    def notify(self, name: Any) -> None:
        h = None if name is None else name_hash(name)
        with self.lock:
            if self.pending:
                raise BarrierStateError(
                    f"barrier_notify on rank {self.rank} while barrier #{self.epoch} is still "
                    "pending; call barrier_wait (or barrier_try until True) first")
            self.epoch += 1
            self.pending = True
            self.done = False
            self.round = 0
            self.sent = False
            self.name = name
            self.state = ((0, BIG, -1, -BIG - 1, -1) if h is None else
                          (1, h, self.rank, h, self.rank))
            self._advance()

    def _advance(self) -> None:
        """Send and merge as far as arrivals allow (holding ``self.lock``)."""
        n = self.eng.size
        while self.round < self.rounds:
            if not self.sent:
                peer = (self.rank + (1 << self.round)) % n
                self.eng.send_sys(self.rank, peer, SYS_BARRIER,
                                  (self.epoch, self.round, *self.state))
                self.sent = True
            got = self.arrivals.pop((self.epoch, self.round), None)
            if got is None:
                return
            self.state = merge(self.state, got)
            self.round += 1
            self.sent = False
        self.done = True

    def arrived(self, epoch: int, rnd: int, state: tuple[int, ...]) -> None:
        """A round's message arrived (in a handler): record it; the next round is sent from
        the next poll outside handler context (handlers never send requests)."""
        with self.lock:
            self.arrivals[(epoch, rnd)] = state
            if self.pending and not self.done and epoch == self.epoch and rnd == self.round:
                self.eng.defer(self.advance)

    def advance(self) -> None:
        with self.lock:
            if self.pending and not self.done:
                self._advance()

    def check_pending(self, what: str) -> None:
        if not self.pending:
            raise BarrierStateError(f"{what} on rank {self.rank} without a pending "
                                    "barrier_notify")

    def finish(self) -> None:
        """The barrier completed: leave it, raising on a name mismatch."""
        with self.lock:
            self.pending = False
            has, lo, lo_rank, hi, hi_rank = self.state
            name = self.name
        if has and lo != hi:
            mine = "no name" if name is None else repr(name)
            r1, r2 = sorted((lo_rank, hi_rank))
            raise BarrierMismatch(
                f"named barrier mismatch in barrier #{self.epoch}: rank {r1} and rank {r2} "
                f"passed different names (rank {self.rank} passed {mine})")


def merge(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not b[0]:
        return a
    if not a[0]:
        return b
    lo = min(a[1:3], b[1:3])  # ties go to the lower rank, so every rank names the same two
    hi = max(a[3:5], b[3:5], key=lambda x: (x[0], -x[1]))
    return (1, *lo, *hi)


SYS_BARRIER = 5  # index in _sys.SYSTEM_HANDLERS (checked there)
