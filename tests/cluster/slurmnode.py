"""A real one-node Slurm cluster for the tests: ``munged``, ``slurmctld`` and ``slurmd`` of
Debian's ``slurm-wlm`` and ``munge``, configured in a temporary directory.

``SlurmNode()`` writes ``slurm.conf`` (this host as the one node, with its cores; a partition
``amtest``; ports of its own; no cgroups, no accounting) and a copy of the munge key into a
temporary directory, starts a ``munged`` on a socket there and both Slurm daemons, and waits
until the node is idle. ``env()`` gives what a command needs to use it (``SLURM_CONF``); the
daemons and everything they started are stopped on exit. Nothing is written outside the
temporary directory: the key is read from ``/etc/munge/munge.key`` (the package makes it) or
made afresh.

Needs root and the packages (``apt-get install slurm-wlm munge``). As a script: ``sudo python
tests/cluster/slurmnode.py`` brings the cluster up, prints how to use it, and stops it on
Enter.
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

NEEDS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def missing() -> str | None:
    """Why the cluster cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (Slurm's daemons)"
    for tool in NEEDS:
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install slurm-wlm munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmNode:
    """A one-node Slurm cluster (see the module docstring); a context manager."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="amnet-slurm-"))
        self.host = socket.gethostname()
        self.cpus = os.cpu_count() or 1
        self._procs: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.dir / "slurm.conf")}

    def __enter__(self) -> SlurmNode:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        (d / "slurm.conf").write_text(f"""ClusterName=amtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctl}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d / 'slurmd.log'}
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
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=amtest Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
""")
        conf = str(d / "slurm.conf")
        self._spawn(["slurmctld", "-D", "-f", conf])
        self._spawn(["slurmd", "-D", "-f", conf])
        env = {**os.environ, **self.env()}

        def idle() -> bool:
            p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                               env=env, stdin=subprocess.DEVNULL)
            return p.returncode == 0 and p.stdout.strip() == "idle"

        self._wait(idle, "the Slurm node to be idle", 30.0)

    def _spawn(self, cmd: list[str]) -> None:
        log = open(self.dir / f"{cmd[0]}.out", "w")
        self._procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL,
                                            start_new_session=True))
        log.close()

    def _wait(self, ok, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            for p in self._procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}) while waiting for "
                                       f"{what}: {self.log(p.args[0])}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def log(self, daemon: str) -> str:
        """The end of a daemon's log (for failure messages)."""
        text = ""
        for name in (f"{daemon}.log", f"{daemon}.out"):
            f = self.dir / name
            if f.exists():
                text += f.read_text()[-1500:]
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
    with SlurmNode() as s:
        print(f"export SLURM_CONF={s.env()['SLURM_CONF']}")
        print("then e.g.: srun -n 2 --mpi=pmi2 python -m amnet examples/hello.py")
        input("Enter stops it. ")
