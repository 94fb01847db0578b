"""The collectives' algorithms, each a generator driven by :class:`amnet.coll._msg.Run`.

Relocalisation collectives (broadcast, scatter, gather, gather-to-all, exchange, permute) are
described as *moves*: block ``b`` of member ``s``'s source goes to block ``d`` of member
``t``'s destination. Four algorithms serve every one of them, after the UPC collectives
report ("High Performance UPC Collectives for Linux/Myrinet Platforms", §3.2):

- ``memcpy_push``: the reference implementation's push, a loop of blocking
  ``upc_memcpy`` puts: each source sends its blocks one after another, each waiting for
  its receiver's acknowledgement (the baseline of the report's 2-3x);
- ``push``: each source sends all its blocks straight to their destinations at once, with
  no waiting (the straight puts; eager, as GMTU's GM sends are);
- ``pull``: each destination asks each source for its blocks, and the source answers (the
  reference memcpy pull);
- ``naive_push`` / ``naive_pull``: the same one element at a time (``elemsize`` bytes a
  message), the report's array-assignment baselines.

The others are particular to a collective: ``tree`` (binomial: broadcast, scatter, gather,
reduce, reduce-to-all), ``ring`` and ``xor`` (recursive doubling / XOR partners: gather-to-all,
exchange, reduce-to-all), ``doubling`` (prefix reduce), ``dissemination`` (barrier) and the
node-aware ``hier`` (broadcast, gather-to-all, exchange, reduce-to-all, barrier): members
of a node work through their node's first member, the only one that sends across nodes.

Every generator takes ``(ctx, a)``: ``a`` is the call's :class:`Args` (buffers as flat uint8
views, ``nbytes`` the block size). Tags keep the messages of one call apart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from ._ops import NONCOMM_FUNC, combine

REQ, DAT = 1, 2  # pull: a request, the data
Gen = Generator[Any, Any, Any]


class Args:
    """One member's arguments of a call (views are flat uint8)."""

    __slots__ = ("dst", "dtype", "elemsize", "func", "nbytes", "op", "perm", "root", "src",
                 "what")

    def __init__(self, what: str, nbytes: int = 0, root: int = 0, src: np.ndarray | None = None,
                 dst: np.ndarray | None = None, elemsize: int = 1, perm: list[int] | None = None,
                 op: int = 0, func: Callable | None = None, dtype: np.dtype | None = None
                 ) -> None:
        self.what = what
        self.nbytes = nbytes  # bytes of a block
        self.root = root
        self.src = src
        self.dst = dst
        self.elemsize = elemsize
        self.perm = [] if perm is None else perm
        self.op = op
        self.func = func
        self.dtype = dtype


# -- moves ----------------------------------------------------------------------------------
def moves(a: Args, P: int) -> list[tuple[int, int, int, int]]:
    """``(source member, source block, destination member, destination block)`` of every
    block the collective ``a.what`` moves."""
    r = a.root
    if a.what == "broadcast":
        return [(r, 0, t, 0) for t in range(P)]
    if a.what == "scatter":
        return [(r, t, t, 0) for t in range(P)]
    if a.what == "gather":
        return [(s, 0, r, s) for s in range(P)]
    if a.what == "gather_all":
        return [(s, 0, t, s) for s in range(P) for t in range(P)]
    if a.what == "exchange":
        return [(s, t, t, s) for s in range(P) for t in range(P)]
    if a.what == "permute":
        return [(s, 0, a.perm[s], 0) for s in range(P)]
    raise ValueError(f"no moves for {a.what}")


def _blk(buf: np.ndarray, b: int, n: int) -> np.ndarray:
    return buf[b * n:(b + 1) * n]


def _pieces(n: int, e: int, naive: bool) -> list[tuple[int, int]]:
    if not naive or n == 0:
        return [(0, n)]
    return [(o, min(e, n - o)) for o in range(0, n, e)]


_PLANS: dict[tuple, tuple] = {}  # relocalisation plans by shape (few: calls repeat)


