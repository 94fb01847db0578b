"""The AM engine of one process: sending, receiving, running handlers, waiting.

One :class:`Engine` per rank process, shared by its rank-threads; one :class:`RankState` per
rank. Each destination process has a route (:attr:`Engine.route`): AMs to ranks of this
process run in-line in the sender; AMs to the other processes of the node go through the
shared-memory network (:mod:`amnet.pshm`, unless ``AMNET_PSHM=0``); everything else goes
through the conduit. Puts, gets and atomics to node-local ranks are direct copies and
hardware atomics. The engine checks every header it receives before using it: a
malformed or out-of-range message is dropped and counted, never run and never written to a
segment.

Threads: sends may come from any thread (the conduit locks per destination). Only one thread
drains at a time (``drain_lock``); handlers run on the draining thread with the restricted
context marked by the token current on that thread. A thread that cannot drain waits on
``cond`` for the drainer to make progress (block mode) or keeps trying (spin mode). A
*lock-free* engine (one rank-thread, ``thread_safe`` not 1, no progress thread: one thread
calls amnet) takes no drain lock on the C fast path.

The hot path (:mod:`amnet.core._hot`, C) sends and runs user Short/Medium AMs within the node,
drains the shared-memory queues, makes the tokens and spins in ``wait_until``; whatever it does
not handle comes back to the methods here (``send_user``, ``dispatch``, ``drain_net``,
``wait_slow``...), which remain the reference for every check and error.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._errors import (
    AMContextError,
    InitError,
    JobAborted,
    PshmSpaceError,
)
from ..conduits import get_conduit
from ..pshm._layout import COLL_AREA, pshm_prefix
from ..pshm._native import Words
from . import _hot
from . import _wire as W
from ._barrier import Barrier
from ._dispatch import Dispatching
from ._extension import system_table
from ._handlers import HandlerTable
from ._hot import Token, current_token
from ._ops import DONE, Bucket, Done, Handle
from ._progress import CONDUIT_POLL_S, SPIN_THEN_BLOCK_S, SPIN_THEN_NAP_S, Progress
from ._send import Sending
from ._sys import SYSTEM_HANDLERS

#: What a request handler is told when it tries to send anything but its reply, and a reply
#: handler when it tries to send at all (the C hot path says the same: set_errors).
FORWARD_HINT = ("; a request handler sends only its one reply to its source "
                "(token.reply_*()); to forward to another rank, defer the send to after the "
                "handler: ep.defer(fn, ...)")
REPLY_HINT = ": a reply handler sends nothing; to send afterwards, ep.defer(fn, ...)"
#: ... and any handler when it tries to poll, wait or block.
RESTRICTED_HINT = (": handlers run in a restricted context (no polling, waiting, barriers or "
                   "blocking communication)")
_hot.set_errors(InitError, AMContextError, FORWARD_HINT, REPLY_HINT, RESTRICTED_HINT)
_hot.set_handles(Handle, Done, DONE)  # what the C get_nb and put_nb return within the node
INLINE, PSHM, NET = W.INLINE, W.PSHM, W.NET  # how a destination process is reached (route)
class HotHooks(NamedTuple):
    """What the C hot path (:class:`amnet.core._hot.Hot`) reads of its engine and calls back,
    declared once: C takes the fields by position and checks these names when the engine is
    made (``HOOKS`` in amnet/core/_hot_engine.c), so a rename fails there, not mid-job."""

    size: int  # ranks in the job
    T: int  # rank-threads of this process
    first: int  # its first rank
    max_medium: int
    seg_size: int
    send_user: Callable[..., Any]  # a user AM C does not send itself (Engine.send_user)
    dispatch: Callable[..., Any]  # a message C does not run itself: checks, runs, refuses
    queue_full: Callable[[bool], None]  # a shared-memory queue is full: make progress
    handler_failed: Callable[..., None]  # a user handler C ran raised
    drain_net: Callable[..., int]  # after the queues: the conduit (throttled)
    wait_slow: Callable[..., bool]  # wait_until's blocking part
    run_deferred: Callable[[], None]
    wake_waiters: Callable[[], None]  # after a drain that ran something
    refuse: Callable[[], None]  # count a message dropped as malformed
    sys_handler_failed: Callable[..., None]  # an extension's system handler raised
    deferred: collections.deque  # the deferred work (C looks whether it is empty)
    delayed: collections.deque  # messages held back by AMNET_NET_LATENCY_US
    abort_error: Callable[[], BaseException | None]  # the job's JobAborted once it ends
    engine: Any  # the engine itself: what a Handle made in C holds (Handle(eng, op, kind))


def _aligned_zeros(n: int) -> np.ndarray:
    """``n`` zero bytes starting on a cache line (the node area's flags need it)."""
    raw = np.zeros(n + 64, dtype=np.uint8)
    skip = -raw.ctypes.data % 64
    return raw[skip:skip + n]

class RankState:
    """Per-rank AM state: handler table, segment, outstanding operations, barrier."""

    def __init__(self, eng: Engine, rank: int, segment_size: int,
                 memory: Any = None) -> None:
        self.eng = eng
        self.rank = rank
        self.table = HandlerTable()
        # in the process's shared object when PSHM is on, else private memory
        self.segment = (np.zeros(segment_size, dtype=np.uint8) if memory is None else
                        np.frombuffer(memory, dtype=np.uint8))
        self.ops: dict[int, Any] = {}  # op id -> pending operation (completed by replies)
        self._next_op = 1
        self.on_handler_error: Callable[[BaseException, str, int], Any] | None = None
        self.lock = threading.Lock()
        self.inflight = 0  # operations of this rank not yet complete (for fence)
        self.nbi = Bucket()  # implicit-handle operations outside access regions
        self.regions: list[Bucket] = []
        self.barrier = Barrier(eng, rank)
        self.finalizing = False  # in amnet.finalize() (for the launcher's diagnosis only)
        self.finalized = False
        self.ports: dict[str, Any] = {}  # extension name -> Port (amnet.core._extension)
        # the rank's node area (amnet.coll's node collectives): in the process's shared
        # object with PSHM, private memory where the node has this process only, None with
        # PSHM off
        self.area: np.ndarray | None = None
        self.sync_hooks: list[Callable[[str], Any]] = []  # run at fence / barrier_notify

    def new_op(self, op: Any) -> int:
        """A fresh op id for ``op``, kept until its reply claims it (:meth:`claim`). Several
        threads start operations of one rank (the rank's own, deferred work on whichever
        thread polls): the id is taken under the rank's lock."""
        with self.lock:
            opid = self._next_op
            self._next_op = opid + 1 if opid < W.INT64_MAX else 1
            self.ops[opid] = op
        return opid

    def claim(self, opid: int, src: int) -> Any:
        """The operation ``opid`` when it went to ``src``, taken out of the table (so that a
        second reply finds nothing, whichever thread runs it); else None."""
        op = self.ops.pop(opid, None)
        if op is not None and op.peer != src:  # not from the rank the op went to: put back
            self.ops[opid] = op
            return None
        return op


class Engine(Sending, Dispatching, Progress):
    """The AM machinery of one process (see the module docstring)."""

    def __init__(self, topo: Any, config: Any, proc: int, boot: Any, curve: Any,
                 bind_host: str, job: dict[str, Any] | None = None) -> None:
        self.topo = topo
        self.config = config
        self.proc = proc
        self.size = topo.size
        self.T = topo.threads_per_proc
        self.first = proc * self.T
        self.ranks_per_node = self.T * topo.procs_per_node
        self.node = self.first // self.ranks_per_node
        self.seg_size = config.segment_size
        self.max_medium = config.max_medium
        self.max_message = max(self.seg_size, 16 << 20)  # what one conduit message may carry
        self.boot = boot
        self.conduit = get_conduit(config.conduit)(proc, topo.procs, bind_host, curve, config,
                                                    secret=(job or {}).get("token"))
        self.ranks: list[RankState | None] = [None] * self.T
        self.cond = threading.Condition(threading.Lock())
        self.gen = 0
        self.latency = config.net_latency_us * 1e-6
        self.delayed: collections.deque = collections.deque()
        # how long a waiting rank spins before it blocks: 0 (block), inf (spin); auto decides
        # in start() once it knows how many ranks share this host
        self.spin_s = {"block": 0.0, "spin": float("inf")}.get(config.wait_mode, 0.0)
        self.handled = 0
        self.refused = 0
        self.stats_lock = threading.Lock()  # the counters above and below: bumped by any thread
        self.loops = 0  # event loops driving this process's progress (amnet.aio)
        self.deferred: collections.deque = collections.deque()
        self.drain_wait_s = 0.0  # rank-threads' seconds waiting while another one drained
        # blocking waits that slept a whole BLOCK_SLICE_S with nothing to wake them, and of
        # those, the ones whose wait was satisfied all along (a missed wake-up)
        self.slices_expired = 0
        self.wakeups_missed = 0
        self.seg_views: dict[int, np.ndarray] = {}
        self.seg_words: dict[int, Any] = {}
        self._progress: threading.Thread | None = None
        self._stop = False
        self.closed = False
        # put/get/atomic/barrier/rpc, then each extension's (VIS, upc_rt, ...), by index
        self.sys = system_table(SYSTEM_HANDLERS)
        # how each destination process is reached: INLINE (this process), PSHM (the node's
        # shared memory) or NET (the conduit; also node-local with PSHM off)
        node_procs = topo.procs_of_node(topo.node_of_proc(proc))
        self.route = [NET] * topo.procs
        self.route[proc] = INLINE
        use_pshm = bool(config.pshm and len(node_procs) > 1 and job is not None)
        if use_pshm:
            if job.get("pshm_error"):  # the agent found the node too small for all objects
                raise PshmSpaceError(job["pshm_error"])
            for p in node_procs:
                if p != proc:
                    self.route[p] = PSHM
        self.local_node_procs = node_procs
        self.pshm_on = bool(config.pshm)
        # processes with faster paths than the conduit (shared memory, in-line AMs between
        # rank-threads) look at the conduit less often while it is idle
        self.throttle = use_pshm or self.T > 1
        ts = config.thread_safe
        self.thread_safe = ts == "1" or (ts == "auto" and self.T > 1)
        self.hot = _hot.Hot(HotHooks(
            self.size, self.T, self.first, self.max_medium, self.seg_size, self.send_user,
            self.dispatch, self._queue_full, self.handler_failed, self.drain_net,
            self.wait_slow, self.run_deferred, self.wake_waiters, self._refuse,
            self.sys_handler_failed, self.deferred, self.delayed, self.abort_error, self),
            self.route,
                            self.T == 1 and not self.thread_safe and not config.progress_thread,
                            CONDUIT_POLL_S if self.throttle else 0.0)
        self.hot.set_spin(self.spin_s)
        # user Short/Medium AMs to other nodes go from C straight to the conduit's send, and
        # those it brings are checked and run in C (the rest comes back to dispatch)
        self.hot.set_net_send(self.conduit.send)
        self.net_dispatch = self.hot.net_dispatch
        # and a drain takes them from the conduit's recv in C as well, unless messages are
        # held back (AMNET_NET_LATENCY_US: drain_net delays them in Python)
        self.net_in_c = not self.latency
        self.hot.set_net_recv(self.conduit.recv if self.net_in_c else None)
        self.conduit.set_lander(self.land)
        signal = self.conduit.idle_signal()
        if signal is not None:
            self.hot.set_conduit_signal(*signal)
        self.drain_lock = self.hot.drain_lock
        # Where another thread of this process can end a wait without a message (an in-line
        # AM to a rank-thread, work deferred by a rank-thread), the drainer's sleep also
        # watches this eventfd, which hot.nudge() writes while it sleeps (hot owns it and
        # closes it when it goes).
        self.wake_fd: int | None = None
        if self.T > 1 or config.progress_thread:
            self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self.hot.set_wake_fd(self.wake_fd)
        self.pshm = None
        if use_pshm:
            from ..pshm._network import PshmNetwork

            self.pshm = PshmNetwork(node_procs, proc, self.T, config,
                                    pshm_prefix(job["token"]), job.get("doorbells"), self.hot)

    # -- setup ----------------------------------------------------------------------------
    def add_rank(self, rank: int,
                 endpoint_of: Callable[[RankState], Any] | None = None) -> RankState:
        """Make ``rank`` (a rank-thread of this process) reachable. ``endpoint_of(rs)`` makes
        its Endpoint, which ``token.endpoint`` returns: it exists before any AM can reach
        the rank, so a handler has it even while that rank-thread is still in amnet.init()."""
        mem = None if self.pshm is None else self.pshm.segment_buffer(rank - self.first)
        rs = RankState(self, rank, self.seg_size, mem)
        if self.pshm is not None:
            rs.area = np.frombuffer(self.pshm.area_buffer(rank - self.first), dtype=np.uint8)
        elif self.pshm_on and len(self.local_node_procs) == 1:
            rs.area = _aligned_zeros(COLL_AREA)
        rs.endpoint = None if endpoint_of is None else endpoint_of(rs)
        self.ranks[rank - self.first] = rs
        self.hot.add_rank(rank - self.first, rs, rs.table, rank)
        self.hot.set_segment(self.node * self.ranks_per_node, self.ranks_per_node, rank,
                             rs.segment)
        return rs

    def start(self, table: list[dict[str, Any]]) -> None:
        """Called once the job's address table is known (after the first init collective)."""
        addrs = [table[p * self.T]["conduit"] for p in range(self.topo.procs)]
        self.conduit.set_peers(addrs)
        if self.pshm is not None:
            self.pshm.attach({p: table[p * self.T]["pshm"] for p in self.local_node_procs})
            for p in self.local_node_procs:
                if p != self.proc:
                    for t in range(self.T):
                        self.hot.set_segment(self.node * self.ranks_per_node,
                                             self.ranks_per_node, p * self.T + t,
                                             self.pshm.peer_segment(p, t))
        if self.config.wait_mode == "auto":
            # Block when the ranks on this host outnumber its cores. Otherwise spin for a
            # while, then block: a round trip completes within the spin (on the 2-core VM
            # spinning halves it against blocking, see docs/benchmarks.md), while a long
            # wait (a stream of large puts) leaves the cores to the conduit's I/O threads.
            # Bound to cores of its own (bind_to=core), a rank spins for as long as it
            # waits: the only other thread on its core is its own process's, and a spinning
            # rank yields to it; a blocked one would wait for the scheduler to wake it.
            host = table[self.first]["host"]
            on_host = sum(1 for e in table if e["host"] == host)
            try:
                cores = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cores = os.cpu_count() or 1
            # A conduit with no descriptor to block on (mpi) naps instead, and a nap costs at
            # least the kernel's timer slack (50 us): spin longer before the first one.
            self.spin_s = 0.0 if on_host > cores else (
                float("inf") if self.config.bind_to == "core" else
                SPIN_THEN_BLOCK_S if self.conduit.pollable else SPIN_THEN_NAP_S)
            self.hot.set_spin(self.spin_s)
        if self.config.bind_to == "core":  # after auto's choice: it counts the host's cores
            self._bind([p for p in range(self.topo.procs)
                        if table[p * self.T]["host"] == table[self.first]["host"]])
        if self.config.progress_thread and self._progress is None:
            self._progress = threading.Thread(target=self._progress_loop, daemon=True,
                                              name=f"amnet-progress-{self.proc}")
            self._progress.start()

    def _bind(self, host_procs: list[int]) -> None:
        """``bind_to=core``: this process and every thread it has (and will have) on cores
        ``i*T .. i*T+T-1`` of the usable ones, wrapping, where ``i`` is its place among the
        processes of its host and ``T`` its rank-threads. Where the platform cannot bind
        (no ``sched_setaffinity``), nothing is bound."""
        if not hasattr(os, "sched_setaffinity"):
            return
        try:
            usable = sorted(os.sched_getaffinity(0))
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            return
        i = host_procs.index(self.proc)
        mine = {usable[(i * self.T + t) % len(usable)] for t in range(self.T)}
        for tid in tids:
            try:
                os.sched_setaffinity(tid, mine)
            except OSError:  # a thread that ended meanwhile
                pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop = True
        if self._progress is not None:
            self._progress.join(1.0)
        # Once every rank of the process finalized, everything it sent was received (the
        # finalize barrier, then the bootstrap's, which every rank entered after its AM
        # barrier completed): nothing is left worth lingering for.
        done = all(rs is not None and rs.finalized for rs in self.ranks)
        with self.drain_lock:
            self.conduit.close(0.0 if done else 0.5)
            if self.pshm is not None:
                self.pshm.close()

    # -- context checks -------------------------------------------------------------------
    def in_handler(self) -> Token | None:
        return current_token()

    def forbid_in_handler(self, what: str) -> None:
        tok = current_token()
        if tok is not None:
            kind = "request" if tok.is_request else "reply"
            raise AMContextError(f"{what} inside {kind} handler {tok.handler}{RESTRICTED_HINT}")

    def forbid_send_in_handler(self, what: str) -> None:
        tok = current_token()
        if tok is not None:
            kind = "request" if tok.is_request else "reply"
            extra = FORWARD_HINT if tok.is_request else REPLY_HINT
            raise AMContextError(f"{what} inside {kind} handler {tok.handler}{extra}")

    # -- node-local memory ----------------------------------------------------------------
    def local_segment(self, rank: int) -> np.ndarray | None:
        """Rank ``rank``'s segment as a numpy uint8 array when this process can address it
        (a rank of this process, or of the node with PSHM on), else None."""
        v = self.seg_views.get(rank)
        if v is None:
            proc = rank // self.T
            route = self.route[proc]
            if route == INLINE:
                rs = self.ranks[rank - self.first]
                if rs is None:
                    return None
                v = rs.segment
            elif route == PSHM:
                v = np.frombuffer(self.pshm.peer_segment(proc, rank % self.T), dtype=np.uint8)
            else:
                return None
            self.seg_views[rank] = v
        return v

    def local_area(self, rank: int) -> np.ndarray | None:
        """Rank ``rank``'s node area (numpy uint8, COLL_AREA bytes) when this process can
        address it (a rank of this process, or of the node with PSHM on) and PSHM is on,
        else None (also before that rank-thread of this process is made)."""
        proc = rank // self.T
        route = self.route[proc]
        if route == INLINE:
            rs = self.ranks[rank - self.first]
            return None if rs is None else rs.area
        if route == PSHM:
            return np.frombuffer(self.pshm.peer_area(proc, rank % self.T), dtype=np.uint8)
        return None

    def segment_words(self, rank: int) -> Any:
        """Native atomic access to rank ``rank``'s (addressable) segment."""
        w = self.seg_words.get(rank)
        if w is None:
            w = Words(self.local_segment(rank))
            self.seg_words[rank] = w
        return w

    def abort_error(self) -> JobAborted | None:
        """The job's JobAborted once the bootstrap client has seen the job end, else None."""
        boot = self.boot
        return None if boot is None else boot.aborted


