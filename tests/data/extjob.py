"""An application-defined amnet extension (tests/test_upc.py::test_outside_extension):
registered in the script before amnet.init(), one system handler pair, a round trip."""

import amnet

ECHO, BACK = 0, 1


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


def attach(port):
    return {"port": port, "hooks": []}


EXT = amnet.Extension("echo", [h_echo, h_back], attach=attach)
amnet.register_extension(EXT)
ep = amnet.init()
state = ep.extension("echo")
port = ep.port("echo")
assert state["port"] is port
port.add_sync_hook(state["hooks"].append)
peer = (ep.rank + 1) % ep.size
opid, op = port.op(peer)
port.send(peer, ECHO, (opid, ep.rank + 10), b"hi" * ep.rank)
value, data = port.handle(op, "echo").wait()
assert value == 2 * (ep.rank + 10) and data == b"hi" * ep.rank, (value, data)
ep.fence()
ep.barrier()
assert state["hooks"] == ["fence", "barrier"], state["hooks"]
if ep.rank == 0:
    print("echo ok", ep.size)
