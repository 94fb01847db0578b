"""The extended API of the Endpoint: put/get (blocking, NB, NBI), access regions, atomics,
fence, split-phase barriers and rpc (docs/design.md §5)."""

from __future__ import annotations

from typing import Any

from ..pshm._native import fence as _memory_fence
from . import _extended as X
from ._atomics import decode
from ._ops import AccessRegion, Handle


class ExtendedMixin:
    __slots__ = ()

    # -- put / get ------------------------------------------------------------------------
    # ep.put and ep.get are C methods of amnet.core._hot.EndpointBase: a node-local copy of a
    # contiguous buffer happens there, anything else comes here.
    def _put_slow(self, dest: int, offset: int, data: Any) -> None:
        """``ep.put`` when the C fast path does not apply (see its docstring)."""
        eng = self._eng
        eng.forbid_in_handler("ep.put()")
        op = X.start_put(eng, self._live(), dest, offset, data, False, True, "ep.put()")
        Handle(eng, op, "put").wait()

    def _get_slow(self, src: int, offset: int, nbytes: int, out: Any = None) -> Any:
        """``ep.get`` when the C fast path does not apply (see its docstring)."""
        eng = self._eng
        eng.forbid_in_handler("ep.get()")
        op = X.start_get(eng, self._live(), src, offset, nbytes, out, False, "ep.get()")
        return Handle(eng, op, "get").wait()

    # ep.put_nb and ep.get_nb are C methods too (a node-local copy's handle is complete at
    # once; their docstrings are there)
    def _put_nb_slow(self, dest: int, offset: int, data: Any, *,
                     bulk: bool = False) -> Handle:
        """``ep.put_nb`` when the C fast path does not apply."""
        op = X.start_put(self._eng, self._live(), dest, offset, data, False, False,
                         "ep.put_nb()", X.check_bulk(bulk, "ep.put_nb()"))
        self._eng.poll()
        return Handle(self._eng, op, "put")

    def _get_nb_slow(self, src: int, offset: int, nbytes: int, out: Any = None) -> Handle:
        """``ep.get_nb`` when the C fast path does not apply."""
        op = X.start_get(self._eng, self._live(), src, offset, nbytes, out, False,
                         "ep.get_nb()")
        self._eng.poll()
        return Handle(self._eng, op, "get")

    # ep.put_nbi and ep.get_nbi are C methods too (a node-local copy is complete at once)
    def _put_nbi_slow(self, dest: int, offset: int, data: Any, *, bulk: bool = False) -> None:
        """``ep.put_nbi`` when the C fast path does not apply (see its docstring)."""
        X.start_put(self._eng, self._live(), dest, offset, data, True, False, "ep.put_nbi()",
                    X.check_bulk(bulk, "ep.put_nbi()"))
        self._eng.poll()

    def _get_nbi_slow(self, src: int, offset: int, nbytes: int, out: Any) -> None:
        """``ep.get_nbi`` when the C fast path does not apply (see its docstring)."""
        if out is None:
            raise TypeError("ep.get_nbi() needs an out buffer")
        X.start_get(self._eng, self._live(), src, offset, nbytes, out, True, "ep.get_nbi()")
        self._eng.poll()

    def wait_nbi(self, puts: bool = True, gets: bool = True) -> None:
        """Wait for the implicit-handle puts and/or gets started outside access regions.

        Raises:
            AMContextError: inside a handler.
        """
        self._eng.forbid_in_handler("ep.wait_nbi()")
        b = self._live().nbi
        self._eng.wait_until(lambda: (not puts or b.puts == 0) and (not gets or b.gets == 0),
                            pure=True)

    def test_nbi(self, puts: bool = True, gets: bool = True) -> bool:
        """Poll once and say whether those implicit-handle operations all completed."""
        self._eng.forbid_in_handler("ep.test_nbi()")
        b = self._live().nbi
        self._eng.poll()
        return (not puts or b.puts == 0) and (not gets or b.gets == 0)

    def access_region(self) -> AccessRegion:
        """``with ep.access_region() as region:`` NBI operations inside become one handle,
        ``region.handle``, available after the block."""
        self._eng.forbid_in_handler("ep.access_region()")
        return AccessRegion(self._eng, self._live())

    # -- atomics / fence ------------------------------------------------------------------
    # ep.atomic is a C method of amnet.core._hot.EndpointBase: a node-local atomic with
    # plainly valid arguments runs there, anything else comes here (its docstring is there).
    def _atomic_slow(self, dest: int, offset: int, op: str, value: Any = None,
                     value2: Any = None, dtype: str = "i8") -> int | float:
        """``ep.atomic`` when the C fast path does not apply: every check, and atomics on
        other nodes."""
        self._eng.forbid_in_handler("ep.atomic()")
        o, di = X.start_atomic(self._eng, self._live(), dest, offset, op, value, value2, dtype)
        return decode(Handle(self._eng, o, "atomic").wait(), di)

    def _segment_offset_slow(self, buf: Any) -> int:
        """``ep.segment_offset`` without node-local segments in C (``--no-pshm``)."""
        import numpy as np

        a = np.asarray(memoryview(buf)) if not isinstance(buf, np.ndarray) else buf
        start = a.__array_interface__["data"][0]
        lo = hi = start
        if a.size:  # the extent of any strides (numpy 2 has no np.byte_bounds)
            for n, st in zip(a.shape, a.strides, strict=True):
                if st > 0:
                    hi += (n - 1) * st
                else:
                    lo += (n - 1) * st
            hi += a.itemsize
        base = self.segment
        b0 = base.__array_interface__["data"][0]
        if lo < b0 or hi > b0 + base.nbytes:
            return -1
        return start - b0

    def fence(self) -> None:
        """Wait until every operation this rank started (any completion kind) completed,
        then issue a full memory fence: this thread's stores through segment views are
        ordered before anything it does afterwards (another rank still needs a
        synchronising event, such as a barrier, an AM or an atomic flag, to know they are
        there)."""
        self._eng.forbid_in_handler("ep.fence()")
        rs = self._live()
        for hook in rs.sync_hooks:  # extensions first (a cache writes back, say)
            hook("fence")
        self._eng.wait_until(lambda: rs.inflight == 0, pure=True)
        _memory_fence()

    # -- barriers -------------------------------------------------------------------------
    def barrier_notify(self, name: Any = None) -> None:
        """Enter a split-phase barrier (``name``: None, an int or a str).

        Raises:
            BarrierStateError: a barrier is already pending on this rank.
            AMContextError: inside a handler.
        """
        self._eng.forbid_in_handler("ep.barrier_notify()")
        rs = self._live()
        for hook in rs.sync_hooks:  # extensions first (a cache writes back, say)
            hook("barrier")
        rs.barrier.notify(name)
        self._eng.poll()

    def barrier_wait(self) -> None:
        """Wait for the pending barrier to complete.

        Raises:
            BarrierMismatch: ranks passed different names (on every rank).
            BarrierStateError: no barrier_notify is pending.
            JobAborted: the job is being torn down.
        """
        self._eng.forbid_in_handler("ep.barrier_wait()")
        bar = self._live().barrier
        bar.check_pending("barrier_wait")
        bar.waiting = True  # where this rank is, should the launcher ask
        try:
            self._eng.wait_until(lambda: bar.done, pure=True)
        finally:
            bar.waiting = False
        bar.finish()

    def barrier_try(self) -> bool:
        """Poll; True (and the barrier is over) if it completed, else False.

        Raises: as :meth:`barrier_wait`.
        """
        self._eng.forbid_in_handler("ep.barrier_try()")
        bar = self._live().barrier
        bar.check_pending("barrier_try")
        if not bar.done:
            self._eng.poll()
        if not bar.done:
            return False
        bar.finish()
        return True

    def barrier(self, name: Any = None) -> None:
        """``barrier_notify(name)`` then ``barrier_wait()``.

        Raises: as both.
        """
        self.barrier_notify(name)
        self.barrier_wait()

    # -- rpc ------------------------------------------------------------------------------
    def rpc(self, dest: int, fn: Any, *args: Any, **kwargs: Any) -> Handle:
        """Run registered ``fn(*args, **kwargs)`` on ``dest``; ``handle.wait()`` returns its
        result. Arguments and result travel msgpack-encoded. ``fn`` runs in handler context
        on ``dest`` (it may not block or send).

        Raises:
            HandlerNotRegistered, HandlerCategoryError, AMArgumentError, PayloadTooLarge,
                RankError: bad input (nothing is sent).
            AMContextError: inside a handler.
            (from wait) the exception fn raised, with the rank named in a note.
        """
        op = X.start_rpc(self._eng, self._live(), dest, fn, args, kwargs, False)
        self._eng.poll()
        return Handle(self._eng, op, "rpc")

    def rpc_ff(self, dest: int, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Run registered ``fn(*args, **kwargs)`` on ``dest`` without a result (fire and
        forget). An exception in fn is a handler failure at ``dest``.

        Raises: as :meth:`rpc` (before anything is sent).
        """
        X.start_rpc(self._eng, self._live(), dest, fn, args, kwargs, True)
        self._eng.poll()
