"""amnet.nbcomm: automatic nonblocking scheduling of memput/memget. Planned, not written
yet: this package is an empty placeholder and provides nothing today.

It is to be built by its own issue, on top of amnet.vis (docs/design.md §10).
"""
