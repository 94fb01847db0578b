"""CurveZMQ between hosts: job keys, the bootstrap service refusing strangers, --insecure."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
import time

import pytest
import zmq
from conftest import stranger_connects

import amnet
from amnet import Topology
from amnet._guard import Guard
from amnet._security import (
    INSECURE_WARNING,
    KEY_NAMES,
    CurveUnavailable,
    apply_client,
    apply_server,
    bootstrap_exposed,
    make_job_keys,
    mechanism,
    needs_curve,
)
from amnet.conduits import CONDUITS
from amnet.launch._spec import build_spec, curve_for
from amnet.launch.spawners import make_spawner

# A rank that says which mechanism its bootstrap connection uses, where the service is, and
# how many processes show one of the job's secrets on their command line (or environment).
# Rank 0 then waits for the file named in argv[1], if any, so that a test can play a stranger
# while the job runs.
PROBE = """
import os, sys, time
import amnet
from amnet.core import _runtime

ep = amnet.init()
spec = _runtime._process.spec
secrets = [spec["token"].encode(), *(k.encode() for k in (spec["curve"] or {}).values())]

def leaks(name):
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        n += any(s in data for s in secrets)
    return n

print(f"rank {ep.rank} node {ep.node} mech {_runtime._process.boot().mechanism} "
      f"curve {spec['curve'] is not None} addr {ep.bootstrap.address} "
      f"cmdline-leaks {leaks('cmdline')} environ-leaks {leaks('environ')} "
      f"data {ep.statistics().conduit.address}", flush=True)
