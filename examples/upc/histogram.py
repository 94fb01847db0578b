"""A shared histogram filled with UPC 1.3 atomics, checked against numpy.histogram.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/histogram.py
    amnet-run -n 4 --nodes 2 examples/upc/histogram.py

Every thread makes PER_THREAD normally distributed values (Box-Muller on a seeded
``random.Random`` per thread, whose ``random()`` stream Python keeps the same across versions),
keeps them in its part of a shared data array (block size None, UPC's ``[*]``: one block
per thread), and bins them into a shared histogram of NBINS int64 counters spread
cyclically over the threads. Each value is one atomic increment of its bin,
``D.fetch_add(H.ptr(b), 1)`` with ``D = upc.atomic_domain(["add", "get"], "i8")``: a hardware
atomic on a counter of my node, an AM to the counter's thread otherwise, so no increment is
lost however the threads interleave. The value each fetch_add returns (the old count) is
below the final count of that bin.

After a barrier thread 0 reads all the data in one bulk read (``X[:]``) and the final counts
with atomic gets, and compares with ``numpy.histogram`` of all the data over the same range
(values outside it are not counted, as numpy does). Thread 0 prints one line; a wrong answer
is an AssertionError.
"""

import random

import numpy as np

import upc_rt as upc

PER_THREAD = 1000
NBINS = 16
LO, HI = -3.0, 3.0

upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS

X = upc.shared_array(PER_THREAD * THREADS, "f8", None)  # [*]: my values are X.local
H = upc.shared_array(NBINS, "i8", 1)  # the counters, cyclic; shared arrays start zeroed
D = upc.atomic_domain(["add", "get"], "i8")
edges = np.linspace(LO, HI, NBINS + 1)

def normal(seed, n):
    """``n`` standard normal values (Box-Muller), the same on every platform and version."""
    rnd = random.Random(seed)
    u = np.array([rnd.random() for _ in range(2 * n)]).reshape(2, n)
    return np.sqrt(-2.0 * np.log1p(-u[0])) * np.cos(2.0 * np.pi * u[1])


data = normal(1000 + me, PER_THREAD)
X.local[:] = data
upc.barrier()  # (the counters are zero everywhere before anyone adds)

# the bin of each value, as numpy.histogram decides it (the last bin includes HI)
bins = np.searchsorted(edges, data, side="right") - 1
bins[data == HI] = NBINS - 1
seen = []
for b in bins.tolist():
    if 0 <= b < NBINS:
        seen.append((b, D.fetch_add(H.ptr(b), 1)))
upc.barrier()

final = [D.get(H.ptr(b)) for b in range(NBINS)]
assert all(old < final[b] for b, old in seen), "a fetch_add returned a count never reached"

if me == 0:
    everything = X[:]
    expected, _ = np.histogram(everything, bins=NBINS, range=(LO, HI))
    assert np.array_equal(final, expected), (final, expected.tolist())
    assert np.array_equal(H[:], expected)  # the same counts through a bulk read
    inside = int(expected.sum())
    print(f"histogram: {THREADS} threads x {PER_THREAD} values, {inside} in [{LO}, {HI}] binned "
          f"with atomic fetch_add: {NBINS} shared bins {expected.tolist()} equal "
          f"numpy.histogram of all {THREADS * PER_THREAD}: ok")
upc.barrier()
