"""amnet.aio: awaitable handles on every conduit, in processes and rank-threads; many
concurrent awaits; cancellation and timeout mid-flight; remote errors at the await; a
handler's deferred coroutine; futures, callbacks and promises; the CPU an idle awaiting rank
uses (a bound on CPU time, not wall time); misuse; and kill -9 of a rank of an aio job.

The jobs are in tests/data/aiojobs.py."""

from __future__ import annotations

import aiojobs
import pytest

import amnet

TOPOS = {
    "procs-2nodes": dict(n=4, nodes=2),
    "threads": dict(n=4, nodes=2, threads_per_proc=2),
    "1node-pshm": dict(n=4, nodes=1),
    "mpi": dict(n=4, nodes=2, conduit="mpi"),
    "tcp": dict(n=4, nodes=2, conduit="tcp"),
}


def job(fn, topo: str, **kw):
    return amnet.run(fn, timeout=120, **TOPOS[topo], **kw)


@pytest.mark.parametrize("topo", list(TOPOS))
def test_awaited_handles_give_what_wait_gives(topo):
    got = job(aiojobs.basics, topo)
    n = len(got)
    for r, out in enumerate(got):
        peer = (r + 1) % n
        left = (r - 1) % n
        assert out["rpc"] == r + 10
        assert out["get"] == bytes([peer + 1]) * 8
        assert out["put_landed"] == bytes([left + 7]) * 8
        msg, notes = out["error"]
        assert msg == f"boom {r}"
        assert any(f"on rank {peer}" in note for note in notes), notes
        assert out["gather_ok"] and out["gather_n"] == 250 * n
        assert out["reduce"] == n * (n + 1) // 2
        assert out["region"] == b"region!!"


@pytest.mark.parametrize("topo", ["procs-2nodes", "threads"])
def test_the_layers_handles_are_awaitable(topo):
    """VIS's vector put and get, upc_rt's memput_nb and memget_nb, awaited."""
    got = job(aiojobs.layers, topo)
    n = len(got)
    for r, out in enumerate(got):
        assert out["vis"] == (b"ABCD", b"EFGH")
        assert out["upc"] == bytes([(r - 2) % n + 1]) * 64  # thread r-1's block, from r-2


@pytest.mark.parametrize("topo", ["procs-2nodes", "threads", "mpi"])
def test_cancel_and_timeout_mid_flight_leave_the_operations_whole(topo):
    got = job(aiojobs.cancel_and_timeout, topo)
    zero = got[0]
    assert zero["rpc"] == "timeout" and zero["put"] == "timeout"  # node 1 was computing
    assert zero["bad"] == "cancelled"
    assert zero["timed_out_after"] < 0.6
    assert zero["rpc_later"] == 3  # the operation went on and completed
    assert got[-1]["landed"] == bytes([9]) * 16  # the cancelled put's bytes are all there
    assert zero["reported"] == [
        ("an amnet operation whose await was cancelled failed on rank 0", "ValueError")]


@pytest.mark.parametrize("topo", ["procs-2nodes", "threads", "1node-pshm"])
def test_a_handler_hands_a_coroutine_to_its_loop(topo):
    got = job(aiojobs.deferred, topo)
    n = len(got)
    for r, kicked in enumerate(got):
        src = (r - 1) % n
        # the coroutine ran on the kicked rank's loop thread and did what a handler may not
        assert kicked == [(src, 100 + src, 100 + src + 1000, True)]


def test_an_exception_of_deferred_work_ends_that_ranks_run():
    got = job(aiojobs.deferred_failure, "procs-2nodes")
    assert got[0] == "raised 'deferred work failed'"
    assert got[1:] == ["not ended"] * 3


@pytest.mark.parametrize("topo", list(TOPOS))
def test_an_idle_awaiting_rank_uses_little_cpu_and_still_serves(topo):
    got = job(aiojobs.idle_cpu, topo)
    zero = got[0]
    assert 0.95 < zero["wall"] < 1.5
    # under 5% of a core while it awaits (process CPU time: rank-threads share a process,
    # and in the threads topology the other rank-thread of rank 0's process awaits too)
    assert zero["cpu"] < 0.05 * zero["wall"] * (2 if topo == "threads" else 1), zero
    assert zero["cpu_serving"] < 0.3
    for r, out in enumerate(got[1:], 1):
        assert out["answers"] == [r + i for i in range(20)]
        assert out["answer_s"] < 0.05  # answered while awaiting, not at its end


