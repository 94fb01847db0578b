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
from typing import Any

from .._config import Config
from .._errors import InitError
from .._topology import Topology
from ._bootclient import BootClient

_tls = threading.local()
_process: ProcessState | None = None
_singleton: RankContext | None = None
_singleton_lock = threading.Lock()


class ProcessState:
    """What one rank process knows about the job; the bootstrap connection is made lazily."""

    def __init__(self, spec: dict[str, Any], proc: int, host: str) -> None:
        self.spec = spec
        self.proc = proc
        self.host = host
        self.topology = Topology.from_wire(spec["topology"])
        self.config = Config(spec["config"])
        self._boot: BootClient | None = None
        self._lock = threading.Lock()
        self.finished: list[list[int]] = []

    @property
    def connected(self) -> bool:
        return self._boot is not None

    def boot(self) -> BootClient:
        with self._lock:
            if self._boot is None:
                self._boot = BootClient(
                    self.spec["bootstrap"], self.spec["token"], self.proc, self.host,
                    self.topology.threads_per_proc, list(self.finished))
            return self._boot

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

    def collective(self, op: str, name: Any = None, value: Any = None) -> Any:
        """Run the next bootstrap collective of this rank (see :class:`BootClient`)."""
        seq, self.seq = self.seq, self.seq + 1
        if self.process is None:  # singleton
            return [value] if op in ("allgather", "init") else None
        return self.process.boot().collective(self.rank, seq, op, name, value)


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


def init():
    """Join the job and return this rank's :class:`~amnet.Endpoint` (collective).

    Every rank of the job must call it; it returns once all have. In a plain ``python app.py``
    it makes a one-rank job. ``finalize`` runs implicitly when the rank's script ends.

    Raises:
        InitError: ``init`` was already called on this rank, or the calling thread is not a
            rank-thread.
        JobAborted: the job was torn down while waiting for the other ranks.
    """
    from .endpoint import Endpoint

    ctx = current_rank("amnet.init()")
    if ctx.finalized:
        raise InitError(f"amnet.init() on rank {ctx.rank} after amnet.finalize(): a rank joins "
                        "the job once")
    if ctx.endpoint is not None:
        raise InitError(f"amnet.init() was called twice on rank {ctx.rank}; call it once per rank")
    ctx.table = ctx.collective("init", value={"host": ctx.host, "pid": os.getpid()})
    ctx.endpoint = Endpoint(ctx)
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
    ctx.collective("finalize")
    ctx.finalized = True


def finalize_if_needed(ctx: RankContext) -> None:
    if ctx.endpoint is not None and not ctx.finalized:
        bind_rank(ctx)
        finalize()


def _finalize_at_exit(ctx: RankContext) -> None:
    if not ctx.finalized:
        ctx.finalized = True


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
