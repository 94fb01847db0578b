"""A shared counter on rank 0, incremented by every rank with remote atomics.

    amnet-run -n 4 --nodes 2 examples/counter_atomics.py
    amnet-run -n 4 --nodes 2 --threads-per-proc 2 examples/counter_atomics.py

Rank 0's segment holds three words: an int64 ticket counter at offset 0, a float64 sum at
offset 8 and an int64 maximum at offset 16. Every rank takes INCREMENTS tickets with
``fadd`` (the old value it gets back is its ticket), adds its rank to the float sum, and
records its rank with ``fmax``. Every atomic is a hardware atomic on the word, run by the
caller itself when rank 0's segment is mapped in its process (ranks of rank 0's node) and by
rank 0's process for the others, so no increment is lost and no two ranks get the same
ticket.

The ranks then meet in a split-phase barrier: ``barrier_notify`` says "my updates are done",
the rank does some local work while the others catch up (``barrier_try`` polls), and
``barrier_wait`` returns once every rank notified. Only then does anyone read the results.
Every check is an assert; rank 0 prints one line.
"""

import amnet

INCREMENTS = 50
TICKETS, FSUM, MAX = 0, 8, 16  # byte offsets of the three words in rank 0's segment

ep = amnet.init()

# Every segment starts zeroed; set the words explicitly anyway (rank 0, before the barrier).
if ep.rank == 0:
    ep.atomic(0, TICKETS, "set", 0)
    ep.atomic(0, FSUM, "set", 0.0, dtype="f8")
    ep.atomic(0, MAX, "set", -1)
ep.barrier("initialised")

my_tickets = [ep.atomic(0, TICKETS, "fadd", 1) for _ in range(INCREMENTS)]
ep.atomic(0, FSUM, "fadd", float(ep.rank), dtype="f8")
ep.atomic(0, MAX, "fmax", ep.rank)
assert my_tickets == sorted(my_tickets), "one rank's fadds complete in the order it made them"

# Split phase: announce that my updates are done, then overlap local work with the barrier.
ep.barrier_notify("counted")
local_work = 0
while not ep.barrier_try():  # polls; True once every rank has notified
    local_work += sum(range(1000))  # stands for computation that needs no remote data
# (barrier_wait() would block instead; barrier_try returned True, so the barrier is over)

total = ep.atomic(0, TICKETS, "get")
fsum = ep.atomic(0, FSUM, "get", dtype="f8")
biggest = ep.atomic(0, MAX, "get")
assert total == ep.size * INCREMENTS, (total, ep.size * INCREMENTS)
assert fsum == sum(range(ep.size)), fsum
assert biggest == ep.size - 1, biggest

# Every ticket 0 .. total-1 was handed out exactly once, across all ranks. (A rank waiting in
# a bootstrap collective keeps serving AMs, so rank 0 still answers the others' atomics.)
everyone = ep.bootstrap.allgather(my_tickets)
tickets = sorted(t for ts in everyone for t in ts)
assert tickets == list(range(ep.size * INCREMENTS)), "a ticket was lost or handed out twice"

# A compare-and-swap that only one rank can win.
ep.barrier("tickets checked")
won = ep.atomic(0, TICKETS, "cas", total, -ep.rank - 1) == total
winners = ep.bootstrap.allgather(won)
assert winners.count(True) == 1, winners

if ep.rank == 0:
    winner = winners.index(True)
    assert ep.segment[TICKETS:TICKETS + 8].view("<i8")[0] == -winner - 1
    print(f"counter_atomics: {ep.size} ranks x {INCREMENTS} fadds -> counter = {total} "
          f"(expected {ep.size * INCREMENTS}), every ticket handed out once, "
          f"sum of ranks = {fsum:g}, max rank = {biggest}, one cas winner: ok")
