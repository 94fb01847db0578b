"""The public extension interface: how a layer above the core (VIS, upc_rt, a runtime
outside this repository) adds its own system AMs, per-endpoint state and hooks.

An extension is an :class:`Extension` -- a name, a tuple of system handlers and an optional
``attach(port)`` that makes the per-endpoint object ``ep.extension(name)`` returns. amnet finds
extensions in two ways, both before the engine of a process starts (in ``amnet.init()``):

- installed packages declare them as entry points of the group ``amnet.extensions``
  (``name = "package.module:EXTENSION"``), so every process of every job has them whatever
  the application imported;
- :func:`register_extension` adds one from the application itself (every process must do
  the same before ``amnet.init()``).

The system table is the core's handlers, then each extension's in name order; the names are
checked alike on every rank in ``amnet.init()`` (:class:`amnet.HandlerMismatch` otherwise), so
the small indices on the wire mean the same everywhere.

A handler runs as ``h(port, src, args, payload, is_reply)`` on the target rank: ``port`` is that
rank's :class:`Port` for the extension, ``args`` a tuple of int64, ``payload`` a memoryview valid
only during the call (or None). Messages come from the network: check every field and call
``port.refuse()`` for one that does not fit (it is dropped and counted), never raise on it. An
exception that escapes a handler is a bug of the runtime: on every route (in-line between
rank-threads, the shared-memory queues, every conduit) it ends the job as a user handler's
exception does, with the traceback from the rank whose handler raised and a diagnosis naming
the extension and the handler (unless that rank's ``ep.on_handler_error`` takes it). A handler
may reply; it may not wait or poll, and it sends a request to a third rank only through
``port.defer``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import AMNetError, InitError, PayloadTooLarge
from . import _wire as W
from ._handlers import handler_name
from ._hot import current_token
from ._ops import Bucket, Handle, Op, awaiting

GROUP = "amnet.extensions"


class Extension:
    """A named set of system handlers plus the per-endpoint object made by ``attach``.

    Args:
        name: a Python identifier, unique in the job (``ep.extension(name)``).
        handlers: functions ``h(port, src, args, payload, is_reply)``; index ``i`` in this
            sequence is what :meth:`Port.send` names.
        attach: ``attach(port)`` returns the object ``ep.extension(name)`` gives (called once
            per endpoint, on first use, from whichever side uses it first); default: the
            port itself.

    Raises:
        ValueError: a bad name; TypeError: a handler or attach that is not callable.
    """

    __slots__ = ("attach", "handlers", "name")

    def __init__(self, name: str, handlers: Sequence[Callable], attach: Callable | None = None
                 ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"an extension name must be an identifier, got {name!r}")
        hs = tuple(handlers)
        for h in hs:
            if not callable(h):
                raise TypeError(f"extension {name}: handler {h!r} is not callable")
            _check_signature(name, h)
        if attach is not None and not callable(attach):
            raise TypeError(f"extension {name}: attach must be callable")
        self.name = name
        self.handlers = hs
        self.attach = attach

    def __repr__(self) -> str:
        return f"<amnet.Extension {self.name} with {len(self.handlers)} handlers>"


def _check_signature(ext: str, h: Callable) -> None:
    """A handler must take ``(port, src, args, payload, is_reply)``.

    Raises:
        TypeError: naming the extension, the handler and its parameters.
    """
    try:
        sig = inspect.signature(h)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    try:
        sig.bind(None, 0, (), None, False)
    except TypeError:
        raise TypeError(f"extension {ext}: handler {handler_name(h)}{sig} cannot be called as "
                        "h(port, src, args, payload, is_reply)") from None


_REGISTERED: dict[str, Extension] = {}
_LOCK = threading.Lock()
_TABLE: list[Extension] | None = None  # fixed when the first engine of the process starts
_BASES: dict[str, int] = {}


def register_extension(ext: Extension) -> None:
    """Add ``ext`` to this process's extensions; every process of the job must register the
    same ones before ``amnet.init()``. Registering it again (or an extension of the same name
    and handler names: a script runs once per rank-thread) does nothing; the handlers of the
    first registration serve every rank-thread of the process.

    Raises:
        TypeError: ``ext`` is not an :class:`Extension`.
        ValueError: another extension already has that name.
        InitError: this process's engine already started (register before ``amnet.init()``,
            or declare an ``amnet.extensions`` entry point).
    """
    if not isinstance(ext, Extension):
        raise TypeError(f"register_extension() takes an amnet.Extension, got "
                        f"{type(ext).__name__}")
    with _LOCK:
        have = _REGISTERED.get(ext.name)
        if have is None and _TABLE is not None:
            have = next((e for e in _TABLE if e.name == ext.name), None)
        if have is not None:
            if _same(have, ext):  # the same definition again (a script run per rank-thread)
                return
            raise ValueError(f"an extension named {ext.name!r} is already registered, with "
                             "other handlers")
        if _TABLE is not None:
            raise InitError(f"register_extension({ext.name!r}) after amnet.init() started this "
                            "process's engine: register extensions before amnet.init(), or "
                            f"declare an entry point in the group {GROUP!r}")
        _REGISTERED[ext.name] = ext


def _same(a: Extension, b: Extension) -> bool:
    def names(x: Extension) -> list[str]:
        return [f"{h.__module__}.{h.__qualname__}" for h in x.handlers]

    return a is b or names(a) == names(b)


def _discover() -> dict[str, Extension]:
    from importlib.metadata import entry_points

    found: dict[str, Extension] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found or ep.name in _REGISTERED:
            continue  # the same package seen twice on sys.path
        obj = ep.load()
        if not isinstance(obj, Extension) or obj.name != ep.name:
            raise InitError(f"the {GROUP} entry point {ep.name} = {ep.value} is not an "
                            f"amnet.Extension named {ep.name!r}")
        found[ep.name] = obj
    return found


def extensions() -> list[Extension]:
    """This process's extensions, in table order (fixed on first call: engine start)."""
    global _TABLE
    with _LOCK:
        if _TABLE is None:
            found = _discover()
            found.update(_REGISTERED)
            _TABLE = [found[k] for k in sorted(found)]
        return _TABLE


