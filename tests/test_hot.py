"""The AM hot path in C (amnet/core/_hot*.c): ``ep.request_*``, ``ep.poll``, ``ep.wait_until``,
``ep.put``, ``ep.get``, the ``amnet.Token`` type, the drain of the shared-memory queues and
in-line AMs between rank-threads. Whatever the fast path does not handle falls back to the
Python engine, and the errors must be the same either way.

Each check runs in the three routes an AM can take between two ranks:

- ``pshm``: two processes of one node, through the shared-memory queues (C send and drain);
- ``inline``: two rank-threads of one process, the handler run in-line by the sender;
- ``conduit``: two processes with PSHM off, through the conduit (user Short and Medium AMs
  from C straight to the conduit's ``send``, and run in C from what it brings; the rest
  through the Python engine).

The jobs live in ``tests/data/hotjobs.py`` (they are rank-count agnostic: every rank sends to
its right neighbour). test_am.py and test_pshm.py cover the AM API at large; this file looks
at the entry points the C code took over, route by route. Every job must leave nothing in
/dev/shm, and the module no process behind.
"""

from __future__ import annotations

import functools

import hotjobs
import pytest
from conftest import new_shm_objects, shm_objects

import amnet

ROUTES = {
    "pshm": dict(n=2),
    "inline": dict(n=2, threads_per_proc=2),
    "conduit": dict(n=2, pshm=False),
    # the mpi conduit: its envelopes are sent and taken in C (amnet/conduits/_mpiring_mpi.c)
    "mpi": dict(n=2, nodes=2, conduit="mpi"),
}
# wait_until has a C spin loop (one lock-free rank-thread) and hands over to the Python loop
# otherwise (block mode, several rank-threads, after spinning): each wait mode, each route
WAIT_VARIANTS = {
    **ROUTES,
    "pshm-spin": dict(n=2, wait_mode="spin"),
    "pshm-block": dict(n=2, wait_mode="block"),
    "inline-spin": dict(n=2, threads_per_proc=2, wait_mode="spin"),
    "conduit-block": dict(n=2, pshm=False, wait_mode="block"),
}
SEG = 1 << 20
CTX = "handlers run in a restricted context"


def run_job(fn, shape: dict, **options):
    """Run one job; nothing of amnet may stay in /dev/shm after it."""
    before = shm_objects()
    try:
        return amnet.run(fn, **shape, segment_size=SEG, timeout=60, **options)
    finally:
        assert new_shm_objects(before) == set()  # nothing of amnet left in /dev/shm


@pytest.fixture(scope="module")
def results(mark):
    """``results(job_name, variant)``: what every rank of that job returned (run once)."""
    cache: dict = {}

    def get(name: str, variant: str):
        key = (name, variant)
        if key not in cache:
            cache[key] = run_job(getattr(hotjobs, name), WAIT_VARIANTS[variant])
        return cache[key]

    return get


route_param = pytest.mark.parametrize("route", list(ROUTES))


# -- the Token type --------------------------------------------------------------------------
def test_token_cannot_be_made_or_subclassed():
    with pytest.raises(TypeError):
        amnet.Token()
    with pytest.raises(TypeError):
        amnet.Token.__new__(amnet.Token)
    with pytest.raises(TypeError):
        type("MyToken", (amnet.Token,), {})
    assert amnet.Token.__name__ == "Token" and amnet.Token.__module__ == "amnet"


@route_param
def test_token_attributes_and_repr(results, route):
    got = results("tokens", route)
    n = len(got)
    for r, g in enumerate(got):
        left, right = (r - 1) % n, (r + 1) % n
        req = [rec for kind, rec in g["log"] if kind == "req"]
        rep = [rec for kind, rec in g["log"] if kind == "rep"]
        assert len(req) == 1 and len(rep) == 1, g["log"]
        want_req = {"type": "Token", "is_token": True, "rank": r, "source": left,
                    "is_request": True, "handler": "hotjobs.h_tok_req",
                    "repr": f"<amnet.Token request hotjobs.h_tok_req from rank {left}>",
                    "endpoint": r}
        want_rep = {"type": "Token", "is_token": True, "rank": r, "source": right,
                    "is_request": False, "handler": "hotjobs.h_tok_rep",
                    "repr": f"<amnet.Token reply hotjobs.h_tok_rep from rank {right}>",
                    "endpoint": r}
        assert req[0]["info"] == want_req
        assert req[0]["info after reply"] == want_req
        assert req[0]["tag"] == 100 + left
        assert req[0]["endpoint is ep"] is True  # token.endpoint: the target rank's Endpoint
        assert rep[0]["info"] == want_rep
        assert rep[0]["tag"] == 100 + r
        # the attributes stay readable after the handler returned
        assert g["kept_info"] == want_req and g["kept_rep_info"] == want_rep
        assert req[0]["set rank"][0] == "AttributeError"
        assert g["Token()"][0] == "TypeError"


