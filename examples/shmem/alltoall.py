"""All-to-all exchange: block j of PE i's source lands in block i of PE j's target.

    amnet-run -n 4 examples/shmem/alltoall.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/alltoall.py
    amnet-run -n 4 --nodes 2 examples/shmem/alltoall.py

Each PE fills a symmetric source of n blocks of B int64 values, element k of block j on PE
i being ``i * 10000 + j * 100 + k``; after ``alltoall`` PE j's target block i must be PE i's
block j. Then the same on a team: ``TEAM_WORLD.split_strided`` makes the team of the even
PEs, and ``alltoall(..., team=evens)`` exchanges among its members only (team member
numbers, not PE numbers, index the blocks). Last, ``alltoalls`` does the world exchange
with strides (every second element of the source, every third of the target). Every PE
checks its own result; PE 0 prints one line. A wrong answer is an AssertionError (exit
status 1).
"""

import numpy as np

import shmem_rt as shmem

B = 5  # elements per block

mype, npes = shmem.my_pe(), shmem.n_pes()


def block(i: int, j: int) -> np.ndarray:
    """The block that PE (or team member) i sends to j."""
    return i * 10000 + j * 100 + np.arange(B, dtype=np.int64)


# 1. the world
source = shmem.array(np.concatenate([block(mype, j) for j in range(npes)]))
target = shmem.full(npes * B, -1, dtype=np.int64)
shmem.alltoall(target, source)
expect = np.concatenate([block(i, mype) for i in range(npes)])
assert np.array_equal(target, expect), (mype, target)

# 2. the team of the even PEs (every PE calls the split; the odd ones get TEAM_INVALID)
evens = shmem.TEAM_WORLD.split_strided(0, 2, (npes + 1) // 2)
ne = (npes + 1) // 2
tsrc = shmem.zeros(ne * B, dtype=np.int64)
tdst = shmem.full(ne * B, -1, dtype=np.int64)
if evens:
    me = evens.my_pe()
    assert me == mype // 2 and evens.n_pes() == ne
    tsrc[:] = np.concatenate([block(me, j) for j in range(ne)])
    shmem.alltoall(tdst, tsrc, team=evens)
    assert np.array_equal(tdst, np.concatenate([block(i, me) for i in range(ne)])), tdst
    evens.destroy()
else:
    assert evens == shmem.TEAM_INVALID and mype % 2 == 1  # (its my_pe() would raise)
    assert (tdst == -1).all()

# 3. strided: the source's elements 0, 2, 4, ... go to the target's elements 0, 3, 6, ...
ssrc = shmem.zeros(2 * npes * B, dtype=np.int64)
ssrc[::2] = source
sdst = shmem.full(3 * npes * B, -1, dtype=np.int64)
shmem.alltoalls(sdst, ssrc, tst=3, sst=2, size=B)
assert np.array_equal(sdst[::3], expect), sdst
assert (np.delete(sdst, np.s_[::3]) == -1).all()

if mype == 0:
    print(f"alltoall: {npes} PEs exchanged blocks of {B} int64 (world, the team of {ne} even "
          f"PEs, and strided with alltoalls): every block where it belongs: ok")

shmem.barrier_all()
for a in (sdst, ssrc, tdst, tsrc, target, source):
    shmem.free(a)
