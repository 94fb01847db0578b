"""Real cluster parts: ``amnet-run --spawner ssh`` to hosts that run a real ``sshd`` (network
namespaces with their own addresses, tests/cluster/sshhosts.py), the conformance jobs of the
other test modules on them (the core AM job, VIS, upc_rt, every collective), the mpi conduit
between them with MPICH's own choices, the wire between them captured with ``tcpdump`` and
searched for a job's payload and secret, and the failure paths (``kill -9``, a refused key,
a host without sshd). The jobs on a real Slurm are in test_cluster_slurm.py.

Each test fails if its part is swapped for a stand-in: every job checks that each rank ran
in its host's network namespace (reached through sshd, with the run's own keys), and the
wire test's control (``--insecure`` tcp) shows that the search finds the payload and the
secret when they do cross in the clear. They skip, saying why, without root or the
packages (``.ci/run`` installs them: openssh-server, openssh-client, tcpdump, slurm-wlm,
munge).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import conformance
import pytest
from conftest import DATA, MPICH_DEFAULTS

ROOT = Path(__file__).parent.parent
JOB = str(DATA / "clusterjob.py")
LINE = re.compile(r"rank (\d+) node (\d+) netns (\d+) ok (\w+) conduit (\w+)")


def canary() -> str:
    return "AMNET-CANARY-" + uuid.uuid4().hex


def ssh_job(runner, hosts, *flags: str, env: dict | None = None, spawner: str | None = "ssh"):
    """Run the job on 4 ranks, 2 per host, started on the hosts through their sshd (by the
    ``spawner``; None: the mpi conduit's MPI launcher); return (the run, its canary, its lines
    matched). Rank 0 writes the job's secret to runner.tmp / "secret"."""
    c = canary()
    env = {**MPICH_DEFAULTS, **hosts.env(), "AMTEST_CANARY": c,
           "AMTEST_SECRET_FILE": str(runner.tmp / "secret"), **(env or {})}
    how = ["--spawner", spawner] if spawner else []
    out = runner("-n", "4", "--nodes", "2", *how, "--hosts", ",".join(hosts.ips), *flags, JOB,
                 env=env, timeout=90)
    return out, c, [LINE.fullmatch(ln) for ln in out.stdout.splitlines()]


def test_ssh_spawner_runs_every_node_on_its_host(runner, hosts):
    out, _, lines = ssh_job(runner, hosts)
    assert out.returncode == 0, out.stderr
    assert len(lines) == 4 and all(lines), out.stdout
    for m in lines:
        rank, node, ns, ok, conduit = m.groups()
        # rank r's node is r // 2, on host ``node``: its network namespace, reached by sshd
        assert int(node) == int(rank) // 2
        assert int(ns) == hosts.ns_inode(int(node)), (rank, node, ns)
        assert ok == "True" and conduit == "zmq"


@pytest.mark.parametrize("name", conformance.NAMES)
def test_conformance_jobs_on_the_real_hosts(runner, hosts, name):
    """The core AM job (GASNet's testcore/testam in spirit), a VIS job (every rank to every
    other at once), upc_rt's suite and every collective, 4 ranks on the two sshd hosts over
    zmq with CurveZMQ: the checks their own test modules make on one machine, and every rank
    in its host's namespace."""
    ranks = conformance.run(runner, name, dict(n=4, nodes=2, spawner="ssh",
                                               hosts=",".join(hosts.ips)), hosts.env())
    conformance.check(name, ranks)
    for r in ranks:
        w = r["where"]
        assert w["node"] == w["rank"] // 2 and w["host"] == hosts.names[w["node"]]
        assert w["netns"] == hosts.ns_inode(w["node"]) and w["conduit"] == "zmq"


def test_core_job_over_the_mpi_conduit_between_the_hosts(runner, hosts):
    """The core AM job over ``--conduit mpi``, Hydra starting the processes over the hosts'
    sshd, MPICH left to its own choices (no NOLOCAL, no netmod or provider named). Two things
    failed here until amnet chose for the mpich wheel (``amnet.conduits._mpi.mpich_settings``): the
    FIFO section (a burst of 1200 AMs a rank) stopped half way over MPICH's ucx module, and
    over libfabric's sockets provider a rank of the other host left the split-phase barrier
    only when the rank that sent it the barrier's last message called MPI again (the
    section's first ``barrier_try`` succeeded where it must not)."""
    ranks = conformance.run(runner, "core", dict(n=4, nodes=2, conduit="mpi",
                                                 hosts=",".join(hosts.ips)),
                            {**hosts.env(), "HYDRA_IFACE": hosts.links[0]})
    conformance.check("core", ranks)
    for r in ranks:
        w = r["where"]
        assert w["netns"] == hosts.ns_inode(w["node"]) and w["conduit"] == "mpi"


