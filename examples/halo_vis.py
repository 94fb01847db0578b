"""2-D halo exchange with VIS strided puts (or gets), checked against a serial computation.

    amnet-run -n 4 --nodes 2 examples/halo_vis.py
    amnet-run -n 4 --nodes 2 --threads-per-proc 2 examples/halo_vis.py
    amnet-run -n 4 --nodes 2 examples/halo_vis.py --get

A periodic grid of ``(PY * NY) x (PX * NX)`` float64 values goes through STEPS steps of the
explicit heat equation ``u += K * (up + down + left + right - 4 * u)``. The ranks form a
``PY x PX`` process grid (as square as ``size`` allows: 2x2 for 4 ranks, 1x2 for 2); each owns
an ``NY x NX`` block, kept in its segment with one ghost cell all round, in two copies (step
parity ``p = step % 2``: the step reads block ``p`` and writes block ``1 - p``):

    offset 0                 BLOCK                 2 * BLOCK
           | block 0: (NY+2) x (NX+2) | block 1: (NY+2) x (NX+2) |

A block is stored in C order, ``ROW = (NX + 2) * 8`` bytes per row, so cell ``(i, j)`` of
block ``p`` is at byte ``p * BLOCK + i * ROW + j * 8`` of every rank's segment. Each step a
rank puts its four edges into its neighbours' ghost cells of block ``p``, one
``ep.vis.put_strided_nbi`` per edge, then ``ep.wait_nbi()`` and a barrier:

- a row is one contiguous element of ``8 * NX`` bytes (``count=[]``); the source is the
  numpy row itself (``src_offset=None, src_strides=None``);
- a column is ``NY`` elements of 8 bytes, ``ROW`` bytes apart (``elemsz=8, count=[NY],
  strides=[ROW]``) on both sides; the source is described in ``ep.segment``, like the
  destination in the neighbour's.

With ``--get`` each rank instead pulls its ghost cells from its neighbours' edges with
``ep.vis.get_strided_nbi``, after the barrier. Either way one barrier per step is enough:
a neighbour is at most one step ahead, and then it writes the other block.

At the end rank 0 gets every rank's block with one ``ep.vis.get_strided_nb`` each, straight
into its place in a global array (a 2-D sub-block: the local side is a numpy view), and
compares with the serial numpy computation of the whole grid: they must be equal bit for
bit. Rank 0 prints one line; a wrong answer is an AssertionError (the job exits non-zero).
"""

import math
import sys

import numpy as np

import amnet

NY, NX = 16, 16  # the cells of one block
STEPS = 20
K = 0.2  # heat diffusion number (stable up to 0.25)
F8 = 8
ROW = (NX + 2) * F8  # bytes per row of a block, ghosts included
BLOCK = (NY + 2) * ROW  # bytes per block


def at(p, i, j):
    """Byte offset of cell (i, j), ghosts counted, of block p in every rank's segment."""
    return p * BLOCK + i * ROW + j * F8


def grid_shape(size):
    """PY x PX with PY the largest divisor of size not above its square root."""
    py = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
    return py, size // py


def initial(h, w):
    """The starting grid: a smooth wave plus a hot square, deterministic."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    u = np.sin(2 * np.pi * x / w) * np.cos(2 * np.pi * y / h)
    u[h // 4:h // 2, w // 4:w // 2] += 1.0
    return u


def step(c, up, down, left, right):
    """One heat step; the parallel and serial versions use the same operations in order."""
    return c + K * ((up + down + left + right) - 4 * c)


def serial(h, w, steps):
    u = initial(h, w)
    for _ in range(steps):
        u = step(u, np.roll(u, 1, 0), np.roll(u, -1, 0), np.roll(u, 1, 1), np.roll(u, -1, 1))
    return u


use_get = sys.argv[1:] == ["--get"]
ep = amnet.init()
PY, PX = grid_shape(ep.size)
H, W = PY * NY, PX * NX
ry, rx = divmod(ep.rank, PX)
up, down = ((ry - 1) % PY) * PX + rx, ((ry + 1) % PY) * PX + rx
left, right = ry * PX + (rx - 1) % PX, ry * PX + (rx + 1) % PX

blocks = ep.segment[:2 * BLOCK].view(np.float64).reshape(2, NY + 2, NX + 2)
blocks[0, 1:NY + 1, 1:NX + 1] = initial(H, W)[ry * NY:(ry + 1) * NY, rx * NX:(rx + 1) * NX]
vis = ep.vis

for s in range(STEPS):
    p = s % 2
    b = blocks[p]
    if not use_get:
        # my edges into my neighbours' ghosts of block p; the sources may change as soon as
        # the calls return, but the puts are complete only after wait_nbi
        vis.put_strided_nbi(up, at(p, NY + 1, 1), [], b[1, 1:NX + 1], None, None, F8 * NX, [])
        vis.put_strided_nbi(down, at(p, 0, 1), [], b[NY, 1:NX + 1], None, None, F8 * NX, [])
        vis.put_strided_nbi(left, at(p, 1, NX + 1), [ROW], ep.segment, at(p, 1, 1), [ROW],
                            F8, [NY])
        vis.put_strided_nbi(right, at(p, 1, 0), [ROW], ep.segment, at(p, 1, NX), [ROW],
                            F8, [NY])
        ep.wait_nbi()  # my edges are in my neighbours' segments
        ep.barrier()  # ... and theirs are in mine
    else:
        ep.barrier()  # every block p is complete
        # my ghosts of block p from my neighbours' edges (the mirror image of the puts)
        vis.get_strided_nbi(up, b[0, 1:NX + 1], None, None, at(p, NY, 1), [], F8 * NX, [])
        vis.get_strided_nbi(down, b[NY + 1, 1:NX + 1], None, None, at(p, 1, 1), [], F8 * NX,
                            [])
        vis.get_strided_nbi(left, ep.segment, at(p, 1, 0), [ROW], at(p, 1, NX), [ROW], F8,
                            [NY])
        vis.get_strided_nbi(right, ep.segment, at(p, 1, NX + 1), [ROW], at(p, 1, 1), [ROW],
                            F8, [NY])
        ep.wait_nbi()  # my ghosts hold the data
    blocks[1 - p, 1:NY + 1, 1:NX + 1] = step(b[1:NY + 1, 1:NX + 1], b[0:NY, 1:NX + 1],
                                             b[2:NY + 2, 1:NX + 1], b[1:NY + 1, 0:NX],
                                             b[1:NY + 1, 2:NX + 2])

ep.barrier("done")  # every rank finished its last step before rank 0 reads

if ep.rank == 0:
    result = np.empty((H, W), dtype=np.float64)
    last = STEPS % 2
    handles = []
    for r in range(ep.size):
        y, x = divmod(r, PX)
        dst = result[y * NY:(y + 1) * NY, x * NX:(x + 1) * NX]  # a strided view of result
        # NY rows of NX cells, ROW bytes apart in rank r's segment; C order of dst locally
        handles.append(vis.get_strided_nb(r, dst, None, None, at(last, 1, 1), [ROW], F8 * NX,
                                          [NY]))
    amnet.wait_all(handles)  # every block has landed in result
    expected = serial(H, W, STEPS)
    assert np.array_equal(result, expected), np.abs(result - expected).max()
    print(f"halo_vis: {ep.size} ranks, {PY}x{PX} grid of {NY}x{NX} blocks, {STEPS} steps: "
          f"equals the serial computation (norm {np.linalg.norm(result):.9f}): ok")
ep.barrier("checked")
