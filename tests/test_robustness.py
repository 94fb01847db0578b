"""What used to break a job: stalled readers, held pipes, daemons, dying agents, odd frames."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import frames_to_bootstrap, leftovers

import amnet

HELLO = str(Path(__file__).parent.parent / "examples" / "hello.py")

CHILD_SCRIPT = """
import subprocess, time, amnet
ep = amnet.init()
subprocess.Popen(["sleep", "300"])          # a child in the rank's process group
subprocess.Popen(["sleep", "300"], start_new_session=True)  # one that left it
print("ready", ep.rank, flush=True)
time.sleep(120)
"""


def children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


def wait_gone(mark: str, keep: int = 0, seconds: float = 6.0) -> list[str]:
    deadline = time.monotonic() + seconds
    left = leftovers(mark)
    while len(left) > keep and time.monotonic() < deadline:
        time.sleep(0.1)
        left = leftovers(mark)
    return left


def wait_ready(proc: subprocess.Popen, n: int) -> None:
    seen = 0
    while seen < n:
        line = proc.stdout.readline()
        assert line, "the job ended before its ranks were ready"
        seen += line.startswith("ready")


def test_timeout_fires_while_the_output_reader_stalls(runner):
    s = runner.script("flood.py", "import time, amnet\nep = amnet.init()\n"
                                  "for i in range(100000):\n    print('y' * 70, i)\n"
                                  "time.sleep(120)\n")
    proc = runner.popen("-n", "2", "--timeout", "1", s)
    try:
        time.sleep(5)  # nobody reads amnet-run's stdout meanwhile: its pipe is full
        # the launcher's loop went on: the timeout fired and the ranks are gone, while the
        # launcher and the agent still hold their output for us
        assert len(wait_gone(runner.mark, keep=2, seconds=3)) == 2
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 124
    assert "timed out after 1 s" in err
    lines = out.splitlines()
    assert lines and all(ln.startswith("y" * 70 + " ") for ln in lines)  # whole lines only


def test_a_pipe_held_by_the_spawn_wrapper_does_not_hold_the_job(runner):
    t0 = time.monotonic()
    out = runner("-n", "2", "--spawner", "custom", "--spawn-cmd", "sleep 30 & %C", HELLO)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2
    assert time.monotonic() - t0 < 10


def test_a_daemon_started_by_a_rank_is_stopped_with_the_job(runner):
    s = runner.script("daemon.py", "import subprocess, amnet\nep = amnet.init()\n"
                                   "subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
                                   "print('started', ep.rank)\n")
    t0 = time.monotonic()
    out = runner("-n", "2", "--threads-per-proc", "2", s)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t0 < 10
    # the runner fixture checks that no 'sleep 30' (nor anything else) is left


@pytest.mark.parametrize("victim", ["launcher", "agent"])
def test_kill_9_of_the_launcher_or_an_agent_leaves_nothing(runner, victim):
    s = runner.script("child.py", CHILD_SCRIPT)
    proc = runner.popen("-n", "4", "--nodes", "2", s)
    try:
        wait_ready(proc, 4)
        target = proc.pid if victim == "launcher" else children(proc.pid)[0]
        os.kill(target, signal.SIGKILL)
        if victim == "agent":
            rc = proc.wait(timeout=10)
            assert rc == 1
            assert "before its rank processes did" in proc.stderr.read()
        assert wait_gone(runner.mark) == []
    finally:
        proc.kill()
        proc.communicate()


def test_an_agent_that_stops_its_node_says_why(runner):
    s = runner.script("slow.py", "import time, amnet\nep = amnet.init()\ntime.sleep(30)\n")
    # passes the job spec on, then ends: the agent's standard input closes under it
    cut = f"{sys.executable} -c 'import os, sys; sys.stdout.buffer.write(os.read(0, 1 << 20))'"
    out = runner("-n", "2", "--timeout", "20", "--spawner", "custom", "--spawn-cmd",
                 f"{cut} | %C", s)
    assert out.returncode == 1
    # the launcher names node 0 and passes on the agent's reason; on a loaded machine the
    # agent may stop before its hello is heard, and is then reported as not started
    assert ("amnet-run: the agent of node 0 (host" in out.stderr and
            "stopped its node: amnet-run went away (its pipe to this agent closed)"
            in out.stderr) or (
            "amnet-run: could not start the agent of node 0 on host" in out.stderr and
            "stopping this node: amnet-run went away (its pipe to this agent closed)"
            in out.stderr), out.stderr


def test_non_daemon_threads_finish_before_the_rank_process_ends(runner):
    s = runner.script("late.py", """
import threading, time, amnet
ep = amnet.init()
def late():
    time.sleep(0.5)
    print(f"late output from rank {ep.rank}", flush=True)
threading.Thread(target=late).start()
""")
    out = runner("-n", "2", s)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["late output from rank 0",
                                               "late output from rank 1"]


def test_each_rank_thread_sees_its_own_main_module(runner):
    s = runner.script("mainmod.py", """
import pickle, sys, amnet
class Point:
    def __init__(self, x):
        self.x = x
ep = amnet.init()
import __main__
p = pickle.loads(pickle.dumps(Point(ep.rank)))
sys.stdout.buffer.write(f"rank {ep.rank} {__main__.Point is Point} {p.x}\\n".encode())
""")
    out = runner("-n", "4", "--threads-per-proc", "4", s)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [f"rank {r} True {r}" for r in range(4)]


def test_threads_that_are_not_rank_threads_see_rank_thread_0s_main(runner):
    s = runner.script("helper.py", """
import threading, amnet
ep = amnet.init()
tag = f"rank {ep.rank}"
ep.barrier()
if ep.thread == 1:
    import __main__
    seen = []
    t = threading.Thread(target=lambda: seen.append(__main__.tag))
    t.start()
    t.join()
    print(f"helper of rank {ep.rank} sees {seen[0]}")
ep.barrier()
""")
    for _ in range(3):
        out = runner("-n", "4", "--threads-per-proc", "2", s)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.splitlines()) == ["helper of rank 1 sees rank 0",
                                                   "helper of rank 3 sees rank 2"]


def test_abort_needs_a_failure_code():
    with pytest.raises(ValueError, match=r"1\.\.255"):
        amnet.abort(0)
    with pytest.raises(TypeError):
        amnet.abort("3")


def test_odd_frames_from_a_job_process_do_not_disturb_the_service(runner):
    # a process of the job (it holds the secret) that sends odd frames: a token nested 990
    # lists deep (msgpack decodes it; repr() of it would recurse), and garbage
    setup = """
    hello = bytes([0x83]) + b"".join(msgpack.packb(x) for x in ("t", "hello", "kind", "proc"))
    deep = hello + msgpack.packb("token") + bytes([0x91]) * 990 + bytes([0x90])"""
    out = frames_to_bootstrap(runner, "odd.py", "[[deep]] * 2 + [[b'x' * 100]] * 10",
                              setup=setup, member=True, linger=1000)
    assert "Traceback" not in out.stderr and "Exception" not in out.stderr
    assert out.stderr.count("refused a bootstrap connection") == 3
    assert "amnet-run: refused 12 bootstrap connections in all" in out.stderr
