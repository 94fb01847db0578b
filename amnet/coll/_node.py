"""Collectives on the node area: flags and copies in shared memory, no messages.

When every member of a team can address every other member's memory (one node with PSHM
on, or the rank-threads of one process), each member owns a slot of the node area
(``port.node_area(rank)``, a slot per team): a header of flags that only it writes
(:mod:`amnet.coll._shm`'s Area publishes and reads them) and a data area of
``COLL_DATA`` bytes. The collectives become copies in and out of the data areas:

- a member that contributes data waits until every other member has finished reading its
  previous data (their DONE has reached its DSTEP), copies its block(s) in and publishes
  the step (PSTEP, PDIG, DSTEP under a sequence lock);
- a member that needs data waits until its writers' DSTEP is the step, checking the digest
  of their call against its own, and copies out (or combines, for the reductions: in member
  order, so that every member of a reduce-to-all computes the same bits);
- then it says it is done with the step (DONE).

A block larger than the data area's share goes in rounds, one step each. A member's calls
on the area run one at a time (a call in flight waits for the one before to end), so its
steps only grow. The barrier is the
flags alone: every member publishes its step and waits until every other one has. Waits
are the engine's (``port.wait_until`` on a condition the C Area evaluates: the spin-then-
block policy of the job, the member's AMs served meanwhile), and every publication wakes the
members that sleep (``port.node_waker``: their process's doorbell, or a nudge of this
process's drainer).

Agreement: a member that finds another in a different call (another digest at the step, or
a step without the data it expects) asks for the check as the AM algorithms do (the
members compare descriptions at the team's first member and raise the verdict); one whose
writers never come has made no progress for ``coll_check`` seconds and asks too. Whatever
way a call ends (completed, mismatched, failed), its member marks every step of it done,
so nobody waits on it after.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..pshm import COLL_DATA, COLL_HDR, COLL_SLOT
from ._algos import Args, Gen
from ._ops import UFUNC, combine
from ._shm import HDR, ROUND_BITS, Area

ARRIVED, DATA_IN, DRAINED = 0, 1, 2  # what a wait's condition looks for (Area.cond)
WAKE_ALL, WAKE_NONE = -1, -2  # whom a publication wakes (Area.publish; j >= 0: member j)
_NEVER = -(1 << 40)  # a tag no message has: a mismatched call waits for its verdict on it
if HDR > COLL_HDR:  # the C header's words must fit the layout's header
    raise ImportError(f"amnet.coll._shm's header ({HDR} bytes) exceeds COLL_HDR ({COLL_HDR})")


def usable(port: Any, members: list[int]) -> bool:
    """Whether a team of these world ranks can use the node area: every member's area is
    addressable here (the same answer on every member: it follows from the job's shape and
    the PSHM option) and a block share of the data area holds a cache line at least."""
    if len(members) * 64 > COLL_DATA:
        return False
    return all(port.node_area(r) is not None for r in members)


class NodeArea:
    """A team's node area as one member sees it: the C Area over every member's slot, and
    numpy views of their data areas."""

    __slots__ = ("area", "data", "later", "members", "slot")

    def __init__(self, port: Any, members: list[int], me: int, slot: int) -> None:
        off = slot * COLL_SLOT
        slots = [port.node_area(r)[off:off + COLL_SLOT] for r in members]
        others = [r for i, r in enumerate(members) if i != me]
        wakers = tuple(None if i == me else port.node_waker([r]) for i, r in enumerate(members))
        # ranks that outnumber their cores (the engine blocks at once) yield without spinning
        self.area = Area(slots, me, port.node_waker(others) if others else None, COLL_HDR,
                         wakers, spin=port.endpoint.wait_mode != "block")
        self.data = [s[COLL_HDR:] for s in slots]
        self.slot = slot
        self.members = members
        # the end of a call closed before its turn, by the end of the call it waited for
        self.later: dict[int, int] = {}

    def turn(self, prev: int, end: int, me: int) -> Gen:
        """Wait until my call before this one (ending at ``prev``) has ended. Closed before
        that (a failed call in flight), this call's end is marked only once that one's is:
        marking it now would let the next call, and the members writing for the earlier
        one, run ahead of it."""
        c = self.area.cond(DRAINED, prev, 0, (me,))
        if c():
            return
        try:
            yield c
        except GeneratorExit:
            if c():
                self.finish(end)
            else:
                self.later[prev] = end
            raise

    def finish(self, end: int) -> None:
        """DONE = ``end``, and then the ends of the calls closed while they waited for it."""
        A = self.area
        A.finish(end)
        while self.later and end in self.later:
            end = self.later.pop(end)
            A.finish(end)


def _chunk(n: int, blocks: int) -> int:
    """Bytes of each of ``blocks`` blocks a round carries (a multiple of 64, so any dtype's
    elements stay whole)."""
    return max(64, (COLL_DATA // blocks) // 64 * 64)


def shm(ctx: Any, a: Args) -> Gen:
    """Any collective the table gives ``shm`` (amnet.coll._table) on the team's node area
    (see the module)."""
    na: NodeArea = ctx.team._shm
    A = na.area
    me, P, n, w, r = ctx.index, ctx.size, a.nbytes, a.what, a.root
    dig = ctx.digest
    base = ctx.seq << ROUND_BITS
    others = [i for i in range(P) if i != me]
    # my calls on the area go one at a time, in the order they were made: each waits for
    # the end of the one made before it (taken as the call starts, before any wait)
    end = base + (1 << ROUND_BITS)
    prev, A.end = A.end, end
    if prev:
        yield from na.turn(prev, end, me)
    try:
        A.enter(ctx.seq, dig)
        if w == "barrier":
            A.publish(base + 1, dig, False)
            c = A.cond(ARRIVED, base + 1, dig, others)
            if not c():
                yield c
            if c.bad >= 0:
                yield from _mismatch(ctx)
            _agree(ctx, A)
            return None
        # who writes, how many blocks each, who reads whom
        many = w in ("scatter", "exchange")
        wblocks = P if many else 1
        if w in ("broadcast", "scatter"):
            writers = [r]
        elif w in ("gather", "reduce"):
            writers = [i for i in range(P) if i != r]
        else:
            writers = list(range(P))
        readers_need = w in ("gather_all", "exchange", "reduce_all") or (
            me != r if w in ("broadcast", "scatter") else me == r)
        i_write = me in writers
        src_of = [i for i in writers if i != me] if readers_need else []
        cb = _chunk(n, wblocks)
        rounds = -(-n // cb)
        # whom my publication may wake: the readers of my data (nobody waits for a member
        # that writes nothing; a mismatch is found by the check's timeout then)
        wakes = (WAKE_NONE if not i_write else WAKE_ALL if w in ("broadcast", "scatter")
                 or readers_need or w in ("gather_all", "exchange", "reduce_all") else r)
        for k in range(rounds):
            v = base + k + 1
            lo = k * cb
            ln = min(cb, n - lo)
            if i_write and A.last != v:  # (a fast path that handed over may have written it)
                if A.last:
                    c = A.cond(DRAINED, A.last, 0, others)
                    if not c():
                        yield c
                mine = na.data[me]
                if many:
                    for b in range(P):
                        mine[b * ln:(b + 1) * ln] = a.src[b * n + lo:b * n + lo + ln]
                else:
                    mine[:ln] = a.src[lo:lo + ln]
                A.last = v
            A.publish(v, dig, i_write, wakes)
            if src_of:
                c = A.cond(DATA_IN, v, dig, src_of)
                if not c():
                    yield c
                if c.bad >= 0:
                    yield from _mismatch(ctx)
            _take(na, a, w, me, P, n, r, lo, ln, src_of)
            if k + 1 < rounds:
                A.finish(v)
        _agree(ctx, A)
        return None
    finally:
        na.finish(end)  # every step of this call, however it ended


def _take(na: NodeArea, a: Args, w: str, me: int, P: int, n: int, r: int, lo: int, ln: int,
          src_of: list[int]) -> None:
    """Round ``lo``..``lo + ln`` of every block: what this member copies out or combines."""
    data = na.data
    if w == "broadcast":
        if me == r:
            if a.dst is not a.src:
                a.dst[lo:lo + ln] = a.src[lo:lo + ln]
        else:
            a.dst[lo:lo + ln] = data[r][:ln]
    elif w == "scatter":
        a.dst[lo:lo + ln] = (a.src[me * n + lo:me * n + lo + ln] if me == r
                             else data[r][me * ln:(me + 1) * ln])
    elif w in ("gather", "gather_all"):
        if w == "gather_all" or me == r:
            for i in range(P):
                a.dst[i * n + lo:i * n + lo + ln] = (a.src[lo:lo + ln] if i == me
                                                     else data[i][:ln])
    elif w == "exchange":
        for i in range(P):
            a.dst[i * n + lo:i * n + lo + ln] = (a.src[me * n + lo:me * n + lo + ln] if i == me
                                                 else data[i][me * ln:(me + 1) * ln])
    elif w == "reduce_all" or me == r:  # reduce, reduce_all: member order, the same bits
        dt = a.dtype
        parts = [a.src[lo:lo + ln].view(dt) if i == me else data[i][:ln].view(dt)
                 for i in range(P)]
        out = a.dst[lo:lo + ln].view(dt)
        if P == 1:
            out[:] = parts[0]
        elif P == 2 and a.op in UFUNC:
            UFUNC[a.op](parts[0], parts[1], out=out)
        else:
            acc = parts[0]
            for x in parts[1:]:
                acc = combine(a.op, acc, x, a.func)
            out[:] = acc


def _agree(ctx: Any, A: Area) -> None:
    """The call is complete here: when another member entered it with another digest (a
    mismatch that changed nothing this member read), ask for the check, whose verdict this
    member raises at the end of its next call on the team."""
    if A.agree(ctx.seq, ctx.digest) >= 0:
        ctx.check()


# -- the node steps of hier (amnet.coll._hier): a call's steps on the node's members' area --
class Steps:
    """One call's node steps on the team's node-local area (``team._local``): local index
    ``me`` of ``P`` (the node's members of the team, in team order)."""

    __slots__ = ("A", "P", "base", "ctx", "data", "k", "me", "na", "others")

    def __init__(self, ctx: Any, na: NodeArea) -> None:
        self.ctx = ctx
        self.na = na
        self.A = na.area
        self.data = na.data
        self.P = len(na.members)
        self.me = na.members.index(ctx.rank)
        self.others = [i for i in range(self.P) if i != self.me]
        self.base = ctx.seq << ROUND_BITS
        self.k = 0  # steps taken

    def step(self, write: Any, wait_for: list[int], data: bool, wake: int) -> Gen:
        """One step: my block ``write`` into my data area (None: nothing), published (waking
        ``wake``: a member, WAKE_ALL or WAKE_NONE); then wait until the members ``wait_for``
        have published theirs (``data``: their data, else their arrival). Returns the
        step."""
        A, ctx = self.A, self.ctx
        self.k += 1
        v = self.base + self.k
        if write is not None:
            if A.last:
                c = A.cond(DRAINED, A.last, 0, self.others)
                if not c():
                    yield c
            self.data[self.me][:len(write)] = write
            A.last = v
        A.publish(v, ctx.digest, write is not None, wake)
        if wait_for:
            c = A.cond(DATA_IN if data else ARRIVED, v, ctx.digest, wait_for)
            if not c():
                yield c
            if c.bad >= 0:
                yield from _mismatch(ctx)
        return v


def node_open(ctx: Any) -> Gen:
    """Begin a call's node steps: returns its Steps (my earlier call on the area ended;
    this one in the ring). ``node_close`` ends it, however the call ends."""
    na: NodeArea = ctx.team._local
    A = na.area
    st = Steps(ctx, na)
    end = st.base + (1 << ROUND_BITS)
    prev, A.end = A.end, end  # (as shm: the order of the calls)
    if prev:
        yield from na.turn(prev, end, st.me)
    A.enter(ctx.seq, ctx.digest)
    return st


def node_close(st: Steps, completed: bool) -> None:
    """End the call's node steps (``completed``: compare the ring, as shm's calls do)."""
    st.na.finish(st.base + (1 << ROUND_BITS))
    if completed:
        _agree(st.ctx, st.A)


def node_up(st: Steps, src: Any, n: int) -> Gen:
    """Every member's ``n`` bytes (``src``, uint8) to local member 0: returns there the
    members' blocks in local order (mine the ``src`` itself), elsewhere None. ``n`` 0: an
    arrival only."""
    lead = st.me == 0
    out = [src] + [np.empty(n, np.uint8) for _ in st.others] if lead else None
    for lo in range(0, max(n, 1), COLL_DATA):
        ln = min(COLL_DATA, n - lo)
        if lead:
            v = yield from st.step(None, st.others, n > 0, WAKE_NONE)
            for j in st.others:
                out[j][lo:lo + ln] = st.data[j][:ln]
        else:
            v = yield from st.step(src[lo:lo + ln] if n else None, [], False, 0)
        st.A.finish(v)
    return out


def node_down(st: Steps, w: int, data: Any, m: int, part: tuple[int, int] | None,
              dst: Any) -> Gen:
    """Local member ``w``'s ``m`` bytes (``data``, uint8, there) to every other member of
    the node: bytes ``part`` = (offset, length) of them (None: all) into ``dst``. ``m`` 0: a
    release only."""
    off, size = (0, m) if part is None else part
    for lo in range(0, max(m, 1), COLL_DATA):
        ln = min(COLL_DATA, m - lo)
        if st.me == w:
            v = yield from st.step(data[lo:lo + ln] if m else None, [], False, WAKE_ALL)
        else:
            v = yield from st.step(None, [w], m > 0, WAKE_NONE)
            a, b = max(lo, off), min(lo + ln, off + size)
            if a < b:
                dst[a - off:b - off] = st.data[w][a - lo:b - lo]
        st.A.finish(v)


def _mismatch(ctx: Any) -> Gen:
    """Another member is in another call: ask for the check, and wait for its verdict
    (which the run raises)."""
    ctx.check()
    yield ctx.recv(ctx.index, _NEVER)


__all__ = ["NodeArea", "Steps", "node_close", "node_down", "node_open",
           "node_up", "shm", "usable"]
