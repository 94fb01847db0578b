"""Where things are in a process's shared object (see docs/pshm.md for the picture).

One object per process of a node, made by that process, mapped by every process of the node::

    +---------------------------+ 0
    | control block (4 KiB)     |  magic, mapped counter, sleeping flag, pid
    +---------------------------+ CTRL
    | queue indices             |  2 x n queues (requests from each node-local process, then
    |   tail @+64 (+0 unused)   |  replies from each), 128 bytes each: the receiver's tail on
    |                           |  a cache line of its own
    +---------------------------+ ent_off
    | entries, depth per queue  |  256 bytes each: sequence word, payload length, header
    |                           |  length << 8 | flags, the AM header (the wire format) at 24
    +---------------------------+ slot_off
    | payload slots             |  one per entry, max_medium bytes (rounded to 64)
    +---------------------------+ seg_off (page aligned)
    | segments of my T ranks    |  T x segment_size
    +---------------------------+ area_off (page aligned)
    | node areas of my T ranks  |  T x COLL_AREA: COLL_TEAMS slots of COLL_SLOT bytes, one
    |                           |  per team of the rank (amnet.coll's node collectives)
    +---------------------------+ size

A queue entry's layout (ENTRY, HDR_AT, the entry flags, the queue kinds) is written once, in
amnet/pshm/_queue.h, which the hot path's C includes; this module takes it from
:mod:`amnet.pshm._native` and hands the queues' offsets to C (:meth:`Layout.queues`).

The *receiver's* object holds its incoming queues: a sender writes entry and payload into
the receiver's object, then publishes the entry by storing its sequence number + 1 into the
entry's first word; the receiver writes its tail in its own object. Every index is an aligned
int64 written with one store (amnet/core/_hot_queue.c does both sides).
"""

from __future__ import annotations

from ._native import ENTRY as ENTRY  # bytes per queue entry
from ._native import F_DEPOSITED as F_DEPOSITED  # a Long payload already in the segment
from ._native import F_MORE as F_MORE  # a fragment: more of the payload is in the next entry
from ._native import HDR_AT as HDR_AT  # where the AM header starts inside an entry
from ._native import REP as REP  # queue kinds
from ._native import REQ as REQ

CTRL = 4096
QHDR = 128  # bytes of indices per queue: the tail at +64 (+0 unused)
PAGE = 4096
MAGIC = 0x48535054454E4D41  # b"AMNETPSH" little-endian

# words (int64 indices) of the control block
W_MAGIC = 0
W_MAPPED = 1  # how many peers mapped this object (the last one unlinks it)
W_SLEEP = 8  # nonzero while the owner sleeps on its doorbell (own cache line)
W_PID = 16
SLEEP_AT = 8 * W_SLEEP  # the byte offset C reads the flag at

# A rank's node area (docs/collectives.md, "The node area"): a slot per team it is in (up to
# COLL_TEAMS at once), each a header of flags (COLL_HDR bytes) and a data area (COLL_DATA);
# larger blocks go through it in rounds. Where a node has one process (rank-threads only),
# the areas are private memory of that process, of the same shape.
COLL_TEAMS = 8
COLL_HDR = 512
COLL_DATA = 1 << 16
COLL_SLOT = COLL_HDR + COLL_DATA
COLL_AREA = COLL_TEAMS * COLL_SLOT


def pshm_prefix(token: str) -> str:
    """The name prefix of a job's shared objects (the agent removes leftovers by it)."""
    return f"amnet-{token[:16]}"


def _up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Layout:
    """Offsets of one process's object, from the job's shape (the same in every process)."""

    __slots__ = ("area_off", "depth", "ent_off", "n", "seg_off", "seg_size", "size", "slot",
                 "slot_off", "threads")

    def __init__(self, n: int, depth: int, max_medium: int, threads: int, seg_size: int) -> None:
        self.n = n
        self.depth = depth
        self.slot = _up(max_medium, 64)
        self.threads = threads
        self.seg_size = seg_size
        self.ent_off = CTRL + 2 * n * QHDR
        self.slot_off = self.ent_off + 2 * n * depth * ENTRY
        self.seg_off = _up(self.slot_off + 2 * n * depth * self.slot, PAGE)
        self.area_off = _up(self.seg_off + threads * seg_size, PAGE)
        self.size = self.area_off + threads * COLL_AREA

    def queue(self, kind: int, src: int) -> int:
        """The queue number of ``kind`` (REQ/REP) messages from node-local process ``src``."""
        return kind * self.n + src

    def tail(self, q: int) -> int:
        """The byte offset of queue ``q``'s tail index."""
        return CTRL + q * QHDR + 64

    def queues(self) -> list[tuple[int, int, int]]:
        """(tail, entries, slots) byte offsets of every queue, by queue number: what the hot
        path's C is handed (``Hot.pshm_init``), so that it computes no offset itself."""
        return [(self.tail(q), self.entries(q), self.slots(q)) for q in range(2 * self.n)]

    def entries(self, q: int) -> int:
        return self.ent_off + q * self.depth * ENTRY

    def slots(self, q: int) -> int:
        return self.slot_off + q * self.depth * self.slot

    def segment(self, t: int) -> int:
        return self.seg_off + t * self.seg_size

    def area(self, t: int) -> int:
        """Where rank-thread ``t``'s node area starts."""
        return self.area_off + t * COLL_AREA
