"""``amnet-run --conduit mpi`` and ``amnet.run(..., conduit="mpi")``: a job started by the MPI's
own launcher, one MPI process per amnet process, each running ``python -m amnet``
(:mod:`amnet.launch.mpiproc`).

The launcher here hosts no bootstrap service: it builds the launcher's command line
(:func:`mpiexec_command`), hands every process the job spec in ``AMNET_JOB_SPEC`` and a result
directory of its own (mode 0700) where ranks leave ``amnet.run`` results and the job's first
failure (:mod:`amnet.core._mpiboot`), forwards the job's output, enforces ``timeout`` and
Ctrl-C, and afterwards removes what the job left: its shared-memory objects on this host, the
launcher's process group, the result directory. It returns the same :class:`Outcome` as
:func:`amnet.launch.job.run_job`.

What differs from the native launcher (docs/conduits.md): a failure ends the job with
``MPI_Abort`` (the MPI's launcher prints a line of its own beside amnet's diagnosis); a
timeout or Ctrl-C names no rank's whereabouts (there is no bootstrap service to ask); a
rank that ends without joining a collective the others wait in leaves them waiting (until
``timeout``), where the native launcher fails the job at once.
"""

from __future__ import annotations

import collections
import os
import pickle
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .. import _protocol as proto
from .._errors import ConfigError
from .._topology import Topology
from ._slurm import check_allocation
from .agent import set_pdeathsig
from .job import Outcome

STOP_S = 3.0  # after SIGTERM to the MPI launcher: how long before SIGKILL to the group
ENV_LIMIT = 64 << 10  # a spec larger than this goes in a file of the result directory
TAIL_LINES = 40  # the job's last output lines kept for the launcher's report of a death
WATCH_S = 0.002  # how often the processes of this host are looked at (see _Watch)


def find_mpiexec() -> str | None:
    """The ``mpiexec`` installed beside this Python (the mpich wheel's), else PATH's."""
    here = Path(sys.executable).with_name("mpiexec")
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def flavor(words: list[str]) -> str:
    """``srun``, ``openmpi`` or ``hydra`` (MPICH, Intel MPI, MVAPICH): how to ask the
    launcher for P processes per host and for the environment."""
    if os.path.basename(words[0]) == "srun":
        return "srun"
    try:
        out = subprocess.run([words[0], "--version"], capture_output=True, text=True,
                             timeout=10, stdin=subprocess.DEVNULL)
        text = out.stdout + out.stderr
    except (OSError, subprocess.SubprocessError):
        text = ""
    return "openmpi" if ("Open MPI" in text or "OpenRTE" in text or "prterun" in text) \
        else "hydra"


def mpiexec_command(launcher: str | None, topo: Topology, hosts: str | None = None,
                    hostfile: str | None = None) -> list[str]:
    """The MPI launcher's command that starts one ``python -m amnet`` per amnet process,
    ``topo.procs_per_node`` per host when hosts are given (or under ``srun``); without hosts,
    every process runs on this host (the nodes are simulated, as with the local spawner).

    Raises:
        ConfigError: no launcher found, or an empty ``launcher``.
    """
    if launcher:
        words = shlex.split(launcher)
        if not words:
            raise ConfigError("--mpiexec is empty: give the MPI launcher's command, e.g. "
                              "'mpiexec' or 'srun --mpi=pmix'")
        found = shutil.which(words[0])
        if found is None:
            raise ConfigError(f"the MPI launcher {words[0]!r} (--mpiexec) was not found on PATH")
    else:
        found = find_mpiexec()
        if found is None:
            raise ConfigError("the mpi conduit starts its processes with the MPI's launcher, "
                              "and no mpiexec is on PATH or beside this Python: give "
                              "--mpiexec CMD, or pip install 'amnet[mpi]'")
        words = [found]
    kind = flavor(words)
    n, p = str(topo.procs), str(topo.procs_per_node)
    cmd = list(words)
    if kind == "srun":
        check_allocation(topo.nodes, f"srun (--mpiexec, {p} processes a node)")
        cmd += ["-n", n, f"--ntasks-per-node={p}", "--kill-on-bad-exit=1"]
    elif kind == "openmpi":
        cmd += ["-n", n, "-x", proto.SPEC_ENV]
        if hosts or hostfile:
            cmd += ["--map-by", f"ppr:{p}:node"]
        if hosts:
            cmd += ["--host", ",".join(f"{h}:{p}" for h in hosts.split(",") if h)]
        if hostfile:
            cmd += ["--hostfile", hostfile]
    else:
        cmd += ["-n", n]
        if hosts or hostfile:
            cmd += ["-ppn", p]
        if hosts:
            cmd += ["-hosts", hosts]
        if hostfile:
            cmd += ["-f", hostfile]
    # -P: a folder 'amnet' in the current directory must not shadow amnet
    return [*cmd, sys.executable, "-P", "-m", "amnet"]


