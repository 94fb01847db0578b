"""amnet-run as a user runs it: output, exit status, teardown, signals, bad input."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

HOST = socket.gethostname()
HELLO = str(Path(__file__).parent.parent / "examples" / "hello.py")

WAIT_SCRIPT = """
import os, sys, time, amnet
ep = amnet.init()
print(f"ready {ep.rank} {os.getpid()}", flush=True)
if ep.rank == int(sys.argv[1]):
    time.sleep(120)
ep.barrier()
"""


def read_ready(proc: subprocess.Popen, n: int) -> dict[int, int]:
    pids = {}
    deadline = time.monotonic() + 30
    while len(pids) < n and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("ready "):
            _, r, pid = line.split()
            pids[int(r)] = int(pid)
    assert len(pids) == n, f"only {pids} became ready"
    return pids


def hit_when_ready(proc: subprocess.Popen, n: int, hit: Callable[[dict[int, int]], object]
                   ) -> tuple[dict[int, int], int, float, str]:
    """Once the job's ``n`` ranks are ready (``read_ready``), ``hit(pids)`` (a signal); returns
    the pids, the launcher's exit status, the seconds from the hit to its exit and its
    stderr. The launcher is killed and reaped whatever happens."""
    try:
        pids = read_ready(proc, n)
        t0 = time.monotonic()
        hit(pids)
        code = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    return pids, code, elapsed, err


def test_hello_readme_command(runner):
    out = runner("-n", "4", "--procs-per-node", "2", "--threads-per-proc", "2", HELLO)
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.splitlines())
    assert lines == sorted(
        f"hello from rank {r} of 4: node 0/1, proc {r // 2}/2, thread {r % 2}/2 on {HOST}"
        for r in range(4))


def test_conduit_option_picks_the_conduit(runner):
    s = runner.script("cname.py", "import amnet\nep = amnet.init()\n"
                                  "print(ep.rank, ep.statistics().conduit.name, flush=True)\n"
                                  "ep.barrier()\n")
    for flag, name in ((["--conduit", "tcp"], "tcp"), ([], "zmq")):
        out = runner("-n", "2", "--nodes", "2", *flag, s)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split("\n")[:2]) == [f"0 {name}", f"1 {name}"], out.stdout


def test_console_script_and_module_are_the_same(runner):
    exe = shutil.which("amnet-run") or str(Path(sys.executable).parent / "amnet-run")
    out = subprocess.run([exe, "-n", "2", "--label", HELLO], capture_output=True, text=True,
                         timeout=60, env=runner.env(), cwd=runner.tmp)
    assert out.returncode == 0, out.stderr
    assert sorted(ln.split("]")[0] for ln in out.stdout.splitlines()) == ["[0", "[1"]


def test_script_arguments_and_cwd(runner):
    s = runner.script("argv.py", "import sys, os, amnet\nep = amnet.init()\n"
                                 "print(ep.rank, sys.argv[1:], os.getcwd())\n")
    out = runner("-n", "2", s, "--flag", "x", "-n", "3")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        f"{r} ['--flag', 'x', '-n', '3'] {runner.tmp}" for r in range(2)]


def test_flushed_partial_lines_stay_whole_under_labels(runner):
    s = runner.script("partial.py", """
import amnet
ep = amnet.init()
print(f"rank {ep.rank}: part one, ", end="", flush=True)
ep.barrier()
print("part two")
""")
    out = runner("-n", "4", "--threads-per-proc", "2", "--label", s)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        f"[{r}] rank {r}: part one, part two" for r in range(4)]


def test_percent_in_spawn_cmd(runner):
    out = runner("-n", "2", "--spawner", "custom", "--spawn-cmd", "echo 100%% >&2; exec %C",
                 HELLO)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("100%") == 1


def test_label_prefixes_every_line_and_lines_never_interleave(runner):
    s = runner.script("chatty.py", """
import amnet, sys
ep = amnet.init()
for i in range(200):
    print("x" * 300, i, "rank", ep.rank)
    print("to stderr", i, file=sys.stderr)
