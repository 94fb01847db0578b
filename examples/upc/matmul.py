"""Matrix multiply C = A B on shared matrices: the naive and the cache-friendly UPC versions.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/matmul.py
    amnet-run -n 4 --nodes 2 examples/upc/matmul.py

A, B and C are N x N shared float64 matrices with rows blocked per thread (block size
``N * R``, R = N / THREADS rows: ``shared [N*R] double A[N][N]`` in UPC), so thread t owns
rows ``[t*R, (t+1)*R)`` of each. Each thread computes the rows of C it owns, choosing them
with ``upc.forall`` and the affinity ``&A[i][0]``. Row i of C needs row i of A (mine) and all
of B, which is spread over every thread. The two versions differ only in how B is read:

- naive: the textbook triple loop, ``C[i, j] += A[i, k] * B[k, j]`` one shared element at a
  time: every ``B[k, j]`` on another thread is a separate remote access (an AM round trip
  when that thread is on another node), R*N*N of them per thread;
- cache-friendly: first fetch B's blocks into a private copy with ``upc.memget_nb`` (one
  bulk transfer per owning thread, all in flight together, then ``sync()``), then multiply
  from local memory (numpy ``@`` on my rows).

These follow the naive and cache-friendly matrix multiplies of the MuPC thesis ("A
performance model for Unified Parallel C", Table 5.1): the cache-friendly one replaces the
R*N*N fine-grained remote reads by THREADS bulk ones.

The matrices hold small integers, so both results equal numpy's ``A @ B`` exactly; each
thread checks its rows of both, and thread 0 checks the whole C in one bulk read. Thread 0
prints one line; a wrong answer is an AssertionError.
"""

import numpy as np

import upc_rt as upc

N = 24


def a_rows(rows):
    return ((rows[:, None] * 7 + np.arange(N)[None, :] * 3) % 11 - 5).astype(np.float64)


def b_rows(rows):
    return ((rows[:, None] * 5 + np.arange(N)[None, :] * 2) % 13 - 6).astype(np.float64)


upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS
assert N % THREADS == 0
R = N // THREADS

A = upc.shared_array((N, N), "f8", N * R)
B = upc.shared_array((N, N), "f8", N * R)
C = upc.shared_array((N, N), "f8", N * R)
C2 = upc.shared_array((N, N), "f8", N * R)
mine = np.arange(me * R, (me + 1) * R)
A.local[:] = a_rows(mine).ravel()
B.local[:] = b_rows(mine).ravel()
upc.barrier()

expected = a_rows(np.arange(N)) @ b_rows(np.arange(N))

# -- naive: one element of B at a time ---------------------------------------------------------
reads = 0
for i in upc.forall(0, N, 1, affinity=lambda i: A.ptr((i, 0))):
    for j in range(N):
        s = 0.0
        for k in range(N):
            s += A[i, k] * B[k, j]  # B[k, j]: a remote read unless thread k // R is me
            reads += 1
        C[i, j] = s  # a local write: row i is mine
assert reads == R * N * N
assert np.array_equal(C.local.reshape(R, N), expected[mine]), "naive: my rows of C are wrong"

# -- cache-friendly: B's blocks fetched in bulk first -------------------------------------------
Bcopy = np.empty((N, N))
handles = [upc.memget_nb(Bcopy[t * R:(t + 1) * R], B.ptr((t * R, 0)), R * N * 8)
           for t in range(THREADS)]  # thread t's block: R whole rows, contiguous on it
for h in handles:
    h.sync()
rows = [i for i in upc.forall(0, N, 1, affinity=lambda i: A.ptr((i, 0)))]
assert rows == mine.tolist()
C2.local[:] = (A.local.reshape(R, N) @ Bcopy).ravel()
assert np.array_equal(C2.local.reshape(R, N), expected[mine]), "cache-friendly: rows wrong"
upc.barrier()

if me == 0:
    naive, friendly = C[:, :], C2[:, :]
    assert np.array_equal(naive, expected), "naive C differs from numpy A @ B"
    assert np.array_equal(friendly, expected), "cache-friendly C differs from numpy A @ B"
    print(f"matmul: {N}x{N} on {THREADS} threads, rows blocked: naive ({reads} element reads "
          f"of B per thread) and cache-friendly (B in {THREADS} memget_nb blocks) both equal "
          f"numpy A @ B (trace {int(np.trace(expected))}, sum of squares "
          f"{int((expected ** 2).sum())}): ok")
upc.barrier()
