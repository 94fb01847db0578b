"""The Sobel edge filter on a shared image, rows blocked per thread, halo rows read in bulk.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/upc/sobel.py
    amnet-run -n 4 --nodes 2 examples/upc/sobel.py

The image is a 2-D shared array ``IMG`` of ROWS x COLS float64, declared with block size
``COLS * rows_per_thread``: the row-major flattened index is cut into one block of whole rows
per thread, so thread t owns rows ``[t*R, (t+1)*R)`` and ``IMG.local`` is exactly those rows
(as ``shared [COLS*R] double img[ROWS][COLS]`` in UPC). The output ``EDGE`` has the same
layout.

Each thread writes its rows of a synthetic image (a disc, a rectangle and a ramp) into
``IMG.local``, meets the others in a barrier, then reads its two halo rows -- the last row of
the thread above and the first of the thread below -- with one bulk slice read each
(``IMG[r, :]``: one transfer, whichever node owns it) and computes the gradient magnitude
``sqrt(gx^2 + gy^2)`` of the 3x3 Sobel operators for its rows into ``EDGE.local``. The image
border (outer rows and columns) is 0.

Thread 0 then reads the whole image and result in bulk (``IMG[:, :]``) and compares with a
serial numpy Sobel of the whole image: they must be equal bit for bit (every pixel is the
same arithmetic on the same values). Thread 0 prints one line; a wrong answer is an
AssertionError.
"""

import numpy as np

import upc_rt as upc

ROWS, COLS = 96, 80
THRESHOLD = 1.0


def image(rows):
    """The synthetic image's rows ``rows`` (an index array), COLS columns each."""
    y = rows[:, None].astype(np.float64)
    x = np.arange(COLS, dtype=np.float64)[None, :]
    disc = ((y - 40) ** 2 + (x - 30) ** 2 < 18 ** 2) * 2.0
    rect = ((y >= 60) & (y < 85) & (x >= 45) & (x < 70)) * 1.5
    return disc + rect + 0.01 * x


def sobel(padded):
    """Gradient magnitude of the rows inside ``padded`` (which has one extra row above and
    below); columns 0 and COLS-1 are 0."""
    p = padded
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    out = np.zeros((p.shape[0] - 2, p.shape[1]))
    out[:, 1:-1] = np.sqrt(gx * gx + gy * gy)
    return out


upc.init()
me, THREADS = upc.MYTHREAD, upc.THREADS
R = -(-ROWS // THREADS)  # rows per thread (the last threads may have fewer, or none)

IMG = upc.shared_array((ROWS, COLS), "f8", COLS * R)
EDGE = upc.shared_array((ROWS, COLS), "f8", COLS * R)
first = min(me * R, ROWS)
last = min(first + R, ROWS)  # my rows: [first, last)
n = last - first
assert IMG.local.size == n * COLS

IMG.local[:] = image(np.arange(first, last)).ravel()
upc.barrier()

if n:
    padded = np.zeros((n + 2, COLS))  # no row outside the image: the border is set below
    padded[1:-1] = IMG.local.reshape(n, COLS)
    if first > 0:
        padded[0] = IMG[first - 1, :]  # halo row from the thread above, one bulk read
    if last < ROWS:
        padded[-1] = IMG[last, :]  # halo row from the thread below
    out = sobel(padded)
    if first == 0:
        out[0] = 0.0  # the image border
    if last == ROWS:
        out[-1] = 0.0
    EDGE.local[:] = out.ravel()
upc.barrier()

if me == 0:
    whole = IMG[:, :]
    assert np.array_equal(whole, image(np.arange(ROWS)))
    padded = np.zeros((ROWS + 2, COLS))
    padded[1:-1] = whole
    expected = sobel(padded)
    expected[0] = expected[-1] = 0.0
    got = EDGE[:, :]
    assert got.shape == (ROWS, COLS)
    assert np.array_equal(got, expected), f"{np.count_nonzero(got != expected)} pixels differ"
    edges = int(np.count_nonzero(got > THRESHOLD))
    print(f"sobel: {ROWS}x{COLS} image on {THREADS} threads ({R} rows each, halo rows read "
          f"in bulk): equal to the serial numpy Sobel, {edges} edge pixels above "
          f"{THRESHOLD}, sum {got.sum():.6f}: ok")
upc.barrier()