def check_mpi_options(spawner: str, spawn_cmd: str | None, bootstrap_addr: str | None,
                      insecure: bool) -> None:
    """Options of the native launcher that a job on the mpi conduit cannot take.

    Raises:
        ConfigError: one was given (the message says what to use instead).
    """
    given = [what for what, on in (
        (f"--spawner {spawner}", spawner != "local"), ("--spawn-cmd", spawn_cmd),
        ("--bootstrap-addr", bootstrap_addr), ("--insecure", insecure)) if on]
    if given:
        raise ConfigError(f"{', '.join(given)}: the mpi conduit's processes are started by the "
                          "MPI's launcher (--mpiexec CMD, with --hosts/--hostfile) and have "
                          "no bootstrap service or sockets of amnet's")


def _pump(src: Any, stream: Any, tail: collections.deque) -> None:
    """Forward the job's output line by line to ``stream``, flushed at once (the ranks'
    lines come whole: every rank writes whole lines, and so does the MPI's launcher), and
    keep the last lines in ``tail`` (the launcher's report of a process that died)."""
    for line in iter(src.readline, ""):
        tail.append(line)
        try:
            stream.write(line)
            stream.flush()
        except Exception:
            pass
    src.close()


class _Signalled(Exception):
    """SIGTERM or SIGHUP reached amnet-run (``handle_signals``): end the job, clean up."""


def _raise_signalled(sig: int, frame: Any) -> None:
    raise _Signalled(sig)


