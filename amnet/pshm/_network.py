"""The shared-memory AM network of one process (docs/design.md §6).

:class:`PshmNetwork` makes this process's shared object (control block, incoming request
and reply queues, payload slots, the segments of its ranks), maps the objects of the other
processes of the node, and hands the mapped buffers to the engine's C hot path
(:mod:`amnet.core._hot`), which moves AMs through the queues:

- **send** (``Hot.pshm_send`` and the user-AM fast path): write the entry (and payload)
  into the receiver's object, then publish it by storing its sequence number + 1 into the
  entry's first word with one sequentially consistent 8-byte store; ring the receiver's
  doorbell if it sleeps. While the queue is full the engine polls (requests poll
  everything, replies poll only replies, so nobody waits on a rank that waits on them).
- **receive** (``Hot.drain``): look at the sequence word of the entry at each incoming queue's
  tail (an acquire load), run each entry *in place* (a Medium payload is a view of the
  slot, valid during the handler; user Short/Medium AMs run straight from C, everything
  else through the engine's checked dispatcher), then publish the new tail (a release
  store) once the handler returned.
- **sleep** (:meth:`PshmNetwork.sleep`): set the sleeping flag, look once more, then block on
  the doorbell (an eventfd the agent made for this process) and the conduit together.

Memory ordering: the payload and entry are written before the sequence word that publishes
them and read after it, with ``__atomic`` builtins (no platform assembly), so the protocol
holds on weakly ordered machines too; on x86-64 (TSO) the acquire loads and release stores are plain
moves and only the publishing store (seq_cst) is a locked instruction.

Thread safety: the receiving side runs under the engine's drain lock (or in a lock-free
engine, on its one thread). Request queues may have several producers (the rank-threads of
this process): each has a lock when the process is thread-safe (``AMNET_THREAD_SAFE``: auto =
more than one rank-thread). Reply queues have one producer at a time, the thread that drains
(replies are sent from handlers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _backing
from . import _layout as L
from ._native import Words, fence

#: Without a doorbell (no agent made one: an MPI launcher started the processes), a sleeping
#: process looks at its queues at least this often.
NO_BELL_NAP_S = 1e-3


@dataclass(frozen=True, slots=True)
class PshmStatistics:
    """Counters of one process's shared-memory network (``ep.statistics().pshm``)."""

    backing: str
    depth: int
    processes: int  # processes of the node (one queue pair from each)
    sent: int
    received: int
    full_waits: int  # sends that found the queue full and had to poll first
    doorbells: int  # doorbells rung (the receiver was asleep)
    bytes_mapped: int


class _Mapped:
    """One node-local process's object as this process sees it."""

    __slots__ = ("bell", "buf", "obj", "q", "words")

    def __init__(self, obj: Any, bell: int | None) -> None:
        self.obj = obj
        self.buf = memoryview(obj.buf).cast("B")
        self.q = self.buf.cast("q")
        self.words = Words(obj.buf)
        self.bell = bell


