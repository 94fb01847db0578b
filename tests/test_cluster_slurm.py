"""Jobs on a real Slurm of two nodes (tests/cluster/slurmnode.py): ``slurmctld`` here, a
``slurmd`` in each of two namespaced hosts (tests/cluster/sshhosts.py: their own address and
host name), so a job's tasks run on two hosts as on a cluster. On it: the srun spawner,
``python -m amnet`` under ``srun --mpi=pmi2``, the mpi conduit with ``srun`` as its launcher,
the conformance jobs (core AM, VIS, upc_rt, every collective) under the srun spawner and over
the mpi conduit, the batch scripts of docs/conduits.md submitted as they are written (Open
MPI, ``srun --mpi=pmix``), an allocation too small for the job, and ``kill -9`` of
``amnet-run`` and of a rank.

Each test checks that its ranks ran as tasks of one Slurm job step, on both hosts (their host
names, their network namespaces): a stand-in (this host's processes, a fake allocation)
fails them. They skip, saying why, without root or the packages (``.ci/run`` installs
slurm-wlm, munge and openssh-server).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import conformance
import pytest
from conftest import DATA, MPICH_DEFAULTS, leftovers

ROOT = Path(__file__).parent.parent
SLURM_JOB = str(DATA / "slurmjob.py")
SLURM_LINE = re.compile(r"rank (\d+) host (\S+) job (\d+) step (\d+) ok (\w+) conduit (\w+)")
#: Open MPI as the job's MPI (mpi4py's wheel has a build for it; Debian's libopenmpi), as root
OPEN_MPI = {"MPI4PY_MPIABI": "openmpi", "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


@pytest.fixture(scope="module")
def slurm(hosts):
    import slurmnode

    why = slurmnode.missing()
    if why:
        pytest.skip(why)
    with slurmnode.SlurmNode(hosts) as s:
        yield s


def env_of(slurm, extra: dict | None = None) -> dict:
    """A job's environment: the cluster's, MPICH's own choices (as between real hosts), this
    interpreter's ``python`` and ``amnet-run`` first on PATH (batch scripts call them)."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**MPICH_DEFAULTS, **slurm.env(), "PATH": path, **(extra or {})}


def slurm_lines(out, slurm, n: int, conduit: str, text: str | None = None) -> None:
    """Every one of ``n`` ranks ran as a task of one Slurm job step, on ``conduit``, half on
    each host, and its AMs, put and reduce_all were right."""
    text = out.stdout if text is None else text
    assert out.returncode == 0, text + out.stderr
    lines = [SLURM_LINE.fullmatch(ln) for ln in text.splitlines()]
    assert len(lines) == n and all(lines), text + out.stderr
    assert sorted(int(m.group(1)) for m in lines) == list(range(n))
    by_host = {}
    for m in lines:
        by_host.setdefault(m.group(2), []).append(int(m.group(1)))
    assert sorted(by_host) == sorted(slurm.nodes), by_host  # both hosts, by their names
    assert all(len(r) == n // 2 for r in by_host.values()), by_host
    assert len({(m.group(3), m.group(4)) for m in lines}) == 1  # one job step
    assert all(m.group(5) == "True" and m.group(6) == conduit for m in lines), text


def srun_cmd(*args: str) -> list[str]:
    return ["srun", *args]


def run_cmd(runner, slurm, cmd: list[str], extra: dict | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=runner.env(env_of(slurm, extra)), cwd=runner.tmp,
                          stdin=subprocess.DEVNULL)


def open_mpi_or_skip() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **OPEN_MPI},
        stdin=subprocess.DEVNULL)
    if probe.returncode != 0 or "Open MPI" not in probe.stdout:
        pytest.skip("mpi4py cannot load Open MPI here (apt-get install libopenmpi-dev)")


# -- jobs ------------------------------------------------------------------------------------
def test_srun_spawner_on_two_slurm_nodes(runner, slurm):
    out = runner("-n", "4", "--nodes", "2", "--spawner", "srun", SLURM_JOB,
                 env=env_of(slurm), timeout=90)
    slurm_lines(out, slurm, 4, "zmq")


