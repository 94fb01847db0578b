"""Hello from every rank: where it runs in the job, then a check that all ranks agree.

    amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 examples/hello.py
"""

import amnet

ep = amnet.init()
print(f"hello from rank {ep.rank} of {ep.size}: node {ep.node}/{ep.nodes}, "
      f"proc {ep.proc}/{ep.procs}, thread {ep.thread}/{ep.threads_per_proc} on {ep.host}")

# Every rank gathers every rank's (node, proc, thread) and checks the numbering rule.
table = ep.bootstrap.allgather([ep.node, ep.proc, ep.thread])
for rank, (node, proc, thread) in enumerate(table):
    assert rank == (node * ep.procs_per_node + proc % ep.procs_per_node) * ep.threads_per_proc \
        + thread, (rank, node, proc, thread)
ep.barrier()
