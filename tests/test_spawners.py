"""Spawners: hosts and hostfiles, and jobs started through each way of placing agents."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from amnet import Topology
from amnet.launch.spawners import (
    SpawnerError,
    assign_hosts,
    make_spawner,
    parse_hostfile,
    parse_hosts,
)

HELLO = str(Path(__file__).parent.parent / "examples" / "hello.py")

WHERE = """
import os, amnet
ep = amnet.init()
print(f"rank {ep.rank} node {ep.node} fwd {os.environ.get('AMTEST_FWD')} "
      f"addr {ep.bootstrap.address} cwd {os.getcwd()}", flush=True)
ep.barrier()
"""


def executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def stand_in(runner, tool: str, body: str) -> tuple[Path, str]:
    """A stand-in for ``tool``, first on the returned PATH: a shell script that logs its
    arguments, a line a call, to the returned log (``tool``.log), then runs ``body``."""
    log = runner.tmp / f"{tool}.log"
    bindir = runner.tmp / "bin"
    bindir.mkdir(exist_ok=True)
    executable(bindir / tool, f'#!/bin/sh\necho "$@" >> {log}\n{body}')
    return log, f"{bindir}:{os.environ['PATH']}"


# -- hosts --------------------------------------------------------------------------------------
def test_hostfile(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# our cluster\n\nalpha slots=2\nbeta   # the slow one\n  gamma slots=1\n")
    assert parse_hostfile(str(hf)) == [("alpha", 2), ("beta", None), ("gamma", 1)]


@pytest.mark.parametrize("text,line", [
    ("a\nb slots=0\n", 2), ("a slots=x\n", 1), ("a b\n", 1), ("ok\nbad!host\n", 2),
])
def test_malformed_hostfile_names_the_line(tmp_path, text, line):
    hf = tmp_path / "hosts"
    hf.write_text(text)
    with pytest.raises(SpawnerError, match=f"hostfile {hf}:{line}:"):
        parse_hostfile(str(hf))


def test_empty_hostfile(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# nothing\n")
    with pytest.raises(SpawnerError, match="names no hosts"):
        parse_hostfile(str(hf))


def test_nodes_are_dealt_round_robin_within_slots():
    assert assign_hosts([("a", None), ("b", None)], 5) == ["a", "b", "a", "b", "a"]
    assert assign_hosts([("a", 1), ("b", None)], 4) == ["a", "b", "b", "b"]
    assert assign_hosts([("a", 2), ("b", 1)], 3) == ["a", "b", "a"]
    with pytest.raises(SpawnerError, match=r"4 node\(s\) do not fit .* add up to 3"):
        assign_hosts([("a", 2), ("b", 1)], 4)


def test_parse_hosts():
    assert parse_hosts("a,b") == [("a", None), ("b", None)]
    for bad in ("", "a,", "a b"):
        with pytest.raises(SpawnerError):
            parse_hosts(bad)


def test_srun_and_mpirun_commands(tmp_path, monkeypatch):
    for tool in ("srun", "mpiexec"):
        executable(tmp_path / tool, "#!/bin/sh\necho 'HYDRA build details'\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    topo = Topology.make(8, nodes=4)
    s = make_spawner("srun", topo, hosts="n1,n2,n3,n4")
    assert s.command()[:5] == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1",
                               "--nodelist=n1,n2,n3,n4"]
    assert s.command()[-1] == "--node-from-env"
    m = make_spawner("mpirun", topo)
    assert m.command()[1:5] == ["-n", "4", "-ppn", "1"]
    executable(tmp_path / "mpiexec", "#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.3'\n")
    m = make_spawner("mpirun", topo, hosts="n1,n2")
    assert m.command()[1:9] == ["-n", "4", "--map-by", "ppr:1:node", "-x", "AMNET_JOB_SPEC",
                                "--host", "n1,n2"]


def test_a_slurm_allocation_too_small_is_refused_before_srun(tmp_path, monkeypatch):
    """Inside an allocation of 2 nodes, a job of 4 nodes started with srun (the srun spawner,
    or the mpi conduit with srun as its launcher) is refused with both numbers; a job that
    fits, or one outside any allocation, is not. (tests/test_cluster.py does this on a real
    Slurm.)"""
    from amnet import ConfigError
    from amnet.launch.mpilaunch import mpiexec_command

    executable(tmp_path / "srun", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    big, fits = Topology.make(8, nodes=4), Topology.make(4, nodes=2)
    says = (r"the job needs 4 nodes and Slurm allocation 77 has 2 \(SLURM_JOB_NUM_NODES\); "
            r".* ask salloc/sbatch for 4 nodes \(-N 4\), or run the job on 2 \(--nodes 2\)")
    with pytest.raises(SpawnerError, match=says):
        make_spawner("srun", big)
    with pytest.raises(ConfigError, match=says):
        mpiexec_command("srun --mpi=pmi2", big)
    make_spawner("srun", fits)
    assert mpiexec_command("srun --mpi=pmi2", fits)[:3] == ["srun", "--mpi=pmi2", "-n"]
    monkeypatch.delenv("SLURM_JOB_ID")  # outside an allocation srun makes one: no check
    make_spawner("srun", big)


def test_missing_tools_are_clear_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    topo = Topology.make(2)
    with pytest.raises(SpawnerError, match="needs Slurm's 'srun'"):
        make_spawner("srun", topo)
    with pytest.raises(SpawnerError, match="needs 'mpiexec' or 'mpirun'"):
        make_spawner("mpirun", topo)
    with pytest.raises(SpawnerError, match="needs the 'ssh' command"):
        make_spawner("ssh", topo, hosts="a")


# -- jobs through each spawner --------------------------------------------------------------------
def test_custom_spawner_runs_agents_through_a_wrapper(runner):
    log = runner.tmp / "wrapper.log"
    wrapper = executable(runner.tmp / "wrap.sh",
                         f'#!/bin/sh\necho "host=$1 node=$2" >> {log}\nshift 2\nexec "$@"\n')
    s = runner.script("where.py", WHERE)
    out = runner("-n", "4", "--nodes", "2", "--spawner", "custom", "--hosts", "localhost",
                 "--spawn-cmd", f"{wrapper} %H %N %C", s, env={"AMTEST_FWD": "yes"})
    assert out.returncode == 0, out.stderr
    assert sorted(log.read_text().splitlines()) == ["host=localhost node=0",
                                                    "host=localhost node=1"]
    lines = sorted(out.stdout.splitlines())
    assert [ln.split()[:6] for ln in lines] == [
        ["rank", str(r), "node", str(r // 2), "fwd", "yes"] for r in range(4)]
    assert all(f"cwd {runner.tmp}" in ln for ln in lines)


def test_bootstrap_addr_override(runner):
    s = runner.script("where.py", WHERE)
    out = runner("-n", "2", "--bootstrap-addr", "127.0.0.1", s)
    assert out.returncode == 0, out.stderr
    assert all(" addr tcp://127.0.0.1:" in ln for ln in out.stdout.splitlines())


def test_bootstrap_addr_that_cannot_be_bound(runner):
    out = runner("-n", "2", "--bootstrap-addr", "192.0.2.77:1", HELLO)
    assert out.returncode == 2
    assert "cannot bind the bootstrap service to '192.0.2.77:1'" in out.stderr


def test_ssh_spawner_sends_spec_and_environment(runner):
    # a stand-in for ssh: runs the remote command with an empty environment, as a remote
    # login would not carry ours
    log, path = stand_in(runner, "ssh", """
