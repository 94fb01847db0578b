"""Jobs and handlers for tests/test_hot.py: the C hot path of the AM engine
(amnet/core/_hot*.c): ``ep.request_*``, ``ep.poll``, ``ep.wait_until``, ``ep.put``, ``ep.get``,
the ``amnet.Token`` type, the shared-memory queue drain and in-line AMs, each in the three
routes (another process of the node through PSHM, another rank-thread of the process in-line,
another process through the conduit).

Handlers are module-level functions that every rank registers alike; they reach their rank's
state through ``HS[token.rank]`` (a handler may run on any thread of the destination process,
and in-line on the sender's thread). Jobs are rank-count agnostic where they can be: every rank
sends to its right neighbour and serves its left one. They return what they saw for the test
to assert on.
"""

from __future__ import annotations

import enum
import threading
import time

import jobkit
import numpy as np

import amnet

WAIT_S = 10.0  # a wait longer than this is a hang: fail with a message
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


# -- helpers ---------------------------------------------------------------------------------
class HState:
    """What one rank's handlers saw."""

    def __init__(self, ep) -> None:
        self.ep = ep
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}  # handler runs on this rank, by kind
        self.log: list = []  # what the handlers recorded
        self.kept = None  # a request handler's token, kept past its return
        self.kept_rep = None  # a reply handler's token, kept past its return
        self.errors: list = []  # what on_handler_error got
        self.polling = False  # the rank is inside ep.poll() (on poll_thread)
        self.poll_thread = None


HS: dict[int, HState] = {}


def _count(tok, what: str) -> HState:
    s = HS[tok.rank]
    with s.lock:
        s.counts[what] = s.counts.get(what, 0) + 1
    return s


def count(s: HState, what: str) -> int:
    with s.lock:
        return s.counts.get(what, 0)


def outcome(fn) -> tuple[str, str]:
    """(exception type name, message), or ("no error", repr of the result)."""
    try:
        r = fn()
    except BaseException as e:  # recorded: the test says which type was right
        return (type(e).__name__, str(e))
    return ("no error", repr(r)[:200])


def right(ep) -> int:
    return (ep.rank + 1) % ep.size


def left(ep) -> int:
    return (ep.rank - 1) % ep.size


wait = jobkit.waiter(WAIT_S)


def setup(ep) -> HState:
    """Register the handlers (collective), make this rank's state, and sync."""
    return jobkit.set_up(ep, HANDLERS, HS, HState)


def flush(ep, s: HState) -> None:
    """Ping every rank and wait for the pongs: what I sent before has been handled (FIFO per
    pair)."""
    before = count(s, "pong")
    for d in range(ep.size):
        ep.request_short(d, h_ping, ep.rank)
    wait(ep, lambda: count(s, "pong") >= before + ep.size, "pongs")


def quiesce(ep) -> None:
    """Every rank's AM barrier completed (a dissemination barrier: each rank received all its
    rounds), so no AM is in flight anywhere."""
    ep.barrier()
    ep.bootstrap.barrier()


def pattern(seed: int, size: int) -> bytes:
    return np.random.default_rng([seed, size]).integers(0, 256, size, dtype=np.uint8).tobytes()


# -- handlers ----------------------------------------------------------------------------------
def h_ping(tok, x):
    _count(tok, "ping")
    tok.reply_short(h_pong, x)


def h_pong(tok, x):
    _count(tok, "pong")


def h_count(tok, *args):
    _count(tok, "count")


def h_mcount(tok, payload, *args):
    _count(tok, "mcount")


def h_go(tok):
    _count(tok, "go")


def h_count_poll(tok, i):
    """Counts itself, and whether it ran inside ``ep.poll()`` on its rank's own thread."""
    s = _count(tok, "count_poll")
    if s.polling and threading.get_ident() == s.poll_thread:
        _count(tok, "in_poll")


def h_unregistered(tok, *args):  # never registered
    raise AssertionError("h_unregistered ran")


@amnet.handler("medium", nargs=2)
def h_decl_med2(tok, payload, a, b):
    _count(tok, "decl_med2")


@amnet.handler("short", nargs=1)
def h_decl_short1(tok, a):
    _count(tok, "decl_short1")


@amnet.handler("rpc")
def rpc_echo(x):
    return x


def token_info(tok) -> dict:
    return {"type": type(tok).__name__, "is_token": isinstance(tok, amnet.Token),
            "rank": tok.rank, "source": tok.source, "is_request": tok.is_request,
            "handler": tok.handler, "repr": repr(tok), "endpoint": tok.endpoint.rank}


# the token rules
def h_tok_req(tok, tag):
    s = _count(tok, "tok_req")
    ep = s.ep
    src = tok.source
    rec: dict = {"info": token_info(tok), "tag": tag, "endpoint is ep": tok.endpoint is ep}
    box: list = []
    # the token used from another thread while its handler runs (before the real reply)
    th = threading.Thread(target=lambda: box.append(
        outcome(lambda: tok.reply_short(h_tok_rep, tag))))
    th.start()
    th.join()
    rec["other thread"] = box[0] if box else ("thread died", "")
    rec["set rank"] = outcome(lambda: setattr(tok, "rank", 5))
    # the restricted context
    rec["ep.poll"] = outcome(ep.poll)
    rec["ep.wait_until"] = outcome(lambda: ep.wait_until(lambda: True))
    rec["ep.wait_until timeout"] = outcome(lambda: ep.wait_until(lambda: False, timeout=0.01))
    rec["ep.request_short"] = outcome(lambda: ep.request_short(src, h_ping, 1))
    rec["ep.request_medium"] = outcome(lambda: ep.request_medium(src, h_mcount, b"x"))
    rec["ep.put"] = outcome(lambda: ep.put(src, 0, b"x"))
    rec["ep.put own"] = outcome(lambda: ep.put(tok.rank, 0, b"x"))
    rec["ep.get"] = outcome(lambda: ep.get(src, 0, 1))
    rec["ep.get out"] = outcome(lambda: ep.get(src, 0, 1, bytearray(1)))
    # the one allowed reply, then more
    rec["reply"] = outcome(lambda: tok.reply_short(h_tok_rep, tag))
    rec["second reply_short"] = outcome(lambda: tok.reply_short(h_tok_rep, tag))
    rec["second reply_medium"] = outcome(lambda: tok.reply_medium(h_mcount, b"x", tag))
    rec["second reply_long"] = outcome(lambda: tok.reply_long(h_count, b"x", 0, tag))
    rec["info after reply"] = token_info(tok)
    s.kept = tok
    with s.lock:
        s.log.append(("req", rec))


