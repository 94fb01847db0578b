"""pi by reduction: each PE sums its share, ``sum_reduce`` adds the shares on every PE.

    amnet-run -n 4 examples/shmem/pi.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/pi.py
    amnet-run -n 4 --nodes 2 examples/shmem/pi.py

Two estimates, both finished by a reduction over the PEs:

- the integral of 4/(1+x^2) over [0, 1] by the midpoint rule with N intervals, PE ``p``
  taking the intervals ``i % n == p``; ``sum_reduce`` of the partial sums (float64) gives
  pi to within 1e-9 (the rule's error is about h^2/12, 8e-12 here), and ``max_reduce`` /
  ``min_reduce`` give the largest and smallest share;
- Monte Carlo, as SOS's ``pi_reduce.c`` (which shmem4py's pi demo follows): each PE throws
  M points into the unit square with its own seeded generator and counts those inside the
  quarter circle; ``sum_reduce`` of the counts (int64, in place: source and target the same
  array) gives the total, 4 * inside / total ~ pi.

Every PE checks the reduced values against what it computes alone from every PE's share
(the seeds are known), so the answer is exact, not just close. PE 0 prints one line. A
wrong answer is an AssertionError (exit status 1).
"""

import math

import numpy as np

import shmem_rt as shmem

N = 100_000  # midpoint intervals
M = 20_000  # Monte Carlo points per PE

mype, npes = shmem.my_pe(), shmem.n_pes()


def share(p: int) -> float:
    """PE p's part of the midpoint sum."""
    x = (np.arange(p, N, npes) + 0.5) / N
    return float(np.sum(4.0 / (1.0 + x * x)) / N)


def hits(p: int) -> int:
    """How many of PE p's M points fall inside the quarter circle."""
    xy = np.random.default_rng(1 + p).random((M, 2))
    return int(np.count_nonzero((xy * xy).sum(axis=1) < 1.0))


part = shmem.array([share(mype)])
pi_sum = shmem.zeros(1)
pi_max = shmem.zeros(1)
pi_min = shmem.zeros(1)
shmem.sum_reduce(pi_sum, part)
shmem.max_reduce(pi_max, part)
shmem.reduce(pi_min, part, shmem.OP_MIN)

inside = shmem.array([hits(mype)], dtype=np.int64)
shmem.sum_reduce(inside, inside)  # in place
total = M * npes

shares = [share(p) for p in range(npes)]
assert abs(pi_sum[0] - math.pi) < 1e-9, pi_sum[0] - math.pi
assert abs(pi_sum[0] - math.fsum(shares)) < 1e-12, (pi_sum[0], math.fsum(shares))
assert pi_max[0] == max(shares) and pi_min[0] == min(shares), (pi_max, pi_min)
assert inside[0] == sum(hits(p) for p in range(npes)), inside[0]
mc = 4.0 * inside[0] / total
assert abs(mc - math.pi) < 0.05, mc
if mype == 0:
    print(f"pi: {npes} PEs, midpoint rule with {N} intervals -> sum_reduce {pi_sum[0]:.12f} "
          f"(|error| < 1e-9); Monte Carlo, {inside[0]} of {total} points inside -> "
          f"{mc:.4f}; every reduction equals the serial one: ok")

shmem.barrier_all()
for a in (inside, pi_min, pi_max, pi_sum, part):
    shmem.free(a)
