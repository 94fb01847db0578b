"""A runtime's handler with a bug (tests/test_extension_errors.py): rank 0 sends a system AM
of the application's extension ``boomext`` to rank 1, whose handler raises. On every route
(in-line between rank-threads, the shared-memory queues, each conduit; the handler run from C
or from the Python dispatcher) the job must end as a user handler's exception ends it: exit
status 1, the traceback from rank 1, a diagnosis naming the extension and the handler.

argv[1]: ``wait`` (rank 0 waits for a reply that never comes: it once hung until --timeout)
or ``ff`` (fire and forget, then a barrier: the job once exited 0); argv[2]: ``warm`` (rank 1
attached its port first: the C route runs the handler) or ``cold`` (the Python dispatcher
meets the extension first).
"""

import sys

import amnet

BOOM = 0


def h_boom(port, src, args, payload, is_reply):
    raise ValueError(f"boom {args[0]} in a runtime's handler on rank {port.rank}")


EXT = amnet.Extension("boomext", [h_boom])
amnet.register_extension(EXT)
mode, warmth = sys.argv[1], sys.argv[2]
ep = amnet.init()
if warmth == "warm":
    ep.port("boomext")
ep.barrier()
if ep.rank == 0:
    port = ep.port("boomext")
    if mode == "wait":
        opid, op = port.op(1)
        port.send(1, BOOM, (opid,))
        port.handle(op, "boom").wait()
    else:
        port.send(1, BOOM, (7,))
ep.barrier()
ep.barrier()
print(f"rank {ep.rank} survived", flush=True)