def h_tok_rep(tok, tag):
    s = _count(tok, "tok_rep")
    ep = s.ep
    rec: dict = {"info": token_info(tok), "tag": tag, "endpoint is ep": tok.endpoint is ep}
    rec["reply_short"] = outcome(lambda: tok.reply_short(h_count, tag))
    rec["reply_medium"] = outcome(lambda: tok.reply_medium(h_mcount, b"x", tag))
    rec["reply_long"] = outcome(lambda: tok.reply_long(h_count, b"x", 0, tag))
    rec["ep.poll"] = outcome(ep.poll)
    rec["ep.wait_until"] = outcome(lambda: ep.wait_until(lambda: True))
    rec["ep.request_short"] = outcome(lambda: ep.request_short(tok.source, h_ping, 1))
    s.kept_rep = tok
    with s.lock:
        s.log.append(("rep", rec))


# bad replies through the Token's C entry points
def bad_replies(tok, mm: int) -> list[tuple[str, object]]:
    return [
        ("unregistered fn", lambda: tok.reply_short(h_unregistered, 1)),
        ("unregistered name", lambda: tok.reply_short("hotjobs.h_nope", 1)),
        ("medium-declared as short", lambda: tok.reply_short(h_decl_med2, 1, 2)),
        ("declared nargs 1 of 2", lambda: tok.reply_medium(h_decl_med2, b"x", 1)),
        ("17 args", lambda: tok.reply_short(h_count, *range(17))),
        ("bool arg", lambda: tok.reply_short(h_count, True)),
        ("2**63 arg", lambda: tok.reply_short(h_count, 1 << 63)),
        ("np.uint64 max arg", lambda: tok.reply_short(h_count, np.uint64((1 << 64) - 1))),
        ("float arg", lambda: tok.reply_short(h_count, 1.5)),
        ("max_medium+1 bytes", lambda: tok.reply_medium(h_mcount, bytes(mm + 1))),
        ("max_medium+1 numpy", lambda: tok.reply_medium(h_mcount, np.zeros(mm + 1, "u1"))),
        ("str payload", lambda: tok.reply_medium(h_mcount, "text")),
        ("None payload", lambda: tok.reply_medium(h_mcount, None)),
        ("reply_medium no payload", lambda: tok.reply_medium(h_mcount)),
        ("reply_short keyword", lambda: tok.reply_short(h_count, x=1)),
    ]


def h_badreply(tok, tag):
    s = _count(tok, "badreply")
    errs = [(what, *outcome(fn)) for what, fn in bad_replies(tok, s.ep.max_medium)]
    errs.append(("good", *outcome(lambda: tok.reply_short(h_goodreply, tag))))
    with s.lock:
        s.log.append(("badreply", errs))


def h_goodreply(tok, tag):
    s = _count(tok, "goodreply")
    with s.lock:
        s.log.append(("goodreply", tok.source, tag))


# arguments and payloads
class Color(enum.IntEnum):
    RED = 7


def h_args(tok, seq, *args):
    s = _count(tok, "args")
    with s.lock:
        s.log.append(("short", tok.source, seq, args, [type(a).__name__ for a in args]))


def h_margs(tok, payload, seq, *args):
    s = _count(tok, "margs")
    rec = ("medium", tok.source, seq, args, [type(a).__name__ for a in args],
           type(payload).__name__, payload.nbytes, bytes(payload), payload.format, payload.ndim)
    with s.lock:
        s.log.append(rec)


# handler failures
def h_raise_short(tok, tag):
    _count(tok, "raise_short")
    raise ValueError(f"short handler fails on rank {tok.rank} (tag {tag})")


def h_raise_medium(tok, payload, tag):
    _count(tok, "raise_medium")
    raise KeyError(f"medium handler fails on rank {tok.rank}: {bytes(payload)!r}")


def h_reply_then_raise(tok, tag):
    _count(tok, "reply_then_raise")
    tok.reply_short(h_raise_rep, tag)
    raise RuntimeError(f"request handler fails after replying on rank {tok.rank}")


def h_raise_rep(tok, tag):
    _count(tok, "raise_rep")
    raise LookupError(f"reply handler fails on rank {tok.rank} (tag {tag})")


HANDLERS = [h_ping, h_pong, h_count, h_mcount, h_go, h_count_poll, h_decl_med2, h_decl_short1,
            rpc_echo, h_tok_req, h_tok_rep, h_badreply, h_goodreply, h_args, h_margs,
            h_raise_short, h_raise_medium, h_reply_then_raise, h_raise_rep]