def test_python_m_amnet_under_srun_pmi2(runner, slurm):
    """The user's own ``srun --mpi=pmi2`` starts the processes; amnet takes them over MPI."""
    out = run_cmd(runner, slurm, srun_cmd("-N", "2", "--ntasks-per-node", "2", "--mpi=pmi2",
                                          sys.executable, "-P", "-m", "amnet", SLURM_JOB))
    slurm_lines(out, slurm, 4, "mpi")


def test_mpi_conduit_with_srun_as_its_launcher(runner, slurm):
    out = runner("-n", "4", "--procs-per-node", "2", "--conduit", "mpi", "--mpiexec",
                 "srun --mpi=pmi2", SLURM_JOB, env=env_of(slurm), timeout=90)
    slurm_lines(out, slurm, 4, "mpi")


@pytest.mark.parametrize("name", conformance.NAMES)
def test_conformance_jobs_under_the_srun_spawner(runner, slurm, name):
    """The core AM job, VIS, upc_rt's suite and every collective, started by srun on both
    Slurm nodes (an agent per node, zmq with CurveZMQ between them)."""
    ranks = conformance.run(runner, name, dict(n=4, nodes=2, spawner="srun"), slurm.env())
    conformance.check(name, ranks)
    check_where(ranks, slurm, "zmq")


def test_core_job_over_the_mpi_conduit_under_srun(runner, slurm):
    """The core AM job over ``--conduit mpi``, ``srun --mpi=pmi2`` starting the MPI
    processes on both nodes, MPICH left to its own choices (see test_cluster.py)."""
    ranks = conformance.run(runner, "core", dict(n=4, nodes=2, conduit="mpi",
                                                 mpiexec="srun --mpi=pmi2"), slurm.env())
    conformance.check("core", ranks)
    check_where(ranks, slurm, "mpi")


def check_where(ranks: list[dict], slurm, conduit: str) -> None:
    steps = {r["where"]["slurm"] for r in ranks}
    assert len(steps) == 1 and None not in steps.pop()  # tasks of one Slurm job step
    for r in ranks:
        w = r["where"]
        k = w["rank"] // 2
        assert w["node"] == k and w["host"] == slurm.nodes[k]
        assert w["netns"] == slurm.hosts.ns_inode(k) and w["conduit"] == conduit


def recipe_scripts() -> list[str]:
    """The batch scripts of docs/conduits.md's cluster recipe, as written there."""
    text = (ROOT / "docs" / "conduits.md").read_text()
    text = text[text.index("### A cluster recipe"):]
    return re.findall(r"```sh\n(#!/bin/bash\n#SBATCH .*?)```", text, re.S)


def test_the_docs_recipe_has_two_batch_scripts():
    scripts = recipe_scripts()
    assert len(scripts) == 2
    assert "srun --mpi=pmix python -m amnet" in scripts[0]
    assert "amnet-run --conduit mpi --mpiexec 'srun --mpi=pmix'" in scripts[1]


@pytest.mark.parametrize("k", [0, 1], ids=["srun-python-m-amnet", "amnet-run-mpiexec-srun"])
def test_the_docs_recipe_runs_as_written(runner, slurm, k):
    """docs/conduits.md's batch script ``k``, unchanged, submitted with ``sbatch --wait`` with
    Open MPI (``srun --mpi=pmix``): 8 rank-threads, 4 on each node, its ``app.py`` the
    Slurm job of these tests."""
    open_mpi_or_skip()
    script = runner.tmp / "job.sh"
    script.write_text(recipe_scripts()[k])
    (runner.tmp / "app.py").write_text(Path(SLURM_JOB).read_text())
    out = run_cmd(runner, slurm, ["sbatch", "--wait", "-o", "job.out", str(script)],
                  OPEN_MPI, timeout=120)
    text = (runner.tmp / "job.out").read_text() if (runner.tmp / "job.out").exists() else ""
    ranks = [ln for ln in text.splitlines() if ln.startswith("rank ")]
    slurm_lines(out, slurm, 8, "mpi", "\n".join(ranks))
    assert "vader" not in text and "error" not in text.lower(), text


@pytest.mark.parametrize("how", [["--spawner", "srun"],
                                 ["--conduit", "mpi", "--mpiexec", "srun --mpi=pmi2"]],
                         ids=["srun-spawner", "mpi-conduit"])