# A handler reaches its rank through token.endpoint: an in-line AM between rank-threads runs
# on the target's globals, possibly before that rank-thread's ``ep = amnet.init()`` returned.
# sys.setswitchinterval(1.0) makes that the rule here: rank-thread 0 keeps the interpreter
# from its init until it blocks, so its AMs run while its sibling is still in init.
RACE = """
import sys
sys.setswitchinterval(1.0)
import amnet

early = []  # per rank-thread (its own globals): handlers that ran before `ep` was set here


def bump(token, i):
    e = token.endpoint
    early.append("ep" not in globals())
    e.segment[:8].view("i8")[0] += 1
    assert e.rank == token.rank


ep = amnet.init(handlers=[bump])
if ep.thread == 0:
    for i in range(50):
        ep.request_short(ep.rank + 1, bump, i)
ep.barrier()
if ep.thread == 1:
    print(f"rank {ep.rank} ran {int(ep.segment[:8].view('i8')[0])} early {sum(early)}")
"""


def test_token_endpoint_works_before_the_targets_init_returned(runner):
    s = runner.script("race.py", RACE)
    early = 0
    for _ in range(6):
        out = runner("-n", "4", "--procs-per-node", "2", "--threads-per-proc", "2", s)
        assert out.returncode == 0, out.stderr
        lines = sorted(out.stdout.splitlines())
        assert [ln.split(" early ")[0] for ln in lines] == ["rank 1 ran 50", "rank 3 ran 50"]
        early += sum(int(ln.split(" early ")[1]) for ln in lines)
    # the race happened (handlers ran where the script's global ep did not exist yet), and
    # every one of those handlers reached its endpoint all the same
    assert early > 0


@route_param
def test_token_rules(results, route):
    """One reply, from the handler's thread, while it runs, and none from a reply handler."""
    got = results("tokens", route)
    for g in got:
        req = next(rec for kind, rec in g["log"] if kind == "req")
        rep = next(rec for kind, rec in g["log"] if kind == "rep")
        assert req["other thread"] == (
            "AMContextError", "token.reply_short() from another thread than the one running "
            "handler hotjobs.h_tok_req")
        assert req["reply"] == ("no error", "None")
        for what in ("reply_short", "reply_medium", "reply_long"):
            assert req[f"second {what}"] == (
                "AMContextError", f"token.{what}(): request handler hotjobs.h_tok_req already "
                "replied; a request handler replies at most once")
            assert rep[what] == ("AMContextError", f"token.{what}() in reply handler "
                                 "hotjobs.h_tok_rep: a reply handler sends nothing")
        # a token kept in a global past its handler's return
        for what in ("reply_short", "reply_medium", "reply_long"):
            assert g[f"kept_{what}"] == (
                "AMContextError", f"token.{what}() after handler hotjobs.h_tok_req returned; "
                "a reply must be sent from inside the request handler")
        assert g["kept_bad_args"][0] == "AMContextError"  # the context is checked first
        assert g["kept_rep_reply"][0] == "AMContextError"
        assert "after handler hotjobs.h_tok_rep returned" in g["kept_rep_reply"][1]


