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

from ._msg import land
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
        views = [_blk(a.dst, d_b, n)[pieces[k][0]:pieces[k][0] + pieces[k][1]]
                 for _s, _sb, d_b, k in want]
        got = yield tuple(ctx.recv_into(s, tag(s_b, d_b, k, DAT), v)
                          for (s, s_b, d_b, k), v in zip(want, views, strict=True))
        for v, data in zip(views, got, strict=True):
            land(v, data)
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
        land(a.dst, (yield ctx.recv_into((_parent(rel) + r) % P, 0, a.dst)))
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
        v = _blk(a.dst, (left - step) % P, n)
        land(v, (yield ctx.recv_into(left, step, v)))
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
            v = a.dst[theirs * n:(theirs + d) * n]
            land(v, (yield ctx.recv_into(me ^ d, step, v)))
            lo = min(lo, theirs)
            d *= 2
            step += 1
        return None
    if me >= p:
        ctx.send(me - p, 0, a.src[:n])
        data = yield ctx.recv(me - p, 1)
        a.dst.data[:] = data
        return None
    if me + p < P:
        data = yield ctx.recv(me + p, 0)
        _blk(a.dst, me + p, n).data[:] = data

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
        v = _blk(a.dst, frm, n)
        land(v, (yield ctx.recv_into(frm, k, v)))
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
        v = _blk(a.dst, partner, n)
        land(v, (yield ctx.recv_into(partner, k, v)))
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
        a.dst.data[:] = data
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


# -- direct: one round ----------------------------------------------------------------------
def direct_send(ctx: Any, a: Args) -> None:
    """The sends of ``direct``: the root's block to every other member (broadcast), my block
    to every other member (gather_all, reduce_all), an empty message to every other member
    (barrier); one message each, tag 0. :mod:`amnet.coll._fast` sends the same."""
    me = ctx.index
    if a.what == "broadcast" and me != a.root:
        return
    data = b"" if a.what == "barrier" else a.src
    for i in range(ctx.size):
        if i != me:
            ctx.send(i, 0, data)


def fold_parts(op: int, parts: list[np.ndarray], func: Callable | None) -> np.ndarray:
    """``parts[0] op parts[1] op ...`` in member order (what every member of a ``direct``
    reduce_all computes alike, bit for bit)."""
    acc = parts[0]
    for x in parts[1:]:
        acc = combine(op, acc, x, func)
    return acc


def direct_finish(ctx: Any, a: Args) -> Gen:
    """What ``direct`` does once its messages are sent: receive one message from every
    member that sends me one, and put together the result."""
    me, P, n = ctx.index, ctx.size, a.nbytes
    if a.what == "broadcast":
        if me == a.root:
            if a.dst is not a.src:
                a.dst[:] = a.src
        else:
            land(a.dst, (yield ctx.recv_into(a.root, 0, a.dst)))
        return None
    others = [i for i in range(P) if i != me]
    got = (yield tuple(ctx.recv(i, 0) for i in others)) if others else ()
    if a.what == "gather_all":
        _blk(a.dst, me, n)[:] = a.src
        for i, data in zip(others, got, strict=True):
            _blk(a.dst, i, n).data[:] = data
    elif a.what == "reduce_all":
        parts = [np.frombuffer(d, a.dtype) for d in got]
        parts.insert(me, _typed(a.src, a))
        _typed(a.dst, a)[:] = fold_parts(a.op, parts, a.func)
    return None


def direct(ctx: Any, a: Args) -> Gen:
    """One round (broadcast, gather_all, reduce_all, barrier): every block goes straight to
    every member that needs it; reduce_all folds the members' arrays in member order."""
    direct_send(ctx, a)
    yield from direct_finish(ctx, a)
    return None
