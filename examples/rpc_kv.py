"""A tiny distributed key-value store built on ep.rpc: each rank owns the keys that hash to it.

    amnet-run -n 4 --nodes 2 examples/rpc_kv.py
    amnet-run -n 4 --nodes 2 --threads-per-proc 2 examples/rpc_kv.py

``owner(key)`` is a hash of the key modulo the number of ranks. It must be the same on every
rank, so it is ``zlib.crc32`` and not Python's ``hash()``, which is salted per process for
strings. ``kv_put``, ``kv_get`` and ``kv_count`` are registered in every rank's handler table
and run on the owner, in handler context: they touch only the owner's own ``store`` and
return at once (an rpc function may not block or send).

Every rank writes KEYS_PER_RANK keys with values that say who wrote them, waits for all its
puts with amnet.wait_all, meets the others in a barrier, then reads every key of its right
neighbour and checks the values. A missing key shows how an exception raised by the remote
function comes back: KeyError is a builtin, so it is re-raised as itself. Rank 0 prints one
line; any wrong answer is an AssertionError.
"""

import zlib

import amnet

KEYS_PER_RANK = 16

store = {}  # this rank's share of the store (every rank-thread has its own module globals)


def owner(key, size):
    return zlib.crc32(key.encode()) % size


@amnet.handler("rpc")
def kv_put(key, value):
    """Store value under key; return the previous value (or None)."""
    old = store.get(key)
    store[key] = value
    return old


@amnet.handler("rpc")
def kv_get(key):
    return store[key]  # a missing key raises KeyError, which the caller's wait() re-raises


@amnet.handler("rpc")
def kv_count():
    return len(store)


ep = amnet.init(handlers=[kv_put, kv_get, kv_count])


def key_of(rank, i):
    return f"rank{rank}/item{i}"


# put: one rpc per key, all in flight at once, then wait for every acknowledgement
handles = []
for i in range(KEYS_PER_RANK):
    key = key_of(ep.rank, i)
    value = {"writer": ep.rank, "i": i, "payload": [i] * (i % 4), "text": key.upper()}
    handles.append(ep.rpc(owner(key, ep.size), kv_put, key, value))
assert amnet.wait_all(handles) == [None] * KEYS_PER_RANK  # no key was there before
ep.barrier("stored")

# get: read the right neighbour's keys from wherever they live
right = (ep.rank + 1) % ep.size
for i in range(KEYS_PER_RANK):
    key = key_of(right, i)
    got = ep.rpc(owner(key, ep.size), kv_get, key).wait()
    assert got == {"writer": right, "i": i, "payload": [i] * (i % 4), "text": key.upper()}, got

# a key nobody wrote: the owner's KeyError comes back as a KeyError here
missing = f"rank{ep.rank}/never-written"
try:
    ep.rpc(owner(missing, ep.size), kv_get, missing).wait()
except KeyError as e:
    assert missing in str(e), e
else:
    raise AssertionError("kv_get of a missing key should raise KeyError")

# how many keys each rank owns: they add up to every key written
counts = [ep.rpc(r, kv_count).wait() for r in range(ep.size)]
assert sum(counts) == ep.size * KEYS_PER_RANK, counts
assert counts[ep.rank] == len(store)
ep.barrier("checked")

if ep.rank == 0:
    print(f"rpc_kv: {ep.size} ranks stored {sum(counts)} keys (owned {counts}), every get "
          "matched, a missing key raised KeyError: ok")
