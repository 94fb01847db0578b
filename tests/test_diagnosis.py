"""What amnet-run says of a hung job (--timeout, Ctrl-C) and what BarrierMismatch says: where
each rank is, in the AM barrier (ep.barrier) and the bootstrap one (ep.bootstrap.barrier)."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from amnet._jobstate import JobState
from amnet._topology import Topology

NODES2 = ("-n", "4", "--nodes", "2")  # one process per rank, two nodes: AMs over the conduit
THREADS = ("-n", "4", "--procs-per-node", "2", "--threads-per-proc", "2")  # in-line and PSHM
TIMEOUT = 5  # generous: ranks 0, 2 and 3 are in the barrier within a second, even on a busy host

# rank 1 never reaches the barrier the others wait in
HANG = """
import os, sys, time, amnet
ep = amnet.init()
print(f"ready {ep.rank} {os.getpid()}", flush=True)
if ep.rank == 1:
    time.sleep(120)
BARRIER("end")
"""
BARRIERS = {"ep.barrier": "barrier #1 (name 'end')",
            "ep.bootstrap.barrier": "a bootstrap barrier (bootstrap step 1, name 'end')"}


def hang_script(runner, barrier: str) -> str:
    return runner.script("hang.py", HANG.replace("BARRIER", barrier))


def read_ready(proc, n: int) -> None:
    seen = 0
    while seen < n:
        line = proc.stdout.readline()
        assert line, "the job ended before its ranks were ready"
        seen += line.startswith("ready ")


@pytest.mark.parametrize("topo", [NODES2, THREADS], ids=["nodes2", "threads"])
@pytest.mark.parametrize("barrier", BARRIERS)
def test_timeout_says_who_waits_in_the_barrier(runner, topo, barrier):
    out = runner(*topo, "--timeout", str(TIMEOUT), hang_script(runner, barrier))
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: ranks 0, 2-3 wait in {BARRIERS[barrier]}; "
        "rank 1 never reached it"]


@pytest.mark.parametrize("topo,barrier", [(NODES2, "ep.barrier"),
                                          (THREADS, "ep.bootstrap.barrier")],
                         ids=["nodes2-am", "threads-bootstrap"])
def test_sigint_says_who_waits_in_the_barrier(runner, topo, barrier):
    proc = runner.popen(*topo, hang_script(runner, barrier))
    try:
        read_ready(proc, 4)
        time.sleep(2)  # from "ready" into the barrier: microseconds; 2 s on a loaded host
        os.kill(proc.pid, signal.SIGINT)  # amnet-run alone, not its process group
        rc = proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    assert rc == 130, err
    assert err.splitlines() == [
        f"amnet-run: interrupted by SIGINT; ranks 0, 2-3 wait in {BARRIERS[barrier]}; "
        "rank 1 never reached it"]


def test_timeout_names_the_barrier_of_finalize_and_a_split_phase_one(runner):
    # ranks 2 and 3 wait in barrier #1; rank 1 notified it and computes; rank 0 never came
    split = runner.script("split.py", """
import time, amnet
ep = amnet.init()
if ep.rank > 0:
    ep.barrier_notify(7)
if ep.rank < 2:
    time.sleep(120)
ep.barrier_wait()
""")
    out = runner(*NODES2, "--timeout", str(TIMEOUT), split)
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: ranks 2-3 wait in barrier #1 (name 7); "
        "rank 1 notified it but is not waiting in it; rank 0 never reached it"]
    # the script of ranks 0, 2 and 3 ended: they wait in the barrier of amnet.finalize()
    fin = runner.script("fin.py", """
import time, amnet
ep = amnet.init()
ep.barrier()
if ep.rank == 1:
    time.sleep(120)
""")
    out = runner(*THREADS, "--timeout", str(TIMEOUT), fin)
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: ranks 0, 2-3 wait in amnet.finalize() "
        "(barrier #2); rank 1 never reached it"]


def test_timeout_with_no_rank_in_a_barrier(runner):
    s = runner.script("sleep.py", "import time, amnet\nep = amnet.init()\ntime.sleep(120)\n")
    out = runner("-n", "2", "--timeout", "5", s)
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == ["amnet-run: timed out after 5 s: ranks 0-1 still running"]


MISMATCH = """
import amnet
ep = amnet.init()
names = {0: "phase-0", 1: "phase-1", 2: None, 3: "phase-1"}
for barrier in (ep.barrier, ep.bootstrap.barrier):
    try:
        barrier(names[ep.rank])
    except amnet.BarrierMismatch as e:
        print(f"rank {ep.rank}: {e}", flush=True)
