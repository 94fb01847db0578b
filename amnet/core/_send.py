"""The engine's sending side: user and system AMs to any rank, by route (a part of
:class:`amnet.core._engine.Engine`; C's twin: amnet/core/_hot_queue.c's send, _hot_ep.c).

In-line AMs (a rank of this process) run their handler right here; node-local ones go into
the shared-memory queues (``hot.pshm_send``, C); the rest to the conduit. Every check is made
before anything is sent, and these are the reference the C fast path's errors follow.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import (
    AMArgumentError,
    HandlerCategoryError,
    PayloadTooLarge,
    RankError,
    SegmentBoundsError,
)
from ..pshm._layout import F_DEPOSITED
from . import _wire as W
from ._bytes import as_bytes
from ._progress import yield_core

if TYPE_CHECKING:
    from ._engine import RankState

INLINE, PSHM = W.INLINE, W.PSHM
DIRECT_WAIT_S = 1e-4  # a rank waiting for a direct send while another drains re-checks so often
_FUNCTION = type(lambda: None)
_ARGS = W.ARGS


class Sending:
    """Engine methods that send (self is the :class:`Engine`)."""

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
        cat = flags & W.CATEGORY_MASK
        want = table.cats[idx]
        if want is not None and want != cat:
            raise HandlerCategoryError(
                f"handler {table.names[idx]} is declared {('short', 'medium', 'long', 'rpc')[want]}"
                f" but was sent as a {W.CATEGORY_NAMES[cat]} AM")
        nargs = len(args)
        if nargs > W.MAX_ARGS:
            raise AMArgumentError(f"{nargs} AM arguments given; at most amnet.MAX_ARGS == "
                                  f"{W.MAX_ARGS}")
        if table.nargs[idx] is not None and table.nargs[idx] != nargs:
            raise AMArgumentError(f"handler {table.names[idx]} is declared with "
                                  f"{table.nargs[idx]} arguments, {nargs} given")
        if cat == W.SHORT:
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
                yield_core()
        elif not self.poll(deferred=False):  # nothing ran, or another thread drains
            yield_core()
        err = self.abort_error()
        if err is not None:
            raise err


def bad_args_message(args: tuple) -> str:
    for i, a in enumerate(args):
        if isinstance(a, bool) or not isinstance(a, int | np.integer):
            return f"AM argument {i} must be an int, got {type(a).__name__}"
        if not W.INT64_MIN <= int(a) <= W.INT64_MAX:
            return f"AM argument {i} = {a} does not fit in int64"
    return "AM arguments must be ints that fit in int64"
