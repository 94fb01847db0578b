"""A lock-protected shared work queue: threads take tasks until none is left.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/work_queue.py
    amnet-run -n 4 --nodes 2 examples/upc/work_queue.py

The queue is a shared counter ``NEXT`` (the index of the next task; block size 0, so it
lives on thread 0) guarded by one UPC lock (``upc.all_lock_alloc()``). A thread takes a task
with a read-modify-write of the counter inside ``with L:`` -- the lock's grant and its
release are fences, so the counter value a thread reads is the one the previous holder wrote
-- and stops when the counter passed NTASKS. Tasks cost different amounts (task k counts the
steps of the Collatz sequence from SEED + k), so which thread takes how many depends on
timing: that is the point of a dynamic queue.

Each task's result goes to ``result[k]`` (a cyclic shared array: mostly a remote relaxed
write), and the task is counted in ``runs[k]`` with an atomic increment, so a task done
twice would show as 2. Each thread also records how many tasks it took in ``taken[MYTHREAD]``.

After a barrier thread 0 checks, with bulk reads: every task ran exactly once, every result
equals the serial computation, the per-thread counts add up to NTASKS and the counter ended
at NTASKS + THREADS (each thread's last, empty take moved it once more). Who took which task
varies from run to run, so the line names only what does not. Thread 0 prints one line; a
wrong answer is an AssertionError.
"""

import numpy as np

import upc_rt as upc

NTASKS = 200
SEED = 10_000


def collatz_steps(x):
    steps = 0
    while x != 1:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps += 1
    return steps


upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS

NEXT = upc.shared_array(1, "i8", 0)  # the queue head, on thread 0 (shared arrays start zeroed)
result = upc.shared_array(NTASKS, "i8", 1)
runs = upc.shared_array(NTASKS, "i8", 1)
taken = upc.shared_array(THREADS, "i8", 1)
L = upc.all_lock_alloc()
D = upc.atomic_domain(["add"], "i8")
upc.barrier()

mine = 0
while True:
    with L:  # take the next task: read, then bump the counter, as one critical section
        k = int(NEXT[0])
        NEXT[0] = k + 1
    if k >= NTASKS:
        break
    result[k] = collatz_steps(SEED + k)
    D.add(runs.ptr(k), 1)
    mine += 1
taken[me] = mine
upc.barrier()

if me == 0:
    counts = runs[:]
    assert np.array_equal(counts, np.ones(NTASKS)), \
        f"tasks not run exactly once: {np.flatnonzero(counts != 1).tolist()}"
    expected = [collatz_steps(SEED + k) for k in range(NTASKS)]
    assert result[:].tolist() == expected, "a task's result is wrong"
    assert int(taken[:].sum()) == NTASKS, taken[:].tolist()
    assert NEXT[0] == NTASKS + THREADS, NEXT[0]
    print(f"work_queue: {THREADS} threads took {NTASKS} tasks from a lock-protected shared "
          f"counter: each done exactly once, results equal the serial ones (total "
          f"{sum(expected)} Collatz steps): ok")
upc.barrier()