def _plan(a: Args, P: int, me: int, naive: bool) -> tuple:
    """``(out, inc, pieces)`` of a relocalisation on member ``me``: the moves it sends, the
    moves it receives, and the (offset, length) pieces of a block."""
    key = (a.what, a.root, tuple(a.perm), P, me, a.nbytes, a.elemsize if naive else 0)
    plan = _PLANS.get(key)
    if plan is None:
        mv = moves(a, P)
        plan = ([m for m in mv if m[0] == me], [m for m in mv if m[2] == me],
                _pieces(a.nbytes, a.elemsize, naive))
        if len(_PLANS) > 1024:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def relocalise(ctx: Any, a: Args, pull: bool, naive: bool, blocking: bool = False) -> Gen:
    """push, pull, naive_push, naive_pull and memcpy_push (``blocking``: each block waits
    for its receiver's acknowledgement before the next is sent, as a loop of blocking
    ``upc_memcpy`` puts does) for any relocalisation collective."""
    me, n, P = ctx.index, a.nbytes, ctx.size
    out, inc, pieces = _plan(a, P, me, naive)  # blocks I send, blocks I receive
    np_ = len(pieces)

    def tag(sb: int, db: int, k: int, base: int) -> int:
        return base + ((sb * P + db) * np_ + k) * 3

    def send_block(s_b: int, t: int, d_b: int) -> None:
        blk = a.src[s_b * n:(s_b + 1) * n]
        if t == me:
            a.dst[d_b * n:(d_b + 1) * n] = blk
            return
        if np_ == 1:
            ctx.send(t, tag(s_b, d_b, 0, DAT), blk)
            return
        for k, (o, ln) in enumerate(pieces):
            ctx.send(t, tag(s_b, d_b, k, DAT), blk[o:o + ln])

    if pull:
        for s, s_b, _t, d_b in inc:  # ask for what I need
            if s != me:
                for k in range(np_):
                    ctx.send(s, tag(s_b, d_b, k, REQ), b"")
        asks = [(s_b, t, d_b, k) for s, s_b, t, d_b in out if t != me for k in range(np_)]
        if asks:  # answer every request as it is made
            yield tuple(ctx.recv(t, tag(s_b, d_b, k, REQ)) for s_b, t, d_b, k in asks)
        for s_b, t, d_b, k in asks:
            o, ln = pieces[k]
            ctx.send(t, tag(s_b, d_b, k, DAT), _blk(a.src, s_b, n)[o:o + ln])
        for _s, s_b, t, d_b in out:
            if t == me:
                _blk(a.dst, d_b, n)[:] = _blk(a.src, s_b, n)
    elif blocking:
        for _s, s_b, t, d_b in out:
            if t == me:
                send_block(s_b, t, d_b)
                continue
            ctx.send(t, tag(s_b, d_b, 0, DAT), a.src[s_b * n:(s_b + 1) * n], ack=True)
            yield ctx.ack(t, tag(s_b, d_b, 0, DAT))
    else:
        for _s, s_b, t, d_b in out:
            send_block(s_b, t, d_b)
    want = [(s, s_b, d_b, k) for s, s_b, t, d_b in inc if s != me for k in range(np_)]
    if want:
        got = yield tuple(ctx.recv(s, tag(s_b, d_b, k, DAT)) for s, s_b, d_b, k in want)
        for (_s, _sb, d_b, k), data in zip(want, got, strict=True):
            o, ln = pieces[k]
            _blk(a.dst, d_b, n)[o:o + ln] = np.frombuffer(data, np.uint8)
    return None


# -- trees ----------------------------------------------------------------------------------
def _children(rel: int, P: int) -> list[int]:
    """Binomial tree on relative indices: the children of ``rel``, farthest first."""
    out = []
    mask = 1
    while mask < P:
        if rel & mask:
            break
        if rel + mask < P:
            out.append(rel + mask)
        mask <<= 1
    return out[::-1]


def _parent(rel: int) -> int:
    return rel & (rel - 1) if rel else -1  # clear the lowest set bit


def bcast_tree(ctx: Any, a: Args) -> Gen:
    me, P, r = ctx.index, ctx.size, a.root
    rel = (me - r) % P
    if rel == 0:
        if a.dst is not a.src:
            a.dst[:] = a.src
    else:
        data = yield ctx.recv((_parent(rel) + r) % P, 0)
        a.dst[:] = np.frombuffer(data, np.uint8)
    for c in _children(rel, P):
        ctx.send((c + r) % P, 0, a.dst)
    return None