@route_param
def test_handler_context_refuses_progress_and_sends(results, route):
    got = results("tokens", route)
    for g in got:
        req = next(rec for kind, rec in g["log"] if kind == "req")
        rep = next(rec for kind, rec in g["log"] if kind == "rep")
        for probe, what in (("ep.poll", "ep.poll()"), ("ep.wait_until", "ep.wait_until()"),
                            ("ep.wait_until timeout", "ep.wait_until()"),
                            ("ep.put", "ep.put()"), ("ep.put own", "ep.put()"),
                            ("ep.get", "ep.get()"), ("ep.get out", "ep.get()")):
            kind, msg = req[probe]
            assert kind == "AMContextError", (probe, req[probe])
            assert msg.startswith(f"{what} inside request handler hotjobs.h_tok_req: {CTX}")
        for probe in ("ep.request_short", "ep.request_medium"):
            # the message names the way to forward, not only the reply (issue 29, item 8)
            assert req[probe] == ("AMContextError", f"{probe}() inside request handler "
                                  "hotjobs.h_tok_req; a request handler sends only its one "
                                  "reply to its source (token.reply_*()); to forward to "
                                  "another rank, defer the send to after the handler: "
                                  "ep.defer(fn, ...)")
        for probe, what in (("ep.poll", "ep.poll()"), ("ep.wait_until", "ep.wait_until()")):
            kind, msg = rep[probe]
            assert kind == "AMContextError"
            assert msg.startswith(f"{what} inside reply handler hotjobs.h_tok_rep: {CTX}")
        assert rep["ep.request_short"] == (
            "AMContextError", "ep.request_short() inside reply handler hotjobs.h_tok_rep: a "
            "reply handler sends nothing; to send afterwards, ep.defer(fn, ...)")


@route_param
def test_refused_replies_and_sends_delivered_nothing(results, route):
    """Per rank: one request and one reply ran, plus the flush (a ping from every rank and
    the pongs of mine); nothing the refused calls or the kept tokens would have sent."""
    got = results("tokens", route)
    n = len(got)
    for g in got:
        assert g["counts"] == {"tok_req": 1, "tok_rep": 1, "ping": n, "pong": n}


# -- bad input -------------------------------------------------------------------------------
PAYLOAD_TYPE = "must be bytes-like (bytes, bytearray, memoryview or a numpy array), got"


def expected_bad_requests(n: int, mm: int) -> dict[str, tuple[str, str]]:
    """What each bad request must raise: (type name, text in the message)."""
    rank = "a rank must be an int, got"
    want = {
        "dest -1": ("RankError", f"rank -1 is out of range: this job has ranks 0..{n - 1}"),
        "dest size": ("RankError", f"rank {n} is out of range"),
        "dest 2**70": ("RankError", f"rank {1 << 70} is out of range"),
        "dest True": ("RankError", f"{rank} bool"),
        "dest False": ("RankError", f"{rank} bool"),
        "dest '1'": ("RankError", f"{rank} str"),
        "dest 1.0": ("RankError", f"{rank} float"),
        "dest None": ("RankError", f"{rank} NoneType"),
        "dest np.int64(size)": ("RankError", f"rank {n} is out of range"),
        "medium dest size": ("RankError", f"rank {n} is out of range"),
        "medium dest True": ("RankError", f"{rank} bool"),
        "medium dest '1'": ("RankError", f"{rank} str"),
        "unregistered fn": ("HandlerNotRegistered",
                            "'hotjobs.h_unregistered' is not a registered handler"),
        "unregistered fn medium": ("HandlerNotRegistered", "'hotjobs.h_unregistered'"),
        "unregistered name": ("HandlerNotRegistered", "'hotjobs.h_nope'"),
        "unregistered lambda": ("HandlerNotRegistered", "<lambda>"),
        "medium-declared as short": ("HandlerCategoryError", "handler hotjobs.h_decl_med2 is "
                                     "declared medium but was sent as a short AM"),
        "short-declared as medium": ("HandlerCategoryError", "handler hotjobs.h_decl_short1 "
                                     "is declared short but was sent as a medium AM"),
        "rpc-declared as short": ("HandlerCategoryError",
                                  "declared rpc but was sent as a short AM"),
        "17 args": ("AMArgumentError", "17 AM arguments given; at most amnet.MAX_ARGS == 16"),
        "17 args medium": ("AMArgumentError", "17 AM arguments given"),
        "bool arg": ("AMArgumentError", "AM argument 0 must be an int, got bool"),
        "bool arg medium": ("AMArgumentError", "AM argument 1 must be an int, got bool"),
        "2**63 arg": ("AMArgumentError", f"AM argument 0 = {1 << 63} does not fit in int64"),
        "-2**63-1 arg": ("AMArgumentError",
                         f"AM argument 1 = {-(1 << 63) - 1} does not fit in int64"),
        "2**63 arg medium": ("AMArgumentError", "does not fit in int64"),
        "np.uint64 max arg": ("AMArgumentError", "does not fit in int64"),
        "float arg": ("AMArgumentError", "AM argument 0 must be an int, got float"),
        "str arg": ("AMArgumentError", "AM argument 1 must be an int, got str"),
        "declared nargs 1 of 2": ("AMArgumentError", "handler hotjobs.h_decl_med2 is declared "
                                  "with 2 arguments, 1 given"),
        "declared nargs 3 of 2": ("AMArgumentError", "declared with 2 arguments, 3 given"),
        "declared nargs 0 of 1": ("AMArgumentError", "handler hotjobs.h_decl_short1 is "
                                  "declared with 1 arguments, 0 given"),
        "str payload": ("TypeError", f"payload {PAYLOAD_TYPE} str"),
        "None payload": ("TypeError", f"payload {PAYLOAD_TYPE} NoneType"),
        "int payload": ("TypeError", f"payload {PAYLOAD_TYPE} int"),
        "list payload": ("TypeError", f"payload {PAYLOAD_TYPE} list"),
        "request_short no handler": ("TypeError", "ep.request_short() needs 2 positional "
                                     "arguments, got 1"),
        "request_medium no payload": ("TypeError", "ep.request_medium() needs 3 positional "
                                      "arguments, got 2"),
        "keyword arg": ("TypeError", "keyword"),
    }
    for what in ("bytes", "bytearray", "numpy", "memoryview"):
        want[f"max_medium+1 {what}"] = (
            "PayloadTooLarge", f"Medium payload of {mm + 1} bytes is over ep.max_medium = {mm} "
            "bytes")
    want["max_medium+8 float64"] = ("PayloadTooLarge", f"{mm + 8} bytes is over")
    return want