def system_table(core: tuple) -> tuple:
    """The core's system handlers, then each extension's, wrapped to the extension
    signature."""
    table = list(core)
    for ext in extensions():
        _BASES[ext.name] = len(table)
        table.extend(_wrap(ext, i) for i in range(len(ext.handlers)))
    return tuple(table)


def _wrap(ext: Extension, i: int) -> Callable:
    h = ext.handlers[i]
    name = ext.name
    label = f"{handler_name(h)} of extension {name}"

    def run(eng, rs, src, args, payload, offset, flags):
        if offset:
            return eng._refuse()
        port = rs.ports.get(name)
        if port is None:
            port = port_of(rs, name)
        try:
            h(port, src, args, payload, bool(flags & W.REPLY))
        except Exception as e:  # the runtime's bug, not a message to refuse: end the job
            eng.handler_failed(rs, label, src, e)

    return run


def handler_label(hidx: int) -> str:
    """``module.qualname of extension NAME`` for system-table index ``hidx`` (an
    extension's handler), as diagnoses name it."""
    for ext in extensions():
        base = _BASES.get(ext.name)
        if base is not None and base <= hidx < base + len(ext.handlers):
            return f"{handler_name(ext.handlers[hidx - base])} of extension {ext.name}"
    return f"system handler {hidx}"



def port_of(rs: Any, name: str) -> Port:
    with rs.lock:
        port = rs.ports.get(name)
        if port is None:
            ext = next((e for e in extensions() if e.name == name), None)
            if ext is None:
                raise AMNetError(f"no amnet extension is named {name!r}; this process has "
                                 f"{', '.join(e.name for e in extensions()) or 'none'}")
            port = Port(rs, ext, _BASES[name])
            rs.ports[name] = port
            # its messages from the node's other processes run straight from the C drain
            eng, base = rs.eng, _BASES[name]
            for i, h in enumerate(ext.handlers):
                eng.hot.set_sys_handler(rs.rank - eng.first, base + i,
                                        functools.partial(h, port))
    return port