if ep.rank == 0 and len(sys.argv) > 1:
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
ep.barrier()
"""

# agents "on another host" that really run here: a host name that is not this machine, and
# a bootstrap service on loopback that the local agents can reach
ELSEWHERE = ["--spawner", "custom", "--hosts", "192.0.2.1", "--spawn-cmd", "%C",
             "--bootstrap-addr", "127.0.0.1"]


def fields(line: str) -> dict[str, str]:
    words = line.split()
    return dict(zip(words[::2], words[1::2], strict=False))


# -- the helpers -------------------------------------------------------------------------------
def test_job_keys_are_fresh_curve_key_pairs():
    keys = make_job_keys()
    assert sorted(keys) == sorted(KEY_NAMES)
    assert all(isinstance(v, str) and len(v) == 40 for v in keys.values())
    for side in ("server", "client"):
        public = zmq.curve_public(keys[f"{side}_secret"].encode()).decode()
        assert public == keys[f"{side}_public"]
    assert keys["server_public"] != keys["client_public"]
    assert make_job_keys()["server_secret"] != keys["server_secret"]


SECRET = "0123456789abcdef0123456789abcdef"


def test_clients_present_the_secret_or_the_curve_keys():
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        apply_client(s, None, SECRET)
        assert mechanism(s) == "PLAIN"
        assert s.plain_username == b"amnet" and s.plain_password == SECRET.encode()
        c = ctx.socket(zmq.DEALER)
        apply_client(c, make_job_keys(), SECRET)
        assert mechanism(c) == "CURVE"
        with pytest.raises(ValueError, match="secret"):
            apply_client(ctx.socket(zmq.DEALER), None, "")
        r = ctx.socket(zmq.ROUTER)
        apply_server(r, None)  # no keys: the guard alone makes a server PLAIN
        assert mechanism(r) == "NULL"
    finally:
        ctx.destroy(linger=0)


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
@pytest.mark.parametrize("server_type,client_type", [("ROUTER", "DEALER"), ("PULL", "PUSH")])
def test_guard_refuses_strangers_and_admits_the_job(server_type, client_type, curve):
    """A guarded server admits only a client with the job's secret (PLAIN) or the job's
    CURVE keys; no credentials, the wrong secret, the wrong keys, or the right secret with
    another mechanism are refused by the handshake, and counted."""
    keys = make_job_keys() if curve else None
    ctx = zmq.Context()
    srv = ctx.socket(getattr(zmq, server_type))
    srv.linger = 0
    guard = Guard(ctx, srv, SECRET, keys)
    assert mechanism(srv) == ("CURVE" if curve else "PLAIN")
    address = f"tcp://127.0.0.1:{srv.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        strangers = [dict(), dict(password="f" * 32), dict(keys=make_job_keys())]
        # the right secret does not help with the wrong mechanism
        strangers.append(dict(password=SECRET) if curve else dict(keys=make_job_keys()))
        for creds in strangers:
            assert not stranger_connects(None, address, socket_type=client_type, timeout=2,
                                         **creds), creds
        assert not srv.poll(200)  # nothing of theirs reached the application
        deadline = time.monotonic() + 10
        while guard.refused < len(strangers) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert guard.refused >= len(strangers)
        job = dict(keys=keys) if curve else dict(password=SECRET)
        assert stranger_connects(None, address, socket_type=client_type, timeout=5, **job)
        assert srv.poll(2000)  # the one with the job's credentials got its message through
        frames = srv.recv_multipart()
        assert frames[-1].startswith(b"\x84")  # the msgpack hello it sent
        # and in-process, as the launcher and the ranks use them
        cli = ctx.socket(getattr(zmq, client_type))
        cli.linger = 0
        apply_client(cli, keys, SECRET)
        cli.connect(address)
        cli.send(b"ping")
        assert srv.poll(2000) and srv.recv_multipart()[-1] == b"ping"
        cli.close()
    finally:
        srv.close()
        ctx.term()
        guard.join()


def test_stranger_that_reaches_nothing_is_not_called_refused():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AssertionError, match="never reached"):
        stranger_connects(None, f"tcp://127.0.0.1:{port}", timeout=0.5)


def test_when_curve_is_needed():
    assert not needs_curve(["localhost", "127.0.0.1", "::1"])
    assert needs_curve(["localhost", "node7"])
    assert needs_curve([None])  # a node of an allocation: not known to be this host
    assert not needs_curve(["localhost"], "127.0.0.1:5000")
    assert needs_curve(["localhost"], "0.0.0.0")  # the service faces the network
    assert needs_curve(["localhost"], "tcp://10.1.2.3:5000")
    assert not bootstrap_exposed(None) and not bootstrap_exposed("[::1]:7")


def test_spawners_decide_curve(tmp_path, monkeypatch):
    topo = Topology.make(2, nodes=2)
    said: list[str] = []
    local = make_spawner("local", topo)
    assert not curve_for(local, None, insecure=False, warn=said.append)
    assert not curve_for(local, None, insecure=True, warn=said.append)
    assert said == []  # nothing to turn off: no warning
    here = make_spawner("custom", topo, hosts="localhost", spawn_cmd="%C")
    assert not curve_for(here, None, insecure=False, warn=said.append)
    far = make_spawner("custom", topo, hosts="localhost,192.0.2.1", spawn_cmd="%C")
    assert curve_for(far, None, insecure=False, warn=said.append)
    assert not curve_for(far, None, insecure=True, warn=said.append)
    assert said == [INSECURE_WARNING]
    for tool in ("srun", "mpiexec"):
        (tmp_path / tool).write_text("#!/bin/sh\necho HYDRA\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    for name in ("srun", "mpirun"):
        assert curve_for(make_spawner(name, topo), None, insecure=False, warn=said.append)


def test_a_conduit_that_cannot_encrypt_is_refused_where_curve_is_needed():
    topo = Topology.make(2, nodes=2)
    said: list[str] = []
    far = make_spawner("custom", topo, hosts="localhost,192.0.2.1", spawn_cmd="%C")
    with pytest.raises(amnet.ConfigError, match=r"tcp conduit does not encrypt.*--insecure"):
        curve_for(far, None, insecure=False, warn=said.append, conduit="tcp")
    assert not curve_for(far, None, insecure=True, warn=said.append, conduit="tcp")
    local = make_spawner("local", topo)  # loopback: nothing to encrypt
    assert not curve_for(local, None, insecure=False, warn=said.append, conduit="tcp")
    with pytest.raises(amnet.ConfigError, match="does not encrypt"):  # asked for anyway
        CONDUITS["tcp"](0, 2, "127.0.0.1", {"server_public": "x"}, None)


def test_spec_carries_keys_only_when_curve_is_on():
    cfg = amnet.Config.resolve(env={})
    topo = Topology.make(2)
    assert build_spec(topo, cfg, script=__file__)["curve"] is None
    a, b = (build_spec(topo, cfg, script=__file__, curve=True)["curve"] for _ in range(2))
    assert sorted(a) == sorted(KEY_NAMES) and a != b  # per job


def test_curve_unavailable_is_a_clear_error_before_anything_starts(monkeypatch, capfd):
    monkeypatch.setattr(zmq, "has", lambda what: what != "curve")
    with pytest.raises(CurveUnavailable, match=r"needs CurveZMQ.*zmq.has\('curve'\) is False"
                                               r".*--insecure"):
        amnet.run(remote_mechanism, n=2, nodes=2, spawner="custom", hosts="192.0.2.1",
                  spawn_cmd="%C", bootstrap_addr="127.0.0.1")
    assert capfd.readouterr().out == ""  # no rank ran
    assert isinstance(CurveUnavailable("x"), amnet.ConfigError)
    # an agent on a host without CURVE says so and starts nothing
    from amnet.launch.agent import run_agent

    spec = build_spec(Topology.make(1), amnet.Config.resolve(env={}), script=__file__)
    spec["curve"] = {k: "x" for k in KEY_NAMES}
    assert run_agent(spec, 0, False) == 2
    err = capfd.readouterr().err
    assert err.startswith("amnet agent: the job spec asks for CurveZMQ on ")
    assert "without CURVE support" in err


# -- jobs -------------------------------------------------------------------------------------
def remote_mechanism(ep):
    from amnet.core import _runtime

    return _runtime._process.boot().mechanism


def test_local_job_does_not_use_curve(runner):
    s = runner.script("probe.py", PROBE)
    out = runner("-n", "2", "--nodes", "2", s)
    assert out.returncode == 0, out.stderr
    assert [fields(ln)["mech"] for ln in out.stdout.splitlines()] == ["PLAIN", "PLAIN"]
    assert all(fields(ln)["curve"] == "False" for ln in out.stdout.splitlines())


def test_agents_elsewhere_use_curve_and_insecure_warns(runner):
    s = runner.script("probe.py", PROBE)
    out = runner("-n", "4", "--nodes", "2", *ELSEWHERE, s)
    assert out.returncode == 0, out.stderr
    lines = [fields(ln) for ln in out.stdout.splitlines()]
    assert len(lines) == 4
    assert all(f["mech"] == "CURVE" and f["curve"] == "True" for f in lines)
    assert all(f["cmdline-leaks"] == "0" and f["environ-leaks"] == "0" for f in lines)
    assert "WARNING" not in out.stderr
    out = runner("-n", "2", "--nodes", "2", "--insecure", *ELSEWHERE, s)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [f"amnet-run: {INSECURE_WARNING}"]
    assert "unencrypted" in out.stderr
    assert all(fields(ln)["mech"] == "PLAIN" for ln in out.stdout.splitlines())


def test_insecure_on_a_local_job_changes_nothing(runner):
    out = runner("-n", "1", "--insecure", runner.script("probe.py", PROBE))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "" and fields(out.stdout)["mech"] == "PLAIN"


def test_amnet_run_uses_curve_for_remote_agents_and_insecure_warns(capfd):
    kw = dict(n=2, nodes=2, spawner="custom", hosts="192.0.2.1", spawn_cmd="%C",
              bootstrap_addr="127.0.0.1")
    assert amnet.run(remote_mechanism, **kw) == ["CURVE", "CURVE"]
    assert "WARNING" not in capfd.readouterr().err
    assert amnet.run(remote_mechanism, insecure=True, **kw) == ["PLAIN", "PLAIN"]
    assert f"amnet.run: {INSECURE_WARNING}\n" in capfd.readouterr().err


def test_srun_agents_use_curve_and_the_keys_stay_off_command_lines(runner):
    bindir = runner.tmp / "bin"
    bindir.mkdir()
    srun = bindir / "srun"  # a fake allocation on this host: one task per node, here
    srun.write_text("""#!/bin/sh
