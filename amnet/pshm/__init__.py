"""amnet.pshm: the shared-memory network inside a node (docs/design.md §6).

Per-process shared objects holding AM request/reply queues, payload slots and the segments
of the process's ranks, mapped by every process of the node; see docs/pshm.md.
"""

from ._layout import COLL_AREA, COLL_DATA, COLL_HDR, COLL_SLOT, COLL_TEAMS

__all__ = ["COLL_AREA", "COLL_DATA", "COLL_HDR", "COLL_SLOT", "COLL_TEAMS"]
