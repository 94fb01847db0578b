"""Jobs for tests/test_bench_hybrid.py: the hybrid suite's collectives part with a model that
is wrong for one collective, which the part must report instead of measuring."""

from __future__ import annotations

import functools

from amnet_bench import _hcolljob

REAL = _hcolljob.expect  # taken when a rank's process imports this module, before any patch


def _off(what, w, n, P, me, k):
    want = REAL(w, n, P, me, k)
    if w == what:
        want = want.copy()
        want[0] += 1
    return want


def wrong_model(ep, what: str) -> dict:
    """The collectives part (a tiny plan) with ``what``'s model off by one in its first
    element (every rank-thread of a process sets the same patch)."""
    _hcolljob.expect = functools.partial(_off, what)
    return _hcolljob.coll_part(ep, {"collectives": ["broadcast", what, "barrier"],
                                    "sizes": [8], "samples": 1, "calls": 2})
