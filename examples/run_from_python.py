"""Start an amnet job from Python with amnet.run() and check what every rank returns.

    python examples/run_from_python.py

amnet.run(fn, n=...) runs fn(ep) on every rank of a new job and returns the results as a
list indexed by rank. fn travels by name, so it must be a module-level function; the ranks
load this file again under another name, which is why the driver code below sits under
``if __name__ == "__main__":``.

The second job fails on purpose (rank 2 raises), to show the exception re-raised in the
caller; rank 2 prints its traceback on stderr, and the script says beforehand that it is
expected.
"""

import amnet


def where_am_i(ep):
    """Gather every rank's place in the job and return (my rank, the whole table)."""
    table = ep.bootstrap.allgather([ep.rank, ep.node, ep.proc, ep.thread, ep.host])
    ep.barrier("gathered")
    return ep.rank, table


def fails_on_rank_2(ep):
    if ep.rank == 2:
        raise ValueError(f"rank {ep.rank} does not like its input")
    ep.barrier()


if __name__ == "__main__":
    # 8 ranks: 2 rank-threads per process, 2 processes per node, so 2 (simulated) nodes.
    n, p, t = 8, 2, 2
    results = amnet.run(where_am_i, n=n, procs_per_node=p, threads_per_proc=t)

    assert len(results) == n
    for rank, (me, table) in enumerate(results):
        assert me == rank, (rank, me)
        assert table == results[0][1], "every rank gathered the same table"
    for rank, node, proc, thread, host in results[0][1]:
        local_proc = proc % p
        assert rank == (node * p + local_proc) * t + thread, (rank, node, proc, thread)
        print(f"rank {rank}: node {node}, proc {proc}, thread {thread} on {host}")

    # An exception in a rank is re-raised here, with the rank named in a note. The failing
    # rank also prints its traceback on stderr: say so first, so nobody takes it for a bug.
    print("next: a job whose rank 2 raises ValueError on purpose; the traceback that follows "
          "(rank 2's stderr) is expected", flush=True)
    try:
        amnet.run(fails_on_rank_2, n=4)
    except ValueError as e:
        assert "rank 2" in str(e)
        assert any("raised on rank 2" in note for note in e.__notes__), e.__notes__
        assert isinstance(e.__cause__, amnet.RemoteTraceback)
        print(f"caught {type(e).__name__} from the job: {e.__notes__[0]}")
    else:
        raise AssertionError("the job should have failed")

    print("ok")
