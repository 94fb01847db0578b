"""Hello from every PE: its number, its node and the PEs it shares memory with.

    amnet-run -n 4 examples/shmem/hello.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/hello.py
    amnet-run -n 4 --nodes 2 examples/shmem/hello.py

shmem4py's first demo with one line changed: ``import shmem_rt as shmem`` instead of
``from shmem4py import shmem``. A PE is an amnet rank (a process, or a rank-thread with
``--threads-per-proc``); the first shmem_rt call starts it. Each PE prints one line (in no
fixed order), then checks what the PEs agree on: ``fcollect`` of every PE's number gives
``0..n-1`` in order, TEAM_SHARED is exactly the PEs that ``shmem.ptr`` can reach (those of
this node), and its members are numbered in world order. A wrong answer is an
AssertionError (exit status 1).
"""

import amnet
import shmem_rt as shmem

mype = shmem.my_pe()
npes = shmem.n_pes()
node = amnet.endpoint().node
shared = shmem.TEAM_SHARED
print(f"Hello from PE {mype} of {npes} (node {node}, which has {shared.n_pes()} PEs)")

# every PE's number, gathered on every PE in PE order
mine = shmem.array([mype], dtype="i8")
everyone = shmem.zeros(npes, dtype="i8")
shmem.fcollect(everyone, mine)
assert everyone.tolist() == list(range(npes)), everyone

# the PEs of my node: those whose copy of a symmetric array I can address directly
near = [pe for pe in range(npes) if shmem.ptr(mine, pe) is not None]
assert mype in near and len(near) == shared.n_pes(), (near, shared.n_pes())
assert [shared.translate_pe(i, shmem.TEAM_WORLD) for i in range(len(near))] == near
assert near[shared.my_pe()] == mype
for pe in near:  # ptr is a numpy view of that PE's memory: read its number in place
    assert shmem.ptr(mine, pe)[0] == pe

shmem.barrier_all()
shmem.free(everyone)
shmem.free(mine)
