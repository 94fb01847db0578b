"""amnet.coll in real jobs: every collective with every algorithm against numpy models, on
the world team, a split team (odd and even ranks, in reverse order) and each node's team,
with odd team sizes and T=1/2 threads per process, on 1, 2 and 3 nodes; chunked blocks and
segment offsets; calls in flight on two teams; mismatched calls and bad arguments. The
checks run inside the ranks (tests/data/colljobs.py)."""

from __future__ import annotations

import functools

import colljobs
import pytest
from conftest import assert_each_starts

import amnet
from amnet.coll import ALGORITHMS, parse_choice

TOPOLOGIES = [
    pytest.param(dict(n=3), id="n3-1node"),
    pytest.param(dict(n=5), id="n5-1node"),
    pytest.param(dict(n=4, threads_per_proc=2), id="n4-1node-T2"),
    pytest.param(dict(n=4, nodes=2), id="n4-2nodes"),
    pytest.param(dict(n=6, nodes=2, threads_per_proc=2), id="n6-2nodes-T2"),
    pytest.param(dict(n=5, nodes=3), id="n5-3nodes"),
]


def job(fn, topo, **kw):
    return amnet.run(fn, **topo, timeout=180, **kw)


@pytest.mark.parametrize("topo", TOPOLOGIES)
def test_every_collective_and_algorithm_matches_numpy(topo):
    got = job(colljobs.every, topo)
    calls = [g[0] for g in got]
    assert len(set(calls)) == 1 and calls[0] > 100  # everyone checked the same calls


def test_every_collective_with_the_strict_check():
    # every call's description to the first member and back, also on split teams whose
    # first member may still be making the team when the others' descriptions arrive
    got = job(colljobs.every, dict(n=4, nodes=2), coll_check="strict")
    calls = [g[0] for g in got]
    assert len(set(calls)) == 1 and calls[0] > 100


@pytest.mark.parametrize("topo", [dict(n=3), dict(n=4, nodes=2)], ids=["node", "2nodes"])
def test_large_blocks_land_straight_in_their_buffers(topo):
    # blocks over amnet.coll._msg.POST_MIN bytes: whichever of a message and its receive
    # comes first, the data ends where it belongs (every collective, every algorithm)
    got = job(functools.partial(colljobs.landing, n=3000), topo)
    assert len({g[0] for g in got}) == 1 and got[0][0] > 60


def test_blocks_larger_than_max_medium_and_segment_offsets():
    assert job(functools.partial(colljobs.big, n=5000), dict(n=3, nodes=2),
               max_medium=1024) == [True] * 3


@pytest.mark.parametrize("topo", [dict(n=4, nodes=2), dict(n=3, threads_per_proc=3)],
                         ids=["2nodes", "threads"])
def test_calls_in_flight_complete_in_any_order(topo):
    assert job(colljobs.nonblocking, topo) == [[r + 1] for r in range(topo["n"])]


def _named(out: list[str]) -> None:
    """Each case's failure names what differed (see colljobs._mismatches)."""
    assert "called gather_all(algorithm=" in out[0] or "called broadcast(" in out[0]
    assert "root=1" in out[1] and "root=0" in out[1]
    assert "nbytes=5" in out[2] and "nbytes=4" in out[2]
    assert "algorithm=hier" in out[3] and "algorithm=dissemination" in out[3]
    assert "root=1" in out[4] or "root=2" in out[4]
    assert all("the members of team world disagree about call #" in o for o in out)


def test_mismatched_calls_fail_every_member_in_the_call_when_strict():
    for out in job(colljobs.mismatch, dict(n=3, nodes=2), coll_check="strict"):
        _named(out)


@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=3, nodes=2), id="n3-2nodes"),
    pytest.param(dict(n=3), id="n3-1node-fast"),  # small calls on amnet.coll._fast's path
    pytest.param(dict(n=4, threads_per_proc=2), id="n4-1node-T2-fast"),
])
def test_mismatched_calls_fail_every_member_and_never_hang(topo):
    got = job(colljobs.mismatch_lazy, topo)
    for out in got:
        _named(out)
        assert all(o.count("disagree") == 1 for o in out), out  # once a case, not twice
    # the root that completed its broadcast at once learnt at the end of its next call
    assert any("had completed its part of that call" in o for out in got for o in out)


def test_bad_arguments_raise_before_anything_is_sent():
    got = job(colljobs.bad_input, dict(n=2, nodes=2))
    inside = "AMContextError: amnet.coll {} inside request handler"
    want = [inside.format("barrier"), inside.format("barrier"), inside.format("broadcast"),
            inside.format("barrier"), inside.format("barrier"),
            "ValueError: broadcast: nbytes must be at least 1, got 0",
            "ValueError: broadcast: nbytes must be at least 1, got -3",
            "ValueError: gather_all: dst holds 5 bytes, the call needs 4",
            "ValueError: permute: perm [0, 0] is not a permutation of 0..1",
            "ValueError: reduce_all: unknown reduction op 'SUM'",
            "TypeError: reduce_all: XOR needs an integer or bool dtype, not float64",
            "ValueError: broadcast: no algorithm 'smoke-signals'",
            "ValueError: broadcast: root 2 is not a member index of team world (0..1)",
            "ValueError: broadcast: dst must be C-contiguous",
            "ValueError: broadcast: dst at segment offset 1099511627776 for 8 bytes leaves",
            "ValueError: reduce_all: dst must be a numpy array of float64 x 4 like src",
            "ValueError: reduce_all: FUNC needs func"]
    assert_each_starts(got, want)


