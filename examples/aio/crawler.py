"""A crawler of a distributed graph (amnet.aio): thousands of rpcs in flight from one
coroutine, while every rank serves the others.

    amnet-run -n 4 examples/aio/crawler.py
    amnet-run -n 4 --threads-per-proc 2 examples/aio/crawler.py
    amnet-run -n 4 --nodes 2 examples/aio/crawler.py

The graph has VERTICES vertices, each with three out-edges given by a formula; vertex ``v``
lives on rank ``v % size``, which alone holds its adjacency list (``adjacency``, built for its
own vertices). Every rank crawls breadth-first from its own start vertex: each level asks the
owners of the whole frontier for their neighbours at once (``asyncio.gather`` of awaited
rpcs; the largest level has well over a thousand in flight), and checks the levels against
a breadth-first search of the formula done locally. Rank 0 prints one line; a wrong answer
is an AssertionError.
"""

import asyncio

import numpy as np

import amnet
import amnet.aio

VERTICES = 6000

adjacency = {}  # this rank's vertices -> their out-neighbours


def edges(v):
    return [(v * 7 + 1) % VERTICES, (v * 13 + 5) % VERTICES, (v * v + 3) % VERTICES]


@amnet.handler("rpc")
def neighbours(v):
    return adjacency[v]  # only the owner has it


def bfs_levels(start, out):
    seen, frontier, levels = {start}, [start], []
    while frontier:
        levels.append(len(frontier))
        nxt = []
        for v in frontier:
            for w in out(v):
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        frontier = nxt
    return levels


async def main(ep):
    n = ep.size
    for v in range(ep.rank, VERTICES, n):
        adjacency[v] = edges(v)
    await ep.coll.world.barrier_nb()  # every rank holds its part of the graph
    start = ep.rank * 17
    seen, frontier, levels, widest = {start}, [start], [], 0
    while frontier:
        levels.append(len(frontier))
        widest = max(widest, len(frontier))
        lists = await asyncio.gather(*(ep.rpc(v % n, neighbours, v) for v in frontier))
        nxt = []
        for out in lists:
            for w in out:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        frontier = nxt
    assert levels == bfs_levels(start, edges), (levels, bfs_levels(start, edges))
    await ep.coll.world.barrier_nb()  # the others may still be crawling through us
    every = np.zeros((n, 3), np.int64)
    await ep.coll.world.gather_all_nb(every, np.array([len(seen), len(levels), widest]))
    return every.tolist()


ep = amnet.init(handlers=[neighbours])
every = amnet.aio.run(main)
if ep.rank == 0:
    print(f"crawler: {ep.size} ranks crawled a {VERTICES}-vertex graph from their own "
          f"vertices: reached {[r for r, _, _ in every]} in {[d for _, d, _ in every]} "
          f"levels, up to {max(w for _, _, w in every)} rpcs in flight, every level equal to "
          "a local breadth-first search: ok")