def test_an_allocation_too_small_is_refused_before_asking_slurm(runner, slurm, how):
    """Inside a one-node allocation a job of 2 nodes is refused at once, naming both numbers
    (it used to wait in Slurm's queue for nodes the allocation could never get)."""
    t0 = time.monotonic()
    out = run_cmd(runner, slurm, ["salloc", "-N", "1",
                                  *runner.cmd("-n", "4", "--nodes", "2", *how, SLURM_JOB)],
                  timeout=60)
    assert out.returncode == 2, out.stderr
    assert "the job needs 2 nodes and Slurm allocation" in out.stderr
    assert "has 1 (SLURM_JOB_NUM_NODES)" in out.stderr and "(--nodes 1)" in out.stderr
    assert out.stdout == ""
    assert time.monotonic() - t0 < 15


def test_agents_that_never_reach_amnet_run_say_where_they_tried(runner, slurm):
    """``--bootstrap-addr`` on this host's loopback, agents started by srun on the namespaced
    hosts: they cannot reach it, and after the launcher's silence they stop, naming the
    address they tried and the option to change it."""
    out = runner("-n", "2", "--nodes", "2", "--spawner", "srun", "--bootstrap-addr",
                 "127.0.0.1", SLURM_JOB, env=env_of(slurm), timeout=90)
    assert out.returncode != 0
    assert "never reached it at tcp://127.0.0.1:" in out.stderr, out.stderr
    assert "give amnet-run --bootstrap-addr" in out.stderr
    assert out.stdout == ""


def squeue(slurm) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%T"], capture_output=True, text=True,
                          env={**os.environ, **slurm.env()}).stdout


def test_kill_9_of_amnet_run_ends_a_pending_srun(runner, slurm):
    """Outside an allocation, a job of 3 nodes on the two-node cluster waits in Slurm's queue
    (srun asked for an allocation); amnet-run killed with SIGKILL: srun goes too (it gets
    SIGTERM when amnet-run dies), and Slurm forgets the request."""
    proc = runner.popen("-n", "3", "--nodes", "3", "--spawner", "srun", SLURM_JOB,
                        env=env_of(slurm))
    try:
        deadline = time.monotonic() + 20
        while "PENDING" not in (q := squeue(slurm)):  # the request is in Slurm's queue
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, q
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while leftovers(runner.mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert leftovers(runner.mark) == []  # srun (it carries the job's mark) is gone
        q = squeue(slurm)
        assert "PENDING" not in q and "RUNNING" not in q, q
    finally:
        proc.kill()
        proc.communicate()


WAITING = """
import os, time, amnet
ep = amnet.init()
print("ready", ep.rank, os.getpid(), flush=True)
ep.barrier()
time.sleep(120)
"""


def vader_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("vader_segment.")}


def test_kill_9_of_a_rank_under_srun_pmix_leaves_nothing(runner, slurm):
    """``srun --mpi=pmix python -m amnet`` with Open MPI, a rank on the second node killed with
    SIGKILL: the step ends on both nodes, and nothing is left: no process of the job, none of
    amnet's shared objects, none of Open MPI's (its segments are its own to remove: amnet
    leaves them, so a clean run's ``MPI_Finalize`` does not warn about them)."""
    open_mpi_or_skip()
    script = runner.tmp / "waiting.py"
    script.write_text(WAITING)
    before = vader_segments()
    cmd = srun_cmd("-N", "2", "--ntasks-per-node", "2", "--mpi=pmix", sys.executable, "-P",
                   "-m", "amnet", str(script))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=runner.env(env_of(slurm, OPEN_MPI)), cwd=runner.tmp,
                            start_new_session=True)
    try:
        pids = {}
        while len(pids) < 4:
            line = proc.stdout.readline()
            assert line, proc.communicate()
            _, rank, pid = line.split()
            pids[int(rank)] = int(pid)
        t0 = time.monotonic()
        os.kill(pids[3], signal.SIGKILL)  # rank 3: on the second node
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert "task 3: Killed" in err, err
        assert time.monotonic() - t0 < 45
        deadline = time.monotonic() + 10
        while (leftovers(runner.mark) or vader_segments() - before) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert leftovers(runner.mark) == []
        assert vader_segments() - before == set()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
