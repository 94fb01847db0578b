"""The common case of a small collective on the node area, in one C call.

Where a team's members share memory (:mod:`amnet.coll._node`), a blocking broadcast,
gather_all, reduce_all (a built-in op on a plain numeric dtype) or barrier on C-contiguous
numpy arrays whose blocks fit the data area in one round, with no other call of the member
in flight, skips the general machinery (a generator per call, the mailbox's run): the call
is entered as :class:`amnet.coll._fast.Fast` enters one (its sequence number, description
and digest in C, :class:`amnet.coll._cmail.Core`), then ``Area.run`` does all of ``shm``'s
protocol for it in C -- the ring, the wait for its previous data to be read, the copy in,
the publication, the wait for the others (a short spin without the interpreter lock, then
the engine's wait), the copy out or the fold in member order, DONE. It is the same protocol
as ``shm``'s, step for step, so members on either path meet in one call.

Agreement is ``shm``'s: a member in another call (another digest where this one waits)
or no progress for ``coll_check`` seconds makes this member ask for the check, and it then
waits until its call completes or the verdict is in; a mismatch found in the ring of calls
after the call completed is raised at the end of the next call, as the general path does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import AMNetError
from ._fast import WHAT, Fast
from ._ops import NAMES
from ._shm import ROPS, ROUND_BITS, RTYPES

BARRIER, BROADCAST, GATHER_ALL, REDUCE_ALL = range(4)  # Area.run's collectives
NAMES_OF = ("barrier", "broadcast", "gather_all", "reduce_all")
#: amnet's ops that Area.run folds in C, as its op numbers
_RED = {op: ROPS.index(name) for op, name in NAMES.items() if name in ROPS}
_FLOAT_OK = frozenset(ROPS.index(n) for n in ("ADD", "MULT", "MIN", "MAX"))


class ShmFast(Fast):
    """One team's fast path on the node area (per rank). As :class:`Fast`: each collective
    returns True when done, False (nothing done) when it is not the common case."""

    __slots__ = ("area", "na", "start", "timeout", "wait")
    alg = "shm"

    def __init__(self, coll: Any, team: Any) -> None:
        super().__init__(coll, team)
        self.na = team._shm
        self.area = self.na.area
        self.start = self.core.start
        self.wait = coll.port.wait_until
        self.timeout = float(coll.check_after)

    def broadcast(self, dst: Any, src: Any, root: Any) -> bool:
        if type(dst) is not np.ndarray or type(root) is not int or "broadcast" in self.off:
            return False
        if self.me != root:
            src = None
        elif type(src) is not np.ndarray:
            return False
        return self._call(BROADCAST, ("broadcast", dst.nbytes, root), root, src, dst, None)

    def gather_all(self, dst: Any, src: Any) -> bool:
        if (type(dst) is not np.ndarray or type(src) is not np.ndarray
                or "gather_all" in self.off):
            return False
        return self._call(GATHER_ALL, ("gather_all", src.nbytes), 0, src, dst, None)

    def reduce_all(self, dst: Any, src: Any, op: Any, func: Any) -> bool:
        if (type(dst) is not np.ndarray or type(src) is not np.ndarray or type(op) is not int
                or func is not None or "reduce_all" in self.off):
            return False
        dt = src.dtype
        r = _RED.get(op)
        if (r is None or dt.char not in RTYPES or (dt.kind == "f" and r not in _FLOAT_OK)
                or dst.dtype != dt):
            return False
        return self._call(REDUCE_ALL, ("reduce_all", src.nbytes, dt, op), 0, src, dst,
                          (r, dt.char))

    def barrier(self) -> bool:
        if "barrier" in self.off:
            return False
        return self._call(BARRIER, ("barrier",), 0, None, None, None)

    # -- the call ---------------------------------------------------------------------------
    def _call(self, what: int, key: tuple, root: int, src: Any, dst: Any, red: Any) -> bool:
        """Area.call: the arguments checked in C (not the common case: False, nothing done),
        the call entered (Core.start) and run; then what is rare."""
        r = self.area.call(what, WHAT[key[0]], self.start, key, root, src, dst, red,
                           self.wait, self.timeout)
        if r == 1:
            return True if not self.box.failed else self._end()  # (_end's look, inline)
        if r == -4:  # the first call of its kind: describe it, then again
            if self._start(key, None, False, True, describe_only=True) is None:
                return False
            r = self.area.call(what, WHAT[key[0]], self.start, key, root, src, dst, red,
                               self.wait, self.timeout)
            if r == 1:
                return self._end()
        if type(r) is int:  # -3 (or -4 again): the general path takes it
            return False
        r, seq, dig = r
        call = (self.team.id, seq, dig)
        if r == 2:  # complete; another member entered it otherwise: the members compare
            self.box.ask((call[0], call[1]))
            return self._end()
        return self._doubt(call, what, root, src, dst, red, r)

    def _doubt(self, call: tuple, what: int, root: int, src: Any, dst: Any, red: Any,
               r: int) -> bool:
        """No progress for coll_check seconds (0) or a member in another call (-2): ask
        the members to compare, then wait until the call completes or the verdict is in
        (the call counts as completed here: a mismatch's verdict lands in box.failed, and
        _end raises it)."""
        box, tid, port = self.box, call[0], self.coll.port
        box.ask((tid, call[1]))

        def wait(cond: Any, timeout: Any) -> bool:
            return port.wait_until(lambda: cond() or tid in box.failed, timeout)

        # it waits: a timeout's diagnosis names the call, as the general path's does
        with port.waiting(f"amnet.coll {NAMES_OF[what]} (call #{call[1]} on {self.team})"):
            while r == 0 and tid not in box.failed:
                r = self.area.run(what, call[1], call[2], root, src, dst, red, wait, None)
                if r in (1, 2):
                    return self._end()
            if tid not in box.failed:  # in another call: its verdict is on the way
                port.wait_until(lambda: tid in box.failed)
        self.na.finish((call[1] + 1) << ROUND_BITS)  # nobody waits on this call now
        self._end()
        raise AMNetError(f"amnet.coll: call #{call[1]} on {self.team} failed")  # not reached


__all__ = ["ShmFast"]
