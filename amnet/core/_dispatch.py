"""The engine's receiving side: check one message, run its handler, refuse what is out of
range; deferred work (a part of :class:`amnet.core._engine.Engine`; C's twin:
amnet/core/_hot_token.c's dispatch, the user Short/Medium AMs it runs itself).

Whatever C does not run comes here (``HotHooks.dispatch``): the reference for every check.
"""

from __future__ import annotations

import struct
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import JobAborted
from . import _wire as W
from ._current import fail_rank
from ._extension import handler_label
from ._handlers import handler_name
from ._hot import current_token
from ._sys import PUT as _SYS_PUT
from ._sys import landed

if TYPE_CHECKING:
    from ._engine import RankState


class Dispatching:
    """Engine methods that receive and run (self is the :class:`Engine`)."""

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
