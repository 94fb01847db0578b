"""amnet.core: the endpoint, the AM core, the extended API and the conduits.

See docs/design.md §3-7 and docs/am-guide.md.
"""