def check_errors(got: list[tuple[str, str, str]], want: dict[str, tuple[str, str]]) -> None:
    seen = {what: (kind, msg) for what, kind, msg in got}
    assert set(seen) == set(want)
    wrong = {what: seen[what] for what, (kind, text) in want.items()
             if seen[what][0] != kind or text not in seen[what][1]}
    assert wrong == {}, {w: (want[w], wrong[w]) for w in wrong}


@route_param
def test_bad_requests_raise_the_documented_errors(results, route):
    got = results("bad_input", route)
    for g in got:
        check_errors(g["errors"], expected_bad_requests(g["size"], g["max_medium"]))


@route_param
def test_bad_replies_raise_the_documented_errors(results, route):
    """The same checks through the token's reply entry points; the good reply after them
    goes out once."""
    got = results("bad_input", route)
    n = len(got)
    for r, g in enumerate(got):
        mm = g["max_medium"]
        want = {k: v for k, v in expected_bad_requests(n, mm).items()
                if k in {"unregistered fn", "unregistered name", "medium-declared as short",
                         "declared nargs 1 of 2", "17 args", "bool arg", "2**63 arg",
                         "np.uint64 max arg", "float arg", "str payload", "None payload"}}
        want["max_medium+1 bytes"] = ("PayloadTooLarge", f"{mm + 1} bytes is over")
        want["max_medium+1 numpy"] = ("PayloadTooLarge", f"{mm + 1} bytes is over")
        want["reply_medium no payload"] = (
            "TypeError", "token.reply_medium() needs 2 positional arguments, got 1")
        want["reply_short keyword"] = ("TypeError", "keyword")
        want["good"] = ("no error", "None")
        assert len(g["badreply"]) == 1
        check_errors(g["badreply"][0][1], want)
        assert g["goodreply"] == [("goodreply", (r + 1) % n, 7)]


@route_param
def test_bad_input_delivers_nothing(results, route):
    """After the bad calls, a flush: every rank ran one h_badreply, one good reply, n pings
    and n pongs; no handler a bad call named ran anywhere."""
    got = results("bad_input", route)
    n = len(got)
    for g in got:
        assert g["counts"] == {"badreply": 1, "goodreply": 1, "ping": n, "pong": n}


def test_bad_input_errors_are_identical_in_every_route(results):
    """The conduit route is the Python engine's; the C fast paths must raise the same."""
    by_route = {route: [(g["errors"], g["badreply"]) for g in results("bad_input", route)]
                for route in ROUTES}
    ref = by_route["conduit"]
    for route in ("pshm", "inline"):
        for r, (mine, theirs) in enumerate(zip(by_route[route], ref, strict=True)):
            diff = [(a, b) for a, b in zip(mine[0], theirs[0], strict=True) if a != b]
            assert diff == [], (route, r, diff)
            assert mine[1] == theirs[1], (route, r)