try:
    ep.bootstrap.barrier(f"p{ep.rank}")
except amnet.BarrierMismatch as e:
    print(f"rank {ep.rank}: {e}", flush=True)
"""


@pytest.mark.parametrize("topo", [NODES2, THREADS], ids=["nodes2", "threads"])
def test_barrier_mismatch_says_who_passed_which_name(runner, topo):
    out = runner(*topo, runner.script("mismatch.py", MISMATCH))
    assert out.returncode == 0, out.stderr  # every rank caught it; barriers work again
    said = {  # what each rank passed, then the lowest rank that passed each other name
        0: "this rank (0) passed 'phase-0', but rank 1 passed 'phase-1'",
        1: "this rank (1) passed 'phase-1', but rank 0 passed 'phase-0'",
        2: "this rank (2) passed no name (which matches any), but rank 0 passed 'phase-0' "
           "and rank 1 passed 'phase-1'",
        3: "this rank (3) passed 'phase-1', but rank 0 passed 'phase-0'"}
    others = {r: ", ".join(f"rank {o} passed 'p{o}'" for o in range(4) if o != r)
              for r in range(4)}
    want = [line for r in range(4) for line in (
        f"rank {r}: names differ in barrier #1: {said[r]}",
        f"rank {r}: names differ in a bootstrap barrier (bootstrap step 1): {said[r]}",
        f"rank {r}: names differ in a bootstrap barrier (bootstrap step 2): this rank ({r}) "
        f"passed 'p{r}', but " + " and ".join(others[r].rsplit(", ", 1)))]
    assert sorted(out.stdout.splitlines()) == sorted(want)


def test_the_diagnosis_from_what_the_ranks_answered():
    st = JobState(Topology.make(6))
    # ranks 0-1 passed barrier #2, 2 waits in it, 3 notified it, 4 is in barrier #1, 5 silent
    where = {0: ["running", 2], 1: ["running", 3], 2: ["barrier", 2, None, True, False],
             3: ["barrier", 2, None, False, False], 4: ["running", 1]}
    assert st.describe_waits(where) == (
        "rank 2 waits in barrier #2; rank 3 notified it but is not waiting in it; "
        "rank 4 never reached it; ranks 0-1 are past it; rank 5 still running")
    where[4] = ["barrier", 3, "'x'", True, True]
    assert st.describe_waits(where) == (
        "rank 2 waits in barrier #2; rank 4 waits in amnet.finalize() (barrier #3, name 'x'); "
        "rank 3 notified barrier #2 but is not waiting in it; ranks 0-1 are in no barrier; "
        "rank 5 still running")
    assert st.describe_waits() == "ranks 0-5 still running"  # nobody answered


def test_the_diagnosis_of_layers_waits_and_of_processes_that_did_not_answer():
    st = JobState(Topology.make(8, threads_per_proc=2))  # procs 0-3 of ranks 0-1, ..., 6-7
    coll = "amnet.coll broadcast (call #3 on team world)"
    where = {0: ["in", 0, coll], 1: ["in", 0, coll], 2: ["running", 0],
             3: ["in", 0, "upc.lock() of lock 0 at thread 0 (held by another thread)"]}
    # ranks 6-7 were not asked (their process never connected): running, like rank 2; the
    # process of ranks 4-5 was asked and did not answer: said so, never "still running"
    assert st.describe_waits(where, unanswered=[2], silent_agents={1: "hostB"}) == (
        f"ranks 0-1 wait in {coll}; rank 3 waits in upc.lock() of lock 0 at thread 0 (held "
        "by another thread); ranks 2, 6-7 still running; the process of ranks 4-5 did not "
        "answer in 1 s: stopped or stuck in C; the agent of node 1 (host hostB) did not "
        "answer in 1 s: stopped or stuck")
    where = {0: ["running", 0], 1: ["running", 0], 2: ["running", 0], 3: ["running", 0]}
    assert st.describe_waits(where, unanswered=[2, 3], answer_s=2) == (
        "ranks 0-3 still running; the processes of ranks 4-7 did not answer in 2 s: stopped "
        "or stuck in C")
    assert st.describe_waits({0: ["running", 0]}) == "ranks 0-7 still running"


# -- a stopped process: who waits where, and who did not answer --------------------------------
HOST = socket.gethostname()
STOP_TIMEOUT = 8  # ranks are ready and one is stopped within 2-3 s, even on a busy host
COLL_WAIT = """
import os, time, amnet
ep = amnet.init()
print(f"ready {ep.rank} {os.getpid()}", flush=True)
if ep.rank == 2:
    time.sleep(120)