def scatter_tree(ctx: Any, a: Args) -> Gen:
    """Binomial scatter: a subtree's blocks travel together to its root."""
    me, P, r, n = ctx.index, ctx.size, a.root, a.nbytes
    rel = (me - r) % P
    if rel == 0:  # blocks in relative order
        held = np.concatenate([_blk(a.src, (k + r) % P, n) for k in range(P)]) if P else \
            a.src[:0]
    else:
        data = yield ctx.recv((_parent(rel) + r) % P, 0)
        held = np.frombuffer(data, np.uint8)  # blocks rel .. rel + span - 1
    for c in _children(rel, P):
        span = min(_span(c, P), P - c)
        ctx.send((c + r) % P, 0, held[(c - rel) * n:(c - rel + span) * n])
    a.dst[:] = held[:n]
    return None


def _span(rel: int, P: int) -> int:
    """How many relative indices the subtree rooted at ``rel`` holds (before the cut)."""
    if rel == 0:
        return P
    return rel & -rel


def gather_tree(ctx: Any, a: Args) -> Gen:
    me, P, r, n = ctx.index, ctx.size, a.root, a.nbytes
    rel = (me - r) % P
    span = min(_span(rel, P), P - rel)
    held = np.empty(span * n, np.uint8)
    held[:n] = a.src[:n]
    kids = _children(rel, P)[::-1]  # nearest first
    if kids:
        got = yield tuple(ctx.recv((c + r) % P, 0) for c in kids)
        for c, data in zip(kids, got, strict=True):
            d = np.frombuffer(data, np.uint8)
            held[(c - rel) * n:(c - rel) * n + len(d)] = d
    if rel:
        ctx.send((_parent(rel) + r) % P, 0, held)
    else:
        for k in range(P):
            _blk(a.dst, (k + r) % P, n)[:] = held[k * n:(k + 1) * n]
    return None


# -- gather-to-all and exchange -------------------------------------------------------------
def gather_all_ring(ctx: Any, a: Args) -> Gen:
    me, P, n = ctx.index, ctx.size, a.nbytes
    _blk(a.dst, me, n)[:] = a.src[:n]
    right, left = (me + 1) % P, (me - 1) % P
    for step in range(P - 1):
        b = (me - step) % P
        ctx.send(right, step, _blk(a.dst, b, n))
        data = yield ctx.recv(left, step)
        _blk(a.dst, (left - step) % P, n)[:] = np.frombuffer(data, np.uint8)
    return None


def _pow2_below(P: int) -> int:
    p = 1
    while p * 2 <= P:
        p *= 2
    return p


def gather_all_xor(ctx: Any, a: Args) -> Gen:
    """Recursive doubling (XOR partners) over the largest power of two p <= P; members p..P-1
    first hand their block to member (i - p) and get the whole result back at the end."""
    me, P, n = ctx.index, ctx.size, a.nbytes
    p = _pow2_below(P)
    _blk(a.dst, me, n)[:] = a.src[:n]
    if p == P:  # no folded members: every group is a run of consecutive blocks
        lo, d, step = me, 1, 2
        while d < P:
            ctx.send(me ^ d, step, a.dst[lo * n:(lo + d) * n])
            theirs = lo ^ d
            data = yield ctx.recv(me ^ d, step)
            a.dst[theirs * n:(theirs + d) * n] = np.frombuffer(data, np.uint8)
            lo = min(lo, theirs)
            d *= 2
            step += 1
        return None
    if me >= p:
        ctx.send(me - p, 0, a.src[:n])
        data = yield ctx.recv(me - p, 1)
        a.dst[:] = np.frombuffer(data, np.uint8)
        return None
    if me + p < P:
        data = yield ctx.recv(me + p, 0)
        _blk(a.dst, me + p, n)[:] = np.frombuffer(data, np.uint8)

    def blocks(group: list[int]) -> list[int]:  # members' blocks with the folded ones
        return sorted(group + [q + p for q in group if q + p < P])

    group = [me]
    d, step = 1, 2
    while d < p:
        partner = me ^ d
        ctx.send(partner, step, np.concatenate([_blk(a.dst, b, n) for b in blocks(group)]))
        theirs = [q ^ d for q in group]
        data = yield ctx.recv(partner, step)
        got = np.frombuffer(data, np.uint8)
        for k, b in enumerate(blocks(theirs)):
            _blk(a.dst, b, n)[:] = got[k * n:(k + 1) * n]
        group = sorted(group + theirs)
        d *= 2
        step += 1
    if me + p < P:
        ctx.send(me + p, 1, a.dst)
    return None