# -- arguments and payloads ------------------------------------------------------------------
def _arrived(got: list[dict], r: int) -> tuple[list, list]:
    """(what rank r sent its right neighbour, what arrived there from r)."""
    d = (r + 1) % len(got)
    return got[r]["sent"], [e for e in got[d]["log"] if e[1] == r]


@route_param
def test_numpy_and_int_subclass_arguments_arrive_as_plain_ints(results, route):
    got = results("payloads", route)
    for r in range(len(got)):
        sent, log = _arrived(got, r)
        by_seq = {e[2]: e for e in log}
        for seq, _kind, what, args, _ in sent:
            e = by_seq[seq]
            assert e[3] == args, (what, e)
            assert e[4] == ["int"] * len(args), (what, e[4])  # numpy/IntEnum became int


@route_param
def test_medium_payload_kinds_arrive_with_their_bytes(results, route):
    """bytes, bytearray, numpy (uint8, float64, 2-d, strided, a column, Fortran order),
    memoryview (plain, sliced, strided), 0 bytes and max_medium bytes; a bytearray and an
    array changed right after the call returns. The handler gets a flat byte memoryview of
    the C-order bytes."""
    got = results("payloads", route)
    for r in range(len(got)):
        sent, log = _arrived(got, r)
        by_seq = {e[2]: e for e in log}
        for seq, kind, what, args, want in sent:
            if kind != "medium":
                continue
            e = by_seq[seq]
            _, _, _, got_args, _, ptype, nbytes, data, fmt, ndim = e
            assert (ptype, nbytes, fmt, ndim) == ("memoryview", len(want), "B", 1), (what, e)
            assert data == want, what
            assert got_args == args, what


@route_param
def test_fast_and_fallback_sends_keep_fifo_order(results, route):
    """One numbered stream mixing sends the C path handles (int args, bytes) and sends it
    hands to the Python engine (numpy args, a numpy destination, a handler named by string,
    numpy and strided payloads): each pair's stream arrives complete and in order."""
    got = results("payloads", route)
    for r in range(len(got)):
        sent, log = _arrived(got, r)
        assert [e[2] for e in log] == [s[0] for s in sent]


# -- wait_until and poll ---------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(WAIT_VARIANTS))
def test_wait_until_arguments_and_timeouts(results, variant):
    got = results("waits", variant)
    for g in got:
        mode = WAIT_VARIANTS[variant].get("wait_mode")
        if mode is not None:
            assert g["wait_mode"] == mode
        for what in ("false kw", "false positional"):
            kind, res, secs = g[what]
            assert (kind, res) == ("no error", "False"), (what, g[what])
            assert 0.045 <= secs < 2.0, (what, secs)
        for what in ("false int 0", "false negative"):
            kind, res, secs = g[what]
            assert (kind, res) == ("no error", "False") and secs < 1.0, (what, g[what])
        for what in ("true", "truthy", "pred kw", "timeout None"):
            assert g[what] == ("no error", "True"), what
        assert g["pred kw timeout kw"] == ("no error", "False")
        kind, res, calls = g["true later"]
        assert (kind, res) == ("no error", "True") and calls >= 3
        for what in ("pred 5", "pred None", "pred str", "timeout str", "no args", "3 args",
                     "bad keyword"):
            assert g[what][0] == "TypeError", (what, g[what])
        assert "callable" in g["pred 5"][1]


@pytest.mark.parametrize("variant", list(WAIT_VARIANTS))
def test_wait_until_predicate_errors_propagate(results, variant):
    got = results("waits", variant)
    n = len(got)
    for g in got:
        assert g["pred raises at once"] == ("ValueError", "pred failed at once", 1)
        assert g["pred raises later"] == ("ValueError", "pred failed on call 3")
        assert g["flush after raise"] == n  # and the engine still works afterwards


@pytest.mark.parametrize("variant", list(WAIT_VARIANTS))
def test_wait_until_sees_a_peers_direct_write(results, variant):
    """Rank 0 waits on a predicate over its own segment; 0.2 s later the last rank puts into
    it and sends nothing else (within a node a put is a direct copy, no AM): wait_until
    notices without any message waking it (over the conduit the put is a message that rank
    0's wait serves)."""
    got = results("waits", variant)
    ok, secs = got[0]["direct write"]
    assert ok is True
    assert 0.15 <= secs < 3.0, secs


