"""upc_rt: a thin UPC runtime on top of amnet (DESIGN.md section 11).

Shared arrays, pointers-to-shared, memget/memput, barriers, locks and collectives arrive with
the upc_rt issues; this package is the place they live.
"""
