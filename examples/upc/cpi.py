"""pi as the integral of 4/(1+x^2) over [0, 1], split over the threads with upc_forall.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/cpi.py
    amnet-run -n 4 --nodes 2 examples/upc/cpi.py

The classic ``cpi`` example of MPI and UPC tutorials: the midpoint rule with N intervals,
``pi ~ h * sum f((i + 0.5) h)``, ``h = 1/N``. The loop over i is a ``upc.forall`` with the
default affinity (i itself: thread ``i % THREADS`` runs iteration i), so each thread sums
every THREADS-th term. Each thread stores its partial sum in its own element of a cyclic
shared array ``partial[MYTHREAD]`` (a local write), and after a barrier thread 0 adds the
THREADS partial sums, reading them in one bulk read (``partial[:]``).

The midpoint rule's error here is about h^2/12 (8e-12 for N = 100000), so the result must be
within 1e-9 of pi, and it must equal thread 0's own serial evaluation of the same terms in
the same grouping. Thread 0 prints one line; a wrong answer is an AssertionError.
"""

import math

import upc_rt as upc

N = 100_000

upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS

partial = upc.shared_array(THREADS, "f8", 1)  # partial[t] lives on thread t
h = 1.0 / N
s = 0.0
for i in upc.forall(0, N, 1):  # affinity None: the iterations with i % THREADS == MYTHREAD
    x = h * (i + 0.5)
    s += 4.0 / (1.0 + x * x)
partial[me] = h * s
upc.barrier()

if me == 0:
    parts = partial[:]
    result = float(sum(parts.tolist()))
    serial = []
    for t in range(THREADS):
        st = 0.0
        for i in range(t, N, THREADS):
            x = h * (i + 0.5)
            st += 4.0 / (1.0 + x * x)
        serial.append(h * st)
    assert parts.tolist() == serial, (parts.tolist(), serial)
    assert abs(result - math.pi) < 1e-9, result - math.pi
    print(f"cpi: {THREADS} threads, {N} midpoint intervals of 4/(1+x^2) with upc_forall, "
          f"partial sums in a shared array: pi ~ {result:.12f} (|error| < 1e-9): ok")
upc.barrier()