@route_param
def test_poll_returns_how_many_handlers_ran(results, route):
    """The last rank sends rank 0 five requests while rank 0 only polls: what ep.poll()
    returned adds up to the handlers that ran inside it (in-line: none, they ran in the
    sender's calls; with several rank-threads another one may be the thread that drains)."""
    got = results("waits", route)
    p = got[0]["poll"]
    assert p["count"] == 5
    assert sum(p["polled"]) == p["in_poll"], p
    if p["same_process"]:
        assert p["polled"] == [], p
    elif p["threads_per_proc"] == 1:
        assert p["in_poll"] > 0, p


# -- put / get -------------------------------------------------------------------------------
@route_param
def test_put_get_keywords_and_out_buffers(results, route):
    got = results("rma", route)
    for g in got:
        for what, (a, b) in g["ok"].items():
            assert a in (True, "bytearray") and b is True, (what, a, b)
        assert all(g["landed"].values()), g["landed"]
        if route in ("pshm", "inline"):  # a node-local copy: the handle complete on return
            assert g["nb done at once"] == (True, True)


def expected_rma_errors(n: int, d: int, seg: int) -> dict[str, tuple[str, str]]:
    out_of = f"outside rank {d}'s segment of {seg} bytes"
    want = {
        "get out too small": ("ValueError", "ep.get(): out holds 8 bytes, 16 requested"),
        "get out too small kw": ("ValueError", "ep.get(): out holds 8 bytes, 16 requested"),
        "get out numpy too small": ("ValueError", "out holds 16 bytes, 17 requested"),
        "get out read-only": ("TypeError", "ep.get(): out is read-only"),
        "get out strided": ("TypeError", "ep.get(): out must be contiguous"),
        "get out str": ("TypeError", "out must be a writable bytes-like object or numpy array, "
                        "got str"),
        "get nbytes -1": ("ValueError", "ep.get(): nbytes must be >= 0, got -1"),
        "get nbytes bool": ("TypeError", "ep.get(): nbytes must be an int, got bool"),
        "get nbytes float": ("TypeError", "ep.get(): nbytes must be an int, got float"),
        "get offset float": ("TypeError", "ep.get(): offset must be an int, got float"),
        "get offset bool": ("TypeError", "ep.get(): offset must be an int, got bool"),
        "get src size": ("RankError", f"rank {n} is out of range"),
        "get src True": ("RankError", "a rank must be an int, got bool"),
        "get src '1'": ("RankError", "a rank must be an int, got str"),
        "get too few args": ("TypeError", "nbytes"),
        "get bad keyword": ("TypeError", "into"),
        "put offset float": ("TypeError", "ep.put(): offset must be an int, got float"),
        "put offset bool": ("TypeError", "ep.put(): offset must be an int, got bool"),
        "put dest size": ("RankError", f"rank {n} is out of range"),
        "put dest True": ("RankError", "a rank must be an int, got bool"),
        "put dest -1": ("RankError", "rank -1 is out of range"),
        "put str data": ("TypeError", f"put data {PAYLOAD_TYPE} str"),
        "put None data": ("TypeError", f"put data {PAYLOAD_TYPE} NoneType"),
        "put too few args": ("TypeError", "data"),
        "put bad keyword": ("TypeError", "payload"),
    }
    for what, rng in (("get offset -1", "[-1, 0)"), ("get past end", f"[{seg - 1}, {seg + 1})"),
                      ("get at end", f"[{seg}, {seg + 1})"), ("get whole+1", f"[0, {seg + 1})"),
                      ("get past end out", f"[{seg - 1}, {seg + 1})"),
                      ("get past end kw", f"[{seg - 1}, {seg + 1})"),
                      ("get offset 2**64", f"[{1 << 64}, {(1 << 64) + 1})")):
        want[what] = ("SegmentBoundsError", f"ep.get(): bytes {rng} are {out_of}")
    for what, rng in (("put offset -1", "[-1, 0)"), ("put past end", f"[{seg - 1}, {seg + 1})"),
                      ("put at end", f"[{seg}, {seg + 1})"),
                      ("put empty past end", f"[{seg + 1}, {seg + 1})"),
                      ("put whole+1", f"[0, {seg + 1})"),
                      ("put past end kw", f"[{seg - 1}, {seg + 1})"),
                      ("put past end numpy", f"[{seg - 1}, {seg + 1})"),
                      ("put offset 2**64", f"[{1 << 64}, {(1 << 64) + 1})")):
        want[what] = ("SegmentBoundsError", f"ep.put(): bytes {rng} are {out_of}")
    want.update({
        "put_nbi past end": ("SegmentBoundsError",
                             f"ep.put_nbi(): bytes [{seg - 1}, {seg + 1}) are {out_of}"),
        "put_nbi dest size": ("RankError", f"rank {n} is out of range"),
        "put_nbi bulk str": ("TypeError", "bulk"),
        "put_nbi str data": ("TypeError", f"put data {PAYLOAD_TYPE} str"),
        "get_nbi out None": ("TypeError", "ep.get_nbi() needs an out buffer"),
        "get_nbi out too small": ("ValueError", "ep.get_nbi(): out holds 8 bytes, 16 requested"),
        "get_nbi past end": ("SegmentBoundsError",
                             f"ep.get_nbi(): bytes [{seg - 1}, {seg + 1}) are {out_of}"),
        "put_nb past end": ("SegmentBoundsError",
                            f"ep.put_nb(): bytes [{seg - 1}, {seg + 1}) are {out_of}"),
        "put_nb dest size": ("RankError", f"rank {n} is out of range"),
        "put_nb bulk str": ("TypeError", "bulk"),
        "put_nb str data": ("TypeError", f"put data {PAYLOAD_TYPE} str"),
        "put_nb bad keyword": ("TypeError", "bluk"),
        "get_nb out too small": ("ValueError", "ep.get_nb(): out holds 8 bytes, 16 requested"),
        "get_nb out too small kw": ("ValueError",
                                    "ep.get_nb(): out holds 8 bytes, 16 requested"),
        "get_nb out read-only": ("TypeError", "ep.get_nb(): out is read-only"),
        "get_nb past end": ("SegmentBoundsError",
                            f"ep.get_nb(): bytes [{seg - 1}, {seg + 1}) are {out_of}"),
        "get_nb src True": ("RankError", "a rank must be an int, got bool"),
        "get_nb bad keyword": ("TypeError", "into"),
    })
    return want


