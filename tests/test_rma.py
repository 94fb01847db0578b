"""The extended API in real jobs: put/get (blocking, NB, NBI), access regions, fence, atomics,
rpc, and bad input (docs/design.md §5).

Each test runs one job per topology (4 ranks over 2 simulated nodes, one rank per process or
two rank-threads per process); the checks live in ``tests/data/rmajobs.py`` and raise
AssertionError on the rank that saw the problem. The jobs return what they exercised, so a
check skipped by mistake fails here too.
"""

from __future__ import annotations

import functools

import pytest
import rmajobs

import amnet

TOPOLOGIES = [
    pytest.param(dict(n=4, nodes=2), id="N4-2nodes"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="N4-2nodes-T2"),
    # the shared-memory network (docs/design.md §6): each backing, PSHM off, T = 1, 2, 4
    # with processes sharing a node, the smallest queue depth, forced thread safety
    pytest.param(dict(n=4, nodes=1, pshm_backing="sysv"), id="N4-1node-sysv"),
    pytest.param(dict(n=4, nodes=2, pshm_backing="file"), id="N4-2nodes-file"),
    pytest.param(dict(n=4, nodes=2, pshm=False), id="N4-2nodes-nopshm"),
    pytest.param(dict(n=4, nodes=1, pshm=False), id="N4-1node-nopshm"),
    pytest.param(dict(n=8, nodes=1, threads_per_proc=4), id="N8-1node-T4"),
    pytest.param(dict(n=4, nodes=1, threads_per_proc=2, pshm_network_depth=2),
                 id="N4-1node-T2-depth2"),
    pytest.param(dict(n=4, nodes=1, pshm_network_depth=2), id="N4-1node-depth2"),
    pytest.param(dict(n=2, nodes=1, thread_safe="1"), id="N2-1node-ts"),
    pytest.param(dict(n=4, nodes=2, conduit="tcp"), id="N4-2nodes-tcp"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2, conduit="mpi"), id="N4-2nodes-T2-mpi"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2, conduit="tcp", pshm=False),
                 id="N4-2nodes-T2-tcp-nopshm"),
]
SEGMENT = 4 << 20


def job(fn, topo):
    return amnet.run(fn, **topo, segment_size=SEGMENT, timeout=120)


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_put_get_sizes_offsets_variants(marked, topo):
    got = job(rmajobs.put_get, topo)
    n = len(got)
    for rank_seen in got:
        seen = {tuple(x) for x in rank_seen}
        # every put and every get variant ran with every size, on every rank (with 2 ranks,
        # the 3 offsets x 2 rounds of rmajobs.put_get pick 6 of the 7 put variants)
        puts = {rmajobs.PUTS[(oi * n + k) % len(rmajobs.PUTS)].__name__
                for oi in range(3) for k in range(n)}
        assert n < 4 or puts == {f.__name__ for f in rmajobs.PUTS}
        for si, size in enumerate(rmajobs.SIZES):
            gets = {rmajobs.GETS[(oi * n + k + si) % len(rmajobs.GETS)].__name__
                    for oi in range(3) for k in range(n)}
            assert n < 4 or gets == {f.__name__ for f in rmajobs.GETS}
            assert {p for p, _, s in seen if s == size} == puts
            assert {g for _, g, s in seen if s == size} == gets


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_handles_nbi_regions_and_fence(marked, topo, tmp_path):
    got = job(functools.partial(rmajobs.completion, park_dir=str(tmp_path)), topo)
    if topo.get("nodes", 1) == 1 and topo.get("pshm", True):
        # the last rank shares memory with rank 0: everything completes on return
        assert got[0] == [
            "region done at exit (direct)",
            "nbi put and get done on return (direct)",
            "nb handles done on return (direct)",
            "fence found nothing to wait for (direct)",
        ]
        assert got[1:] == [[]] * (len(got) - 1)
        return
    assert got[0] == [
        "region pending, not counted by wait_nbi",
        "nbi get pending, puts=True/gets=False done",
        "nbi put pending",
        "wait_any picked the only completable handle",
        "fence completed region, nbi and nb operations",
    ]
    assert got[1:] == [[]] * (len(got) - 1)


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_atomics_contention_and_every_op(marked, topo):
    got = job(rmajobs.atomics, topo)
    ops = set(rmajobs.steps("i8")[i][0] for i in range(len(rmajobs.steps("i8"))))
    assert ops == {"get", "set", "swap", "cas", "fadd", "fsub", "fand", "for", "fxor",
                   "fmin", "fmax"}
    want = {(d, op) for d in ("i4", "i8", "u4", "u8") for op in ops}
    want |= {(d, op) for d in ("f4", "f8") for op in ops - {"fand", "for", "fxor"}}
    for rank_done in got:
        assert {tuple(x) for x in rank_done} == want


def test_atomic_reference_wraps_like_numpy():
    """The reference the atomics are checked against is itself numpy's arithmetic."""
    import numpy as np

    with np.errstate(over="ignore"):
        for dtype in ("i4", "i8", "u4", "u8"):
            info = np.iinfo(dtype)
            for a, b in ((int(info.max), 1), (int(info.min), -1 if dtype[0] == "i" else 0),
                         (int(info.max), int(info.max))):
                x = np.array([a], dtype=dtype)
                assert rmajobs.reference("fadd", dtype, a, b, None) == \
                    int((x + np.array([b], dtype=dtype))[0])
                assert rmajobs.reference("fsub", dtype, a, b, None) == \
                    int((x - np.array([b], dtype=dtype))[0])
    assert rmajobs.reference("fadd", "f4", 16777216.0, 1.0, None) == 16777216.0
    assert rmajobs.reference("fadd", "f8", 16777216.0, 1.0, None) == 16777217.0


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_rpc(marked, topo):
    got = job(rmajobs.rpc, topo)
    assert got == [list(range(len(got)))] * len(got)


# Bad input is refused on the caller's side, before anything is sent: what differs between
# topologies is the path that checks it (the C hot path with one rank-thread, the engine's
# with several; in-line, shared-memory and conduit destinations), not the backing or the
# queue depth, so a subset covers every path (CI time).
BAD_INPUT_TOPOLOGIES = [t for t in TOPOLOGIES if t.id in (
    "N4-2nodes", "N4-2nodes-T2", "N4-1node-nopshm", "N8-1node-T4", "N4-2nodes-T2-mpi")]


@pytest.mark.parametrize("topo", BAD_INPUT_TOPOLOGIES)
def test_bad_input_raises_before_sending(marked, topo):
    counts = job(rmajobs.bad_input, topo)
    assert len(set(counts)) == 1 and counts[0] > len(counts) * 100, counts
