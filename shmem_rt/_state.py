"""One PE's shmem_rt state, the ``shmem`` amnet extension that carries it, and the calling
rank-thread's PE.

shmem_rt is built the way an outside runtime would be: an :class:`amnet.Extension` (entry
point ``shmem`` in the ``amnet.extensions`` group), the endpoint's public API (put/get,
atomics, segment views, ``ep.coll``) and its :class:`amnet.Port`. It imports nothing
private of amnet (tests/test_shmem.py checks).

A PE is an amnet rank. Every PE's segment holds its symmetric heap: the same allocation
sits at the same offset of every PE's segment, so an offset names a symmetric object on
every PE. The first :data:`RESERVED` bytes are shmem_rt's own symmetric words (the world
barrier's, one int64 per round of its dissemination); everything else is allocated from
the heap.

Messages (system AMs of the extension); within a node every operation is a direct copy or a
hardware atomic on the target's segment:

=============  ===========================================================================
PUT_SIGNAL     ``(opid, offset, sig_offset, sigop, value)`` + data: write the data, then
               update the signal word (set or add), then reply DONE
DONE           completes the sender's put_signal (counted by ``quiet``)
NUDGE          nothing: its arrival wakes a PE of my node that sleeps in a wait on a word
               this PE just stored into (more PEs than cores only; :meth:`PE.touched`)
=============  ===========================================================================
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import amnet

PUT_SIGNAL, DONE, NUDGE = range(3)
RESERVED = 1024  # bytes at the start of every segment that no allocation gets: the world
#                 barrier's words (one int64 per round of its dissemination, up to 512
#                 bytes), then SLEEPING
SLEEPING = 512  # an int64: how many waits of this PE sleep on a stored word (block mode)
SIG_SET, SIG_ADD = 0, 1


class PE:
    """One PE's state (what the ``shmem`` extension attaches to its endpoint)."""

    def __init__(self, port: amnet.Port) -> None:
        from ._heap import SymHeap

        self.port = port
        self.ep = port.endpoint
        self.me = port.rank
        self.npes = port.size
        self.seg = port.segment  # my segment, numpy uint8
        self.heap = SymHeap(RESERVED, port.segment_size)
        self.views: dict[int, Any] = {}  # pe -> its segment (numpy uint8) when on my node
        #: PEs whose memory this PE addresses directly (its node's; with ``--no-pshm`` only
        #: the rank-threads of its process): stores and hardware atomics, no message
        self.local = [self.ep.segment_view(p) is not None for p in range(self.npes)]
        #: other PEs run as rank-threads of my process (sharing its interpreter lock)
        self.siblings = any(self.ep.same_process(p) for p in range(self.npes) if p != self.me)
        #: the other PEs of my node: a store into their memory wakes no one by itself
        self.others = [self.local[p] and p != self.me for p in range(self.npes)]
        self.any_other = any(self.others)  # a PE that can store into my memory directly
        #: with more PEs than cores (amnet's block wait mode) waits sleep: a store into
        #: another PE of my node then nudges it when it sleeps (:meth:`touched`)
        self.nudging = self.ep.wait_mode == "block" and any(self.others)
        self.nudged = 0  # NUDGE messages received
        self.initialized = False
        self.finalized = False
        self.ended_by = "shmem.finalize()"  # what finalized it (or amnet.finalize())
        self.thread_level: int | None = None  # set by init_thread
        self.pending = False  # puts/gets to other nodes started since the last quiet
        self.teams: Any = None  # _team.Teams, made by init
        self.locks: dict[int, Any] = {}

    def touched(self, pe: int) -> None:
        """After this PE stored into (or ran an atomic on) node-local PE ``pe``'s memory,
        with ``nudging`` on: if ``pe`` sleeps in a wait on a stored word, wake it with an
        empty message (its arrival ends the sleep, in another process or in a rank-thread
        of mine; the wait then reads the word again).

        The waiter raises its SLEEPING count with an atomic before its last look at the
        word, and the check here is an atomic after the store: both are full barriers, so
        either the waiter sees the store or this sees the count."""
        if self.others[pe] and self.ep.atomic(pe, SLEEPING, "fadd", 0):
            self.port.send(pe, NUDGE)

    def view(self, pe: int) -> Any:
        """PE ``pe``'s segment when it is on my node (a numpy uint8 view), else None."""
        try:
            return self.views[pe]
        except KeyError:
            v = self.views[pe] = self.ep.segment_view(pe) if self.local[pe] else None
            return v


# -- the extension's handlers (messages from PEs on other nodes) ----------------------------
def h_put_signal(port: amnet.Port, src: int, args: tuple, payload: Any, is_reply: bool) -> None:
    if is_reply or len(args) != 5:
        return port.refuse()
    opid, off, soff, sigop, value = args
    size = port.segment_size
    n = 0 if payload is None else len(payload)
    if (off < 0 or off + n > size or soff < 0 or soff % 8 or soff + 8 > size
            or sigop not in (SIG_SET, SIG_ADD)):
        return port.refuse()
    if n:
        port.segment[off:off + n] = np.frombuffer(payload, np.uint8)
    port.endpoint.atomic(port.rank, soff, "set" if sigop == SIG_SET else "fadd",
                         value & 0xFFFFFFFFFFFFFFFF, dtype="u8")
    port.reply(src, DONE, (opid,))


def h_done(port: amnet.Port, src: int, args: tuple, payload: Any, is_reply: bool) -> None:
    if not is_reply or len(args) != 1:
        return port.refuse()
    op = port.pending(args[0], src)
    if op is not None:
        port.finish(args[0], op, None)


def h_nudge(port: amnet.Port, src: int, args: tuple, payload: Any, is_reply: bool) -> None:
    """Nothing to do but count it: the message's arrival woke this PE's sleeping wait."""
    if is_reply or args or payload is not None:
        return port.refuse()
    port.state.nudged += 1


EXTENSION = amnet.Extension("shmem", (h_put_signal, h_done, h_nudge), attach=PE)

# -- identity per rank-thread ---------------------------------------------------------------
_tls = threading.local()


def current() -> PE:
    """The calling rank-thread's PE, initialised on its first call as shmem4py initialises
    on import (``shmem.init()`` made explicitly is the same, and collective; ``shmem_rt.rc``
    says how, or that the program does it).

    Raises:
        amnet.InitError: after ``shmem.finalize()`` on this PE, or before ``shmem.init()``
            with ``shmem_rt.rc.initialize`` False.
    """
    pe = getattr(_tls, "pe", None)
    if pe is None:
        from ._init import start

        start()
        pe = _tls.pe
    if pe.finalized:
        raise amnet.InitError(f"shmem_rt call after {pe.ended_by} on this PE")
    return pe


def peek() -> PE | None:
    return getattr(_tls, "pe", None)


def set_current(pe: PE | None) -> None:
    _tls.pe = pe
