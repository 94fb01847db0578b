"""The shared-memory AM network of one process (DESIGN.md section 6).

:class:`PshmNetwork` makes this process's shared object (control block, incoming request
and reply queues, payload slots, the segments of its ranks), maps the objects of the other
processes of the node, and moves AMs through the queues:

- **send** (:meth:`PshmNetwork.push`): write the entry (and payload) into the receiver's
  object, then publish the new head with one sequentially consistent 8-byte store; ring the
  receiver's doorbell if it sleeps. A full queue returns False: the engine then polls and
  tries again (requests poll everything, replies poll only replies, so nobody waits on a
  rank that waits on them).
- **receive** (:meth:`PshmNetwork.drain`): compare each incoming queue's head with the tail
  this process keeps, hand each entry to the engine's dispatcher *in place* (a Medium
  payload is a view of the slot, valid during the handler), then publish the new tail.
- **sleep** (:meth:`PshmNetwork.sleep`): set the sleeping flag, look once more, then block on
  the doorbell (an eventfd the agent made for this process) and the conduit together.

Memory ordering: the payload and entry are written before the head that publishes them and
read after it. Stores of indices go through :mod:`amnet.pshm._native` (``__atomic`` builtins,
sequentially consistent: a release that also orders the following load of the sleeping flag),
so the protocol holds on weakly ordered machines too. On x86-64 (TSO) loads of indices are
plain 8-byte reads; elsewhere they are acquire loads (:data:`TSO`).

Thread safety: the receiving side runs under the engine's drain lock. Request queues may have
several producers (the rank-threads of this process): each has a lock when the process is
thread-safe (``AMNET_THREAD_SAFE``: auto = more than one rank-thread). Reply queues have one
producer at a time, the thread that drains (replies are sent from handlers).
"""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _backing
from . import _layout as L
from ._native import Words, fence

#: x86-64 keeps stores in order and loads in order (TSO): plain 8-byte loads of indices
#: suffice (on 32-bit x86 they could tear, so it takes the acquire-load path).
TSO = platform.machine().lower() in ("x86_64", "amd64")


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


class _Out:
    """A queue this process sends into (lives in the receiver's object)."""

    __slots__ = ("buf", "depth", "ents", "head", "head_w", "lock", "peer", "q", "slot",
                 "slots", "tail", "tail_w", "words")

    def __init__(self, peer: _Mapped, lay: L.Layout, qn: int, lock: bool) -> None:
        self.peer = peer
        self.buf = peer.buf
        self.q = peer.q
        self.words = peer.words
        self.depth = lay.depth
        self.slot = lay.slot
        self.ents = lay.entries(qn)
        self.slots = lay.slots(qn)
        self.head_w = lay.head_word(qn)
        self.tail_w = lay.tail_word(qn)
        self.head = 0  # next entry to write (this process is the only writer)
        self.tail = 0  # the receiver's tail as last read
        self.lock = threading.Lock() if lock else None


