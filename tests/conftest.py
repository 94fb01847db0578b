"""Shared helpers: run amnet-run as a user would, look for anything a job left behind, make a
second 'host' (a network namespace), and play a stranger that connects to a job's socket."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
# real cluster parts the tests bring up (tests/cluster: hosts with sshd in network namespaces)
sys.path.insert(0, str(Path(__file__).parent / "cluster"))
# Jobs on the mpi conduit (and the mpi4py peers) use MPICH's network path between processes
# of this host, not its shared memory: what crosses hosts on a cluster (amnet/conduits/_mpi.py).
from amnet.conduits._mpi import MPICH_NETWORK_PATH  # noqa: E402

os.environ.update(MPICH_NETWORK_PATH)
# The ranks' tracebacks as 3.11 prints them on every Python the suite runs on (3.13 adds ^~~
# markers and every line of a statement that spans several), as docs/regen.py's sessions do.
os.environ["PYTHONNODEBUGRANGES"] = "1"
#: A job's environment without those settings (``Runner``'s ``env``): MPICH's own choices, as
#: between real hosts (tests/test_cluster*.py).
MPICH_DEFAULTS: dict[str, str | None] = dict.fromkeys(MPICH_NETWORK_PATH)


def _byte_compile() -> None:
    """Byte-compile amnet, its layers and the jobs' modules once, before any test. Each job
    starts interpreters that import them (an agent per node; amnet-run and amnet-bench run
    as commands), and the suite's install is editable: where PYTHONDONTWRITEBYTECODE is set
    (as many container images set it), no ``.pyc`` would ever be written, and every one of
    those interpreters would compile every module from source again (0.2 s more per job on
    3.11; a fifth of this suite's time). A regular install compiles them when it installs."""
    import compileall
    from importlib.util import find_spec

    for name in ("amnet", "amnet_bench", "shmem_rt", "upc_rt"):  # found, not imported
        compileall.compile_dir(Path(find_spec(name).origin).parent, quiet=1)
    compileall.compile_dir(Path(__file__).parent, quiet=1)


_byte_compile()


def leftovers(mark: str) -> list[str]:
    """Processes whose environment carries ``AMTEST_MARK=mark`` (a job's descendants)."""
    needle = f"AMTEST_MARK={mark}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if needle in env.split(b"\0"):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{pid}: {cmdline}")
        except OSError:
            continue
    return found


def shm_objects() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if "amnet" in n.lower()}
    except FileNotFoundError:
        return set()


def new_shm_objects(before: set[str], settle: float = 2.0) -> set[str]:
    """amnet's objects in /dev/shm that are not in ``before`` and stay there.

    A job's objects have names only until every process of its node mapped them
    (milliseconds), so the names of jobs running beside the test (another test session)
    come and go; what the test's own jobs left behind stays. Waits at most ``settle``
    seconds, and only while something new is there.
    """
    left = shm_objects() - before
    deadline = time.monotonic() + settle
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left &= shm_objects()
    return left


_FIRST = """
import os, time, amnet
try:
    os.close(os.open({flag!r}, os.O_CREAT | os.O_EXCL))
    first = True
except FileExistsError:
    first = False
{body}
"""


