"""The examples in examples/ run as their docstrings say and check their own answers.

Each AM example asserts its results (a wrong answer exits non-zero) and rank 0 prints one
line; the expected lines are exact because every example is deterministic. They run in the two
shapes the AM guide uses: 4 ranks on 2 simulated nodes, with 1 and with 2 rank-threads per
process. examples/hello.py is covered by tests/test_cli.py (test_hello_readme_command).

The UPC examples in examples/upc/ (on upc_rt) follow the same rule, in the two shapes their
docstrings give: 4 UPC threads as 2 processes of 2 rank-threads on one node, and 4 processes
on 2 simulated nodes; each on amnet and over shmem_rt (``AMNET_UPC_RUNTIME=shmem``), with the
same output.

The asyncio examples in examples/aio/ (amnet.aio) and the OpenSHMEM examples in
examples/shmem/ (on shmem_rt) too, in the three shapes their
docstrings give: 4 PEs as 4 processes, as 2 processes of 2 rank-threads, and on 2 simulated
nodes. hello.py prints one line per PE (in no fixed order, sorted here); race_winner.py
does not name its winner, which varies.
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


UPC_EXPECTED = {
    "gups.py": "gups: 4 threads, 16384 HPCC updates of a cyclic table of 2^12 uint64 in "
               "batches of 256 under per-owner locks (table sum a8a6a9ffd2252eb4); HPCC "
               "verification: 0 errors (at most 40 allowed): ok",
    "histogram.py": "histogram: 4 threads x 1000 values, 3995 in [-3.0, 3.0] binned with "
                    "atomic fetch_add: 16 shared bins [11, 33, 63, 131, 247, 401, 482, 583, "
                    "628, 480, 394, 256, 146, 89, 36, 15] equal numpy.histogram of all 4000: ok",
    "sobel.py": "sobel: 96x80 image on 4 threads (24 rows each, halo rows read in bulk): equal "
                "to the serial numpy Sobel, 480 edge pixels above 1.0, sum 3559.372593: ok",
    "matmul.py": "matmul: 24x24 on 4 threads, rows blocked: naive (3456 element reads of B per "
                 "thread) and cache-friendly (B in 4 memget_nb blocks) both equal numpy A @ B "
                 "(trace 17, sum of squares 791301): ok",
    "stream_triad.py": "stream_triad: 4 threads, a = b + 3.0*c on 3 shared arrays of 262144 "
                       "doubles, 10 repetitions, each thread on its own elements (X.local): "
                       "every element checked (sum of a 1048579.0): ok",
    "cpi.py": "cpi: 4 threads, 100000 midpoint intervals of 4/(1+x^2) with upc_forall, "
              "partial sums in a shared array: pi ~ 3.141592653598 (|error| < 1e-9): ok",
    "work_queue.py": "work_queue: 4 threads took 200 tasks from a lock-protected shared "
                     "counter: each done exactly once, results equal the serial ones (total "
                     "17125 Collatz steps): ok",
}
UPC_SHAPES = {
    "hybrid": ["--procs-per-node", "2", "--threads-per-proc", "2"],  # 1 node, 2 procs x 2
    "2nodes": ["--nodes", "2"],  # 2 nodes, 2 procs each
}

SHMEM_EXPECTED = {
    "ring.py": "ring: 4 PEs put 1000 int64 to the right and got 1000 from the left, a token "
               "went around with p/wait_until and came back as 6: ok",
    "lock_counter.py": "lock_counter: 4 PEs x 25 locked get/+1/put on PE 0, with set_lock and "
                       "with a Lock -> both counts = 100 (expected 100), every value read "
                       "exactly once: ok",
    "pi.py": "pi: 4 PEs, midpoint rule with 100000 intervals -> sum_reduce 3.141592653598 "
             "(|error| < 1e-9); Monte Carlo, 62828 of 80000 points inside -> 3.1414; every "
             "reduction equals the serial one: ok",
    "alltoall.py": "alltoall: 4 PEs exchanged blocks of 5 int64 (world, the team of 2 even "
                   "PEs, and strided with alltoalls): every block where it belongs: ok",
    "race_winner.py": "race_winner: 4 PEs raced with atomic_compare_swap on PE 0; exactly one "
                      "won and told all 4 with put_signal, every PE saw the same winner, "
                      "finishing positions 0..3 each taken once: ok",
}
SHMEM_SHAPES = {
    "procs": [],  # 4 processes on one node
    "threads": ["--threads-per-proc", "2"],  # 2 processes x 2 rank-threads
    "2nodes": ["--nodes", "2"],  # 2 nodes, 2 processes each
}


AIO_EXPECTED = {
    "kv_service.py": "kv_service: 4 ranks stored 200 keys each with 200 rpcs in flight (owned "
                     "[200, 200, 200, 200]), read back their right neighbour's, a missing key "
                     "raised KeyError: ok",
    "crawler.py": "crawler: 4 ranks crawled a 6000-vertex graph from their own vertices: "
                  "reached [6000, 6000, 6000, 6000] in [13, 13, 13, 13] levels, up to 1565 rpcs "
                  "in flight, every level equal to a local breadth-first search: ok",
    "overlap.py": "overlap: 4 ranks x 1000 cells, 25 steps, halo gets awaited while the "
                  "interior was computed: equals the serial computation (norm 44.883608279): "
                  "ok",
}


@pytest.mark.parametrize("shape", sorted(SHMEM_SHAPES))  # the shapes their docstrings give
@pytest.mark.parametrize("example", sorted(AIO_EXPECTED))
def test_aio_example(runner, example, shape):
    out = runner("-n", "4", *SHMEM_SHAPES[shape], "--timeout", "40",
                 str(EXAMPLES / "aio" / example), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [AIO_EXPECTED[example]], out.stdout + out.stderr


@pytest.mark.parametrize("threads", [1, 2], ids=["T1", "T2"])
@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_am_example(runner, example, threads):
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", str(threads),
                 "--timeout", "40", str(EXAMPLES / example), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [EXPECTED[example]], out.stdout + out.stderr


@pytest.mark.parametrize("runtime", ["amnet", "shmem"])  # AMNET_UPC_RUNTIME (docs/upc.md)
@pytest.mark.parametrize("shape", sorted(UPC_SHAPES))
@pytest.mark.parametrize("example", sorted(UPC_EXPECTED))
def test_upc_example(runner, example, shape, runtime):
    out = runner("-n", "4", *UPC_SHAPES[shape], "--timeout", "40",
                 str(EXAMPLES / "upc" / example), timeout=60,
                 env={"AMNET_UPC_RUNTIME": runtime})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [UPC_EXPECTED[example]], out.stdout + out.stderr


@pytest.mark.parametrize("shape", sorted(SHMEM_SHAPES))
@pytest.mark.parametrize("example", ["hello.py", *sorted(SHMEM_EXPECTED)])
def test_shmem_example(runner, example, shape):
    out = runner("-n", "4", *SHMEM_SHAPES[shape], "--timeout", "40",
                 str(EXAMPLES / "shmem" / example), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    if example == "hello.py":
        nodes = 2 if shape == "2nodes" else 1
        expected = sorted(f"Hello from PE {pe} of 4 (node {pe * nodes // 4}, which has "
                          f"{4 // nodes} PEs)" for pe in range(4))
        assert sorted(out.stdout.splitlines()) == expected, out.stdout + out.stderr
    else:
        assert out.stdout.splitlines() == [SHMEM_EXPECTED[example]], out.stdout + out.stderr


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