# -- jobs ----------------------------------------------------------------------------------------
def tokens(ep) -> dict:
    """Every rank sends h_tok_req to its right neighbour: the handler probes the token rules
    and the restricted context; its reply handler probes a reply handler's. Then the kept
    tokens are used after their handlers returned, and a flush shows nothing the refused calls
    would have sent ran anywhere."""
    s = setup(ep)
    d = right(ep)
    out: dict = {"rank": ep.rank, "size": ep.size}
    ep.request_short(d, h_tok_req, 100 + ep.rank)
    wait(ep, lambda: count(s, "tok_rep") >= 1, "the token reply")
    ep.barrier()  # my left neighbour got its reply: my request handler ran
    kept, kept_rep = s.kept, s.kept_rep
    out["kept_reply_short"] = outcome(lambda: kept.reply_short(h_tok_rep, 1))
    out["kept_reply_medium"] = outcome(lambda: kept.reply_medium(h_mcount, b"x", 1))
    out["kept_reply_long"] = outcome(lambda: kept.reply_long(h_count, b"x", 0, 1))
    out["kept_bad_args"] = outcome(lambda: kept.reply_short(h_unregistered, "x"))
    out["kept_rep_reply"] = outcome(lambda: kept_rep.reply_short(h_count, 1))
    out["kept_info"] = token_info(kept)
    out["kept_rep_info"] = token_info(kept_rep)
    out["Token()"] = outcome(lambda: amnet.Token())
    flush(ep, s)
    ep.barrier()
    with s.lock:
        out["counts"] = dict(s.counts)
        out["log"] = list(s.log)
    return out


