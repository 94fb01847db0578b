"""Spawners: how the launcher starts one agent per node (docs/design.md §8).

A spawner binds the bootstrap socket where its agents can reach it and starts the agents.
They are registered in one place, :data:`SPAWNERS`, by name.

- ``local``: one child agent per simulated node on this host (bootstrap on an abstract
  Unix socket: nothing is left in the file system).
- ``ssh``: one ``ssh HOST python -P -m amnet.launch.agent`` per node.
- ``srun`` / ``mpirun``: one agent per node inside an allocation, started by one command.
- ``custom``: ``--spawn-cmd`` template, ``%H`` host, ``%N`` node, ``%C`` agent command.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

import zmq

from .. import _protocol as proto
from .._errors import ConfigError
from .._security import is_local_host
from .._topology import Topology
from ._slurm import check_allocation
from .agent import set_pdeathsig

_LIMIT = 1 << 20
MAX_ENV_SPEC = 120 << 10  # Linux refuses an environment string over 128 KiB (MAX_ARG_STRLEN)
#: Variables of the launcher's environment not carried to remote agents.
_NO_FORWARD = re.compile(r"^(SSH_.*|HOSTNAME|HOST|PWD|OLDPWD|SHLVL|_|TERM|DISPLAY|TMUX.*|"
                         r"XDG_.*|DBUS_.*|MAIL|LOGNAME|USER|HOME|SHELL|LS_COLORS)$")


class SpawnerError(ConfigError):
    """Raised before a job starts when the chosen spawner cannot run (tool missing, bad hosts,
    malformed hostfile, bad ``--spawn-cmd``)."""


@dataclass
class Launched:
    """A process a spawner started, and the nodes whose agents it carries."""

    process: Any  # asyncio.subprocess.Process or ForkedProcess
    nodes: list[int]
    where: str
    what: str
    pumps: list = field(default_factory=list)
    killed_unresponsive: bool = False  # the launcher killed it: its agent did not answer

    def registered(self, agent_ident: dict[int, bytes]) -> bool:
        return all(n in agent_ident for n in self.nodes)

    def signal(self, sig: int) -> None:
        if self.process.returncode is None:
            try:
                os.kill(self.process.pid, sig)
            except OSError:
                pass

    def kill_group(self) -> None:
        """SIGKILL what is left in the process group the spawner started (its session)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL the process and its session's group (a wrapper's children too)."""
        if self.process.returncode is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            self.signal(signal.SIGKILL)


# -- hosts ----------------------------------------------------------------------------------------
def parse_hostfile(path: str) -> list[tuple[str, int | None]]:
    """Read ``host [slots=N]`` lines (``#`` starts a comment).

    Raises:
        SpawnerError: the file cannot be read, or a line is malformed (with its number).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SpawnerError(f"cannot read hostfile {path!r}: {e}") from None
    hosts: list[tuple[str, int | None]] = []
    for i, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        slots = None
        for extra in parts[1:]:
            m = re.fullmatch(r"slots=(\d+)", extra)
            if not m or int(m.group(1)) < 1:
                raise SpawnerError(f"hostfile {path}:{i}: expected 'HOST' or 'HOST slots=N' "
                                   f"with N >= 1, got {raw.strip()!r}")
            slots = int(m.group(1))
        if not re.fullmatch(r"[A-Za-z0-9_.:\-\[\]@]+", parts[0]):
            raise SpawnerError(f"hostfile {path}:{i}: {parts[0]!r} is not a host name")
        hosts.append((parts[0], slots))
    if not hosts:
        raise SpawnerError(f"hostfile {path!r} names no hosts")
    return hosts


def parse_hosts(text: str) -> list[tuple[str, int | None]]:
    hosts = [h.strip() for h in text.split(",")]
    if not hosts or any(not h or any(c.isspace() for c in h) for h in hosts):
        raise SpawnerError(f"--hosts expects comma-separated host names, got {text!r}")
    return [(h, None) for h in hosts]


def assign_hosts(hosts: list[tuple[str, int | None]], nodes: int) -> list[str]:
    """Deal nodes to hosts round-robin; a host's ``slots`` caps how many nodes it takes."""
    out: list[str] = []
    used = [0] * len(hosts)
    i = 0
    while len(out) < nodes:
        for _ in range(len(hosts)):
            h, slots = hosts[i % len(hosts)]
            j = i % len(hosts)
            i += 1
            if slots is None or used[j] < slots:
                used[j] += 1
                out.append(h)
                break
        else:
            total = sum(s or 0 for _, s in hosts)
            raise SpawnerError(f"{nodes} node(s) do not fit the hosts given: their slots add "
                               f"up to {total}")
    return out


def route_ip(host: str | None) -> str:
    """The address of this machine's interface that faces ``host`` (no packet is sent)."""
    if host is not None:
        try:
            fam, _, _, _, addr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
            with socket.socket(fam, socket.SOCK_DGRAM) as s:
                s.connect(addr[:2])
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if not ipaddress.ip_address(ip).is_loopback:
            return ip
    except OSError:
        pass
    # the host name is the loopback's (Debian's /etc/hosts makes it so): the address the
    # default route leaves by, which other hosts are likelier to reach (no packet is sent)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
            ip = s.getsockname()[0]
            if not ipaddress.ip_address(ip).is_loopback:
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def _agent_cmd(python: str, node: int | None) -> list[str]:
    tail = ["--node-from-env"] if node is None else ["--node", str(node)]
    # -P: a folder 'amnet' in the agent's current directory must not shadow amnet
    return [python, "-P", "-m", "amnet.launch.agent", *tail]


def _term_when_we_die() -> None:
    """In a spawner tool's child, before exec: SIGTERM when amnet-run dies."""
    set_pdeathsig(signal.SIGTERM)


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not _NO_FORWARD.match(k)}


