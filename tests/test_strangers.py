"""A stranger on the same host attacks a running job: every socket the job listens on (the
bootstrap service, every process's conduit socket) gets well-formed AM frames (a user
handler, system puts into the segment, a Long AM, a bootstrap hello and abort) and garbage,
from a process that does not hold the job's secret (this test's own process). Nothing runs,
no byte of any segment changes, every process counts the refusals in ``ep.statistics()``,
and the job completes with the right answers."""

from __future__ import annotations

import json
import os
import socket
import struct
import time

import msgpack
import pytest
import zmq

from amnet._security import apply_client, make_job_keys
from amnet.core import _sys as S
from amnet.core import _wire as W

JOB = r"""
import json, os, sys, time
import amnet

ran = []


def note(token, x):
    ran.append(x)


ep = amnet.init(handlers=[note])
go = sys.argv[1]
ep.segment[:] = 0
ep.barrier()
if ep.rank == 0:
    addrs = {"bootstrap": ep.bootstrap.address,
             "conduits": [p["conduit"] for p in ep.bootstrap.table][::ep.threads_per_proc],
             "note": ep.handlers.index(f"{note.__module__}.{note.__qualname__}"),
             "segment": ep.segment.nbytes, "T": ep.threads_per_proc}
    print("ADDRS " + json.dumps(addrs), flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    ep.poll()  # runs whatever arrives, so a forged AM that got in would run here
    time.sleep(0.005)
want = int(sys.argv[2])  # refused connections each process must have counted
while ep.statistics().conduit.refused < want and time.monotonic() < deadline:
    ep.poll()
    time.sleep(0.01)
st = ep.statistics()
segment_zero = not ep.segment.any()
ep.barrier()
# the job still computes: a ring of puts and gets across processes and nodes (what I put
# at my successor I read back from it)
peer = (ep.rank + 1) % ep.size
ep.put(peer, 64, bytes([ep.rank + 1]) * 8)
ep.barrier()
got = bytes(ep.get(peer, 64, 8))
print("RESULT " + json.dumps({
    "rank": ep.rank, "ran": ran, "segment_zero": segment_zero, "conduit": st.conduit.name,
    "refused": st.conduit.refused, "ring_ok": got == bytes([ep.rank + 1]) * 8,
}), flush=True)
"""


def _am(flags: int, handler: int, src: int, dst: int, offset: int, *args: int) -> bytes:
    return (W.FIXED.pack(flags, len(args), handler, src, dst, offset)
            + b"".join(a.to_bytes(8, "little", signed=True) for a in args))


def _forged_ams(note: int, dst: int) -> list[list[bytes]]:
    """Well-formed AMs a process of the job could send to rank ``dst``."""
    ones = b"\xff" * 64
    return [
        [_am(W.SHORT, note, 0, dst, 0, 666)],  # run a user handler
        [_am(W.MEDIUM, note, 0, dst, 0, 667), b"payload"],
        [_am(W.LONG, note, 0, dst, 0, 668), ones],  # deposit into the segment, then run
        [_am(W.SYSTEM | W.LONG, S.PUT, 0, dst, 0, 1), ones],  # a system put
        [_am(W.SYSTEM | W.LONG, S.PUT, 0, dst, 128, 2), ones],
    ]


def _garbage(address: str) -> None:
    """Raw bytes that are no protocol at all, on a TCP or abstract Unix socket."""
    if address.startswith("ipc://@"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + address[len("ipc://@"):])
    else:
        host, _, port = address[len("tcp://"):].rpartition(":")
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\xff" * 200)
    s.settimeout(10)
    try:
        while s.recv(1024):  # until the job hangs up on it
            pass
    except OSError:
        pass
    s.close()


def _attack_zmq(ctx: zmq.Context, address: str, kind: int, messages: list[list[bytes]]) -> list:
    socks = []
    for creds in ("none", "wrong-secret", "wrong-curve-keys"):
        s = ctx.socket(kind)
        s.linger = 0
        s.reconnect_ivl = 60_000  # one handshake each
        if creds == "wrong-secret":
            apply_client(s, None, "f" * 32)
        elif creds == "wrong-curve-keys":
            apply_client(s, make_job_keys(), "")
        socks.append(s)  # closed by the caller whatever happens next
        s.connect(address)
        for m in messages:
            try:
                s.send_multipart(m, zmq.NOBLOCK)
            except zmq.Again:  # zmq would not even queue it: nothing got in either
                break
    return socks