""")
    out = runner("-n", "4", "--threads-per-proc", "2", "--label", s)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 800
    for ln in lines:
        r = ln[1:ln.index("]")]
        assert ln == f"[{r}] {'x' * 300} {ln.split()[2]} rank {r}"
    assert sum(1 for ln in out.stderr.splitlines() if "to stderr" in ln) == 800


def test_each_rank_thread_has_its_own_module_globals(runner):
    s = runner.script("globals.py", """
import amnet, sharedmod
counter = 0
ep = amnet.init()
counter += ep.rank + 1          # file-scope variable: one copy per rank-thread
with sharedmod.lock:
    sharedmod.items.append(ep.rank)  # imported module: one copy per process
ep.barrier()
print(f"rank {ep.rank} counter {counter} shared {sorted(sharedmod.items)}")
""")
    out = runner("-n", "4", "--threads-per-proc", "2", s)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        f"rank {r} counter {r + 1} shared {[r - r % 2, r - r % 2 + 1]}" for r in range(4)]


@pytest.mark.parametrize("t", ["1", "2"])
def test_exit_status_is_the_first_failure(runner, t):
    s = runner.script("exit.py", "import amnet, sys\nep = amnet.init()\n"
                                 "if ep.rank == 3:\n    sys.exit(5)\nep.barrier()\n")
    out = runner("-n", "4", "--threads-per-proc", t, s)
    assert out.returncode == 5
    where = "node 0, proc 3, host" if t == "1" else "node 0, proc 1, thread 1, host"
    assert f"amnet-run: rank 3 ({where} {HOST}) exited with code 5" in out.stderr


def test_uncaught_exception_shows_traceback_and_diagnosis(runner):
    s = runner.script("boom.py", "import amnet\nep = amnet.init()\n"
                                 "def f():\n    return 1 / 0\n"
                                 "if ep.rank == 1:\n    f()\nep.barrier()\n")
    out = runner("-n", "2", "--label", s)
    assert out.returncode == 1
    assert "[1] Traceback (most recent call last):" in out.stderr
    assert '[1]   File "' in out.stderr and "line 4, in f" in out.stderr
    assert "[1] ZeroDivisionError: division by zero" in out.stderr
    assert "_procmain" not in out.stderr  # amnet's own frames are not shown
    assert out.stderr.rstrip().endswith(
        f"amnet-run: rank 1 (node 0, proc 1, host {HOST}) raised ZeroDivisionError: "
        "division by zero")


def test_script_raising_at_import_in_one_rank_only(runner):
    s = runner.script_first("oneraise.py", """
if first:
    raise ImportError("this rank cannot import its module")
ep = amnet.init()
""")
    t0 = time.monotonic()
    out = runner("-n", "3", s)
    assert out.returncode == 1
    assert "raised ImportError: this rank cannot import its module" in out.stderr
    assert time.monotonic() - t0 < 10


def test_a_rank_that_never_calls_init_is_named(runner):
    s = runner.script_first("noinit.py", """
if not first:
    amnet.init()
""")
    out = runner("-n", "3", "--label", s)
    assert out.returncode == 1
    assert re.search(r"amnet-run: rank \d \(node 0, proc \d, host .*\) ended without calling "
                     r"amnet.init\(\) while (rank \d waits|ranks \d(, |-)\d wait) in it",
                     out.stderr), out.stderr


def test_a_rank_that_hangs_before_init_is_named_at_timeout(runner):
    s = runner.script_first("hanginit.py", """
if first:
    time.sleep(120)
else:
    amnet.init()
