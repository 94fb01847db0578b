"""An async key-value service on every rank (amnet.aio): each rank owns the keys that hash
to it and answers other ranks' requests while its own coroutine awaits.

    amnet-run -n 4 examples/aio/kv_service.py
    amnet-run -n 4 --threads-per-proc 2 examples/aio/kv_service.py
    amnet-run -n 4 --nodes 2 examples/aio/kv_service.py

``kv_put`` and ``kv_get`` are rpc functions: they run on the owner, in handler context, on
the owner's own ``store`` (every rank-thread has its own module globals). Every rank stores
KEYS keys, all in flight at once (``asyncio.gather`` of awaited rpcs), waits for the others
with a non-blocking barrier it awaits (its loop keeps serving meanwhile), then reads every
key its right neighbour wrote, again all at once, and checks them; a missing key's KeyError
comes back at the ``await``. Rank 0 prints one line; a wrong answer is an AssertionError.
"""

import asyncio
import zlib

import numpy as np

import amnet
import amnet.aio

KEYS = 200

store = {}  # this rank's share of the store


def owner(key, size):
    return zlib.crc32(key.encode()) % size


@amnet.handler("rpc")
def kv_put(key, value):
    store[key] = value


@amnet.handler("rpc")
def kv_get(key):
    return store[key]  # a missing key raises KeyError at the caller's await


def key_of(rank, i):
    return f"rank{rank}/item{i}"


async def main(ep):
    n = ep.size
    mine = [key_of(ep.rank, i) for i in range(KEYS)]
    await asyncio.gather(*(ep.rpc(owner(k, n), kv_put, k, (ep.rank, i))
                           for i, k in enumerate(mine)))
    await ep.coll.world.barrier_nb()  # every rank stored its keys (the loop serves meanwhile)
    right = (ep.rank + 1) % n
    theirs = [key_of(right, i) for i in range(KEYS)]
    got = await asyncio.gather(*(ep.rpc(owner(k, n), kv_get, k) for k in theirs))
    assert got == [[right, i] for i in range(KEYS)], got[:3]
    try:
        await ep.rpc(owner("no such key", n), kv_get, "no such key")
        raise AssertionError("a missing key was found")
    except KeyError:
        pass
    await ep.coll.world.barrier_nb()  # nobody leaves while others may still ask
    counts = np.zeros(n, np.int64)
    await ep.coll.world.gather_all_nb(counts, np.array([len(store)], np.int64))
    return counts.tolist()


ep = amnet.init(handlers=[kv_put, kv_get])
counts = amnet.aio.run(main)
assert sum(counts) == KEYS * ep.size
if ep.rank == 0:
    print(f"kv_service: {ep.size} ranks stored {KEYS} keys each with {KEYS} rpcs in flight "
          f"(owned {counts}), read back their right neighbour's, a missing key raised "
          "KeyError: ok")
