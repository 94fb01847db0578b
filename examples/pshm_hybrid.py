"""Processes and rank-threads sharing a node: direct writes, a node counter, in-line and PSHM AMs.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/pshm_hybrid.py
    amnet-run -n 8 --procs-per-node 2 --threads-per-proc 2 examples/pshm_hybrid.py
    amnet-run -n 4 --nodes 2 examples/pshm_hybrid.py
    python examples/pshm_hybrid.py --from-python      # the first shape, started by amnet.run

Within a node every rank can address every node-local segment (docs/pshm.md). Each rank:

1. writes a block into the segment of every rank of its node (itself included) through
   ``ep.segment_view(r)``: plain numpy stores into the mapped segment, no message; then
   raises a per-writer flag in that segment with ``ep.atomic(r, ..., "set", 1)``. The atomic
   is ordered after the stores (a sequentially consistent hardware atomic within a node), so
   the owner, which waits for the flags with ``ep.atomic(me, ..., "get")``, reads complete
   blocks, on any CPU. (With ``--no-pshm`` the view of a rank of another process is None and
   the block goes by ``ep.put`` instead.)
2. takes INCREMENTS tickets from a counter in the segment of its node's first rank with
   ``fadd``: within a node a hardware atomic on the mapped word, no message;
3. sends ROUNDS Medium AMs to every rank of its node. To a rank of its own process the
   handler runs in-line, on the sending thread, and its reply has run before
   ``request_medium`` returns; to a rank of another process the AM goes through the
   shared-memory queues and the handler runs there (its reply says which process ran it).

Every answer is checked (a wrong one raises AssertionError and the job exits non-zero);
rank 0 prints one line, the same for every mapping of the same ranks and nodes.
"""

import os
import sys
import threading
import zlib

import numpy as np

import amnet

INCREMENTS = 20  # fadds per rank on its node's counter
ROUNDS = 4  # Medium AMs from every rank to every rank of its node
BLOCK = 4096  # bytes each rank writes into each segment of its node
COUNTER = 0  # int64 ticket counter, in the segment of the node's first rank
FLAGS = 64  # int64 flag per node-local writer: its block is complete
BLOCKS = 8192  # the node-local writers' blocks, BLOCK bytes each

REPLIES: dict[int, list] = {}  # rank -> its replies (amnet.run: one module per process)


def check(ep, ok, what):
    if not ok:
        raise AssertionError(f"pshm_hybrid: rank {ep.rank}: {what}")


def block_of(writer, owner):
    """What ``writer`` puts into ``owner``'s segment (int64 words)."""
    return np.arange(BLOCK // 8, dtype=np.int64) + writer * 1_000_003 + owner * 7919


def payload_of(src, dest, rnd):
    return bytes((src * 31 + dest * 7 + rnd + i) % 256 for i in range(100 + 50 * rnd))


def ping(token, payload, rnd):  # runs at the target, in-line or from the shared queues
    token.reply_short(pong, rnd, zlib.crc32(payload), os.getpid(), threading.get_native_id())


def pong(token, rnd, crc, pid, tid):  # runs back at the sender (token.rank)
    REPLIES[token.rank].append((token.source, rnd, crc, pid, tid))


def job(ep):
    """The whole example for one rank; returns rank 0's summary line (None elsewhere)."""
    me = ep.rank
    local = ep.local_ranks
    first = local[0]
    REPLIES[me] = []
    ep.register_handlers([ping, pong])  # collective, like init(handlers=...)

    # Views: every rank of my node with PSHM on; only my process's ranks with it off.
    for r in range(ep.size):
        want = ep.same_process(r) or (ep.is_local(r) and ep.config.pshm)
        check(ep, (ep.segment_view(r) is not None) == want,
              f"segment_view({r}) is {'None' if want else 'a view'}")

    # 1. my block into every segment of my node, then my flag there
    flag = FLAGS + 8 * (me - first)
    at = BLOCKS + BLOCK * (me - first)
    for r in local:
        data = block_of(me, r)
        view = ep.segment_view(r)
        if view is not None:
            view[at:at + BLOCK].view(np.int64)[:] = data  # plain stores, no message
        else:
            ep.put(r, at, data)
        ep.atomic(r, flag, "set", 1)  # ordered after the stores: publishes the block

    # 2. tickets from my node's counter
    tickets = [ep.atomic(first, COUNTER, "fadd", 1) for _ in range(INCREMENTS)]
    check(ep, tickets == sorted(tickets), f"tickets out of order: {tickets}")

    # 3. Medium AMs to every rank of my node
    mine = REPLIES[me]
    for rnd in range(ROUNDS):
        for dest in local:
            payload = payload_of(me, dest, rnd)
            before = len(mine)
            ep.request_medium(dest, ping, payload, rnd)
            if ep.same_process(dest):  # in-line: the reply ran during the call
                check(ep, len(mine) == before + 1, f"in-line AM to {dest}: no reply yet")
            ep.wait_until(lambda n=before: len(mine) > n)
            src, r2, crc, pid, tid = mine[-1]
            check(ep, (src, r2, crc) == (dest, rnd, zlib.crc32(payload)),
                  f"AM to {dest} round {rnd}: reply {mine[-1][:3]}")
            if ep.same_process(dest):
                check(ep, (pid, tid) == (os.getpid(), threading.get_native_id()),
                      f"in-line AM to {dest} ran on another thread or process")
            else:
                check(ep, pid != os.getpid(), f"AM to {dest} ran in my own process")

    # Every block written into my segment: wait for each writer's flag, then read it.
    seg = ep.segment
    for w in local:
        while ep.atomic(me, FLAGS + 8 * (w - first), "get") != 1:  # an ordered load
            ep.poll()
        got = seg[BLOCKS + BLOCK * (w - first):][:BLOCK].view(np.int64)
        check(ep, np.array_equal(got, block_of(w, me)), f"block from rank {w} is wrong")

    ep.barrier("counted")  # every fadd of the node is done
    total = ep.atomic(first, COUNTER, "get")
    check(ep, total == INCREMENTS * len(local), f"node counter {total}")
    everyone = ep.bootstrap.allgather([first, total, tickets])
    node_tickets = sorted(t for f, _, ts in everyone if f == first for t in ts)
    check(ep, node_tickets == list(range(total)), "a ticket was lost or handed out twice")
    ep.barrier("checked")
    if me != 0:
        return None
    counters = dict((f, t) for f, t, _ in everyone)  # node's first rank -> its counter
    sizes = [sum(f == n0 for f, _, _ in everyone) for n0 in counters]  # ranks per node
    blocks = sum(s * s for s in sizes)
    return (f"pshm_hybrid: {ep.size} ranks on {ep.nodes} node(s): {blocks} blocks written "
            f"into node-local segments (through segment views where mapped) and checked, "
            f"node counters "
            f"{list(counters.values())} (every ticket once), {ROUNDS * blocks} node-local "
            f"Medium AMs answered: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--from-python"]:  # start the job here (amnet.run), print rank 0's line
        results = amnet.run(job, n=4, procs_per_node=2, threads_per_proc=2)
        print(results[0])
    else:  # a rank of amnet-run (or a one-rank job under plain python)
        line = job(amnet.init())
        if line is not None:
            print(line)
