"""A job for the real-host tests (tests/test_cluster.py): every rank sends a rank on the other
node a Medium AM and a put, both carrying the canary ``AMTEST_CANARY``, joins a reduce_all
over every rank, checks what it got,
and prints where it ran (its network namespace's inode). Rank 0 writes the job's secret to
the file ``AMTEST_SECRET_FILE`` names (on the shared file system, not over the network): the
wire test looks for it in the capture."""

import os

import numpy as np

import amnet
from amnet.coll import ADD

CANARY = os.environ["AMTEST_CANARY"].encode()
GOT: list[bytes] = []


def note(token, payload):
    GOT.append(bytes(payload))


ep = amnet.init()
ep.register_handlers([note])
if ep.rank == 0 and os.environ.get("AMTEST_SECRET_FILE"):
    from amnet.core import _runtime  # the test looks inside: the secret is nowhere public

    with open(os.environ["AMTEST_SECRET_FILE"], "w") as f:
        f.write(_runtime._process.spec["token"])
ns = os.stat("/proc/self/ns/net").st_ino
ep.barrier()
peer = (ep.rank + ep.size // 2) % ep.size  # ranks are placed by node: the other node's
ep.request_medium(peer, note, CANARY)
ep.put(peer, 64, np.frombuffer(CANARY, dtype=np.uint8))
ep.wait_until(lambda: len(GOT) == 1, timeout=30)
ep.barrier()
total = np.zeros(1, np.int64)
ep.coll.reduce_all(total, np.array([ep.rank + 1], np.int64), ADD)
ok = (GOT == [CANARY] and bytes(ep.segment[64:64 + len(CANARY)]) == CANARY
      and int(total[0]) == ep.size * (ep.size + 1) // 2)
conduit = ep.statistics().conduit.name
print(f"rank {ep.rank} node {ep.node} netns {ns} ok {ok} conduit {conduit}", flush=True)
ep.barrier()
