"""The ``mpi`` conduit: AM messages between processes as MPI messages, on mpi4py over the
site's MPI (and so its network: InfiniBand, Slingshot, Omni-Path, ...), the way GASNet's
mpi-conduit carries GASNet over MPI.

Every message is one *envelope* (an MPI message of at most ``ENVELOPE + MAX_HEADER +
inline`` bytes, ``inline`` = ``max_medium`` capped at 1 MiB), received from any source on
the conduit's own tag into the next of ``depth`` slots, by one of ``depth`` receives kept
posted (``MPI_ANY_SOURCE``), or, over MPICH's ucx network module, where such receives lose
messages, by matched probes (``MPI_Improbe``, then ``MPI_Mrecv``: :func:`matched_probes`):
the AM header, and the payload in line when it fits. A larger payload follows as a second
message with the bulk tag, sent from the caller's buffer itself when ``copy=False`` (else
from a copy in a pooled bounce buffer), and received straight into its place in the
destination segment when the core says where (:meth:`Conduit.set_lander`: puts and Long
AMs), else into a fresh buffer; the bulk receives of envelopes that arrived behind it are
posted at once (:meth:`MPIConduit._lookahead`). Both messages to one destination are posted
under one lock, so every peer sees envelopes and bulk messages in the same order (MPI's
non-overtaking rule per source, tag and communicator) and FIFO per pair holds: posted
receives are matched in the order they were posted and probes take each source's
envelopes in the order it sent them, and the conduit hands them on in that order.

The common case runs in C (:class:`amnet.conduits._mpiring.MPIRing`, an extension of its
own: ``amnet/conduits/_mpiring_mpi.c``): the envelope of a header alone or of a payload sent
in line, and the slots (taken, read, freed), with the MPI library mpi4py loaded called
directly; the conduit's
``send`` and ``recv`` are the ring's, so the engine's C reaches them without a Python frame.
Bulk payloads and anything unusual come back here (:meth:`MPIConduit._send_slow`,
:meth:`MPIConduit._take_slow`).

Threads: every MPI call of the conduit (and of the MPI bootstrap, :mod:`amnet.core._mpiboot`)
holds :data:`MPI_LOCK`, a lock of the process: MPI is used *serialized*, so a process needs no
more than ``MPI_THREAD_SERIALIZED`` (docs/conduits.md says why this beats
``MPI_THREAD_MULTIPLE``, measured). Waiting: MPI has no file descriptor to sleep on, so a
waiting rank spins for a while and then sleeps in naps that grow from :data:`NAP_MIN_S` to
:data:`NAP_MAX_S` and shrink back whenever a message arrives (:meth:`MPIConduit.recv_wait`,
``wait_readable``, ``wait_readable_fds``, which also watches the shared-memory doorbells it is
given); never while its own sends are in flight, which MPI moves only while it is called.

Addresses are ``mpi:RANK:CHANNEL``: the process's rank in the job's communicator and the
conduit's channel in that process (its envelope tag is ``2 * CHANNEL + 16``, its bulk tag one
more). A job has one conduit per process, channel 0; the conformance tests run two in one
process (a singleton MPI job), which talk through MPI's self path on channels 0 and 1.

Security: the conduit opens no socket of its own. Who may join is the MPI's business (an
``MPI_COMM_WORLD`` admits only the processes its launcher started); traffic is encrypted only
if the MPI's network is (``encrypts = False``).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from .._errors import ConfigError
from . import _mpiring
from ._base import MAX_HEADER, Conduit, ConduitStatistics, register_conduit

#: MPICH settings that send every message through its network module (TCP, by libfabric),
#: also between processes of one host: the path that crosses hosts on a cluster. The tests
#: and ``amnet-bench ... --conduit mpi`` run amnet and mpi4py alike with them.
MPICH_NETWORK_PATH = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi",
                      "FI_PROVIDER": "tcp"}
#: Every MPI call of a process's amnet goes through this lock (MPI used serialized).
MPI_LOCK = threading.Lock()
ENV = struct.Struct("<BxHIQ")  # kind, header length, (reserved), payload length
ENVELOPE = ENV.size  # 16
if ENVELOPE != _mpiring.ENVELOPE:  # the C ring builds and reads the same envelopes
    raise ImportError(f"amnet.conduits._mpiring was built for {_mpiring.ENVELOPE}-byte envelopes, "
                      f"not {ENVELOPE}: rebuild it (pip install -e .)")
KIND_HEADER, KIND_INLINE, KIND_BULK = 0, 1, 2
INLINE_CAP = 1 << 20  # largest payload carried in line (with max_medium above it)
COPY_OUT = 4096  # in-line payloads up to this size are copied out; larger keep the buffer
NAP_MIN_S = 20e-6
NAP_MAX_S = 1e-3
TAG_BASE = 16
#: Completed sends are forgotten once more than this many are in flight (each look at one is
#: a round of MPI progress: the receive side skips them while there are few).
REAP_AT = 16
POOL_BYTES = 64 << 20  # the bounce buffers kept for payloads sent with copy=True, at most
POOL_PER_SIZE = 16  # buffers kept per payload size
#: Puts of this many bytes or more travel as bulk messages from the caller's buffer
#: (:meth:`MPIConduit.send_direct`), received into their place in the segment: no copy on
#: either side. Smaller ones are copied into their envelope (one message).
DIRECT_MIN = 16 << 10
_channels = itertools.count()
_job: dict[str, Any] = {"comm": None}
#: Send requests of closed conduits that were still in flight: kept until the process ends,
#: so MPI never reads a buffer Python has freed.
_orphans: list[Any] = []
MISSING = ("the mpi conduit needs mpi4py over an MPI library: pip install 'amnet[mpi]' "
           "(mpi4py, with the mpich wheel where the machine has no MPI of its own)")
LEVELS = ("single", "funneled", "serialized", "multiple")


def _done() -> bool:
    return True


def mpi(thread_level: str = "serialized") -> Any:
    """mpi4py's ``MPI`` module, MPI initialized at ``thread_level`` if it was not yet.

    Raises:
        ConfigError: mpi4py (or an MPI library under it) is missing, or MPI was initialized
            earlier (by the application, say) at a level below ``thread_level``.
    """
    import sys

    try:
        import mpi4py
    except ImportError:
        raise ConfigError(MISSING) from None
    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = thread_level
        mpi4py.rc.initialize = False  # the library is looked at before MPI_Init (below)
        mpi4py.rc.finalize = True  # and finalized at exit, as mpi4py would have
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as e:
        raise ConfigError(f"{MISSING}: {e}") from None
    if not MPI.Is_initialized():
        # read by MPICH and libfabric in MPI_Init
        os.environ.update(mpich_settings(MPI.Get_library_version(), os.environ))
        MPI.Init_thread(LEVELS.index(thread_level))
    have = MPI.Query_thread()
    if have < LEVELS.index(thread_level):
        raise ConfigError(f"MPI was initialized with thread level {LEVELS[have]}, and amnet "
                          f"needs {thread_level} here (import amnet before mpi4py, or set "
                          f"mpi4py.rc.thread_level = {thread_level!r})")
    return MPI


def mpich_settings(library_version: str, environ: Any) -> dict[str, str]:
    """What amnet sets in the environment before ``MPI_Init``: ``FI_PROVIDER=^sockets`` where
    MPICH runs over libfabric (its ``ofi`` network module: :func:`mpich_netmod`) and nobody
    named a provider; nothing for any other MPI, module or
    setting. The library's network module is its own choice (the mpich wheel's is ucx).

    Found between real hosts (tests/test_cluster.py): libfabric's deprecated ``sockets``
    provider, which MPICH picked over ``tcp``, sends a message only while the sender calls
    MPI, so a rank that left a barrier and computed held the barrier's last message and a
    rank of the other host waited as long; excluding it lets libfabric take ``tcp`` (or the
    fabric's own provider). (The other defect found there, envelopes lost by receives posted
    from ``MPI_ANY_SOURCE`` over ucx, is avoided by how the conduit receives there: matched
    probes, :func:`matched_probes`; it needs no setting.)"""
    if mpich_netmod(library_version, environ) == "ofi" and not environ.get("FI_PROVIDER"):
        return {"FI_PROVIDER": "^sockets"}
    return {}


def mpich_netmod(library_version: str, environ: Any) -> str | None:
    """The network module MPICH runs over (``"ucx"``, ``"ofi"``; ``""``: neither), or None
    for another MPI: the one ``MPIR_CVAR_CH4_NETMOD`` names, else the first one built, which
    MPICH picks (the mpich wheel's ``MPICH Device: ch4:ucx ofi``: ucx)."""
    for line in library_version.splitlines():
        if line.startswith("MPICH Device:"):
            words = line.split(":", 1)[1].replace(":", " ").split()
            built = [w for w in words if w in ("ucx", "ofi")]
            return environ.get("MPIR_CVAR_CH4_NETMOD") or (built[0] if built else "")
    return None


def matched_probes(library_version: str, environ: Any) -> bool:
    """Whether the conduit takes envelopes with matched probes (``MPI_Improbe`` and
    ``MPI_Mrecv``) rather than receives kept posted from ``MPI_ANY_SOURCE``: for MPICH whose
    network module is ucx (named in ``MPIR_CVAR_CH4_NETMOD``, or the first one built, which
    MPICH picks: the mpich wheel's ``ch4:ucx ofi``). There, posted any-source receives lose
    messages (tests/data/anysource.py shows it with plain mpi4py, on one host as between
    hosts) and probes are faster too (a round trip 7 us against 11-13); everywhere else
    posted receives are kept, the faster way (over ofi/tcp a probe costs 6-11 us more a
    round trip), and lose nothing."""
    return mpich_netmod(library_version, environ) == "ucx"


def set_job_comm(comm: Any) -> None:
    """The communicator the conduit of this process uses (the MPI process main's duplicate
    of ``MPI_COMM_WORLD``); unset, conduits use ``MPI_COMM_WORLD``."""
    _job["comm"] = comm


def _ring_abi(MPI: Any) -> tuple[bool, int, int]:
    """What :class:`_mpiring.MPIRing` needs to call the MPI library with its own types: whether
    handles are pointers (Open MPI) rather than ints (MPICH), the size of ``MPI_Status``, and
    where its ``MPI_SOURCE`` lies (found by writing one with mpi4py)."""
    sizes = {MPI._sizeof(t) for t in (MPI.Comm, MPI.Datatype, MPI.Request)}
    st = MPI.Status()
    st.Set_source(0x1234567)
    st.Set_tag(0x2345678)
    size = MPI._sizeof(MPI.Status)
    raw = ctypes.string_at(MPI._addressof(st), size)
    off = raw.find((0x1234567).to_bytes(4, sys.byteorder))
    if len(sizes) != 1 or sizes.pop() not in (4, 8) or off < 0 or off % 4:
        raise ConfigError(f"the mpi conduit does not know this MPI library's types "
                          f"({MPI.Get_library_version().splitlines()[0]})")
    return MPI._sizeof(MPI.Comm) == 8, size, off


def _parse(address: str) -> tuple[int, int]:
    try:
        scheme, rank, channel = address.split(":")
        if scheme != "mpi":
            raise ValueError
        return int(rank), int(channel)
    except ValueError:
        raise ValueError(f"not an mpi conduit address: {address!r} (mpi:RANK:CHANNEL)") from None


@register_conduit("mpi")
class MPIConduit(Conduit):
    """One process's endpoint on the MPI (see the module docstring)."""

    encrypts: ClassVar[bool] = False
    pollable: ClassVar[bool] = False  # no descriptor: waits spin, then nap

    def __init__(self, proc: int, procs: int, bind_host: str = "127.0.0.1",
                 curve: dict[str, str] | None = None, options: Any = None,
                 secret: str | None = None) -> None:
        super().__init__(proc, procs, bind_host, curve, options, secret)
        MPI = mpi()
        self._MPI = MPI
        self._comm = _job["comm"] or MPI.COMM_WORLD
        self._channel = next(_channels)
        self._tag = TAG_BASE + 2 * self._channel
        self._address = f"mpi:{self._comm.Get_rank()}:{self._channel}"
        medium = getattr(options, "max_medium", 64 << 10)
        self._inline = min(medium, INLINE_CAP)
        self._bufsize = ENVELOPE + MAX_HEADER + self._inline
        self._depth = 16 if self._inline <= 64 << 10 else 4
        self._dest: list[tuple[int, int]] = []
        self.dropped = 0  # messages the core refused (count_dropped)
        # bulk sends (and send_direct's envelopes) in flight: request, or (request, buffer)
        self._sends: collections.deque = collections.deque()
        self._closed = False
        self._nap = NAP_MIN_S
        import numpy as np

        self._np = np
        self._land: Any = None
        # bulk receives posted ahead of their turn, by envelope: (request, buffer, place)
        self._pre: dict[int, tuple[Any, Any, tuple[int, int] | None]] = {}
        self._pool: dict[int, list[Any]] = {}  # bounce buffers by size (see _bounce)
        self._keep: dict[int, int] = {}  # how many the pool keeps, by size
        self._pooled = 0  # bytes the pool may come to hold, for the sizes it keeps
        # puts of this many bytes or more go from the caller's buffer, as bulk messages
        self.direct_min = min(self._inline + 1, DIRECT_MIN)
        h8, st_size, src_off = _ring_abi(MPI)
        #: envelopes taken with matched probes, else with receives kept posted
        self.probes = matched_probes(MPI.Get_library_version(), os.environ)
        # the envelopes (received into slots, bytearrays it owns) and their sends, in C
        try:
            self._ring = _mpiring.MPIRing(
                MPI.__file__, h8, MPI._handleof(self._comm), MPI._handleof(MPI.BYTE),
                MPI.ANY_SOURCE, self._tag, self._depth, self._bufsize, self._inline,
                self.direct_min - 1, COPY_OUT, MAX_HEADER, st_size, src_off, procs, MPI_LOCK,
                self._send_slow, self._take_slow, self.probes)
        except RuntimeError as e:
            raise ConfigError(f"the mpi conduit cannot call this MPI library from C: {e} "
                              f"({MPI.Get_library_version().splitlines()[0]})") from None
        self._seen = 0  # the ring's messages taken when the nap was last set
        with MPI_LOCK:
            self._ring.start()
        # the ring's own methods, so that the engine's C calls them without a Python frame
        self.send = self._ring.send  # type: ignore[method-assign]
        self.recv = self._ring.recv  # type: ignore[method-assign]

    def set_lander(self, land: Any) -> None:
        self._land = land

    # -- identity ---------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return self._address

    def set_peers(self, addresses: Sequence[str]) -> None:
        dest = []
        for a in self._checked_peers(addresses):
            rank, channel = _parse(a)
            dest.append((rank, TAG_BASE + 2 * channel))
        self._dest = dest
        self._ring.set_dests(dest)

    def fileno(self) -> int:
        """-1: MPI offers no descriptor to sleep on (``pollable`` is False)."""
        return -1

    # -- sending ----------------------------------------------------------------------------
    def send(self, proc: int, header: bytes, payload: Any = None, copy: bool = True) -> None:
        """With ``copy=False`` a payload of ``direct_min`` bytes or more travels as a bulk
        message from ``payload`` itself (received into its place where it has one); with
        ``copy=True`` only one over ``max_medium`` does, from a copy. The ring's ``send``
        (an instance attribute, set in ``__init__``) sends the envelope of the others."""
        self._ring.send(proc, header, payload, copy)

    def _send_slow(self, proc: int, header: bytes, payload: Any = None,
                   copy: bool = True) -> None:
        """What the ring's ``send`` does not: bulk payloads, buffers that are not contiguous
        bytes, bad arguments (raised here)."""
        self._post(proc, header, payload, copy, None if copy else self.direct_min - 1)

    def _post(self, proc: int, header: bytes, payload: Any, copy: bool,
              inline: int | None = None) -> Any:
        """Send, and return the bulk message's request (None: the message had none).
        ``inline``: the largest payload to carry in line (default: max_medium's)."""
        if self._closed:
            raise RuntimeError("send on a closed mpi conduit")
        if not 0 <= proc < len(self._dest):
            raise IndexError(f"no process {proc} among the mpi conduit's {len(self._dest)} "
                             f"peers")
        rank, tag = self._dest[proc]
        hl = len(header)
        bulk = None
        if payload is None:
            env = ENV.pack(KIND_HEADER, hl, 0, 0) + header
            n = 0
        else:
            mv = memoryview(payload)
            if mv.format != "B" or mv.ndim != 1:
                mv = mv.cast("B")
            n = mv.nbytes
            if n <= (self._inline if inline is None else inline):
                env = b"".join((ENV.pack(KIND_INLINE, hl, 0, n), header, mv))
            else:
                env = ENV.pack(KIND_BULK, hl, 0, n) + header
                bulk = self._bounce(mv, n) if copy else mv
        with MPI_LOCK:
            sends = self._sends
            sends.append(self._comm.Isend(env, rank, tag))
            req = None
            if bulk is not None:
                req = self._comm.Isend(bulk, rank, tag + 1)
                sends.append((req, bulk) if copy else req)
            self._ring.note_sent(proc, n)
            if len(sends) > REAP_AT:
                self._reap()
        return req

    def send_direct(self, proc: int, header: bytes, payload: Any) -> Any:
        """A bulk message sent from ``payload`` itself (no bounce copy: a put's data goes
        from the caller's array to ``MPI_Isend``); ``done()`` tests its request. Smaller
        payloads travel in line, copied into the envelope: ``done()`` is true at once."""
        req = self._post(proc, header, payload, False, self.direct_min - 1)
        if req is None:  # in line: copied into the envelope
            return _done

        def done() -> bool:
            with MPI_LOCK:
                return req.Test()

        return done

    def _bounce(self, mv: memoryview, n: int) -> Any:
        """A copy of ``mv`` (``copy=True``) in a buffer of the pool: buffers whose pages are
        mapped already, so the copy is a plain memcpy (a fresh 1 MiB ``bytes`` page-faults
        on every send: half the copy's time on the development VM)."""
        free = self._pool.get(n)
        with MPI_LOCK:
            buf = free.pop() if free else None
        if buf is None:
            buf = self._np.empty(n, dtype=self._np.uint8)
        self._np.copyto(buf, self._np.frombuffer(mv, dtype=self._np.uint8))
        return buf

    def _reap(self) -> None:
        """Forget the sends that completed, oldest first, and give their bounce buffers back
        to the pool (the caller holds MPI_LOCK)."""
        sends, pool = self._sends, self._pool
        while sends:
            head = sends[0]
            if type(head) is tuple:
                if not head[0].Test():
                    return
                buf = head[1]
                n = buf.nbytes
                free = pool.get(n)
                if free is None:
                    # a size the pool keeps from now on, if it has room: at most a quarter
                    # of it per size (4 MiB payloads get 4 buffers, 1 MiB ones 16)
                    keep = min(POOL_PER_SIZE, POOL_BYTES // (4 * n))
                    if keep and self._pooled + n * keep <= POOL_BYTES:
                        free = pool[n] = []
                        self._keep[n] = keep
                        self._pooled += n * keep
                if free is not None and len(free) < self._keep[n]:
                    free.append(buf)
            elif not head.Test():
                return
            sends.popleft()

    # -- receiving --------------------------------------------------------------------------
    def recv(self, ready: bool = False) -> tuple[bytes, Any] | None:
        """The next message, in the order the receives were posted (the ring's ``recv``, an
        instance attribute set in ``__init__``, runs the common case in C)."""
        return self._ring.recv()

    def _take_slow(self, i: int, count: int, source: int) -> tuple[bytes, Any] | None:
        """The ring's envelope in slot ``i`` (``count`` bytes from ``source``) that its C
        did not take: a bulk payload, a large in-line one, or a malformed one (None: dropped;
        the ring counts it and frees the slot). Holds MPI_LOCK."""
        view = self._ring.view(i)
        msg = None
        if count >= ENVELOPE:  # (a header alone and a small payload: the ring took them)
            kind, hl, _, n = ENV.unpack_from(view)
            body = ENVELOPE + hl
            if hl <= MAX_HEADER:
                header = view[ENVELOPE:body].tobytes()
                if kind == KIND_INLINE and count == body + n and n > COPY_OUT:
                    # hand the buffer over; a fresh one takes its place
                    msg = (header, memoryview(self._ring.swap(i))[body:count])
                elif kind == KIND_BULK and count == body and n:
                    pre = self._pre.pop(i, None)
                    if pre is None:
                        into, place = self._bulk_into(header, n, [])
                        req = self._comm.Irecv(into, source, self._tag + 1)
                    else:
                        req, into, place = pre
                    # while it comes, and once it is here, post the bulk receives of the
                    # envelopes behind it: the next payload, right behind this one in MPI's
                    # stream, then flows into its place while this one is handled
                    while not req.Test():
                        self._lookahead(i, place)
                    self._lookahead(i, place)
                    msg = (header, memoryview(into))
        view.release()
        if msg is not None:
            self._ring.note_received(0 if msg[1] is None else msg[1].nbytes)
        return msg

    def _bulk_into(self, header: bytes, n: int,
                   taken: list[tuple[int, int]]) -> tuple[Any, tuple[int, int] | None]:
        """Where to receive a bulk payload, and the place in a segment it is for (None: no
        such place). Its place itself (the engine's lander), unless that overlaps a place in
        ``taken`` (those of payloads received ahead of their turn, which must be stored
        first), else a fresh buffer the core copies from in turn."""
        into = None if self._land is None else self._land(header, n)
        if into is None:
            return self._np.empty(n, dtype=self._np.uint8), None
        a = into.ctypes.data
        if any(a < b + m and b < a + n for b, m in taken):
            return self._np.empty(n, dtype=self._np.uint8), (a, n)
        return into, (a, n)

    def _lookahead(self, i: int, first: tuple[int, int] | None) -> None:
        """Post the bulk receives of the envelopes that arrived after envelope ``i`` (also a
        bulk one, for place ``first``), up to the first that is not, so MPI moves their
        payloads while earlier ones are handled (a pipeline like a window of preposted
        receives). A payload goes straight to its place in a segment only where no earlier
        one of these goes: the messages stay delivered, and stored, in order. Holds
        MPI_LOCK."""
        ring = self._ring
        taken = [] if first is None else [first]
        k = (i + 1) % self._depth
        while k != i:
            pre = self._pre.get(k)
            if pre is None:
                done = ring.peek(k)
                if done is None:
                    return
                count, source = done
                if count < ENVELOPE:
                    return
                with ring.view(k) as view:
                    kind, hl, _, n = ENV.unpack_from(view)
                    if (kind != KIND_BULK or hl > MAX_HEADER or count != ENVELOPE + hl
                            or not n):
                        return
                    header = view[ENVELOPE:ENVELOPE + hl].tobytes()
                into, place = self._bulk_into(header, n, taken)
                pre = self._pre[k] = (self._comm.Irecv(into, source, self._tag + 1),
                                      into, place)
            if pre[2] is not None:
                taken.append(pre[2])
            k = (k + 1) % self._depth

    def _ready(self) -> bool:
        """Whether the next envelope has come (it is taken into its slot, for :meth:`recv`)."""
        return self._ring.ready()

    # -- waiting: spin, then nap (MPI has no descriptor) ----------------------------------
    def _nap_for(self, timeout: float | None) -> float:
        """How long to nap now: 0 while sends are in flight (MPI moves their data only while
        it is called: a napping sender stalls its own large sends), else the next nap (the
        shortest again once a message came since the last)."""
        got = self._ring.received
        if got != self._seen:
            self._seen = got
            self._nap = NAP_MIN_S
        with MPI_LOCK:
            in_flight = self._ring.reap()  # the envelopes' sends still in flight
            if self._sends:
                self._reap()
            if in_flight or self._sends:
                return 0.0
        nap = self._nap
        self._nap = min(nap * 2, NAP_MAX_S)
        return nap if timeout is None else max(0.0, min(nap, timeout))

    def wait_readable(self, timeout: float | None) -> bool:
        return self.wait_readable_fds((), timeout)

    def wait_readable_fds(self, fds: Sequence[int], timeout: float | None) -> bool:
        """Up to ``timeout`` seconds (None: forever) until a message is ready or one of
        ``fds`` is readable: look, then nap (``select`` on ``fds``) and look again."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready():
                self._nap = NAP_MIN_S
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            t = self._nap_for(left)
            if not t:
                os.sched_yield()
                continue
            if fds:
                r, _, _ = select.select(list(fds), [], [], t)
                if r:
                    self._nap = NAP_MIN_S
                    return True
            else:
                time.sleep(t)

    def recv_wait(self, timeout: float | None) -> tuple[bytes, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            m = self.recv()
            if m is not None:
                return m
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            t = self._nap_for(left)
            if t:
                time.sleep(t)
            else:
                os.sched_yield()

    # -- the rest ---------------------------------------------------------------------------
    def statistics(self) -> ConduitStatistics:
        sent, sent_bytes, received, received_bytes, dropped = self._ring.counts()
        return ConduitStatistics(
            self.name, self._address, sum(sent), received, sent_bytes, received_bytes,
            self.dropped + dropped, sum(1 for s in sent if s), 0)

    def close(self, linger: float = 0.5) -> None:
        with MPI_LOCK:
            if self._closed:
                return
            self._closed = True
            self._ring.stop()
        deadline = time.monotonic() + linger
        while True:
            with MPI_LOCK:
                self._reap()
                left = self._ring.reap()
                if (not self._sends and not left) or time.monotonic() >= deadline:
                    break
            time.sleep(NAP_MIN_S)
        with MPI_LOCK:
            _orphans.extend(self._sends)
            self._sends.clear()
            self._ring.shutdown()  # envelopes still in flight stay with MPI, never freed
            for req, _, _ in self._pre.values():
                req.Cancel()
                req.Wait()
            self._pre = {}
