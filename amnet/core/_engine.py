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
import select
import struct
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._errors import (
    AMArgumentError,
    AMContextError,
    HandlerCategoryError,
    InitError,
    JobAborted,
    PayloadTooLarge,
    PshmSpaceError,
    RankError,
    SegmentBoundsError,
)
from ..pshm._layout import COLL_AREA, F_DEPOSITED, pshm_prefix
from ..pshm._native import Words
from . import _hot
from . import _wire as W
from ._barrier import Barrier
from ._bytes import as_bytes
from ._current import _tls, fail_rank
from ._extension import handler_label, system_table
from ._handlers import HandlerTable, handler_name
from ._hot import Token, current_token
from ._ops import DONE, Bucket, Done, Handle
from ._sys import PUT as _SYS_PUT
from ._sys import SYSTEM_HANDLERS, landed
from .conduit import get_conduit

#: What a request handler is told when it tries to send anything but its reply, and a reply
#: handler when it tries to send at all (the C hot path says the same: set_errors).
FORWARD_HINT = ("; a request handler sends only its one reply to its source "
                "(token.reply_*()); to forward to another rank, defer the send to after the "
                "handler: ep.defer(fn, ...)")
REPLY_HINT = ": a reply handler sends nothing; to send afterwards, ep.defer(fn, ...)"
_hot.set_errors(InitError, AMContextError, FORWARD_HINT, REPLY_HINT)
_hot.set_handles(Handle, Done, DONE)  # what the C get_nb and put_nb return within the node
BLOCK_SLICE_S = 0.05  # a sleeping rank re-checks aborts this often
WAKE_GRACE_S = 0.002  # a wake-up this late after a slice timed out is not a missed one
DIRECT_WAIT_S = 1e-4  # a rank waiting for a direct send while another drains re-checks so often
# The progress rules have one owner, the C hot path (amnet/core/_hot.h): how many messages a
# drain runs before its caller re-checks its condition, the conduit throttle (Hot.conduit_due)
# and when a spinning thread gives its core away (Hot.idle).
DRAIN_BUDGET = _hot.DRAIN_BUDGET
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
SPIN_THEN_BLOCK_S = 100e-6  # auto on an uncrowded host: spin this long, then block
SPIN_THEN_NAP_S = 10e-3  # the same where the conduit cannot block (mpi): then nap
INLINE, PSHM, NET = W.INLINE, W.PSHM, W.NET  # how a destination process is reached (route)
_FUNCTION = type(lambda: None)
_ARGS = W.ARGS
CONDUIT_POLL_S = 5e-6  # with PSHM on, an idle conduit is looked at this often



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


