"""Overlap of computation and communication written with ``await`` (amnet.aio): a 1-D heat
equation whose halo cells travel while the interior is computed.

    amnet-run -n 4 examples/aio/overlap.py
    amnet-run -n 4 --threads-per-proc 2 examples/aio/overlap.py
    amnet-run -n 4 --nodes 2 examples/aio/overlap.py

Each rank owns CELLS cells of a ring, kept in its segment. A step starts the two halo gets
(the last cell of the left neighbour, the first of the right one) as a task, updates its
interior cells meanwhile (they need no halo), then awaits the halos and updates its two edge
cells; an awaited barrier ends the step. After STEPS steps every rank checks its cells
against the same computation done serially on the whole ring. Rank 0 prints one line; a
wrong answer is an AssertionError.
"""

import asyncio

import numpy as np

import amnet
import amnet.aio

CELLS, STEPS, ALPHA = 1000, 25, 0.25


def initial(n):
    x = np.arange(n * CELLS, dtype=np.float64)
    return np.sin(x / 37.0) + (x % 11 == 0)


def serial(n):
    u = initial(n)
    for _ in range(STEPS):
        u = u + ALPHA * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u


async def halos(ep, left, right):
    lo, hi = await asyncio.gather(ep.get_nb(left, 8 * (CELLS - 1), 8), ep.get_nb(right, 0, 8))
    return np.frombuffer(lo, np.float64)[0], np.frombuffer(hi, np.float64)[0]


async def main(ep):
    n = ep.size
    u = np.frombuffer(ep.segment, np.float64, CELLS)  # the cells other ranks read
    u[:] = initial(n)[ep.rank * CELLS:(ep.rank + 1) * CELLS]
    left, right = (ep.rank - 1) % n, (ep.rank + 1) % n
    await ep.coll.world.barrier_nb()
    for _ in range(STEPS):
        fetch = asyncio.ensure_future(halos(ep, left, right))
        new = u.copy()
        new[1:-1] += ALPHA * (u[:-2] - 2 * u[1:-1] + u[2:])  # while the halos travel
        lo, hi = await fetch
        new[0] += ALPHA * (lo - 2 * u[0] + u[1])
        new[-1] += ALPHA * (u[-2] - 2 * u[-1] + hi)
        await ep.coll.world.barrier_nb()  # everyone read the old cells
        u[:] = new
        await ep.coll.world.barrier_nb()  # everyone wrote the new ones
    want = serial(n)[ep.rank * CELLS:(ep.rank + 1) * CELLS]
    assert np.allclose(u, want, rtol=0, atol=1e-12), np.abs(u - want).max()
    norms = np.zeros(n)
    await ep.coll.world.gather_all_nb(norms, np.array([np.sum(u * u)]))
    return norms


ep = amnet.init()
norms = amnet.aio.run(main)
if ep.rank == 0:
    print(f"overlap: {ep.size} ranks x {CELLS} cells, {STEPS} steps, halo gets awaited while "
          f"the interior was computed: equals the serial computation (norm "
          f"{np.sqrt(sum(norms)):.9f}): ok")