class Port:
    """One endpoint's access to the core for one extension: sending its system AMs,
    tracking operations until their replies, segment access and synchronisation hooks.

    Get it as ``ep.port(name)`` (or as a handler's first argument).
    """

    __slots__ = ("_attach", "_awaited", "_base", "_eng", "_n", "_rs", "_state", "_wait_in",
                 "_wait_seq", "_waiting", "endpoint", "name")

    def __init__(self, rs: Any, ext: Extension, base: int) -> None:
        self._rs = rs
        self._eng = rs.eng
        self._base = base
        self._n = len(ext.handlers)
        self._attach = ext.attach
        self._state: Any = None
        self.name = ext.name
        self._waiting = f"{ext.name}: waiting"
        self._wait_in: Any = None  # what this rank waits in, for a diagnosis (waiting())
        self._wait_seq = 0  # when that block began (of all the rank's layers' blocks)
        self._awaited: dict[int, Any] = {}  # what its coroutines await (awaiting())
        self.endpoint = rs.endpoint  #: the endpoint this port belongs to

    def __repr__(self) -> str:
        return f"<amnet.Port {self.name} of rank {self._rs.rank}>"

    # -- facts ----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rs.rank

    @property
    def size(self) -> int:
        return self._eng.size

    @property
    def max_medium(self) -> int:
        """The payload size up to which a message travels in one piece everywhere (one
        shared-memory slot, one conduit frame of a Medium AM): what a layer that pipelines
        a large transfer should cut it into. Not a limit of :meth:`send`
        (:attr:`max_payload` is)."""
        return self._eng.max_medium

    @property
    def max_payload(self) -> int:
        """The largest payload :meth:`send` and :meth:`reply` take (the segment size, and at
        least 16 MiB): larger ones raise :class:`amnet.PayloadTooLarge`."""
        return self._eng.max_message

    @property
    def segment_size(self) -> int:
        return self._eng.seg_size

    @property
    def segment(self) -> Any:
        """My segment (numpy uint8)."""
        return self._rs.segment

    @property
    def lock(self) -> threading.Lock:
        """This rank's lock, for the extension's per-rank state that its handlers and the
        rank's own calls both change: a handler of this rank may run on another thread (the
        rank-thread that drains for the process, the progress thread) while the rank's
        thread is in the extension's code. Hold it for short critical sections only, never
        while sending or waiting (amnet takes it too, briefly)."""
        return self._rs.lock

    @property
    def state(self) -> Any:
        """The object ``attach(port)`` made (made on first use)."""
        s = self._state
        if s is None:
            with self._rs.lock:
                s = self._state
            if s is None:
                s = self if self._attach is None else self._attach(self)
                with self._rs.lock:
                    if self._state is None:
                        self._state = s
                    s = self._state
        return s

    def segment_of(self, rank: int) -> Any:
        """Rank ``rank``'s segment (numpy uint8) when I can address it (same node), else
        None. Raises RankError for a bad rank."""
        return self._eng.local_segment(self._eng.check_dest(rank))

    def node_area(self, rank: int) -> Any:
        """Rank ``rank``'s node area (numpy uint8, ``amnet.pshm.COLL_AREA`` bytes: a slot of
        ``COLL_SLOT`` bytes for each of up to ``COLL_TEAMS`` teams) when I can address it
        (same node) and PSHM is on, else None. The area is for amnet.coll's node
        collectives: its slots belong to the teams that layer makes, and each slot's owner
        is the only rank that writes it (docs/collectives.md, "The node area"). It lives
        as long as the job, in the process's shared object (private memory where the node
        has one process). Raises RankError for a bad rank."""
        return self._eng.local_area(self._eng.check_dest(rank))

    def node_waker(self, ranks: Sequence[int]) -> Callable[[], None]:
        """A function that, called after a store to shared memory (a node area, a segment)
        that waits of the node-local ``ranks`` may be looking for, wakes those that sleep:
        the doorbell of each of their processes that sleeps is rung, and this process's
        waiting threads are nudged. Sleeping ranks otherwise see the store only when
        something else wakes them. Raises RankError for a bad rank, ValueError for a rank
        of another node."""
        eng = self._eng
        me = eng.first // eng.T
        out: list[int] = []
        seen: set[int] = set()
        for r in ranks:
            r = eng.check_dest(r)
            if eng.local_area(r) is None and eng.local_segment(r) is None:
                raise ValueError(f"node_waker: rank {r} is not on rank {self.rank}'s node")
            proc = r // eng.T
            if proc == me or proc not in seen:  # every rank-thread here, a rank per process
                seen.add(proc)
                out.append(r)
        return functools.partial(eng.hot.wake_ranks, tuple(out))

    def through_network(self, rank: int) -> bool:
        """True when messages to ``rank`` go through the conduit (another node, or PSHM
        off); such sends never block on a full queue, so a reply handler may send the next
        request of an operation directly instead of deferring it."""
        return self._eng.route[self._eng.check_dest(rank) // self._eng.T] == W.NET

    def check_rank(self, rank: Any) -> int:
        """``rank`` as an int. Raises RankError when it is not a rank of the job."""
        return self._eng.check_dest(rank)

    # -- sending --------------------------------------------------------------------------
    def _index(self, index: int) -> int:
        if type(index) is not int or not 0 <= index < self._n:
            raise ValueError(f"extension {self.name} has handlers 0..{self._n - 1}, not "
                             f"{index!r}")
        return self._base + index

    def send(self, dest: int, index: int, args: tuple = (), payload: Any = None) -> None:
        """Send a request to handler ``index`` of this extension on ``dest``; ``payload``
        (bytes-like, at most :attr:`max_payload` bytes: not :attr:`max_medium`, which is
        only the size to cut large transfers into) may be reused when this returns. From a
        handler, send requests only inside a function given to :meth:`defer`.

        Raises:
            RankError, ValueError (bad index), TypeError (args not ints, more than
            amnet.MAX_ARGS; a payload that is not bytes-like), PayloadTooLarge (over
            :attr:`max_payload`).
        """
        self._send(dest, index, args, payload, False)

    def sender(self, index: int) -> Callable[[int, tuple, Any], None]:
        """A function ``send(dest, args, payload=None)`` sending requests to handler
        ``index`` as :meth:`send` does, for a layer's hot path: ``args`` are not checked on
        each call, so they must be a tuple of at most amnet.MAX_ARGS int64 values (others
        raise ``struct.error`` for another process, and reach the handler as they are in
        this one). ``dest`` is checked (RankError); ``payload`` may be reused on return.

        Raises:
            ValueError: a bad ``index`` (at once).
        """
        hidx = self._index(index)
        eng, src, size = self._eng, self._rs.rank, self._eng.size
        send_sys, check_dest = eng.send_sys, eng.check_dest

        def send(dest: int, args: tuple, payload: Any = None) -> None:
            if type(dest) is not int or not 0 <= dest < size:
                dest = check_dest(dest)
            send_sys(src, dest, hidx, args, payload)

        # to the node's other processes straight from C; the rest through ``send``
        return eng.hot.sys_sender(src - eng.first, hidx, send)

    def reply(self, dest: int, index: int, args: tuple = (), payload: Any = None) -> None:
        """Send a reply (from a request handler, to the request's source)."""
        self._send(dest, index, args, payload, True)

    def _send(self, dest: int, index: int, args: tuple, payload: Any, reply: bool) -> None:
        self._check_args(args)
        if payload is not None:
            try:
                n = memoryview(payload).nbytes
            except TypeError:
                raise TypeError(f"extension {self.name}: a payload must be bytes-like (bytes, "
                                "bytearray, memoryview or a numpy array), got "
                                f"{type(payload).__name__}") from None
            if n > self._eng.max_message:
                raise PayloadTooLarge(f"extension {self.name}: a payload of {n} bytes is over "
                                      f"port.max_payload = {self._eng.max_message} bytes")
        self._eng.send_sys(self._rs.rank, self._eng.check_dest(dest), self._index(index),
                           tuple(args), payload=payload, reply=reply)

    @staticmethod
    def _check_args(args: tuple) -> None:
        if len(args) > W.MAX_ARGS:
            raise TypeError(f"at most {W.MAX_ARGS} arguments travel in an AM, got {len(args)}")
        for a in args:
            if type(a) is not int or not W.INT64_MIN <= a <= W.INT64_MAX:
                raise TypeError(f"AM arguments must be int64 values, got {a!r}")

    def refuse(self) -> None:
        """Count a message that did not fit (forged or corrupt) and drop it."""
        self._eng._refuse()

    def defer(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` at the next poll or wait of this process (before any of its threads
        blocks), outside handler context, where it may send requests. It may run on another
        thread, and, deferred from one of this extension's handlers, before that handler has
        returned: take the locks the state it shares needs. An exception it raises ends the
        job naming ``fn`` and this rank (``on_handler_error`` sees it first)."""
        self._eng.defer(fn, self._rs.rank)

    # -- operations -----------------------------------------------------------------------
    def bucket(self, nbi: bool) -> Bucket | None:
        """The implicit-handle counter an NBI operation of mine joins (the innermost access
        region's, else the rank's); None when ``nbi`` is false."""
        if not nbi:
            return None
        rs = self._rs
        try:  # one read: deferred work on another thread may start one as a region closes
            return rs.regions[-1]
        except IndexError:
            return rs.nbi

    def op(self, peer: int, is_get: bool = False, out: Any = None, nbi: bool = False,
           cls: type = Op, **fields: Any) -> tuple[int, Any]:
        """Start tracking an operation completed by a reply from ``peer``: returns
        ``(opid, op)``; ``op`` is an instance of ``cls`` (a subclass of :class:`amnet.Op`),
        counted by ``ep.fence()`` and, when ``nbi``, by ``ep.wait_nbi()``/access regions."""
        op = cls(self._rs, peer, is_get, out, self.bucket(nbi))
        for k, v in fields.items():
            setattr(op, k, v)
        return self._rs.new_op(op), op

    def pending(self, opid: int, src: int, cls: type = Op) -> Any:
        """The operation ``opid`` when it is an instance of ``cls`` that went to ``src``;
        else the message is refused and None returned."""
        op = self._rs.ops.get(opid)
        if op is None or op.peer != src or not isinstance(op, cls):
            self._eng._refuse()
            return None
        return op

    def finish(self, opid: int, op: Any, value: Any = None,
               error: BaseException | None = None) -> None:
        """Complete ``op`` (taken from :meth:`pending`) with ``value`` or ``error``."""
        self._rs.ops.pop(opid, None)
        op.complete(value, error)

    def handle(self, op: Any, kind: str) -> Handle:
        """An :class:`amnet.Handle` on ``op`` (``wait()`` returns ``op.value``). ``kind`` is
        a short label of the operation (``"vis get_strided"``, ``"upc memget"``): the
        handle's ``kind`` attribute, its repr, and the name error messages give it (such as
        the AMContextError of a ``wait()`` inside a handler); it changes nothing else."""
        return Handle(self._eng, op, kind)

    # -- progress and context ---------------------------------------------------------------
    def poll(self) -> None:
        self._eng.poll()

    def wait_until(self, pred: Callable[[], Any], timeout: float | None = None) -> bool:
        """Poll until ``pred()`` holds (outside handlers). Raises JobAborted on teardown."""
        eng = self._eng
        eng.forbid_in_handler(self._waiting)
        return eng.hot.wait_until(pred, timeout)

    def waiting(self, what: Any) -> Waiting:
        """A context manager that says what this rank waits in while its block runs.

        When a job is stopped by ``--timeout`` or Ctrl-C, the launcher asks every rank
        process where its ranks are; a rank inside ``with port.waiting(what):`` is said to
        wait in ``str(what)``, e.g. ``ranks 0-1, 3 wait in amnet.coll barrier (call #4 on
        team world)``. ``str(what)`` is taken only then, on another thread, so pass a string
        or a cheap object whose ``__str__`` reads what it needs; entering and leaving cost a
        few attribute stores. Blocks of one port nest (the innermost is shown); of blocks
        of several layers' ports, the outermost is (the call the program made).
        """
        return Waiting(self, what)

    def awaiting(self, what: Any) -> Awaiting:
        """:meth:`waiting` for an ``await``: a context manager that says, while an amnet.aio
        coroutine awaits one of this layer's operations, that the rank awaits ``what``
        (shown as ``... wait in WHAT (awaited)`` when nothing it blocks in is known). Several
        coroutines of one loop may await at once and end in any order, so these blocks are
        counted, not nested."""
        return Awaiting(self, what)

    @staticmethod
    def awaitable(handle: Any) -> Any:
        """What ``await handle`` yields from, for a layer's handle's ``__await__``: amnet's one
        await hook, which :mod:`amnet.aio` sets when it is imported (the core and the layers
        know no event loop). ``handle`` has ``test()`` (progress, then whether it completed)
        and ``wait()`` or ``sync()`` (its result once complete)::

            def __await__(self):
                return port.awaitable(self).__await__()

        Raises:
            AMContextError: amnet.aio was never imported (nothing drives progress from a loop).
            TypeError: ``handle`` has no ``test()`` and ``wait()`` or ``sync()``.
        """
        return awaiting(handle)

    def forbid_in_handler(self, what: str) -> None:
        """Raise AMContextError when called inside a (user) handler, InitError after this
        rank's ``amnet.finalize()``: the check at the top of a blocking call."""
        self._check_live(what)
        self._eng.forbid_in_handler(what)

    def forbid_send_in_handler(self, what: str) -> None:
        """As :meth:`forbid_in_handler`, for a call that only starts an operation."""
        if self._rs.finalized or current_token() is not None:  # (the common case: one look)
            self._check_live(what)
            self._eng.forbid_send_in_handler(what)

    def _check_live(self, what: str) -> None:
        if self._rs.finalized:
            raise InitError(f"{what} on rank {self._rs.rank} after amnet.finalize()")

    # -- hooks ------------------------------------------------------------------------------
    def add_sync_hook(self, fn: Callable[[str], Any]) -> None:
        """Call ``fn(event)`` at the start of every ``ep.fence()`` (event ``"fence"``) and
        ``ep.barrier_notify()`` (event ``"barrier"``) of this endpoint, before the core does
        its part: a runtime flushes caches or completes deferred writes there; and once at
        the start of the rank's ``amnet.finalize()`` (event ``"finalize"``, collective like
        it), where a runtime may still communicate to end its own state (shmem_rt finalizes
        its PE there). A hook ignores the events it does not know."""
        hooks = self._rs.sync_hooks
        if fn not in hooks:
            hooks.append(fn)

    def remove_sync_hook(self, fn: Callable[[str], Any]) -> None:
        hooks = self._rs.sync_hooks
        if fn in hooks:
            hooks.remove(fn)


_ENTERED = itertools.count(1)  # orders waiting() blocks of a rank's layers: outermost first


class Waiting:
    """What :meth:`Port.waiting` returns: records ``what`` on the port while the block runs
    (and when it began, so that of several layers' blocks the outermost is shown: the call
    the program made, e.g. ``shmem.barrier_all()`` rather than the collective inside it)."""

    __slots__ = ("port", "prev", "what")

    def __init__(self, port: Port, what: Any) -> None:
        self.port = port
        self.what = what
        self.prev: tuple[Any, int] = (None, 0)

    def __enter__(self) -> Waiting:
        port = self.port
        self.prev = (port._wait_in, port._wait_seq)
        port._wait_seq = next(_ENTERED)
        port._wait_in = self.what
        return self

    def __exit__(self, *exc: Any) -> None:
        self.port._wait_in, self.port._wait_seq = self.prev


class Awaiting:
    """What :meth:`Port.awaiting` returns: ``what`` is on the port while the block runs."""

    __slots__ = ("port", "what")

    def __init__(self, port: Port, what: Any) -> None:
        self.port = port
        self.what = what

    def __enter__(self) -> Awaiting:
        self.port._awaited[id(self)] = self.what
        return self

    def __exit__(self, *exc: Any) -> None:
        self.port._awaited.pop(id(self), None)


def waits_in(ports: Any) -> str | None:
    """What one rank waits in, said by a ``with port.waiting(...)`` of one of its ``ports``
    (the rank's Port objects), else by a ``with port.awaiting(...)`` (the oldest await),
    or None. Called from another thread than the rank's: reads without locks, and never
    raises."""
    try:
        ports = list(ports)
        waiting = [(p._wait_seq, p) for p in ports if p._wait_in is not None]
        if waiting:
            port = min(waiting, key=lambda w: w[0])[1]  # the outermost layer's block
            try:
                return str(port._wait_in)
            except Exception:
                return port._waiting
        for port in ports:
            awaited = list(port._awaited.values())
            if awaited:
                try:
                    return f"{awaited[0]} (awaited)"
                except Exception:
                    return port._waiting
    except Exception:
        pass
    return None


def base_of(name: str) -> int:
    """The system-table index of extension ``name``'s first handler (engine started)."""
    return _BASES[name]


def verify_extensions(tables: Sequence[Sequence[str]]) -> None:
    """Every rank must have the same extensions (their handlers share the system table).

    Raises:
        HandlerMismatch: naming the first rank that differs from rank 0 (on every rank).
    """
    from .._errors import HandlerMismatch

    ref = list(tables[0])
    for rank, names in enumerate(tables):
        if list(names) != ref:
            raise HandlerMismatch(
                f"amnet.init(): rank {rank} has the amnet extensions {list(names)} but rank 0 "
                f"has {ref}; every process must install or register the same extensions "
                "(amnet.register_extension before amnet.init())")
