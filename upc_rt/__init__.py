"""upc_rt: the UPC runtime client of amnet. Planned, not written yet: this package is an
empty placeholder and provides nothing today.

Shared arrays, pointers-to-shared, memget/memput, barriers, locks and collectives are to
arrive with the upc_rt issues, built on amnet's public interfaces (docs/design.md §11).
"""
