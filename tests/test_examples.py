"""The examples in examples/ run as their docstrings say and check their own answers.

Each AM example asserts its results (a wrong answer exits non-zero) and rank 0 prints one
line; the expected lines are exact because every example is deterministic. They run in the two
shapes the AM guide uses: 4 ranks on 2 simulated nodes, with 1 and with 2 rank-threads per
process. examples/hello.py is covered by tests/test_cli.py (test_hello_readme_command).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"

EXPECTED = {
    "pshm_hybrid.py": "pshm_hybrid: 4 ranks on 2 node(s): 8 blocks written into node-local "
                      "segments (through segment views where mapped) and checked, node "
                      "counters [40, 40] (every ticket once), 32 node-local Medium AMs "
                      "answered: ok",
    "am_pingpong.py": "am_pingpong: 4 ranks x 20 rounds of Short/Medium/Long request+reply ok, "
                      "checksum cb063d06",
    "counter_atomics.py": "counter_atomics: 4 ranks x 50 fadds -> counter = 200 (expected 200), "
                          "every ticket handed out once, sum of ranks = 6, max rank = 3, one "
                          "cas winner: ok",
    "rpc_kv.py": "rpc_kv: 4 ranks stored 64 keys (owned [16, 16, 16, 16]), every get matched, "
                 "a missing key raised KeyError: ok",
    "halo_put_get.py": "halo_put_get: 4 ranks x 1000 cells, 25 steps: result equals the serial "
                       "computation (norm 72.364726204): ok",
    "halo_vis.py": "halo_vis: 4 ranks, 2x2 grid of 16x16 blocks, 20 steps: equals the serial "
                   "computation (norm 11.581995621): ok",
}


@pytest.mark.parametrize("threads", [1, 2], ids=["T1", "T2"])
@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_am_example(runner, example, threads):
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", str(threads),
                 "--timeout", "40", str(EXAMPLES / example), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [EXPECTED[example]], out.stdout + out.stderr


def test_run_from_python_example(runner):
    out = subprocess.run([sys.executable, str(EXAMPLES / "run_from_python.py")],
                         capture_output=True, text=True, timeout=60, env=runner.env(),
                         cwd=runner.tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 11 and lines[-1] == "ok", out.stdout
    # the failing rank's traceback is announced as expected before it comes
    assert lines[8].startswith("next: a job whose rank 2 raises ValueError on purpose; the "
                               "traceback that follows (rank 2's stderr) is expected"), lines[8]
    assert "Traceback (most recent call last):" in out.stderr
    assert lines[9].startswith("caught ValueError from the job: raised on rank 2"), lines[9]
    for rank, line in enumerate(lines[:8]):
        node, proc, thread = rank // 4, rank // 2, rank % 2
        assert line.startswith(f"rank {rank}: node {node}, proc {proc}, thread {thread} on "), line
