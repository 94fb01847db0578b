"""A ring of puts and gets: each PE sends a block to its right neighbour and reads one
from its left neighbour.

    amnet-run -n 4 examples/shmem/ring.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/ring.py
    amnet-run -n 4 --nodes 2 examples/shmem/ring.py

Every PE has a symmetric ``block`` of N int64 values, ``mype * 1000 + i``. In round one
each PE puts its block into ``inbox`` on PE ``mype + 1`` and a barrier completes the puts
(``barrier_all`` is a quiet, then a barrier). In round two each PE gets ``block`` from PE
``mype - 1`` and reads the left neighbour's number with ``g``; in round three a scalar
token travels once around the ring with ``p`` and ``wait_until``, each PE adding its number,
so it comes back to PE 0 as ``0 + 1 + ... + (n-1)``. Every result is checked on every PE;
PE 0 prints one line. A wrong answer is an AssertionError (exit status 1).
"""

import numpy as np

import shmem_rt as shmem

N = 1000

mype, npes = shmem.my_pe(), shmem.n_pes()
right, left = (mype + 1) % npes, (mype - 1) % npes

block = shmem.array(mype * 1000 + np.arange(N, dtype=np.int64))
inbox = shmem.zeros(N, dtype=np.int64)

# 1. put to the right
shmem.put(inbox, block, right)
shmem.barrier_all()
assert np.array_equal(inbox, left * 1000 + np.arange(N)), (mype, inbox[:3])

# 2. get from the left, and a single element with g
got = np.empty(N, dtype=np.int64)
shmem.get(got, block, left)
assert np.array_equal(got, inbox)
assert shmem.g(block, left) == left * 1000

# 3. a token once around the ring: PE 0 starts it, each PE adds its number and passes it on
token = shmem.zeros(1, dtype=np.int64)
arrived = shmem.zeros(1, dtype=np.int64)
shmem.barrier_all()
if mype != 0:
    shmem.wait_until(arrived, shmem.CMP_EQ, 1)
shmem.p(token, token[0] + mype, right)
shmem.quiet()  # the token is there before the flag
shmem.p(arrived, 1, right)
if mype == 0:
    shmem.wait_until(arrived, shmem.CMP_EQ, 1)
    assert token[0] == npes * (npes - 1) // 2, token[0]
    print(f"ring: {npes} PEs put {N} int64 to the right and got {N} from the left, a token "
          f"went around with p/wait_until and came back as {token[0]}: ok")

shmem.barrier_all()
for a in (arrived, token, inbox, block):
    shmem.free(a)