@route_param
def test_put_get_bad_input_raises_the_documented_errors(results, route):
    got = results("rma", route)
    n = len(got)
    for r, g in enumerate(got):
        check_errors(g["errors"], expected_rma_errors(n, (r + 1) % n, g["seg"]))


def test_put_get_errors_are_identical_in_every_route(results):
    ref = [g["errors"] for g in results("rma", "conduit")]
    for route in ("pshm", "inline"):
        mine = [g["errors"] for g in results("rma", route)]
        for r in range(len(ref)):
            diff = [(a, b) for a, b in zip(mine[r], ref[r], strict=True) if a != b]
            assert diff == [], (route, r, diff)


@pytest.mark.parametrize("what", [w for w, _ in hotjobs.OVERFLOW])
@pytest.mark.parametrize("route,target", [("pshm", "peer"), ("inline", "peer"),
                                          ("conduit", "peer"), ("conduit", "own")])
def test_put_get_offset_plus_length_past_int64(mark, route, target, what):
    """An offset near 2**63 whose sum with the length overflows int64 is outside the segment
    like any other: SegmentBoundsError (the fast path's bounds check must not wrap around
    and copy from or to a wild address)."""
    got = run_job(functools.partial(hotjobs.rma_overflow, what=what, own=target == "own"),
                  ROUTES[route])
    for r, (kind, msg) in enumerate(got):
        assert kind == "SegmentBoundsError", (r, kind, msg)
        assert f"segment of {SEG} bytes" in msg


def test_node_local_nonblocking_starts_poll(mark):
    """A loop of node-local put_nb/get_nb (copies in C, complete at once) still serves the
    AMs that come to its process: every nonblocking start polls, as the Python route does."""
    got = run_job(hotjobs.nb_starts_poll, dict(n=4, nodes=2))
    assert got[0] == {"get_nb": True, "put_nb": True}


@route_param
def test_every_entry_point_refuses_after_finalize(results, route):
    got = results("after_finalize", route)
    for g in got:
        assert g == {k: "InitError" for k in g}, g
        assert len(g) == 16