ep.coll.barrier()
"""
LOCK_WAIT = """
import os, time
import upc_rt as upc
upc.init()
L = upc.all_lock_alloc()  # the first lock: hosted by thread 0
if upc.MYTHREAD == 2:
    L.lock()
upc.barrier()
print(f"ready {upc.MYTHREAD} {os.getpid()}", flush=True)
if upc.MYTHREAD == 2:
    time.sleep(120)
L.lock()
"""
SILENT = {NODES2: "rank 2's process", THREADS: "the process of ranks 2-3"}
WAITING = {  # what the diagnosis says of the ranks that were not stopped
    ("coll", NODES2): "ranks 0-1, 3 wait in amnet.coll barrier (call #0 on team world)",
    ("coll", THREADS): "ranks 0-1 wait in amnet.coll barrier (call #0 on team world)",
    ("lock", NODES2): "rank 0 waits in upc.lock() of lock 0 at thread 0 (held by thread 2); "
                      "ranks 1, 3 wait in upc.lock() of lock 0 at thread 0 (held by another "
                      "thread)",
    ("lock", THREADS): "rank 0 waits in upc.lock() of lock 0 at thread 0 (held by thread 2); "
                       "rank 1 waits in upc.lock() of lock 0 at thread 0 (held by another "
                       "thread)",
}


def _ours(pid: int, mark: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"AMTEST_MARK={mark}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def run_and_stop(runner, args, script: str, victim_of) -> tuple[int, str, float]:
    """Run amnet-run, SIGSTOP ``victim_of(pids)`` (pids: rank -> its process) once the 4
    ranks are ready; return the exit status, stderr and when amnet-run ended
    (``CLOCK_BOOTTIME``). The stopped process is continued at the end, whatever happened
    (it is killed by then)."""
    proc = runner.popen(*args, script)
    victim = None
    try:
        pids: dict[int, int] = {}
        while len(pids) < 4:
            line = proc.stdout.readline()
            assert line, "the job ended before its ranks were ready"
            if line.startswith("ready "):
                _, r, pid = line.split()
                pids[int(r)] = int(pid)
        victim = victim_of(pids)
        assert _ours(victim, runner.mark)
        os.kill(victim, signal.SIGSTOP)
        rc = proc.wait(timeout=60)
        return rc, proc.stderr.read(), time.clock_gettime(time.CLOCK_BOOTTIME)
    finally:
        if victim is not None and _ours(victim, runner.mark):
            os.kill(victim, signal.SIGCONT)
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("topo", [NODES2, THREADS], ids=["nodes2", "threads"])
@pytest.mark.parametrize("wait", ["coll", "lock"])
def test_a_stopped_rank_process_is_named_and_the_others_say_where_they_wait(runner, topo,
                                                                            wait):
    script = runner.script(f"{wait}.py", COLL_WAIT if wait == "coll" else LOCK_WAIT)
    rc, err, _ = run_and_stop(runner, [*topo, "--timeout", str(STOP_TIMEOUT)], script,
                              lambda pids: pids[2])
    assert rc == 124, err
    assert err.splitlines() == [
        f"amnet-run: timed out after {STOP_TIMEOUT} s: {WAITING[wait, topo]}; "
        f"{SILENT[topo]} did not answer in 1 s: stopped or stuck in C"]


def test_a_stopped_agent_is_named_and_the_job_ends_soon_after_the_timeout(runner):
    """The agent of node 0 is stopped: its ranks answer, it does not. amnet-run names it and
    ends within 5 s of the timeout (it waited 4 s for the agent to stop its node, then 2 s
    more for the agent's last words)."""
    started = []

    def agent_of_rank_0(pids: dict[int, int]) -> int:
        with open(f"/proc/{pids[0]}/stat") as f:
            agent = int(f.read().rsplit(")", 1)[1].split()[1])  # its parent
        with open(f"/proc/{agent}/stat") as f:  # since boot, in clock ticks
            started.append(int(f.read().rsplit(")", 1)[1].split()[19])
                           / os.sysconf("SC_CLK_TCK"))
        return agent

    rc, err, ended = run_and_stop(runner, [*NODES2, "--timeout", str(TIMEOUT)],
                                  hang_script(runner, "ep.barrier"), agent_of_rank_0)
    assert rc == 124, err
    assert err.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: ranks 0, 2-3 wait in barrier #1 (name "
        f"'end'); rank 1 never reached it; the agent of node 0 (host {HOST}) did not answer "
        "in 1 s: stopped or stuck"]
    # amnet-run forks its agents before it starts the timeout's clock: from the agent's
    # start, an upper bound of amnet-run's time after the timeout (not counting the
    # interpreter's start-up); about 2.5 s (1 s asking where everyone is, 1 s for the
    # other node's ranks to take the abort), 6.4 s before
    after = ended - started[0] - TIMEOUT
    assert after < 5.0, f"amnet-run ended {after:.1f} s after the timeout"


