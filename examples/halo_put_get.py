"""1-D halo exchange with one-sided puts, checked against the same computation done serially.

    amnet-run -n 4 --nodes 2 examples/halo_put_get.py
    amnet-run -n 4 --nodes 2 --threads-per-proc 2 examples/halo_put_get.py

A periodic 1-D array of ``size * CELLS`` float64 values is smoothed STEPS times with the
3-point stencil ``u[i] = (u[i-1] + u[i] + u[i+1]) / 3``. Each rank owns CELLS consecutive
cells, kept in its segment, plus two ghost cells for each side (one per step parity):

    offset 0       8          16         24           24 + 8*CELLS
           | L[0] | L[1]      | R[0] | R[1] | cells ... |

Each step a rank *puts* its first cell into its left neighbour's right ghost and its last
cell into its right neighbour's left ghost (``put_nbi``: no handle per put), completes them
with ``wait_nbi``, and meets the others in a barrier, after which its own ghosts hold what its
neighbours put there. Ghosts alternate by step parity so that one barrier per step is enough:
a neighbour can only be one step ahead, and it writes the other slot.

At the end rank 0 *gets* every rank's cells into one array with ``get_nbi`` inside an access
region (one handle for all of them), and compares with the serial numpy computation: they
must be equal bit for bit. Rank 0 prints one line; a wrong answer is an AssertionError.
"""

import numpy as np

import amnet

CELLS = 1000
STEPS = 25
F8 = 8
LEFT, RIGHT, CELLS_AT = 0, 2 * F8, 4 * F8  # byte offsets in every rank's segment


def initial(n):
    """The starting array: a deterministic mix of a sine wave and a step."""
    x = np.arange(n, dtype=np.float64)
    return np.sin(x * 2 * np.pi / n) + (x < n // 3)


def serial(n, steps):
    u = initial(n)
    for _ in range(steps):
        u = (np.roll(u, 1) + u + np.roll(u, -1)) / 3
    return u


ep = amnet.init()
n = ep.size * CELLS
left, right = (ep.rank - 1) % ep.size, (ep.rank + 1) % ep.size

seg = ep.segment[:CELLS_AT + CELLS * F8].view(np.float64)  # my segment as float64 words
ghost_l, ghost_r, u = seg[0:2], seg[2:4], seg[4:]
u[:] = initial(n)[ep.rank * CELLS:(ep.rank + 1) * CELLS]

for step in range(STEPS):
    p = step % 2
    # my boundary cells into my neighbours' ghosts, slot p; u[:1] may be changed as soon as
    # put_nbi returns (amnet copied it), but the put is complete only after wait_nbi
    ep.put_nbi(left, RIGHT + p * F8, u[:1])
    ep.put_nbi(right, LEFT + p * F8, u[-1:])
    ep.wait_nbi()  # both puts are in my neighbours' segments
    ep.barrier()  # ... and theirs are in mine
    padded = np.concatenate([ghost_l[p:p + 1], u, ghost_r[p:p + 1]])
    u[:] = (padded[:-2] + padded[1:-1] + padded[2:]) / 3

ep.barrier("done")  # every rank finished its last step before rank 0 reads

if ep.rank == 0:
    result = np.empty(n, dtype=np.float64)
    with ep.access_region() as region:
        for r in range(ep.size):
            ep.get_nbi(r, CELLS_AT, CELLS * F8, result[r * CELLS:(r + 1) * CELLS])
    region.handle.wait()  # every get of the region has landed in result
    expected = serial(n, STEPS)
    assert np.array_equal(result, expected), np.abs(result - expected).max()
    print(f"halo_put_get: {ep.size} ranks x {CELLS} cells, {STEPS} steps: "
          f"result equals the serial computation (norm {np.linalg.norm(result):.9f}): ok")
ep.barrier("checked")