def exchange_ring(ctx: Any, a: Args) -> Gen:
    """Pairwise exchange: at step k, send my block for me+k, receive from me-k."""
    me, P, n = ctx.index, ctx.size, a.nbytes
    _blk(a.dst, me, n)[:] = _blk(a.src, me, n)
    for k in range(1, P):
        to, frm = (me + k) % P, (me - k) % P
        ctx.send(to, k, _blk(a.src, to, n))
        data = yield ctx.recv(frm, k)
        _blk(a.dst, frm, n)[:] = np.frombuffer(data, np.uint8)
    return None


def exchange_xor(ctx: Any, a: Args) -> Gen:
    """Pairwise exchange with XOR partners (me ^ k for k below the next power of two,
    skipping partners outside the team): every step pairs members both ways."""
    me, P, n = ctx.index, ctx.size, a.nbytes
    _blk(a.dst, me, n)[:] = _blk(a.src, me, n)
    q = 1
    while q < P:
        q *= 2
    for k in range(1, q):
        partner = me ^ k
        if partner >= P:
            continue
        ctx.send(partner, k, _blk(a.src, partner, n))
        data = yield ctx.recv(partner, k)
        _blk(a.dst, partner, n)[:] = np.frombuffer(data, np.uint8)
    return None


# -- reductions -----------------------------------------------------------------------------
def _typed(buf: np.ndarray, a: Args) -> np.ndarray:
    return buf.view(a.dtype)


def reduce_push(ctx: Any, a: Args) -> Gen:
    """Every member sends its array to the root, which combines them in member order."""
    me, P, r = ctx.index, ctx.size, a.root
    if me != r:
        ctx.send(r, 0, a.src)
        return None
    others = [i for i in range(P) if i != r]
    got = (yield tuple(ctx.recv(i, 0) for i in others)) if others else ()
    parts = dict(zip(others, got, strict=True))
    acc = None
    for i in range(P):
        x = _typed(a.src, a) if i == r else np.frombuffer(parts[i], a.dtype)
        acc = x.copy() if acc is None else combine(a.op, acc, x, a.func)
    _typed(a.dst, a)[:] = acc
    return None


def _reduce_to_zero(ctx: Any, a: Args) -> Gen:
    """Binomial reduction to member 0 in member order (NONCOMM_FUNC-safe): returns the
    result at member 0, None elsewhere."""
    me, P = ctx.index, ctx.size
    acc = _typed(a.src, a).copy()
    kids = _children(me, P)[::-1]  # nearest first: they hold the next indices in order
    for c in kids:
        data = yield ctx.recv(c, 100)
        acc = combine(a.op, acc, np.frombuffer(data, a.dtype), a.func)
    if me:
        ctx.send(_parent(me), 100, acc)
        return None
    return acc


def reduce_tree(ctx: Any, a: Args) -> Gen:
    acc = yield from _reduce_to_zero(ctx, a)
    me, r = ctx.index, a.root
    if r != 0:
        if me == 0:
            ctx.send(r, 101, acc)
        elif me == r:
            data = yield ctx.recv(0, 101)
            acc = np.frombuffer(data, a.dtype)
    if me == r:
        _typed(a.dst, a)[:] = acc
    return None


def reduce_all_tree(ctx: Any, a: Args) -> Gen:
    """Binomial reduction to member 0, then a binomial broadcast."""
    acc = yield from _reduce_to_zero(ctx, a)
    if ctx.index == 0:
        _typed(a.dst, a)[:] = acc
    b = Args("broadcast", a.nbytes, 0, a.dst, a.dst)
    yield from bcast_tree(ctx, b)
    return None


