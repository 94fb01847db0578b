"""The per-rank UPC runtime state, upc_rt's amnet extension (its system AMs) and the
per-thread identity (``upc.init()``, which makes the runtime's parts, is
:mod:`upc_rt._init`).

upc_rt is built the way an outside runtime would be: it declares an ``amnet.Extension``
(entry point ``upc`` in the ``amnet.extensions`` group) and reaches amnet only through the
endpoint's public API and its :class:`amnet.Port`. Its messages:

==============  ========================================================================
COLL_ARRIVE     a thread's arguments to a collective, to thread 0 (msgpack payload)
COLL_RESULT     thread 0's verdict on a collective, to every other thread
CALL            run one of :data:`CALLS` at the target in handler context; its result
                returns as RESULT (a reply) or, for a lock that is taken, later as LATE
RESULT / LATE   the result of a CALL (msgpack payload), completing the caller's operation
==============  ========================================================================
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import msgpack

import amnet

from ._errors import LockError, NotInitialized
from ._heap import Heap

COLL_ARRIVE, COLL_RESULT, CALL, RESULT, LATE = range(5)
PENDING = object()  # a CALL whose result is sent later (a lock request that must queue)
GROW_QUANTUM = 64 << 10  # the symmetric heap takes space from the local heaps in these steps


def _pack(x: Any) -> bytes:
    return msgpack.packb(x, use_bin_type=True)


def _unpack(b: Any) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


class Runtime:
    """One rank's UPC state (the object upc_rt's extension attaches to its endpoint)."""

    def __init__(self, port: amnet.Port) -> None:
        self.port = port
        self.ep = port.endpoint
        self.MYTHREAD = port.rank
        self.THREADS = port.size
        self.initialized = False
        self.lock = threading.Lock()  # collectives' inboxes, heaps' boundary, lock tables
        self.coll_seq = 0
        self.coll_in: dict[int, dict[int, Any]] = {}  # thread 0: seq -> {thread: args}
        self.coll_out: dict[int, Any] = {}  # seq -> thread 0's verdict
        size = port.segment_size
        # two heaps grow towards each other in every segment: the symmetric one (its state
        # on thread 0) up from 0, this thread's local one down from the end. ``floor``: the
        # lowest byte the local heap may use; raised when the symmetric heap takes space
        self.local_heap = Heap(0, size, direction="down", name=f"local heap of thread "
                               f"{self.MYTHREAD}")
        self.floor = 0
        self.floor_epoch = 0  # the newest change of the symmetric heap's claim applied here
        self.sym_heap = Heap(0, size, direction="up", name="shared heap") \
            if self.MYTHREAD == 0 else None
        self.sym_limit = 0  # thread 0: every thread's floor is at least this
        self.sym_epoch = 0  # thread 0: changes of the claim (growths, give-backs) so far
        self.locks: dict[int, Any] = {}  # lock id -> _locks.LockState (locks I host)
        self.freed_locks: set[int] = set()
        self.held: set[tuple[int, int]] = set()  # (host, id) of locks I hold
        self.lock_count = 0  # thread 0: locks all_lock_alloc made
        self.glock_count = 0  # locks global_lock_alloc made here
        self.cache: Any = None
        self.nb: Any = None  # the amnet.nbcomm.Scheduler with auto_nb, else None
        self.notify_name: Any = None
        self.notified = False  # over shmem: a notify is pending
        self.views: dict[int, Any] = {}  # thread -> its segment when on my node
        self.poll_every = 0  # element accesses between polls (0: none; init() sets it)
        # the remote primitives (get/put/atomic/fence/barrier/vis/coll): the endpoint itself,
        # or with upc.init(runtime="shmem") a _net.ShmemNet on shmem_rt's public calls
        self.net: Any = self.ep
        self.shm: Any = None  # the ShmemNet in shmem mode, else None
        self.segment_size = size  # bytes of each thread's heaps (the region's, over shmem)

    def seg(self, t: int) -> Any:
        """Thread ``t``'s segment (its region, over shmem) when it is on my node (direct
        access), else None."""
        try:
            return self.views[t]
        except KeyError:
            v = self.views[t] = self.ep.segment_view(t) if self.shm is None \
                else self.shm.seg(t)
            return v

    # -- one-sided calls ------------------------------------------------------------------
    def start_call(self, dest: int, name: str, *args: Any) -> amnet.Handle:
        """Start ``CALLS[name](runtime of dest, my thread, opid, *args)`` at ``dest``; the
        handle's ``wait()`` returns its result. Over shmem it runs here, at once, on
        ``dest``'s allocator state (read and written under its SHMEM lock)."""
        if self.shm is not None:
            return self.shm.start_call(dest, CALLS[name], args)
        port = self.port
        opid, op = port.op(dest)
        try:
            port.send(dest, CALL, (opid, CALL_INDEX[name]), _pack(args))
        except BaseException as e:
            port.finish(opid, op, error=e)
            raise
        return port.handle(op, f"upc_rt {name}")

    def call(self, dest: int, name: str, *args: Any) -> Any:
        """:meth:`start_call` and wait for the result (polls meanwhile)."""
        return self.start_call(dest, name, *args).wait()

    # -- collectives ----------------------------------------------------------------------
    def collective(self, what: str, args: list, decide: Callable[[], Any]) -> Any:
        """Every thread passes ``args``; thread 0 checks they agree and runs ``decide()``,
        whose result every thread returns. A disagreement, or an exception in ``decide``,
        is raised on every thread (no thread is left waiting).

        Raises:
            amnet.CollectiveMismatch: threads passed different arguments (naming them).
            MemoryError / ValueError / TypeError: what ``decide`` raised.
        """
        seq = self.coll_seq
        self.coll_seq += 1
        mine = [what, args]
        port = self.port
        if self.shm is not None:  # every thread's arguments by fcollect, the verdict back
            verdict = _unpack(self.shm.agree(_pack(mine), lambda got: _pack(_judge(
                what, {t: _unpack(b) for t, b in got.items()}, decide))))
        elif self.MYTHREAD != 0:
            port.send(0, COLL_ARRIVE, (seq,), _pack(mine))
            port.wait_until(lambda: seq in self.coll_out)
            with self.lock:
                verdict = self.coll_out.pop(seq)
        else:
            with self.lock:
                got = self.coll_in.setdefault(seq, {})
                got[0] = mine
            port.wait_until(lambda: len(got) == self.THREADS)
            with self.lock:
                del self.coll_in[seq]
            verdict = _judge(what, got, decide)
            packed = _pack(verdict)
            for t in range(1, self.THREADS):
                port.send(t, COLL_RESULT, (seq,), packed)
        kind, value = verdict
        if kind == "ok":
            return value
        raise _ERRORS.get(kind, amnet.CollectiveMismatch)(value)


