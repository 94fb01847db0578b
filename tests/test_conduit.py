"""Conduit conformance (docs/design.md §7), in the style of dask.distributed's comm tests.

One set of ``check_*`` functions runs against every conduit in
``amnet.conduits.CONDUITS`` (plugins of the ``amnet.conduits`` entry-point group
included): two instances in this process (proc 0 and proc 1 of a
two-process job) exchange messages through the public interface only. A new conduit that
registers itself gets the whole suite unchanged.

Then malformed input: a stranger's zmq socket sends frames the zmq conduit must drop and
count, and, in a real job, forged AM headers that the engine must refuse without running
anything or writing a byte.
"""

from __future__ import annotations

import functools
import struct
import sys
import threading
import time

import conduitjobs
import pytest
import zmq

import amnet
from amnet.conduits import CONDUITS, MAX_HEADER, Conduit, load_plugins

MiB = 1 << 20
load_plugins()  # conduits of other installed packages get the same suite


SECRET = "0123456789abcdef0123456789abcdef"  # the test job's secret (spec["token"])


def make(name: str, proc: int, secret: str = SECRET) -> Conduit:
    return CONDUITS[name](proc, 2, "127.0.0.1", None, amnet.Config.resolve(env={}),
                          secret=secret)


#: Conduits whose checks run in a child process (``data/conduitchild.py``): MPI, once
#: initialized, stays so until its process ends, and this process forks other tests' jobs.
IN_CHILD = {"mpi"}


