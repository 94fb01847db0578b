"""A counter on PE 0 that every PE increments under a lock, with a get and a put.

    amnet-run -n 4 examples/shmem/lock_counter.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/lock_counter.py
    amnet-run -n 4 --nodes 2 examples/shmem/lock_counter.py

The OpenSHMEM specification's lock example, repeated: ``count`` lives on PE 0, and a PE
increments it by reading it (``get``), adding one and writing it back (``put``), which is
only right if no other PE does the same meanwhile. ``set_lock``/``clear_lock`` make it so
(``clear_lock`` completes the put before it lets the next PE in). A second counter is
guarded the same way by shmem4py's object form, ``with lock:``. Each PE remembers the
values it read. Afterwards each counter must be ``n * ROUNDS`` and its values read,
gathered with ``collect``, must be ``0 .. n*ROUNDS-1`` each exactly once: no two PEs were
inside at once. PE 0 prints one
line. A wrong answer is an AssertionError (exit status 1).
"""

import numpy as np

import shmem_rt as shmem

ROUNDS = 25

mype, npes = shmem.my_pe(), shmem.n_pes()
lock = shmem.new_lock()  # guards count
obj_lock = shmem.Lock()  # guards count2
count = shmem.zeros(1, dtype=np.int64)  # PE 0's copy is the counter
count2 = shmem.zeros(1, dtype=np.int64)
seen = shmem.zeros(ROUNDS, dtype=np.int64)
seen2 = shmem.zeros(ROUNDS, dtype=np.int64)

val = np.zeros(1, dtype=np.int64)
for i in range(ROUNDS):
    shmem.set_lock(lock)
    shmem.get(val, count, 0)
    seen[i] = val[0]
    val[0] += 1
    shmem.put(count, val, 0)
    shmem.clear_lock(lock)

    with obj_lock:  # shmem4py's object form
        shmem.get(val, count2, 0)
        seen2[i] = val[0]
        val[0] += 1
        shmem.put(count2, val, 0)

shmem.barrier_all()
# each value of each counter was read by exactly one PE: no two PEs were inside at once
everything = shmem.zeros(npes * ROUNDS, dtype=np.int64)
for counter, values in ((count, seen), (count2, seen2)):
    shmem.collect(everything, values)
    assert sorted(everything.tolist()) == list(range(npes * ROUNDS)), everything
    total = shmem.g(counter, 0)
    assert total == npes * ROUNDS, total
if mype == 0:
    print(f"lock_counter: {npes} PEs x {ROUNDS} locked get/+1/put on PE 0, with set_lock and "
          f"with a Lock -> both counts = {total} (expected {npes * ROUNDS}), every value "
          "read exactly once: ok")

shmem.barrier_all()
obj_lock.destroy()
shmem.del_lock(lock)
for a in (everything, seen2, seen, count2, count):
    shmem.free(a)
