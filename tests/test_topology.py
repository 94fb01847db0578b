"""Job topology: shapes, rank numbering and every bad shape (docs/design.md §2)."""

import itertools

import pytest

from amnet import RankError, Topology, TopologyError
from amnet._topology import format_ranks


def shapes():
    for n in range(1, 13):
        for t in (d for d in range(1, n + 1) if n % d == 0):
            procs = n // t
            for p in range(1, procs + 1):
                yield n, p, t


@pytest.mark.parametrize("n,p,t", list(shapes()))
def test_numbering_is_node_major_then_process_then_thread(n, p, t):
    topo = Topology.make(n, procs_per_node=p, threads_per_proc=t)
    procs = n // t
    assert topo.procs == procs
    assert topo.nodes == -(-procs // p)
    seen = []
    for node in range(topo.nodes):
        local_procs = topo.procs_of_node(node)
        assert 1 <= len(local_procs) <= p
        for lp in range(len(local_procs)):
            for th in range(t):
                rank = topo.rank_of(node, lp, th)
                assert rank == (node * p + lp) * t + th
                assert topo.node_of(rank) == node
                assert topo.proc_of(rank) == node * p + lp
                assert topo.thread_of(rank) == th
                assert rank in topo.ranks_of_node(node)
                assert rank in topo.ranks_of_proc(topo.proc_of(rank))
                seen.append(rank)
    assert seen == list(range(n))  # contiguous, node-major


def test_design_examples():
    a = Topology.make(4, procs_per_node=2, threads_per_proc=2)
    assert (a.procs, a.nodes) == (2, 1)
    b = Topology.make(8, procs_per_node=2, threads_per_proc=2)
    assert (b.procs, b.nodes) == (4, 2)
    assert list(b.ranks_of_node(1)) == [4, 5, 6, 7]
    assert list(b.ranks_of_proc(3)) == [6, 7]


def test_defaults_one_node_one_thread():
    topo = Topology.make(5)
    assert (topo.threads_per_proc, topo.procs, topo.nodes, topo.procs_per_node) == (1, 5, 1, 5)


@pytest.mark.parametrize("n,k", [(n, k) for n in range(1, 13) for k in range(1, n + 1)])
def test_nodes_instead_of_procs_per_node(n, k):
    p = -(-n // k)
    if -(-n // p) != k:
        with pytest.raises(TopologyError, match=f"--nodes {k} does not fit"):
            Topology.make(n, nodes=k)
        return
    topo = Topology.make(n, nodes=k)
    assert topo.nodes == k and topo.procs_per_node == p
    assert Topology.make(n, procs_per_node=p, nodes=k) == topo


def test_last_node_may_be_partial():
    topo = Topology.make(6, procs_per_node=4)
    assert topo.nodes == 2
    assert list(topo.procs_of_node(1)) == [4, 5]
    assert list(topo.ranks_of_node(1)) == [4, 5]


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=0), r"-n\) must be at least 1, got 0"),
    (dict(n=-3), r"at least 1, got -3"),
    (dict(n=2.5), "must be a positive integer"),
    (dict(n=True), "must be a positive integer"),
    (dict(n=3, threads_per_proc=2), "-n 3 is not a multiple of --threads-per-proc 2"),
    (dict(n=4, threads_per_proc=0), r"threads per process .* at least 1"),
    (dict(n=4, procs_per_node=0), r"processes per node .* at least 1"),
    (dict(n=4, nodes=0), r"nodes .* at least 1"),
    (dict(n=4, nodes=5), "--nodes 5 is more than the 4 process"),
    (dict(n=4, threads_per_proc=2, nodes=3), "--nodes 3 is more than the 2 process"),
    (dict(n=5, nodes=4), "--nodes 4 does not fit 5 processes"),
    (dict(n=4, procs_per_node=1, nodes=2), "--procs-per-node 1 and --nodes 2 disagree"),
])
def test_bad_shapes_are_clear_errors(kwargs, match):
    with pytest.raises(TopologyError, match=match):
        Topology.make(**kwargs)


def test_check_rank():
    topo = Topology.make(4)
    assert topo.check_rank(3) == 3
    for bad in (-1, 4, 1.0, "0", None, False):
        with pytest.raises(RankError):
            topo.check_rank(bad)


def test_wire_round_trip_and_format():
    for n, p, t in itertools.islice(shapes(), 0, None, 7):
        topo = Topology.make(n, p, t)
        assert Topology.from_wire(topo.to_wire()) == topo
    assert format_ranks([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"
    assert format_ranks([3]) == "3"


def test_local_process_index_and_description():
    topo = Topology.make(8, procs_per_node=2, threads_per_proc=2)
    assert [topo.local_proc_of(p) for p in range(topo.procs)] == [0, 1, 0, 1]
    assert all(topo.rank_of(topo.node_of_proc(p), topo.local_proc_of(p), 0) ==
               topo.ranks_of_proc(p).start for p in range(topo.procs))
    assert topo.describe() == ("8 rank(s) = 4 process(es) x 2 thread(s), 2 process(es) per "
                               "node, 2 node(s)")