class Engine:
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
            raise AMContextError(f"{what} inside {kind} handler {tok.handler}: handlers run in "
                                 "a restricted context (no polling, waiting, barriers or "
                                 "blocking communication)")

    def forbid_send_in_handler(self, what: str) -> None:
        tok = current_token()
        if tok is not None:
            kind = "request" if tok.is_request else "reply"
            extra = FORWARD_HINT if tok.is_request else REPLY_HINT
            raise AMContextError(f"{what} inside {kind} handler {tok.handler}{extra}")

    def check_dest(self, dest: Any) -> int:
        if type(dest) is not int or not 0 <= dest < self.size:
            if isinstance(dest, bool) or not isinstance(dest, int | np.integer):
                raise RankError(f"a rank must be an int, got {type(dest).__name__}")
            dest = int(dest)
            if not 0 <= dest < self.size:
                raise RankError(f"rank {dest} is out of range: this job has ranks "
                                f"0..{self.size - 1}")
        return dest

    def check_range(self, what: str, rank: int, offset: Any, nbytes: int) -> int:
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
            raise TypeError(f"{what}: offset must be an int, got {type(offset).__name__}")
        offset = int(offset)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.seg_size:
            raise SegmentBoundsError(
                f"{what}: bytes [{offset}, {offset + nbytes}) are outside rank {rank}'s "
                f"segment of {self.seg_size} bytes")
        return offset

    # -- sending --------------------------------------------------------------------------
    def send_user(self, rs: RankState, flags: int, dest: int, handler: Any, payload: Any,
                  offset: int, args: tuple) -> None:
        """Check everything, then send one user AM (request or reply)."""
        if type(dest) is not int or not 0 <= dest < self.size:
            dest = self.check_dest(dest)
        table = rs.table
        idx = table.by_fn.get(handler) if type(handler) is _FUNCTION else None
        if idx is None:
            idx = table.index(handler)
        cat = flags & 3  # W.CATEGORY_MASK
        want = table.cats[idx]
        if want is not None and want != cat:
            raise HandlerCategoryError(
                f"handler {table.names[idx]} is declared {('short', 'medium', 'long', 'rpc')[want]}"
                f" but was sent as a {W.CATEGORY_NAMES[cat]} AM")
        nargs = len(args)
        if nargs > 16:  # W.MAX_ARGS
            raise AMArgumentError(f"{nargs} AM arguments given; at most amnet.MAX_ARGS == "
                                  f"{W.MAX_ARGS}")
        if table.nargs[idx] is not None and table.nargs[idx] != nargs:
            raise AMArgumentError(f"handler {table.names[idx]} is declared with "
                                  f"{table.nargs[idx]} arguments, {nargs} given")
        if cat == 0:  # W.SHORT
            length = 0
        else:
            payload, length = as_bytes(payload, "payload")
            if cat == W.MEDIUM:
                if length > self.max_medium:
                    raise PayloadTooLarge(
                        f"Medium payload of {length} bytes is over ep.max_medium = "
                        f"{self.max_medium} bytes (AMNET_MAX_MEDIUM); use a Long AM or put")
            else:
                offset = self.check_range("Long AM", dest, offset, length)
        if nargs and bool in map(type, args):
            raise AMArgumentError(bad_args_message(args))
        dproc = dest // self.T
        route = self.route[dproc]
        if route == INLINE:
            if nargs:
                try:
                    _ARGS[nargs].pack(*args)  # the checks the wire would make
                except struct.error:
                    raise AMArgumentError(bad_args_message(args)) from None
                for a in args:
                    if type(a) is not int:  # numpy ints arrive as ints, as from the wire
                        args = tuple(map(int, args))
                        break
            return self._inline_user(rs, flags, dest, idx, payload, length, offset, args)
        try:
            header = W.HEADERS[nargs].pack(flags, nargs, idx, rs.rank, dest, offset, *args)
        except struct.error:
            raise AMArgumentError(bad_args_message(args)) from None
        if route == PSHM:
            if cat == W.LONG:  # straight into the destination segment, then the header
                if length:
                    self.local_segment(dest)[offset:offset + length] = np.frombuffer(
                        payload, dtype=np.uint8)
                self.hot.pshm_send(dproc, flags & W.REPLY, header, None, length, F_DEPOSITED)
            else:
                self.hot.pshm_send(dproc, flags & W.REPLY, header, payload,
                                   length if cat == W.MEDIUM else -1, 0)
            return
        self.conduit.send(dproc, header, payload if length else None)

    def send_sys(self, src: int, dest: int, hidx: int, args: tuple, payload: Any = None,
                 reply: bool = False, offset: int = 0, copy: bool = True,
                 direct: bool = False) -> None:
        """Send a system AM (already checked by the caller).

        ``direct``: the caller (a rank's own thread, outside handlers) may wait until the
        conduit no longer needs ``payload``; where the conduit gains by it (its
        ``direct_min``), the payload goes out from the caller's buffer and this returns once
        the conduit has taken it, serving AMs meanwhile, instead of copying it.
        """
        flags = W.SYSTEM | (W.REPLY if reply else 0) | (W.LONG if payload is not None else 0)
        dproc = dest // self.T
        route = self.route[dproc]
        if route == INLINE:
            mv = None if payload is None else as_bytes(payload, "payload")[0]
            if mv is not None and not isinstance(mv, memoryview):
                mv = memoryview(mv)
            drs = self.ranks[dest - self.first]
            if drs is None:
                return self._refuse()
            self.sys[hidx](self, drs, src, args, mv, offset, flags)
            with self.stats_lock:
                self.handled += 1
            self.hot.nudge(dest - self.first)  # it may have completed a wait of dest's thread
            return
        header = W.HEADERS[len(args)].pack(flags, len(args), hidx, src, dest, offset, *args)
        if route == PSHM:
            if payload is None:
                self.hot.pshm_send(dproc, reply, header, None, -1, 0)
            else:
                mv, n = as_bytes(payload, "payload")
                self.hot.pshm_send(dproc, reply, header, mv, n, 0)
            return
        conduit = self.conduit
        if direct and conduit.direct_min is not None and payload is not None:
            mv, n = as_bytes(payload, "payload")
            if n >= conduit.direct_min:
                done = conduit.send_direct(dproc, header, mv)
                if not done():
                    self.wait_until(done, max_block=DIRECT_WAIT_S)
                return
        conduit.send(dproc, header, payload, copy)

    # -- in-line (same process) -----------------------------------------------------------
    def _inline_user(self, rs: RankState, flags: int, dest: int, idx: int, payload: Any,
                     length: int, offset: int, args: tuple) -> None:
        """Run the handler of an AM to a rank of this process right here (docs/design.md §3)."""
        drs = self.ranks[dest - self.first]
        table = drs.table if drs is not None else None
        if table is None or idx >= len(table.fns):
            return self._refuse()
        cat = flags & W.CATEGORY_MASK
        if cat == W.SHORT:
            call_args: tuple = args
        elif cat == W.MEDIUM:
            mv = memoryview(payload) if length else memoryview(b"")
            call_args = (mv.toreadonly(), *args)
        else:
            view = drs.segment[offset:offset + length]
            if length:
                view[:] = np.frombuffer(payload, dtype=np.uint8)
            call_args = (memoryview(view), *args)
        self.run_handler(drs, table.fns[idx], table.names[idx], rs.rank,
                         not flags & W.REPLY, call_args)
        self.hot.nudge(dest - self.first)  # it may have completed a wait of dest's thread

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

    # -- the shared-memory network --------------------------------------------------------
    # Sends go through ``hot.pshm_send`` (C): it takes the queue's producer lock, fragments a
    # payload larger than a slot, and calls ``_queue_full`` while the queue is full.
    def _queue_full(self, reply: bool) -> None:
        """A queue to a node-local process is full: make progress so it empties.

        A reply is sent by the thread that drains (from a handler): it runs only incoming
        replies, whose handlers send nothing, so it cannot recurse into requests. A request
        (never sent from a handler) polls everything, if no other thread is draining.

        Raises:
            JobAborted: the job is being torn down.
        """
        if reply:
            if not self.hot.drain(True):
                _yield()
        elif self.drain_lock.acquire(False):
            try:
                n = self.drain()
            finally:
                self.drain_lock.release()
            if self.hot.waiters:  # they re-check whenever the drainer lets go of the lock
                self._wake()
            if not n:
                _yield()
        else:
            _yield()
        boot = self.boot
        if boot is not None and boot.aborted is not None:
            raise boot.aborted

    def defer(self, fn: Callable[[], Any], rank: int | None = None) -> None:
        """Run ``fn`` at the next poll outside handler context (handlers must not send
        requests: the barrier sends its next round from here). Whichever thread of this
        process polls or waits next runs it, before it blocks; a drainer asleep in a receive
        is woken for it. Deferred from a user handler (a token is current), it runs only once
        that handler has returned. ``rank``: the rank (of this process) it is deferred for,
        whose waits it may complete and which an exception of ``fn`` fails
        (:meth:`deferred_failed`)."""
        tok = current_token()
        with self.cond:
            self.deferred.append((fn, rank, tok))
        if tok is None:  # a handler's thread runs it itself once the handler has returned
            self.hot.nudge_deferred()

    def run_deferred(self) -> None:
        """Run what was deferred, in order, outside handler context; an entry whose user
        handler is still running (on another thread) and those behind it wait. Each may
        complete a wait of its rank's thread without a message (a barrier's last round
        merged): that thread is nudged as after an in-line AM."""
        if current_token() is not None or self.hot.in_drain():
            # in a handler, or inside a drain (a system handler's or a wait condition's
            # poll): what it sends may block while this thread keeps the process from
            # draining; the drain's caller runs it once it has let go of the lock
            return
        while self.deferred:
            with self.cond:
                if not self.deferred:
                    return
                fn, rank, tok = self.deferred[0]
                if tok is not None and tok._live:
                    return
                self.deferred.popleft()
            try:
                fn()
            except Exception as e:
                self.deferred_failed(rank, fn, e)
            self.hot.nudge(-1 if rank is None else rank - self.first)

    # -- receiving ------------------------------------------------------------------------
    def drain(self, pred: Callable[[], Any] | None = None, wait: float | None = None,
              pure: bool = False) -> int:
        """Run what has arrived (the caller holds ``drain_lock``); return how many ran.

        Stops early once ``pred()`` holds. ``wait`` (seconds) lets the first receive block
        that long. With ``AMNET_NET_LATENCY_US`` set, messages from other nodes wait in
        ``delayed`` until their time has come (all get the same delay, so FIFO per pair
        holds).
        """
        n = 0
        if self.delayed or self.deferred:
            # drain_net runs those due; the caller's wait is up to the next one. Deferred
            # work (sends) must not wait behind a sleep: the caller runs it next.
            wait = None
        net = self.pshm
        if net is not None:
            k = self.hot.drain()
            if k:
                n += k
                wait = None
                if pred is not None and pred():
                    return n
            if wait is not None and wait < 0.001:
                wait = None  # the conduit's poll counts whole ms: look again instead
            if wait is not None:  # sleep on the doorbell and the conduit together
                net.sleep(lambda fds, t: self._block(fds, t, pred, pure), wait)
                wait = None
                n += self.hot.drain()
                # what woke us may have completed the wait without a message (a node
                # collective's flag): then the conduit is left for the next drain, as after
                # messages that did (a look at it costs as much as a small collective)
                if pred is not None and pred():
                    return n
        if wait is None and not self.hot.conduit_due():
            return n  # the throttle: the conduit was looked at less than CONDUIT_POLL_S ago
        return n + self.drain_net(pred, wait, pure)

    def drain_net(self, pred: Callable[[], Any] | None, wait: float | None = None,
                  pure: bool = False) -> int:
        """Run what the conduit brought (and delayed messages now due); return how many ran.
        The C hot path calls this (throttled) after draining the shared-memory queues."""
        n = 0
        delayed = self.delayed
        if delayed:
            now = time.monotonic()
            while delayed and delayed[0][0] <= now and n < DRAIN_BUDGET:
                _, header, payload = delayed.popleft()
                self.net_dispatch(header, payload)
                n += 1
            if n:
                wait = None
        conduit = self.conduit
        latency = self.latency
        seen = 0
        while seen < DRAIN_BUDGET:
            if wait is None:
                m = conduit.recv()
            elif self.wake_fd is None:  # one thread: nothing but a message ends the wait
                m = conduit.recv_wait(wait)
                if m is None:  # one thread: nothing else could have woken it
                    self._expired(wait, pred, lambda: False)
                wait = None
            else:
                m = conduit.recv() if self._block((), wait, pred, pure) else None
                wait = None
            if m is None:
                break
            seen += 1
            if latency and self._remote(m[0]):
                delayed.append((time.monotonic() + latency, m[0], m[1]))
                continue
            self.net_dispatch(m[0], m[1])
            n += 1
            if pred is not None and pred():
                break
        if seen:
            self.hot.conduit_rearm()  # it brought something: look again next time
        return n

    def land(self, header: bytes, n: int) -> np.ndarray | None:
        """Where a conduit may receive the ``n``-byte payload of message ``header`` (see
        :meth:`Conduit.set_lander`): the destination in the segment of a put or a user Long
        request to a rank of this process, when the header is in range; else None (and
        always with AMNET_NET_LATENCY_US: a delayed put must not land before earlier ones)."""
        if self.latency or len(header) < W.FIXED_SIZE:
            return None
        flags, nargs, hidx, src, dst, offset = W.FIXED.unpack_from(header)
        if (flags & (W.CATEGORY_MASK | W.REPLY) != W.LONG or flags & ~W.KNOWN_FLAGS
                or len(header) != W.FIXED_SIZE + 8 * nargs or src >= self.size):
            return None
        li = dst - self.first
        if not 0 <= li < self.T or offset + n > self.seg_size:
            return None
        rs = self.ranks[li]
        if rs is None:
            return None
        # only what dispatch will accept: a refused message must not have written a byte
        if flags & W.SYSTEM:
            if hidx != _SYS_PUT or nargs != 1:
                return None
        else:
            table = rs.table
            if (hidx >= len(table.fns) or table.cats[hidx] not in (None, W.LONG)
                    or table.nargs[hidx] not in (None, nargs)):
                return None
        return rs.segment[offset:offset + n]

    def _block(self, fds: Any, t: float, pred: Callable[[], Any] | None,
               pure: bool = False) -> bool:
        """The drainer's one blocking point: sleep up to ``t`` seconds until the conduit
        or one of ``fds`` (the shared-memory doorbell) is readable, or another thread of
        this process nudges (``wake_fd``: an in-line AM ran a handler, work was deferred).
        Returns whether anything may be ready.

        The sleeping flag is set (seq_cst), with this thread's rank and, when ``pure`` (an
        engine wait on plain attributes), ``pred`` published, before the last look at
        ``pred`` and the deferred work, so whatever completes the wait after that look sees
        it and wakes us: deferred work always; an in-line AM when ``pred()`` now holds, or,
        for a caller's predicate (never run on another thread), when the AM was for this
        thread's rank. A sibling's AMs that do not concern this wait leave it asleep.
        """
        wake = self.wake_fd
        woken = False
        if wake is None:
            # the sleeping flag is up: a store that completes the wait without a message
            # (a node collective's flag) after this look rings the doorbell
            if pred is not None and pred():
                return True
            ready = self.conduit.wait_readable_fds(fds, t)
        else:
            hot = self.hot
            hot.sleep_begin(pred if pure else None, self._my_slot())
            try:
                if self.deferred or (pred is not None and pred()):
                    return True
                ready = self.conduit.wait_readable_fds((*fds, wake), t)
            finally:
                hot.sleep_end()
                try:
                    os.eventfd_read(wake)
                    woken = True  # a nudge came, if only as the wait timed out
                except (BlockingIOError, OSError):
                    pass
        if not ready and not woken:
            self._expired(t, pred, lambda: self._late_nudge(wake))
        return ready

    @staticmethod
    def _late_nudge(wake: int | None) -> bool:
        """Whether a nudge comes within ``WAKE_GRACE_S`` (one on its way as a sleep timed
        out is no missed wake-up); consumes it."""
        if wake is None or not select.select([wake], [], [], WAKE_GRACE_S)[0]:
            return False
        try:
            os.eventfd_read(wake)
        except (BlockingIOError, OSError):
            pass
        return True

    def _my_slot(self) -> int:
        """The calling thread's rank-thread index in this process, -1 for another thread
        (the progress thread)."""
        ctx = getattr(_tls, "rank", None)
        t = -1 if ctx is None else ctx.rank - self.first
        return t if 0 <= t < self.T else -1

    def _expired(self, t: float, pred: Callable[[], Any] | None,
                 late: Callable[[], bool]) -> None:
        """A blocking wait of ``t`` seconds ended with nothing ready and nobody having tried
        to wake it: count a whole slice, and a missed wake-up when the wait was satisfied
        all along (its condition held, or deferred work waited to be sent) and no wake-up
        comes within ``WAKE_GRACE_S`` either (``late()``: one may have been on its way as the
        wait timed out): statistics()."""
        if t >= BLOCK_SLICE_S:
            missed = (self._deferred_due() or (pred is not None and pred())) and not late()
            with self.stats_lock:
                self.slices_expired += 1
                self.wakeups_missed += bool(missed)

    def _late_gen(self, gen: int) -> bool:
        """A wake-up (a new ``gen``) comes within ``WAKE_GRACE_S`` (see :meth:`_expired`)."""
        with self.cond:
            return self.cond.wait_for(lambda: self.gen != gen, WAKE_GRACE_S)

    def _deferred_due(self) -> bool:
        """Deferred work that may run now (not waiting for its handler to return). Takes no
        lock (a deque's reads are atomic)."""
        try:
            tok = self.deferred[0][2]
        except IndexError:
            return False
        return tok is None or not tok._live

    def _remote(self, header: bytes) -> bool:
        if len(header) < W.FIXED_SIZE:
            return False
        src = int.from_bytes(header[4:8], "little")
        return src // self.ranks_per_node != self.node

    def next_due(self) -> float | None:
        return self.delayed[0][0] if self.delayed else None

    def dispatch(self, header: bytes, payload: Any, deposited: int = -1) -> None:
        """Check one message and run its handler; drop it if anything is out of range.

        ``deposited`` >= 0: a Long payload of that many bytes is already in the segment
        (the shared-memory network writes it there before queueing the header)."""
        try:
            flags, nargs, hidx, src, dst, offset = W.FIXED.unpack_from(header)
        except struct.error:
            return self._refuse()
        li = dst - self.first
        if (nargs > W.MAX_ARGS or len(header) != W.FIXED_SIZE + 8 * nargs
                or flags & ~W.KNOWN_FLAGS or src >= self.size or not 0 <= li < self.T):
            return self._refuse()
        rs = self.ranks[li]
        if rs is None:
            return self._refuse()
        args = W.ARGS[nargs].unpack_from(header, W.FIXED_SIZE)
        if flags & W.SYSTEM:
            if hidx >= len(self.sys):
                return self._refuse()
            if (flags & W.LONG and payload is None) or deposited >= 0:
                return self._refuse()
            try:
                self.sys[hidx](self, rs, src, args, payload, offset, flags)
            except Exception:  # a forged system message: never let it take the rank down
                self._refuse()
                return
            with self.stats_lock:
                self.handled += 1
            return
        table = rs.table
        if hidx >= len(table.fns):
            return self._refuse()
        cat = flags & W.CATEGORY_MASK
        want = table.cats[hidx]
        if (cat > W.LONG or (want is not None and want != cat)
                or (table.nargs[hidx] is not None and table.nargs[hidx] != nargs)):
            return self._refuse()
        if deposited >= 0 and cat != W.LONG:
            return self._refuse()
        if cat == W.SHORT:
            if payload is not None:
                return self._refuse()
            call_args: tuple = args
        elif cat == W.MEDIUM:
            if payload is None:
                payload = memoryview(b"")
            elif payload.nbytes > self.max_medium:
                return self._refuse()
            call_args = (payload, *args)
        else:
            n = deposited if deposited >= 0 else 0 if payload is None else payload.nbytes
            if offset + n > self.seg_size:
                return self._refuse()
            view = rs.segment[offset:offset + n]
            if n and deposited < 0 and not landed(payload, view):
                view[:] = np.frombuffer(payload, dtype=np.uint8)
            call_args = (memoryview(view), *args)
        self.run_handler(rs, table.fns[hidx], table.names[hidx], src,
                         not flags & W.REPLY, call_args)

    def abort_error(self) -> JobAborted | None:
        """The job's JobAborted once the bootstrap client has seen the job end, else None."""
        boot = self.boot
        return None if boot is None else boot.aborted

    def _refuse(self) -> None:
        with self.stats_lock:
            self.refused += 1
        self.conduit.count_dropped()

    def run_handler(self, rs: RankState, fn: Callable, name: str, src: int, is_request: bool,
                    args: tuple) -> Any:
        """Run ``fn(token, *args)`` for rank ``rs`` (a failure goes to handler_failed)."""
        return self.hot.run_handler(rs.rank - self.first, fn, name, src, is_request, args)

    def handler_failed(self, rs: RankState, name: str, src: int, exc: BaseException) -> None:
        cb = rs.on_handler_error
        if cb is not None:
            try:
                cb(exc, name, src)
                return
            except BaseException as e2:
                exc = e2
        tb = "".join(traceback.format_exception(exc))
        try:  # the launcher's one-line diagnosis names the handler (_failure._error_record)
            exc.__amnet_context__ = f"in handler {name} (AM from rank {src})"
        except AttributeError:
            pass
        fail_rank(rs.rank, exc, f"handler {name} on rank {rs.rank} (AM from rank {src}) "
                                f"raised {type(exc).__name__}: {exc}", tb)

    def deferred_failed(self, rank: int | None, fn: Any, exc: BaseException) -> None:
        """A deferred function (``ep.defer``, ``port.defer``; ``rank``: the rank it was
        deferred for, None for the engine's own) raised: a bug, which ends the job as a
        handler's exception does, naming the function and the rank, unless that rank's
        ``on_handler_error`` takes it. JobAborted (the job ending anyway) goes on up."""
        if isinstance(exc, JobAborted):
            raise exc
        name = handler_name(getattr(fn, "func", fn))  # a functools.partial: its function
        if rank is None:
            rank = self.first
        rs = self.ranks[rank - self.first]
        cb = None if rs is None else rs.on_handler_error
        if cb is not None:
            try:
                cb(exc, f"{name} (deferred)", rank)
                return
            except BaseException as e2:
                exc = e2
        tb = "".join(traceback.format_exception(exc))
        try:
            exc.__amnet_context__ = f"in {name} (deferred)"
        except AttributeError:
            pass
        fail_rank(rank, exc, f"{name} (deferred) on rank {rank} raised "
                             f"{type(exc).__name__}: {exc}", tb)

    def sys_handler_failed(self, li: int, hidx: int, src: int, exc: BaseException) -> None:
        """An extension's system handler raised (run from C): a bug in the runtime, not a
        message to refuse. Ends the job as a user handler's exception does, naming the
        extension and the handler (unless the rank's on_handler_error takes it)."""
        self.handler_failed(self.ranks[li], handler_label(hidx), src, exc)

    # -- progress -------------------------------------------------------------------------
    def poll(self) -> int:
        """Run what has arrived, if no other thread of this process is doing it."""
        if not self.drain_lock.acquire(False):
            if self.deferred:
                self.run_deferred()
            return 0
        try:
            n = self.drain()
        finally:
            self.drain_lock.release()
        if self.hot.waiters:  # they re-check whenever the drainer lets go of the lock
            self._wake()
        if self.deferred:
            self.run_deferred()
        return n

    def wake_waiters(self) -> None:
        """After a drain that ran something: wake the threads waiting on the drainer."""
        if self.hot.waiters:
            self._wake()

    def _wake(self) -> None:
        with self.cond:
            self.gen += 1
            self.cond.notify_all()

    def wait_slow(self, pred: Callable[[], Any], timeout: float | None, spun: bool) -> bool:
        """The C ``wait_until`` hands over here: it is not lock-free, it blocks, or it spun
        ``spin_s`` without anything arriving (``spun``: block at once)."""
        return self.wait_until(pred, timeout, spun=spun)

    def wait_until(self, pred: Callable[[], Any], timeout: float | None = None,
                   max_block: float = BLOCK_SLICE_S, spun: bool = False,
                   pure: bool = False) -> bool:
        """Make progress until ``pred()`` is true (True) or ``timeout`` passes (False).

        ``spun``: the caller already spun ``spin_s`` with nothing arriving (block now).
        ``pure``: ``pred`` only reads plain attributes (an operation's ``done``, a counter):
        another thread may call it to decide whether its in-line AM should wake this one.

        Raises:
            JobAborted: the job is being torn down.
        """
        if pred():
            if self.deferred:
                self.run_deferred()
            return True
        boot = self.boot
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        lock = self.drain_lock
        spin_s = self.spin_s
        # when polling last found nothing (None: it just did find something)
        idle = now - spin_s - 1.0 if spun and spin_s != float("inf") else None
        while True:
            if self.deferred:  # what was deferred goes out before this thread blocks
                self.run_deferred()
                if pred():
                    return True
            if lock.acquire(False):
                try:
                    if spin_s == 0.0 or (idle is not None
                                         and time.monotonic() - idle > spin_s):
                        # one blocking receive: returns at once if something is there
                        t = max_block
                        due = self.next_due()
                        if due is not None or deadline is not None:
                            now = time.monotonic()
                            if due is not None:
                                t = min(t, max(0.0, due - now))
                            if deadline is not None:
                                t = min(t, max(0.0, deadline - now))
                        n = self.drain(pred, t, pure)
                    else:
                        n = self.drain(pred)
                        if not n and idle is None:
                            idle = time.monotonic()
                finally:
                    lock.release()
                if self.hot.waiters:
                    self._wake()
                if n:
                    idle = None
                elif spin_s:
                    # after releasing: peers get the core now and then (the rule and its
                    # count are the C spin phase's); without PSHM at every empty poll, as
                    # the conduit's I/O thread may need the interpreter lock (tcp's is Python)
                    if self.pshm is None:
                        _yield()
                    else:
                        self.hot.idle()
            else:
                # Another thread of this process drains: sleep until it made progress. It
                # wakes us (a new ``gen``) after every drain that ran something and whenever
                # it lets go of the lock; we count ourselves a waiter and note ``gen`` before
                # the last look at ``pred``, and only sleep while it still holds the lock, so
                # no wake-up is lost. ``pred`` runs outside ``cond``: a condition may make
                # progress itself (an atomic polls every 64 calls), and progress wakes the
                # waiters under ``cond``, which is not reentrant.
                with self.cond:
                    self.hot.waiters += 1
                    gen = self.gen
                try:
                    if not pred() and lock.locked():
                        with self.cond:
                            t0 = time.perf_counter()
                            woke = self.cond.wait_for(lambda g=gen: self.gen != g, max_block)
                            self.drain_wait_s += time.perf_counter() - t0  # under cond
                        if not woke:
                            self._expired(max_block, pred, lambda g=gen: self._late_gen(g))
                finally:
                    with self.cond:
                        self.hot.waiters -= 1
            if self.deferred:
                self.run_deferred()
            if pred():
                return True
            if boot is not None and boot.aborted is not None:
                raise boot.aborted
            if deadline is not None and time.monotonic() >= deadline:
                return bool(pred())

    def _progress_loop(self) -> None:
        lock = self.drain_lock
        while not self._stop:
            with lock:
                if self.closed:
                    return
                t = BLOCK_SLICE_S
                due = self.next_due()
                if due is not None:
                    t = min(t, max(0.0, due - time.monotonic()))
                self.drain(None, t)
            if self.hot.waiters:  # they re-check whenever the drainer lets go of the lock
                self._wake()
            if self.deferred:  # what its handlers deferred goes out now, not at the
                try:  # rank-thread's next call (a failure of it ends the job:
                    self.run_deferred()  # deferred_failed)
                except JobAborted:
                    return


def bad_args_message(args: tuple) -> str:
    for i, a in enumerate(args):
        if isinstance(a, bool) or not isinstance(a, int | np.integer):
            return f"AM argument {i} must be an int, got {type(a).__name__}"
        if not W.INT64_MIN <= int(a) <= W.INT64_MAX:
            return f"AM argument {i} = {a} does not fit in int64"
    return "AM arguments must be ints that fit in int64"