def run_mpi_job(spec: dict[str, Any], *, launcher: str | None = None,
                timeout: float | None = None, hosts: str | None = None,
                hostfile: str | None = None, stdout: Any = None,
                stderr: Any = None, handle_signals: bool = False) -> Outcome:
    """Run the job of ``spec`` under the MPI's launcher and say how it ended.

    ``stdout`` / ``stderr``: text streams for the job's output (default: this process's).
    ``handle_signals`` (amnet-run, in its main thread): SIGTERM and SIGHUP end the job as
    Ctrl-C does (status 128 + the signal), and what it left is removed.

    Raises:
        ConfigError: no MPI launcher (see :func:`mpiexec_command`).
    """
    topo = Topology.from_wire(spec["topology"])
    cmd = mpiexec_command(launcher, topo, hosts, hostfile)
    results = tempfile.mkdtemp(prefix="amnet-mpi-")
    spec = dict(spec, mpi_results=results)
    text = proto.spec_to_env(spec)
    if len(text) > ENV_LIMIT:
        path = os.path.join(results, "spec")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)
        text = "@" + path
    env = dict(os.environ, **{proto.SPEC_ENV: text})
    out, err = stdout or sys.stdout, stderr or sys.stderr
    code, head = 0, None
    try:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace",
                             start_new_session=True, bufsize=1, preexec_fn=_on_our_death)
    except OSError as e:
        shutil.rmtree(results, ignore_errors=True)
        return Outcome(127, f"could not start the MPI launcher {shlex.join(cmd[:1])}: {e}")
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    pumps = [threading.Thread(target=_pump, args=(p.stdout, out, tail), daemon=True),
             threading.Thread(target=_pump, args=(p.stderr, err, tail), daemon=True)]
    for t in pumps:
        t.start()
    watch = _Watch(results, topo.procs)
    watcher = threading.Thread(target=watch.run, args=(p,), daemon=True)
    watcher.start()
    saved = {}
    if handle_signals:
        saved = {sig: signal.signal(sig, _raise_signalled)
                 for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            code = p.wait(timeout)
        except subprocess.TimeoutExpired:
            code, head = 124, f"timed out after {timeout:g} s"
            _stop(p, signal.SIGTERM)
        except KeyboardInterrupt:
            code, head = 130, "interrupted by SIGINT"
            _stop(p, signal.SIGINT)
        except _Signalled as e:
            sig = e.args[0]
            code, head = 128 + sig, f"interrupted by {signal.Signals(sig).name}"
            _stop(p, signal.SIGTERM)
        for sig, old in saved.items():
            signal.signal(sig, old)
        for t in pumps:
            t.join(5.0)
        watcher.join(1.0)
        return _outcome(results, topo, code, head, p.returncode, cmd, list(tail),
                        watch.first)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything of the job still in its group
        except (ProcessLookupError, PermissionError):
            pass
        _remove_shm(spec["token"])
        shutil.rmtree(results, ignore_errors=True)
        for path in _snapshot(watch.leftovers):
            try:
                os.unlink(path)
            except OSError:
                pass


def _snapshot(items: set[str]) -> list[str]:
    """A copy of a set the watch thread may still be adding to (it ends with the job)."""
    for _ in range(10):
        try:
            return list(items)
        except RuntimeError:  # changed size while copied
            time.sleep(0.01)
    return []


def _on_our_death() -> None:
    """In the MPI launcher's child, before exec: SIGTERM when we die (even by SIGKILL), on
    which it ends the job's processes."""
    set_pdeathsig(signal.SIGTERM)


def _stop(p: subprocess.Popen, sig: int) -> None:
    """Ask the MPI launcher to end the job (it ends its processes), then kill the group."""
    try:
        os.killpg(p.pid, sig)
        p.wait(STOP_S)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


class _Watch:
    """Which process of the job ended first, while the MPI's launcher still ran: the one a
    ``kill -9`` took, before the launcher ended the others (MPICH's Hydra reports how a
    process died, not which one). Watches the processes of this host, by the pid each wrote
    at start."""

    def __init__(self, results: str, procs: int) -> None:
        self.results, self.procs = results, procs
        self.seen: set[int] = set()  # processes whose pid file was read
        self.pids: dict[int, int] = {}  # proc -> pid, for the processes on this host
        self.first: int | None = None
        self.host = socket.gethostname()
        self.parents: set[int] = set()  # the launcher's processes that started ours
        #: what MPICH's Hydra proxies of this job keep open in /tmp (their topology file,
        #: which an MPI_Abort leaves behind): removed when the job is over
        self.leftovers: set[str] = set()

    def run(self, p: subprocess.Popen) -> None:
        while p.poll() is None and self.first is None:
            if len(self.seen) < self.procs:
                self._read()
            gone = []
            for proc, pid in list(self.pids.items()):
                if _alive(pid):
                    continue
                if os.path.exists(os.path.join(self.results, pid_name(proc))):
                    gone.append(proc)  # it did not get to say it ended normally
                else:
                    del self.pids[proc]
            if gone:  # one: that is the one; several at once: the launcher's clean-up
                self.first = gone[0] if len(gone) == 1 else None
                return
            # every 2 ms for up to 4 processes, less often for more: about 1% of a core
            time.sleep(WATCH_S * max(1.0, len(self.pids) / 4))

    def _read(self) -> None:
        for proc in range(self.procs):
            if proc in self.seen:
                continue
            try:
                with open(os.path.join(self.results, pid_name(proc))) as f:
                    pid, host = f.read().split()
            except (OSError, ValueError):
                continue
            self.seen.add(proc)
            if host == self.host:
                self.pids[proc] = int(pid)
                self._note_launcher_files(int(pid))

    def _note_launcher_files(self, pid: int) -> None:
        """Note the Hydra topology file (``/tmp/hydra_hwloc_xmlfile_*``) that the parent of
        process ``pid`` (its launcher's proxy) holds open: its proxy removes it when the job
        ends normally, nobody when it ends by ``MPI_Abort``."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            parent = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            return
        if parent in self.parents:
            return
        self.parents.add(parent)
        try:
            fds = os.listdir(f"/proc/{parent}/fd")
        except OSError:
            return
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{parent}/fd/{fd}")
            except OSError:
                continue
            if os.path.basename(target).startswith(HYDRA_TOPOLOGY_FILE):
                self.leftovers.add(target)


HYDRA_TOPOLOGY_FILE = "hydra_hwloc_xmlfile_"  # MPICH's Hydra: /tmp/hydra_hwloc_xmlfile_XXXXXX
PF_EXITING = 0x4  # Linux's flag of a process that is ending (/proc/PID/stat, field 9)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. Not a process that is ending (a killed process
    with a large address space takes milliseconds to, and the MPI launcher may have killed
    and reaped others meanwhile) or has ended and is not collected yet (a zombie:
    ``kill(pid, 0)`` would still find both)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return fields[0] not in (b"Z", b"X") and not int(fields[6]) & PF_EXITING
    except (IndexError, ValueError):
        return True


def _died(topo: Topology, proc: int | None, tail: list[str]) -> Outcome | None:
    """The failure of a process that died without a word (``kill -9``), in the native
    launcher's words (``rank 2 (node 1, proc 2, host h) killed by signal 9 (SIGKILL)``): how
    it died from the MPI launcher's report (MPICH's Hydra: ``... (signal S)``, ``EXIT CODE:
    C``; Open MPI's PRRTE: ``process rank R with PID P on node H exited on signal S``),
    which process from :class:`_Watch` (when it saw it: else from Open MPI's report, which
    names the rank, or the signal alone). None when the report says nothing of how."""
    from .._jobstate import JobState

    text = "".join(tail)
    sig = re.search(r"\(signal (\d+)\)|KILLED BY SIGNAL: (\d+)|exited on\s+signal (\d+)", text)
    exit_code = re.search(r"EXIT CODE: (\d+)", text)
    named = re.search(r"process rank (\d+) with PID \d+ on node (\S+) exited on\s+signal",
                      text)
    host = socket.gethostname()
    if proc is None and named is not None and int(named.group(1)) < topo.procs:
        proc = int(named.group(1))  # the MPI rank is the process (amnet-run's rank order)
        host = named.group(2)
    if proc is None:  # the launcher ended the others before the watch saw which one died
        if sig is None:
            return None
        n = int(next(g for g in sig.groups() if g))
        try:
            name = signal.Signals(n).name
        except ValueError:
            name = f"signal {n}"
        return Outcome(128 + n, f"a process of the job was killed by signal {n} ({name}); "
                                "the MPI's launcher ended the others before amnet-run saw "
                                "which")
    if sig is not None:
        how = -int(next(g for g in sig.groups() if g))
    elif exit_code is not None and int(exit_code.group(1)):
        how = int(exit_code.group(1))
    else:
        return None
    st = JobState(topo)
    st.proc_host[proc] = host
    st.proc_exited(proc, how)
    f = st.failure
    if f is None:
        return None
    return Outcome(f.code, f.diagnosis, {}, f.rank, st.where([f.rank]))


def pid_name(proc: int) -> str:
    """The result directory's file where process ``proc`` writes ``PID HOST`` at start."""
    return f"proc-{proc}.pid"


def _outcome(results: str, topo: Topology, code: int, head: str | None, status: int | None,
             cmd: list[str], tail: list[str], first: int | None) -> Outcome:
    from ..core._mpiboot import FAILURE, result_name

    got: dict[int, bytes] = {}
    for r in range(topo.size):
        try:
            with open(os.path.join(results, result_name(r)), "rb") as f:
                got[r] = f.read()
        except OSError:
            pass
    try:
        with open(os.path.join(results, FAILURE), "rb") as f:
            fail = pickle.loads(f.read())
    except (OSError, pickle.UnpicklingError, EOFError):
        fail = None
    if head is not None:  # a timeout or a signal: ours, whatever the ranks did meanwhile
        return Outcome(code, f"{head}; the MPI launcher was told to end the job", got)
    if fail is not None:
        return Outcome(fail["code"], fail["diagnosis"], got, fail["rank"], fail["where"],
                       fail["error"])
    died = _died(topo, first, tail) if status else None
    if died is not None:
        died.results = got
        return died
    if status:
        what = f"signal {-status}" if status < 0 else f"status {status}"
        return Outcome(128 - status if status < 0 else status,
                       f"the MPI launcher ({os.path.basename(cmd[0])}) ended with {what} "
                       "and no rank reported a failure", got)
    return Outcome(0, None, got)


def _remove_shm(token: str) -> None:
    """Remove what the job's processes left in /dev/shm on this host (PSHM objects of a job
    killed before every process of a node mapped them)."""
    from ..pshm._layout import pshm_prefix

    prefix = pshm_prefix(token)
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