#: What an Open MPI run of the mpi conduit's checks needs in its environment: mpi4py's wheel
#: loads its Open MPI build (``MPI4PY_MPIABI``), and Open MPI runs as root in CI.
OPEN_MPI_ENV = {"MPI4PY_MPIABI": "openmpi", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@functools.cache
def child_results(name: str, open_mpi: bool = False) -> dict[str, str]:
    """Every check's outcome against conduit ``name``, run in a child process (with
    ``open_mpi``: on Open MPI rather than the MPI mpi4py loads by default)."""
    import json
    import os
    import subprocess
    from pathlib import Path

    child = Path(__file__).parent / "data" / "conduitchild.py"
    env = {**os.environ, **OPEN_MPI_ENV} if open_mpi else None
    p = subprocess.run([sys.executable, str(child), name], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL, env=env)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines, f"the {name} checks' process failed: {p.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(params=sorted(CONDUITS))
def pair(request):
    """Two connected conduits of one registered kind: proc 0 and proc 1 of 2 (for a conduit
    of IN_CHILD, its name: the checks run in a child process)."""
    if request.param in IN_CHILD:
        yield request.param
        return
    a, b = make(request.param, 0), make(request.param, 1)
    try:
        for c in (a, b):
            c.set_peers([a.address, b.address])
        yield a, b
    finally:
        a.close()
        b.close()


def recv_one(c: Conduit, timeout: float = 10.0) -> tuple[bytes, bytes | None]:
    """The next message, its payload copied into bytes (for easy comparison)."""
    deadline = time.monotonic() + timeout
    while True:
        m = c.recv()
        if m is not None:
            header, payload = m
            return bytes(header), None if payload is None else bytes(memoryview(payload))
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no message within {timeout} s")
        c.wait_readable(min(left, 0.5))


def recv_n(c: Conduit, n: int, timeout: float = 20.0) -> list[tuple[bytes, bytes | None]]:
    deadline = time.monotonic() + timeout
    return [recv_one(c, max(0.1, deadline - time.monotonic())) for _ in range(n)]


def assert_idle(c: Conduit, settle: float = 0.2) -> None:
    """Nothing more arrives (waiting ``settle`` seconds for stragglers)."""
    c.wait_readable(settle)
    m = c.recv()
    assert m is None, f"unexpected message {m!r}"


def header(i: int, tag: bytes = b"H") -> bytes:
    return tag + struct.pack("<q", i)


# -- the conformance checks ---------------------------------------------------------------
def check_identity(a: Conduit, b: Conduit) -> None:
    assert a.address != b.address and isinstance(a.address, str) and a.address
    assert a.proc == 0 and b.proc == 1 and a.procs == b.procs == 2
    assert isinstance(a.fileno(), int)
    assert a.fileno() >= 0 if type(a).pollable else a.fileno() == -1
    st = a.statistics()
    assert st.name == type(a).name and CONDUITS[st.name] is type(a)
    assert st.address == a.address
    assert (st.sent, st.received, st.bytes_sent, st.bytes_received, st.dropped) == (0,) * 5


def check_recv_none_when_idle(a: Conduit, b: Conduit) -> None:
    assert a.recv() is None and b.recv() is None
    a.send(1, b"one")
    assert recv_one(b) == (b"one", None)
    assert b.recv() is None


def check_header_only(a: Conduit, b: Conduit) -> None:
    for h in (b"x", bytes(range(20)), b"\0" * MAX_HEADER, b"\xff" * 148):
        a.send(1, h)
        assert recv_one(b) == (h, None)
    b.send(0, b"back")
    assert recv_one(a) == (b"back", None)


def check_header_and_payload(a: Conduit, b: Conduit, size: int) -> None:
    payload = bytes((i * 7 + size) % 251 for i in range(size)) if size < MiB else \
        (bytes(range(251)) * (size // 251 + 1))[:size]
    a.send(1, b"hdr", payload)
    h, p = recv_one(b)
    assert h == b"hdr"
    # an empty payload is a payload (a 0-byte put is still a put), not "no payload"
    assert p is not None and len(p) == size and p == payload
    # payloads of every bytes-like kind
    for kind in (bytearray(payload), memoryview(payload), memoryview(bytearray(payload))):
        a.send(1, b"k", kind)
        assert recv_one(b) == (b"k", payload)


def check_payload_buffer_is_bytes_like(a: Conduit, b: Conduit) -> None:
    a.send(1, b"h", b"abc")
    m = None
    while m is None:
        b.wait_readable(1.0)
        m = b.recv()
    h, p = m
    assert isinstance(h, bytes) and h == b"h"
    assert memoryview(p).nbytes == 3 and bytes(memoryview(p)) == b"abc"


def check_fifo_1000(a: Conduit, b: Conduit) -> None:
    sent = []
    for i in range(1000):
        payload = None if i % 3 == 0 else struct.pack("<q", i) * (i % 17)
        a.send(1, header(i), payload)
        sent.append((header(i), payload))
    assert recv_n(b, 1000) == sent
    assert_idle(b)


def check_mixed_kinds_keep_order(a: Conduit, b: Conduit) -> None:
    """Headers alone, small and large payloads (bytes, typed 2-D arrays, views), copied or
    not, by position or keyword, interleaved: delivered in the order sent, intact (the mpi
    conduit sends and takes the common case in C and hands the rest to its Python: neither
    may overtake the other)."""
    import numpy as np

    rng = np.random.default_rng(7)
    big = rng.integers(0, 256, MiB + 3, dtype=np.uint8)
    words = np.arange(60, dtype=np.int64).reshape(6, 10)
    mid = memoryview(bytes(range(256)) * 24)  # 6 KiB: in line, but over a small copy's size
    sent = []
    for i in range(48):
        k = i % 6
        h = header(i)
        if k == 0:
            a.send(1, h)
            sent.append((h, None))
        elif k == 1:
            a.send(1, h, b"s" * (i % 9))
            sent.append((h, b"s" * (i % 9)))
        elif k == 2:
            a.send(1, h, payload=mid, copy=False)
            sent.append((h, bytes(mid)))
        elif k == 3:
            a.send(1, h, big, True)
            sent.append((h, big.tobytes()))
        elif k == 4:
            a.send(1, h, words, copy=True)
            sent.append((h, words.tobytes()))
        else:
            a.send(1, h, big[: 20000 + i], copy=False)
            sent.append((h, big[: 20000 + i].tobytes()))
    assert recv_n(b, len(sent), timeout=60) == sent
    assert_idle(b)


def check_send_to_self(a: Conduit, b: Conduit) -> None:
    for i in range(50):
        a.send(0, header(i, b"S"), b"self" * i if i % 2 else None)
    got = recv_n(a, 50)
    assert got == [(header(i, b"S"), b"self" * i if i % 2 else None) for i in range(50)]
    assert b.recv() is None


def check_both_directions_at_once(a: Conduit, b: Conduit) -> None:
    for i in range(200):
        a.send(1, header(i, b"A"))
        b.send(0, header(i, b"B"), b"b" * i)
    assert recv_n(b, 200) == [(header(i, b"A"), None) for i in range(200)]
    assert recv_n(a, 200) == [(header(i, b"B"), b"b" * i) for i in range(200)]


def check_wait_readable(a: Conduit, b: Conduit) -> None:
    t0 = time.monotonic()
    assert b.wait_readable(0.3) is False
    took = time.monotonic() - t0
    assert 0.25 <= took < 2.0, took
    t0 = time.monotonic()
    assert b.wait_readable(0) is False
    assert time.monotonic() - t0 < 0.5
    a.send(1, b"wake")
    t0 = time.monotonic()
    assert b.wait_readable(10.0) is True
    assert time.monotonic() - t0 < 5.0
    assert b.wait_readable(0) is True  # still queued: level-triggered
    assert recv_one(b) == (b"wake", None)
    # None blocks until a message comes (sent from another thread after a while)
    timer = threading.Timer(0.2, a.send, (1, b"later"))
    timer.start()
    t0 = time.monotonic()
    try:
        assert b.wait_readable(None) is True
    finally:
        timer.join()
    assert time.monotonic() - t0 >= 0.1
    assert recv_one(b) == (b"later", None)


def check_recv_wait(a: Conduit, b: Conduit) -> None:
    t0 = time.monotonic()
    assert b.recv_wait(0.3) is None
    assert 0.25 <= time.monotonic() - t0 < 2.0
    assert b.recv_wait(0) is None
    a.send(1, b"queued", b"p")
    m = b.recv_wait(10.0)
    assert m is not None and bytes(m[0]) == b"queued" and bytes(memoryview(m[1])) == b"p"
    timer = threading.Timer(0.2, a.send, (1, b"later"))
    timer.start()
    try:
        m = b.recv_wait(None)
    finally:
        timer.join()
    assert m is not None and bytes(m[0]) == b"later" and m[1] is None
    assert b.recv_wait(0.05) is None


def check_recv_ready_hint_is_no_promise(a: Conduit, b: Conduit) -> None:
    t0 = time.monotonic()
    assert b.recv(True) is None  # told "readable" when it is not: still no blocking
    assert b.recv(ready=True) is None
    assert time.monotonic() - t0 < 1.0
    a.send(1, b"x")
    assert b.wait_readable(10.0)
    assert b.recv(ready=True) == (b"x", None)


def check_payloads_stay_valid_while_referenced(a: Conduit, b: Conduit) -> None:
    sizes = [1, 100, 70000, MiB]
    for i, n in enumerate(sizes):
        a.send(1, header(i), bytes([i + 1]) * n)
    kept = []
    while len(kept) < len(sizes):
        m = b.recv_wait(10.0)
        assert m is not None
        kept.append(m)  # no copy: later receives must not overwrite earlier payloads
    for i, (h, p) in enumerate(kept):
        assert bytes(h) == header(i)
        assert bytes(memoryview(p)) == bytes([i + 1]) * sizes[i]


def check_copy_false_payloads(a: Conduit, b: Conduit) -> None:
    import numpy as np

    bufs = [np.random.default_rng(i).integers(0, 256, MiB + i, dtype=np.uint8)
            for i in range(3)]
    bufs.append(bytearray(b"small" * 10))
    for i, buf in enumerate(bufs):
        a.send(1, header(i), buf, copy=False)
    got = recv_n(b, len(bufs))
    for i, buf in enumerate(bufs):  # not changed until delivered, as the contract asks
        assert got[i] == (header(i), bytes(memoryview(buf).cast("B")))


def check_copy_true_payload_may_change_at_once(a: Conduit, b: Conduit) -> None:
    """copy=True (the default): the caller may overwrite the payload once send returns. The
    payloads are big enough that they are still on their way when that happens."""
    big = 16 * MiB
    bufs = [bytearray(bytes([i + 1]) * big) for i in range(3)]
    small = bytearray(b"tiny")
    for i, buf in enumerate(bufs):
        a.send(1, header(i), buf)
        buf[:] = b"\xee" * big
    a.send(1, b"small", small)
    small[:] = b"XXXX"
    for i in range(3):
        h, p = recv_one(b)
        assert h == header(i) and len(p) == big
        assert p.count(bytes([i + 1])) == big, "the payload changed after send returned"
    assert recv_one(b) == (b"small", b"tiny")


def check_concurrent_senders(a: Conduit, b: Conduit) -> None:
    """4 threads send at once (2 to proc 1, 2 to self): all arrive, each thread's in order."""
    per = 2000
    barrier = threading.Barrier(4)
    errors = []

    def sender(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per):
                a.send(1 if t < 2 else 0, struct.pack("<qq", t, i),
                       bytes([t]) * (i % 5 + 1) if i % 4 else None)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible (GIL builds)
    try:
        for th in threads:
            th.start()
        got_b = recv_n(b, 2 * per, timeout=30)
        got_a = recv_n(a, 2 * per, timeout=30)
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    for got, ts in ((got_b, (0, 1)), (got_a, (2, 3))):
        for t in ts:
            mine = [(h, p) for h, p in got if struct.unpack("<qq", h)[0] == t]
            assert [struct.unpack("<qq", h)[1] for h, _ in mine] == list(range(per))
            assert [p for _, p in mine] == [bytes([t]) * (i % 5 + 1) if i % 4 else None
                                            for i in range(per)]
    st = a.statistics()
    assert st.sent == 4 * per
    assert st.received == 2 * per and b.statistics().received == 2 * per


def check_statistics(a: Conduit, b: Conduit) -> None:
    sizes = [None, 0, 5, 1000, MiB]
    for i, n in enumerate(sizes):
        a.send(1, header(i), None if n is None else b"p" * n)
    recv_n(b, len(sizes))
    b.send(0, b"reply", b"r" * 10)
    recv_one(a)
    sa, sb = a.statistics(), b.statistics()
    payload = sum(n or 0 for n in sizes)
    assert (sa.sent, sa.received, sb.sent, sb.received) == (len(sizes), 1, 1, len(sizes))
    assert sa.bytes_sent == sb.bytes_received >= payload
    assert sb.bytes_sent == sa.bytes_received >= 10
    assert sa.dropped == sb.dropped == 0
    assert 1 <= sa.peers <= 2 and 1 <= sb.peers <= 2
    with pytest.raises((AttributeError, TypeError)):  # a frozen snapshot
        sa.sent = 99
    a.send(1, b"more", b"m" * 7)
    recv_one(b)
    assert a.statistics().sent == sa.sent + 1 and sa.sent == len(sizes)
    assert a.statistics().bytes_sent >= sa.bytes_sent + 7


def check_close_idempotent(a: Conduit, b: Conduit) -> None:
    a.send(1, b"before close", b"x" * 100)
    assert recv_one(b) == (b"before close", b"x" * 100)
    a.close()
    a.close()
    a.close(linger=0)
    b.close(linger=0)
    b.close()
    a.statistics()  # still answers after close


CHECKS = [
    check_identity, check_recv_none_when_idle, check_header_only,
    *(functools.partial(check_header_and_payload, size=n) for n in (0, 1, MiB)),
    check_payload_buffer_is_bytes_like, check_fifo_1000, check_mixed_kinds_keep_order,
    check_send_to_self,
    check_both_directions_at_once, check_wait_readable, check_recv_wait,
    check_recv_ready_hint_is_no_promise, check_payloads_stay_valid_while_referenced,
    check_copy_false_payloads,
    check_copy_true_payload_may_change_at_once, check_concurrent_senders, check_statistics,
    check_close_idempotent,
]


def _id(check) -> str:
    if isinstance(check, functools.partial):
        return f"{check.func.__name__[6:]}-{check.keywords['size']}"
    return check.__name__[6:]


@pytest.mark.parametrize("check", CHECKS, ids=_id)
def test_conformance(pair, check):
    if isinstance(pair, str):
        outcome = child_results(pair)[_id(check)]
        assert outcome == "ok", f"in the child process:\n{outcome}"
    else:
        check(*pair)


def test_conformance_of_the_mpi_conduit_on_open_mpi():
    """The mpi conduit calls the MPI library from C with the library's own handle types:
    MPICH's are ints, Open MPI's pointers. The whole suite, on Open MPI (mpi4py's wheel
    carries a build for it; the library is Debian's ``libopenmpi``)."""
    import os
    import subprocess

    probe = subprocess.run(
        [sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **OPEN_MPI_ENV},
        stdin=subprocess.DEVNULL)
    if probe.returncode != 0 or "Open MPI" not in probe.stdout:
        pytest.skip("mpi4py cannot load Open MPI here (apt-get install libopenmpi-dev): "
                    + (probe.stderr.strip().splitlines() or ["-"])[-1])
    results = child_results("mpi", open_mpi=True)
    failed = {k: v for k, v in results.items() if not k.endswith(":s") and v != "ok"}
    assert not failed, failed
    assert len([k for k in results if not k.endswith(":s")]) == len(CHECKS)


def test_mpich_settings_leave_the_network_module_to_the_library():
    """What amnet sets before MPI_Init (see amnet.conduits._mpi.mpich_settings; the jobs
    between real hosts in test_cluster.py are what it is for): never a network module (the
    library's own choice, ucx for the mpich wheel: the conduit's matched probes lose nothing
    there), only ``FI_PROVIDER=^sockets`` where MPICH runs over libfabric and nobody named
    a provider."""
    from amnet.conduits._mpi import mpich_settings

    wheel = "MPICH Version:      5.0.2\nMPICH Device:       ch4:ucx ofi\nMPICH CC: cc\n"
    assert mpich_settings(wheel, {}) == {}  # ucx: the library's default
    assert mpich_settings(wheel, {"MPIR_CVAR_CH4_NETMOD": "ucx"}) == {}
    assert mpich_settings(wheel, {"MPIR_CVAR_CH4_NETMOD": "ofi"}) == {"FI_PROVIDER": "^sockets"}
    assert mpich_settings(wheel, {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}) == {}
    ofi_only = "MPICH Version: 4.1\nMPICH Device: ch4:ofi\n"
    assert mpich_settings(ofi_only, {}) == {"FI_PROVIDER": "^sockets"}
    assert mpich_settings(ofi_only, {"FI_PROVIDER": "verbs"}) == {}
    for other in ("MPICH Version: 4.1\nMPICH Device: ch4:ucx\n",
                  "Open MPI v4.1.4, package: Debian OpenMPI", ""):
        assert mpich_settings(other, {}) == {}
        assert mpich_settings(other, {"MPIR_CVAR_CH4_NETMOD": "ucx"}) == {}


def test_matched_probes_only_where_mpich_runs_over_ucx():
    """How the mpi conduit takes envelopes (amnet.conduits._mpi.matched_probes): matched
    probes over MPICH's ucx module (posted any-source receives lose messages there:
    test_mpi.py), posted receives everywhere else (faster over ofi)."""
    from amnet.conduits._mpi import matched_probes

    wheel = "MPICH Version:      5.0.2\nMPICH Device:       ch4:ucx ofi\n"
    assert matched_probes(wheel, {}) is True  # ucx: the wheel's default
    assert matched_probes(wheel, {"MPIR_CVAR_CH4_NETMOD": "ucx"}) is True
    assert matched_probes(wheel, {"MPIR_CVAR_CH4_NETMOD": "ofi"}) is False
    assert matched_probes("MPICH Version: 4.1\nMPICH Device: ch4:ofi\n", {}) is False
    assert matched_probes("MPICH Version: 4.1\nMPICH Device: ch4:ucx\n", {}) is True
    for other in ("MPICH Version: 3.4\nMPICH Device: ch3:nemesis\n",
                  "Open MPI v4.1.4, package: Debian OpenMPI", ""):
        assert matched_probes(other, {}) is False


def test_registry():
    from amnet.conduits import get_conduit, register_conduit

    assert "zmq" in CONDUITS and get_conduit("zmq") is CONDUITS["zmq"]
    with pytest.raises(amnet.ConfigError, match=r"registered conduits: .*zmq"):
        get_conduit("carrier-pigeon")
    with pytest.raises(ValueError, match="already registered"):
        register_conduit("zmq")(type("Other", (CONDUITS["zmq"],), {}))
    assert amnet.Config.resolve(env={}).conduit in CONDUITS


# -- strangers, and malformed input from the job's own processes ---------------------------
def wait_refused(c: Conduit, n: int, timeout: float = 10.0) -> None:
    """Poll ``c`` until it counted ``n`` refused connections; nothing may be delivered."""
    deadline = time.monotonic() + timeout
    while c.statistics().refused < n and time.monotonic() < deadline:
        c.wait_readable(0.05)
        assert c.recv() is None
    assert c.statistics().refused >= n, c.statistics()


def assert_hung_up(s) -> None:
    """The other end closed socket ``s`` (a reset, if it left our bytes unread)."""
    s.settimeout(10)
    try:
        while s.recv(1024):
            pass
    except ConnectionResetError:
        pass
    s.close()


def raw_connect(address: str, data: bytes = b""):
    import socket

    host, _, port = address[len("tcp://"):].rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    if data:
        s.sendall(data)
    return s


@pytest.fixture
def zmq_pair():
    a, b = make("zmq", 0), make("zmq", 1)
    for c in (a, b):
        c.set_peers([a.address, b.address])
    ctx = zmq.Context()
    try:
        yield a, b, ctx
    finally:
        ctx.destroy(linger=0)
        a.close()
        b.close()


def test_zmq_refuses_whoever_does_not_hold_the_secret(zmq_pair):
    """Strangers (no credentials, a wrong secret, CURVE keys, raw bytes that are not ZMTP)
    fail the handshake: nothing they send is delivered, each is counted in ``refused``, and
    the job's own traffic goes on."""
    from amnet._security import apply_client, make_job_keys

    a, b, ctx = zmq_pair
    socks = []
    for creds in ("none", "wrong", "curve"):
        s = ctx.socket(zmq.PUSH)
        s.reconnect_ivl = 60_000  # one try each, so that the count is exact
        if creds == "wrong":
            apply_client(s, None, "f" * 32)
        elif creds == "curve":
            apply_client(s, make_job_keys(), SECRET)
        s.connect(b.address)
        s.send(b"forged", zmq.NOBLOCK)  # queued until a handshake that never succeeds
        socks.append(s)
    wait_refused(b, 3)
    raw = raw_connect(b.address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_hung_up(raw)
    wait_refused(b, 4)
    assert_idle(b)
    st = b.statistics()
    assert (st.refused, st.received, st.dropped) == (4, 0, 0), st
    a.send(1, b"from a", b"ok")
    assert recv_one(b) == (b"from a", b"ok")
    assert a.statistics().refused == 0
    for s in socks:
        s.close(linger=0)


def test_zmq_drops_malformed_messages_of_a_job_process(zmq_pair):
    """A connection that holds the secret (a process of the job) but sends what no conduit
    sends: each message is dropped and counted, the valid one behind them delivered."""
    from amnet._security import apply_client

    a, b, ctx = zmq_pair
    s = ctx.socket(zmq.PUSH)
    s.linger = 1000
    apply_client(s, None, SECRET)
    s.connect(b.address)
    s.send_multipart([b"h", b"p", b"third frame"])  # 3 frames
    s.send_multipart([b"h", b"p", b"q", b"r"])  # 4 frames
    s.send(b"L" * (MAX_HEADER + 1))  # an over-long header
    s.send_multipart([b"L" * (MAX_HEADER + 1), b"with payload"])
    s.send_multipart([b"good", b"payload"])  # the same connection: after the others
    assert recv_one(b) == (b"good", b"payload")
    st = b.statistics()
    assert st.dropped == 4 and st.received == 1 and st.refused == 0, st
    assert_idle(b)
    a.send(1, b"from a", b"ok")
    assert recv_one(b) == (b"from a", b"ok")
    assert b.statistics().dropped == 4
    s.close()


@pytest.fixture
def tcp_pair():
    a, b = make("tcp", 0), make("tcp", 1)
    for c in (a, b):
        c.set_peers([a.address, b.address])
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def tcp_hello(src: int = 0, dst: int = 1, procs: int = 2, secret: str = SECRET,
              nonce: bytes | None = None) -> bytes:
    """A tcp conduit hello as a process holding ``secret`` makes it."""
    import os

    from amnet._security import hello_mac

    hello = struct.pack("<4sIIII16s", b"AMNT", 2, src, dst, procs, nonce or os.urandom(16))
    return hello + hello_mac(secret, hello[-16:], hello[:-16])


def tcp_msg(h: bytes, p: bytes | None = None) -> bytes:
    if p is None:
        return struct.pack("<IQ", len(h), 0) + h
    return struct.pack("<IQ", len(h) | 1 << 31, len(p)) + h + p


def test_tcp_refuses_whoever_does_not_hold_the_secret(tcp_pair):
    """A connection whose hello does not prove the job's secret, or replays a hello already
    seen, is closed before anything behind its hello is read; each is counted once."""
    a, b = tcp_pair
    fake = tcp_hello(secret="f" * 32)
    good = tcp_hello()
    forged = tcp_msg(b"forged", b"payload")
    bad = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 100,  # not a hello at all
        fake + forged,  # the wrong secret
        good[:-1] + bytes([good[-1] ^ 1]) + forged,  # a MAC off by one bit
        tcp_hello(procs=3) + forged,  # a job of another size
        tcp_hello(src=7) + forged,  # from a process the job does not have
        tcp_hello(dst=0) + forged,  # meant for another process (a hello replayed elsewhere)
        (struct.pack("<4sIII", b"AMNT", 1, 0, 2) + forged) * 3,  # version 1: had no MAC
    ]
    socks = [raw_connect(b.address, d) for d in bad]
    wait_refused(b, len(bad))
    for s in socks:  # the conduit hung up on each of them
        assert_hung_up(s)
    # a valid hello is admitted once; the same hello again (a replay) is refused
    first = raw_connect(b.address, good + tcp_msg(b"admitted", b"once"))
    assert recv_one(b) == (b"admitted", b"once")
    replay = raw_connect(b.address, good + forged)
    wait_refused(b, len(bad) + 1)
    # a stranger that leaves before its hello is complete
    raw_connect(b.address, fake[:10]).close()
    wait_refused(b, len(bad) + 2)
    assert_idle(b)
    st = b.statistics()
    assert (st.refused, st.received, st.dropped) == (len(bad) + 2, 1, 0), st
    a.send(1, b"from a", b"ok")
    assert recv_one(b) == (b"from a", b"ok")
    for s in (first, replay):
        s.close()


def test_tcp_drops_malformed_messages_of_a_job_process(tcp_pair):
    """A connection that proved the secret (a process of the job) but then breaks the
    protocol is closed and counted as dropped; what it sent before going wrong is
    delivered; the job's own traffic goes on."""
    a, b = tcp_pair
    bad = [
        tcp_hello() + tcp_msg(b"good", b"payload") + struct.pack("<IQ", MAX_HEADER + 1, 0),
        tcp_hello() + struct.pack("<IQ", 4, 5) + b"hhhh",  # a length without the payload bit
        tcp_hello() + tcp_msg(b"half", b"0123456789")[:-4],  # leaves in mid-message
    ]
    socks = [raw_connect(b.address, d) for d in bad]
    socks[-1].close()
    assert recv_one(b) == (b"good", b"payload")
    deadline = time.monotonic() + 10
    while b.statistics().dropped < len(bad) and time.monotonic() < deadline:
        b.wait_readable(0.1)
        assert b.recv() is None
    st = b.statistics()
    assert st.dropped == len(bad) and st.received == 1 and st.refused == 0, st
    for s in socks[:-1]:
        assert_hung_up(s)
    a.send(1, b"from a", b"ok")
    assert recv_one(b) == (b"from a", b"ok")
    assert b.statistics().dropped == len(bad)


def test_tcp_idle_flag_is_never_up_while_a_message_waits(tcp_pair):
    """The engine's hot path skips ``recv`` while the idle flag is up and the descriptor
    is quiet: a message the conduit already read must never sit behind a raised flag. Here
    a read completes one message and brings a second whole, so nothing more arrives."""
    import select

    _, b = tcp_pair
    m1 = struct.pack("<IQ", 5 | 1 << 31, 100) + b"first" + b"x" * 100
    m2 = struct.pack("<IQ", 6 | 1 << 31, 1) + b"second" + b"y"
    s = raw_connect(b.address, tcp_hello() + m1[:50])
    later = threading.Timer(0.3, lambda: s.sendall(m1[50:] + m2))
    later.start()
    try:
        m = b.recv_wait(10.0)  # reads half of m1, then the rest of it and all of m2
        assert m is not None and bytes(m[0]) == b"first"
        fd, flag = b.idle_signal()
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert flag[0] == 0 or p.poll(0), "idle flag up while a message waits"
        assert recv_one(b) == (b"second", b"y")
    finally:
        later.join()
        s.close()


def test_tcp_sends_a_backlog_while_the_sender_does_nothing(tcp_pair):
    """More than the kernel takes at once waits in the backlog, and the flusher sends it
    while the sending conduit is never called again (a rank computing)."""
    a, b = tcp_pair
    big = bytes(range(256)) * (32 * MiB // 256)
    a.send(1, b"big", big)
    a.send(1, b"after", b"x")
    h, p = recv_one(b, timeout=60)
    assert h == b"big" and p == big
    assert recv_one(b) == (b"after", b"x")


@pytest.mark.parametrize("topo", [dict(n=6, nodes=6), dict(n=6, nodes=3, threads_per_proc=2)],
                         ids=["6procs", "3procs-T2"])
def test_tcp_all_to_all_oversubscribed(marked, topo):
    """The tcp conduit with more processes than cores (blocking waits): every pair at once,
    puts, gets and VIS, then megabytes queued to every peer at once (backlogs and the
    flusher), round after round; every byte checked."""
    res = amnet.run(functools.partial(conduitjobs.all_to_all, rounds=8), conduit="tcp",
                    segment_size="16M", timeout=120, **topo)
    for me, got in enumerate(res):
        assert [p for p, *_ in got] == [p for p in range(6) if p != me]
        assert all(ok for *_, ok in got), got


def test_zmq_count_dropped_by_the_core(zmq_pair):
    a, b, _ = zmq_pair
    b.count_dropped()
    b.count_dropped()
    assert b.statistics().dropped == 2 and a.statistics().dropped == 0


# -- forged AM headers in a real job --------------------------------------------------------
TOPOLOGIES = [
    pytest.param(dict(n=4, nodes=2), id="N4-2nodes"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="N4-2nodes-T2"),
    # forged envelopes sent by MPI to the mpi conduit, Long payloads as bulk messages
    pytest.param(dict(n=4, nodes=2, conduit="mpi"), id="N4-2nodes-mpi"),
]


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_forged_headers_are_refused(marked, topo):
    """Rank 0 sends garbage to the last rank's conduit socket from a raw zmq PUSH (over the
    mpi conduit: as MPI messages to its tag); the target refuses each (counted once), runs
    nothing, writes nothing, and goes on."""
    res = amnet.run(functools.partial(conduitjobs.forged, cases=conduitjobs.REFUSED),
                    **topo, segment_size="1M", timeout=60)
    target = res[-1]
    assert target["messages"] > len(conduitjobs.REFUSED)
    assert target["refused"] == target["messages"], target
    assert target["dropped"] == target["refused"]
    assert target["ran"] == [["note", 42]], target
    assert target["segment_zero"] is True
    assert res[0]["pong"] == [res[0]["target"], 7]


@pytest.mark.parametrize("case", conduitjobs.MUST_NOT_CRASH)
def test_forged_headers_do_not_crash_the_target(marked, case):
    """Wire fields that the engine must check before use, each in a job of its own (each
    once failed the target rank: see the module docstring of conduitjobs)."""
    res = amnet.run(functools.partial(conduitjobs.forged, cases=[case]), n=2, nodes=2,
                    segment_size="1M", timeout=60)
    target = res[-1]
    assert target["refused"] == 1, target
    assert target["ran"] == [["note", 42]], target
    assert target["segment_zero"] is True


def test_the_interfaces_first_name_still_imports():
    """Conduits written against ``amnet.core.conduit`` (the interface's home until the
    conduits got a package of their own) keep working: the same objects, not copies."""
    import amnet.conduits
    import amnet.core.conduit as old

    for name in ("CONDUITS", "MAX_HEADER", "Conduit", "ConduitStatistics", "get_conduit",
                 "register_conduit", "load_plugins", "ENTRY_POINT_GROUP"):
        assert getattr(old, name) is getattr(amnet.conduits, name), name
    assert amnet.conduits.Conduit.__module__ == "amnet.conduits"
