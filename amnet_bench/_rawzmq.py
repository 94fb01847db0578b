"""The ``raw-zmq`` peer of the ``am`` and ``rma`` suites: pyzmq between two processes.

The same transport and message shapes as amnet's zmq conduit, without amnet: each process
binds one PULL socket on ``tcp://127.0.0.1`` and connects one PUSH socket to the other's
(two TCP connections, high-water marks off, like the conduit). A message is a header frame of
``20 + 8 * nargs`` bytes (the AM header's size) and, when there is data, a payload frame.
Received headers are copied (``recv()``), payloads are not (``recv(copy=False)``); sends copy
(pyzmq's default), as amnet's replies and ``put_nbi`` do.

Two processes run this file as a script (no amnet import, nothing else in the timed path):

- ``server``: binds, prints its port, then serves phases until told to quit;
- ``client``: binds, connects to the server's port, runs the plan (JSON on the command line)
  and prints its samples (seconds) as one JSON line.

Phases (the client names each with a 1-byte control frame, then the server runs a tight loop
for it until the next control frame):

- ``e`` echo: the server answers each message with a header of the same size and the same
  payload (Short: header only; Medium: header + payload), like ``reply_short`` /
  ``reply_medium`` of what came in;
- ``p`` put: the server copies each payload into a preallocated numpy buffer at the header's
  offset (as amnet writes into the target segment) and answers with a 28-byte ack header;
- ``g`` get: the server answers with a header and ``nbytes`` of its buffer; the client copies
  them into its ``out`` array.

Wait strategy (``--mode``): ``block`` receives with a blocking ``recv()``; ``spin`` loops on
``recv(zmq.NOBLOCK)``, catching ``zmq.Again`` (the usual pyzmq polling idiom) and yielding the
core (``os.sched_yield``) after each miss, as amnet's spin mode does. With
``--latency-us L`` every received data message is held L µs before it is acted on
(``AMNET_NET_LATENCY_US``'s delay, which amnet applies to messages from other nodes).
Placement (last argument): ``none``, or :func:`pin_process` ``same`` / ``split`` (the client is
side 0, the server side 1; the amnet jobs pin rank r as side r).

:func:`run_pair` (used by the suites) starts both processes, feeds the plan and returns the
client's result.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from typing import Any

HEADER = struct.Struct("<BBHIIQq")  # the AM header with one argument: 28 bytes
QUIT = b"q"
TIMEOUT_S = 300.0


# -- both sides ---------------------------------------------------------------------------
def _receiver(sock: Any, mode: str, zmq: Any) -> Any:
    if mode == "block":
        return sock.recv
    again = zmq.Again
    flag = zmq.NOBLOCK
    recv = sock.recv
    yield_ = os.sched_yield

    def spin() -> bytes:
        while True:
            try:
                return recv(flag)
            except again:
                yield_()  # as amnet's spin mode: let the zmq I/O thread have the core

    return spin


def _hold(latency: float) -> None:
    if latency:
        due = time.perf_counter() + latency
        while time.perf_counter() < due:
            pass


def pin_process(pin: str, role: int) -> int | None:
    """Pin every thread of this process (the Python thread and libzmq's) to one core.

    ``pin``: ``none`` (leave it to the scheduler), ``same`` (the first usable core, for both
    sides of a pair) or ``split`` (side ``role`` on the ``role``-th usable core). Returns the
    core, or None when not pinned (``none``, or no ``/proc/self/task`` to enumerate threads).
    """
    import os

    if pin == "none" or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        cores = sorted(os.sched_getaffinity(0))
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return None
    cpu = cores[0] if pin == "same" else cores[role % len(cores)]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {cpu})
        except OSError:
            pass
    return cpu


def _open(zmq: Any) -> tuple[Any, Any, int]:
    ctx = zmq.Context(io_threads=1)
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 0)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    return ctx, pull, port


def _push(ctx: Any, zmq: Any, port: int) -> Any:
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)
    push.setsockopt(zmq.LINGER, 500)
    push.connect(f"tcp://127.0.0.1:{port}")
    return push


# -- server -------------------------------------------------------------------------------
def server(mode: str, latency_us: float, buf_size: int, pin: str = "none") -> None:
    import numpy as np
    import zmq

    ctx, pull, port = _open(zmq)
    pin_process(pin, 1)  # after the socket: libzmq's threads exist
    print(port, flush=True)
    recv = _receiver(pull, mode, zmq)
    hello = recv()
    push = _push(ctx, zmq, int(hello))
    push.send(b"ready")
    lat = latency_us * 1e-6
    buf = np.zeros(buf_size, dtype=np.uint8)
    send = push.send
    more = zmq.SNDMORE
    unpack = HEADER.unpack
    pack = HEADER.pack
    phase = recv()
    while phase != QUIT:
        nxt = None
        if phase == b"e":  # echo: a reply of the same shape
            while True:
                h = recv()
                if len(h) == 1:
                    nxt = h
                    break
                p = pull.recv(copy=False).buffer if pull.rcvmore else None
                _hold(lat)
                f, n, hi, src, dst, off, a = unpack(h)
                r = pack(f | 4, n, hi, dst, src, off, a)
                if p is None:
                    send(r)
                else:
                    send(r, more)
                    send(p)
        elif phase == b"p":  # put: copy into the buffer, ack
            while True:
                h = recv()
                if len(h) == 1:
                    nxt = h
                    break
                p = pull.recv(copy=False).buffer
                _hold(lat)
                f, n, hi, src, dst, off, a = unpack(h)
                k = p.nbytes
                buf[off:off + k] = np.frombuffer(p, dtype=np.uint8)
                send(pack(f | 4, n, hi, dst, src, 0, a))
        elif phase == b"g":  # get: reply with the bytes asked for
            while True:
                h = recv()
                if len(h) == 1:
                    nxt = h
                    break
                _hold(lat)
                f, n, hi, src, dst, off, a = unpack(h)
                send(pack(f | 4, n, hi, dst, src, 0, a), more)
                send(memoryview(buf[off:off + a]))
        else:
            raise SystemExit(f"raw-zmq server: unknown phase {phase!r}")
        phase = nxt
    push.close(linger=1000)
    pull.close(linger=0)
    ctx.term()


# -- client -------------------------------------------------------------------------------
def client(port: int, mode: str, latency_us: float, plan: dict[str, Any],
           pin: str = "none") -> dict[str, Any]:
    import numpy as np
    import zmq

    ctx, pull, myport = _open(zmq)
    core = pin_process(pin, 0)
    recv = _receiver(pull, mode, zmq)
    push = _push(ctx, zmq, port)
    push.send(str(myport).encode())
    if recv() != b"ready":
        raise SystemExit("raw-zmq client: bad handshake")
    lat = latency_us * 1e-6
    send = push.send
    more = zmq.SNDMORE
    pack = HEADER.pack
    pc = time.perf_counter
    out: dict[str, Any] = {"mode": mode, "core": core}

    def wait_reply() -> None:
        recv()
        if pull.rcvmore:
            pull.recv(copy=False)
        _hold(lat)

    def round_trips(payload: Any, warmup: int, iters: int) -> tuple[list[float], float]:
        samples = [0.0] * iters
        c0 = 0.0
        for i in range(warmup + iters):
            if i == warmup:
                c0 = time.thread_time()
            h = pack(0 if payload is None else 1, 1, 0, 0, 1, 0, i)
            t0 = pc()
            if payload is None:
                send(h)
            else:
                send(h, more)
                send(payload)
            wait_reply()
            if i >= warmup:
                samples[i - warmup] = pc() - t0
        return samples, (time.thread_time() - c0) / iters

    if "am" in plan:
        am = plan["am"]
        send(b"e")
        out["cpu"] = {}
        out["short"], out["cpu"]["short"] = round_trips(None, am["warmup"], am["iters"])
        out["medium"] = {}
        for size in am["sizes"]:
            payload = np.full(size, 7, dtype=np.uint8)
            out["medium"][str(size)], out["cpu"][str(size)] = round_trips(
                payload, am["warmup"], am["iters"])

    if "rma" in plan:
        rma = plan["rma"]
        window = rma["window"]
        out["bw"], out["bw_cpu"], out["put"], out["get"] = {}, {}, {}, {}
        send(b"p")
        for size, batches in rma["bw"]:
            src = np.full(size, 3, dtype=np.uint8)
            headers = [pack(9, 1, 0, 0, 1, k * size, k) for k in range(window)]
            warm = rma["warmup"]
            t0 = c0 = 0.0
            for b in range(warm + batches):
                if b == warm:
                    c0 = time.thread_time()
                    t0 = pc()
                for h in headers:  # a window of puts, then every ack
                    send(h, more)
                    send(src)
                for _ in headers:
                    recv()
                    _hold(lat)
            out["bw"][str(size)] = pc() - t0
            out["bw_cpu"][str(size)] = time.thread_time() - c0
        it, warm = rma["lat_iters"], rma["lat_warmup"]
        for size in rma["lat_sizes"]:
            data = np.full(size, 5, dtype=np.uint8)
            into = np.empty(size, dtype=np.uint8)
            h = pack(9, 1, 0, 0, 1, 0, 0)
            samples = [0.0] * it
            for i in range(warm + it):  # blocking put: send, wait for the ack
                t0 = pc()
                send(h, more)
                send(data)
                recv()
                _hold(lat)
                if i >= warm:
                    samples[i - warm] = pc() - t0
            out["put"][str(size)] = samples
            send(b"g")
            gh = pack(10, 1, 2, 0, 1, 0, size)
            samples = [0.0] * it
            for i in range(warm + it):  # blocking get: ask, copy the reply into `into`
                t0 = pc()
                send(gh)
                recv()
                p = pull.recv(copy=False).buffer
                _hold(lat)
                into[:] = np.frombuffer(p, dtype=np.uint8)
                if i >= warm:
                    samples[i - warm] = pc() - t0
            out["get"][str(size)] = samples
            send(b"p")
    send(QUIT)
    push.close(linger=1000)
    pull.close(linger=0)
    ctx.term()
    return out


# -- the suites' side ---------------------------------------------------------------------
def run_pair(plan: dict[str, Any], mode: str, latency_us: float = 0.0,
             buf_size: int = 1 << 20, pin: str = "none") -> dict[str, Any]:
    """Run a server and a client (two fresh interpreters) through ``plan``; return the
    client's result. Raises RuntimeError naming the side that failed."""
    me = [sys.executable, __file__]
    srv = subprocess.Popen([*me, "server", mode, str(latency_us), str(buf_size), pin],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, text=True)
    try:
        line = srv.stdout.readline() if srv.stdout else ""
        if not line.strip().isdigit():
            srv.kill()
            err = srv.communicate(timeout=10)[1]
            raise RuntimeError(f"raw-zmq server did not start: {line!r} {err.strip()}")
        cli = subprocess.run([*me, "client", mode, str(latency_us), line.strip(),
                              json.dumps(plan), pin], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)
        if cli.returncode != 0:
            raise RuntimeError(f"raw-zmq client exited with status {cli.returncode}: "
                               f"{cli.stderr.strip()}")
        _, err = srv.communicate(timeout=30)
        if srv.returncode != 0:
            raise RuntimeError(f"raw-zmq server exited with status {srv.returncode}: "
                               f"{err.strip()}")
        return json.loads(cli.stdout.strip().splitlines()[-1])
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def main(argv: list[str]) -> None:
    role, mode, latency = argv[0], argv[1], float(argv[2])
    if mode not in ("block", "spin"):
        raise SystemExit(f"raw-zmq: mode must be block or spin, got {mode!r}")
    if role == "server":
        server(mode, latency, int(argv[3]), argv[4])
    elif role == "client":
        print(json.dumps(client(int(argv[3]), mode, latency, json.loads(argv[4]), argv[5])),
              flush=True)
    else:
        raise SystemExit(f"raw-zmq: unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