n=1
while [ $# -gt 0 ]; do case "$1" in --ntasks=*) n=${1#--ntasks=}; shift;; --*) shift;;
  *) break;; esac; done
i=0; pids=""
while [ $i -lt $n ]; do SLURM_PROCID=$i "$@" & pids="$pids $!"; i=$((i+1)); done
rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc
""")
    srun.chmod(0o755)
    s = runner.script("probe.py", PROBE)
    out = runner("-n", "2", "--nodes", "2", "--spawner", "srun", s,
                 env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    lines = [fields(ln) for ln in out.stdout.splitlines()]
    assert [f["mech"] for f in lines] == ["CURVE", "CURVE"]
    # srun gets the spec in its environment (readable only by the same user), never in argv
    assert all(f["cmdline-leaks"] == "0" for f in lines)


# -- two hosts in network namespaces ---------------------------------------------------------
class Lines:
    """Reads a process's stdout and stderr on threads of their own, line by line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.out: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.threads = [threading.Thread(target=lambda: [self.out.put(ln) for ln in proc.stdout]),
                        threading.Thread(target=lambda: self.err.extend(proc.stderr))]
        for t in self.threads:
            t.start()

    def take(self, count: int, timeout: float) -> list[str]:
        """The next ``count`` lines of stdout, waiting at most ``timeout`` s in all."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                got.append(self.out.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return got

    def finish(self) -> tuple[str, str]:
        """The rest of stdout and all of stderr, once the process closed both."""
        for t in self.threads:
            t.join(timeout=60)
        return "".join(self.out.queue), "".join(self.err)


@pytest.mark.parametrize("insecure", [False, True], ids=["curve", "insecure"])
def test_job_across_namespaces_refuses_a_stranger(runner, netns, insecure):
    """Agents in another network namespace (another 'host'): the job runs with CURVE on every
    connection, and a stranger in that namespace that connects to the bootstrap service or a
    data socket is refused by zmq's handshake while the job goes on. With --insecure the job
    runs on PLAIN with its secret: the same strangers are refused all the same."""
    ns, host_ip, ns_ip = netns
    go = runner.tmp / "go"
    s = runner.script("probe.py", PROBE)
    flags = ["--insecure"] if insecure else []
    job = runner.popen("-n", "4", "--nodes", "2", "--spawner", "custom", "--hosts", ns_ip,
                       "--spawn-cmd", f"ip netns exec {ns} %C", *flags, s, str(go))
    io = Lines(job)
    try:
        lines = io.take(4, 60)
        assert len(lines) == 4, lines
        probe = [fields(ln) for ln in lines]
        address = probe[0]["addr"]
        assert address.startswith(f"tcp://{host_ip}:")
        mech = "PLAIN" if insecure else "CURVE"
        assert all(f["mech"] == mech and f["curve"] == str(not insecure) for f in probe)
        assert all(f["cmdline-leaks"] == "0" and f["environ-leaks"] == "0" for f in probe)

        assert not stranger_connects(ns, address)
        assert not stranger_connects(ns, address, keys=make_job_keys())
        assert not stranger_connects(ns, address, password="f" * 32)
        # the data sockets (the conduit's PULL, one per process) are guarded too; the job's
        # AM traffic (the barrier below, and finalize's) crosses the namespaces on them
        data = sorted({f["data"] for f in probe})
        assert len(data) == 4 and all(a.startswith(f"tcp://{ns_ip}:") for a in data), data
        for a in (data[0], data[-1]):
            assert not stranger_connects(ns, a, socket_type="PUSH"), a
        go.touch()
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait()
        rest, err = io.finish()
    assert job.returncode == 0, err
    assert rest == ""
    refused = ("amnet-run: refused a bootstrap connection that did not prove it holds this "
               "job's secret; the job goes on")
    lines = err.splitlines()
    if insecure:
        assert lines[0] == f"amnet-run: {INSECURE_WARNING}"
        lines = lines[1:]
    # each stranger refused in the handshake, said once each (reconnections may add more)
    assert len(lines) >= 3 and set(lines) <= {refused, *_more_refusals(lines)}, err


def _more_refusals(lines: list[str]) -> set[str]:
    """The launcher's closing count of refusals, when there were more than it showed."""
    return {ln for ln in lines if ln.startswith("amnet-run: refused ")
            and ln.endswith(" bootstrap connections in all")}


