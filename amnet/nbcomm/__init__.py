"""amnet.nbcomm: automatic nonblocking scheduling of memput/memget (DESIGN.md section 10).

Built by its own issue, on top of amnet.vis.
"""
