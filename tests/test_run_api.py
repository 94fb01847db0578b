"""amnet.run: real jobs from Python; results by rank, topology, failures re-raised."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import jobfns
import pytest

import amnet

SHAPES = [  # n, procs_per_node, threads_per_proc, nodes
    (1, None, 1, None),
    (3, None, 1, None),
    (4, 2, 2, None),
    (4, None, 2, 2),
    (6, 2, 1, None),
    (8, 2, 2, None),
]


@pytest.mark.parametrize("n,p,t,k", SHAPES)
def test_every_rank_sees_its_place_in_the_topology(marked, n, p, t, k):
    topo = amnet.Topology.make(n, p, t, k)
    got = amnet.run(jobfns.where, n=n, procs_per_node=p, threads_per_proc=t, nodes=k)
    assert [g["rank"] for g in got] == list(range(n))
    for r, g in enumerate(got):
        assert g["size"] == n and g["nodes"] == topo.nodes and g["procs"] == topo.procs
        assert g["node"] == topo.node_of(r)
        assert g["proc"] == topo.proc_of(r)
        assert g["thread"] == topo.thread_of(r)
        assert g["threads_per_proc"] == t
        node_ranks = topo.ranks_of_node(g["node"])
        assert g["local_ranks"] == [node_ranks.start, node_ranks.stop]
        assert g["is_local"] == [topo.node_of(x) == g["node"] for x in range(n)]
        assert g["same_process"] == [topo.proc_of(x) == g["proc"] for x in range(n)]
    # ranks of one process share a pid; different processes do not
    pids = {}
    for g in got:
        pids.setdefault(g["proc"], set()).add(g["pid"])
    assert all(len(s) == 1 for s in pids.values())
    assert len({next(iter(s)) for s in pids.values()}) == topo.procs


def test_allgather_and_results(marked):
    assert amnet.run(jobfns.allgather_square, n=4, threads_per_proc=2) == [[0, 1, 4, 9]] * 4


def test_output_of_ranks_reaches_the_caller(marked, capfd):
    amnet.run(jobfns.print_lines, n=2, label=True)
    out = capfd.readouterr().out.splitlines()
    for r in range(2):
        assert [ln for ln in out if ln.startswith(f"[{r}] ")] == \
            [f"[{r}] line {i} from rank {r}" for i in range(3)]


def test_an_exception_is_reraised_with_the_rank_named(marked):
    with pytest.raises(ValueError, match="bad value on rank 2") as info:
        amnet.run(jobfns.raise_on_2, n=4, procs_per_node=2)
    exc = info.value
    assert any("rank 2 (node 1, proc 2, host" in note for note in exc.__notes__)
    assert isinstance(exc.__cause__, amnet.RemoteTraceback)
    assert "in raise_on_2" in exc.__cause__.tb


def test_the_others_see_job_aborted_while_waiting(marked, capfd):
    with pytest.raises(RuntimeError, match="rank 0 fails first"):
        amnet.run(jobfns.catch_job_aborted, n=3)
    out = capfd.readouterr().out
    for r in (1, 2):
        assert f"rank {r} saw JobAborted: rank 0 (node 0, proc 0, host" in out


@pytest.mark.parametrize("fn,code,text", [
    (jobfns.exit_3_on_1, 3, "rank 1 (node 0, proc 1, host {host}) exited with code 3"),
    (jobfns.sigkill_on_0, 137, "rank 0 (node 0, proc 0, host {host}) killed by signal 9 "
                               "(SIGKILL)"),
    (jobfns.abort_on_1, 9, "rank 1 (node 0, proc 1, host {host}) called amnet.abort(9): "
                           "rank one gives up"),
])
def test_other_failures_raise_job_failed(marked, fn, code, text):
    import socket

    with pytest.raises(amnet.JobFailed) as info:
        amnet.run(fn, n=3)
    assert info.value.code == code
    assert info.value.diagnosis == text.format(host=socket.gethostname())


def test_barrier_name_mismatch_fails_every_rank(marked):
    with pytest.raises(amnet.BarrierMismatch) as info:
        amnet.run(jobfns.mismatched_barrier, n=3)
    # the first rank to fail raised it: it says what it passed, then what another rank did
    rank = int(re.search(r"this rank \((\d)\)", str(info.value)).group(1))
    mine, other = ("'left'", "rank 1 passed 'right'") if rank == 0 else \
        ("'right'", "rank 0 passed 'left'")
    assert str(info.value) == (f"names differ in barrier #1: this rank ({rank}) passed {mine}, "
                               f"but {other}")


def test_anonymous_barrier_matches_any_name(marked):
    assert amnet.run(jobfns.anonymous_matches_named, n=4) == [True] * 4


def test_init_twice_is_an_error(marked):
    with pytest.raises(amnet.InitError, match="called twice on rank 0"):
        amnet.run(jobfns.init_twice, n=1)


def test_init_from_a_thread_that_is_not_a_rank(marked):
    msgs = amnet.run(jobfns.init_from_other_thread, n=2, threads_per_proc=2)
    assert all("not a rank-thread" in m for m in msgs)


def test_endpoint_after_finalize(marked):
    assert amnet.run(jobfns.finalize_then_barrier, n=2) == \
        [f"rank {r} already called amnet.finalize(); the endpoint may not be used after it"
         for r in range(2)]


def test_bad_ranks_are_rank_errors(marked):
    errors = amnet.run(jobfns.bad_rank, n=2)[0]
    assert len(errors) == 5
    assert "rank -1 is out of range: this job has ranks 0..1" in errors[0]
    assert "rank must be an int, got str" in errors[2]


def test_unpicklable_result_is_reported(marked):
    with pytest.raises(TypeError, match="return value of rank 0 cannot be pickled"):
        amnet.run(jobfns.unpicklable_result, n=1)


def test_bad_arguments_fail_before_anything_starts(marked):
    with pytest.raises(amnet.TopologyError):
        amnet.run(jobfns.where, n=3, threads_per_proc=2)
    with pytest.raises(amnet.ConfigError, match="unknown amnet option 'colour'"):
        amnet.run(jobfns.where, n=1, colour="red")
    with pytest.raises(TypeError, match="import by name"):
        amnet.run(lambda ep: 1, n=1)
    with pytest.raises(TypeError, match="callable"):
        amnet.run(42, n=1)
    with pytest.raises(ValueError, match="timeout must be a positive"):
        amnet.run(jobfns.where, n=1, timeout=0)
    with pytest.raises(amnet.ConfigError, match="unknown spawner 'telepathy'"):
        amnet.run(jobfns.where, n=1, spawner="telepathy")


def test_config_options_reach_the_ranks(marked):
    got = amnet.run(jobfns.segment_size, n=2, segment_size="1M")
    assert got == [1 << 20] * 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
@pytest.mark.parametrize("t", [1, 2])
def test_bind_to_core_puts_each_process_on_cores_of_its_own_round_robin(marked, t):
    usable = sorted(os.sched_getaffinity(0))
    n = 4 * t  # 4 processes on 2 simulated nodes of this one host
    got = amnet.run(jobfns.affinity, n=n, nodes=2, threads_per_proc=t, bind_to="core")
    for rank, sets in enumerate(got):
        i = rank // t  # the process's place among this host's processes
        want = frozenset(usable[(i * t + k) % len(usable)] for k in range(t))
        assert sets == [want], (rank, sets)  # every thread (the conduit's too) bound alike
    free = amnet.run(jobfns.affinity, n=2)  # the default: left to the scheduler
    assert free == [[frozenset(usable)]] * 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_bound_ranks_with_cores_of_their_own_spin_and_crowded_ones_block(marked):
    cores = len(os.sched_getaffinity(0))
    n = min(cores, 2)
    assert amnet.run(jobfns.wait_mode, n=n, bind_to="core") == ["spin"] * n
    crowded = cores + 1  # more ranks than cores: bound or not, they block
    assert amnet.run(jobfns.wait_mode, n=crowded, bind_to="core") == ["block"] * crowded


def _python(tmp_path, text: str, env: dict[str, str] | None = None) -> str:
    """Run ``text`` as a plain Python script (``main.py`` in ``tmp_path``), which must succeed;
    returns its output."""
    script = tmp_path / "main.py"
    script.write_text(text)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_function_in_the_main_script(tmp_path, marked):
    out = _python(
        tmp_path,
        "import amnet\n"
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "class Oops(Exception):\n"
        "    pass\n"
        "def f(ep):\n"
        "    return Box(ep.rank * 10)\n"
        "def g(ep):\n"
        "    if ep.rank == 1:\n"
        "        raise Oops('from the script')\n"
        "if __name__ == '__main__':\n"
        "    print([b.v for b in amnet.run(f, n=3)])\n"
        "    try:\n"
        "        amnet.run(g, n=2)\n"
        "    except Oops as e:\n"
        "        print('caught', e)\n")
    assert out.splitlines() == ["[0, 10, 20]", "caught from the script"]


def test_a_plain_python_script_is_a_one_rank_job(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMNET_")}
    out = _python(
        tmp_path,
        "import amnet\n"
        "ep = amnet.init()\n"
        "ep.barrier('x')\n"
        "print(ep.rank, ep.size, ep.nodes, ep.procs, ep.threads_per_proc,"
        " list(ep.local_ranks), ep.bootstrap.allgather('v'), ep.bootstrap.address)\n", env)
    assert out.strip() == "0 1 1 1 1 [0] ['v'] None"


def test_endpoint_is_read_only_and_amnet_config_is_the_jobs(marked):
    got = amnet.run(jobfns.endpoint_is_read_only, n=2, segment_size="2M")
    assert got == [("amnet.Endpoint attributes are read-only (tried to set 'rank')", r, 2 << 20)
                   for r in range(2)]


def test_a_partial_of_a_function_in_the_main_script(tmp_path, marked):
    out = _python(
        tmp_path,
        "import functools, amnet\n"
        "def f(k, ep):\n"
        "    return ep.rank * k\n"
        "if __name__ == '__main__':\n"
        "    print(amnet.run(functools.partial(f, 7), n=3))\n")
    assert out.strip() == "[0, 7, 14]"


def test_every_rank_receives_the_address_table(marked):
    got = amnet.run(jobfns.address_table, n=4, threads_per_proc=2, nodes=2)
    tables = [t for t, _, _ in got]
    assert all(t == tables[0] for t in tables)
    assert [(e["pid"], e["host"]) for e in tables[0]] == [(pid, host) for _, pid, host in got]


def test_amnet_run_inside_a_running_event_loop(marked):
    """As in a notebook: the caller's thread already runs an asyncio loop."""
    import asyncio

    async def caller():
        return amnet.run(jobfns.allgather_square, n=2)

    assert asyncio.run(caller()) == [[0, 1], [0, 1]]


def test_an_agent_started_by_hand_explains_itself():
    out = subprocess.run([sys.executable, "-m", "amnet.launch.agent", "--node", "0"],
                         input=b"", capture_output=True, timeout=60)
    assert out.returncode == 2
    assert b"no job spec on standard input (was this agent started by amnet-run?)" \
        in out.stderr
