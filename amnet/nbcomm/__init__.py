"""amnet.nbcomm: automatic nonblocking scheduling of memput/memget, after "Automatic
Nonblocking Communication for Partitioned Global Address Space Programs" (docs/design.md §10).

Being built: it has no public API yet. What is written and tested so far is internal:
:mod:`amnet.nbcomm._puts` (the per-destination lists of outstanding puts with their bounding
boxes, §3.1) and :mod:`amnet.nbcomm._gets` (phases recorded and prefetched in chunks per
source, invalidation by puts, the profitability test, §3.2). The scheduler that drives them
on an endpoint (``Scheduler``, with aggregation regions on amnet.vis) comes with its issue.
"""