def _describe(args: list) -> str:
    return ", ".join(map(repr, args))


def _judge(what: str, got: dict[int, Any], decide: Callable[[], Any]) -> list:
    ref = got[0]
    for t in sorted(got):
        if got[t] != ref:
            if got[t][0] != ref[0]:
                msg = (f"{ref[0]}: thread {t} called {got[t][0]} at the same step; every "
                       "thread must make the same collective calls in the same order")
            else:
                msg = (f"{what}: thread {t} passed ({_describe(got[t][1])}) but thread 0 "
                       f"passed ({_describe(ref[1])}); every thread must pass the same "
                       "arguments")
            return ["mismatch", msg]
    try:
        return ["ok", decide()]
    except MemoryError as e:
        return ["memory", str(e)]
    except (ValueError, TypeError, amnet.AMNetError) as e:
        return ["value" if isinstance(e, ValueError) else "type", str(e)]


_ERRORS: dict[str, type] = {"memory": MemoryError, "value": ValueError, "type": TypeError}


# -- the extension's handlers ---------------------------------------------------------------
def h_coll_arrive(port, src, args, payload, is_reply) -> None:
    if len(args) != 1 or is_reply or payload is None or port.rank != 0:
        return port.refuse()
    rt = port.state
    try:
        val = _unpack(payload)
    except Exception:
        return port.refuse()
    with rt.lock:
        rt.coll_in.setdefault(args[0], {})[src] = val


def h_coll_result(port, src, args, payload, is_reply) -> None:
    if len(args) != 1 or is_reply or payload is None or src != 0:
        return port.refuse()
    try:
        val = _unpack(payload)
    except Exception:
        return port.refuse()
    rt = port.state
    with rt.lock:
        rt.coll_out[args[0]] = val