def test_algorithm_choice_parses_and_refuses():
    assert parse_choice("broadcast=tree, ring") == {"broadcast": "tree", "gather_all": "ring",
                                                     "exchange": "ring"}
    assert parse_choice("") == {}
    for bad, msg in (("broadcast=ring", "broadcast has no algorithm 'ring'"),
                     ("bcast=tree", "unknown collective 'bcast'"),
                     ("quantum", "no collective has an algorithm 'quantum'")):
        with pytest.raises(ValueError, match=msg):
            parse_choice(bad)


def test_amnet_coll_algorithm_selects_and_a_bad_one_is_refused_at_start():
    got = job(colljobs.picked, dict(n=2), coll_algorithm="broadcast=pull,ring")
    assert got == [["pull", "ring", "ring"]] * 2  # a bare name: every collective having it
    with pytest.raises(amnet.ConfigError, match="coll_algorithm"):
        job(colljobs.picked, dict(n=2), coll_algorithm="broadcast = tree; ring")


def test_every_collective_has_its_algorithms():
    assert set(ALGORITHMS) == {"broadcast", "scatter", "gather", "gather_all", "exchange",
                               "permute", "reduce", "reduce_all", "prefix_reduce", "barrier"}
    for what in ("broadcast", "scatter", "gather", "gather_all", "exchange", "permute"):
        assert {"memcpy_push", "push", "pull", "naive_push", "naive_pull"} <= set(
            ALGORITHMS[what])


@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=2), id="n2-1node"),
    pytest.param(dict(n=3), id="n3-1node"),
    pytest.param(dict(n=4, threads_per_proc=2), id="n4-1node-T2"),
    pytest.param(dict(n=4, nodes=2), id="n4-2nodes"),
])
def test_small_calls_on_the_fast_and_the_general_path_meet(topo):
    """Small calls whose default is ``direct``: members on amnet.coll._fast's path and
    members on the general one (a non-blocking form, bytes at the root, another call in
    flight) take part in the same calls, and every result matches numpy."""
    got = job(colljobs.small_defaults, topo)
    assert len(set(got)) == 1 and got[0] >= 12 * 3 * 7


@pytest.mark.parametrize("check,topo", [
    ("strict", dict(n=3, nodes=2)), ("0.25", dict(n=3, nodes=2)),
    ("0.25", dict(n=3)),  # one node: the others' small calls on amnet.coll._fast's path
])
def test_one_member_wrong_fails_everyone_and_the_team_goes_on(check, topo):
    got = job(colljobs.one_member_wrong, topo, coll_check=check)
    for rank, out in enumerate(got):
        if rank == 1:
            assert out[0].startswith("ValueError: gather_all: dst holds 13 bytes")
        else:
            assert out[0].startswith("CollectiveMismatch:") and "(invalid: ValueError: " \
                "gather_all: dst holds 13 bytes" in out[0], out[0]
        if rank == 0:
            assert out[1] == "ValueError: rank 0 refuses to combine"
        else:
            assert out[1].startswith("AMNetError: amnet.coll reduce_all: member 0 (rank 0) "
                                     "of team world failed in call #"), out[1]
        lazily = ["no error", "next: CollectiveMismatch", "3"]
        if check == "strict":
            assert out[2:] == ["handle: CollectiveMismatch", "3"]
        else:  # a member that completed its part (a root, in its view) before the
            # mismatch was found learns at the end of its next call
            assert out[2:] in (["handle: CollectiveMismatch", "3"], lazily), out


@pytest.mark.parametrize("topo", [
    pytest.param(dict(n=4), id="n4-1node"),
    pytest.param(dict(n=3), id="n3-1node"),
    pytest.param(dict(n=4, nodes=2), id="n4-2nodes"),
    pytest.param(dict(n=4, threads_per_proc=2), id="n4-1node-T2"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="n4-2nodes-T2"),
])
def test_a_collective_right_after_a_split_never_hangs(topo):
    """Split the world, then call at once on the new team, every collective with every
    algorithm in turn, twice: a member that finished the split first sends its first block
    (with an acknowledgement, for memcpy_push) to a member still finishing the split. That
    member once kept the block but refused the acknowledgement, and the sender waited for
    ever (issue 29, item 11)."""
    rounds = 2 * sum(len(a) for a in ALGORITHMS.values())
    got = job(functools.partial(colljobs.split_then_call, rounds=rounds), topo)
    assert got == [rounds] * topo["n"]
