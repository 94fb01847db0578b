"""amnet.pshm: the shared-memory network inside a node (DESIGN.md section 6).

Per-process shared objects holding AM request/reply queues, payload slots and the segments
of the process's ranks. Built by the PSHM issue; today node-local traffic has no data path
beyond the bootstrap service.
"""
