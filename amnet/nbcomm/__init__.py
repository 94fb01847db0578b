"""amnet.nbcomm: automatic nonblocking scheduling of memput/memget, after "Automatic
Nonblocking Communication for Partitioned Global Address Space Programs" (docs/design.md §10).

``Scheduler(ep)`` gives blocking-looking ``memput``/``memget`` whose communication overlaps
the program: puts complete late (at synchronization events or conflicts,
:mod:`amnet.nbcomm._puts`), gets are prefetched when their phase runs again
(:mod:`amnet.nbcomm._gets`), and ``with s.aggregate():`` regions go as one VIS call per rank
(:mod:`amnet.nbcomm._sched`); upc_rt uses it with ``auto_nb``. docs/nbcomm.md is its guide;
``amnet-bench nbcomm`` measures it (docs/benchmarks.md).
"""

from ._sched import NBStats, Scheduler

__all__ = ["NBStats", "Scheduler"]
