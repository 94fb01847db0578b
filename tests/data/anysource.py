"""Plain mpi4py, no amnet: how a process may take messages from any source (docs/conduits.md,
the mpi conduit). The first half of the ranks each send a burst of N requests (64 B) to a
partner in the second half, which answers each; every rank takes what comes with one of:

- ``posted``: 16 receives kept posted from ``MPI_ANY_SOURCE`` (of 64 KiB, an envelope's
  size), completed in the order they were posted and posted again: the mpi conduit's ring
  until it lost messages over MPICH's ucx module;
- ``mprobe``: matched probes from any source (``MPI_Improbe``, then ``MPI_Mrecv``): what the
  conduit does now;
- ``named``: 16 receives kept posted from the partner's rank.

``mpiexec -n 4 python anysource.py MODE [N] [SIZE]`` prints one line per rank, ``rank R
MODE: GOT of N in S s``, after at most 5 s."""

import collections
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
me, half = comm.rank, comm.size // 2
partner = (me + half) % comm.size
asker = me < half
mode = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1200
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 65552
TAG, DEPTH = 7, 16
source = partner if mode == "named" else MPI.ANY_SOURCE
posted: collections.deque = collections.deque()
sends: list = []
got = 0


def post() -> None:
    b = bytearray(SIZE)
    posted.append((comm.Irecv([b, MPI.BYTE], source=source, tag=TAG), b))


def take(b: bytearray) -> None:
    global got
    got += 1
    if not asker and b[0] == 1:  # a request: answer it
        a = bytearray(64)
        a[0] = 2
        sends.append((comm.Isend([a, MPI.BYTE], dest=partner, tag=TAG), a))


def progress() -> None:
    if mode == "mprobe":
        while (msg := comm.improbe(source=MPI.ANY_SOURCE, tag=TAG)) is not None:
            b = bytearray(SIZE)
            msg.Recv([b, MPI.BYTE])
            take(b)
        return
    while posted and posted[0][0].Test():
        take(posted.popleft()[1])
        post()


if mode != "mprobe":
    for _ in range(DEPTH):
        post()
t0 = time.monotonic()
if asker:
    for _ in range(N):
        q = bytearray(64)
        q[0] = 1
        sends.append((comm.Isend([q, MPI.BYTE], dest=partner, tag=TAG), q))
        progress()
while got < N and time.monotonic() - t0 < 5:
    progress()
    sends[:] = [(r, b) for r, b in sends if not r.Test()]
print(f"rank {me} {mode}: {got} of {N} in {time.monotonic() - t0:.2f} s", flush=True)
comm.Barrier()
for r, _ in posted:  # (cancelled, not waited for: a cancel may never complete on ucx)
    r.Cancel()
