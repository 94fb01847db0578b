"""Functions that tests run on every rank with amnet.run (importable by name)."""

from __future__ import annotations

import os
import signal
import threading
import time

import amnet


def where(ep):
    return {
        "rank": ep.rank, "size": ep.size, "node": ep.node, "nodes": ep.nodes,
        "proc": ep.proc, "procs": ep.procs, "thread": ep.thread,
        "threads_per_proc": ep.threads_per_proc, "procs_per_node": ep.procs_per_node,
        "local_ranks": [ep.local_ranks.start, ep.local_ranks.stop],
        "is_local": [ep.is_local(r) for r in range(ep.size)],
        "same_process": [ep.same_process(r) for r in range(ep.size)],
        "pid": os.getpid(),
    }


def allgather_square(ep):
    got = ep.bootstrap.allgather(ep.rank * ep.rank)
    ep.barrier()
    return got


def raise_on_2(ep):
    ep.barrier()
    if ep.rank == 2:
        raise ValueError(f"bad value on rank {ep.rank}")
    ep.barrier()
    return ep.rank


def exit_3_on_1(ep):
    if ep.rank == 1:
        os._exit(3)
    ep.barrier()


def sigkill_on_0(ep):
    if ep.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    ep.barrier()


def abort_on_1(ep):
    if ep.rank == 1:
        amnet.abort(9, "rank one gives up")
    ep.barrier()


def mismatched_barrier(ep):
    ep.barrier("left" if ep.rank == 0 else "right")


def anonymous_matches_named(ep):
    ep.barrier(None if ep.rank % 2 else "phase-1")
    return True


def init_twice(ep):
    return amnet.init()


def init_from_other_thread(ep):
    out = {}

    def body():
        try:
            amnet.init()
        except amnet.InitError as e:
            out["err"] = str(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out["err"]


def catch_job_aborted(ep):
    """Rank 0 fails; the others must see JobAborted while they wait in a barrier."""
    if ep.rank == 0:
        time.sleep(0.2)
        raise RuntimeError("rank 0 fails first")
    try:
        ep.barrier()
    except amnet.JobAborted as e:
        print(f"rank {ep.rank} saw JobAborted: {e.reason}", flush=True)
        raise


def bad_rank(ep):
    errors = []
    for r in (-1, ep.size, "1", 1.0, True):
        try:
            ep.is_local(r)
        except amnet.RankError as e:
            errors.append(str(e))
    return errors


def unpicklable_result(ep):
    return threading.Lock()


def print_lines(ep):
    for i in range(3):
        print(f"line {i} from rank {ep.rank}")
    return None


def finalize_then_barrier(ep):
    amnet.finalize()
    try:
        ep.barrier()
    except amnet.InitError as e:
        return str(e)


def segment_size(ep):
    return ep.config.segment_size


def endpoint_is_read_only(ep):
    try:
        ep.rank = 99
    except AttributeError as e:
        return str(e), ep.rank, amnet.config.segment_size


def address_table(ep):
    return ep.bootstrap.table, os.getpid(), ep.host


def affinity(ep):
    """The cores every thread of this rank's process may run on (one set per thread)."""
    import os

    return sorted({frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")},
                  key=sorted)


def wait_mode(ep):
    return ep.wait_mode
