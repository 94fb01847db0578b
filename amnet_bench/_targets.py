"""Every target ``amnet-bench`` judges a figure against, in one table.

A target is a bound on a ratio to a peer measured in the same run (``<= x``: amnet at most
x times the peer's time; ``>= x``: at least x times its bandwidth or speed-up), or on a
relative error. Each says which issue or paper set it; docs/benchmarks.md says how each
suite reads its own. The suites import this module and nothing else holds a target.
"""

from __future__ import annotations

# -- am, across nodes (the issue that added the am and rma suites, measured at the close of
#    issue 3, the AM core) -----------------------------------------------------------------
AM_SHORT = 1.2  # Short-AM round trip across nodes <= 1.2x raw zmq's (the faster variant)

# -- am, on one node: the hybrid paper's Table 2 (the PSHM issue) ---------------------------
AM_PROCS_VS_MPI_AM = 0.5  # "2 procs" <= 0.5x mpi4py's AM emulation
AM_PROCS_VS_RAW_SHM = 3.0  # "2 procs" <= 3x raw-shm
AM_THREADS_VS_PROCS = 0.25  # "2 threads" <= 0.25x "2 procs"
AM_THREADS_VS_CALLS = 1.5  # "2 threads" <= 1.5x python calls in turns, every run (fixed costs)

# -- am and rma over the mpi conduit, beside mpi4py on the same MPI -------------------------
#: Short-AM round trip <= this x mpi4py's AM emulation, by MPICH path (issue 31)
MPI_SHORT = {"nolocal": 1.5, "tcp": 1.0}
MPI_BW = 0.8  # put bandwidth >= 0.8x mpi4py Send/Recv streaming (the mpi conduit's issue)
MPI_BW_SIZE = 1 << 20  # ... at 1 MiB

# -- rma, across nodes (the issue that added the am and rma suites) ------------------------
RMA_BW = 0.7  # put_nbi bandwidth >= 0.7x raw zmq streaming
RMA_BW_SIZE = 1 << 20  # ... at 1 MiB

# -- rma, on one node, 2 processes (the PSHM issue) ----------------------------------------
RMA_NODE_PUT = 0.3  # blocking put latency <= 0.3x mpi4py RMA put (lock/put/unlock)
RMA_NODE_PUT_SIZE = 8  # ... of 8 B
RMA_NODE_BW = 0.8  # put and get bandwidth >= 0.8x memcpy
RMA_NODE_BW_SIZE = 1 << 20  # ... for sizes >= 1 MiB

# -- amnet.aio beside the blocking forms (the aio issue) -----------------------------------
AIO_AWAIT = 1.5  # an awaited 8 B get or Short rpc <= 1.5x the blocking form
AIO_MANY = 1.0  # 1000 operations in flight, awaited, <= 1.0x the same as handles
AIO_IDLE = 0.05  # an idle awaiting rank uses < 5% of a core

# -- vis: the autoNB paper's Fig. 6 (the VIS issue), per conduit ---------------------------
VIS_FLOOD = 20.0  # one VIS call >= 20x a flood of single gets
VIS_CONTIG = 0.5  # one VIS call >= 0.5x one contiguous get of the same bytes
VIS_SIZE = 1 << 20  # ... at 1 MiB

# -- nbcomm: the autoNB paper's Fig. 7 (the nbcomm issue) ----------------------------------
NB_SPEEDUP = 1.16  # geometric mean of automatic over blocking >= 1.16 (the paper's 16%)
NB_SHARE = 0.75  # the automatic form's gain >= 75% of the manual form's
NB_CHECK = 0.01  # conflict checks < 1% of the automatic run

# -- coll: the UPC collectives report's testbed (the collectives issue), 64 KiB, 8 ranks ---
COLL_PUSH = 2.0  # the best algorithm >= 2x the reference memcpy push (broadcast, exchange)
COLL_MPI = 1.5  # the best algorithm <= 1.5x mpi4py within a node

# -- coll's node table: small calls on the node area (issue 44), ratios to the peer --------
COLL_NODE_PAIR = 1.0  # 2 processes of a node <= mpi4py
COLL_NODE_MANY = 1.5  # more processes of a node <= 1.5x mpi4py
COLL_NODE_THREADS = 1.2  # 2 rank-threads <= 1.2x the 2 processes
COLL_NODE_NODES = 1.0  # 2 nodes of 2 no slower than the AM algorithms (hier_am)

# -- upc: upc_rt beside its peers (the upc issue) ------------------------------------------
UPC = {  # figure: (comparison, bound)
    "x_remote_node": ("<=", 0.5),  # X[i] in a node / mpi4py RMA 8 B Get
    "x_remote_net": ("<=", 1.3),  # X[i] across nodes / ep.get 8 B
    "x_local": ("<=", 8.0),  # local-affinity X[i] / numpy a[i]
    "slice_contig": (">=", 0.8),  # slice MB/s / ep.get MB/s
    "slice_spread": (">=", 0.8),  # slice MB/s / ep.vis MB/s
    "matmul_messages": (">=", 5.0),  # messages cache off / cache on
    "matmul_time": (">=", 2.0),  # seconds cache off / cache on
}

# -- model: MuPC's performance model (the thesis's bound) ----------------------------------
MODEL_DELTA = 0.15  # |predicted - measured| / measured <= 15% for each kernel
