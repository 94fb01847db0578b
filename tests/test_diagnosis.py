"""What amnet-run says of a hung job (--timeout, Ctrl-C) and what BarrierMismatch says: where
each rank is, in the AM barrier (ep.barrier) and the bootstrap one (ep.bootstrap.barrier)."""

from __future__ import annotations

import os
import signal
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
