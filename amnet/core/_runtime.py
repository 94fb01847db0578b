"""Per-process and per-rank runtime state behind :func:`amnet.init`, ``finalize`` and ``abort``.

A rank process (started by an agent) installs one :class:`ProcessState` and runs each of its
rank-threads with a :class:`RankContext` bound to the thread. A plain ``python app.py`` has
neither and gets a one-rank job (a singleton, as with MPI).
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .._config import Config
from .._errors import InitError, barrier_name_text
from .._topology import Topology
from ._bootclient import BootClient
from ._current import _tls, set_failure_report
from ._current import fail_rank as fail_rank
from ._extension import extensions, verify_extensions, waits_in
from ._failure import _error_record
from ._handlers import HandlerTable, verify_tables

WHERE_TEXT = 200  # at most this many characters of what a layer says a rank waits in
_process: ProcessState | None = None
_singleton: RankContext | None = None
_singleton_lock = threading.Lock()


class ProcessState:
    """What one rank process knows about the job; the bootstrap connection is made lazily."""

    def __init__(self, spec: dict[str, Any], proc: int, host: str, boot: Any = None) -> None:
        """``boot``: the bootstrap to use (the MPI bootstrap, :mod:`._mpiboot`); None: a
        :class:`BootClient` of the launcher's service, connected on first use."""
        self.spec = spec
        self.proc = proc
        self.host = host
        self.topology = Topology.from_wire(spec["topology"])
        self.config = Config(spec["config"])
        self._boot: BootClient | Any = boot
        self._lock = threading.Lock()
        self.finished: list[list[int]] = []
        self._engine = None
        self._engine_started = False

    def engine(self):
        """The process's AM engine, made on first use (by the first rank in init)."""
        with self._lock:
            if self._engine is None:
                self._engine = make_engine(self.topology, self.config, self.proc,
                                           None, self.spec.get("curve"),
                                           bind_host_for(self.spec["bootstrap"]),
                                           {"token": self.spec["token"],
                                            "doorbells": self.spec.get("doorbells"),
                                            "pshm_error": self.spec.get("pshm_error")})
            eng = self._engine
        if eng.boot is None:
            eng.boot = self.boot()
        return eng

    def start_engine(self, table: list[dict[str, Any]]) -> None:
        """Start the engine once the address table is known; every rank-thread of the
        process returns from here only after it has started (peers known, mode chosen)."""
        with self._lock:
            if not self._engine_started:
                self._engine.start(table)
                self._engine_started = True

    def close_engine(self) -> None:
        eng = self._engine
        if eng is not None:
            eng.close()

    @property
    def connected(self) -> bool:
        return self._boot is not None

    def boot(self) -> BootClient:
        with self._lock:
            if self._boot is None:
                self._boot = BootClient(
                    self.spec["bootstrap"], self.spec["token"], self.proc, self.host,
                    self.topology.threads_per_proc, list(self.finished),
                    self.spec.get("curve"), self.where)
            return self._boot

    def where(self) -> list[list[Any]]:
        """Where this process's ranks are, for the launcher's diagnosis of a timeout or
        Ctrl-C: ``[[rank, entry], ...]``, each entry ``["barrier", number, name, waiting,
        finalizing]`` (an AM barrier notified and not complete: its number, the name shown or
        None, whether the rank waits in it, whether ``amnet.finalize()`` does) or
        ``["in", barriers, what]`` (a layer said the rank waits in ``what``:
        :meth:`amnet.Port.waiting`) or ``["running", barriers]`` (barriers completed or
        notified so far).

        Runs on the bootstrap client's I/O thread and reads plain attributes without locks,
        so it answers whatever the rank-threads are doing; the picture may be a moment old.
        """
        eng = self._engine
        out: list[list[Any]] = []
        for rank in self.topology.ranks_of_proc(self.proc):
            rs = None if eng is None else eng.ranks[rank - eng.first]
            if rs is None or rs.finalized:
                out.append([rank, ["running", 0 if rs is None else rs.barrier.epoch]])
                continue
            bar = rs.barrier
            epoch, name, waiting = bar.epoch, bar.name, bar.waiting
            if bar.pending and not bar.done:
                shown = None if name is None else barrier_name_text(name)
                out.append([rank, ["barrier", epoch, shown, waiting, rs.finalizing]])
                continue
            what = waits_in(rs.ports.values())
            if what is not None:
                out.append([rank, ["in", epoch, what[:WHERE_TEXT]]])
            else:
                out.append([rank, ["running", epoch]])
        return out

    def rank_done(self, rank: int, code: int, result: bytes | None = None,
                  error: dict[str, Any] | None = None) -> None:
        """Tell the launcher that ``rank`` finished (only when it needs to know now)."""
        with self._lock:
            if self._boot is None and result is None and error is None and code == 0:
                self.finished.append([rank, code])  # told in the hello, if ever connected
                return
        msg = {"t": "done", "rank": rank, "code": code, "result": result, "error": error}
        self.boot().report(msg)


