"""Split-phase barriers over AMs: a dissemination barrier that also checks names.

Round ``k`` (of ``ceil(log2 n)``), rank ``r`` sends what it knows to ``(r + 2**k) % n`` and
waits for the message of ``(r - 2**k) % n``; after the last round every rank has heard,
directly or not, from every other. What travels is the smallest and largest name hash seen
(with the lowest ranks that passed them) and, for a named barrier only, those two names as
text (the message's payload), so every rank learns of a name mismatch in the same barrier and
raises :class:`amnet.BarrierMismatch` saying which name it passed and which names the others
did. An anonymous barrier (``name=None``) carries no name and matches anything; its messages
have no payload.

Rounds advance on whichever thread makes progress (the arrival handler forwards), so a rank
that notified and went back to computing does not hold the others up.

Where a rank is (``pending``, ``done``, ``epoch``, ``name``, ``waiting``) is kept in plain
attributes: the bootstrap client's I/O thread reads them, without a lock, when the launcher
asks where the ranks are (a timeout or Ctrl-C, see ``ProcessState.where``).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from .._errors import (
    BarrierMismatch,
    BarrierStateError,
    barrier_mismatch_message,
    barrier_name_text,
)

BIG = (1 << 63) - 1
NO_NAME = (0, BIG, -1, -BIG - 1, -1)  # has_name, min hash, its rank, max hash, its rank
NO_TEXT = (b"", b"")  # the names (shown, utf-8) of the two ranks of a state


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
        # what arrivals are recorded under: never held while sending. A handler that took
        # ``lock`` could wait for a rank-thread that holds it while its queue is full, and
        # that thread for the drain lock the handler's thread holds: both processes of a
        # node doing so at once hung (a CI run of test_barriers_with_rank_threads_at_depth_2)
        self.arrivals_lock = threading.Lock()
        self.epoch = 0  # barriers notified so far; the current one is self.epoch
        self.pending = False
        self.done = False
        self.waiting = False  # in barrier_wait (for the launcher's diagnosis only)
        self.round = 0
        self.sent = False
        self.name: Any = None
        self.hash: int | None = None
        self.state = NO_NAME
        self.texts = NO_TEXT
        self.arrivals: dict[tuple[int, int], tuple[tuple[int, ...], tuple[bytes, bytes]]] = {}

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
            self.hash = h
            if h is None:
                self.state, self.texts = NO_NAME, NO_TEXT
            else:
                text = barrier_name_text(name).encode("utf-8", "backslashreplace")
                self.state, self.texts = (1, h, self.rank, h, self.rank), (text, text)
            self._advance()

    def _advance(self) -> None:
        """Send and merge as far as arrivals allow (holding ``self.lock``)."""
        n = self.eng.size
        while self.round < self.rounds:
            if not self.sent:
                peer = (self.rank + (1 << self.round)) % n
                st = self.state
                if st[0]:  # named: the two names travel too (one when they are the same)
                    lo_t, hi_t = self.texts
                    self.eng.send_sys(self.rank, peer, SYS_BARRIER,
                                      (self.epoch, self.round, *st, len(lo_t)),
                                      payload=lo_t if st[1] == st[3] else lo_t + hi_t)
                else:
                    self.eng.send_sys(self.rank, peer, SYS_BARRIER,
                                      (self.epoch, self.round, *st))
                self.sent = True
            with self.arrivals_lock:
                got = self.arrivals.pop((self.epoch, self.round), None)
            if got is None:
                return
            self.state, self.texts = merge(self.state, self.texts, *got)
            self.round += 1
            self.sent = False
        self.done = True

    def arrived(self, epoch: int, rnd: int, state: tuple[int, ...],
                texts: tuple[bytes, bytes]) -> None:
        """A round's message arrived (in a handler): record it; the next round is sent from
        the next poll outside handler context (handlers never send requests).

        Never takes ``lock`` (see ``arrivals_lock``). The fields it reads may be changing
        under ``lock`` in another thread; that is safe: the arrival is recorded before they
        are read, so the thread advancing either finds it itself or, when it waits for this
        very round (what is read then), gets an advance deferred (one too many does
        nothing)."""
        with self.arrivals_lock:
            self.arrivals[(epoch, rnd)] = (state, texts)
        if self.pending and not self.done and epoch == self.epoch and rnd == self.round:
            self.eng.defer(self.advance, self.rank)

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
            lo_t, hi_t = self.texts
            name, h = self.name, self.hash
        if has and lo != hi:
            others = [(r, t.decode("utf-8", "replace"))
                      for r, t, x in ((lo_rank, lo_t, lo), (hi_rank, hi_t, hi)) if x != h]
            raise BarrierMismatch(barrier_mismatch_message(
                f"barrier #{self.epoch}", self.rank,
                None if name is None else barrier_name_text(name), others))


def merge(a: tuple[int, ...], at: tuple[bytes, bytes], b: tuple[int, ...],
          bt: tuple[bytes, bytes]) -> tuple[tuple[int, ...], tuple[bytes, bytes]]:
    """What two states know together, with the names of the ranks they keep. Ties go to the
    lower rank, so every rank ends up naming the same two."""
    if not b[0]:
        return a, at
    if not a[0]:
        return b, bt
    lo, lo_t = (b[1:3], bt[0]) if b[1:3] < a[1:3] else (a[1:3], at[0])
    hi, hi_t = (b[3:5], bt[1]) if (b[3], -b[4]) > (a[3], -a[4]) else (a[3:5], at[1])
    return (1, *lo, *hi), (lo_t, hi_t)


SYS_BARRIER = 5  # index in _sys.SYSTEM_HANDLERS (checked there)