def _attack_tcp(address: str, proc: int, procs: int, messages: list[list[bytes]]) -> None:
    """The tcp conduit: hellos without the secret, each followed by the forged AMs."""
    from amnet._security import hello_mac

    body = b""
    for m in messages:
        h, p = m[0], (m[1] if len(m) > 1 else None)
        body += (struct.pack("<IQ", len(h), 0) + h if p is None else
                 struct.pack("<IQ", len(h) | 1 << 31, len(p)) + h + p)
    hello = struct.pack("<4sIIII16s", b"AMNT", 2, 0, proc, procs, os.urandom(16))
    host, _, port = address[len("tcp://"):].rpartition(":")
    for mac in (b"\0" * 32, hello_mac("f" * 32, hello[-16:], hello[:-16])):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(hello + mac + body)
        s.settimeout(10)
        try:
            while s.recv(1024):
                pass
        except OSError:
            pass
        s.close()


@pytest.mark.parametrize("conduit", ["zmq", "tcp"])
@pytest.mark.parametrize("shape", [["-n", "4", "--nodes", "2"],
                                   ["-n", "4", "--nodes", "2", "--threads-per-proc", "2"]],
                         ids=["N4-2nodes", "N4-2nodes-T2"])
def test_a_stranger_gets_nothing_into_a_job(runner, conduit, shape):
    go = runner.tmp / "go"
    want = 4 if conduit == "zmq" else 3  # refusals each process counts (below)
    job = runner.popen(*shape, runner.script("job.py", JOB), str(go), str(want),
                       env={"AMNET_CONDUIT": conduit})
    ctx = zmq.Context()
    socks = []
    try:
        line = job.stdout.readline()
        assert line.startswith("ADDRS "), line + job.stderr.read()
        a = json.loads(line[len("ADDRS "):])
        conduits, note, T = a["conduits"], a["note"], a["T"]
        assert len(conduits) == 4 // T
        hello = {"t": "hello", "kind": "proc", "token": "0" * 32, "proc": 0, "pid": 1,
                 "host": "x", "done": []}
        boot = [[msgpack.packb(hello)],
                [msgpack.packb({"t": "abort", "rank": 0, "code": 3, "msg": "evil"})]]
        socks += _attack_zmq(ctx, a["bootstrap"], zmq.DEALER, boot)
        _garbage(a["bootstrap"])
        for proc, address in enumerate(conduits):
            ams = _forged_ams(note, proc * T)
            if conduit == "zmq":  # 3 handshakes refused + garbage: 4 refusals
                socks += _attack_zmq(ctx, address, zmq.PUSH, ams)
            else:  # 2 hellos refused + garbage: 3 refusals
                _attack_tcp(address, proc, len(conduits), ams)
            _garbage(address)
        time.sleep(0.5)  # the zmq handshakes fail in the background meanwhile
        go.touch()
        out, err = job.communicate(timeout=120)
    finally:
        for s in socks:
            s.close(linger=0)
        ctx.destroy(linger=0)  # a socket left open by a failure must not hang the test
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait()
    assert job.returncode == 0, err
    results = sorted((json.loads(ln[len("RESULT "):]) for ln in out.splitlines()
                      if ln.startswith("RESULT ")), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1, 2, 3], out
    for r in results:
        assert r["conduit"] == conduit
        assert r["ran"] == [], r  # no forged AM ran anywhere
        assert r["segment_zero"] is True, r  # no forged put or Long AM wrote a byte
        assert r["refused"] >= want, r  # each process counted its refusals
        assert r["ring_ok"] is True, r  # and the job's own work came out right
    # the launcher said what it refused at the bootstrap service, and nothing else went wrong
    assert "amnet-run: refused a bootstrap connection that did not prove it holds this " \
           "job's secret; the job goes on" in err
    assert "Traceback" not in err and "evil" not in err
