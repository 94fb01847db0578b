"""Jobs on the mpi conduit as users start them: ``mpiexec ... python -m amnet app.py`` (the
topology from MPI or simulated, the bootstrap's collectives over MPI), ``amnet-run --conduit
mpi`` (which runs the MPI's launcher), and what they do on failure, timeout and ``kill -9``:
the one-line diagnosis, ``MPI_Abort``, nothing left behind. Bad options are refused before
anything starts. The core, VIS and upc_rt suites run over mpi in their own modules (their
``*-mpi`` topologies); MPICH's network path is forced for all of them (tests/conftest.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import leftovers

import amnet
from amnet.launch.mpilaunch import find_mpiexec, mpiexec_command

MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="the test extra's mpich wheel has "
                                "mpiexec; it is missing")

APP = """\
import sys, threading
import amnet
from mpi4py import MPI
ep = amnet.init()
n = ep.size
ep.put((ep.rank + 1) % n, 0, bytes([ep.rank + 1]) * 100000)
ep.barrier()
got = ep.segment[:100000]
assert (got == (ep.rank - 1) % n + 1).all()
print(f"rank {ep.rank} of {n} node {ep.node} level {MPI.Query_thread()} "
      f"{threading.current_thread().name}", flush=True)
if len(sys.argv) > 1 and ep.rank == int(sys.argv[1]):
    raise ValueError(f"boom on {ep.rank}")
ep.barrier()
"""


def all_shm() -> set[str]:
    """Every name in /dev/shm (amnet's and the MPI's)."""
    return set(os.listdir("/dev/shm"))


@pytest.fixture
def app(runner):
    before = all_shm()
    yield runner.script("app.py", APP)
    deadline = time.monotonic() + 2
    while all_shm() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all_shm() - before == set()


def mpiexec(runner, n: int, *args: str, timeout: float = 60,
            drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in runner.env().items() if k not in drop}
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "amnet", *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=runner.tmp)


def ranks_said(out: str) -> dict[int, str]:
    return {int(ln.split()[1]): ln for ln in out.splitlines() if ln.startswith("rank ")}


def test_own_mpiexec_topology_from_mpi(runner, app):
    """No amnet launcher: every MPI process is an amnet process, MPI_Comm_split_type says
    this host is one node, and MPI runs at MPI_THREAD_SERIALIZED (2). With MPICH told that
    no two processes share a host (MPIR_CVAR_NOLOCAL=1), each is a node of its own."""
    out = mpiexec(runner, 2, app, drop=("MPIR_CVAR_NOLOCAL",))
    assert out.returncode == 0, out.stderr
    said = ranks_said(out.stdout)
    assert sorted(said) == [0, 1]
    assert all(" of 2 node 0 level 2 MainThread" in s for s in said.values()), said
    out = mpiexec(runner, 2, app)
    assert out.returncode == 0, out.stderr
    said = ranks_said(out.stdout)
    assert [said[r].split(" level")[0] for r in (0, 1)] == ["rank 0 of 2 node 0",
                                                            "rank 1 of 2 node 1"]


def test_own_mpiexec_simulated_nodes_and_threads(runner, app):
    out = mpiexec(runner, 4, "--nodes", "2", "--threads-per-proc", "2", app)
    assert out.returncode == 0, out.stderr
    said = ranks_said(out.stdout)
    assert sorted(said) == list(range(8))
    for r, s in said.items():
        assert f" of 8 node {r // 4} level 2 " in s, s


def hydra_files() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith("hydra_hwloc_xmlfile_")}


def test_own_mpiexec_failure_aborts_with_the_diagnosis(runner, app):
    before = hydra_files()
    try:
        out = mpiexec(runner, 4, "--nodes", "2", app, "3")
    finally:  # Hydra's own leftover of an aborted job (amnet-run removes it; see below)
        for name in hydra_files() - before:
            os.unlink(os.path.join("/tmp", name))
    assert out.returncode != 0
    assert "ValueError: boom on 3" in out.stderr  # the traceback
    assert ("amnet: rank 3 (node 1, proc 3, host " in out.stderr and
            "raised ValueError: boom on 3; ending the job with MPI_Abort(1)" in out.stderr)
    gone_soon(runner.mark)


def gone_soon(mark: str, within: float = 5.0) -> None:
    """Every process of the job is gone within a few seconds (the MPI's launcher may return
    while the last ones are being killed)."""
    deadline = time.monotonic() + within
    while leftovers(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(mark) == []


@pytest.mark.parametrize(("args", "says"), [
    (["--nodes", "3"], "--nodes 3 does not fit 4 processes"),
    (["--threads-per-proc", "0"], "--threads-per-proc must be at least 1, got 0"),
    (["--segment-size", "12"], "segment"),
])
def test_own_mpiexec_bad_shapes_are_one_line_and_status_2(runner, app, args, says):
    out = mpiexec(runner, 4, *args, app)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("python -m amnet: error: ")]
    assert len(lines) == 1 and says in lines[0], out.stderr  # from world rank 0 only
    assert out.stdout == ""


def test_amnet_run_conduit_mpi(runner, app):
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", "2", "--conduit", "mpi",
                 "--label", app)
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 4 and all(f"[{r}] rank {r} of 4 node {r // 2} level 2" in lines[r]
                                   for r in range(4)), lines


def test_amnet_run_conduit_mpi_diagnosis(runner, app):
    """A rank raises: the one-line diagnosis, its status, and nothing left behind, not even
    the topology file MPICH's Hydra leaves in /tmp when a job ends by MPI_Abort."""
    before = hydra_files()
    out = runner("-n", "4", "--nodes", "2", "--conduit", "mpi", app, "2")
    assert out.returncode == 1, out.stderr
    diagnosis = [ln for ln in out.stderr.splitlines() if ln.startswith("amnet-run: ")]
    assert diagnosis == [f"amnet-run: rank 2 (node 1, proc 2, host {os.uname().nodename}) "
                         "raised ValueError: boom on 2"], out.stderr
    # The other ranks wait in a barrier that only MPI_Abort ends (status 1, not a timeout's
    # 124). MPICH's own "called MPI_Abort" line is not asserted: the aborting process prints
    # it as Hydra tears the job down, and about one job in five loses it.
    assert hydra_files() <= before