def h_call(port, src, args, payload, is_reply) -> None:
    if len(args) != 2 or is_reply or payload is None or not 0 <= args[1] < len(CALL_FNS):
        return port.refuse()
    try:
        cargs = _unpack(payload)
    except Exception:
        return port.refuse()
    opid = args[0]
    try:
        out = CALL_FNS[args[1]](port.state, src, opid, *cargs)
    except Exception as e:  # a bad request: the caller gets the error
        out = ["error", type(e).__name__, str(e)]
    else:
        if out is PENDING:
            return
        out = ["ok", out]
    port.reply(src, RESULT, (opid,), _pack(out))


def _complete(port, src, args, payload) -> None:
    if len(args) != 1 or payload is None:
        return port.refuse()
    op = port.pending(args[0], src)
    if op is None:
        return
    try:
        kind, *rest = _unpack(payload)
    except Exception:
        return port.refuse()
    if kind == "ok":
        port.finish(args[0], op, rest[0])
    else:
        cls = {"MemoryError": MemoryError, "ValueError": ValueError,
               "TypeError": TypeError}.get(rest[0])
        if cls is None:
            cls = LockError if rest[0] == "LockError" else amnet.AMNetError
        port.finish(args[0], op, error=cls(rest[1]))


def h_result(port, src, args, payload, is_reply) -> None:
    if not is_reply:
        return port.refuse()
    _complete(port, src, args, payload)


def h_late(port, src, args, payload, is_reply) -> None:
    if is_reply:
        return port.refuse()
    _complete(port, src, args, payload)


def send_late(rt: Runtime, dest: int, opid: int, value: Any) -> None:
    """Complete a PENDING call of ``dest`` (from a handler: deferred to the next poll)."""
    payload = _pack(["ok", value])
    rt.port.defer(lambda: rt.port.send(dest, LATE, (opid,), payload))


#: Functions a CALL may run at its target: ``fn(runtime, src, opid, *args)``, in handler
#: context (no waiting). Filled by the modules that define them (allocation, locks).
CALLS: dict[str, Callable] = {}
CALL_FNS: list[Callable] = []
CALL_INDEX: dict[str, int] = {}


def remote_call(name: str) -> Callable[[Callable], Callable]:
    """Register ``fn`` as CALL ``name`` (in import order: the same in every process)."""
    def deco(fn: Callable) -> Callable:
        CALL_INDEX[name] = len(CALL_FNS)
        CALL_FNS.append(fn)
        CALLS[name] = fn
        return fn
    return deco


EXTENSION = amnet.Extension(
    "upc", (h_coll_arrive, h_coll_result, h_call, h_result, h_late), attach=Runtime)


# -- identity per rank-thread -------------------------------------------------------------
_tls = threading.local()


def current(what: str = "upc_rt") -> Runtime:
    """The calling rank-thread's runtime.

    Raises:
        NotInitialized: ``upc.init()`` was not called on this rank-thread.
    """
    rt = getattr(_tls, "rt", None)
    if rt is None:
        raise NotInitialized(f"{what} before upc.init(): call upc_rt.init() first, on every "
                             "thread (rank) of the job")
    return rt


def bound() -> Runtime | None:
    """The calling rank-thread's runtime, None before ``upc.init()`` on it."""
    return getattr(_tls, "rt", None)


def bind(rt: Runtime) -> None:
    """Make ``rt`` the calling rank-thread's runtime (``upc.init()``, :mod:`upc_rt._init`)."""
    _tls.rt = rt


def touch(rt: Runtime, t: int, addr: int, n: int, write: bool) -> None:
    """An access of thread ``t``'s bytes ``[addr, addr + n)`` (on another node) about to be
    made outside the scheduler: with auto_nb, it completes the puts that access overlaps
    and, for a write, drops the prefetches it overlaps."""
    if rt.nb is not None and n > 0:
        rt.nb.touch(t, addr, n, write)


def user_site() -> Any:
    """The first frame outside upc_rt and amnet: the program's synchronization point (the
    key of the phase it opens)."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "").split(".")[0] in ("upc_rt",
                                                                               "amnet"):
        f = f.f_back
    return ("upc", None) if f is None else (f.f_code, f.f_lineno)


def finished() -> None:
    """Forget this thread's runtime (the job ended)."""
    _tls.rt = None
