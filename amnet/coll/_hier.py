"""amnet.coll's node-aware algorithms (``hier``), after the hybrid paper (Blagojević,
Hargrove, Iancu, Yelick, *Hybrid PGAS Runtime Support for Multicore Nodes*, §4.1.3): the
members of a node work through their node's first member, the leader, and only the leaders
send across nodes. Where the node's members of the team share memory (``team._local``),
the node steps -- the members' blocks up to the leader, the result down from it -- are
steps on the node area (:mod:`amnet.coll._node`: flags and copies, no message); else they
are AMs over PSHM. The leaders' step is AMs either way. ``hier_am`` is ``hier`` with its node
steps as AMs always (``shm=False``), for comparison."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._algos import (
    Args,
    Gen,
    _typed,
    barrier_dissemination,
    bcast_tree,
    reduce_all_tree,
    reduce_all_xor,
)
from ._node import node_close, node_down, node_open, node_up
from ._ops import NONCOMM_FUNC, combine


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

    def recv_into(self, index: int, tag: int, view: Any) -> Any:
        return self.parent.recv_into(self.members[index], self.off + tag, view)


def _node_steps(ctx: Any, a: Args, up: int, at_leader: Callable[[list[Any]], Gen],
                down: int, part: Callable[[int], tuple[int, int]] | None = None) -> Gen:
    """The node steps on the node area around the leaders' step, one owner for the
    algorithms that go up to the leader and down from it: every member's ``up`` bytes of
    ``a.src`` to the leader, where ``at_leader(parts)`` (the members' blocks in local order)
    takes the leaders' step and returns the ``down`` bytes to hand out; those down to every
    member's ``a.dst`` (``part(k)``, local member k's (offset, length) of them; None: all).
    The area is closed (``node_close``) however the steps end."""
    st = yield from node_open(ctx)
    ok = False
    try:
        parts = yield from node_up(st, a.src, up)
        out = (yield from at_leader(parts)) if parts is not None else None
        yield from node_down(st, 0, out, down, None if part is None else part(st.me), a.dst)
        ok = True
    finally:
        node_close(st, ok)


def _member_am(ctx: Any, a: Args, lead: int, tag: int) -> Gen:
    """A member's node steps over AMs when it is not the leader: its ``a.src`` to the
    leader (``tag``), and the result back from it (``tag + 1``) into ``a.dst``."""
    ctx.send(lead, tag, a.src)
    data = yield ctx.recv(lead, tag + 1)
    a.dst.data[:] = data


def bcast_hier(ctx: Any, a: Args, shm: bool = True) -> Gen:
    """Binomial tree among the node leaders (the root's node led by the root), then each
    leader sends to the members of its node."""
    mine, leaders, _ = _leader_team(ctx)
    nodes = ctx.team.nodes
    rnode = nodes[a.root]
    leaders = [a.root if nodes[i] == rnode else i for i in leaders]
    lead = leaders[[nodes[i] for i in leaders].index(nodes[ctx.index])]
    if shm and ctx.team._local is not None:  # the node step on the node area
        st = yield from node_open(ctx)
        ok = False
        try:
            if ctx.index == lead:
                sub = _Sub(ctx, leaders, 1000)
                yield from bcast_tree(sub, Args("broadcast", a.nbytes, sub.members.index(
                    a.root), a.src if ctx.index == a.root else a.dst, a.dst))
            w = mine.index(lead)
            yield from node_down(st, w, a.dst if st.me == w else None, a.nbytes, None, a.dst)
            ok = True
        finally:
            node_close(st, ok)
        return None
    mine = [a.root] + [i for i in mine if i != a.root] if nodes[ctx.index] == rnode else mine
    if ctx.index == lead:
        sub = _Sub(ctx, leaders, 1000)
        yield from bcast_tree(sub, Args("broadcast", a.nbytes, sub.members.index(a.root),
                                        a.src if ctx.index == a.root else a.dst, a.dst))
        for i in mine:
            if i != lead:
                ctx.send(i, 2000, a.dst)
    else:
        data = yield ctx.recv(lead, 2000)
        a.dst.data[:] = data
    return None


def reduce_all_hier(ctx: Any, a: Args, shm: bool = True) -> Gen:
    """Members of a node send to their leader, which combines in member order; the leaders
    reduce-to-all among themselves (recursive doubling); each leader sends the result to its
    node. NONCOMM_FUNC takes the tree (node order need not be member order)."""
    if a.op == NONCOMM_FUNC:
        yield from reduce_all_tree(ctx, a)
        return None
    mine, leaders, _ = _leader_team(ctx)
    lead = mine[0]
    if shm and ctx.team._local is not None:  # the node steps on the node area
        def combined(parts: list[Any]) -> Gen:
            acc = _typed(a.src, a).copy()
            for data in parts[1:]:
                acc = combine(a.op, acc, data.view(a.dtype), a.func)
            return (yield from _leaders_reduce_all(ctx, a, leaders, acc))

        yield from _node_steps(ctx, a, a.nbytes, combined, a.nbytes)
        return None
    if ctx.index != lead:
        yield from _member_am(ctx, a, lead, 3000)
        return None
    acc = _typed(a.src, a).copy()
    others = mine[1:]
    if others:
        got = yield tuple(ctx.recv(i, 3000) for i in others)
        for data in got:
            acc = combine(a.op, acc, np.frombuffer(data, a.dtype), a.func)
    out = yield from _leaders_reduce_all(ctx, a, leaders, acc)
    for i in others:
        ctx.send(i, 3001, out)
    return None


def _leaders_reduce_all(ctx: Any, a: Args, leaders: list[int], acc: np.ndarray) -> Gen:
    """The leaders' step of reduce_all: their nodes' ``acc`` combined (recursive doubling)
    into ``a.dst``, which it returns."""
    sub = _Sub(ctx, leaders, 4000)
    tmp = acc.view(np.uint8).reshape(-1).copy()
    out = np.empty_like(tmp)
    yield from reduce_all_xor(sub, Args("reduce_all", a.nbytes, 0, tmp, out, op=a.op,
                                        func=a.func, dtype=a.dtype))
    a.dst[:] = out
    return a.dst


def _nodes_of(ctx: Any, leaders: list[int]) -> dict[int, list[int]]:
    """Each leader's node members, in member order."""
    nodes = ctx.team.nodes
    return {L: [i for i in range(ctx.size) if nodes[i] == nodes[L]] for L in leaders}


def gather_all_hier(ctx: Any, a: Args, shm: bool = True) -> Gen:
    """Members send their block to their node's leader; each leader sends its node's blocks,
    packed, to every other leader; each leader sends the whole result to its node."""
    mine, leaders, _ = _leader_team(ctx)
    lead, n = mine[0], a.nbytes
    if shm and ctx.team._local is not None:  # the node steps on the node area
        def gathered(parts: list[Any]) -> Gen:
            for i, data in zip(mine, parts, strict=True):
                a.dst[i * n:(i + 1) * n] = data
            yield from _leaders_gather_all(ctx, a, mine, leaders)
            return a.dst

        yield from _node_steps(ctx, a, n, gathered, n * ctx.size)
        return None
    if ctx.index != lead:
        yield from _member_am(ctx, a, lead, 7000)
        return None
    a.dst[lead * n:(lead + 1) * n] = a.src
    if len(mine) > 1:
        got = yield tuple(ctx.recv(i, 7000) for i in mine[1:])
        for i, data in zip(mine[1:], got, strict=True):
            a.dst.data[i * n:(i + 1) * n] = data
    yield from _leaders_gather_all(ctx, a, mine, leaders)
    for i in mine[1:]:
        ctx.send(i, 7001, a.dst)
    return None


def _leaders_gather_all(ctx: Any, a: Args, mine: list[int], leaders: list[int]) -> Gen:
    """The leaders' step of gather_all: my node's blocks (in ``a.dst``), packed, to every
    other leader, and theirs into ``a.dst``."""
    lead, n = mine[0], a.nbytes
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
    return None


def exchange_hier(ctx: Any, a: Args, shm: bool = True) -> Gen:
    """Members send their whole source to their node's leader; each leader sends every
    other leader, packed in one message, the blocks its node's members have for that
    node's members, and hands each member of its own node its assembled destination."""
    mine, leaders, _ = _leader_team(ctx)
    lead, n, P = mine[0], a.nbytes, ctx.size
    if shm and ctx.team._local is not None:  # the node steps on the node area
        def exchanged(parts: list[Any]) -> Gen:
            out = yield from _leaders_exchange(ctx, a, mine, leaders,
                                               dict(zip(mine, parts, strict=True)))
            return np.concatenate([out[t] for t in mine])

        # local member k's destination is part k of the node's
        yield from _node_steps(ctx, a, P * n, exchanged, len(mine) * P * n,
                               lambda k: (k * P * n, P * n))
        return None
    if ctx.index != lead:
        yield from _member_am(ctx, a, lead, 7000)
        return None
    srcs = {lead: a.src}
    if len(mine) > 1:
        got = yield tuple(ctx.recv(i, 7000) for i in mine[1:])
        for i, data in zip(mine[1:], got, strict=True):
            srcs[i] = np.frombuffer(data, np.uint8)
    out = yield from _leaders_exchange(ctx, a, mine, leaders, srcs)
    for t in mine[1:]:
        ctx.send(t, 7001, out[t])
    return None


def _leaders_exchange(ctx: Any, a: Args, mine: list[int], leaders: list[int],
                      srcs: dict[int, Any]) -> Gen:
    """The leaders' step of exchange: from my node's sources (``srcs``, by member), every
    other leader's blocks for its node packed in one message, and theirs for mine; returns
    my node's members' destinations (mine is ``a.dst``)."""
    lead, n, P = mine[0], a.nbytes, ctx.size
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
    return out


def barrier_hier(ctx: Any, a: Args, shm: bool = True) -> Gen:
    """Members tell their leader, leaders run a dissemination barrier, leaders release."""
    mine, leaders, _ = _leader_team(ctx)
    lead = mine[0]
    if shm and ctx.team._local is not None:  # the node steps on the node area
        def released(parts: list[Any]) -> Gen:  # (arrivals up, a release down: no bytes)
            yield from barrier_dissemination(_Sub(ctx, leaders, 6000), a)

        yield from _node_steps(ctx, a, 0, released, 0)
        return None
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
