"""upc_rt in real jobs: every operation at T=1 and T=2, within one node and across 2 nodes,
with the remote-reference cache off and on; lock fairness, the release hazard, collective
mismatches, bad input and heap churn have their own jobs. The checks run inside the ranks
(tests/data/upcjobs.py) against numpy models; these tests check what the ranks returned.

The functional jobs run twice, ``runtime`` amnet and shmem (``AMNET_UPC_RUNTIME``: upc_rt
over shmem_rt's public calls, docs/upc.md): the same jobs, the same checks."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import upcjobs
import upcjobs2
from conftest import assert_each_starts

import amnet

SEGMENT = 4 << 20
DATA = Path(__file__).parent / "data"

TOPOLOGIES = [
    pytest.param(dict(n=2), id="node-T1"),
    pytest.param(dict(n=2, threads_per_proc=2), id="node-T2"),
    pytest.param(dict(n=4, nodes=2), id="2nodes-T1"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="2nodes-T2"),
]


def job(fn, topo, runtime="amnet", **kw):
    if runtime == "shmem":  # every job checks that it ran over shmem_rt
        fn = functools.partial(_over_shmem, fn)
    return amnet.run(fn, **topo, segment_size=SEGMENT, timeout=120, upc_runtime=runtime, **kw)


def _over_shmem(fn, ep, *a, **kw):
    out = fn(ep, *a, **kw)
    import upc_rt

    rt = upc_rt._rt.current()
    assert rt.shm is not None and rt.net is rt.shm, "upc_rt did not run over shmem_rt"
    return out


# upc_rt on amnet, and over shmem_rt (the same jobs and checks; the cache, auto_nb and the
# amnet-only jobs stay on amnet)
RUNTIMES = pytest.mark.parametrize("runtime", ["amnet", "shmem"])


def with_cache(topologies, keep_node=()):
    """(topo, cache) cases: cache off for every topology, on for those across nodes (within
    a node the cache never engages: memory is read directly) and for the node topologies
    named in ``keep_node``, which check that it stays out of the way."""
    out = []
    for t in topologies:
        topo, tid = t.values[0], t.id
        out.append(pytest.param(topo, False, id=f"{tid}-nocache"))
        if topo.get("nodes") or tid in keep_node:
            out.append(pytest.param(topo, True, id=f"{tid}-cache"))
    return out


# the mpi conduit between the nodes (MPICH's network path, tests/conftest.py)
MPI_T2 = pytest.param(dict(n=4, nodes=2, threads_per_proc=2, conduit="mpi"), id="2nodes-T2-mpi")


@pytest.mark.parametrize(("topo", "cache", "runtime"), [
    *(pytest.param(*p.values, "amnet", id=p.id)
      for p in with_cache([*TOPOLOGIES, MPI_T2], keep_node=("node-T1",))),
    *(pytest.param(t.values[0], False, "shmem", id=f"{t.id}-shmem") for t in TOPOLOGIES)])
def test_every_operation(topo, cache, runtime):
    facts = job(functools.partial(upcjobs.suite, cache=cache), topo, runtime)
    n = topo["n"]
    assert [f["rank"] for f in facts] == list(range(n))
    tickets = sorted(t for f in facts for t in f["tickets"])
    assert tickets == list(range(5 * n))  # fetch_add handed out every ticket once
    for f in facts:
        assert f["cache"]["enabled"] is cache
    if cache and topo.get("nodes"):  # remote element accesses went through the cache
        assert sum(f["cache"]["hits"] for f in facts) > 0
        assert sum(f["cache"]["misses"] for f in facts) > 0
    if not cache or not topo.get("nodes"):  # nothing is cached within a node
        assert all(f["cache"]["hits"] == f["cache"]["misses"] == 0 for f in facts)


@pytest.mark.parametrize("topo", [dict(n=4, nodes=2), dict(n=4, threads_per_proc=2)],
                         ids=["2nodes", "threads"])
def test_locks_are_granted_in_request_order(topo):
    got = job(upcjobs.lock_fifo, topo)
    assert got[0] == [1, 2, 3]


@pytest.mark.parametrize(("cache", "runtime"), [(False, "amnet"), (True, "amnet"),
                                               (False, "shmem")],
                         ids=["nocache", "cache", "shmem"])
def test_release_hazard_is_closed(cache, runtime):
    # thread 0 writes X on another node inside the critical section: in flight for 20 ms, or
    # (cache on) held in its cache; an unlock that did not complete the write first would
    # let thread 2, next to X, read the old value (the cache variant fails with unlock's
    # fence removed; emulated latency alone keeps messages in order, so it cannot)
    got = job(functools.partial(upcjobs.release_hazard, cache=cache), dict(n=4, nodes=2),
              runtime, net_latency_us=20000)
    assert got[2] == list(range(1, 9))


@pytest.mark.parametrize("line", [1024, 64 << 10], ids=["lines-batched", "line-as-runs"])
def test_cache_write_back_keeps_other_writers_bytes(line):
    # two writers share every line of another node's piece; a write-back of whole lines
    # that ignored the masks would put back the other writer's old bytes. 64 KiB lines do
    # not fit a call with their masks: they go back as vector puts of their dirty runs
    got = job(upcjobs.cache_write_back, dict(n=4, nodes=2), upc_cache_blocks=4,
              upc_cache_block_size=line)
    for st in got[:2]:
        assert st["writebacks"] > 0 and st["misses"] > 0
    assert all(st["misses"] == st["hits"] == 0 for st in got[2:])


@pytest.mark.parametrize("every", [64, 0])
def test_a_thread_computing_on_its_own_data_serves_other_nodes(every):
    got = job(upcjobs.attentive, dict(n=2, nodes=2), upc_poll_every=every)
    assert got[0]["read"] == 5.0
    if every:  # served within the 100000 reads (they poll every 64)
        assert got[1]["reads"] < 100_000
    else:  # served only where thread 1 waits, at a barrier: never during its reads
        # (0: thread 0's read and flag arrived while thread 1 was leaving the first barrier)
        assert got[1]["reads"] in (0, 100_000)


@pytest.mark.parametrize("topo", [dict(n=2), dict(n=4, nodes=2, threads_per_proc=2)],
                         ids=["node", "2nodes-T2"])
@RUNTIMES
def test_collective_mismatch_fails_every_thread(topo, runtime):
    got = job(upcjobs.mismatch, topo, runtime)
    for r, out in enumerate(got):
        assert "upc_all_alloc: thread 1 passed (4, 16) but thread 0 passed (4, 8)" in out[0]
        assert "upc.shared_array: thread 1 passed ('(11,)'" in out[1]
        assert "'<f8'" in out[2] and "'<i4'" in out[2]
        assert out[3] == "0", r


@RUNTIMES
def test_bad_input_is_refused_before_anything_moves(runtime):
    got = job(upcjobs.bad_input, dict(n=4, nodes=2), runtime)
    for out in got:
        assert out["before_init"].startswith("NotInitialized: upc.shared_array() before "
                                             "upc.init()")
        assert out["mythread_before_init"].startswith("NotInitialized: upc_rt.MYTHREAD before")
        assert out["index"].startswith("IndexError: shared array 10 of int16 (block size 2)")
        assert "the array has 10 elements" in out["index"]
        assert out["index_set"].startswith("IndexError:")
        assert out["fit"].startswith("ValueError:") and "int16" in out["fit"]
        assert out["fit_remote"].startswith("ValueError:") and "not an integer" in \
            out["fit_remote"]
        assert out["fit_slice"].startswith("ValueError: ") and "1048576" in out["fit_slice"]
        assert out["memget_past_end"].startswith("BoundsError: upc.memget(): 40 bytes at "
                                                 "byte 0 of the upc_all_alloc(4, 32)")
        assert "that part holds 32 bytes" in out["memget_past_end"]
        assert out["memput_past_end"].startswith("BoundsError:")
        assert out["unlock_not_held"].startswith("LockError: upc.unlock(): thread")
        assert "already freed" in out["double_free"]
        assert out["free_inside"].startswith("ValueError: upc.free():")
        assert out["alloc_too_big"].startswith("MemoryError: upc_alloc: cannot allocate "
                                               "1099511627776 bytes")
        assert "largest free block" in out["alloc_too_big"]
        assert out["all_alloc_too_big"].startswith("MemoryError: upc_all_alloc: cannot "
                                                   "allocate 1099511627776 bytes")
        assert out["lock_after_free"].startswith("LockError:") and "freed" in \
            out["lock_after_free"]


@pytest.mark.parametrize("topo", [dict(n=2, threads_per_proc=2), dict(n=2, nodes=2)],
                         ids=["threads", "2nodes"])
@RUNTIMES
def test_heap_churn_does_not_fragment(topo, runtime):
    assert job(upcjobs.churn, topo, runtime) == [1] * topo["n"]


@pytest.mark.parametrize("args", [["-n", "2"], ["-n", "2", "--threads-per-proc", "2"],
                                  ["-n", "2", "--nodes", "2"]], ids=["pshm", "threads", "nodes"])
def test_outside_extension(args):
    # an extension defined by the application (amnet.register_extension before init): its
    # own system AMs, per-endpoint state and sync hooks, through the public interface only
    out = subprocess.run([sys.executable, "-m", "amnet.run", *args, str(DATA / "extjob.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "echo ok 2\n"


def test_upc_uses_only_the_public_interface():
    # upc_rt is built as an outside runtime would be: it imports nothing private of amnet
    src = "\n".join(p.read_text() for p in (Path(__file__).parent.parent / "upc_rt").glob("*.py"))
    assert "amnet." in src
    assert "from amnet._" not in src and "from amnet.core" not in src and "._eng" not in src
    assert "._rs" not in src
    # over shmem (runtime "shmem") it uses shmem_rt's public calls only
    assert "shmem_rt._" not in src and "from shmem_rt" not in src and "import shmem_rt as" in src


@pytest.mark.parametrize(("topo", "cache", "runtime"), [
    *(pytest.param(*p.values, "amnet", id=p.id)
      for p in with_cache([TOPOLOGIES[1], TOPOLOGIES[2]])),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), False, "shmem", id="2nodes-T2-shmem")])
def test_nd_slices_move_in_bulk_and_match_numpy(topo, cache, runtime):
    got = job(functools.partial(upcjobs.nd_slices, cache=cache), topo, runtime)
    assert got == [got[0]] * topo["n"] and got[0] > 50


@RUNTIMES
def test_index_keys_follow_numpy_and_bad_ones_are_index_errors(runtime):
    got = job(upcjobs.index_keys, dict(n=2, nodes=2), runtime)
    for errors in got:  # four IndexErrors naming the array, then both floats refused
        assert len(errors) == 6 and all(e.startswith("shared array 300 of int64")
                                        for e in errors[:4]), errors
        assert [e[:17] for e in errors[4:]] == ["float on thread 0", "float on thread 1"]


# the cache across nodes once (2 processes of 2 threads): the collectives' own paths do not
# change with it (CI time)
@pytest.mark.parametrize(("topo", "cache", "runtime"), [
    *(pytest.param(*p.values, "amnet", id=p.id)
      for p in with_cache([*TOPOLOGIES, pytest.param(dict(n=3), id="node-T1-3threads"),
                           pytest.param(dict(n=5, nodes=2), id="2nodes-T1-5threads")])
      if not p.values[1] or p.id == "2nodes-T2-cache"),
    pytest.param(dict(n=5, nodes=2, conduit="mpi"), False, "amnet",
                 id="2nodes-T1-5threads-mpi-nocache"),
    pytest.param(dict(n=3), False, "shmem", id="node-T1-3threads-shmem"),
    pytest.param(dict(n=5, nodes=2), False, "shmem", id="2nodes-T1-5threads-shmem"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), False, "shmem", id="2nodes-T2-shmem")])
def test_collectives_every_flag_pair_and_algorithm(topo, cache, runtime):
    got = job(functools.partial(upcjobs.collectives, cache=cache), topo, runtime)
    assert len(set(got)) == 1 and got[0] > 100


@RUNTIMES
def test_collectives_refuse_what_does_not_fit(runtime):
    got = job(upcjobs.coll_bad, dict(n=2, nodes=2), runtime)
    want = ["ValueError: upc.all_broadcast(): dst is shared array 16 of uint8 (block size 4)",
            "ValueError: upc.all_broadcast(): nbytes must be an int >= 1, got 0",
            "ValueError: upc.all_broadcast(): flags 3 name two IN_* or two OUT_* modes",
            "ValueError: upc.all_broadcast(): flags must combine one IN_* and one OUT_*",
            "ValueError: permute: perm [0, 0] is not a permutation of 0..1",
            "BoundsError: upc.all_broadcast() (src): 8 bytes at byte 0 of the upc_all_alloc(1, 4)",
            "ValueError: upc.all_reduce(): unknown reduction op 'SUM'",
            "ValueError: upc.all_reduce(): blk_size 4 differs from src's block size, 8",
            "BoundsError: upc.all_reduce() (src): 72 bytes at byte 0 of shared array 17",
            "CollectiveMismatch: upc.all_reduce(): the threads disagree: thread 1 called it "
            "with op MAX, nelems 17, blk_size 3, dtype int64, thread 0 with op ADD, nelems 17",
            "CollectiveMismatch: upc.all_prefix_reduce(): the threads disagree: thread 1 "
            "called it with op ADD, nelems 16, blk_size 3, dtype int64, thread 0 with op ADD, "
            "nelems 17"]
    assert_each_starts(got, want)


# -- upc_rt under the automatic nonblocking scheduler (auto_nb) -------------------------------
def test_auto_nb_defers_puts_and_prefetches_gets():
    got = job(upcjobs.nb_halo, dict(n=4, nodes=2), auto_nb=True)
    for r in got:
        assert r["nb"] and all(r["ok"]), r
    # threads 1 and 3 put to the other node (0 and 2 next to them, directly); gets from the
    # other node are prefetched from the second run of the loop's phase on
    assert sum(r["stats"].puts_deferred for r in got) == 2 * 4
    assert sum(r["stats"].prefetch_hits for r in got) > 0
    assert not any(r["nb"] for r in job(upcjobs.nb_halo, dict(n=2, nodes=2), auto_nb=False))


@pytest.mark.parametrize("cache", [False, True], ids=["nocache", "cache"])
def test_auto_nb_changes_no_result(cache):
    # the same jobs as above, every access to the other node through (or past) the scheduler
    topo = dict(n=4, nodes=2)
    facts = job(functools.partial(upcjobs.suite, cache=cache), topo, auto_nb=True)
    assert sorted(t for f in facts for t in f["tickets"]) == list(range(5 * topo["n"]))
    got = job(functools.partial(upcjobs.nd_slices, cache=cache), topo, auto_nb=True)
    assert got == [got[0]] * topo["n"] and got[0] > 50
    got = job(functools.partial(upcjobs.collectives, cache=cache), topo, auto_nb=True)
    assert len(set(got)) == 1 and got[0] > 100
    got = job(functools.partial(upcjobs.release_hazard, cache=cache), topo, auto_nb=True,
              net_latency_us=20000)
    assert got[2] == list(range(1, 9))


# -- the shared heap gives space back -------------------------------------------------------
@pytest.mark.parametrize("topo", [dict(n=2, threads_per_proc=2), dict(n=3, nodes=2)],
                         ids=["threads", "2nodes"])
@RUNTIMES
def test_heap_gives_space_back_between_phases(topo, runtime):
    # 5/8 of the segment, symmetric then local then symmetric: each phase fits only if the
    # one before gave its space back (freeing the symmetric heap's top lowers every thread's
    # floor; freeing a local block lets the symmetric heap grow again)
    got = job(upcjobs2.heap_phases, topo, runtime)
    for out in got:
        assert out[:4] == ["all_alloc 0: no error", "alloc 0: no error",
                           "all_alloc 1: no error", "alloc 1: no error"], out
        assert out[4] == "alloc after array: no error", out
        assert out[5].startswith("alloc beside global_alloc: MemoryError: upc_alloc: cannot "
                                 "allocate"), out
        assert out[6] == "alloc after global_alloc: no error", out
        assert out[7].startswith("all_alloc beside alloc: MemoryError: upc_all_alloc: the "
                                 "shared heap cannot grow"), out
        assert f"thread {topo['n'] - 1}'s local heap" in out[7], out
        assert out[8].startswith("free again: ValueError: upc_free: offset 0 in the shared "
                                 "heap was already freed"), out


# -- element reads are values ---------------------------------------------------------------
_STRUCT_TOPOS = [pytest.param(dict(n=2), False, id="node"),
                 pytest.param(dict(n=2, threads_per_proc=2), False, id="threads"),
                 pytest.param(dict(n=2, nodes=2), False, id="2nodes-nocache"),
                 pytest.param(dict(n=2, nodes=2), True, id="2nodes-cache")]


@pytest.mark.parametrize(("topo", "cache", "runtime"), [
    *(pytest.param(*p.values, "amnet", id=p.id) for p in _STRUCT_TOPOS),
    *(pytest.param(*p.values, "shmem", id=f"{p.id}-shmem") for p in _STRUCT_TOPOS
      if not p.values[1])])  # the cache runs on amnet only
def test_structured_element_reads_are_snapshots(topo, cache, runtime):
    # numpy gives a structured element as a view of its array's memory; a shared array's
    # element read is a copy on every route (UPC's s = X[i]): it keeps what it read when the
    # owner writes later, and a second read does not overwrite the first
    for me, out in enumerate(job(functools.partial(upcjobs2.struct_reads, cache=cache), topo,
                                 runtime)):
        want = out.pop("want")
        # records are written from tuples too, as numpy takes them
        assert out.pop("tuple") == (me, -1.5)
        assert out.pop("tuples") == [(7, 7.5), (8, 8.5)]
        assert out.pop("bad tuple").startswith("ValueError: shared array 8 of [('k', '<i4'), "
                                               "('v', '<f8')] (block size 1)")
        assert out.pop("subarray") == (
            "TypeError: upc.shared_array(): dtype ('<f8', (3,)) is a sub-array type; name the "
            "field to make it one element, e.g. [('v', '<f8', (3,))], or add the dimension to "
            "the shape")
        assert out.pop("named") == (np.arange(3.0) + (me + 1) % topo["n"]).tolist()
        assert out == want


@pytest.mark.parametrize(("topo", "cache", "runtime"), [
    *(pytest.param(*p.values, "amnet", id=p.id) for p in _STRUCT_TOPOS),
    *(pytest.param(*p.values, "shmem", id=f"{p.id}-shmem") for p in _STRUCT_TOPOS
      if not p.values[1])])
def test_structured_element_reads_return_the_bytes_stored(topo, cache, runtime):
    # UPC copies bytes: a read returns the element's bytes, its padding as stored (numpy's
    # copy of a structured value copies field by field and leaves the padding unset)
    for out in job(functools.partial(upcjobs2.struct_bytes, cache=cache), topo, runtime):
        want = out.pop("want")
        assert out.pop("strided") == want[1::2] + want[0::2]
        assert out == {r: want for r in ("relaxed", "strict", "nd", "nd-strict", "slice",
                                         "index", "nd-slice")}


# -- forall over an n-D array ---------------------------------------------------------------
def _row_owner(shape, b, threads, i):
    """Model: the thread of A[i][0...] in shared [b] T A[shape], from its flat index."""
    flat = i * int(np.prod(shape[1:]))
    if b is None:
        b = -(-int(np.prod(shape)) // threads)
    return 0 if b == 0 else flat // b % threads


@pytest.mark.parametrize("topo", [dict(n=3), dict(n=4, nodes=2)], ids=["node", "2nodes"])
@RUNTIMES
def test_forall_on_an_nd_array_gives_row_i_to_the_owner_of_its_first_element(topo, runtime):
    got = job(upcjobs2.forall_rows, topo, runtime)
    T = topo["n"]
    for me, out in enumerate(got):
        for k, (shape, b) in enumerate(upcjobs2.FORALL_CASES):
            want = [i for i in range(shape[0]) if _row_owner(shape, b, T, i) == me]
            assert out[2 * k] == want, (me, shape, b)
            assert out[2 * k + 1] == [i for i in range(shape[0] - 1, -1, -2) if i in want]
        assert out[-1] == ("IndexError: upc.forall(): affinity shared array (5, 7) of int32 "
                           "(block size 3) at offset " + out[-1].split("at offset ")[1])
        assert out[-1].endswith(": row 5 out of range for 5 rows"), out[-1]
    # every row is run by exactly one thread
    for k, (shape, _) in enumerate(upcjobs2.FORALL_CASES):
        assert sorted(i for out in got for i in out[2 * k]) == list(range(shape[0]))


# -- atomic domains and the types they are used on ------------------------------------------
@pytest.mark.parametrize("topo", [dict(n=2), dict(n=2, nodes=2)], ids=["node", "2nodes"])
@RUNTIMES
def test_atomic_domain_of_another_type_is_refused(topo, runtime):
    for out in job(upcjobs2.atomic_types, topo, runtime):
        assert out["i8 on f8"].startswith("TypeError: upc atomic get: this domain's type is "
                                          "int64, but the pointer points into shared array "), out
        assert out["i8 on f8"].endswith(", of float64: use a domain of float64 (atomics must "
                                        "be used on their own type)"), out
        assert out["i8 add on f8"].startswith("TypeError: upc atomic add: this domain's type "
                                              "is int64") and "float64" in out["i8 add on f8"]
        assert out["i4 on i8"].startswith("TypeError: upc atomic add: this domain's type is "
                                          "int32") and ", of int64" in out["i4 on i8"], out
        assert out["f8 on i8"].startswith("TypeError: upc atomic add: this domain's type is "
                                          "float64") and ", of int64" in out["f8 on i8"], out
        assert out["i4 on 8-byte elements"] == (
            "TypeError: upc atomic get: this domain's type is int32 (4 bytes), but the "
            "pointer points to elements of 8 bytes"), out
        assert (out["f8 after"], out["i8 after"]) == (2.5, 40), out  # nothing moved
        assert (out["f8 on f8"], out["i8 on i8"], out["i8 on raw"]) == (2.5, 40, 0), out
        assert (out["f8 end"], out["i8 end"], out["raw end"]) == (3.5, 42, 3), out
        assert out["raw misaligned"].startswith("AtomicError: atomic offset"), out


# -- local_indices: the global indices of X.local -------------------------------------------
@pytest.mark.parametrize("topo", [dict(n=3), dict(n=4, nodes=2, threads_per_proc=2)],
                         ids=["node", "2nodes-T2"])
@RUNTIMES
def test_local_indices_follow_the_layout_in_local_order(topo, runtime):
    got = job(upcjobs2.local_indices, topo, runtime)
    T = topo["n"]
    for me, out in enumerate(got):
        for (shape, b), idx in zip(upcjobs2.LOCAL_CASES, out, strict=True):
            n = int(np.prod(shape))
            bb = -(-n // T) if b is None else b
            mine = [i for i in range(n) if (0 if bb == 0 else i // bb % T) == me]  # model
            if isinstance(shape, int):
                assert idx == mine, (me, shape, b)
            else:
                want = np.unravel_index(np.array(mine, dtype=np.int64), shape)
                assert idx == [d.tolist() for d in want], (me, shape, b)


# -- split-phase and named barriers; the runtime option --------------------------------------
@pytest.mark.parametrize("topo", [dict(n=3), dict(n=4, nodes=2, threads_per_proc=2)],
                         ids=["node", "2nodes-T2"])
@RUNTIMES
def test_named_barriers_match_and_a_mismatch_fails_every_thread(topo, runtime):
    for out in job(upcjobs2.barriers, topo, runtime):
        assert out[0].startswith("BarrierMismatch: "), out
        assert out[1] == "no error", out
        assert out[2].startswith("BarrierStateError: "), out
        assert out[3].startswith("BarrierStateError: "), out


def _runtime_errors(ep) -> list[str]:
    import upc_rt as upc

    out = [upcjobs2._err(lambda: upc.init(runtime="gasnet")),
           upcjobs2._err(lambda: upc.init(runtime="shmem", cache=True))]
    upc.init(runtime="shmem")
    return out


def test_runtime_option_is_checked():
    got = amnet.run(_runtime_errors, n=2, segment_size=SEGMENT, timeout=60)
    for out in got:
        assert out[0].startswith("ConfigError: upc.init(runtime='gasnet'): the runtime is "
                                 "'amnet' or 'shmem'"), out
        assert out[1].startswith("ConfigError: upc.init(): runtime 'shmem' cannot run cache"), out
    with pytest.raises(amnet.ConfigError, match=r"upc_runtime.*amnet or shmem"):
        amnet.run(_runtime_errors, n=1, upc_runtime="gasnet")
