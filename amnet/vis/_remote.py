"""VIS between nodes: the stream cut into chunks of system AMs, pipelined.

A transfer's remote side travels as a descriptor (int64 words) at the head of each request's
payload:

========  =====================================================================
kind 1    strided: ``[nwords, 1, origin, elemsz, ndim, a, b, counts.., strides..]``;
          the request covers bytes ``[a, b)`` of the region's stream (O(levels) words)
kind 2    pieces: ``[nwords, 2, n, offsets.., lengths..]``
kind 3    pieces of one length: ``[nwords, 3, n, length, offsets..]``
========  =====================================================================

With ``P = AMNET_VIS_PIPELINE`` (default 4) and ``M = max_medium``:

- A put chunk is ``VIS_PUT(opid)`` with the descriptor, then the data (at most ``M`` bytes
  in all); the target unpacks it into its segment and replies ``VIS_ACK(opid)``. ``2P``
  chunks go out at once, then ``P`` more each time ``P`` were acknowledged.
- A get request is ``VIS_GET(opid, room, at)`` with the descriptor of up to ``P * M``
  bytes; the target packs them and replies, back to back, one ``VIS_DATA(opid, pos)`` per
  ``room`` (<= ``M``) bytes, which the initiator unpacks at byte ``pos`` of its local side.
  Two requests are in flight, so the target always has the next ``P`` chunks to send; each
  fully received request lets the next one go.

So at most ``2P`` chunks of a transfer are in flight. The operation completes with its last
reply. Replies arrive in order (FIFO per pair of ranks), which the get side relies on: a
transfer's requests are sent under its own lock, in order, whether the caller or a thread
draining replies sends them.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import numpy as np

from .. import Op
from ._layout import U8, Pieces, Views, extent, strided_view

VIS_PUT, VIS_GET, VIS_ACK, VIS_DATA = range(4)  # offsets from the extension's base index
STRIDED, PIECES, EQUAL = 1, 2, 3


class VisOp(Op):
    """One VIS transfer between nodes.

    A put's ``reqs`` are its chunks, a get's its stage requests; ``nxt`` is the next one
    to send. A put counts acknowledged chunks in ``done_n``, a get received bytes (replies
    arrive in order: FIFO per pair of ranks) against each stage's end, ``ends``.
    """

    __slots__ = ("depth", "done_n", "ends", "hidx", "local", "nxt", "opid", "reqs",
                 "sending", "stage", "total")

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)  # then Port.op sets hidx, reqs, local, ends, total, depth
        self.reqs: list = []  # [(args, payload)], each dropped once sent
        self.local: Any = None  # a get's local side, written by the replies
        self.ends: list[int] = []  # a get: stream end of each stage
        self.nxt = 0
        self.done_n = 0  # put: chunks acknowledged; get: bytes received
        self.stage = 0  # get: stages fully received
        self.opid = 0
        # held while requests are claimed and sent, so they leave in order whichever thread
        # sends them (a get's replies must arrive in order)
        self.sending = threading.Lock()


# -- planning (initiator) -------------------------------------------------------------------
def strided_meta(region: Any) -> np.ndarray:
    """The descriptor of a strided remote side (its range words, 5 and 6, left 0)."""
    nd = len(region.counts)
    return np.array([7 + 2 * nd, STRIDED, region.origin, region.elemsz, nd, 0, 0,
                     *region.counts, *region.strides], dtype=np.int64)


def chunk_room(elemsz: int, room: int) -> int:
    """Bytes per chunk: ``room``, down to whole elements when an element fits (fewer,
    larger copies at both ends)."""
    room = max(1, room)
    return room - room % elemsz if elemsz <= room else room


def pieces_meta(offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
    if lens.min() == lens.max():
        meta = np.concatenate(([4 + len(offs), EQUAL, len(offs), int(lens[0])], offs))
    else:
        meta = np.concatenate(([3 + 2 * len(offs), PIECES, len(offs)], offs, lens))
    return meta.astype(np.int64, copy=False)


def group_pieces(p: Pieces, cut: int, cap: int, meta_cap: int,
                 meta_in_cap: bool) -> list[tuple[np.ndarray, int, int]]:
    """Group remote pieces in order, each group at most ``cap`` bytes of data (plus its
    descriptor when ``meta_in_cap``) and its descriptor at most ``meta_cap`` bytes; pieces
    longer than ``cut`` are cut first. Returns ``[(descriptor, a, b)]``."""
    offs, lens = p.offs, p.lens
    long = lens > cut
    if long.any():
        parts = np.where(long, -(-lens // cut), 1)
        idx = np.repeat(np.arange(len(lens)), parts)
        first = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(parts, out=first[1:])
        k = np.arange(len(idx), dtype=np.int64) - first[idx]
        offs = offs[idx] + k * cut
        lens = np.minimum(lens[idx] - k * cut, cut)
    n = len(lens)
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=cum[1:])
    cost = cum + 16 * np.arange(n + 1, dtype=np.int64) if meta_in_cap else cum
    room = cap - 32 if meta_in_cap else cap
    per = (meta_cap - 32) // 16  # pieces a descriptor may list
    out = []
    i = 0
    while i < n:
        j = int(np.searchsorted(cost, cost[i] + room, side="right")) - 1
        j = max(min(j, i + per), i + 1)
        out.append((pieces_meta(offs[i:j], lens[i:j]), int(cum[i]), int(cum[j])))
        i = j
    return out


def plan_put(remote: Any, mm: int) -> list[tuple[np.ndarray, int, int]]:
    """Put chunks ``[(descriptor, a, b)]``: descriptor and data within ``mm`` bytes each."""
    if isinstance(remote, Pieces):
        return group_pieces(remote, mm - 96, mm, mm, True)
    meta = strided_meta(remote)
    room = chunk_room(remote.elemsz, mm - 8 * len(meta))
    out = []
    for a in range(0, remote.total, room):
        m = meta.copy()
        m[5], m[6] = a, min(remote.total, a + room)
        out.append((m, a, int(m[6])))
    return out


def plan_get(remote: Any, mm: int, depth: int) -> tuple[int, list[tuple[np.ndarray, int, int]]]:
    """Get stages ``(room, [(descriptor, a, b)])``: each stage asks for ``depth`` replies
    of ``room`` <= ``mm`` bytes, its descriptor within ``mm`` bytes."""
    if isinstance(remote, Pieces):
        return mm, group_pieces(remote, depth * mm, depth * mm, mm, False)
    meta = strided_meta(remote)
    room = chunk_room(remote.elemsz, mm)
    out = []
    for a in range(0, remote.total, depth * room):
        m = meta.copy()
        m[5], m[6] = a, min(remote.total, a + depth * room)
        out.append((m, a, int(m[6])))
    return room, out


def start(port: Any, peer: int, is_get: bool, remote: Any, local: Views | Pieces,
          nbi: bool, depth: int) -> VisOp:
    """Send the first two stages of a transfer (``2 * depth`` put chunks, or two get
    requests of ``depth`` replies each); the replies send the rest, ``depth`` at a time.

    A put's source is packed here, whole, so the caller may reuse it at once.
    """
    reqs: list = []
    ends: list[int] = []
    mm = port.max_medium
    if is_get:
        room, stages = plan_get(remote, mm, depth)
        for meta, a, b in stages:
            reqs.append(((room, a), meta.tobytes()))
            ends.append(b)
        first = 2
        hidx = VIS_GET
    else:
        parts = plan_put(remote, mm)
        buf = np.empty(sum(8 * len(m) + b - a for m, a, b in parts), dtype=U8)
        pos = 0
        for meta, a, b in parts:
            mb = 8 * len(meta)
            buf[pos:pos + mb] = meta.view(U8)
            local.read(a, b, out=buf[pos + mb:pos + mb + b - a])
            reqs.append(((), memoryview(buf[pos:pos + mb + b - a])))
            pos += mb + b - a
        first = 2 * depth
        hidx = VIS_PUT
    opid, op = port.op(peer, is_get, None, nbi, VisOp, hidx=hidx, reqs=reqs,
                       local=local if is_get else None, ends=ends, total=local.total,
                       depth=depth)
    op.opid = opid
    try:
        _send_more(port, op, first)
    except BaseException as e:
        port.finish(opid, op, error=e)
        raise
    return op


def _send(port: Any, op: VisOp, i: int) -> None:
    args, payload = op.reqs[i]
    op.reqs[i] = None  # sent: let it go
    port.send(op.peer, op.hidx, (op.opid, *args), payload)


def _send_more(port: Any, op: VisOp, k: int) -> None:
    """Send the next ``k`` requests of ``op``, in order: another thread of the process may
    be sending its next ones too (the caller while a draining thread handles replies)."""
    with op.sending:
        for _ in range(k):
            i = op.nxt
            if i >= len(op.reqs) or op.done:
                return
            op.nxt = i + 1
            _send(port, op, i)


def _progress(port: Any, op: VisOp, more: int) -> None:
    """After a reply: complete ``op``, or send ``more`` requests of it. The conduit never
    blocks a send (no queue to fill, unlike the shared-memory network), so they go out from
    here, without waiting for the next poll."""
    if op.done_n == (op.total if op.is_get else len(op.reqs)):
        port.finish(op.opid, op)
    elif more:
        if port.through_network(op.peer):
            _send_more(port, op, more)
        else:
            port.defer(partial(_send_more, port, op, more))


# -- the target ---------------------------------------------------------------------------
def _remote_side(port: Any, meta: np.ndarray) -> tuple[Any, int, int] | None:
    """The segment side a descriptor names, and its stream range; None if it does not fit
    this segment (a forged or corrupt message)."""
    seg_size = port.segment_size
    kind = int(meta[1])
    if kind == STRIDED:
        m = meta.tolist()
        if len(m) < 7:
            return None
        _, _, origin, elemsz, nd, a, b = m[:7]
        if not 0 <= nd <= 32 or len(m) != 7 + 2 * nd or elemsz <= 0:
            return None
        counts = tuple(m[7:7 + nd])
        strides = tuple(m[7 + nd:])
        total = elemsz
        for c in counts:
            if c <= 0:
                return None
            total *= c
        lo, hi = extent(origin, counts, strides, elemsz)
        if not (0 <= lo and hi <= seg_size and 0 <= a < b <= total):
            return None
        return Views([strided_view(port.segment, origin, counts, strides, elemsz)]), a, b
    if kind in (PIECES, EQUAL):
        n = int(meta[2]) if len(meta) > 2 else -1
        if kind == PIECES and n >= 0 and len(meta) == 3 + 2 * n:
            offs, lens = meta[3:3 + n], meta[3 + n:]
        elif kind == EQUAL and n >= 0 and len(meta) == 4 + n:
            offs, lens = meta[4:], np.full(n, int(meta[3]), dtype=np.int64)
        else:
            return None
        if n == 0 or (lens <= 0).any() or (offs < 0).any() or (lens > seg_size).any() \
                or (offs > seg_size - lens).any():
            return None
        p = Pieces(port.segment, offs, lens)
        return p, 0, p.total
    return None


def _descriptor(payload: Any) -> np.ndarray | None:
    if payload is None or payload.nbytes < 16:
        return None
    nw = int(np.frombuffer(payload, dtype=np.int64, count=1)[0])
    if not 3 <= nw <= payload.nbytes // 8:
        return None
    return np.frombuffer(payload, dtype=np.int64, count=nw)


def h_vis_put(port, src, args, payload, is_reply) -> None:
    meta = _descriptor(payload)
    if len(args) != 1 or is_reply or meta is None:
        return port.refuse()
    got = _remote_side(port, meta)
    if got is None:
        return port.refuse()
    side, a, b = got
    data = np.frombuffer(payload, dtype=U8, offset=8 * len(meta))
    if len(data) != b - a:
        return port.refuse()
    side.write(a, b, data)
    port.reply(src, VIS_ACK, (args[0],))


def h_vis_get(port, src, args, payload, is_reply) -> None:
    meta = _descriptor(payload)
    if len(args) != 3 or is_reply or meta is None or payload.nbytes != 8 * len(meta):
        return port.refuse()
    got = _remote_side(port, meta)
    if got is None:
        return port.refuse()
    side, a, b = got
    opid, room, at = args
    if not 0 < room <= port.max_medium or at < 0:
        return port.refuse()
    for x in range(a, b, room):  # one reply per chunk, back to back
        y = min(b, x + room)
        port.reply(src, VIS_DATA, (opid, at + x - a), side.read(x, y))


def _my_op(port: Any, src: int, opid: int, is_get: bool) -> VisOp | None:
    op = port.pending(opid, src, VisOp)
    if op is not None and op.is_get != is_get:
        port.refuse()
        return None
    return op


def h_vis_ack(port, src, args, payload, is_reply) -> None:
    if len(args) != 1 or not is_reply or payload is not None:
        return port.refuse()
    op = _my_op(port, src, args[0], False)
    if op is None:
        return
    with port.lock:
        op.done_n += 1
        more = op.depth if op.done_n % op.depth == 0 else 0
    _progress(port, op, more)


def h_vis_data(port, src, args, payload, is_reply) -> None:
    if len(args) != 2 or not is_reply or payload is None:
        return port.refuse()
    op = _my_op(port, src, args[0], True)
    if op is None:
        return
    at, n = args[1], payload.nbytes
    if at != op.done_n or n == 0 or at + n > op.total:  # replies come in order
        return port.refuse()
    op.local.write(at, at + n, np.frombuffer(payload, dtype=U8))
    more = 0
    with port.lock:
        op.done_n += n
        ends = op.ends
        while op.stage < len(ends) and ends[op.stage] <= op.done_n:
            op.stage += 1
            more += 1
    _progress(port, op, more)


SYSTEM_HANDLERS = (h_vis_put, h_vis_get, h_vis_ack, h_vis_data)