def test_amnet_run_conduit_mpi_timeout_leaves_nothing(runner):
    script = runner.script("sleepy.py", "import time, amnet\namnet.init()\ntime.sleep(60)\n")
    t0 = time.monotonic()
    out = runner("-n", "2", "--nodes", "2", "--conduit", "mpi", "--timeout", "2", script)
    assert out.returncode == 124, out.stderr
    assert time.monotonic() - t0 < 20
    assert "amnet-run: timed out after 2 s" in out.stderr


def wait_for(p: subprocess.Popen, ready, within: float = 30.0) -> None:
    """Until ``ready()`` holds (the job's ranks got somewhere), while job ``p`` runs."""
    deadline = time.monotonic() + within
    while not ready():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)


def test_sigterm_to_amnet_run_ends_the_job_and_cleans_up(runner):
    """SIGTERM to amnet-run: the MPI's launcher ends the job, amnet-run exits with 143 and
    leaves nothing: no process, no /dev/shm object, no result directory of its own."""
    import glob

    before = all_shm()
    tmp = runner.tmp / "tmpdir"  # this job's own: another job's result directory is not in it
    tmp.mkdir()
    script = runner.script("sleepy.py", (
        "import time, amnet\n"
        "ep = amnet.init()\n"
        "open(f'up{ep.rank}', 'w')\n"
        "time.sleep(60)\n"))
    p = runner.popen("-n", "2", "--nodes", "2", "--conduit", "mpi", script,
                     env={"TMPDIR": str(tmp)})
    try:
        wait_for(p, lambda: all((runner.tmp / f"up{r}").exists() for r in range(2)))
        assert glob.glob(str(tmp / "amnet-mpi-*"))  # where amnet-run keeps its results
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 143, err
    assert "amnet-run: interrupted by SIGTERM" in err, err
    gone_soon(runner.mark)
    assert all_shm() - before == set()
    assert glob.glob(str(tmp / "amnet-mpi-*")) == []


