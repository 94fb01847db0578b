"""Short, Medium and Long active messages: request, reply, and a checksum that proves it.

    amnet-run -n 4 --nodes 2 examples/am_pingpong.py
    amnet-run -n 4 --nodes 2 --threads-per-proc 2 examples/am_pingpong.py

Every rank plays ping-pong with the rank ``size // 2`` away from it (on the other simulated
node when there are two), ROUNDS times in each category:

- Short: ``ping_short(token, round, value)`` replies ``pong_short(round, value + 1)``.
- Medium: ``ping_medium(token, payload, round)`` checksums the payload and replies with the
  payload reversed and the checksum as an argument.
- Long: the payload lands in the peer's segment at ``LONG_IN``; ``ping_long`` checksums the
  deposited bytes and replies with a Long reply that writes them back, reversed, at
  ``LONG_BACK`` in the sender's segment.

The sender checks every checksum and every returned byte. Rank 0 prints one line; any wrong
answer is an AssertionError, so the job exits non-zero.
"""

import zlib

import numpy as np

import amnet

ROUNDS = 20
MEDIUM_BYTES = 4096
LONG_BYTES = 64 * 1024
LONG_IN = 0  # where a Long request lands in the target's segment
LONG_BACK = 1 << 20  # where the Long reply lands in the sender's segment

# This rank's state. amnet-run gives every rank-thread its own copy of this module's globals,
# and a handler runs with the globals of the rank it was sent to.
replies = []  # (category, round, value) of every reply received, in arrival order


# -- request handlers: run on the target, reply at most once, send nothing else --------------
@amnet.handler("short", nargs=2)
def ping_short(token, rnd, value):
    token.reply_short(pong_short, rnd, value + 1)


@amnet.handler("medium", nargs=1)
def ping_medium(token, payload, rnd):
    # payload is a memoryview valid only during this call: use it (or copy it) here
    data = bytes(payload)
    token.reply_medium(pong_medium, data[::-1], rnd, zlib.crc32(data))


@amnet.handler("long", nargs=1)
def ping_long(token, view, rnd):
    # view: the deposited bytes, in my segment at LONG_IN (they stay there after the call)
    data = bytes(view)
    token.reply_long(pong_long, data[::-1], LONG_BACK, rnd, zlib.crc32(data))


# -- reply handlers: run on the original sender, send nothing -------------------------------
@amnet.handler("short", nargs=2)
def pong_short(token, rnd, value):
    replies.append(("short", rnd, value))


@amnet.handler("medium", nargs=2)
def pong_medium(token, payload, rnd, crc):
    replies.append(("medium", rnd, (crc, bytes(payload))))


@amnet.handler("long", nargs=2)
def pong_long(token, view, rnd, crc):
    replies.append(("long", rnd, (crc, len(view))))


def payload_for(rank, rnd, nbytes):
    """Deterministic pseudo-random bytes, different for every rank and round."""
    return np.random.default_rng([rank, rnd]).integers(0, 256, nbytes, dtype=np.uint8)


ep = amnet.init(handlers=[ping_short, ping_medium, ping_long,
                          pong_short, pong_medium, pong_long])
peer = (ep.rank + ep.size // 2) % ep.size
total_crc = 0

for rnd in range(ROUNDS):
    # Short: two int64 arguments there, one back
    ep.request_short(peer, ping_short, rnd, 1000 * ep.rank + rnd)
    ep.wait_until(lambda: len(replies) == 1)
    assert replies.pop() == ("short", rnd, 1000 * ep.rank + rnd + 1)

    # Medium: a payload of MEDIUM_BYTES (at most ep.max_medium), checksummed by the peer
    data = payload_for(ep.rank, rnd, MEDIUM_BYTES)
    ep.request_medium(peer, ping_medium, data, rnd)
    data_crc = zlib.crc32(data)
    ep.wait_until(lambda: len(replies) == 1)
    cat, got_rnd, (crc, back) = replies.pop()
    assert (cat, got_rnd, crc) == ("medium", rnd, data_crc), (cat, got_rnd, crc, data_crc)
    assert back == data.tobytes()[::-1]

    # Long: LONG_BYTES into the peer's segment, then back into mine, reversed
    data = payload_for(ep.rank, ROUNDS + rnd, LONG_BYTES)
    ep.request_long(peer, ping_long, data, LONG_IN, rnd)
    data_crc = zlib.crc32(data)
    ep.wait_until(lambda: len(replies) == 1)
    cat, got_rnd, (crc, nbytes) = replies.pop()
    assert (cat, got_rnd, crc, nbytes) == ("long", rnd, data_crc, LONG_BYTES)
    assert (ep.segment[LONG_BACK:LONG_BACK + LONG_BYTES] == data[::-1]).all()
    total_crc = zlib.crc32(data_crc.to_bytes(4, "little"), total_crc)

# Every rank's checksum chain, gathered so that rank 0 can print one line for the job. (A rank
# that waits here keeps running handlers, so it still answers its peer's last pings.)
crcs = ep.bootstrap.allgather(total_crc)
assert crcs[ep.rank] == total_crc
if ep.rank == 0:
    print(f"am_pingpong: {ep.size} ranks x {ROUNDS} rounds of Short/Medium/Long "
          f"request+reply ok, checksum {zlib.crc32(repr(crcs).encode()):08x}")