# -- what a timeout says of shmem_rt's and amnet.aio's waits ------------------------------------
SHMEM_HANG = """
import os, time
import shmem_rt as shmem
me = shmem.my_pe()
shmem.barrier_all()
print(f"ready {me} {os.getpid()}", flush=True)
if me == 1:
    time.sleep(120)
shmem.barrier_all()
"""


@pytest.mark.parametrize("topo", [("-n", "4"), NODES2, THREADS,
                                  ("-n", "4", "--nodes", "2", "--threads-per-proc", "2")],
                         ids=["node", "nodes2", "threads", "nodes2-threads"])
def test_shmem_barrier_all_is_named_the_same_in_every_mapping(runner, topo):
    # one node: shmem_rt's own barrier on flags; across nodes: amnet.coll's barrier inside
    # it, which used to be what the diagnosis named there
    out = runner(*topo, "--timeout", str(TIMEOUT), runner.script("hang.py", SHMEM_HANG))
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: ranks 0, 2-3 wait in shmem.barrier_all(); "
        "rank 1 still running"]


SHMEM_QUIET = """
import os, time
import numpy as np
import shmem_rt as shmem
me = shmem.my_pe()
a = shmem.zeros(8, "i8")
shmem.barrier_all()
print(f"ready {me} {os.getpid()}", flush=True)
time.sleep(1)  # PE 2 is stopped meanwhile
if me == 1:
    shmem.put(a, np.arange(8, dtype="i8"), 2)  # to the other node: completes at PE 2
shmem.barrier_all()
"""


def test_a_pe_completing_its_puts_to_a_stopped_pe_is_said_to_wait_in_barrier_all(runner):
    rc, err, _ = run_and_stop(runner, [*NODES2, "--timeout", str(STOP_TIMEOUT)],
                              runner.script("quiet.py", SHMEM_QUIET), lambda pids: pids[2])
    assert rc == 124, err
    assert err.splitlines() == [
        f"amnet-run: timed out after {STOP_TIMEOUT} s: ranks 0, 3 wait in "
        "shmem.barrier_all(); rank 1 waits in shmem.barrier_all(), completing this PE's "
        "puts; rank 2's process did not answer in 1 s: stopped or stuck in C"]


AIO_TWO_BARRIERS = """
import amnet, amnet.aio

async def main(ep):
    if ep.rank == 0:
        ep.barrier()  # the core's AM barrier ...
    else:
        await ep.coll.world.barrier_nb()  # ... and the collectives': two barriers

amnet.aio.run(main)
"""


def test_an_awaited_collective_is_named_beside_the_core_barrier(runner):
    out = runner("-n", "4", "--timeout", str(TIMEOUT),
                 runner.script("two.py", AIO_TWO_BARRIERS))
    assert out.returncode == 124, out.stderr
    assert out.stderr.splitlines() == [
        f"amnet-run: timed out after {TIMEOUT} s: rank 0 waits in barrier #1; ranks 1-3 wait "
        "in amnet.coll barrier (call #0 on team world) (awaited)"]