# -- spawners --------------------------------------------------------------------------------
class Spawner:
    """Base class. Subclasses set ``name`` and implement :meth:`spawn`."""

    name: ClassVar[str]
    remote: bool = True

    def __init__(self, topology: Topology, hosts: list[tuple[str, int | None]] | None = None,
                 spawn_cmd: str | None = None, python: str | None = None) -> None:
        self.topo = topology
        self.hosts = hosts
        self.spawn_cmd = spawn_cmd
        self.python = python or sys.executable
        self.check()

    def check(self) -> None:
        """Raise :class:`SpawnerError` if this spawner cannot start the job."""

    def agent_hosts(self) -> list[str | None]:
        """The hosts this spawner's agents run on, one per node; ``None`` for a host not known
        before the job starts (a node of a Slurm or MPI allocation). Curve is on when any of
        them is not this host (:func:`amnet._security.needs_curve`)."""
        return [None] * self.topo.nodes

    def peer_host(self) -> str | None:
        if self.hosts:
            return next((h for h, _ in self.hosts if not is_local_host(h)), self.hosts[0][0])
        return None

    def bind(self, sock, bootstrap_addr: str | None, token: str) -> str:
        """Bind the bootstrap socket; return the address agents connect to."""
        if bootstrap_addr:
            a = bootstrap_addr.removeprefix("tcp://")
            host, _, port = a.rpartition(":") if ":" in a else (a, "", "")
            if not port:
                host, port = a, "*"
            try:
                sock.bind(f"tcp://{host}:{port}")
            except Exception as e:
                raise SpawnerError(f"cannot bind the bootstrap service to {bootstrap_addr!r}: "
                                   f"{e}") from None
            return sock.getsockopt_string(zmq.LAST_ENDPOINT)
        ip = route_ip(self.peer_host()) if self.remote else "127.0.0.1"
        sock.bind(f"tcp://{ip}:*")
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)

    async def _start(self, cmd: list[str], spec: dict[str, Any], nodes: list[int], where: str,
                     what: str, *, env: dict[str, str] | None = None,
                     stdin_spec: bool = True) -> Launched:
        """Start ``cmd``; the spec goes to its standard input (``stdin_spec``) or is in ``env``.

        The spec carries the job's secrets (its token and, for jobs across hosts, its CURVE
        keys), so it never goes on a command line, which any user of a host can read with
        ``ps``: ssh and ``--spawn-cmd`` carry the agent's standard input to it (over ssh's
        encrypted channel), so the spec is written there; srun and mpirun start every agent
        with one command and forward standard input to one task at most, so for them it is
        in ``AMNET_JOB_SPEC``, in the environment, which only the same user (and root) can
        read and which Open MPI's ``-x`` forwards by name.
        """
        import asyncio

        # A tool started without the spec on its standard input (srun, mpirun) would not
        # notice amnet-run's death (a pending srun waits in Slurm's queue for good): it gets
        # SIGTERM then, even after a SIGKILL, and ends what it started. (ssh and custom
        # commands see their standard input close.)
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE if stdin_spec else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env=env, limit=_LIMIT,
            preexec_fn=None if stdin_spec else _term_when_we_die)
        if stdin_spec:
            proc.stdin.write(proto.frame_spec(spec))
        return Launched(proc, nodes, where, what)

    def prefork(self, spec: dict[str, Any]) -> None:
        """Start agents before the event loop exists, where the spawner can (local only)."""

    async def spawn(self, spec: dict[str, Any]) -> list[Launched]:
        raise NotImplementedError  # every registered spawner overrides this