while [ $# -gt 0 ]; do case "$1" in -T) shift;; -o) shift 2;; *) break;; esac; done
shift
exec env -i PATH=/usr/bin:/bin sh -c "$*"
""")
    s = runner.script("where.py", WHERE)
    out = runner("-n", "4", "--nodes", "2", "--spawner", "ssh", "--hosts", "hostA,hostB", s,
                 env={"AMTEST_FWD": "carried", "PATH": path})
    assert out.returncode == 0, out.stderr
    calls = sorted(log.read_text().splitlines())
    assert [c.split()[:6] for c in calls] == [
        ["-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", h] for h in ("hostA", "hostB")]
    assert all("-m amnet.launch.agent --node" in c for c in calls)
    assert all(" fwd carried " in ln for ln in out.stdout.splitlines())


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs an ssh client")
def test_unreachable_host(runner):
    out = runner("-n", "2", "--spawner", "ssh", "--hosts", "no-such-host.invalid", HELLO)
    assert out.returncode == 255
    assert ("amnet-run: could not start the agent of node 0 on host no-such-host.invalid: "
            "ssh exited with code 255: ") in out.stderr


def test_srun_spawner_in_a_fake_allocation(runner):
    # a stand-in for srun: starts the tasks of one node each, with their SLURM_PROCID
    log, path = stand_in(runner, "srun", """
n=1
while [ $# -gt 0 ]; do case "$1" in --ntasks=*) n=${1#--ntasks=}; shift;; --*) shift;;
  *) break;; esac; done
i=0; pids=""
while [ $i -lt $n ]; do SLURM_PROCID=$i "$@" & pids="$pids $!"; i=$((i+1)); done
rc=0; for p in $pids; do wait $p || rc=$?; done; exit $rc
""")
    s = runner.script("where.py", WHERE)
    out = runner("-n", "6", "--nodes", "3", "--spawner", "srun", s, env={"PATH": path})
    assert out.returncode == 0, out.stderr
    assert log.read_text().startswith("--nodes=3 --ntasks=3 --ntasks-per-node=1 ")
    assert sorted(ln.split()[1:4] for ln in out.stdout.splitlines()) == sorted(
        [str(r), "node", str(r // 2)] for r in range(6))


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec (the test extra)")
def test_mpirun_spawner_with_mpich(runner):
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", "2", "--spawner", "mpirun",
                 HELLO)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 4


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec (the test extra)")
def test_mpirun_spawner_failure_is_diagnosed(runner):
    s = runner.script("fail.py", "import amnet\nep = amnet.init()\n"
                                 "if ep.rank == 1:\n    raise KeyError('k')\nep.barrier()\n")
    out = runner("-n", "2", "--nodes", "2", "--spawner", "mpirun", s)
    assert out.returncode == 1
    assert "rank 1 (node 1, proc 1, host" in out.stderr and "raised KeyError" in out.stderr


# -- two hosts in network namespaces (the netns fixture is in conftest.py) -------------------------
def test_agents_on_another_host_connect_back_over_its_interface(runner, netns):
    ns, host_ip, ns_ip = netns
    s = runner.script("where.py", WHERE)
    out = runner("-n", "4", "--nodes", "2", "--spawner", "custom", "--hosts", ns_ip,
                 "--spawn-cmd", f"ip netns exec {ns} %C", s)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    assert all(f" addr tcp://{host_ip}:" in ln for ln in lines)


def test_remote_agents_keep_their_own_home(runner):
    s = runner.script("home.py", "import os, amnet\namnet.init()\nprint(os.environ.get('HOME'),"
                                 " os.environ.get('AMTEST_FWD'))\n")
    out = runner("-n", "1", "--spawner", "custom",
                 "--spawn-cmd", "env -i HOME=/remote/home PATH=/usr/bin:/bin %C", s,
                 env={"AMTEST_FWD": "fwd"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["/remote/home", "fwd"]


def test_spec_in_the_environment_must_fit(tmp_path, monkeypatch):
    from amnet import Config
    from amnet._protocol import SPEC_ENV, spec_from_env
    from amnet.launch._spec import build_spec

    executable(tmp_path / "srun", "#!/bin/sh\n")
    executable(tmp_path / "mpiexec", "#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.3'\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    topo = Topology.make(2, nodes=2)
    srun = make_spawner("srun", topo)
    spec = build_spec(topo, Config.resolve(env={}), script=HELLO, argv=["a"])
    sent = spec_from_env(srun.env_for_agents(spec)[SPEC_ENV])
    assert sent["env"] is None  # srun exports our environment itself
    ompi = make_spawner("mpirun", topo)
    assert spec_from_env(ompi.env_for_agents(spec)[SPEC_ENV])["env"]["PATH"] == \
        os.environ["PATH"]  # Open MPI does not: the spec carries it
    big = build_spec(topo, Config.resolve(env={}), script=HELLO, argv=["x" * 200_000])
    with pytest.raises(SpawnerError, match="more than fits in one environment variable"):
        srun.env_for_agents(big)


def test_a_spawner_error_after_start_up_is_one_clean_line(runner, tmp_path):
    """The srun spawner refuses a job spec too large for the environment once the launcher's
    output threads run: amnet-run says so in one line, exit status 2, and its output threads
    end without a traceback (their event loop had closed under them: 1 run in 12 printed
    'Exception in thread amnet-stdout')."""
    executable(tmp_path / "srun", "#!/bin/sh\n")
    path = f"{tmp_path}:{os.environ['PATH']}"
    for _ in range(10):
        out = runner("-n", "2", "--spawner", "srun", HELLO, "x" * 100_000, "y" * 100_000,
                     env={"PATH": path})
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("amnet-run: error: the job spec is "), out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stdout == ""


# -- a folder named amnet in the current directory ------------------------------------------------
SHADOWS = {"namespace": None, "empty": "", "bogus": "raise ImportError('this is not amnet')\n"}
AMNET_DIR = str(Path(__file__).parent.parent / "amnet")
SHADOWED_APP = """
import os, sys, amnet
import helper  # the script's own directory stays importable
ep = amnet.init()
print(f"rank {ep.rank} {os.path.dirname(amnet.__file__)} {helper.WORD}", flush=True)
ep.barrier()
"""
DRIVER = """
import os, sys
sys.path.insert(0, {data!r})
import amnet
import jobfns
from amnet_bench._twonode import run_job


def bench_job(ep, plan):
    import amnet
    return (ep.rank, os.path.dirname(amnet.__file__), plan["word"])


if __name__ == "__main__":
    print("run", [r["rank"] for r in amnet.run(jobfns.where, n=2, nodes=2)], flush=True)
    print("bench", run_job(bench_job, {{"word": "ok"}}, n=2), flush=True)
"""


@pytest.mark.parametrize("shadow", SHADOWS)
def test_a_folder_named_amnet_in_the_current_directory_shadows_nothing(runner, shadow):
    """Standing in the parent of a clone (a folder ``amnet``), every way of starting a job
    still runs the installed amnet: amnet-run, ``python -m amnet.run``, ``amnet.run``, a
    bench job, the mpi conduit's processes and ``mpiexec python -m amnet``."""
    import subprocess
    import sys

    from amnet.launch.mpilaunch import find_mpiexec

    here = runner.tmp / "cwd"
    (here / "amnet").mkdir(parents=True)
    if SHADOWS[shadow] is not None:
        (here / "amnet" / "__init__.py").write_text(SHADOWS[shadow])
    (runner.tmp / "helper.py").write_text("WORD = 'helped'\n")
    app = runner.script("app.py", SHADOWED_APP)
    want = [f"rank {r} {AMNET_DIR} helped" for r in range(2)]

    # only tests/data on PYTHONPATH (an empty entry would be the current directory)
    data = str(Path(__file__).parent / "data")
    env = dict(runner.env(), PYTHONPATH=data)

    def run(cmd: list[str]) -> list[str]:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                             cwd=here)
        assert out.returncode == 0, f"{cmd}: {out.stderr}"
        return sorted(out.stdout.splitlines())

    exe = shutil.which("amnet-run") or str(Path(sys.executable).parent / "amnet-run")
    assert run([exe, "-n", "2", "--nodes", "2", app]) == want
    mpiexec = find_mpiexec()
    if mpiexec is not None:
        assert run([exe, "-n", "2", "--conduit", "mpi", app]) == want
    if shadow == "namespace":  # a package in the current directory runs before amnet can
        assert run(runner.cmd("-n", "2", "--threads-per-proc", "2", app)) == want
        if mpiexec is not None:
            assert run([mpiexec, "-n", "2", sys.executable, "-m", "amnet", app]) == want
    driver = runner.script("driver.py", DRIVER.format(data=data))
    assert run([sys.executable, driver]) == [
        f"bench [(0, {AMNET_DIR!r}, 'ok'), (1, {AMNET_DIR!r}, 'ok')]", "run [0, 1]"]
