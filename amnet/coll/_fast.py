"""The common case of a small collective, without the general machinery.

A broadcast, gather_all, reduce_all or barrier whose default algorithm is ``direct`` (see
:mod:`amnet.coll._pick`: a team of up to DIRECT_P members, blocks of up to DIRECT_MAX bytes)
costs, through :class:`amnet.coll._msg.Run` and a generator, about as much Python as its
messages (the argument checks, the description, the generator, the mailbox): at 8 B on 2
ranks in a node, 9-15 µs against mpi4py's 2-4 µs. :class:`Fast` drives such a call straight:
a few type checks, the description and its digest from a cache, ``direct``'s sends, a wait
for its messages in the mailbox, the result.

It sends exactly what ``direct`` sends (same keys, tags and digest), so a member on this path
and one on the general path (another call of its in flight, arguments of another kind) meet
in the same call. It agrees lazily as the general path does: the call's description is in
the history before anything is sent (a member's check is answered), the data's digest is
compared with mine, and a mismatch of a completed call is raised at the end of the next.
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
from ._msg import KEEP, Key, describe, digest
from ._ops import FUNC, NONCOMM_FUNC, check_op
from ._pick import DIRECT_MAX, signature

_ALG = "direct"


class Fast:
    """One team's fast path (per rank: a member's own Coll)."""

    __slots__ = ("box", "coll", "descs", "me", "off", "others", "port", "ranks", "ready",
                 "send", "size", "team", "tid", "timeout", "wait")

    def __init__(self, coll: Any, team: Any) -> None:
        box = coll.box
        self.coll = coll
        self.team = team
        self.box = box
        self.port = coll.port
        self.tid = team.id
        self.me = me = team.index
        self.size = team.size
        self.others = tuple(i for i in range(team.size) if i != me)  # member indexes
        self.ranks = tuple(team.members[i] for i in self.others)
        self.send = box.send_data
        self.ready = box.ready
        self.wait = coll.port.wait_until
        self.timeout = coll.check_after
        self.off = frozenset(coll.choice)  # collectives configured to another algorithm
        self.descs: dict[tuple, tuple] = {}  # (what, size, root, dtype, op) -> (sig, digest)

    # -- the collectives (True: done; False: not the common case, nothing done) ------------
    def broadcast(self, dst: Any, src: Any, root: Any) -> bool:
        if type(dst) is not np.ndarray or type(root) is not int or "broadcast" in self.off:
            return False
        n = dst.nbytes
        f = dst.flags
        if not (0 < n <= DIRECT_MAX and f.c_contiguous and f.writeable
                and 0 <= root < self.size):
            return False
        me = self.me
        if me == root:
            if not (type(src) is np.ndarray and src.nbytes == n and src.flags.c_contiguous):
                return False
            call = self._enter(("broadcast", n, root), True)
            if call is None:
                return False
            tid, seq, dg = call[0], call[1], call[2]
            send = self.send
            for rank in self.ranks:
                send(rank, (tid, seq, 0, me, 0, 1, dg, 0), src)
            if dst is not src:
                _bytes(dst)[:] = _bytes(src)
            return self._end()
        call = self._enter(("broadcast", n, root), False)
        if call is None:
            return False
        got = self._take(call, ((call[0], call[1], 0, root),))
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
        call = self._enter(("gather_all", n), alone)
        if call is None:
            return False
        d8 = _u8(dst)
        me = self.me
        if not alone:
            self._send_mine(call, src)
            got = self._take(call, None)
            if got is None:
                self._hand_over(call, Args("gather_all", n, 0, _u8(src), d8, src.itemsize))
                return True
            for i, data in zip(self.others, got, strict=True):
                d8[i * n:(i + 1) * n].data[:] = data
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
        call = self._enter(("reduce_all", n, dt, op), alone)
        if call is None:
            return False
        if alone:
            _bytes(dst)[:] = _bytes(src)
            return self._end()
        self._send_mine(call, src)
        got = self._take(call, None)
        if got is None:
            self._hand_over(call, Args("reduce_all", n, 0, _u8(src), _u8(dst), dt.itemsize,
                                       op=op, dtype=dt))
            return True
        parts = [np.frombuffer(d, dt) for d in got]
        parts.insert(self.me, src.reshape(-1))
        dst.reshape(-1)[:] = fold_parts(op, parts, None)
        return self._end()

    def barrier(self) -> bool:
        if "barrier" in self.off:
            return False
        alone = not self.others
        call = self._enter(("barrier",), alone)
        if call is None:
            return False
        if alone:
            return self._end()
        self._send_mine(call, None)
        if self._take(call, None) is None:
            self._hand_over(call, Args("barrier"))
            return True
        return self._end()

    # -- the call's life --------------------------------------------------------------------
    def _enter(self, key: tuple, complete: bool) -> tuple[int, int, int, Any] | None:
        """Enter a call: its description in the history (a member's check of it is
        answered), not yet its sequence number (data for it keeps arriving into the mailbox
        as for a call not yet entered) unless ``complete`` (a call that receives nothing:
        it is complete once its messages are sent). Returns (team id, seq, digest, sig);
        None, nothing done, when the general path is to take it."""
        box = self.box
        tid = self.tid
        seq = box.next_seq.get(tid, 0)
        call = (tid, seq)
        if self.coll._runs or (box.verdicts and call in box.verdicts) or (
                box.aborts and call in box.aborts):
            return None
        self.port.forbid_send_in_handler(WHAT[key[0]])
        desc = self.descs.get(key)
        if desc is None:
            try:
                sig = signature(_args_of(key), _ALG)
            except (TypeError, ValueError):
                return None  # the general path refuses it, and says why
            if len(self.descs) > 256:
                self.descs.clear()
            desc = self.descs[key] = (tid, 0, digest(sig), sig)
        sig = desc[3]
        history = box.history
        if complete:
            late = None
            with box.lock:
                history[call] = sig
                history.pop((tid, seq - KEEP), None)
                if len(history) > box.prune_at:
                    box.prune()
                asked = box.asked and call in box.asked  # a check came before I entered
                if asked:
                    box.asked.discard(call)
                    box._answered(call)
                box.next_seq[tid] = seq + 1
                if box.digests:
                    late = box.digests.pop(call, None)
            if asked:
                box.send_sig(call, describe(sig))
            if late is not None and late != desc[2]:
                box.ask(call)  # data of another call came and is not needed: compare
        else:
            # Without the lock: only this thread changes the history (a handler reads it
            # under the lock, a key at a time), and a check that comes between this store
            # and the call's end is answered there (_take, under the lock; or the general
            # path's start).
            history[call] = sig
            history.pop((tid, seq - KEEP), None)
            if len(history) > box.prune_at:
                with box.lock:
                    box.prune()
        return (tid, seq, desc[2], sig)

    def _send_mine(self, call: tuple, data: Any) -> None:
        tid, seq, dg = call[0], call[1], call[2]
        me, send = self.me, self.send
        for rank in self.ranks:
            send(rank, (tid, seq, 0, me, 0, 1, dg, 0), data)

    def _take(self, call: tuple, keys: tuple[Key, ...] | None) -> list[bytes] | None:
        """The payloads of ``keys`` (None: one message from every other member), taken from
        the mailbox once all are in with my digest, and the call complete; None, taking
        nothing, when not."""
        tid, seq, dg, sig = call
        ready, box = self.ready, self.box
        if keys is None:
            if self.size == 2:
                keys = ((tid, seq, 0, self.others[0]),)
            else:
                keys = tuple([(tid, seq, 0, i) for i in self.others])
        if len(keys) == 1:
            k0 = keys[0]
            if k0 not in ready:
                verdicts, aborts = box.verdicts, box.aborts
                self.wait(lambda: k0 in ready or verdicts or aborts, self.timeout)
                if k0 not in ready:
                    return None
        elif not all([k in ready for k in keys]):
            verdicts, aborts = box.verdicts, box.aborts
            self.wait(lambda: all([k in ready for k in keys]) or verdicts or aborts,
                      self.timeout)
            if not all([k in ready for k in keys]):
                return None
        call = (tid, seq)
        with box.lock:
            digests = box.digests
            if digests.get(call, dg) != dg or (box.verdicts and call in box.verdicts):
                return None
            digests.pop(call, None)
            box.next_seq[tid] = seq + 1
            got = [ready.pop(k) for k in keys]
            asked = box.asked and call in box.asked  # a check came while I was in the call
            if asked:
                box.asked.discard(call)
                box._answered(call)
        if asked:
            box.send_sig(call, describe(sig))
        return got

    def _end(self) -> bool:
        """The call is complete (its result in place): raise the mismatch of an earlier
        call of the team found meanwhile, as the general path does."""
        failed = self.box.failed
        if failed:
            late = failed.pop(self.tid, None)
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