def reduce_all_xor(ctx: Any, a: Args) -> Gen:
    """Recursive doubling over the largest power of two p <= P (members p..P-1 fold into
    member i - p first and get the result back). Order-preserving only when P is a power
    of two; NONCOMM_FUNC on other sizes takes the tree."""
    me, P = ctx.index, ctx.size
    if a.op == NONCOMM_FUNC and P & (P - 1):
        yield from reduce_all_tree(ctx, a)
        return None
    p = _pow2_below(P)
    acc = _typed(a.src, a).copy()
    if me >= p:
        ctx.send(me - p, 0, acc)
        data = yield ctx.recv(me - p, 1)
        _typed(a.dst, a)[:] = np.frombuffer(data, a.dtype)
        return None
    if me + p < P:
        data = yield ctx.recv(me + p, 0)
        acc = combine(a.op, acc, np.frombuffer(data, a.dtype), a.func)
    d, step = 1, 2
    while d < p:
        partner = me ^ d
        ctx.send(partner, step, acc)
        data = yield ctx.recv(partner, step)
        other = np.frombuffer(data, a.dtype)
        acc = combine(a.op, other, acc, a.func) if partner < me else combine(
            a.op, acc, other, a.func)
        d *= 2
        step += 1
    _typed(a.dst, a)[:] = acc
    if me + p < P:
        ctx.send(me + p, 1, acc)
    return None


def prefix_linear(ctx: Any, a: Args) -> Gen:
    """A chain: member i combines member i-1's prefix with its own and passes it on."""
    me, P = ctx.index, ctx.size
    acc = _typed(a.src, a).copy()
    if me:
        data = yield ctx.recv(me - 1, 0)
        acc = combine(a.op, np.frombuffer(data, a.dtype), acc, a.func)
    if me + 1 < P:
        ctx.send(me + 1, 0, acc)
    _typed(a.dst, a)[:] = acc
    return None


def prefix_doubling(ctx: Any, a: Args) -> Gen:
    """Hillis-Steele: at distance d = 1, 2, 4, ... send my partial prefix to me + d and
    combine the one from me - d in front of mine (member order kept)."""
    me, P = ctx.index, ctx.size
    acc = _typed(a.src, a).copy()
    d, step = 1, 0
    while d < P:
        if me + d < P:
            ctx.send(me + d, step, acc)
        if me - d >= 0:
            data = yield ctx.recv(me - d, step)
            acc = combine(a.op, np.frombuffer(data, a.dtype), acc, a.func)
        d *= 2
        step += 1
    _typed(a.dst, a)[:] = acc
    return None


def barrier_dissemination(ctx: Any, a: Args) -> Gen:
    me, P = ctx.index, ctx.size
    d, step = 1, 0
    while d < P:
        ctx.send((me + d) % P, step, b"")
        yield ctx.recv((me - d) % P, step)
        d *= 2
        step += 1
    return None


# -- node-aware -----------------------------------------------------------------------------
def _leader_team(ctx: Any) -> tuple[list[int], list[int], int]:
    """(the node's members, the leaders of every node in member order, my node's number in
    that order), by team index."""
    nodes = ctx.team.nodes  # team index -> node number
    mine = [i for i in range(ctx.size) if nodes[i] == nodes[ctx.index]]
    leaders: list[int] = []
    seen: set[int] = set()
    for i in range(ctx.size):
        if nodes[i] not in seen:
            seen.add(nodes[i])
            leaders.append(i)
    return mine, leaders, leaders.index(mine[0])


class _Sub:
    """A view of ``ctx`` restricted to some members (indices into the team), with a tag
    offset so its messages stay apart from the caller's."""

    __slots__ = ("index", "members", "off", "parent", "size", "team")

    def __init__(self, ctx: Any, members: list[int], off: int) -> None:
        self.parent = ctx
        self.members = members
        self.index = members.index(ctx.index)
        self.size = len(members)
        self.off = off
        self.team = ctx.team

    def send(self, index: int, tag: int, data: Any) -> None:
        self.parent.send(self.members[index], self.off + tag, data)

    def recv(self, index: int, tag: int) -> Any:
        return self.parent.recv(self.members[index], self.off + tag)