class RankContext:
    """The state of one rank: who it is, its bootstrap step counter, its endpoint."""

    def __init__(self, process: ProcessState | None, rank: int, topology: Topology,
                 config: Config, host: str) -> None:
        self.process = process
        self.rank = rank
        self.topology = topology
        self.config = config
        self.host = host
        self.seq = 0
        self.table: list[dict[str, Any]] = []  # what every rank published at init
        self.endpoint = None
        self.finalized = False
        self.engine_ = None  # a singleton's own engine

    def engine(self):
        if self.process is not None:
            return self.process.engine()
        if self.engine_ is None:
            self.engine_ = make_engine(self.topology, self.config, 0, None, None, "127.0.0.1")
        return self.engine_

    def collective(self, op: str, name: Any = None, value: Any = None) -> Any:
        """Run the next bootstrap collective of this rank (see :class:`BootClient`)."""
        ep = self.endpoint
        if ep is not None:  # checked before the step is taken: a caught error changes nothing
            ep._eng.forbid_in_handler(f"a bootstrap {op}")
        seq, self.seq = self.seq, self.seq + 1
        if self.process is None:  # singleton
            return [value] if op in ("allgather", "init") else None
        waiter = None
        if ep is not None:  # keep serving AMs while waiting for the other ranks
            eng = ep._eng

            def waiter(pred):
                eng.wait_until(pred, max_block=0.002)
        return self.process.boot().collective(self.rank, seq, op, name, value, waiter)


_env_config: Config | None = None


def current_config() -> Config:
    """The configuration of the job this process belongs to (``amnet.config``).

    In a rank process: what ``amnet-run`` resolved and handed to every rank. In a plain
    Python process: resolved from the ``AMNET_*`` environment on first use.

    Raises:
        ConfigError: an unknown ``AMNET_*`` variable or a bad value in the environment.
    """
    global _env_config
    if _process is not None:
        return _process.config
    if _env_config is None:
        _env_config = Config.resolve()
    return _env_config


def bind_rank(ctx: RankContext | None) -> None:
    """Make ``ctx`` the rank of the calling thread (used by the rank process main)."""
    _tls.rank = ctx


def install_process(state: ProcessState | None) -> None:
    global _process
    _process = state


def current_rank(for_call: str) -> RankContext:
    """The calling thread's rank, or the singleton rank in a plain Python process.

    Raises:
        InitError: called from a thread of a rank process that is not a rank-thread.
    """
    ctx = getattr(_tls, "rank", None)
    if ctx is not None:
        return ctx
    if _process is not None:
        raise InitError(
            f"{for_call} was called from thread {threading.current_thread().name!r}, which is "
            "not a rank-thread of this job; call it from the thread that runs your script "
            "(or your amnet.run function)"
        )
    global _singleton
    with _singleton_lock:
        if _singleton is None:
            _singleton = RankContext(None, 0, Topology.make(1), current_config(),
                                     socket.gethostname())
        return _singleton


def endpoint():
    """The calling rank-thread's :class:`~amnet.Endpoint`, or None before ``amnet.init()``
    (and after ``amnet.finalize()``): how a runtime layered on amnet finds the endpoint its
    user already made.

    Raises:
        InitError: called from a thread of a rank process that is not a rank-thread.
    """
    ctx = current_rank("amnet.endpoint()")
    return None if ctx.finalized else ctx.endpoint


def init(handlers: Iterable[Callable] | None = None):
    """Join the job and return this rank's :class:`~amnet.Endpoint` (collective).

    Every rank of the job must call it; it returns once all have. ``handlers`` is the rank's
    handler table (functions, named ``module.qualname``); every rank must pass the same names
    in the same order. In a plain ``python app.py`` it makes a one-rank job. ``finalize`` runs
    implicitly when the rank's script ends.

    Raises:
        InitError: ``init`` was already called on this rank, or the calling thread is not a
            rank-thread.
        HandlerMismatch: ranks passed different handler tables (raised on every rank).
        TypeError / ValueError: a handler is not callable, or two have the same name.
        JobAborted: the job was torn down while waiting for the other ranks.
    """
    # here, not at the top, as the Engine (make_engine): both bring numpy, which
    # ``import amnet`` (and amnet-run) does without
    from .endpoint import Endpoint

    ctx = current_rank("amnet.init()")
    if ctx.finalized:
        raise InitError(f"amnet.init() on rank {ctx.rank} after amnet.finalize(): a rank joins "
                        "the job once")
    if ctx.endpoint is not None:
        raise InitError(f"amnet.init() was called twice on rank {ctx.rank}; call it once per rank")
    fns = list(handlers or ())
    names = HandlerTable.names_of(fns)
    eng = ctx.engine()
    if eng.in_handler() is not None:
        raise InitError("amnet.init() inside a handler")
    # the endpoint exists before any peer can reach this rank: an in-line AM from another
    # rank-thread may run a handler here, which gets it as token.endpoint, before init returns
    rs = eng.add_rank(ctx.rank, lambda rs: Endpoint(ctx, eng, rs))
    rs.table.add(fns, names)  # in place before any peer can send to this rank
    ctx.table = ctx.collective("init", value={
        "host": ctx.host, "pid": os.getpid(), "conduit": eng.conduit.address,
        "pshm": None if eng.pshm is None else eng.pshm.ident, "handlers": names,
        "extensions": [x.name for x in extensions()]})
    if ctx.process is None:
        eng.start(ctx.table)
    else:
        ctx.process.start_engine(ctx.table)
    verify_tables([e["handlers"] for e in ctx.table], "amnet.init()")
    verify_extensions([e["extensions"] for e in ctx.table])
    ctx.endpoint = rs.endpoint
    if ctx.process is None:
        atexit.register(_finalize_at_exit, ctx)
    return ctx.endpoint