def test_kill_9_of_a_rank_ends_the_job(runner):
    """A rank killed with SIGKILL: the MPI's launcher ends the others; amnet-run says which
    rank died and how, exits with 128 + 9, and nothing of the job (process, /dev/shm object)
    is left."""
    before = all_shm()
    script = runner.script("victim.py", (
        "import os, time, amnet\n"
        "ep = amnet.init()\n"
        "open(f'pid{ep.rank}', 'w').write(str(os.getpid()))\n"
        "ep.barrier()\n"
        "time.sleep(60)\n"))
    p = runner.popen("-n", "4", "--nodes", "2", "--conduit", "mpi", script)
    try:
        pidfile = runner.tmp / "pid3"
        wait_for(p, lambda: pidfile.exists() and pidfile.read_text())
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    # the native launcher's diagnosis and status: which process from amnet-run's watch of
    # the job's pids, how from the MPI launcher's report
    assert p.returncode == 137, err
    named = f"amnet-run: rank 3 (node 1, proc 3, host {os.uname().nodename}) killed by " \
        "signal 9 (SIGKILL)"
    unnamed = ("amnet-run: a process of the job was killed by signal 9 (SIGKILL); the MPI's "
               "launcher ended the others before amnet-run saw which")
    assert named in err or unnamed in err, err
    deadline = time.monotonic() + 5
    while (leftovers(runner.mark) or all_shm() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(runner.mark) == [] and all_shm() - before == set()


@pytest.mark.parametrize(("args", "says"), [
    (["--conduit", "mpi", "--spawner", "ssh", "--hosts", "a"],
     "--spawner ssh: the mpi conduit's processes are started by the MPI's launcher"),
    (["--conduit", "mpi", "--insecure"], "--insecure: the mpi conduit's processes"),
    (["--mpiexec", "mpiexec"], "--mpiexec starts the processes of a job on the mpi conduit; "
                               "this job's conduit is zmq"),
    (["--conduit", "mpi", "--mpiexec", "no-such-launcher-here"],
     "the MPI launcher 'no-such-launcher-here' (--mpiexec) was not found on PATH"),
])
def test_amnet_run_refuses_what_mpi_cannot_take(runner, args, says):
    script = runner.script("never.py", "open('ran', 'w')\n")
    out = runner("-n", "2", *args, script)
    assert out.returncode == 2, out.stderr
    assert f"amnet-run: error: {says}" in out.stderr, out.stderr
    assert not (runner.tmp / "ran").exists()


def test_mpiexec_command_per_launcher(tmp_path, monkeypatch):
    """P processes per host go to each launcher in its own words (MPICH's Hydra, Open MPI,
    srun), only when hosts are given (without: this host's simulated nodes); srun always
    gets them, and Open MPI is told to pass the job spec on."""
    from amnet._topology import Topology

    topo = Topology.make(8, 2, 2)  # 4 processes, 2 per node
    tail = [sys.executable, "-P", "-m", "amnet"]
    fake = tmp_path / "srun"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert mpiexec_command("srun --mpi=pmix", topo) == [
        "srun", "--mpi=pmix", "-n", "4", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
        *tail]
    assert mpiexec_command(MPIEXEC, topo) == [MPIEXEC, "-n", "4", *tail]
    assert mpiexec_command(MPIEXEC, topo, hosts="a,b") == [
        MPIEXEC, "-n", "4", "-ppn", "2", "-hosts", "a,b", *tail]
    ompi = tmp_path / "ompi-mpiexec"  # says what Open MPI's says to --version
    ompi.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.5'\n")
    ompi.chmod(0o755)
    assert mpiexec_command(str(ompi), topo, hosts="a,b") == [
        str(ompi), "-n", "4", "-x", "AMNET_JOB_SPEC", "--map-by", "ppr:2:node",
        "--host", "a:2,b:2", *tail]
    assert mpiexec_command(str(ompi), topo) == [str(ompi), "-n", "4", "-x", "AMNET_JOB_SPEC",
                                                *tail]


def _thread_level(ep):
    from mpi4py import MPI

    return MPI.Query_thread(), amnet.config.conduit


def test_amnet_run_function_on_mpi(mark):
    got = amnet.run(_thread_level, n=4, nodes=2, threads_per_proc=2, conduit="mpi",
                    timeout=60)
    assert got == [(2, "mpi")] * 4  # MPI_THREAD_SERIALIZED in every process


def _overlapping_puts(ep):
    """Rank 0 streams puts larger than a Medium AM (bulk MPI messages, received ahead of
    their turn while earlier ones are handled) to overlapping and disjoint places, with
    small puts between; rank 1's segment must read as if they ran one by one, in order."""
    import numpy as np

    big, seg = 300_000, ep.segment
    want = np.zeros(4 * big, dtype=np.uint8)
    if ep.rank == 0:
        for rnd in range(5):
            for k in range(12):
                off = (k % 3) * (big // 2)  # each overlaps its neighbours
                val = (rnd * 12 + k) % 250 + 1
                ep.put_nbi(1, off, np.full(big, val, dtype=np.uint8))
                want[off:off + big] = val
                if k % 4 == 0:
                    ep.put_nbi(1, off + 10, np.full(100, 255, dtype=np.uint8))
                    want[off + 10:off + 110] = 255
            ep.wait_nbi()
    ep.barrier()
    return want.tobytes() if ep.rank == 0 else seg[:4 * big].tobytes()


def test_bulk_payloads_received_ahead_keep_put_order(mark):
    want, got = amnet.run(_overlapping_puts, n=2, nodes=2, conduit="mpi", timeout=60)
    assert got == want


def _direct_and_bulk_puts(ep):
    """Puts that go from the caller's buffer itself: blocking ones (they return once MPI has
    the data, so the buffer may be changed and even resized at once), both ranks putting to
    each other at the same time (each serves the other's bulk messages while it waits), and
    put_nbi(bulk=True), whose sources stay untouched until wait_nbi."""
    import numpy as np

    other, big = 1 - ep.rank, 1 << 20
    base = 2 * big * ep.rank  # where this rank writes in the other's segment
    checks = []
    for rnd in range(6):
        buf = bytearray(np.full(big, rnd + 1 + 10 * ep.rank, dtype=np.uint8).tobytes())
        ep.put(other, base, buf)
        buf.extend(b"resized")  # no export left behind: a BufferError otherwise
        buf[:big] = bytes(big)
        checks.append(ep.get(other, base, big) == bytes([rnd + 1 + 10 * ep.rank]) * big)
    ep.barrier()
    srcs = [np.full(40_000 + 7 * k, k + 50, dtype=np.uint8) for k in range(8)]
    offs = [base + 100_000 * k for k in range(8)]
    for off, src in zip(offs, srcs, strict=True):
        ep.put_nbi(other, off, src, bulk=True)
    ep.wait_nbi()
    checks.append(all(ep.get(other, off, src.nbytes) == src.tobytes()
                      for off, src in zip(offs, srcs, strict=True)))
    ep.barrier()
    return checks


def test_direct_and_bulk_puts(mark):
    got = amnet.run(_direct_and_bulk_puts, n=2, nodes=2, conduit="mpi", timeout=60)
    assert got == [[True] * 7] * 2


def test_launcher_reports_of_a_killed_process_name_it():
    """A process killed without a word: amnet-run says which and how in the native launcher's
    words, from what the MPI's launcher printed when its watch did not see it (Open MPI's
    PRRTE names the rank; MPICH's Hydra only the signal, and then amnet-run says so)."""
    from amnet._topology import Topology
    from amnet.launch.mpilaunch import _died

    topo = Topology.make(4, 2, 1)  # 4 processes, 2 per node
    prrte = ["--------------------------------------------------------------------------\n",
             "prterun noticed that process rank 3 with PID 23673 on node n07 exited on\n",
             "signal 9 (Killed).\n"]
    out = _died(topo, None, prrte)
    assert (out.code, out.failed_rank) == (137, 3)
    assert out.diagnosis == "rank 3 (node 1, proc 3, host n07) killed by signal 9 (SIGKILL)"
    hydra = ["YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"]
    out = _died(topo, None, hydra)
    assert out.code == 137 and out.failed_rank is None
    assert "killed by signal 9 (SIGKILL); the MPI's launcher ended the others" in out.diagnosis
    assert _died(topo, 2, hydra).failed_rank == 2
    assert _died(topo, None, ["mpiexec: something else went wrong\n"]) is None


# -- MPICH's own network module: receives from any source -----------------------------------
# MPICH's network path on one host (no shared-memory shortcut), its network module its own
# choice: the mpich wheel's ucx (amnet names none: amnet.conduits._mpi.mpich_settings)
DEFAULT_NETMOD = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": None, "FI_PROVIDER": None}


@pytest.mark.parametrize("mode", ["mprobe", "named"])
def test_matched_probes_from_any_source_lose_nothing_over_the_default_module(runner, mode):
    # plain mpi4py (tests/data/anysource.py): over the wheel's ucx, receives kept posted from
    # MPI_ANY_SOURCE lose answers of a burst of 1200 requests in most runs (docs/conduits.md);
    # matched probes from any source (the conduit's way) and receives from a named source
    # get every one, run after run
    from conftest import DATA

    for _ in range(3):
        out = subprocess.run([MPIEXEC, "-n", "4", sys.executable, str(DATA / "anysource.py"),
                              mode], capture_output=True, text=True, timeout=60,
                             env=runner.env(DEFAULT_NETMOD), cwd=runner.tmp)
        assert out.returncode == 0, out.stderr
        # (mpiexec may join two ranks' lines: read the reports, not the lines)
        said = sorted(re.findall(r"rank (\d) (\w+): (\d+) of (\d+)", out.stdout))
        assert said == [(str(r), mode, "1200", "1200") for r in range(4)], out.stdout


def test_the_core_job_over_mpichs_default_network_module(runner):
    # the core AM conformance job (its FIFO section: a burst of 1200 AMs a rank, which used
    # to stop half way over ucx between hosts) with MPICH's own choice of network module,
    # which the conduit receives from with matched probes
    import conformance

    ranks = conformance.run(runner, "core", {"n": 4, "nodes": 2, "conduit": "mpi"},
                            env=DEFAULT_NETMOD)
    conformance.check("core", ranks)


PROBES = """
import amnet
ep = amnet.init()
print(f"rank {ep.rank} probes {ep._eng.conduit.probes}", flush=True)
ep.barrier()
"""


@pytest.mark.parametrize(("env", "probes"), [(DEFAULT_NETMOD, True), ({}, False)],
                         ids=["default-module-ucx", "ofi-tcp"])
def test_the_conduit_receives_by_matched_probes_only_over_ucx(runner, env, probes):
    out = runner("-n", "2", "--nodes", "2", "--conduit", "mpi",
                 runner.script("probes.py", PROBES), env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [f"rank {r} probes {probes}" for r in range(2)]