def bcast_hier(ctx: Any, a: Args) -> Gen:
    """Binomial tree among the node leaders (the root's node led by the root), then each
    leader sends to the members of its node."""
    mine, leaders, _ = _leader_team(ctx)
    nodes = ctx.team.nodes
    rnode = nodes[a.root]
    leaders = [a.root if nodes[i] == rnode else i for i in leaders]
    mine = [a.root] + [i for i in mine if i != a.root] if nodes[ctx.index] == rnode else mine
    lead = leaders[[nodes[i] for i in leaders].index(nodes[ctx.index])]
    if ctx.index == lead:
        sub = _Sub(ctx, leaders, 1000)
        yield from bcast_tree(sub, Args("broadcast", a.nbytes, sub.members.index(a.root),
                                        a.src if ctx.index == a.root else a.dst, a.dst))
        for i in mine:
            if i != lead:
                ctx.send(i, 2000, a.dst)
    else:
        data = yield ctx.recv(lead, 2000)
        a.dst[:] = np.frombuffer(data, np.uint8)
    return None


def reduce_all_hier(ctx: Any, a: Args) -> Gen:
    """Members of a node send to their leader, which combines in member order; the leaders
    reduce-to-all among themselves (recursive doubling); each leader sends the result to its
    node. NONCOMM_FUNC takes the tree (node order need not be member order)."""
    if a.op == NONCOMM_FUNC:
        yield from reduce_all_tree(ctx, a)
        return None
    mine, leaders, _ = _leader_team(ctx)
    lead = mine[0]
    if ctx.index != lead:
        ctx.send(lead, 3000, a.src)
        data = yield ctx.recv(lead, 3001)
        _typed(a.dst, a)[:] = np.frombuffer(data, a.dtype)
        return None
    acc = _typed(a.src, a).copy()
    others = mine[1:]
    if others:
        got = yield tuple(ctx.recv(i, 3000) for i in others)
        for data in got:
            acc = combine(a.op, acc, np.frombuffer(data, a.dtype), a.func)
    sub = _Sub(ctx, leaders, 4000)
    tmp = acc.view(np.uint8).reshape(-1).copy()
    out = np.empty_like(tmp)
    yield from reduce_all_xor(sub, Args("reduce_all", a.nbytes, 0, tmp, out, op=a.op,
                                        func=a.func, dtype=a.dtype))
    a.dst[:] = out
    for i in others:
        ctx.send(i, 3001, out)
    return None


def _nodes_of(ctx: Any, leaders: list[int]) -> dict[int, list[int]]:
    """Each leader's node members, in member order."""
    nodes = ctx.team.nodes
    return {L: [i for i in range(ctx.size) if nodes[i] == nodes[L]] for L in leaders}


def gather_all_hier(ctx: Any, a: Args) -> Gen:
    """Members send their block to their node's leader; each leader sends its node's blocks,
    packed, to every other leader; each leader sends the whole result to its node."""
    mine, leaders, _ = _leader_team(ctx)
    lead, n = mine[0], a.nbytes
    if ctx.index != lead:
        ctx.send(lead, 7000, a.src)
        data = yield ctx.recv(lead, 7001)
        a.dst[:] = np.frombuffer(data, np.uint8)
        return None
    a.dst[lead * n:(lead + 1) * n] = a.src
    if len(mine) > 1:
        got = yield tuple(ctx.recv(i, 7000) for i in mine[1:])
        for i, data in zip(mine[1:], got, strict=True):
            a.dst[i * n:(i + 1) * n] = np.frombuffer(data, np.uint8)
    others = [L for L in leaders if L != lead]
    if others:
        pack = np.concatenate([a.dst[i * n:(i + 1) * n] for i in mine])
        for L in others:
            ctx.send(L, 8000, pack)
        node = _nodes_of(ctx, others)
        got = yield tuple(ctx.recv(L, 8000) for L in others)
        for L, data in zip(others, got, strict=True):
            d = np.frombuffer(data, np.uint8)
            for k, i in enumerate(node[L]):
                a.dst[i * n:(i + 1) * n] = d[k * n:(k + 1) * n]
    for i in mine[1:]:
        ctx.send(i, 7001, a.dst)
    return None


