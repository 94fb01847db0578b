"""The STREAM triad a = b + s*c on shared arrays, each thread on the elements it owns.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/stream_triad.py
    amnet-run -n 4 --nodes 2 examples/upc/stream_triad.py

Three shared float64 arrays of N elements with the same distribution (block size None,
UPC's ``[*]``: one contiguous block per thread). STREAM's triad ``a[i] = b[i] + s * c[i]``
is "owner computes": each thread works on ``X.local``, the numpy view of its own elements
(a pointer-to-shared cast to a local pointer, in UPC terms), so the whole kernel moves no
data between threads -- the UPC idiom for bandwidth-bound loops. The kernel runs NTIMES
times with a barrier between repetitions, as STREAM does.

Checks: each thread compares its elements with the expected values (computed from their
global indices) and stores its count of wrong elements in a shared array ``bad[MYTHREAD]``;
after a barrier thread 0 reads ``bad`` and the whole of ``a`` in bulk (``a[:]``: one
transfer per thread) and checks every element. Thread 0 prints one line (no timings, so the
line is the same on every run); a wrong answer is an AssertionError.

Source: J. D. McCalpin, STREAM: Sustainable Memory Bandwidth in High Performance Computers
(the triad kernel).
"""

import numpy as np

import upc_rt as upc

N = 1 << 18
NTIMES = 10
SCALAR = 3.0

upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS

a = upc.shared_array(N, "f8", None)
b = upc.shared_array(N, "f8", None)
c = upc.shared_array(N, "f8", None)
bad = upc.shared_array(THREADS, "i8", 1)

la, lb, lc = a.local, b.local, c.local  # my elements of each (the same indices in all three)
first = a.layout.global_index(me, 0) if la.size else 0
gi = np.arange(first, first + la.size, dtype=np.float64)  # their global indices
lb[:] = 1.0 + gi % 7
lc[:] = 2.0 - gi % 5
la[:] = 0.0
upc.barrier()

for _ in range(NTIMES):
    np.multiply(lc, SCALAR, out=la)  # a = b + s*c, in place on my part
    la += lb
    upc.barrier()

expected_mine = (1.0 + gi % 7) + SCALAR * (2.0 - gi % 5)
bad[me] = int(np.count_nonzero(la != expected_mine))
upc.barrier()

if me == 0:
    assert bad[:].tolist() == [0] * THREADS, f"wrong elements per thread: {bad[:].tolist()}"
    i = np.arange(N, dtype=np.float64)
    whole = a[:]
    assert np.array_equal(whole, (1.0 + i % 7) + SCALAR * (2.0 - i % 5))
    print(f"stream_triad: {THREADS} threads, a = b + {SCALAR}*c on 3 shared arrays of {N} "
          f"doubles, {NTIMES} repetitions, each thread on its own elements (X.local): every "
          f"element checked (sum of a {whole.sum():.1f}): ok")
upc.barrier()
