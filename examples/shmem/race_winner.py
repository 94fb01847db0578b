"""A race: the first PE to swap its number into a word on PE 0 wins and tells every PE with
put_signal.

    amnet-run -n 4 examples/shmem/race_winner.py
    amnet-run -n 4 --threads-per-proc 2 examples/shmem/race_winner.py
    amnet-run -n 4 --nodes 2 examples/shmem/race_winner.py

The OpenSHMEM specification's race-winner example, with the news spread by signals: every
PE runs ``atomic_compare_swap(race_winner, -1, mype, 0)``; the one that finds -1 there won
(the compare-and-swap is atomic, so exactly one does). The winner then ``put_signal``\\s
its number into ``winner`` on every PE, setting each PE's ``signal`` to 1 after the data;
each PE waits with ``signal_wait_until`` and, because a PE that sees the signal sees the
data, reads the winner's number at once. Meanwhile every PE also takes a finishing
position with ``atomic_fetch_inc`` on a counter on the last PE.

Which PE wins varies from run to run, so the checks are what must hold every time: every
PE learnt the same winner, it is the number in ``race_winner`` on PE 0 (``atomic_fetch``),
exactly one PE won (a ``sum_reduce`` of who says they won), and the finishing positions
are ``0..n-1`` each once. PE 0 prints one line, without the winner's number. A wrong answer
is an AssertionError (exit status 1).
"""

import numpy as np

import shmem_rt as shmem

mype, npes = shmem.my_pe(), shmem.n_pes()

race_winner = shmem.array([-1], dtype=np.int64)
winner = shmem.full(1, -1, dtype=np.int64)
signal = shmem.new_signal()
finish = shmem.zeros(1, dtype=np.int64)  # the copy on the last PE hands out positions

oldval = shmem.atomic_compare_swap(race_winner, -1, mype, 0)
won = oldval == -1
if won:
    me = np.array([mype], dtype=np.int64)
    for pe in range(npes):
        shmem.put_signal(winner, me, pe, signal, 1, shmem.SIGNAL_SET)
    shmem.quiet()
position = shmem.atomic_fetch_inc(finish, npes - 1)

seen = shmem.signal_wait_until(signal, shmem.CMP_EQ, 1)
assert seen == 1, seen
assert winner[0] == shmem.atomic_fetch(race_winner, 0), (winner[0], race_winner)
assert 0 <= winner[0] < npes and (winner[0] == mype) == won, (winner[0], mype, won)

# exactly one winner; the positions are a permutation
wins = shmem.array([int(won)], dtype=np.int64)
shmem.sum_reduce(wins, wins)
assert wins[0] == 1, wins[0]
mine = shmem.array([position], dtype=np.int64)
positions = shmem.zeros(npes, dtype=np.int64)
shmem.fcollect(positions, mine)
assert sorted(positions.tolist()) == list(range(npes)), positions
if mype == 0:
    print(f"race_winner: {npes} PEs raced with atomic_compare_swap on PE 0; exactly one won "
          f"and told all {npes} with put_signal, every PE saw the same winner, finishing "
          f"positions 0..{npes - 1} each taken once: ok")

shmem.barrier_all()
shmem.del_signal(signal)
for a in (positions, mine, wins, finish, winner, race_winner):
    shmem.free(a)
