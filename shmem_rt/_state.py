"""One PE's shmem_rt state, the ``shmem`` amnet extension that carries it, and what the
layers above share of it: the waits (with the sleep and nudge protocol of a PE that shares
its cores, both halves here: :meth:`PE.wait` and :meth:`PE.touched`), the completion of
puts (:meth:`PE.complete`), and the team records and the world barrier (:class:`Teams`).
It imports nothing of shmem_rt but the heap; the calling rank-thread's PE is
:data:`shmem_rt._context.CONTEXT`.

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

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import amnet

from ._heap import SymHeap

PUT_SIGNAL, DONE, NUDGE = range(3)
RESERVED = 1024  # bytes at the start of every segment that no allocation gets: the world
#                 barrier's words (one int64 per round of its dissemination, up to 512
#                 bytes), then SLEEPING
SLEEPING = 512  # an int64: how many waits of this PE sleep on a stored word (block mode)
SIG_SET, SIG_ADD = 0, 1
WORLD, SHARED, INVALID = 0, 1, -1  # the predefined teams' numbers (TEAM_INVALID's: -1)

# -- waits: a wait reads the word where it is (see PE.wait) ---------------------------------
SLICE_S, MAX_SLICE_S = 20e-6, 1e-3
#: With more ranks than cores (amnet's ``block`` wait mode) a slice really sleeps: amnet
#: turns a wait shorter than its conduit's 1 ms poll into polling, which would keep every
#: core busy while the PE that is to store the word waits for one.
BLOCK_SLICE_S = 2e-3
SPIN_READS = 50  # reads of the word (a few µs) before the first wait with progress
NAP_S = 10e-6  # a wait's nap when other PEs share its process (the kernel makes it ~60 µs)


class PE:
    """One PE's state (what the ``shmem`` extension attaches to its endpoint)."""

    def __init__(self, port: amnet.Port) -> None:
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
        self.teams: Any = None  # Teams, made by init (shmem_rt._init)
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

    # -- waits ------------------------------------------------------------------------------
    def _slices(self) -> tuple[float, float]:
        if self.ep.wait_mode == "block":
            return BLOCK_SLICE_S, BLOCK_SLICE_S
        return SLICE_S, MAX_SLICE_S

    def wait(self, pred: Callable[[], Any], what: str) -> None:
        """Make progress until ``pred()`` holds; while it waits, a timeout's diagnosis says
        the PE waits in ``what``.

        A wait reads the word where it is: another PE's put or atomic within the node is a
        store into this PE's memory, seen without a message; from another node it arrives
        as an AM that the wait's progress runs. The wait spins while amnet spins (the
        ``spin`` wait mode) and otherwise re-reads the word after slices that grow from
        20 µs to 1 ms, serving AMs meanwhile; with more PEs than cores (amnet's ``block``
        wait mode) every slice is 2 ms of real sleep, so the PEs share the cores, and a
        store of another PE of the node ends the sleep (:meth:`touched`)."""
        for _ in range(SPIN_READS):  # a PE on my node may be about to store it
            if pred():
                return
        port = self.port
        s, top = self._slices()
        with port.waiting(what):
            if self.siblings and s < BLOCK_SLICE_S:
                # PEs of my process share one interpreter lock: a spinning wait would keep
                # the sibling that is to store the word from running for a whole switch
                # interval (5 ms). Sleeping a moment hands it the lock (and polls between
                # the naps).
                while True:
                    port.poll()
                    if pred():
                        return
                    time.sleep(NAP_S)
                    if pred():
                        return
            if self.nudging:  # a sleep that a store into my memory can end: see touched
                ep = self.ep
                while True:
                    ep.atomic(self.me, SLEEPING, "fadd", 1)
                    try:
                        if port.wait_until(pred, timeout=s):
                            return
                    finally:
                        ep.atomic(self.me, SLEEPING, "fadd", -1)
                    s = min(2 * s, top)
            if not self.any_other:  # only messages change my memory, and each ends a wait
                port.wait_until(pred)
                return
            while not port.wait_until(pred, timeout=s):
                s = min(2 * s, top)

    def wait_remote(self, check: Callable[[], Any], what: str) -> None:
        """Make progress until ``check()`` holds, where ``check`` itself communicates
        (reads a word on another node): it runs between waits, never as a wait's condition
        (a condition runs inside the progress engine, where a blocking call must not)."""
        port = self.port
        s, top = self._slices()
        with port.waiting(what):
            while not check():
                port.wait_until(_never, timeout=s)
                s = min(2 * s, top)

    def complete(self, what: str) -> None:
        """Complete this PE's puts, nbi operations and puts-with-signal to other nodes, if
        it started any since the last time (a timeout's diagnosis says the PE waits in
        ``what``)."""
        if self.pending:
            with self.port.waiting(what):
                self.ep.wait_nbi()
            self.pending = False


def _never() -> bool:
    return False


# -- teams ----------------------------------------------------------------------------------
class TeamRec:
    """One PE's view of one team (over an ``amnet.coll`` team)."""

    def __init__(self, coll_team: Any, members: list[int], me: int,
                 num_contexts: int = 0) -> None:
        self.coll = coll_team
        self.members = members  # world PE numbers, in team order
        self.index = members.index(me)
        self.n = len(members)
        self.valid = True
        self.num_contexts = num_contexts

    def sync(self) -> None:
        self.coll.barrier()


class Teams:
    """A PE's predefined teams (``recs[WORLD]``, ``recs[SHARED]``) and its world barrier.

    When every PE is on one node, the world barrier is a dissemination barrier on words in
    shared memory (one store to a partner and one wait per round, no message); otherwise
    it is amnet.coll's barrier."""

    def __init__(self, pe: PE) -> None:
        ep = pe.ep
        self.pe = pe
        node = [r for r in range(pe.npes) if ep.is_local(r)]
        self.recs = {WORLD: TeamRec(ep.coll.world, list(range(pe.npes)), pe.me),
                     SHARED: TeamRec(ep.coll.node, node, pe.me)}
        self.n = pe.npes
        self.rounds = max(0, (self.n - 1).bit_length())
        self.shared = all(pe.local) and self.n > 1 and 8 * self.rounds <= SLEEPING
        self.epoch = 0
        if self.shared:  # memoryviews: their items are plain ints, cheaper than numpy's
            pe.seg[:8 * self.rounds] = 0
            self.words = memoryview(pe.seg[:8 * self.rounds]).cast("q")
            self.partners = []
            self.partner_pes = []
            for r in range(self.rounds):
                p = (pe.me + (1 << r)) % self.n
                self.partners.append(memoryview(pe.view(p)[:8 * self.rounds]).cast("q"))
                self.partner_pes.append(p)

    def world_barrier(self, what: str) -> None:
        """The world's barrier; while it waits, a timeout's diagnosis says the PE waits in
        ``what`` (the call the program made), on every mapping."""
        pe = self.pe
        if not self.shared:
            with pe.port.waiting(what):
                self.recs[WORLD].coll.barrier()
            return
        self.epoch += 1
        e = self.epoch
        w = self.words
        for r, peer in enumerate(self.partners):
            peer[r] = e  # the one writer of that word: a plain store
            if pe.nudging:
                pe.touched(self.partner_pes[r])
            if w[r] < e:
                for _ in range(SPIN_READS):
                    if w[r] >= e:
                        break
                else:
                    pe.wait(lambda r=r: w[r] >= e, what)


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