def finalize() -> None:
    """Leave the job (collective: ends with a barrier of all ranks).

    Runs implicitly when a rank's script returns normally. After it, the endpoint may not be
    used.

    Raises:
        InitError: the rank never called :func:`init`, or already finalized.
    """
    ctx = current_rank("amnet.finalize()")
    if ctx.endpoint is None:
        raise InitError(f"amnet.finalize() on rank {ctx.rank}, which never called amnet.init()")
    if ctx.finalized:
        raise InitError(f"amnet.finalize() was called twice on rank {ctx.rank}")
    ep = ctx.endpoint
    ep._eng.forbid_in_handler("amnet.finalize()")
    for hook in list(ep._rs.sync_hooks):  # layers end first, and may still communicate
        hook("finalize")
    ep._rs.finalizing = True
    if ep._rs.barrier.pending:  # a split-phase barrier left open: complete it first
        ep.barrier_wait()
    ep.barrier()  # polls: peers still talking to this rank get their replies
    ctx.collective("finalize")
    ctx.finalized = True
    ep._rs.finalized = True
    ep._eng.hot.set_finalized(ctx.rank - ep._eng.first)


def finalize_if_needed(ctx: RankContext) -> None:
    if ctx.endpoint is not None and not ctx.finalized:
        bind_rank(ctx)
        finalize()


def _finalize_at_exit(ctx: RankContext) -> None:
    if not ctx.finalized:
        ctx.finalized = True
        ep = ctx.endpoint
        if ep is not None:
            ep._eng.hot.set_finalized(ctx.rank - ep._eng.first)
    if ctx.engine_ is not None:
        ctx.engine_.close()


def _report_failure(rank: int, exc: BaseException, summary: str) -> None:
    """How :func:`fail_rank` tells the launcher that a handler failed on ``rank`` (in a
    rank process; a plain Python process has no one to tell)."""
    proc = _process
    if proc is not None:
        try:
            exc.add_note(f"({summary.split(' raised ')[0]})")
            proc.rank_done(rank, 1, None, _error_record(exc, proc.spec["mode"] == "fn"))
        except BaseException:
            pass


set_failure_report(_report_failure)


def bind_host_for(bootstrap: str | None) -> str:
    """The address to bind data sockets to: loopback for one host, else the interface that
    reaches the launcher."""
    if bootstrap and bootstrap.startswith("tcp://"):
        host = bootstrap[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
        if host in ("127.0.0.1", "localhost", "::1"):
            return "127.0.0.1"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, 9))
                return s.getsockname()[0]
        except OSError:
            return "0.0.0.0"
    return "127.0.0.1"


def make_engine(topology: Topology, config: Config, proc: int, boot: Any, curve: Any,
                bind_host: str, job: dict[str, Any] | None = None):
    from ._engine import Engine

    return Engine(topology, config, proc, boot, curve, bind_host, job)


def abort(code: int = 1, msg: str = "") -> None:
    """End the whole job at once, as a failure with exit status ``code``; ``msg`` goes into
    the diagnosis.

    Never returns. May be called from any thread, before or after :func:`init`.

    Raises:
        TypeError / ValueError: ``code`` is not an int in 1..255 (checked before anything
            ends; an aborted job has failed, so its status is never 0).
    """
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"amnet.abort() code must be an int, got {type(code).__name__}")
    if not 1 <= code <= 255:
        raise ValueError(f"amnet.abort() code must be in 1..255 (an aborted job has failed), "
                         f"got {code}")
    msg = str(msg)
    ctx = getattr(_tls, "rank", None)
    proc = _process
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if proc is None:
        print(f"amnet.abort({code}): {msg}" if msg else f"amnet.abort({code})", file=sys.stderr)
        sys.stderr.flush()
        os._exit(code)
    rank = ctx.rank if ctx is not None else proc.topology.ranks_of_proc(proc.proc).start
    proc.boot().report({"t": "abort", "rank": rank, "code": code, "msg": msg})
    os._exit(code)