""")
    t0 = time.monotonic()
    out = runner("-n", "3", "--timeout", "2", s)
    assert out.returncode == 124
    assert "amnet-run: timed out after 2 s: ranks" in out.stderr
    assert "ranks" in out.stderr and "wait in amnet.init() (bootstrap step 0); rank" in out.stderr
    assert "never reached it" in out.stderr
    assert time.monotonic() - t0 < 10


def test_timeout_ends_a_hung_job(runner):
    s = runner.script("hang.py", WAIT_SCRIPT.replace("ep.barrier()", "ep.bootstrap.barrier()"))
    t0 = time.monotonic()
    out = runner("-n", "4", "--threads-per-proc", "2", "--timeout", "1.5", s, "2")
    assert out.returncode == 124
    assert ("timed out after 1.5 s: ranks 0-1, 3 wait in a bootstrap barrier (bootstrap step 1); "
            "rank 2 never reached it") in out.stderr
    assert time.monotonic() - t0 < 8


@pytest.mark.parametrize("t", ["1", "2"])
def test_kill_9_of_one_rank_tears_the_job_down(runner, t):
    s = runner.script("wait.py", WAIT_SCRIPT)
    proc = runner.popen("-n", "4", "--nodes", "2", "--threads-per-proc", t, s, "0")
    pids, code, elapsed, err = hit_when_ready(proc, 4,
                                              lambda pids: os.kill(pids[3], signal.SIGKILL))
    assert code == 137
    assert "killed by signal 9 (SIGKILL)" in err
    assert elapsed < 5, f"teardown took {elapsed:.1f} s"
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie_free(pid)


def _is_zombie_free(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] not in "RSDZT"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"),
                                           (signal.SIGTERM, 143, "SIGTERM")])
def test_ctrl_c_and_sigterm_stop_everything(runner, sig, code, name):
    s = runner.script("wait.py", WAIT_SCRIPT)
    proc = runner.popen("-n", "3", s, "1")
    # as a terminal does: the whole foreground group
    _, rc, elapsed, err = hit_when_ready(proc, 3, lambda pids: os.killpg(proc.pid, sig))
    assert rc == code
    # where the ranks were: the diagnosis says what the launcher knew when the signal came
    assert re.search(rf"amnet-run: interrupted by {name}; (.* never reached it|ranks 0-2 still "
                     "running)", err), err
    assert elapsed < 5


def test_launcher_killed_with_sigkill_leaves_nothing(runner):
    s = runner.script("wait.py", WAIT_SCRIPT)
    proc = runner.popen("-n", "4", "--nodes", "2", s, "1")
    try:
        read_ready(proc, 4)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.communicate()
    deadline = time.monotonic() + 5
    from conftest import leftovers

    while leftovers(runner.mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(runner.mark) == []


def test_abort_ends_the_job_with_its_code(runner):
    s = runner.script("abort.py", WAIT_SCRIPT.replace("time.sleep(120)",
                                                      "amnet.abort(7, 'cannot go on')"))
    out = runner("-n", "3", "--threads-per-proc", "3", s, "1")
    assert out.returncode == 7
    assert (f"amnet-run: rank 1 (node 0, proc 0, thread 1, host {HOST}) called "
            "amnet.abort(7): cannot go on") in out.stderr


def test_stranger_connections_are_refused_and_the_job_goes_on(runner):
    from conftest import frames_to_bootstrap

    out = frames_to_bootstrap(runner, "stranger.py", """(
        [b"garbage"], [b"a", b"b", b"c"],
        [msgpack.packb({"t": "hello", "kind": "proc", "token": "wrong", "proc": 1})],
        [msgpack.packb({"t": "coll", "rank": 1, "seq": 1, "op": "barrier"})],
        [msgpack.packb({"t": "abort", "rank": 1, "code": 3, "msg": "evil"})])""")
    assert "amnet-run: refused a bootstrap connection that did not prove it holds this " \
        "job's secret; the job goes on" in out.stderr


def test_init_twice_fails_the_job(runner):
    s = runner.script("twice.py", "import amnet\namnet.init()\namnet.init()\n")
    out = runner("-n", "2", s)
    assert out.returncode == 1
    assert "raised InitError: amnet.init() was called twice on rank" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["-n", "0"], "the number of ranks (-n) must be at least 1, got 0"),
    (["-n", "-2"], "must be at least 1, got -2"),
    (["-n", "3", "--threads-per-proc", "2"], "-n 3 is not a multiple of --threads-per-proc 2"),
    (["-n", "4", "--procs-per-node", "0"], "processes per node (--procs-per-node) must be"),
    (["-n", "4", "--nodes", "5"], "--nodes 5 is more than the 4 process(es)"),
    (["-n", "5", "--nodes", "4"], "--nodes 4 does not fit 5 processes"),
    (["-n", "4", "--nodes", "2", "--procs-per-node", "1"], "disagree"),
    (["-n", "2", "--segment-size", "tiny"],
     "bad value 'tiny' for segment_size (from --segment-size)"),
    (["-n", "2", "--conduit", "pigeon"],
     "bad value 'pigeon' for conduit (from --conduit): expected the name of a registered "
     "conduit: zmq, tcp"),
    (["-n", "2", "--hosts", "a,b"], "--hosts/--hostfile place agents on other hosts"),
    (["-n", "2", "--spawner", "custom", "--spawn-cmd", "x %C %"], "unknown placeholder '%'"),
    (["-n", "2", "--timeout", "0"], "--timeout must be a positive number of seconds"),
    (["-n", "2", "--spawner", "ssh"], "the ssh spawner needs hosts"),
    (["-n", "2", "--spawner", "custom"], "the custom spawner needs --spawn-cmd"),
    (["-n", "2", "--spawner", "custom", "--spawn-cmd", "ssh %H"], "must contain %C"),
    (["-n", "2", "--spawner", "custom", "--spawn-cmd", "x %Q %C"], "unknown placeholder '%Q'"),
    (["-n", "2", "--spawn-cmd", "%C"], "--spawn-cmd is only for --spawner custom"),
    (["-n", "2", "--spawner", "ssh", "--hosts", "a,,b"], "comma-separated host names"),
    (["-n", "2", "--spawner", "ssh", "--hosts", "a", "--hostfile", "f"], "not both"),
    (["-n", "2", "--nodes", "2", "--spawner", "ssh", "--hostfile", "/nonexistent/hf"],
     "cannot read hostfile '/nonexistent/hf'"),
    (["--threads-per-proc", "2"], "give the number of ranks with -n N"),
    (["-n", "2", "--frobnicate"], "unknown option '--frobnicate'"),
    (["-n", "99999999999999999999"], "more than amnet's limit of 1048576 ranks"),
    (["-n", "5000"], "a node would host 5000 processes, more than the limit of 4096"),
    (["-n", "2048", "--threads-per-proc", "2048"], "more than the limit of 1024 rank-threads"),
    (["-n", "2", "--segment-size", "9223372036854775807"],
     "bad value '9223372036854775807' for segment_size (from --segment-size): expected a size "
     "in bytes from 4096 to 256T (2**48)"),
    (["-n", "2", "--thread-per-proc", "2"],
     "unknown option '--thread-per-proc'; did you mean --threads-per-proc?"),
    (["-n", "2", "-nodes", "2"], "unknown option '-nodes'; did you mean --nodes?"),
])
def test_bad_input_is_a_clear_error(runner, args, message):
    needs_script = not any(a.startswith(("--frob", "--thread-per")) for a in args)
    out = runner(*args, *([HELLO] if needs_script else []))
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("amnet-run: error: ")


def test_a_segment_size_past_the_limit_in_the_environment(runner):
    out = runner("-n", "2", HELLO, env={"AMNET_SEGMENT_SIZE": str(2**63 - 1)})
    assert out.returncode == 2, out.stderr
    assert out.stderr == (f"amnet-run: error: bad value '{2**63 - 1}' for segment_size (from "
                          "AMNET_SEGMENT_SIZE): expected a size in bytes from 4096 to 256T "
                          "(2**48) (e.g. 4096, 64M, 1G)\n")


def test_mpiexec_habits(runner):
    """-np N as mpiexec takes it; amnet-run's options after the script stay the script's,
    with a note (none after '--'); -n only after the script is explained."""
    s = runner.script("argv.py", "import sys, amnet\nep = amnet.init()\n"
                                 "print(ep.rank, ep.size, sys.argv[1:])\n")
    for np_ in (["-np", "3"], ["-np=3"]):
        out = runner(*np_, s)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.splitlines()) == [f"{r} 3 []" for r in range(3)]
        assert out.stderr == ""
    out = runner("-n", "2", s, "-n", "4", "--label", "x", "--help")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        f"{r} 2 ['-n', '4', '--label', 'x', '--help']" for r in range(2)]
    assert out.stderr == (f"amnet-run: note: -n, --label after the script {s!r} go to the "
                          "script, not to amnet-run (its options go before the script; '--' "
                          "before the script ends them and silences this note)\n")
    out = runner("-n", "2", "--", s, "-np", "4")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [f"{r} 2 ['-np', '4']" for r in range(2)]
    assert out.stderr == ""
    out = runner(s, "-n", "4")
    assert out.returncode == 2
    assert out.stderr == (
        "amnet-run: error: give the number of ranks with -n N (see amnet-run --help); -n came "
        f"after the script {s!r}: what follows the script is its own arguments, so "
        "amnet-run's options go before it\n")
    assert out.stdout == ""


def test_missing_and_unusable_scripts(runner):
    out = runner("-n", "2", str(runner.tmp / "nope.py"))
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = runner("-n", "2", str(runner.tmp))
    assert out.returncode == 2 and "is not a file" in out.stderr


def test_unknown_spawner(runner):
    out = runner("-n", "2", "--spawner", "pigeon", HELLO)
    assert out.returncode == 2
    assert "'pigeon' is not one of" in out.stderr


def test_unknown_amnet_variable(runner):
    out = runner("-n", "2", HELLO, env={"AMNET_SEGMENTSIZE": "1M"})
    assert out.returncode == 2
    assert "unknown environment variable AMNET_SEGMENTSIZE" in out.stderr


def test_malformed_hostfile(runner):
    hf = runner.tmp / "hosts"
    hf.write_text("# cluster\nnodeA slots=2\nnodeB slots=many\n")
    out = runner("-n", "2", "--spawner", "ssh", "--hostfile", str(hf), HELLO)
    assert out.returncode == 2
    assert f"hostfile {hf}:3: expected 'HOST' or 'HOST slots=N'" in out.stderr


def test_help_is_for_humans(runner):
    out = runner("--help")
    assert out.returncode == 0
    for word in ("--procs-per-node", "--threads-per-proc", "--nodes", "--label", "--timeout",
                 "--spawner", "--hostfile", "--spawn-cmd", "--bootstrap-addr", "Examples"):
        assert word in out.stdout


def test_version(runner):
    from importlib import metadata

    out = runner("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"amnet-run {metadata.version('amnet')}\n"
    assert out.stderr == ""
    assert "--version" in runner("--help").stdout
    # after SCRIPT, --version is the script's argument like any other
    s = runner.script("argv.py", "import sys\nprint(sys.argv[1:])\n")
    out = runner("-n", "1", s, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "['--version']\n"


@pytest.mark.parametrize("label", [[], ["--label"]], ids=["plain", "label"])
def test_a_script_that_does_not_compile_is_reported_once(runner, label):
    s = runner.script("bad.py", "import amnet\ndef f(:\n    pass\n")
    out = runner("-n", "4", "--nodes", "2", *label, s)
    assert out.returncode == 1, out.stderr  # as for a rank's uncaught exception
    assert out.stdout == ""
    # Python's report, once, as a rank would print it (no [rank] label: no rank ran)
    assert out.stderr.splitlines()[:4] == [
        f'  File "{s}", line 2', "    def f(:", "          ^", "SyntaxError: invalid syntax"]
    assert out.stderr.count("SyntaxError") == 2  # the report, then the diagnosis
    assert out.stderr.splitlines()[4:] == [
        f"amnet-run: app script {s!r} does not compile: SyntaxError: invalid syntax "
        "(bad.py, line 2); no rank was started"]


def test_only_compiling_is_checked_before_the_start(runner):
    # a SyntaxError raised while the script runs is a rank's exception, as before
    s = runner.script("late_syntax.py", "import amnet\nep = amnet.init()\n"
                                        "if ep.rank == 1:\n    exec('def f(:')\n"
                                        "ep.barrier()\n")
    out = runner("-n", "2", s)
    assert out.returncode == 1
    assert f"amnet-run: rank 1 (node 0, proc 1, host {HOST}) raised SyntaxError: " \
        in out.stderr
    assert "does not compile" not in out.stderr
    # the launcher compiles the bytes as the ranks do: a coding declaration is honoured
    latin = runner.tmp / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\nprint('caf\xe9')\n")
    out = runner("-n", "1", str(latin))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "caf\u00e9\n"


def test_a_rank_that_ended_before_the_others_enter_init(runner):
    """The ended rank is known first; the others arrive later and must not wait forever."""
    s = runner.script_first("late.py", """
if not first:
    time.sleep(1.0)
    amnet.init()
""")
    out = runner("-n", "3", "--timeout", "20", s)
    assert out.returncode == 1, out.stderr
    assert "ended without calling amnet.init() while rank" in out.stderr
