"""A job for the real Slurm tests (tests/test_cluster.py): a Medium AM and a put to another
rank, a reduce_all over every rank, and a line per rank saying where it ran (its host name), what
ran it (the Slurm job and step ids that srun gives its tasks) and on which conduit. The recipe
in docs/conduits.md runs it as its ``app.py``."""

import os
import socket

import numpy as np

import amnet
from amnet.coll import ADD

GOT: list[bytes] = []


def note(token, payload):
    GOT.append(bytes(payload))


ep = amnet.init()
ep.register_handlers([note])
ep.barrier()
peer = (ep.rank + 1) % ep.size
ep.request_medium(peer, note, b"from %d" % ep.rank)
ep.put(peer, 8, np.full(8, ep.rank + 1, np.uint8))
ep.wait_until(lambda: len(GOT) == 1, timeout=30)
ep.barrier()
left = (ep.rank - 1) % ep.size
total = np.zeros(1, np.int64)
ep.coll.reduce_all(total, np.array([ep.rank + 1], np.int64), ADD)
ok = (GOT == [b"from %d" % left] and bytes(ep.segment[8:16]) == bytes([left + 1]) * 8
      and int(total[0]) == ep.size * (ep.size + 1) // 2)
print(f"rank {ep.rank} host {socket.gethostname()} job {os.environ.get('SLURM_JOB_ID')} step "
      f"{os.environ.get('SLURM_STEP_ID')} ok {ok} conduit {ep.statistics().conduit.name}",
      flush=True)
ep.barrier()
