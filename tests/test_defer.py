"""``ep.defer``: the way a handler forwards work to a third rank, or answers with a put (a
handler itself sends only its one reply); and a declared handler that cannot take its call is
refused at registration, not when the first AM arrives (issue 29, item 8)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import deferjobs
import pytest

import amnet

DATA = Path(__file__).parent / "data"
TOPOS = [
    pytest.param(dict(n=3), id="pshm"),
    pytest.param(dict(n=4, threads_per_proc=2), id="threads"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2, wait_mode="block"), id="2nodes-T2"),
]


@pytest.mark.parametrize("topo", TOPOS)
def test_a_handler_forwards_through_ep_defer(topo):
    res = amnet.run(deferjobs.forward_ring, **topo, segment_size="1M", timeout=120)
    n = topo["n"]
    for r, got in enumerate(res):
        hops = [k for k in got["seen"] if isinstance(k, int)]
        assert hops == [k for k in range(1, 3 * n + 1) if k % n == r], (r, got)
        # rank r asked with r + 1; its neighbour answered with a put of 10 * (r + 1)
        assert got["seen"][-1] == ("landed", 10 * (r + 1)), got
        assert got["value"] == 10 * (r + 1)
        assert got["later"] == ["ran"]
        assert got["errors"] == ["ep.defer() takes a callable, got str"]


def test_a_deferred_function_that_raises_ends_the_job():
    with pytest.raises(KeyError, match="a deferred function that fails") as info:
        amnet.run(deferjobs.deferred_raises, n=2, nodes=2, segment_size="1M", timeout=60)
    assert "(deferjobs.boom_later.<locals>.fail (deferred) on rank 1)" in \
        info.value.__notes__, info.value.__notes__


def test_a_declared_handler_that_cannot_take_its_call_is_refused_at_registration():
    res = amnet.run(deferjobs.bad_declaration, n=2, segment_size="1M", timeout=60)
    for got in res:
        assert got["error"] == (
            "handler deferjobs.bad_declaration.<locals>.tally(a, b) is declared short with "
            "nargs=2: it is called as fn(token, a1, a2) and cannot take that (a handler's "
            "first parameter is the token)"), got
        assert got["unchanged"] is True


@pytest.mark.parametrize(("category", "nargs", "params", "call"), [
    ("short", 1, "(k)", "fn(token, a1)"),
    ("short", None, "()", "fn(token, *args)"),
    ("medium", None, "(token)", "fn(token, payload, *args)"),
    ("medium", None, "(token, payload, a, *, b)", "fn(token, payload, *args)"),
    ("long", 2, "(token, payload, a)", "fn(token, payload, a1, a2)"),
])
def test_the_decorator_refuses_a_handler_that_cannot_take_its_call(category, nargs, params,
                                                                   call):
    ns: dict = {}
    exec(f"def h{params}:\n    pass\n", ns)
    with pytest.raises(TypeError, match=rf"is declared {category}.*: it is called as "
                                        rf"{re.escape(call)} and cannot take that"):
        amnet.handler(category, nargs)(ns["h"])


def test_the_decorator_accepts_what_can_take_the_call():
    def short(token, *args):
        pass

    def medium(token, payload, a=0, b=0):
        pass

    def rpc_fn():
        pass

    assert amnet.handler("short", 3)(short) is short
    assert amnet.handler("medium", 2)(medium) is medium
    assert amnet.handler("rpc")(rpc_fn) is rpc_fn  # an rpc function takes what callers send
    assert sys.modules["amnet"] is amnet


def test_a_declared_method_takes_self_first():
    class Counter:
        @amnet.handler("short", nargs=1)
        def bump(self, token, k):
            pass

    with pytest.raises(TypeError, match=r"Broken\.oops\(self, k\) is declared short with "
                                        r"nargs=1: it is called as fn\(self, token, a1\)"):
        class Broken:
            @amnet.handler("short", nargs=1)
            def oops(self, k):  # the token forgotten
                pass

    # registration sees the bound method, whose self is bound already
    from amnet.core._handlers import HandlerTable

    assert HandlerTable.names_of([Counter().bump]) == [
        "test_defer.test_a_declared_method_takes_self_first.<locals>.Counter.bump"]