class ForkedProcess:
    """An agent forked from amnet-run, with the surface of ``asyncio.subprocess.Process``
    that the launcher uses (``pid``, ``returncode``, ``stdout``, ``stderr``, ``wait``)."""

    def __init__(self, pid: int, stdin_w: int, out_r: int, err_r: int) -> None:
        self.pid, self.returncode = pid, None
        self._fds = (stdin_w, out_r, err_r)

    async def attach(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        readers = []
        for fd in self._fds[1:]:
            reader = asyncio.StreamReader(limit=_LIMIT)
            await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r),
                                         os.fdopen(fd, "rb", 0))
            readers.append(reader)
        self.stdout, self.stderr = readers
        self._done = loop.create_future()
        pidfd = os.pidfd_open(self.pid)
        loop.add_reader(pidfd, self._reap, loop, pidfd)

    def _reap(self, loop, pidfd: int) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        os.close(self._fds[0])
        self._done.set_result(self.returncode)

    async def wait(self) -> int:
        import asyncio

        return await asyncio.shield(self._done)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class LocalSpawner(Spawner):
    name = "local"
    remote = False
    #: fork agents from the launcher (amnet-run sets this; amnet.run() never does, as its
    #: caller may have threads)
    fork = False

    def agent_hosts(self) -> list[str | None]:
        return ["localhost"] * self.topo.nodes

    def bind(self, sock, bootstrap_addr: str | None, token: str) -> str:
        if bootstrap_addr:
            return super().bind(sock, bootstrap_addr, token)
        addr = self.address(token)
        sock.bind(addr)
        return addr

    def address(self, token: str) -> str:
        """The abstract Unix socket of the bootstrap service (leaves no file behind).

        Its name is visible to local users, so it is random and unrelated to the token.
        """
        if not hasattr(self, "_name"):
            import secrets

            self._name = f"amnet-{secrets.token_hex(12)}"
        return f"ipc://@{self._name}"

    def check(self) -> None:
        self._forked: list[ForkedProcess] = []

    def prefork(self, spec: dict[str, Any]) -> None:
        if not self.fork:
            return
        from .agent import fork_agent

        spec["bootstrap"] = self.address(spec["token"])
        self._forked = [ForkedProcess(*fork_agent(spec, n)) for n in range(self.topo.nodes)]

    async def spawn(self, spec: dict[str, Any]) -> list[Launched]:
        if self._forked:
            for fp in self._forked:
                await fp.attach()
            return [Launched(fp, [n], "on this host", "the agent")
                    for n, fp in enumerate(self._forked)]
        spec = dict(spec, pdeathsig=True, parent_pid=os.getpid())
        return [await self._start(_agent_cmd(self.python, n), spec, [n], "on this host",
                                  "the agent") for n in range(self.topo.nodes)]


class SshSpawner(Spawner):
    name = "ssh"

    def check(self) -> None:
        if not self.hosts:
            raise SpawnerError("the ssh spawner needs hosts: give --hosts H1,H2 or --hostfile F")
        if shutil.which("ssh") is None:
            raise SpawnerError("the ssh spawner needs the 'ssh' command on PATH")
        self.placement = assign_hosts(self.hosts, self.topo.nodes)

    def agent_hosts(self) -> list[str | None]:
        return list(self.placement)

    async def spawn(self, spec: dict[str, Any]) -> list[Launched]:
        spec = dict(spec, pdeathsig=True, env=_forwarded_env())
        out = []
        for n, host in enumerate(self.placement):
            remote = shlex.join(_agent_cmd(self.python, n))
            cmd = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host, remote]
            out.append(await self._start(cmd, spec, [n], f"on host {host}", "ssh"))
        return out


class CustomSpawner(Spawner):
    name = "custom"

    def check(self) -> None:
        if not self.spawn_cmd:
            raise SpawnerError("the custom spawner needs --spawn-cmd TEMPLATE "
                               "(%H host, %N node index, %C agent command)")
        if "%C" not in self.spawn_cmd:
            raise SpawnerError(f"--spawn-cmd must contain %C (the agent command), got "
                               f"{self.spawn_cmd!r}")
        for m in re.finditer(r"%(.?)", self.spawn_cmd, re.DOTALL):  # pairs, left to right
            if m.group(1) not in ("H", "N", "C", "%"):
                raise SpawnerError(f"--spawn-cmd has unknown placeholder {m.group(0)!r}; "
                                   "use %H, %N, %C or %% for a literal %")
        self.placement = assign_hosts(self.hosts or [("localhost", None)], self.topo.nodes)
        self.remote = not all(is_local_host(h) for h in self.placement)

    def agent_hosts(self) -> list[str | None]:
        return list(self.placement)

    def command(self, node: int) -> str:
        subst = {"%H": self.placement[node], "%N": str(node),
                 "%C": shlex.join(_agent_cmd(self.python, node)), "%%": "%"}
        return re.sub(r"%[HNC%]", lambda m: subst[m.group(0)], self.spawn_cmd)

    async def spawn(self, spec: dict[str, Any]) -> list[Launched]:
        spec = dict(spec, pdeathsig=True, env=_forwarded_env())
        return [await self._start(["/bin/sh", "-c", self.command(n)], spec, [n],
                                  f"on host {self.placement[n]}", "the --spawn-cmd command")
                for n in range(self.topo.nodes)]