class Runner:
    """Runs ``python -m amnet.run ARGS`` with a unique marker in its environment."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.mark = uuid.uuid4().hex

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMNET_")}
        env["AMTEST_MARK"] = self.mark
        # no empty entry: it would put the current directory on sys.path (python -P or not)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(DATA), env.get("PYTHONPATH")) if p)
        for k, v in (extra or {}).items():  # None: not in the job's environment
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def script(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)

    def script_first(self, name: str, body: str) -> str:
        """A script whose ranks know, as ``first``, whether they are the first to start (the
        one that made the flag file ``first`` here), then run ``body`` (``os``, ``time`` and
        ``amnet`` imported): one rank that does otherwise than the others."""
        return self.script(name, _FIRST.format(flag=str(self.tmp / "first"), body=body))

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "amnet.run", *args]

    def __call__(self, *args: str, timeout: float = 60, env: dict | None = None,
                 cwd: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), capture_output=True, text=True,
                              timeout=timeout, env=self.env(env), cwd=cwd or self.tmp)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(env),
                                cwd=self.tmp, start_new_session=True)

    def assert_clean(self) -> None:
        assert leftovers(self.mark) == []


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path)
    before = shm_objects()
    yield r
    r.assert_clean()
    assert new_shm_objects(before) == set()


# -- two hosts in network namespaces ---------------------------------------------------------
@pytest.fixture(scope="module")
def hosts():
    """Two hosts with a real sshd each (network namespaces: tests/cluster/sshhosts.py)."""
    import sshhosts

    why = sshhosts.missing()
    if why:
        pytest.skip(why)
    with sshhosts.SshHosts(2) as h:
        yield h


@pytest.fixture
def netns():
    """A second 'host': a network namespace joined to this one by a veth pair.

    Yields ``(ns, host_ip, ns_ip)``: the namespace's name, this side's address and the
    namespace's. Skips the test without root or iproute2.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    tag = uuid.uuid4().hex[:6]
    ns, a, b = f"amtest-{tag}", f"amv{tag}a", f"amv{tag}b"
    octet = int(tag[:2], 16) % 200 + 20
    host_ip, ns_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        ip("netns", "add", ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot make a network namespace here: {e.stderr.decode().strip()}")
    try:
        ip("link", "add", a, "type", "veth", "peer", "name", b)
        ip("link", "set", b, "netns", ns)
        ip("addr", "add", f"{host_ip}/24", "dev", a)
        ip("link", "set", a, "up")
        ip("-n", ns, "addr", "add", f"{ns_ip}/24", "dev", b)
        ip("-n", ns, "link", "set", b, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        yield ns, host_ip, ns_ip
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# A zmq peer that knows nothing of the job (or the wrong keys): does zmq let it in?
_STRANGER = r"""
import json, sys, time
import msgpack, zmq
from zmq.utils.monitor import recv_monitor_message

address, kind, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
creds = json.loads(sys.stdin.read() or "null") or {}
keys, password = creds.get("keys"), creds.get("password")
ctx = zmq.Context()
s = ctx.socket(getattr(zmq, kind))
s.linger = 0
if password:
    s.plain_username = b"amnet"
    s.plain_password = password.encode()
if keys:
    s.curve_serverkey = keys["server_public"].encode()
    s.curve_publickey = keys["client_public"].encode()
    s.curve_secretkey = keys["client_secret"].encode()
mon = s.get_monitor_socket()
s.connect(address)
# what a stranger would say first; zmq delivers it only after a handshake that succeeded
s.send(msgpack.packb({"t": "hello", "kind": "agent", "token": "0" * 32, "node": 0}))
seen = []
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    if not mon.poll(20):
        continue
    ev = zmq.Event(recv_monitor_message(mon)["event"])
    seen.append(ev.name)
    if ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        break
    if ev.name.startswith("HANDSHAKE_FAILED") and "CONNECTED" in seen:
        break
s.disable_monitor()
mon.close()
s.close()
ctx.term()
print(json.dumps(seen))
"""


def stranger_connects(ns: str | None, address: str, *, keys: dict[str, str] | None = None,
                      password: str | None = None, socket_type: str = "DEALER",
                      timeout: float = 5.0) -> bool:
    """Whether a stranger process gets through zmq's handshake with the socket at ``address``.

    The stranger runs in network namespace ``ns`` (``None``: this one), opens a ``socket_type``
    socket (``"DEALER"`` for a ROUTER or DEALER peer, ``"PUSH"`` for a PULL one) with the NULL
    mechanism, as a PLAIN client with ``password`` (a job secret, e.g. the wrong one), or as a
    CURVE client with ``keys`` (a dict like ``make_job_keys()``'s, e.g. the wrong job's),
    connects and sends a bootstrap ``hello`` with a made-up token.

    Returns True when the handshake succeeded (its message can reach the application), False
    when the stranger reached the socket (TCP connected) and zmq refused the handshake. Fails
    the test when it never connected at all: a False must mean "refused", not "not found".
    """
    import json

    cmd = [sys.executable, "-c", _STRANGER, address, socket_type, str(timeout)]
    if ns is not None:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    # the keys go on stdin, never on a command line
    out = subprocess.run(cmd, input=json.dumps({"keys": keys, "password": password}),
                         capture_output=True, text=True, timeout=timeout + 30)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert "CONNECTED" in seen, f"the stranger never reached {address}: events {seen}"
    return "HANDSHAKE_SUCCEEDED" in seen


def assert_each_starts(got: list[list[str]], want: list[str]) -> None:
    """Every rank's lines (``got``: a list a rank, e.g. the errors a job caught, in order)
    begin with the ``want`` ones, one for one."""
    for out in got:
        assert len(out) == len(want)
        for o, w in zip(out, want, strict=True):
            assert o.startswith(w), (o, w)


_FRAMES_JOB = """
import amnet, msgpack, zmq
from amnet._security import apply_client
from amnet.core import _runtime
ep = amnet.init()
if ep.rank == 0:  # sends its frames to the job's bootstrap service
    secret = _runtime._process.spec["token"] if {member} else None
{setup}
    ctx = zmq.Context()
    for f in {frames}:
        s = ctx.socket(zmq.DEALER)
        if secret is not None:
            apply_client(s, None, secret)
        s.connect(ep.bootstrap.address)
        s.send_multipart(f)
        s.close(linger={linger})
    ctx.term()
ep.barrier()
print("went on", ep.rank)
"""


def frames_to_bootstrap(runner: Runner, name: str, frames: str, *, setup: str = "",
                        member: bool = False, linger: int = 300) -> subprocess.CompletedProcess:
    """Run a job of 2 ranks whose rank 0 sends the job's bootstrap service each message of
    ``frames`` (Python source of a list of multipart messages, after the lines ``setup``,
    indented for rank 0's block) on a connection of its own: as a stranger, or with
    ``member`` as a process of the job (it holds the job's secret). The job must go on (every
    rank passes a barrier after); returns the run, for its stderr."""
    text = _FRAMES_JOB.format(member=member, setup=setup, frames=frames, linger=linger)
    out = runner("-n", "2", runner.script(name, text))
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["went on 0", "went on 1"]
    return out


@pytest.fixture
def marked(monkeypatch):
    """Mark this test's jobs (``amnet.run`` inherits the environment) so that anything they
    leave behind can be found; fail the test if something is (a process, or an object in
    /dev/shm)."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv("AMTEST_MARK", mark)
    before = shm_objects()
    yield mark
    assert leftovers(mark) == []
    assert new_shm_objects(before) == set()  # nothing of amnet left in /dev/shm


@pytest.fixture(scope="module")
def mark():
    """Mark a module's jobs so that anything they leave behind can be found, with no AMNET_*
    variable of the caller's environment in effect; at the end of the module, fail if a
    process or an object in /dev/shm is left."""
    mark = uuid.uuid4().hex
    before = shm_objects()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMTEST_MARK", mark)
        for var in [v for v in os.environ if v.startswith("AMNET_")]:
            mp.delenv(var)
        yield mark
    assert leftovers(mark) == []
    assert new_shm_objects(before) == set()  # nothing of amnet left in /dev/shm