# -- handler failures ------------------------------------------------------------------------
@route_param
def test_on_handler_error_gets_exception_name_and_source_and_the_job_goes_on(results, route):
    """Short and Medium request handlers that raise (run by the C drain, in-line or by the
    Python dispatcher), one that replies first, and the reply handler that raises: each
    calls on_handler_error(exc, name, source) on its rank, and the job goes on (the flush
    after them completed)."""
    got = results("handler_errors", route)
    n = len(got)
    for r, g in enumerate(got):
        left, right = (r - 1) % n, (r + 1) % n
        want = sorted([
            ("ValueError", f"short handler fails on rank {r} (tag 1)",
             "hotjobs.h_raise_short", left),
            ("KeyError", repr(f"medium handler fails on rank {r}: b'boom'"),
             "hotjobs.h_raise_medium", left),
            ("RuntimeError", f"request handler fails after replying on rank {r}",
             "hotjobs.h_reply_then_raise", left),
            ("LookupError", f"reply handler fails on rank {r} (tag 3)", "hotjobs.h_raise_rep",
             right),
        ])
        assert g["errors"] == want
        assert g["cb_after"] is None
        assert g["counts"] == {"raise_short": 1, "raise_medium": 1, "reply_then_raise": 1,
                               "raise_rep": 1, "ping": n, "pong": n}


@route_param
def test_on_handler_error_runs_in_the_handler_context(results, route):
    """docs/am-guide.md section 5: the callback "runs in the handler context too" (the
    Python engine called it inside the handler's try block, its token current), so a
    waiting call in it is refused like in the handler itself."""
    got = results("handler_errors", route)
    for g in got:
        assert len(g["in_cb"]) == 4
        for name, (kind, msg) in g["in_cb"]:
            assert kind == "AMContextError", (name, kind, msg)
            assert msg.startswith("ep.wait_until() inside "), msg


# -- statistics ------------------------------------------------------------------------------
@route_param
def test_statistics_handlers_run_grows_by_the_handlers_run(results, route):
    """Rank 0 made 40 round trips to rank 1 (and 20 Medium requests without reply): rank 1's
    process ran 60 handlers, rank 0's 40 (the same process in-line: 100)."""
    got = results("stats", route)
    p0, p1 = got[0]["proc"], got[1]["proc"]
    assert got[1]["ran"] == {"ping": 40, "pong": 0, "margs": 20}
    assert got[0]["ran"] == {"ping": 0, "pong": 40, "margs": 0}
    for g in got:
        want = (60 if g["proc"] == p1 else 0) + (40 if g["proc"] == p0 else 0)
        assert g["delta"] == want, (g["rank"], g["delta"], want)



def test_a_handler_table_holds_at_most_65536_handlers():
    """The wire's handler index is 16 bits: registering more is a clear error up front, and
    the table is left as it was (never a handler index that wraps around on the wire)."""
    import types

    from amnet.core._handlers import MAX_HANDLERS, HandlerTable

    def make(i):
        def h(token):
            return None

        g = types.FunctionType(h.__code__, {}, f"h{i}")
        g.__qualname__ = f"h{i}"
        return g

    fns = [make(i) for i in range(MAX_HANDLERS + 1)]
    with pytest.raises(ValueError, match=r"65537 handlers in one rank's table \(0 registered, "
                       r"65537 more given\); a rank can register at most 65536"):
        HandlerTable.names_of(fns)
    table = HandlerTable()
    table.add(fns[:MAX_HANDLERS], HandlerTable.names_of(fns[:MAX_HANDLERS]))
    with pytest.raises(ValueError, match=r"\(65536 registered, 1 more given\)"):
        table.add(fns[MAX_HANDLERS:], HandlerTable.names_of(fns[MAX_HANDLERS:]))
    assert len(table.fns) == len(table.by_name) == MAX_HANDLERS


def test_the_hot_path_takes_the_engines_hooks_as_declared():
    """C takes the engine's callbacks from one declared object, checked when it is made: a
    tuple of another shape, or one whose field names differ from HotHooks' (a renamed
    method), is refused there with a TypeError, not mid-job."""
    from collections import namedtuple

    from amnet.core import _hot
    from amnet.core._engine import HotHooks

    fields = HotHooks._fields
    assert fields[:5] == ("size", "T", "first", "max_medium", "seg_size")
    ok = HotHooks(2, 1, 0, 64, 4096, *[print] * (len(fields) - 5))
    assert isinstance(_hot.Hot(ok, [0, 2], False, 0.0), _hot.Hot)
    renamed = namedtuple("HotHooks", [*fields[:-2], "abort", fields[-1]])(*ok)
    for bad in (tuple(ok), ok[:-1], renamed):
        with pytest.raises(TypeError, match="HotHooks"):
            _hot.Hot(bad, [0, 2], False, 0.0)