class SrunSpawner(Spawner):
    name = "srun"

    def check(self) -> None:
        if shutil.which("srun") is None:
            raise SpawnerError("the srun spawner needs Slurm's 'srun' on PATH (run inside an "
                               "allocation: salloc / sbatch)")
        if self.name == "srun":
            try:
                check_allocation(self.topo.nodes, "the srun spawner (one agent per node)")
            except ConfigError as e:
                raise SpawnerError(str(e)) from None

    def command(self) -> list[str]:
        k = self.topo.nodes
        cmd = ["srun", f"--nodes={k}", f"--ntasks={k}", "--ntasks-per-node=1"]
        if self.hosts:
            cmd.append("--nodelist=" + ",".join(h for h, _ in self.hosts))
        return cmd + _agent_cmd(self.python, None)

    #: whether the tool leaves the launcher's environment out (then the spec carries it)
    exports_env = True

    def env_for_agents(self, spec: dict[str, Any]) -> dict[str, str]:
        """Our environment plus the spec in ``AMNET_JOB_SPEC``.

        Raises:
            SpawnerError: the spec does not fit in one environment variable.
        """
        fwd = None if self.exports_env else _forwarded_env()
        text = proto.spec_to_env(dict(spec, pdeathsig=True, env=fwd))
        if len(text) > MAX_ENV_SPEC:
            raise SpawnerError(
                f"the job spec is {len(text)} bytes encoded, more than fits in one environment "
                f"variable ({MAX_ENV_SPEC}); shorten the script's arguments"
                + ("" if self.exports_env else " or the environment"))
        return {**os.environ, proto.SPEC_ENV: text}

    async def spawn(self, spec: dict[str, Any]) -> list[Launched]:
        return [await self._start(self.command(), spec, list(range(self.topo.nodes)),
                                  "in the allocation", self.name,
                                  env=self.env_for_agents(spec), stdin_spec=False)]


class MpirunSpawner(SrunSpawner):
    name = "mpirun"

    def check(self) -> None:
        self.exe = shutil.which("mpiexec") or shutil.which("mpirun")
        if self.exe is None:
            raise SpawnerError("the mpirun spawner needs 'mpiexec' or 'mpirun' on PATH")
        try:
            version = subprocess.run([self.exe, "--version"], capture_output=True, text=True,
                                     timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            version = ""
        self.open_mpi = "Open MPI" in version or "OpenRTE" in version
        self.exports_env = not self.open_mpi  # Open MPI exports only what -x names

    def command(self) -> list[str]:
        k = str(self.topo.nodes)
        hosts = ",".join(h for h, _ in self.hosts) if self.hosts else None
        if self.open_mpi:
            cmd = [self.exe, "-n", k, "--map-by", "ppr:1:node", "-x", proto.SPEC_ENV]
            cmd += ["--host", hosts] if hosts else []
        else:  # MPICH / Hydra and compatibles
            cmd = [self.exe, "-n", k, "-ppn", "1"]
            cmd += ["-hosts", hosts] if hosts else []
        return cmd + _agent_cmd(self.python, None)


SPAWNERS: dict[str, type[Spawner]] = {
    s.name: s for s in (LocalSpawner, SshSpawner, SrunSpawner, MpirunSpawner, CustomSpawner)
}


def make_spawner(name: str, topology: Topology, *, hosts: str | None = None,
                 hostfile: str | None = None, spawn_cmd: str | None = None) -> Spawner:
    """Build the spawner called ``name``.

    Raises:
        SpawnerError: unknown name, both or malformed hosts/hostfile, or the spawner's own
            check failed.
    """
    cls = SPAWNERS.get(name)
    if cls is None:
        raise SpawnerError(f"unknown spawner {name!r}; choose one of: {', '.join(SPAWNERS)}")
    if hosts and hostfile:
        raise SpawnerError("give --hosts or --hostfile, not both")
    host_list = parse_hosts(hosts) if hosts else parse_hostfile(hostfile) if hostfile else None
    if spawn_cmd and cls is not CustomSpawner:
        raise SpawnerError("--spawn-cmd is only for --spawner custom")
    if host_list and cls is LocalSpawner:
        raise SpawnerError("--hosts/--hostfile place agents on other hosts: use them with "
                           "--spawner ssh, custom, srun or mpirun")
    return cls(topology, host_list, spawn_cmd)