@pytest.mark.parametrize("topo", ["procs-2nodes", "threads", "1node-pshm", "mpi"])
def test_when_all_gives_the_results_in_order_without_a_task_each(topo):
    """amnet.aio.when_all: results in order, every kind of handle and awaitable mixed, the
    first remote error at the await (the other operations complete), return_exceptions, and
    a timeout mid-flight (the operations go on; a failure after it is reported)."""
    got = job(aiojobs.when_all, topo)
    n = len(got)
    for out in got:
        assert out["many"] is True
        # get_nb (a fresh segment), put_nb, a region, an rpc, a coroutine, a future, a reduce
        assert out["mixed"] == [bytes(4), None, None, 5, "coro", "future", n]
        assert out["empty"] == []
        assert out["error"] == ("boom 7", True), out["error"]
        assert out["other_went_on"] == 2
        assert out["returned"] == ["ValueError", "boom 8", 8]
        assert "cannot await 'not awaitable'" in out["type_error"]
        assert out["landed"] is True
    zero = got[0]
    assert zero["later"] == 11  # the operation went on and completed
    if TOPOS[topo].get("nodes", 1) > 1:
        assert zero["timeout"] == "timeout"  # node 1 was computing
        # both failing rpcs reported (return_exceptions or not); no CancelledError reported
        assert zero["reported"] == [
            ("an amnet operation of a cancelled when_all failed on rank 0", "ValueError")] * 2
        assert zero["sleeper"] == "cancelled"  # the task it made was cancelled with it
    else:
        assert zero["timeout"] == "failed" and zero["reported"] == []


def test_replies_to_a_running_loop_do_not_ring_its_doorbell():
    """A one-rank process's loop lowers its sleeping flag after a drain until it may block:
    the rpcs its woken coroutine issues are answered without a doorbell each (every reply
    rang one before: a loop never says when it sleeps)."""
    got = job(aiojobs.quiet_replies, "1node-pshm")
    for r, out in enumerate(got[1:], 1):
        assert out["replies"] == 1000
        # a few ring (replies that find the loop blocked, the barrier's messages): not most
        assert out["rang"] < out["replies"] // 2, (r, out)


@pytest.mark.parametrize("topo", ["procs-2nodes", "threads"])
def test_futures_callbacks_and_promises(topo):
    for out in job(aiojobs.promises, topo):
        assert out["future"] == 11 and out["callback"] == [2]
        assert out["outstanding"] == 0 and out["puts"] is True
        assert out["bad"] == "boom 3"
        assert out["after_finalize"] == "Promise.require() after finalize()"


def test_misuse_is_refused_with_a_clear_error():
    got = job(aiojobs.misuse, "procs-2nodes")
    assert "plain_loop" not in got[-1]  # it was the target, computing
    for out in got:
        if out is not got[-1]:
            assert "amnet.aio.run" in out["plain_loop"], out
        assert "inside a running event loop" in out["nested"]
        assert "runs no amnet.aio loop" in out["defer_no_loop"]


def test_await_without_amnet_aio_names_it(runner):
    """A plain asyncio loop, amnet.aio never imported: the await says what is missing."""
    script = runner.script("plain.py", """
import asyncio
import amnet
ep = amnet.init()
async def main():
    await ep.put_nb(0, 0, b"x")
try:
    asyncio.run(main())
except amnet.AMContextError as e:
    print("refused:", e)
""")
    out = runner("-n", "1", str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: await of <amnet.Handle put "), out.stdout
    assert "needs amnet.aio: run the coroutine with amnet.aio.run(main)" in out.stdout


def test_kill_9_of_a_rank_ends_an_aio_job_and_leaves_nothing(runner):
    """The last rank dies by SIGKILL while the others await (an rpc to it, then a long
    sleep): the job ends with its signal at once, and nothing of it is left (the runner
    fixture checks processes and /dev/shm)."""
    script = runner.script("killed.py", "import aiojobs\naiojobs.killed()\n")
    out = runner("-n", "4", "--nodes", "2", str(script), timeout=90)
    assert out.returncode == 137, out.stderr
    assert "killed by signal 9" in out.stderr