def exchange_hier(ctx: Any, a: Args) -> Gen:
    """Members send their whole source to their node's leader; each leader sends every
    other leader, packed in one message, the blocks its node's members have for that
    node's members, and hands each member of its own node its assembled destination."""
    mine, leaders, _ = _leader_team(ctx)
    lead, n, P = mine[0], a.nbytes, ctx.size
    if ctx.index != lead:
        ctx.send(lead, 7000, a.src)
        data = yield ctx.recv(lead, 7001)
        a.dst[:] = np.frombuffer(data, np.uint8)
        return None
    srcs = {lead: a.src}
    if len(mine) > 1:
        got = yield tuple(ctx.recv(i, 7000) for i in mine[1:])
        for i, data in zip(mine[1:], got, strict=True):
            srcs[i] = np.frombuffer(data, np.uint8)
    others = [L for L in leaders if L != lead]
    node = _nodes_of(ctx, others)
    for L in others:  # source-major: for s in my node, for t in L's node
        ctx.send(L, 8000, np.concatenate([srcs[s][t * n:(t + 1) * n] for s in mine
                                          for t in node[L]]))
    out = {t: (a.dst if t == lead else np.empty(P * n, np.uint8)) for t in mine}
    for s in mine:
        for t in mine:
            out[t][s * n:(s + 1) * n] = srcs[s][t * n:(t + 1) * n]
    if others:
        got = yield tuple(ctx.recv(L, 8000) for L in others)
        for L, data in zip(others, got, strict=True):
            d = np.frombuffer(data, np.uint8)
            k = 0
            for s in node[L]:
                for t in mine:
                    out[t][s * n:(s + 1) * n] = d[k * n:(k + 1) * n]
                    k += 1
    for t in mine[1:]:
        ctx.send(t, 7001, out[t])
    return None


def barrier_hier(ctx: Any, a: Args) -> Gen:
    """Members tell their leader, leaders run a dissemination barrier, leaders release."""
    mine, leaders, _ = _leader_team(ctx)
    lead = mine[0]
    if ctx.index != lead:
        ctx.send(lead, 5000, b"")
        yield ctx.recv(lead, 5001)
        return None
    if len(mine) > 1:
        yield tuple(ctx.recv(i, 5000) for i in mine[1:])
    yield from barrier_dissemination(_Sub(ctx, leaders, 6000), a)
    for i in mine[1:]:
        ctx.send(i, 5001, b"")
    return None


def _reloc(pull: bool, naive: bool, blocking: bool = False) -> Callable[[Any, Args], Gen]:
    def run(ctx: Any, a: Args) -> Gen:
        return relocalise(ctx, a, pull, naive, blocking)

    return run


_RELOC = {"push": _reloc(False, False), "memcpy_push": _reloc(False, False, True),
          "pull": _reloc(True, False), "naive_push": _reloc(False, True),
          "naive_pull": _reloc(True, True)}

#: collective -> {algorithm name: generator function}; the first is the fallback default.
ALGORITHMS: dict[str, dict[str, Callable[[Any, Args], Gen]]] = {
    "broadcast": {"tree": bcast_tree, **_RELOC, "hier": bcast_hier},
    "scatter": {"push": _RELOC["push"], "tree": scatter_tree, **_RELOC},
    "gather": {"push": _RELOC["push"], "tree": gather_tree, **_RELOC},
    "gather_all": {"ring": gather_all_ring, "xor": gather_all_xor, **_RELOC,
                   "hier": gather_all_hier},
    "exchange": {"xor": exchange_xor, "ring": exchange_ring, **_RELOC, "hier": exchange_hier},
    "permute": dict(_RELOC),
    "reduce": {"tree": reduce_tree, "push": reduce_push},
    "reduce_all": {"xor": reduce_all_xor, "tree": reduce_all_tree, "hier": reduce_all_hier},
    "prefix_reduce": {"doubling": prefix_doubling, "linear": prefix_linear},
    "barrier": {"dissemination": barrier_dissemination, "hier": barrier_hier},
}