class _In:
    """A queue this process receives from (lives in its own object)."""

    __slots__ = ("ents", "frag", "head_w", "kind", "slot", "slots", "src", "tail", "tail_w")

    def __init__(self, lay: L.Layout, kind: int, src: int) -> None:
        qn = lay.queue(kind, src)
        self.kind = kind
        self.src = src
        self.slot = lay.slot
        self.ents = lay.entries(qn)
        self.slots = lay.slots(qn)
        self.head_w = lay.head_word(qn)
        self.tail_w = lay.tail_word(qn)
        self.tail = 0
        self.frag: bytearray | None = None  # a fragmented message being reassembled


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

    Raises:
        PshmSpaceError: the backing cannot hold this process's object (nothing is left).
    """

    def __init__(self, procs: Sequence[int], me: int, threads: int, config: Any,
                 name_prefix: str, doorbells: dict[int, int] | None) -> None:
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
        self.out: list[list[_Out | None]] = [[None] * self.n, [None] * self.n]
        # incoming queues from every other process: replies first (they complete waits)
        self.ins = [_In(lay, k, s) for k in (L.REP, L.REQ) for s in range(self.n)
                    if s != self.li]
        self.rep_ins = [q for q in self.ins if q.kind == L.REP]
        self.sent = self.received = self.full_waits = self.rings = 0
        self.bytes_mapped = lay.size
        self.my_bell = self.doorbells.get(me)
        self.load = (lambda w, i: w.q[i]) if TSO else (lambda w, i: w.words.load(i))

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
            # my queues inside s's object: requests and replies from me
            self.out[L.REQ][s] = _Out(m, lay, lay.queue(L.REQ, self.li), self.thread_safe)
            self.out[L.REP][s] = _Out(m, lay, lay.queue(L.REP, self.li), False)
            if m.words.fetch_add(L.W_MAPPED, 1) == self.n - 2:
                obj.unlink()  # everyone else has mapped it: the name can go
        if self.n == 1:
            self.obj.unlink()
        self.by_proc = [{p: self.out[k][s] for s, p in enumerate(self.procs) if s != self.li}
                        for k in (L.REQ, L.REP)]

    def out_queue(self, kind: int, proc: int) -> _Out:
        return self.by_proc[kind][proc]

    # -- sending --------------------------------------------------------------------------
    def push(self, o: _Out, header: bytes, payload: Any, plen: int, flags: int = 0) -> bool:
        """Write one entry into ``o``; False if the queue is full (nothing written).

        ``payload`` (``plen`` bytes, at most a slot) is copied into the entry's slot;
        ``plen`` < 0 means no payload. With ``F_DEPOSITED`` the payload is already in the
        destination segment and only its length travels. The caller holds ``o.lock``.
        """
        head = o.head
        if head - o.tail >= o.depth:
            o.tail = o.q[o.tail_w] if TSO else o.words.load(o.tail_w)
            if head - o.tail >= o.depth:
                return False
        i = head % o.depth
        e = o.ents + i * L.ENTRY
        q = o.q
        w = e >> 3
        hl = len(header)
        q[w] = plen
        q[w + 1] = flags
        q[w + 2] = hl
        o.buf[e + L.HDR_AT:e + L.HDR_AT + hl] = header
        if plen > 0 and not flags & L.F_DEPOSITED:
            s = o.slots + i * o.slot
            o.buf[s:s + plen] = payload
        o.head = head + 1
        o.words.store(o.head_w, head + 1)  # publish (seq_cst: also orders the load below)
        if (q[L.W_SLEEP] if TSO else o.words.load(L.W_SLEEP)):
            self._ring(o.peer)
        self.sent += 1
        return True

    def _ring(self, peer: _Mapped) -> None:
        if peer.bell is not None:
            self.rings += 1
            try:
                os.eventfd_write(peer.bell, 1)
            except OSError:
                pass

    # -- receiving ------------------------------------------------------------------------
    def drain(self, dispatch: Callable[..., Any], queues: list[_In] | None = None,
              budget: int = 256) -> int:
        """Run what has arrived in ``queues`` (default: all); return how many messages ran.

        ``dispatch(header, payload, deposited)`` is the engine's checked dispatcher; the
        caller holds the drain lock.
        """
        mine = self.mine
        q = mine.q
        buf = mine.buf
        words = mine.words
        n = 0
        for iq in queues if queues is not None else self.ins:
            tail = iq.tail
            head = q[iq.head_w] if TSO else words.load(iq.head_w)
            while tail != head and n < budget:
                i = tail % self.lay.depth
                e = iq.ents + i * L.ENTRY
                w = e >> 3
                plen = q[w]
                flags = q[w + 1]
                hl = q[w + 2]
                if not 0 <= hl <= L.ENTRY - L.HDR_AT or (
                        plen > iq.slot and not flags & L.F_DEPOSITED):
                    header = b""  # malformed: dispatch refuses it
                else:
                    header = buf[e + L.HDR_AT:e + L.HDR_AT + hl]  # read in place
                tail += 1
                if flags & L.F_DEPOSITED:
                    payload, dep = None, plen
                elif plen >= 0:
                    s = iq.slots + i * iq.slot
                    payload, dep = buf[s:s + max(plen, 0)], -1
                else:
                    payload, dep = None, -1
                if flags & L.F_MORE:  # a fragment: keep it, run nothing yet
                    if iq.frag is None:
                        iq.frag = bytearray()
                    if payload is not None:
                        iq.frag += payload
                    iq.tail = tail
                    words.store(iq.tail_w, tail)
                    continue
                if iq.frag is not None:  # the last fragment: the whole payload
                    if payload is not None:
                        iq.frag += payload
                    payload = memoryview(iq.frag)
                    iq.frag = None
                try:
                    dispatch(header, payload, dep)
                finally:
                    iq.tail = tail  # the slot is free once its handler returned
                    words.store(iq.tail_w, tail)
                n += 1
        self.received += n
        return n

    def pending(self) -> bool:
        """Whether any incoming queue has an entry (a cheap look, no dispatch)."""
        q = self.mine.q
        if TSO:
            return any(q[iq.head_w] != iq.tail for iq in self.ins)
        w = self.mine.words
        return any(w.load(iq.head_w) != iq.tail for iq in self.ins)

    # -- sleeping -------------------------------------------------------------------------
    def sleep(self, wait: Callable[[list[int], float], Any], timeout: float) -> None:
        """Block until a queue may have something or ``wait`` (the conduit's) returns.

        Sets the sleeping flag (seq_cst, so a sender that publishes after our last look sees
        it and rings), looks once more, then sleeps in ``wait([doorbell], timeout)``.
        """
        bell = self.my_bell
        words = self.mine.words
        words.store(L.W_SLEEP, 1)
        try:
            if self.pending():
                return
            wait([bell] if bell is not None else [], timeout)
        finally:
            words.store(L.W_SLEEP, 0)
            if bell is not None:
                try:
                    os.eventfd_read(bell)
                except (BlockingIOError, OSError):
                    pass

    def statistics(self) -> PshmStatistics:
        return PshmStatistics(self.kind, self.lay.depth, self.n, self.sent, self.received,
                              self.full_waits, self.rings, self.bytes_mapped)

    def close(self) -> None:
        """Forget the name if it is still there (mappings stay until the process ends:
        numpy views of segments may outlive the engine)."""
        try:
            self.obj.unlink()
        except OSError:
            pass


__all__ = ["TSO", "PshmNetwork", "PshmStatistics", "fence"]