def test_tcp_conduit_to_real_hosts_needs_insecure(runner, hosts):
    out, _, _ = ssh_job(runner, hosts, env={"AMNET_CONDUIT": "tcp"})
    assert out.returncode == 2, out.stderr
    assert "tcp conduit does not encrypt" in out.stderr and out.stdout == ""


def capture(hosts, what):
    """Run ``what()`` while tcpdump captures host 0's link (its traffic to this host and,
    routed through here, to host 1); return (what's result, the capture's bytes)."""
    if shutil.which("tcpdump") is None:
        pytest.skip("needs tcpdump (apt-get install tcpdump)")
    pcap = hosts.dir / f"wire-{uuid.uuid4().hex[:6]}.pcap"
    dump = subprocess.Popen(["tcpdump", "-i", hosts.links[0], "-n", "-s", "0", "-U",
                             "--immediate-mode", "-w", str(pcap)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not pcap.exists() and time.monotonic() < deadline:  # listening
            time.sleep(0.05)
        time.sleep(0.2)
        result = what()
        time.sleep(0.5)  # the last packets
    finally:
        dump.send_signal(signal.SIGINT)
        _, err = dump.communicate(timeout=10)
    data = pcap.read_bytes()
    assert "packets captured" in err, err
    return result, data


@pytest.mark.parametrize("insecure", [False, True], ids=["curve", "insecure-tcp-control"])
def test_the_wire_between_hosts_carries_no_payload_in_the_clear(runner, hosts, insecure):
    flags = ("--insecure",) if insecure else ()
    env = {"AMNET_CONDUIT": "tcp"} if insecure else {}
    (out, c, lines), wire = capture(hosts, lambda: ssh_job(runner, hosts, *flags, env=env))
    assert out.returncode == 0, out.stderr
    assert len(lines) == 4 and all(m and m.group(4) == "True" for m in lines), out.stdout
    secret = (runner.tmp / "secret").read_text().encode()
    assert len(secret) >= 16
    assert len(wire) > 10_000, "the capture saw (almost) nothing of the job"
    if insecure:  # the control: the search finds what does cross in the clear
        assert c.encode() in wire and secret in wire
    else:
        assert c.encode() not in wire and secret not in wire


KILLED = """
import os, signal, amnet
ep = amnet.init()
ep.barrier()
if ep.rank == ep.size - 1:  # on the last host
    os.kill(os.getpid(), signal.SIGKILL)
ep.barrier()
"""


def test_kill_9_of_a_rank_on_a_remote_host_ends_the_job_everywhere(runner, hosts):
    """A rank killed on host 1 (real ssh, its agent under sshd there): the job ends with the
    rank's signal and what it says, soon, and nothing of it is left on either host (the
    runner fixture looks for every process that carries the job's mark)."""
    s = runner.script("killed.py", KILLED)
    t0 = time.monotonic()
    out = runner("-n", "4", "--nodes", "2", "--spawner", "ssh", "--hosts", ",".join(hosts.ips),
                 s, env=hosts.env(), timeout=60)
    assert out.returncode == 137, out.stderr
    assert f"rank 3 (node 1, proc 3, host {hosts.names[1]}) killed by signal 9 (SIGKILL)" \
        in out.stderr
    assert time.monotonic() - t0 < 20


def open_mpi_launcher() -> str | None:
    """Open MPI's launcher where it is installed (Debian: libopenmpi-dev / openmpi-bin)."""
    for name in ("mpirun.openmpi", "orterun", "prterun"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_mpirun_spawner_across_the_hosts(runner, hosts, mpi):
    """``--spawner mpirun``: the MPI's own launcher starts the agents on the hosts, over the
    hosts' sshd (MPICH's Hydra and Open MPI both start their daemons with ``ssh``)."""
    env = dict(hosts.env())
    if mpi == "mpich":
        # Hydra's proxies connect back to this host by the address of this interface
        env["HYDRA_IFACE"] = hosts.links[0]
    else:
        launcher = open_mpi_launcher()
        if launcher is None:
            pytest.skip("needs Open MPI (apt-get install openmpi-bin)")
        bindir = runner.tmp / "ompi"
        bindir.mkdir()
        (bindir / "mpiexec").symlink_to(launcher)
        env["PATH"] = f"{hosts.bindir}:{bindir}:{os.environ['PATH']}"
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out, _, lines = ssh_job(runner, hosts, env=env, spawner="mpirun")
    assert out.returncode == 0, out.stderr
    assert len(lines) == 4 and all(lines), out.stdout
    for m in lines:
        _, node, ns, ok, conduit = m.groups()
        assert int(ns) == hosts.ns_inode(int(node)) and ok == "True" and conduit == "zmq"


def test_mpi_conduit_across_the_hosts(runner, hosts):
    """``--conduit mpi`` with hosts: Hydra starts one MPI process per amnet process over the
    hosts' sshd, and the AMs and puts cross between the namespaces as MPI messages."""
    out, _, lines = ssh_job(runner, hosts, "--conduit", "mpi",
                            env={"HYDRA_IFACE": hosts.links[0]}, spawner=None)
    assert out.returncode == 0, out.stderr
    assert len(lines) == 4 and all(lines), out.stdout
    for m in lines:
        _, node, ns, ok, conduit = m.groups()
        assert int(ns) == hosts.ns_inode(int(node)) and ok == "True" and conduit == "mpi"

def recipe_lines() -> list[str]:
    """The MPI command lines of docs/conduits.md's cluster recipe (without a scheduler)."""
    text = (ROOT / "docs" / "conduits.md").read_text()
    block = text[text.index("### A cluster recipe"):].split("tests/test_cluster.py runs each "
                                                              "line")[1]
    block = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [ln.split("#")[0].strip() for ln in block.splitlines() if ln.strip()]


@pytest.mark.parametrize("k", [0, 1, 2], ids=["mpich-mpiexec", "openmpi-mpiexec",
                                               "amnet-run-conduit-mpi"])
def test_the_docs_mpi_lines_run_as_written_across_the_hosts(runner, hosts, k):
    """docs/conduits.md's line ``k``, with the hosts' addresses for ``a`` and ``b``,
    ``app.py`` this module's job, ``python`` and ``amnet-run`` this interpreter's (first on
    PATH): every MPI process an amnet process, a node per host."""
    line = recipe_lines()[k]
    a, b = hosts.ips
    argv = shlex.split(line.replace("a:2,b:2", f"{a}:2,{b}:2").replace("a,b", f"{a},{b}"))
    argv = [JOB if w == "app.py" else w for w in argv]
    env = runner.env({**MPICH_DEFAULTS, "HYDRA_IFACE": hosts.links[0],
                      "AMTEST_CANARY": canary(), "AMTEST_SECRET_FILE": ""})
    bindir = runner.tmp / "bin"
    bindir.mkdir()
    if k == 1:  # Open MPI's mpiexec first on PATH, and its library under mpi4py
        launcher = open_mpi_launcher()
        if launcher is None:
            pytest.skip("needs Open MPI (apt-get install openmpi-bin)")
        (bindir / "mpiexec").symlink_to(launcher)
        env.update(MPI4PY_MPIABI="openmpi", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # ``python`` on PATH: this interpreter, with the test's own variables (Open MPI passes
    # only PATH, which the line's -x names; Hydra passes everything anyway)
    keep = ("PYTHONPATH", "AMTEST_MARK", "AMTEST_CANARY", "AMTEST_SECRET_FILE",
            "MPI4PY_MPIABI", *MPICH_DEFAULTS)
    exports = "".join(f"export {k}={shlex.quote(env[k])}\n" for k in keep if k in env)
    wrapper = bindir / "python"
    wrapper.write_text(f"#!/bin/sh\n{exports}exec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    (bindir / "amnet-run").symlink_to(Path(sys.executable).parent / "amnet-run")
    # hosts' ssh, then these, then this interpreter's bin (MPICH's mpiexec and its proxy)
    env["PATH"] = f"{hosts.bindir}:{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=90, cwd=runner.tmp,
                         env=env, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, line + "\n" + out.stderr
    lines = [LINE.fullmatch(ln) for ln in out.stdout.splitlines()]
    assert len(lines) == 4 and all(lines), out.stdout + out.stderr
    for m in lines:
        rank, node, ns, ok, conduit = m.groups()
        assert int(node) == int(rank) // 2 and int(ns) == hosts.ns_inode(int(node))
        assert ok == "True" and conduit == "mpi"


@pytest.mark.parametrize("example", ["am_pingpong.py", "halo_vis.py", "upc/sobel.py"])
def test_examples_check_their_answers_on_the_real_hosts(runner, hosts, example):
    """The AM round trips of every category (am_pingpong), a VIS halo exchange (halo_vis)
    and a upc_rt kernel (sobel), 4 ranks on the two sshd hosts: the same line as on one
    machine (tests/test_examples.py), each example checking its own answer."""
    import test_examples

    expected = {**test_examples.EXPECTED, **{f"upc/{k}": v for k, v in
                                             test_examples.UPC_EXPECTED.items()}}[example]
    out = runner("-n", "4", "--nodes", "2", "--spawner", "ssh", "--hosts", ",".join(hosts.ips),
                 "--timeout", "60", str(test_examples.EXAMPLES / example), env=hosts.env(),
                 timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [expected], out.stdout + out.stderr

WAITING = """
import time, amnet
ep = amnet.init()
print("ready", ep.rank, flush=True)
time.sleep(120)
"""


def on_hosts(hosts, what: str) -> list[int]:
    """The processes in the hosts' network namespaces whose command line has ``what``."""
    found = []
    for ns in hosts.namespaces:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if what.encode() in f.read().replace(b"\0", b" "):
                        found.append(int(pid))
            except OSError:
                pass
    return found


def agent_of(pids: list[int]) -> list[int]:
    """Of processes with an agent's command line, the agents: Python processes whose parent
    is none of them (its ranks are forked from it, with its command line; a shell may wrap
    it)."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if ppid not in pids and b"python" in os.path.basename(argv0):
            out.append(pid)
    return out


def gone_from_hosts(hosts, runner, seconds: float = 10.0) -> list[str]:
    """Wait until nothing of the job is left on the hosts (its ranks carry the runner's mark;
    its agents, started by sshd, the agent's command line); return what is left."""
    from conftest import leftovers

    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(runner.mark) + [f"agent {p}" for p in on_hosts(hosts, "amnet.launch")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.mark.parametrize("victim", ["agent", "launcher"])
def test_kill_9_of_a_remote_agent_or_of_amnet_run_leaves_nothing_on_any_host(
        runner, hosts, victim):
    s = runner.script("waiting.py", WAITING)
    proc = runner.popen("-n", "4", "--nodes", "2", "--spawner", "ssh", "--hosts",
                        ",".join(hosts.ips), s, env=hosts.env())
    try:
        seen = 0
        while seen < 4:
            line = proc.stdout.readline()
            assert line, f"the job ended before its ranks were ready: {proc.stderr.read()}"
            seen += line.startswith("ready")
        agents = agent_of(on_hosts(hosts, "amnet.launch.agent --node 1"))
        assert len(agents) == 1, agents  # node 1's agent, under sshd on host 1
        os.kill(agents[0] if victim == "agent" else proc.pid, signal.SIGKILL)
        if victim == "agent":
            rc = proc.wait(timeout=15)
            err = proc.stderr.read()
            # ssh reports its remote command's death by a signal as 255, and so does amnet-run
            assert rc == 255, (rc, err)
            assert (f"amnet-run: the agent of node 1 on host {hosts.ips[1]} ended (code 255) "
                    "before its rank processes did") in err
        assert gone_from_hosts(hosts, runner) == []
    finally:
        proc.kill()
        proc.communicate()


def test_sshd_refusing_the_key_and_a_host_without_sshd_are_one_line_each(runner, hosts):
    """Real refusals: a key the hosts' sshd does not accept, and a host with no sshd (this
    side of host 0's link); amnet-run says which node, which host and what ssh said."""
    other = hosts.dir / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True, capture_output=True)
    bindir = hosts.dir / "bin-stranger"
    bindir.mkdir(exist_ok=True)
    wrapper = bindir / "ssh"
    config = hosts.dir / "ssh_config_stranger"  # the hosts' own, with the stranger's key
    config.write_text((hosts.dir / "ssh_config").read_text().replace(
        f"IdentityFile {hosts.dir / 'client'}", f"IdentityFile {other}"))
    import sshhosts

    wrapper.write_text(f'#!/bin/sh\nexec {sshhosts.SSH} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    s = runner.script("waiting.py", WAITING)
    out = runner("-n", "2", "--spawner", "ssh", "--hosts", hosts.ips[1], s,
                 env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert out.returncode == 255, out.stderr
    assert (f"amnet-run: could not start the agent of node 0 on host {hosts.ips[1]}: ssh "
            "exited with code 255: ") in out.stderr
    assert "Permission denied (publickey)" in out.stderr
    out = runner("-n", "2", "--spawner", "ssh", "--hosts", hosts.gateways[0], s,
                 env=hosts.env())
    assert out.returncode == 255, out.stderr
    assert f"could not start the agent of node 0 on host {hosts.gateways[0]}" in out.stderr
    assert "Connection refused" in out.stderr
