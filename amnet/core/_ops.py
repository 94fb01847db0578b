"""Completion: handles for nonblocking operations, implicit-handle (NBI) counters, access
regions, and ``amnet.wait_all`` / ``amnet.wait_any`` (GASNet-EX events, in Python).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._errors import AMContextError, AMNetError


class Bucket:
    """Counts of outstanding implicit-handle operations (one per rank, one per region)."""

    __slots__ = ("gets", "puts")

    def __init__(self) -> None:
        self.puts = 0
        self.gets = 0

    @property
    def idle(self) -> bool:
        return self.puts == 0 and self.gets == 0


#: How ``await handle`` is done: set by :mod:`amnet.aio` when it is imported (the core knows
#: no event loop). ``AWAITER[0](obj)`` returns what the await yields from.
AWAITER: list[Any] = [None]


def awaiting(obj: Any) -> Any:
    """The awaitable behind ``await obj`` (a :class:`Handle`, a collective's handle).

    Raises:
        AMContextError: amnet.aio was never imported (nothing drives progress from a loop).
    """
    fn = AWAITER[0]
    if fn is None:
        raise AMContextError(f"await of {obj!r} needs amnet.aio: run the coroutine with "
                             "amnet.aio.run(main) (or inside amnet.aio.attach())")
    return fn(obj)


class Op:
    """One operation in flight, completed by the reply that names its op id.

    ``notify``: None, or a callable that :meth:`complete` calls with the op once it is done
    (on whichever thread completed it: amnet.aio's loop driver sets it while an ``await``
    waits for the op)."""

    __slots__ = ("bucket", "done", "error", "is_get", "notify", "out", "peer", "rs", "value")

    def __init__(self, rs: Any, peer: int, is_get: bool = False, out: Any = None,
                 bucket: Bucket | None = None) -> None:
        self.rs = rs
        self.peer = peer  # the rank whose reply completes it
        self.is_get = is_get
        self.out = out
        self.bucket = bucket
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.notify: Any = None
        with rs.lock:  # completions run on the draining thread: counters need a real lock
            rs.inflight += 1
            if bucket is not None:
                if is_get:
                    bucket.gets += 1
                else:
                    bucket.puts += 1

    def complete(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        b = self.bucket
        with self.rs.lock:
            if b is not None:
                if self.is_get:
                    b.gets -= 1
                else:
                    b.puts -= 1
            self.rs.inflight -= 1
        self.done = True
        notify = getattr(self, "notify", None)  # a subclass may not have run Op.__init__
        if notify is not None:
            notify(self)


class Done:
    """An operation that completed when it started (a direct copy within the node)."""

    __slots__ = ("value",)
    done = True
    error = None

    def __init__(self, value: Any = None) -> None:
        self.value = value


DONE = Done()


class Handle:
    """A nonblocking operation's handle (``put_nb``, ``get_nb``, ``rpc``, a region's).

    ``wait()`` may be called any number of times; after the first it returns at once.
    """

    __slots__ = ("_eng", "_op", "kind")

    def __init__(self, eng: Any, op: Any, kind: str) -> None:
        self._eng = eng
        self._op = op
        self.kind = kind

    @property
    def done(self) -> bool:
        """True once the operation completed (no polling)."""
        return self._op.done

    def test(self) -> bool:
        """Poll once (outside handlers) and say whether the operation completed."""
        if not self._op.done and self._eng.in_handler() is None:
            self._eng.poll()
        return self._op.done

    def wait(self) -> Any:
        """Wait for completion and return the result: None for a put, the data for a get
        (the ``out`` buffer, or a new ``bytearray``), fn's result for an rpc.

        Raises:
            AMContextError: called inside a handler.
            JobAborted: the job is being torn down.
            Exception: an rpc's remote exception, re-raised here with the rank named.
        """
        op = self._op
        if not op.done:
            self._eng.forbid_in_handler(f"{self.kind} handle.wait()")
            self._eng.wait_until(lambda: op.done, pure=True)
        if op.error is not None:
            raise op.error
        return op.value

    def __await__(self) -> Any:
        """``await handle`` (in a coroutine that :func:`amnet.aio.run` runs): the result, as
        :meth:`wait` returns it, with the same errors."""
        op = self._op
        if op.done and AWAITER[0] is not None:  # nothing to wait for (a node-local copy)
            if op.error is not None:
                raise op.error
            return op.value
        return (yield from awaiting(self).__await__())

    def __repr__(self) -> str:
        return f"<amnet.Handle {self.kind} {'done' if self._op.done else 'pending'}>"


class RegionOp:
    """The completion of an access region: done when its bucket is idle."""

    __slots__ = ("bucket",)

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket

    @property
    def done(self) -> bool:
        return self.bucket.idle

    error = None
    value = None


class AccessRegion:
    """``with ep.access_region() as region:`` NBI operations started inside belong to the
    region, not to ``wait_nbi``; after the block, ``region.handle`` completes them all.
    """

    __slots__ = ("_bucket", "_eng", "_rs", "handle")

    def __init__(self, eng: Any, rs: Any) -> None:
        self._eng = eng
        self._rs = rs
        self._bucket = Bucket()
        self.handle: Handle | None = None

    def __enter__(self) -> AccessRegion:
        if self.handle is not None:
            raise AMNetError("an access region can be entered once")
        self._rs.regions.append(self._bucket)
        return self

    def __exit__(self, *exc: Any) -> None:
        regions = self._rs.regions
        if regions and regions[-1] is self._bucket:
            regions.pop()
        self.handle = Handle(self._eng, RegionOp(self._bucket), "access region")


def _handles(handles: Iterable[Handle]) -> list[Handle]:
    hs = list(handles)
    for h in hs:
        if not isinstance(h, Handle):
            raise TypeError(f"expected amnet handles, got {type(h).__name__}")
    return hs


def wait_all(handles: Iterable[Handle]) -> list[Any]:
    """Wait for every handle; return their results in order.

    Raises:
        TypeError: an item is not a handle.
        Exception: the first failed operation's error (after all completed).
    """
    hs = _handles(handles)
    pending = [h for h in hs if not h._op.done]
    if pending:
        eng = pending[0]._eng
        eng.forbid_in_handler("amnet.wait_all()")
        eng.wait_until(lambda: all(h._op.done for h in pending), pure=True)
    return [h.wait() for h in hs]


def wait_any(handles: Sequence[Handle]) -> int:
    """Wait until at least one handle completed; return the index of one that did.

    Raises:
        ValueError: ``handles`` is empty.
        TypeError: an item is not a handle.
    """
    hs = _handles(handles)
    if not hs:
        raise ValueError("amnet.wait_any() needs at least one handle")
    for i, h in enumerate(hs):
        if h._op.done:
            return i
    eng = hs[0]._eng
    eng.forbid_in_handler("amnet.wait_any()")
    eng.wait_until(lambda: any(h._op.done for h in hs), pure=True)
    for i, h in enumerate(hs):
        if h._op.done:
            return i
    raise AssertionError("unreachable")