def bad_requests(ep, d: int) -> list[tuple[str, object]]:
    n, mm = ep.size, ep.max_medium
    return [
        ("dest -1", lambda: ep.request_short(-1, h_count, 1)),
        ("dest size", lambda: ep.request_short(n, h_count, 1)),
        ("dest 2**70", lambda: ep.request_short(1 << 70, h_count, 1)),
        ("dest True", lambda: ep.request_short(True, h_count, 1)),
        ("dest False", lambda: ep.request_short(False, h_count, 1)),
        ("dest '1'", lambda: ep.request_short("1", h_count, 1)),
        ("dest 1.0", lambda: ep.request_short(1.0, h_count, 1)),
        ("dest None", lambda: ep.request_short(None, h_count, 1)),
        ("dest np.int64(size)", lambda: ep.request_short(np.int64(n), h_count, 1)),
        ("medium dest size", lambda: ep.request_medium(n, h_mcount, b"x")),
        ("medium dest True", lambda: ep.request_medium(True, h_mcount, b"x")),
        ("medium dest '1'", lambda: ep.request_medium("1", h_mcount, b"x")),
        ("unregistered fn", lambda: ep.request_short(d, h_unregistered, 1)),
        ("unregistered fn medium", lambda: ep.request_medium(d, h_unregistered, b"x")),
        ("unregistered name", lambda: ep.request_short(d, "hotjobs.h_nope")),
        ("unregistered lambda", lambda: ep.request_short(d, lambda tok: None)),
        ("medium-declared as short", lambda: ep.request_short(d, h_decl_med2, 1, 2)),
        ("short-declared as medium", lambda: ep.request_medium(d, h_decl_short1, b"x", 1)),
        ("rpc-declared as short", lambda: ep.request_short(d, rpc_echo, 1)),
        ("17 args", lambda: ep.request_short(d, h_count, *range(17))),
        ("17 args medium", lambda: ep.request_medium(d, h_mcount, b"x", *range(17))),
        ("bool arg", lambda: ep.request_short(d, h_count, True)),
        ("bool arg medium", lambda: ep.request_medium(d, h_mcount, b"x", 1, False)),
        ("2**63 arg", lambda: ep.request_short(d, h_count, 1 << 63)),
        ("-2**63-1 arg", lambda: ep.request_short(d, h_count, 0, I64_MIN - 1)),
        ("2**63 arg medium", lambda: ep.request_medium(d, h_mcount, b"x", 1 << 63)),
        ("np.uint64 max arg", lambda: ep.request_short(d, h_count, np.uint64((1 << 64) - 1))),
        ("float arg", lambda: ep.request_short(d, h_count, 1.5)),
        ("str arg", lambda: ep.request_short(d, h_count, 1, "2")),
        ("declared nargs 1 of 2", lambda: ep.request_medium(d, h_decl_med2, b"x", 1)),
        ("declared nargs 3 of 2", lambda: ep.request_medium(d, h_decl_med2, b"x", 1, 2, 3)),
        ("declared nargs 0 of 1", lambda: ep.request_short(d, h_decl_short1)),
        ("max_medium+1 bytes", lambda: ep.request_medium(d, h_mcount, bytes(mm + 1))),
        ("max_medium+1 bytearray", lambda: ep.request_medium(d, h_mcount, bytearray(mm + 1))),
        ("max_medium+1 numpy", lambda: ep.request_medium(d, h_mcount, np.zeros(mm + 1, "u1"))),
        ("max_medium+1 memoryview",
         lambda: ep.request_medium(d, h_mcount, memoryview(bytes(mm + 1)))),
        ("max_medium+8 float64",
         lambda: ep.request_medium(d, h_mcount, np.zeros(mm // 8 + 1, "f8"))),
        ("str payload", lambda: ep.request_medium(d, h_mcount, "text")),
        ("None payload", lambda: ep.request_medium(d, h_mcount, None)),
        ("int payload", lambda: ep.request_medium(d, h_mcount, 5)),
        ("list payload", lambda: ep.request_medium(d, h_mcount, [1, 2])),
        ("request_short no handler", lambda: ep.request_short(d)),
        ("request_medium no payload", lambda: ep.request_medium(d, h_mcount)),
        ("keyword arg", lambda: ep.request_short(d, h_count, x=1)),
    ]


def bad_input(ep) -> dict:
    """Bad requests through ep.request_* and bad replies through the token: each raises
    before anything is sent; a flush afterwards shows nothing arrived anywhere."""
    s = setup(ep)
    d = right(ep)
    errs = [(what, *outcome(fn)) for what, fn in bad_requests(ep, d)]
    ep.request_short(d, h_badreply, 7)
    wait(ep, lambda: count(s, "goodreply") >= 1, "the good reply after the bad ones")
    flush(ep, s)
    ep.barrier()  # every rank's flush reached me: what the bad calls sent would have, too
    with s.lock:
        counts = dict(s.counts)
        log = list(s.log)
    return {"rank": ep.rank, "size": ep.size, "max_medium": ep.max_medium, "errors": errs,
            "counts": counts, "badreply": [e for e in log if e[0] == "badreply"],
            "goodreply": [e for e in log if e[0] == "goodreply"]}


ARG_SENDS = [  # (what, the args after seq as the handler must see them)
    ("numpy ints", (5, -3, 200, I64_MIN)),
    ("IntEnum", (7,)),
    ("numpy dest", (9,)),
    ("by name", (I64_MIN, I64_MAX, -1, 0)),
    ("16 args", tuple(range(15))),
    ("plain", (1, 2, 3)),
]


def _send_args(ep, d: int, what: str, seq: int) -> None:
    if what == "numpy ints":
        ep.request_short(d, h_args, seq, np.int64(5), np.int32(-3), np.uint8(200),
                         np.int64(I64_MIN))
    elif what == "IntEnum":
        ep.request_short(d, h_args, seq, Color.RED)
    elif what == "numpy dest":
        ep.request_short(np.int64(d), h_args, seq, 9)
    elif what == "by name":
        ep.request_short(d, "hotjobs.h_args", seq, I64_MIN, I64_MAX, -1, 0)
    elif what == "16 args":
        ep.request_short(d, h_args, seq, *range(15))
    else:
        ep.request_short(d, h_args, seq, 1, 2, 3)


def medium_payloads(mm: int) -> list[tuple[str, object]]:
    """(what, payload) for Medium requests; the handler must see the C-order raw bytes."""
    return [
        ("bytes", b"hello bytes"),
        ("bytearray", bytearray(b"hello bytearray")),
        ("numpy uint8", np.arange(100, dtype=np.uint8)),
        ("numpy float64", np.linspace(-1.0, 1.0, 17)),
        ("numpy int32 2-d", np.arange(24, dtype=np.int32).reshape(4, 6)),
        ("memoryview", memoryview(b"memoryview bytes")),
        ("memoryview slice", memoryview(b"0123456789")[2:7]),
        ("memoryview strided", memoryview(bytes(range(40)))[::3]),
        ("numpy strided slice", np.arange(64, dtype=np.uint8)[::3]),
        ("numpy column", np.arange(48, dtype=np.int16).reshape(8, 6)[:, 1]),
        ("numpy fortran", np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))),
        ("empty bytes", b""),
        ("empty bytearray", bytearray()),
        ("empty numpy", np.zeros(0, "u1")),
        ("max_medium bytes", pattern(1, mm)),
        ("max_medium float64", np.frombuffer(pattern(2, mm // 8 * 8), dtype="f8")),
        ("mutated bytearray", bytearray(b"A" * 1000)),
        ("mutated numpy", np.full(1000, 65, dtype=np.uint8)),
    ]


def raw(p) -> bytes:
    if isinstance(p, np.ndarray):
        return np.ascontiguousarray(p).tobytes()
    return memoryview(p).tobytes()


def payloads(ep) -> dict:
    """Every rank sends its right neighbour Short requests with numpy/IntEnum/extreme int
    arguments (and a numpy destination, a handler by name) and Medium requests with every
    kind of payload, numbered in one sequence that mixes the C fast path and the Python
    engine's: each arrives with plain int arguments and the right bytes, in order."""
    s = setup(ep)
    d = right(ep)
    mm = ep.max_medium
    sent: list = []  # (seq, kind, what, expected args, expected bytes)
    seq = 0
    for what, args in ARG_SENDS:
        _send_args(ep, d, what, seq)
        sent.append((seq, "short", what, args, None))
        seq += 1
    for what, p in medium_payloads(mm):
        want = raw(p)
        if what.startswith("numpy") or what.startswith("max_medium"):
            ep.request_medium(d, h_margs, p, seq, np.int64(seq), -seq)
            args = (seq, -seq)
        else:
            ep.request_medium(d, h_margs, p, seq)
            args = ()
        if what.startswith("mutated"):
            p[:] = b"B" * len(p) if isinstance(p, bytearray) else 66  # reused at once
        sent.append((seq, "medium", what, args, want))
        seq += 1
    wait(ep, lambda: count(s, "args") + count(s, "margs") >= seq, "my left neighbour's AMs")
    ep.barrier()
    with s.lock:
        log = list(s.log)
    return {"rank": ep.rank, "sent": sent, "log": log, "max_medium": mm}


def waits(ep) -> dict:
    """ep.wait_until's arguments, timeouts and errors; a predicate that raises; a predicate
    satisfied by a peer's direct write into my segment (the peer sends nothing else); and
    ep.poll's count."""
    s = setup(ep)
    out: dict = {"rank": ep.rank, "wait_mode": ep.wait_mode}

    def timed(fn):
        t0 = time.monotonic()
        r = outcome(fn)
        return (*r, time.monotonic() - t0)

    out["false kw"] = timed(lambda: ep.wait_until(lambda: False, timeout=0.05))
    out["false positional"] = timed(lambda: ep.wait_until(lambda: False, 0.05))
    out["false int 0"] = timed(lambda: ep.wait_until(lambda: False, timeout=0))
    out["false negative"] = timed(lambda: ep.wait_until(lambda: False, timeout=-1))
    out["true"] = outcome(lambda: ep.wait_until(lambda: True))
    out["truthy"] = outcome(lambda: ep.wait_until(lambda: [1], timeout=1))
    out["pred kw"] = outcome(lambda: ep.wait_until(pred=lambda: True))
    out["pred kw timeout kw"] = outcome(lambda: ep.wait_until(pred=lambda: 0, timeout=0.01))
    out["timeout None"] = outcome(lambda: ep.wait_until(lambda: True, timeout=None))
    calls = [0]

    def later():
        calls[0] += 1
        return calls[0] >= 3

    out["true later"] = (*outcome(lambda: ep.wait_until(later, timeout=5)), calls[0])
    out["pred 5"] = outcome(lambda: ep.wait_until(5))
    out["pred None"] = outcome(lambda: ep.wait_until(None, timeout=0.01))
    out["pred str"] = outcome(lambda: ep.wait_until("x"))
    out["timeout str"] = outcome(lambda: ep.wait_until(lambda: False, timeout="1"))
    out["no args"] = outcome(lambda: ep.wait_until())
    out["3 args"] = outcome(lambda: ep.wait_until(lambda: True, 1, 2))
    out["bad keyword"] = outcome(lambda: ep.wait_until(lambda: True, foo=1))
    raised = [0]

    def raises_at_once():
        raised[0] += 1
        raise ValueError("pred failed at once")

    out["pred raises at once"] = (*outcome(lambda: ep.wait_until(raises_at_once)), raised[0])
    third = [0]

    def raises_third():
        third[0] += 1
        if third[0] >= 3:
            raise ValueError(f"pred failed on call {third[0]}")
        return False

    out["pred raises later"] = outcome(lambda: ep.wait_until(raises_third, timeout=5))
    # the engine still works after a predicate raised
    flush(ep, s)
    out["flush after raise"] = count(s, "pong")

    # a peer's direct write satisfies my predicate; the peer sends nothing else meanwhile
    off = 4096
    waiter, writer = 0, ep.size - 1
    quiesce(ep)
    if ep.rank == writer:
        time.sleep(0.2)
        ep.put(waiter, off, b"\x07" * 8)
        ep.bootstrap.barrier()  # sends no AM
    elif ep.rank == waiter:
        t0 = time.monotonic()
        seg = ep.segment
        ok = ep.wait_until(lambda: seg[off] == 7 and seg[off + 7] == 7, timeout=10)
        out["direct write"] = (ok, time.monotonic() - t0)
        ep.bootstrap.barrier()
    else:
        ep.bootstrap.barrier()

    # ep.poll returns how many handlers it ran: rank 0 tells the last rank to go (an AM),
    # then only polls; the last rank sends k requests, then waits in a bootstrap barrier
    # (no AM). The handler notes whether it ran inside rank 0's ep.poll().
    k = 5
    quiesce(ep)
    sender = ep.size - 1
    if ep.rank == sender:
        wait(ep, lambda: count(s, "go") >= 1, "the go")
        time.sleep(0.05)  # rank 0 is past the poll that ends its request_short by now
        for i in range(k):
            ep.request_short(0, h_count_poll, i)
    elif ep.rank == 0:
        polled = []
        ep.request_short(sender, h_go)
        deadline = time.monotonic() + WAIT_S
        s.poll_thread = threading.get_ident()
        while count(s, "count_poll") < k and time.monotonic() < deadline:
            s.polling = True
            n = ep.poll()
            s.polling = False
            if n:
                polled.append(n)
        out["poll"] = {"polled": polled, "count": count(s, "count_poll"),
                       "in_poll": count(s, "in_poll"), "same_process": ep.same_process(sender),
                       "threads_per_proc": ep.threads_per_proc}
    ep.bootstrap.barrier()  # no AM (a barrier round) reaches rank 0 while it counts
    ep.barrier()
    return out


def rma(ep) -> dict:
    """ep.put/ep.get to my right neighbour with positional and keyword arguments, every kind
    of out buffer, numpy ranks/offsets, and bad input (bounds, types)."""
    setup(ep)
    d = right(ep)
    seg = ep.config.segment_size
    ep.segment[:4096] = np.frombuffer(pattern(ep.rank, 4096), dtype=np.uint8)
    ep.barrier()
    theirs = pattern(d, 4096)
    out: dict = {"rank": ep.rank, "seg": seg}
    ok: dict = {}

    g = ep.get(d, 0, 8)
    ok["get 3 args"] = (type(g).__name__, bytes(g) == theirs[:8])
    g = ep.get(d, 8, 8, None)
    ok["get out None"] = (type(g).__name__, bytes(g) == theirs[8:16])
    g = ep.get(src=d, offset=16, nbytes=4)
    ok["get all keywords"] = (type(g).__name__, bytes(g) == theirs[16:20])
    buf = bytearray(8)
    r = ep.get(d, 0, 8, out=buf)
    ok["get out keyword"] = (r is buf, bytes(buf) == theirs[:8])
    buf = bytearray(8)
    r = ep.get(d, 24, 8, buf)
    ok["get out positional"] = (r is buf, bytes(buf) == theirs[24:32])
    buf = bytearray(16)
    r = ep.get(d, 32, 8, out=buf)
    ok["get out larger"] = (r is buf, bytes(buf) == theirs[32:40] + bytes(8))
    arr = np.zeros(2, "f8")
    r = ep.get(d, 40, 16, arr)
    ok["get numpy f8 out"] = (r is arr, arr.tobytes() == theirs[40:56])
    arr = np.zeros(16, "u1")
    r = ep.get(d, 56, 16, out=arr)
    ok["get numpy u1 out kw"] = (r is arr, arr.tobytes() == theirs[56:72])
    mv = memoryview(bytearray(4))
    r = ep.get(d, 72, 4, mv)
    ok["get memoryview out"] = (r is mv, mv.tobytes() == theirs[72:76])
    g = ep.get(d, 0, 0)
    ok["get 0 bytes"] = (type(g).__name__, bytes(g) == b"")
    g = ep.get(np.int64(d), np.int64(80), np.int64(4))
    ok["get numpy ints"] = (type(g).__name__, bytes(g) == theirs[80:84])
    g = ep.get(d, seg - 4, 4)
    ok["get last bytes"] = (type(g).__name__, len(g) == 4)

    # puts into my right neighbour's segment (checked by it after a barrier)
    base = 8192
    ep.put(d, base, b"put3")
    ep.put(dest=d, offset=base + 16, data=bytearray(b"putkw"))
    ep.put(d, base + 32, data=np.arange(4, dtype="u1"))
    ep.put(d, base + 48, memoryview(b"mview"))
    ep.put(d, base + 64, np.arange(20, dtype="u1")[::2])
    ep.put(np.int64(d), np.int64(base + 96), b"numpy")
    ep.put(d, base + 112, b"")
    ep.put(d, seg - 3, b"end")
    src = bytearray(b"reuse")
    ep.put(d, base + 128, src)
    src[:] = b"XXXXX"  # reused at once
    g = ep.get(d, base, 4)  # a get after a put to the same place sees it
    ok["get after put"] = (type(g).__name__, bytes(g) == b"put3")
    # the nbi forms (node-local: C, complete at once; else completed by wait_nbi)
    src = bytearray(b"nbi01")
    ep.put_nbi(d, base + 144, src)
    src[:] = b"XXXXX"  # reused at once
    ep.put_nbi(d, base + 160, b"bulkT", bulk=True)
    ep.put_nbi(dest=d, offset=base + 176, data=np.frombuffer(b"bulkF", "u1"), bulk=False)
    buf = bytearray(8)
    ep.get_nbi(d, 24, 8, buf)
    arr = np.zeros(4, "u1")
    ep.get_nbi(src=d, offset=80, nbytes=4, out=arr)
    ep.wait_nbi()
    ok["get_nbi out"] = (True, bytes(buf) == theirs[24:32])
    ok["get_nbi numpy out kw"] = (True, arr.tobytes() == theirs[80:84])
    # the handle forms (node-local: C, the handle complete on return; else a reply's)
    src = bytearray(b"nb001")
    hs = [ep.put_nb(d, base + 192, src),
          ep.put_nb(d, base + 208, b"nbblk", bulk=True),
          ep.put_nb(dest=d, offset=base + 224, data=np.frombuffer(b"nbkw1", "u1"), bulk=False)]
    src[:] = b"XXXXX"  # reused at once
    ok["put_nb handles"] = (True, [h.wait() for h in hs] == [None] * 3
                            and all(h.done and h.kind == "put" for h in hs))
    h = ep.get_nb(d, 0, 8)
    g = h.wait()
    ok["get_nb"] = (type(g).__name__, bytes(g) == theirs[:8] and h.wait() is g)
    buf = bytearray(8)
    h = ep.get_nb(d, 24, 8, buf)
    ok["get_nb out positional"] = (h.wait() is buf, bytes(buf) == theirs[24:32])
    arr = np.zeros(4, "u1")
    h = ep.get_nb(d, 80, 4, out=arr)
    ok["get_nb numpy out kw"] = (h.wait() is arr, arr.tobytes() == theirs[80:84])
    h = ep.get_nb(src=d, offset=16, nbytes=4)
    ok["get_nb all keywords"] = (type(h.wait()).__name__, bytes(h.wait()) == theirs[16:20])
    out["nb done at once"] = (ep.get_nb(d, 0, 8).done, ep.put_nb(d, base + 240, b"x").done)
    h = ep.get_nb(np.int64(d), np.int64(80), np.int64(4))
    g = h.wait()
    ok["get_nb numpy ints"] = (h.kind == "get" and h.done,
                               bytes(g) == theirs[80:84] and repr(h) == "<amnet.Handle get done>")

    bad = [
        ("get out too small", lambda: ep.get(d, 0, 16, bytearray(8))),
        ("get out too small kw", lambda: ep.get(d, 0, 16, out=bytearray(8))),
        ("get out numpy too small", lambda: ep.get(d, 0, 17, np.zeros(2, "f8"))),
        ("get out read-only", lambda: ep.get(d, 0, 4, b"abcd")),
        ("get out strided", lambda: ep.get(d, 0, 4, np.zeros(16, "u1")[::2])),
        ("get out str", lambda: ep.get(d, 0, 4, "abcd")),
        ("get nbytes -1", lambda: ep.get(d, 0, -1)),
        ("get nbytes bool", lambda: ep.get(d, 0, True)),
        ("get nbytes float", lambda: ep.get(d, 0, 1.0)),
        ("get offset -1", lambda: ep.get(d, -1, 1)),
        ("get past end", lambda: ep.get(d, seg - 1, 2)),
        ("get at end", lambda: ep.get(d, seg, 1)),
        ("get whole+1", lambda: ep.get(d, 0, seg + 1)),
        ("get past end out", lambda: ep.get(d, seg - 1, 2, bytearray(2))),
        ("get past end kw", lambda: ep.get(d, seg - 1, 2, out=bytearray(2))),
        ("get offset 2**64", lambda: ep.get(d, 1 << 64, 1)),
        ("get offset float", lambda: ep.get(d, 1.0, 1)),
        ("get offset bool", lambda: ep.get(d, True, 1)),
        ("get src size", lambda: ep.get(ep.size, 0, 1)),
        ("get src True", lambda: ep.get(True, 0, 1)),
        ("get src '1'", lambda: ep.get("1", 0, 1)),
        ("get too few args", lambda: ep.get(d, 0)),
        ("get bad keyword", lambda: ep.get(d, 0, 1, into=bytearray(1))),
        ("put offset -1", lambda: ep.put(d, -1, b"a")),
        ("put past end", lambda: ep.put(d, seg - 1, b"ab")),
        ("put at end", lambda: ep.put(d, seg, b"a")),
        ("put empty past end", lambda: ep.put(d, seg + 1, b"")),
        ("put whole+1", lambda: ep.put(d, 0, bytes(seg + 1))),
        ("put past end kw", lambda: ep.put(d, seg - 1, data=b"ab")),
        ("put past end numpy", lambda: ep.put(d, seg - 1, np.zeros(2, "u1"))),
        ("put offset 2**64", lambda: ep.put(d, 1 << 64, b"x")),
        ("put offset float", lambda: ep.put(d, 1.0, b"x")),
        ("put offset bool", lambda: ep.put(d, True, b"x")),
        ("put dest size", lambda: ep.put(ep.size, 0, b"x")),
        ("put dest True", lambda: ep.put(True, 0, b"x")),
        ("put dest -1", lambda: ep.put(-1, 0, b"x")),
        ("put str data", lambda: ep.put(d, 0, "text")),
        ("put None data", lambda: ep.put(d, 0, None)),
        ("put too few args", lambda: ep.put(d, 0)),
        ("put bad keyword", lambda: ep.put(d, 0, payload=b"x")),
        ("put_nbi past end", lambda: ep.put_nbi(d, seg - 1, b"ab")),
        ("put_nbi dest size", lambda: ep.put_nbi(ep.size, 0, b"x")),
        ("put_nbi bulk str", lambda: ep.put_nbi(d, 0, b"x", bulk="yes")),
        ("put_nbi str data", lambda: ep.put_nbi(d, 0, "text")),
        ("get_nbi out None", lambda: ep.get_nbi(d, 0, 4, None)),
        ("get_nbi out too small", lambda: ep.get_nbi(d, 0, 16, bytearray(8))),
        ("get_nbi past end", lambda: ep.get_nbi(d, seg - 1, 2, bytearray(2))),
        ("put_nb past end", lambda: ep.put_nb(d, seg - 1, b"ab")),
        ("put_nb dest size", lambda: ep.put_nb(ep.size, 0, b"x")),
        ("put_nb bulk str", lambda: ep.put_nb(d, 0, b"x", bulk="yes")),
        ("put_nb str data", lambda: ep.put_nb(d, 0, "text")),
        ("put_nb bad keyword", lambda: ep.put_nb(d, 0, b"x", bluk=True)),
        ("get_nb out too small", lambda: ep.get_nb(d, 0, 16, bytearray(8))),
        ("get_nb out too small kw", lambda: ep.get_nb(d, 0, 16, out=bytearray(8))),
        ("get_nb out read-only", lambda: ep.get_nb(d, 0, 4, b"abcd")),
        ("get_nb past end", lambda: ep.get_nb(d, seg - 1, 2)),
        ("get_nb src True", lambda: ep.get_nb(True, 0, 1)),
        ("get_nb bad keyword", lambda: ep.get_nb(d, 0, 1, into=bytearray(1))),
    ]
    out["errors"] = [(what, *outcome(fn)) for what, fn in bad]
    out["ok"] = ok
    ep.barrier()  # my left neighbour's puts are in my segment
    mine = ep.segment
    out["landed"] = {
        "put3": bytes(mine[base:base + 4]) == b"put3",
        "putkw": bytes(mine[base + 16:base + 21]) == b"putkw",
        "numpy": bytes(mine[base + 32:base + 36]) == bytes(range(4)),
        "mview": bytes(mine[base + 48:base + 53]) == b"mview",
        "strided": bytes(mine[base + 64:base + 74]) == bytes(range(0, 20, 2)),
        "numpy ints": bytes(mine[base + 96:base + 101]) == b"numpy",
        "end": bytes(mine[seg - 3:seg]) == b"end",
        "reused source": bytes(mine[base + 128:base + 133]) == b"reuse",
        "put_nbi": bytes(mine[base + 144:base + 149]) == b"nbi01",
        "put_nbi bulk": bytes(mine[base + 160:base + 165]) == b"bulkT",
        "put_nbi keywords": bytes(mine[base + 176:base + 181]) == b"bulkF",
        "put_nb": bytes(mine[base + 192:base + 197]) == b"nb001",
        "put_nb bulk": bytes(mine[base + 208:base + 213]) == b"nbblk",
        "put_nb keywords": bytes(mine[base + 224:base + 229]) == b"nbkw1",
        "bad puts wrote nothing": bytes(mine[0:4096]) == pattern(ep.rank, 4096)
        and not mine[seg - 8:seg - 3].any(),
    }
    ep.barrier()
    return out


OVERFLOW = [  # offsets whose sum with the length overflows int64
    ("put offset 2**63-1", lambda ep, d: ep.put(d, I64_MAX, b"x")),
    ("put offset 2**63-8, 16 bytes", lambda ep, d: ep.put(d, I64_MAX - 7, bytes(16))),
    ("get offset 2**63-1", lambda ep, d: ep.get(d, I64_MAX, 1)),
    ("get offset 2**63-1 out", lambda ep, d: ep.get(d, I64_MAX, 1, bytearray(1))),
    ("get 2**62 bytes at 2**62", lambda ep, d: ep.get(d, 1 << 62, 1 << 62)),
]


def rma_overflow(ep, what: str, own: bool) -> tuple[str, str]:
    """One put/get whose offset + length overflows int64, to my right neighbour (or to
    myself): it must be a SegmentBoundsError (each in its own job: a crash ends the job)."""
    fn = dict(OVERFLOW)[what]
    d = ep.rank if own else right(ep)
    r = outcome(lambda: fn(ep, d))
    ep.barrier()
    return r


def nb_starts_poll(ep) -> dict:
    """Rank 0 loops on node-local put_nb/get_nb (complete at once, in C) and nothing else,
    waiting for a Short AM from rank 2 (on the other node): its handler runs on rank 0's
    process only because every nonblocking start polls."""
    s = setup(ep)
    out = {}
    if ep.rank == 0:
        for k, what in enumerate(("get_nb", "put_nb"), 1):
            start = (lambda: ep.get_nb(1, 0, 8)) if what == "get_nb" else \
                (lambda: ep.put_nb(1, 0, b"x"))
            deadline = time.monotonic() + 5.0
            while count(s, "count") < k and time.monotonic() < deadline:
                start()
            out[what] = count(s, "count") >= k
            ep.request_short(2, h_count, 1)  # go on (served in rank 2's wait)
    elif ep.rank == 2:
        for k in (1, 2):
            time.sleep(0.2)  # rank 0 is in its loop by now (not in the barrier before it)
            ep.request_short(0, h_count, k)
            wait(ep, lambda k=k: count(s, "count") >= k, "rank 0's go")
    ep.barrier()
    return out


def after_finalize(ep) -> dict:
    """Every C entry point after amnet.finalize(): InitError."""
    d = right(ep)
    ep.barrier()
    amnet.finalize()
    calls = [
        ("put", lambda: ep.put(d, 0, b"x")),
        ("put own", lambda: ep.put(ep.rank, 0, b"x")),
        ("put keyword", lambda: ep.put(d, 0, data=b"x")),
        ("get", lambda: ep.get(d, 0, 1)),
        ("get own", lambda: ep.get(ep.rank, 0, 1)),
        ("get out", lambda: ep.get(d, 0, 1, bytearray(1))),
        ("get out keyword", lambda: ep.get(d, 0, 1, out=bytearray(1))),
        ("put_nb", lambda: ep.put_nb(d, 0, b"x")),
        ("get_nb own", lambda: ep.get_nb(ep.rank, 0, 1)),
        ("get_nb out keyword", lambda: ep.get_nb(d, 0, 1, out=bytearray(1))),
        ("request_short", lambda: ep.request_short(d, h_count, 1)),
        ("request_medium", lambda: ep.request_medium(d, h_mcount, b"x", 1)),
        ("request_long", lambda: ep.request_long(d, h_count, b"x", 0, 1)),
        ("poll", ep.poll),
        ("wait_until", lambda: ep.wait_until(lambda: True)),
        ("wait_until timeout", lambda: ep.wait_until(lambda: False, timeout=0.01)),
    ]
    return {what: outcome(fn)[0] for what, fn in calls}


def handler_errors(ep) -> dict:
    """on_handler_error set: raising handlers (Short and Medium requests run by the drain or
    in-line, a reply handler) call it with (exception, name, source) and the job goes on.
    The callback runs in the handler context (docs/am-guide.md section 5)."""
    s = setup(ep)
    d = right(ep)
    in_cb: list = []

    def on_error(exc, name, src):
        # the restricted context, probed without side effects: a predicate true at once
        in_cb.append((name, outcome(lambda: ep.wait_until(lambda: True))))
        s.errors.append((type(exc).__name__, str(exc), name, src))

    ep.on_handler_error = on_error
    ep.barrier()  # everyone's callback is set before anything is sent
    ep.request_short(d, h_raise_short, 1)
    ep.request_medium(d, h_raise_medium, b"boom", 2)
    ep.request_short(d, h_reply_then_raise, 3)
    flush(ep, s)  # the job goes on; FIFO: my failing requests ran before the ping
    wait(ep, lambda: len(s.errors) >= 4, "the 4 handler failures of this rank")
    ep.barrier()
    ep.on_handler_error = None
    ep.barrier()
    return {"rank": ep.rank, "errors": sorted(s.errors), "in_cb": sorted(in_cb),
            "cb_after": ep.on_handler_error, "counts": dict(s.counts)}


def stats(ep, k: int = 40) -> dict:
    """ep.statistics().handlers_run grows by the handlers run: rank 0 makes k round trips
    (Short and Medium) to rank 1; nothing else runs meanwhile (no AM barrier in the window)."""
    s = setup(ep)
    quiesce(ep)
    h0 = ep.statistics().handlers_run
    ep.bootstrap.barrier()
    if ep.rank == 0:
        for i in range(k):
            if i % 2 == 0:
                ep.request_medium(1, h_margs, b"stats", i)  # h_margs does not reply
            ep.request_short(1, h_ping, i)
            wait(ep, lambda n=i + 1: count(s, "pong") >= n, "pong")
    elif ep.rank == 1:
        wait(ep, lambda: count(s, "ping") >= k, "k pings")
    ep.bootstrap.barrier()
    h1 = ep.statistics().handlers_run
    ran = {k2: count(s, k2) for k2 in ("ping", "pong", "margs")}
    ep.bootstrap.barrier()  # nobody starts the AM barrier below before everyone counted
    ep.barrier()
    return {"rank": ep.rank, "proc": ep.proc, "delta": h1 - h0, "ran": ran}
