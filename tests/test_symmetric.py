"""Symmetric addressing (ep.segment_offset, put_symmetric, get_symmetric,
atomic_symmetric) and node-local
atomics run in C (docs/am-guide.md sections 7 and 9), in real jobs."""

from __future__ import annotations

import symjobs

import amnet


def test_atomics_in_c_match_the_owner_path():
    got = amnet.run(symjobs.atomics_c_vs_owner, n=4, nodes=2, timeout=60)
    assert got[0] and got[0] > 60  # every op and dtype compared


def test_atomics_in_c_match_the_owner_path_threads():
    got = amnet.run(symjobs.atomics_c_vs_owner, n=4, nodes=2, threads_per_proc=2,
                    timeout=60)
    assert got[0] and got[0] > 60


def test_atomic_symmetric_matches_atomic_by_offset():
    got = amnet.run(symjobs.atomics_symmetric, n=4, nodes=2, timeout=60)
    assert got[0] and got[0] > 60
    got = amnet.run(symjobs.atomics_symmetric, n=4, nodes=2, threads_per_proc=2, timeout=60)
    assert got[0] and got[0] > 60


def test_node_local_atomic_inside_a_handler():
    got = amnet.run(symjobs.handler_atomic, n=4, nodes=2, timeout=60)
    for olds, refused in got:
        assert olds == list(range(4))  # every rank's AM added one to my word, atomically
        assert refused == 4 * 3  # each handler's atomics on the 3 other ranks: refused


def test_symmetric_addressing():
    got = amnet.run(symjobs.symmetric, n=4, nodes=2, timeout=60)
    assert got == [[0, 1], [0, 1], [2, 3], [2, 3]]  # done for my node's ranks only
    got = amnet.run(symjobs.symmetric, n=2, threads_per_proc=2, timeout=60)
    assert got == [[0, 1], [0, 1]]
