"""The common case of a small collective, without the general machinery.

A broadcast, gather_all, reduce_all or barrier whose default algorithm is ``direct`` (see
:mod:`amnet.coll._pick`: a team of up to DIRECT_P members, blocks of up to DIRECT_MAX bytes)
costs, through :class:`amnet.coll._msg.Run` and a generator, about as much Python as its
messages (the argument checks, the description, the generator, the mailbox): at 8 B on 2
ranks in a node, 9-15 µs against mpi4py's 2-4 µs. :class:`Fast` drives such a call straight:
a few type checks here, then in C (:class:`amnet.coll._cmail.Core`) the description and its
digest from a cache, ``direct``'s sends, the call's entry in the mailbox, a wait for its
messages and taking them; the result here.

It sends exactly what ``direct`` sends (same keys, tags and digest), so a member on this path
and one on the general path (another call of its in flight, arguments of another kind) meet
in the same call. It agrees lazily as the general path does: the call's description goes
into the history as soon as its messages are sent (a check that came before waits in the
mailbox and is answered then, or when the call completes), the data's digest is compared
with mine, and a mismatch of a completed call is raised at the end of the next.
Whatever is not the common case -- arguments it does not know at a glance (the general path
checks them and raises), another call in flight, a check or verdict about this call, data
with another digest, no data after ``coll_check`` seconds -- goes to the general path:
before anything is sent the call is started there, afterwards it is handed over
(:meth:`amnet.coll._api.Coll.resume`) and finished by ``direct``'s receiving half.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import CollectiveMismatch
from ._algos import Args, direct_finish, fold_parts
from ._cmail import Core
from ._msg import KEEP, digest
from ._ops import FUNC, NONCOMM_FUNC, UFUNC, check_op
from ._pick import DIRECT_MAX, signature


class Fast:
    """One team's fast path (per rank: a member's own Coll). The bookkeeping of a call --
    beginning it, sending, entering it, waiting for its messages, completing it -- is C
    (amnet.coll._cmail.Core); the checks of the arguments and the results are here."""

    __slots__ = ("box", "coll", "core", "descs", "me", "off", "others", "size", "team")
    alg = "direct"  # the algorithm whose calls it makes (their description says so)

    def __init__(self, coll: Any, team: Any) -> None:
        box = coll.box
        self.coll = coll
        self.team = team
        self.box = box
        port = coll.port
        self.me = me = team.index
        self.size = team.size
        self.others = tuple(i for i in range(team.size) if i != me)  # member indexes
        self.off = frozenset(coll.choice)  # collectives configured to another algorithm
        self.descs: dict[tuple, tuple] = {}  # (what, size, root, dtype, op) -> (digest, sig)
        self.core = Core(box, coll._runs, self.descs, port.forbid_send_in_handler,
                         port.wait_until, box.send_data, self._follow, team.id, me,
                         tuple(team.members[i] for i in self.others), self.others,
                         float(coll.check_after), KEEP)

    # -- the collectives (True: done; False: not the common case, nothing done) ------------
    def broadcast(self, dst: Any, src: Any, root: Any) -> bool:
        if type(dst) is not np.ndarray or type(root) is not int or "broadcast" in self.off:
            return False
        n = dst.nbytes
        f = dst.flags
        if not (0 < n <= DIRECT_MAX and f.c_contiguous and f.writeable
                and 0 <= root < self.size):
            return False
        if self.me == root:
            if not (type(src) is np.ndarray and src.nbytes == n and src.flags.c_contiguous):
                return False
            if self._start(("broadcast", n, root), src, True, True) is None:
                return False
            if dst is not src:
                _bytes(dst)[:] = _bytes(src)
            return self._end()
        call = self._start(("broadcast", n, root), None, False, False)
        if call is None:
            return False
        got = self.core.finish(call, ((call[0], call[1], 0, root),))
        if got is None:
            self._hand_over(call, Args("broadcast", n, root, None, _u8(dst), dst.itemsize))
            return True
        _bytes(dst)[:] = got[0]
        return self._end()

    def gather_all(self, dst: Any, src: Any) -> bool:
        if (type(dst) is not np.ndarray or type(src) is not np.ndarray
                or "gather_all" in self.off):
            return False
        n = src.nbytes
        f = dst.flags
        if not (0 < n <= DIRECT_MAX and dst.nbytes == n * self.size and f.c_contiguous
                and f.writeable and src.flags.c_contiguous):
            return False
        alone = not self.others
        call = self._start(("gather_all", n), src, True, alone)
        if call is None:
            return False
        d8 = _u8(dst)
        if not alone:
            got = self.core.finish(call, None)
            if got is None:
                self._hand_over(call, Args("gather_all", n, 0, _u8(src), d8, src.itemsize))
                return True
            for i, data in zip(self.others, got, strict=True):
                d8[i * n:(i + 1) * n].data[:] = data
        me = self.me
        d8[me * n:(me + 1) * n].data[:] = _bytes(src)
        return self._end()

    def reduce_all(self, dst: Any, src: Any, op: Any, func: Any) -> bool:
        # the built-in ops only: a reduction function may raise (the general path tells
        # the others then)
        if (type(dst) is not np.ndarray or type(src) is not np.ndarray or type(op) is not int
                or func is not None or op in (FUNC, NONCOMM_FUNC) or "reduce_all" in self.off):
            return False
        dt = src.dtype
        n = src.nbytes
        f = dst.flags
        if not (0 < n <= DIRECT_MAX and dst.dtype == dt and dst.size == src.size
                and f.c_contiguous and f.writeable and src.flags.c_contiguous):
            return False
        alone = not self.others
        call = self._start(("reduce_all", n, dt, op), src, True, alone)
        if call is None:
            return False
        if alone:
            _bytes(dst)[:] = _bytes(src)
            return self._end()
        got = self.core.finish(call, None)
        if got is None:
            self._hand_over(call, Args("reduce_all", n, 0, _u8(src), _u8(dst), dt.itemsize,
                                       op=op, dtype=dt))
            return True
        mine = src.reshape(-1)
        if len(got) == 1 and op in UFUNC:  # 2 members: one ufunc into dst (the same bits)
            other = np.frombuffer(got[0], dt)
            UFUNC[op](*((mine, other) if self.me == 0 else (other, mine)),
                      out=dst.reshape(-1))
        else:
            parts = [np.frombuffer(d, dt) for d in got]
            parts.insert(self.me, mine)
            dst.reshape(-1)[:] = fold_parts(op, parts, None)
        return self._end()

    def barrier(self) -> bool:
        if "barrier" in self.off:
            return False
        alone = not self.others
        call = self._start(("barrier",), None, True, alone)
        if call is None:
            return False
        if not alone and self.core.finish(call, None) is None:
            self._hand_over(call, Args("barrier"))
            return True
        return self._end()

    # -- the call's life --------------------------------------------------------------------
    def _start(self, key: tuple, data: Any, send: bool, complete: bool,
               describe_only: bool = False) -> tuple[int, int, int, Any] | None:
        """Begin the call of ``key``, send ``data`` to every other member (``send``) and
        enter the call (its description in the history; with ``complete``, a call that
        receives nothing, its sequence number too): (team id, seq, digest, sig). None,
        nothing done, when the general path is to take it. ``describe_only``: only give the
        key its description (a true value when it has one). Raises AMContextError inside a
        handler."""
        call = False if describe_only else self.core.start(key, WHAT[key[0]], data, send,
                                                           complete)
        if call is False:  # the first call of its kind: describe it
            try:
                sig = signature(_args_of(key), self.alg)
            except (TypeError, ValueError):
                return None  # the general path refuses it, and says why
            if len(self.descs) > 256:
                self.descs.clear()
            self.descs[key] = (digest(sig), sig)
            if describe_only:
                return self.descs[key]  # type: ignore[return-value]
            call = self.core.start(key, WHAT[key[0]], data, send, complete)
        return call

    def _follow(self, code: int, call: tuple) -> None:
        """What the C core leaves to Python: answer a check of the call that came before
        it was entered (1), ask the members about data of another call that came for it
        (2), prune the history (4)."""
        box, c = self.box, (call[0], call[1])
        if code == 1:
            with box.lock:
                box.asked.discard(c)
                if c in box.answered:
                    return
                box._answered(c)
                text = box._description(c)
            box.send_sig(c, text)
        elif code == 2:
            box.ask(c)
        else:
            with box.lock:
                box.prune()

    def _end(self) -> bool:
        """The call is complete (its result in place): raise the mismatch of an earlier
        call of the team found meanwhile, as the general path does."""
        failed = self.box.failed
        if failed:
            with self.box.lock:  # a handler's verdict adds to it under the lock
                late = failed.pop(self.team.id, None)
            if late is not None:
                raise CollectiveMismatch("\n".join(late))
        return True

    def _hand_over(self, call: tuple, a: Args) -> None:
        """Not the common case after my messages went: the general path finishes the call
        with ``direct``'s receiving half (and raises what it finds)."""
        self.coll._finish(self.coll.resume(self.team, a, call[1], call[3], call[2],
                                           direct_finish))


WHAT = {w: f"amnet.coll {w}" for w in ("broadcast", "gather_all", "reduce_all", "barrier")}
_U8 = np.dtype(np.uint8)


def _u8(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array as flat uint8."""
    return a if a.dtype is _U8 and a.ndim == 1 else a.reshape(-1).view(np.uint8)


def _bytes(a: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes, writable if it is (for a copy: ``_bytes(d)[:] = x``)."""
    return a.data if a.dtype is _U8 and a.ndim == 1 else a.reshape(-1).view(np.uint8).data


def _args_of(key: tuple) -> Args:
    """The Args of a call with this key (its description only: no buffers). Raises what
    the general path would raise for it (reduce_all's op and dtype)."""
    what = key[0]
    if what == "reduce_all":
        n, dt, op = key[1], key[2], key[3]
        check_op(op, dt, None, "reduce_all")
        return Args("reduce_all", n, 0, None, None, dt.itemsize, op=op, dtype=dt)
    if what == "broadcast":
        return Args("broadcast", key[1], key[2])
    if what == "gather_all":
        return Args("gather_all", key[1])
    return Args("barrier")