class PshmNetwork:
    """This process's end of the node's shared-memory network (see the module docstring).

    Args:
        procs: the global process numbers of this node, in order (this one among them).
        me: this process's global number.
        threads: rank-threads per process (segments in each object).
        config: the job's configuration (segment_size, max_medium, pshm_network_depth,
            pshm_backing, thread_safe).
        name_prefix: the job's prefix for object names (the agent removes leftovers by it).
        doorbells: eventfd per node-local process (global number -> fd), made by the agent.
        hot: the engine's C hot path (``amnet.core._hot.Hot``), which runs the queues.

    Raises:
        PshmSpaceError: the backing cannot hold this process's object (nothing is left).
    """

    def __init__(self, procs: Sequence[int], me: int, threads: int, config: Any,
                 name_prefix: str, doorbells: dict[int, int] | None, hot: Any) -> None:
        self.procs = list(procs)
        self.n = len(self.procs)
        self.me = me
        self.li = self.procs.index(me)
        self.kind = config.pshm_backing
        self.lay = lay = L.Layout(self.n, config.pshm_network_depth, config.max_medium,
                                  threads, config.segment_size)
        ts = config.thread_safe
        self.thread_safe = ts == "1" or (ts == "auto" and threads > 1)
        self.doorbells = doorbells or {}
        self.obj = _backing.create(self.kind, f"{name_prefix}-p{me}", lay.size)
        self.mine = _Mapped(self.obj, self.doorbells.get(me))
        mq = self.mine.q
        mq[L.W_PID] = os.getpid()
        self.mine.words.store(L.W_MAGIC, L.MAGIC)
        self.peers: list[_Mapped | None] = [None] * self.n
        self.peers[self.li] = self.mine
        self.hot = hot
        hot.pshm_init(self.procs, self.li, lay.depth, lay.slot, lay.queues(), L.SLEEP_AT,
                      self.mine.buf)
        self.bytes_mapped = lay.size
        self.my_bell = self.doorbells.get(me)
        # 1 while an event loop drives this process's progress (amnet.aio): senders ring the
        # doorbell for every message, as for a sleeping process, since the loop watches it
        # and never says when it sleeps (set_ring_always)
        self.ring_always = 0

    @property
    def ident(self) -> str:
        """What peers need to map this process's object (published at init)."""
        return self.obj.ident

    def segment_buffer(self, t: int) -> memoryview:
        """The bytes of rank-thread ``t``'s segment in this process's object."""
        off = self.lay.segment(t)
        return self.mine.buf[off:off + self.lay.seg_size]

    def peer_segment(self, proc: int, t: int) -> memoryview:
        """Rank-thread ``t`` of node-local process ``proc``: its segment, mapped here."""
        off = self.lay.segment(t)
        return self.peers[self.procs.index(proc)].buf[off:off + self.lay.seg_size]

    def area_buffer(self, t: int) -> memoryview:
        """Rank-thread ``t``'s node area in this process's object."""
        off = self.lay.area(t)
        return self.mine.buf[off:off + L.COLL_AREA]

    def peer_area(self, proc: int, t: int) -> memoryview:
        """Rank-thread ``t`` of node-local process ``proc``: its node area, mapped here."""
        off = self.lay.area(t)
        return self.peers[self.procs.index(proc)].buf[off:off + L.COLL_AREA]

    # -- set-up ---------------------------------------------------------------------------
    def attach(self, idents: dict[int, str]) -> None:
        """Map every other node-local process's object (``idents``: global proc -> ident).

        The last process to map an object removes its name, so nothing of the job is left in
        /dev/shm (or the file directory) once every process has it mapped.
        """
        lay = self.lay
        for s, proc in enumerate(self.procs):
            if s == self.li:
                continue
            obj = _backing.attach(self.kind, idents[proc], lay.size)
            m = _Mapped(obj, self.doorbells.get(proc))
            if m.words.load(L.W_MAGIC) != L.MAGIC:
                raise RuntimeError(f"shared object {idents[proc]!r} of process {proc} is not "
                                   "an amnet PSHM object")
            self.peers[s] = m
            self.bytes_mapped += lay.size
            # my queues inside s's object: requests (locked when thread-safe) and replies
            self.hot.pshm_peer(s, m.buf, -1 if m.bell is None else m.bell, self.thread_safe)
            if m.words.fetch_add(L.W_MAPPED, 1) == self.n - 2:
                obj.unlink()  # everyone else has mapped it: the name can go
        if self.n == 1:
            self.obj.unlink()

    def pending(self) -> bool:
        """Whether any incoming queue has an entry (a cheap look, no dispatch)."""
        return self.hot.pending()

    # -- sleeping -------------------------------------------------------------------------
    def sleep(self, wait: Callable[[list[int], float], Any], timeout: float) -> None:
        """Block until a queue may have something or ``wait`` (the conduit's) returns.

        Sets the sleeping flag (seq_cst, so a sender that publishes after our last look sees
        it and rings), looks once more, then sleeps in ``wait([doorbell], timeout)``.
        """
        bell = self.my_bell
        words = self.mine.words
        words.store(L.W_SLEEP, 1)  # seq_cst: a sender publishing after this sees it
        try:
            if self.pending():
                return
            if bell is not None:
                wait([bell], timeout)
            else:  # no doorbell (processes an MPI launcher started): nap, then look again
                wait([], min(timeout, NO_BELL_NAP_S))
        finally:
            words.store(L.W_SLEEP, self.ring_always)
            if bell is not None:
                try:
                    os.eventfd_read(bell)
                except (BlockingIOError, OSError):
                    pass

    def set_ring_always(self, on: bool) -> None:
        """While on, the sleeping flag stays up (senders ring this process's doorbell for
        every message): for an event loop watching the doorbell (amnet.aio)."""
        self.ring_always = 1 if on else 0
        self.mine.words.store(L.W_SLEEP, self.ring_always)

    def set_awake(self, awake: bool) -> None:
        """Lower the sleeping flag while this process's one event loop runs (``awake``), so
        senders skip the doorbell; raise it again (seq_cst) before the loop may block, then
        look once more (:meth:`pending`), as :meth:`sleep` does. Only for a process whose
        one rank's loop watches the doorbell (amnet.aio)."""
        self.mine.words.store(L.W_SLEEP, 0 if awake else self.ring_always)

    def statistics(self) -> PshmStatistics:
        sent, received, full_waits, rings, _ = self.hot.counts()
        return PshmStatistics(self.kind, self.lay.depth, self.n, sent, received, full_waits,
                              rings, self.bytes_mapped)

    def close(self) -> None:
        """Forget the name where no peer can still need it (mappings stay until the process
        ends: numpy views of segments may outlive the engine).

        With node-local peers the name stays: the last of them to map the object removed it
        already, or one has yet to map it (this process ends early, say its rank raised
        right after ``amnet.init()``, while a peer is still on its way into ``attach``), and
        removing it now would fail that peer. The node's agent removes whatever is left
        once every process of the node has ended.
        """
        if self.n > 1:
            return
        try:
            self.obj.unlink()
        except OSError:
            pass


__all__ = ["PshmNetwork", "PshmStatistics", "fence"]
