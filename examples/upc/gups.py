"""RandomAccess (GUPS) from the HPC Challenge benchmark, on a cyclic shared table.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/gups.py
    amnet-run -n 4 --nodes 2 examples/upc/gups.py

HPCC RandomAccess: a table ``T`` of N = 2^LOG2N uint64 words, initially ``T[i] = i``, gets
4*N updates ``T[r % N] ^= r``, where ``r`` runs through the HPCC random stream (the
polynomial LCG over GF(2) with POLY = 7: ``r = (r << 1) ^ (POLY if r's top bit else 0)``).
The 4*N updates are split evenly over the threads; each thread starts its part of the
stream with HPCC's ``starts(n)`` (the n-th value of the stream, by repeated squaring).

The table is a cyclic shared array (block size 1: ``T[i]`` lives on thread ``i % THREADS``).
HPCC lets a thread look ahead up to 1024 updates and, being a memory benchmark, even lets
racing read-modify-writes lose up to 1% of the updates. This version loses none: it takes
BATCH updates at a time, buckets them by the thread that owns their entry and, for each
owner, under that owner's lock (``upc.all_lock_alloc()``, ``with L:``), reads the entries
it needs in one transfer (an index-array read ``T[idx]``), XORs the updates in locally and
writes them back in one transfer (``T[idx] = v``). The lock's unlock completes the writes
before the next holder can read (upc_rt closes the release hazard), so the count of errors
is exactly 0. (``all_lock_alloc`` hosts its locks on the threads in turn, so ``locks[t]``
lives on thread t, next to the entries it guards. Element-wise relaxed ``T[i] ^= r``, the
other form HPCC allows, would make the error count depend on timing.)

Verification is HPCC's: apply the same updates again (XOR undoes XOR), serially on thread 0,
to a bulk copy of the table, and count the entries that are not back to ``T[i] = i``; HPCC
accepts up to 1% of N. Thread 0 prints one line; a wrong answer is an AssertionError.

Source: HPC Challenge benchmark, RandomAccess (HPCC_starts, POLY, PERIOD as in its
RandomAccess.h / utility.c).
"""

import numpy as np

import upc_rt as upc

LOG2N = 12
N = 1 << LOG2N
NUPDATE = 4 * N
BATCH = 256  # updates looked ahead at a time (HPCC allows up to 1024)
POLY = 0x7
PERIOD = 1317624576693539401
M64 = (1 << 64) - 1


def step(r):
    """The next value of the HPCC random stream."""
    return ((r << 1) & M64) ^ (POLY if r >> 63 else 0)


def starts(n):
    """HPCC_starts: the value ``n`` steps into the stream that starts at 0x1 (``starts(0)``
    is 0x1), by repeated squaring of the step (a matrix over GF(2))."""
    while n < 0:
        n += PERIOD
    while n > PERIOD:
        n -= PERIOD
    if n == 0:
        return 0x1
    m2 = []
    temp = 0x1
    for _ in range(64):
        m2.append(temp)
        temp = step(step(temp))
    i = 62
    while i >= 0 and not (n >> i) & 1:
        i -= 1
    ran = 0x2
    while i > 0:
        temp = 0
        for j in range(64):
            if (ran >> j) & 1:
                temp ^= m2[j]
        ran = temp
        i -= 1
        if (n >> i) & 1:
            ran = step(ran)
    return ran


def stream(start, count):
    """``count`` values of the stream after ``start``, as uint64 (HPCC steps first, then
    uses the value)."""
    out = np.empty(count, np.uint64)
    r = start
    for k in range(count):
        r = step(r)
        out[k] = r
    return out


upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS
assert NUPDATE % THREADS == 0
per_thread = NUPDATE // THREADS

# HPCC_starts(n) is n steps after HPCC_starts(0), also past the 64th (where POLY comes in)
assert starts(100) == int(stream(starts(0), 100)[-1])

T = upc.shared_array(N, "u8", 1)
locks = [upc.all_lock_alloc() for _ in range(THREADS)]  # locks[t] guards thread t's entries
mine = T.local
mine[:] = np.arange(me, N, THREADS, dtype=np.uint64)  # T[i] = i, each thread its own
upc.barrier()

# -- the updates ------------------------------------------------------------------------------
ran = stream(starts(per_thread * me), per_thread)
for lo in range(0, per_thread, BATCH):
    r = ran[lo:lo + BATCH]
    idx = (r & np.uint64(N - 1)).astype(np.int64)  # r % N
    owner = idx % THREADS
    for k in range(THREADS):
        t = (me + k) % THREADS  # start at a different owner on every thread
        sel = owner == t
        if not sel.any():
            continue
        want, where = np.unique(idx[sel], return_inverse=True)
        with locks[t]:
            vals = T[want]  # one transfer from thread t
            np.bitwise_xor.at(vals, where, r[sel])  # repeated entries: every update applied
            T[want] = vals  # one transfer back; complete before the unlock
upc.barrier()

# -- HPCC verification on thread 0 ------------------------------------------------------------
if me == 0:
    table = T[:]  # the whole table, one transfer per thread
    checksum = int(table.sum(dtype=np.uint64))  # wraps mod 2^64
    for t in range(THREADS):
        r = stream(starts(per_thread * t), per_thread)
        np.bitwise_xor.at(table, (r & np.uint64(N - 1)).astype(np.int64), r)
    errors = int(np.count_nonzero(table != np.arange(N, dtype=np.uint64)))
    assert errors <= 0.01 * N, f"{errors} of {N} entries wrong: HPCC allows 1%"
    assert errors == 0, f"{errors} errors, though every update ran under its owner's lock"
    print(f"gups: {THREADS} threads, {NUPDATE} HPCC updates of a cyclic table of 2^{LOG2N} "
          f"uint64 in batches of {BATCH} under per-owner locks (table sum {checksum:016x}); "
          f"HPCC verification: {errors} errors (at most {N // 100} allowed): ok")
upc.barrier()