TCP_JOB = """
import amnet
ep = amnet.init()
peer = (ep.rank + 2) % ep.size  # a rank of the other node
ep.segment[:8] = ep.rank + 1
ep.barrier()
got = bytes(ep.get(peer, 0, 8))
assert got == bytes([peer + 1]) * 8, got
st = ep.statistics().conduit
print(f"rank {ep.rank} conduit {st.name} data {st.address}", flush=True)
ep.barrier()
"""


def test_tcp_conduit_across_namespaces_only_with_insecure(runner, netns):
    """The tcp conduit does not encrypt: a job with agents on another host that asks for it
    is refused before anything starts, unless --insecure; then its AMs cross on plain TCP
    bound to the other host's interface."""
    ns, _, ns_ip = netns
    s = runner.script("tcpjob.py", TCP_JOB)
    args = ["-n", "4", "--nodes", "2", "--spawner", "custom", "--hosts", ns_ip,
            "--spawn-cmd", f"ip netns exec {ns} %C"]
    out = runner(*args, s, env={"AMNET_CONDUIT": "tcp"})
    assert out.returncode == 2, out.stderr
    assert "tcp conduit does not encrypt" in out.stderr and "--insecure" in out.stderr
    assert out.stdout == ""
    out = runner(*args, "--insecure", s, env={"AMNET_CONDUIT": "tcp"})
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 4, lines
    assert all(" conduit tcp data tcp://" + ns_ip + ":" in ln for ln in lines), lines
