"""A real Slurm cluster for the tests: ``munged``, ``slurmctld`` and ``slurmd`` of Debian's
``slurm-wlm`` and ``munge``, configured in a temporary directory.

``SlurmNode()`` is a one-node cluster: this host. ``SlurmNode(hosts)``, given the namespaced
hosts of ``sshhosts.SshHosts``, has a node per host: a ``slurmd`` runs in each host's network
namespace under the host's name (a UTS namespace of its own), with its own spool and
temporary directories, and ``slurmctld`` runs here, reached by the hosts through their
gateway; so ``srun -N 2`` starts its tasks on two hosts with their own addresses, as on a
cluster. Either writes ``slurm.conf`` (the nodes, at least 4 CPUs each whatever this machine
has, so a job of 2 tasks of 2 CPUs fits a node; a partition ``amtest``; ports of its own; no
cgroups, no accounting) and a copy of the munge key into a temporary directory, starts a
``munged`` on a socket there and the Slurm daemons, and waits until every node is idle.
``env()`` gives what a command needs to use it (``SLURM_CONF``); the daemons and everything
they started are stopped on exit. Nothing is written outside the temporary directory: the
key is read from ``/etc/munge/munge.key`` (the package makes it) or made afresh.

Needs root and the packages (``apt-get install slurm-wlm munge``). As a script: ``sudo python
tests/cluster/slurmnode.py [--hosts]`` brings the cluster up (with ``--hosts``: two nodes on
two namespaced hosts), prints how to use it, and stops it on Enter.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import clusterbase

NEEDS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "sbatch", "nsenter", "unshare")


def missing() -> str | None:
    """Why the cluster cannot be made here (None: it can)."""
    return clusterbase.missing(NEEDS, "Slurm's daemons", "slurm-wlm munge")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmNode(clusterbase.Part):
    """A one-node Slurm cluster (see the module docstring); a context manager."""

    def __init__(self, hosts=None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="amnet-slurm-"))
        self.host = socket.gethostname()
        # at least 4 CPUs a node, whatever this machine has (slurmd takes the configured
        # figure: config_overrides), so a job of 2 tasks of 2 CPUs fits a node
        self.cpus = max(os.cpu_count() or 1, 4)
        self.hosts = hosts
        if hosts is None:  # this host is the one node
            self.nodes, self.addrs, self.ctl_addr = [self.host], ["127.0.0.1"], "127.0.0.1"
        else:  # a node per namespaced host; the controller here, reached by a gateway
            self.nodes, self.addrs, self.ctl_addr = list(hosts.names), list(hosts.ips), \
                hosts.gateways[0]
        self._procs: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.dir / "slurm.conf")}

    def _start(self) -> None:
        d = self.dir
        (d / "state").mkdir()
        (d / "spool").mkdir()
        key = d / "munge.key"
        system_key = Path("/etc/munge/munge.key")
        key.write_bytes(system_key.read_bytes() if system_key.exists() else os.urandom(128))
        key.chmod(0o600)
        sock = d / "munge.sock"
        self._spawn(["munged", "--foreground", "--force", f"--socket={sock}",
                     f"--key-file={key}", f"--pid-file={d / 'munged.pid'}",
                     f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
        self._wait(lambda: sock.exists(), "munged's socket")
        ctl, slurmd = _free_port(), _free_port()
        nodes = "\n".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} State=UNKNOWN"
                          for n, a in zip(self.nodes, self.addrs, strict=True))
        (d / "slurm.conf").write_text(f"""ClusterName=amtest
SlurmctldHost={self.host}({self.ctl_addr})
SlurmctldPort={ctl}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
TmpFS={d / 'tmp'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd'}-%n.pid
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d / 'slurmd'}-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SlurmdParameters=config_overrides
{nodes}
PartitionName=amtest Nodes={",".join(self.nodes)} Default=YES MaxTime=INFINITE State=UP \
OverSubscribe=FORCE
""")
        conf = str(d / "slurm.conf")
        self._spawn(["slurmctld", "-D", "-f", conf])
        for k, node in enumerate(self.nodes):
            (d / "spool" / node).mkdir()
            (d / "tmp" / node).mkdir(parents=True)
            if self.hosts is None:
                self._spawn(["slurmd", "-D", "-f", conf, "-N", node], f"slurmd-{node}")
            else:  # in the host's network namespace (nsenter: /sys stays mounted, which
                # slurmd's cgroup code reads), under its host name (a UTS namespace)
                self._spawn(["nsenter", f"--net=/run/netns/{self.hosts.namespaces[k]}",
                             "unshare", "--uts", "sh", "-c",
                             'hostname "$1" && exec slurmd -D -f "$2" -N "$1"', "sh", node,
                             conf], f"slurmd-{node}")
        env = {**os.environ, **self.env()}

        def idle() -> bool:
            p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                               env=env, stdin=subprocess.DEVNULL)
            return p.returncode == 0 and p.stdout.split() == ["idle"]

        self._wait(idle, "the Slurm nodes to be idle", 30.0)

    def _spawn(self, cmd: list[str], name: str | None = None) -> None:
        log = open(self.dir / f"{name or cmd[0]}.out", "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        p.name = name or cmd[0]  # what _wait names when it exits
        self._procs.append(p)
        log.close()

    def _wait(self, ok, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.name} exited ({p.returncode}) while waiting for "
                                       f"{what}: {self.log(p.name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def log(self, daemon: str) -> str:
        """The end of a daemon's logs (for failure messages): ``slurmd`` gives every node's."""
        text = ""
        for f in sorted(self.dir.glob(f"{daemon}*.log")) + sorted(self.dir.glob(f"{daemon}*.out")):
            text += f"{f.name}: {f.read_text()[-1500:]}\n"
        return text

    def close(self) -> None:
        """Stop the daemons (slurmd first), and whatever they started."""
        for p in reversed(self._procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self._procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


if __name__ == "__main__":
    import sys

    why = missing()
    if why:
        sys.exit(f"slurmnode: {why}")
    if "--hosts" in sys.argv[1:]:
        import sshhosts

        with sshhosts.SshHosts(2) as h, SlurmNode(h) as s:
            print(f"export SLURM_CONF={s.env()['SLURM_CONF']}  # nodes {', '.join(s.nodes)}")
            print("then e.g.: srun -N 2 -n 4 --mpi=pmi2 python -m amnet examples/hello.py")
            input("Enter stops it. ")
    else:
        with SlurmNode() as s:
            print(f"export SLURM_CONF={s.env()['SLURM_CONF']}")
            print("then e.g.: srun -n 2 --mpi=pmi2 python -m amnet examples/hello.py")
            input("Enter stops it. ")
