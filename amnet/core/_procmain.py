"""The main program of one rank process: runs its rank-threads and reports how they ended.

An agent forks this process and calls :func:`run_process`. Each rank-thread executes the app
script with its own module globals (the analogue of a pthreads UPC runtime replicating
file-scope variables per thread) or, for :func:`amnet.run`, calls the given function.
Output goes through per-thread line buffers so lines of different ranks never interleave,
prefixed with ``[rank]`` when labels are on.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import sys
import threading
import types
from typing import Any

from .._errors import JobAborted
from .._protocol import MAX_MESSAGE
from . import _runtime as rt
from ._current import _tls
from ._failure import _error_record

_main_tls = threading.local()
MAX_RESULT = MAX_MESSAGE - (1 << 16)  # room for the message around it


class _ThreadMain(types.ModuleType):
    """``sys.modules["__main__"]`` of a process with several rank-threads.

    Each rank-thread runs the script in a module of its own; lookups on this module (what
    ``pickle``, ``dataclasses`` and ``import __main__`` do) go to the calling thread's module,
    or the first rank-thread's for other threads.
    """

    def __getattr__(self, name: str):
        mod = getattr(_main_tls, "mod", None) or self.__dict__["_primary"]
        try:
            return mod.__dict__[name]
        except (KeyError, AttributeError):
            raise AttributeError(f"module '__main__' has no attribute {name!r}") from None


class LineWriter(io.TextIOBase):
    """A text stream that writes whole lines to ``fd``, buffering partial lines per thread."""

    def __init__(self, fd: int, label: bool, default_label: str) -> None:
        self._fd = fd
        self._label = label
        self._default = default_label
        self._lock = threading.Lock()
        self._pending: dict[int, list] = {}

    @property
    def encoding(self) -> str:
        return "utf-8"

    @property
    def errors(self) -> str:
        return "backslashreplace"

    def fileno(self) -> int:
        return self._fd

    @property
    def buffer(self) -> _LineBytes:
        """The binary side (``sys.stdout.buffer``): bytes go through the same line buffers."""
        return _LineBytes(self)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def _prefix(self) -> str:
        if not self._label:
            return ""
        ctx = getattr(_tls, "rank", None)
        return f"[{ctx.rank}] " if ctx is not None else self._default

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        ident = threading.get_ident()
        st = self._pending.setdefault(ident, [[], True])
        if "\n" not in s:
            st[0].append(s)
            return len(s)
        head, _, tail = s.rpartition("\n")
        text = "".join(st[0]) + head + "\n"
        st[0] = [tail] if tail else []
        self._emit(text, st)
        st[1] = True
        return len(s)

    def _emit(self, text: str, st: list) -> None:
        prefix = self._prefix()
        if prefix:
            lines = text.split("\n")
            last = len(lines) - 1
            text = "\n".join(
                ln if (i == 0 and not st[1]) or (i == last and not ln) else prefix + ln
                for i, ln in enumerate(lines))
        try:  # bytes written through .buffer come back as they were
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = text.encode("utf-8", "backslashreplace")
        with self._lock:
            while data:
                data = data[os.write(self._fd, data):]

    def flush(self) -> None:
        if self._label:  # a labelled line goes out whole, so ranks' lines never interleave
            return
        st = self._pending.get(threading.get_ident())
        if st and st[0]:
            text, st[0] = "".join(st[0]), []
            self._emit(text, st)
            st[1] = False

    def flush_all(self) -> None:
        for st in list(self._pending.values()):
            if st[0]:
                text, st[0] = "".join(st[0]) + "\n", []
                self._emit(text, st)


class _LineBytes(io.RawIOBase):
    """``sys.stdout.buffer`` of a rank: bytes join the per-thread text line buffers."""

    def __init__(self, text: LineWriter) -> None:
        self._text = text

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._text.fileno()

    def write(self, b) -> int:
        data = bytes(b)
        self._text.write(data.decode("utf-8", "surrogateescape"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class _Rank:
    """One rank-thread: its context, how it ended, and what it reports."""

    def __init__(self, state: rt.ProcessState, rank: int, body) -> None:
        self.ctx = rt.RankContext(state, rank, state.topology, state.config, state.host)
        self.body = body
        self.code = 0

    def run(self) -> None:
        ctx, state = self.ctx, self.ctx.process
        rt.bind_rank(ctx)
        result = error = None
        fn_mode = state.spec["mode"] == "fn"
        try:
            value = self.body(ctx)
            rt.finalize_if_needed(ctx)
            if fn_mode:
                try:
                    payload = pickle.dumps(value, protocol=5)
                except Exception as e:
                    raise TypeError(f"the return value of rank {ctx.rank} cannot be pickled "
                                    f"to send it back to amnet.run: {e}") from None
                if len(payload) > MAX_RESULT:
                    raise ValueError(f"the return value of rank {ctx.rank} pickles to "
                                     f"{len(payload)} bytes; amnet.run carries at most "
                                     f"{MAX_RESULT} bytes per rank")
                result = payload
        except SystemExit as e:
            code = e.code
            if code is None:
                self.code = 0
            elif isinstance(code, int):
                self.code = code & 0xFF if code else 0
            else:
                print(code, file=sys.stderr)
                self.code = 1
            if self.code == 0:
                try:
                    rt.finalize_if_needed(ctx)
                except BaseException as e2:
                    self.code, error = 1, _error_record(e2, fn_mode)
        except JobAborted:
            self.code = 1
        except BaseException as e:
            self.code = 1
            error = _error_record(e, fn_mode)
            sys.stderr.write(error["tb"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        aborted = state.connected and state.boot().aborted is not None
        if not aborted:
            state.rank_done(ctx.rank, self.code, result, error)


def _script_body(path: str, threads: int):
    with open(path, "rb") as f:
        source = f.read()
    def new_module() -> types.ModuleType:
        mod = types.ModuleType("__main__")
        mod.__dict__.update(__file__=path, __cached__=None, __loader__=None,
                            __package__=None, __spec__=None, __builtins__=__builtins__)
        return mod

    first = new_module()  # rank-thread 0's, made before any rank-thread starts
    if threads > 1:
        proxy = _ThreadMain("__main__")
        proxy.__file__ = path
        proxy._primary = first  # what threads that are not rank-threads see
        sys.modules["__main__"] = proxy
    else:
        sys.modules["__main__"] = first

    def body(ctx: rt.RankContext):
        code = compile(source, path, "exec", dont_inherit=True)
        mod = first if ctx.topology.thread_of(ctx.rank) == 0 else new_module()
        _main_tls.mod = mod
        exec(code, mod.__dict__)

    return body


def _fn_body(spec: dict[str, Any]):
    sys.path[:] = spec["sys_path"]
    main_path = spec.get("main_path")
    if main_path:
        import runpy
        g = runpy.run_path(main_path, run_name="__mp_main__")
        mod = types.ModuleType("__mp_main__")
        mod.__dict__.update(g)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = mod
    fn = pickle.loads(spec["fn"])
    args, kwargs = spec.get("fn_args") or ((), {})

    def body(ctx: rt.RankContext):
        return fn(rt.init(), *args, **kwargs)

    return body


def run_process(spec: dict[str, Any], proc: int, host: str, boot: Any = None) -> int:
    """Run the rank-threads of process ``proc`` and return the process exit status.
    ``boot``: the job's bootstrap where it is not the launcher's service (MPI)."""
    state = rt.ProcessState(spec, proc, host, boot)
    rt.install_process(state)
    topo = state.topology
    ranks = topo.ranks_of_proc(proc)
    default = f"[{ranks.start}] " if len(ranks) == 1 else f"[{ranks.start}-{ranks.stop - 1}] "
    out = LineWriter(1, spec["label"], default)
    err = LineWriter(2, spec["label"], default)
    sys.stdout, sys.stderr = out, err
    try:
        if spec["mode"] == "fn":
            body = _fn_body(spec)
        else:
            sys.argv = [spec["script"], *spec["argv"]]
            sys.path.insert(0, os.path.dirname(os.path.abspath(spec["script"])))
            body = _script_body(spec["script"], topo.threads_per_proc)
    except BaseException as e:
        rank = ranks.start
        rt.bind_rank(None)
        rec = _error_record(e, spec["mode"] == "fn")
        err.write(f"amnet: rank process {proc} could not load its program:\n{rec['tb']}")
        state.rank_done(rank, 1, None, rec)
        return 1
    rank_objs = [_Rank(state, r, body) for r in ranks]
    threads = [threading.Thread(target=r.run, name=f"amnet-rank-{r.ctx.rank}")
               for r in rank_objs[1:]]
    for t in threads:
        t.start()
    rank_objs[0].run()
    for t in threads:
        t.join()
    for t in threading.enumerate():  # as Python does at exit: wait for non-daemon threads
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    rt.bind_rank(None)
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    state.close_engine()
    out.flush_all()
    err.flush_all()
    for r in rank_objs:
        if r.code:
            return r.code
    return 0
