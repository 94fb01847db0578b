"""An application-defined amnet extension (tests/test_upc.py::test_outside_extension):
registered in the script before amnet.init(), one system handler pair, round trips with and
without a payload, and a message its handler refuses (``port.refuse()``): counted, nothing
runs, and the job goes on. (A handler that raises ends the job instead:
tests/test_extension_errors.py.)"""

import struct

import amnet

ECHO, BACK, PICKY = 0, 1, 2


def h_echo(port, src, args, payload, is_reply):
    if is_reply or len(args) != 2:
        return port.refuse()
    port.reply(src, BACK, (args[0], args[1] * 2), bytes(payload) if payload is not None else None)


def h_back(port, src, args, payload, is_reply):
    if not is_reply:
        return port.refuse()
    op = port.pending(args[0], src)
    if op is not None:
        port.finish(args[0], op, (args[1], None if payload is None else bytes(payload)))


def h_picky(port, src, args, payload, is_reply):
    if len(args) != 1:  # what a peer must not send: refused and counted
        return port.refuse()
    raise AssertionError("h_picky only refuses in this job")


def attach(port):
    return {"port": port, "hooks": []}


EXT = amnet.Extension("echo", [h_echo, h_back, h_picky], attach=attach)
amnet.register_extension(EXT)
ep = amnet.init()
state = ep.extension("echo")
port = ep.port("echo")
assert state["port"] is port
peer = (ep.rank + 1) % ep.size
opid, op = port.op(peer)
port.send(peer, ECHO, (opid, ep.rank + 10), b"hi" * ep.rank)
value, data = port.handle(op, "echo").wait()
assert value == 2 * (ep.rank + 10) and data == b"hi" * ep.rank, (value, data)
opid, op = port.op(peer)
send = port.sender(ECHO)  # the hot-path sender: the same message, no payload
send(peer, (opid, -7))
assert port.handle(op, "echo").wait() == (-14, None)
if ep.threads_per_proc == 1:  # the peer is another process
    try:  # hot-path args are not checked: what does not pack fails as the docstring says
        send(peer, (opid, "x"))
        raise AssertionError("a str packed as an AM argument")
    except struct.error:
        pass
    port.send(peer, PICKY, (1, 2, 3), b"x")
    ep.barrier()  # the peer's PICKY ran before its barrier message (FIFO)
    assert ep.statistics().refused == 1, ep.statistics()  # nothing else was refused
    opid, op = port.op(peer)  # and the job goes on
    port.send(peer, ECHO, (opid, 1))
    assert port.handle(op, "echo").wait() == (2, None)
port.add_sync_hook(state["hooks"].append)
ep.fence()
ep.barrier()
assert state["hooks"] == ["fence", "barrier"], state["hooks"]
if ep.rank == 0:
    print("echo ok", ep.size)
