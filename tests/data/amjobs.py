"""Jobs and handlers for tests/test_am.py: the core AM API in the spirit of GASNet's
testcore1-5, testam, testsmall/testlarge and testbarrier.

Handlers are module-level functions (every rank registers the same list). They reach their
rank's state through ``ST[token.rank]``: this module is shared by the rank-threads of a process,
and a handler may run on any thread of the destination process, at the same time as another
handler of the same rank (docs/design.md §3): what several handlers update is under the
rank's ``State.lock``.

The jobs check what only a rank can see (payload bytes, segment addresses, the order of
arrivals) and return what they saw -- counts, lists of problems, caught errors -- for the test
to assert on. A list of problems is only half a check, so every job also returns how many
things it checked.
"""

from __future__ import annotations

import threading
import time
import zlib

import jobkit
import numpy as np

import amnet

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
SPECIALS = (I64_MIN, I64_MAX, -1, 0, 1, -(1 << 40), (1 << 62) + 7, -12345, I64_MIN + 1,
            I64_MAX - 1)
WAIT_S = 30.0  # a wait that takes longer than this is a hang: fail with a message


# -- helpers ---------------------------------------------------------------------------------
class State:
    """What one rank's handlers saw."""

    def __init__(self, ep) -> None:
        self.ep = ep
        self.runs = 0  # user handler runs on this rank (every handler below counts itself)
        self.reqs: list[tuple] = []  # what request handlers got
        self.reps: list[tuple] = []  # what reply handlers got
        self.bad: list[str] = []  # problems a handler found
        self.fifo: dict[tuple, int] = {}  # (stream, source) -> next sequence number expected
        self.fifo_seen = 0
        self.ctx: list[tuple] = []  # (where, what, outcome) of context-rule probes
        self.kept = None  # a token kept past its handler
        self.handle = None  # a pending handle for a handler to wait on
        self.phase: dict[int, int] = {}  # barrier phase -> requests received
        self.pongs = 0
        self.lock = threading.Lock()


ST: dict[int, State] = {}


def _st(tok) -> State:
    s = ST[tok.rank]
    with s.lock:  # a rank's handlers may run on several threads at once (in-line AMs)
        s.runs += 1
    return s


wait = jobkit.waiter(WAIT_S)


def make_args(src: int, dst: int, seq: int, n: int) -> tuple[int, ...]:
    """``n`` int64 arguments: the extremes, negatives, and values unique to this message."""
    out = []
    for k in range(n):
        if k % 2 == 0:
            out.append(SPECIALS[(k // 2 + seq) % len(SPECIALS)])
        else:
            out.append(-((src * 1000 + dst) * 100_000 + seq * 17 + k))
    return tuple(out)


def pattern(src: int, dst: int, seq: int, size: int) -> bytes:
    """Deterministic pseudo-random bytes for one message."""
    rng = np.random.default_rng([src, dst, seq, size])
    return rng.integers(0, 256, size, dtype=np.uint8).tobytes()


def crc(b) -> int:
    return zlib.crc32(b)


def setup(ep, handlers=None) -> State:
    """Register the handlers (collective; unless amnet.init(handlers=...) did), make this
    rank's state, and sync."""
    return jobkit.set_up(ep, CORE if handlers is None else handlers, ST, State)


def flush(ep, s: State) -> None:
    """Ping every rank and wait for the pongs: whatever I sent earlier has been handled
    (FIFO per pair)."""
    before = s.pongs
    for d in range(ep.size):
        ep.request_short(d, h_ping, ep.rank)
    wait(ep, lambda: s.pongs >= before + ep.size, "pongs")


def long_req_offset(ep, src: int) -> int:
    return slot(ep) * src


def long_rep_offset(ep, replier: int) -> int:
    return slot(ep) * (ep.size + replier)


def slot(ep) -> int:
    return 2 * ep.max_medium + 4096  # fits the largest Long of the tests


def medium_sizes(max_medium: int) -> list[int]:
    """Empty, one byte, odd sizes, exactly max_medium."""
    return [z for z in (0, 1, 3, 1001) if z < max_medium] + [max_medium]


def long_sizes(max_medium: int) -> list[int]:
    return [*medium_sizes(max_medium), 2 * max_medium + 3]


def _check_segment_view(s: State, view, off: int, where: str) -> None:
    """``view`` must be the bytes of my segment at ``off`` (not a copy)."""
    seg = s.ep.segment
    if not isinstance(view, memoryview):
        s.bad.append(f"{where}: handler got {type(view).__name__}, not a memoryview")
        return
    a = np.frombuffer(view, dtype=np.uint8)
    if a.size:
        base = seg.__array_interface__["data"][0]
        addr = a.__array_interface__["data"][0]
        if addr != base + off:
            s.bad.append(f"{where}: view at segment offset {addr - base}, expected {off}")
        if view.readonly:
            s.bad.append(f"{where}: the Long view is read-only")
        if bytes(seg[off:off + a.size]) != view.tobytes():
            s.bad.append(f"{where}: segment bytes differ from the handler's view")


# -- handlers: request/reply echo ------------------------------------------------------------
def h_short_req(tok, *args):
    s = _st(tok)
    s.reqs.append(("short", tok.source, 0, 0, args, tok.is_request))
    tok.reply_short(h_short_rep, *args)


def h_short_rep(tok, *args):
    s = _st(tok)
    s.reps.append(("short", tok.source, 0, 0, args, tok.is_request))


def h_medium_req(tok, payload, *args):
    s = _st(tok)
    if not isinstance(payload, memoryview):
        s.bad.append(f"medium request payload is a {type(payload).__name__}")
    s.reqs.append(("medium", tok.source, payload.nbytes, crc(payload), args, tok.is_request))
    tok.reply_medium(h_medium_rep, payload, *args)  # echo the bytes back


def h_medium_rep(tok, payload, *args):
    s = _st(tok)
    if not isinstance(payload, memoryview):
        s.bad.append(f"medium reply payload is a {type(payload).__name__}")
    s.reps.append(("medium", tok.source, payload.nbytes, crc(payload), args, tok.is_request))


def h_long_req(tok, view, *args):
    s = _st(tok)
    off = long_req_offset(s.ep, tok.source)
    _check_segment_view(s, view, off, f"long request from {tok.source}")
    s.reqs.append(("long", tok.source, view.nbytes, crc(view), args, tok.is_request))
    # echo the deposited bytes back into the requester's segment
    tok.reply_long(h_long_rep, view, long_rep_offset(s.ep, tok.rank), *args)


def h_long_rep(tok, view, *args):
    s = _st(tok)
    off = long_rep_offset(s.ep, tok.source)
    _check_segment_view(s, view, off, f"long reply from {tok.source}")
    s.reps.append(("long", tok.source, view.nbytes, crc(view), args, tok.is_request))


def h_ping(tok, x):
    _st(tok)
    tok.reply_short(h_pong, x)


def h_pong(tok, x):
    s = _st(tok)
    with s.lock:
        s.pongs += 1


# -- handlers: FIFO streams ------------------------------------------------------------------
def _fifo(s: State, stream: str, src: int, seq: int) -> None:
    key = (stream, src)
    with s.lock:  # the count is shared by the handlers of every stream
        want = s.fifo.get(key, 0)
        if seq != want:
            s.bad.append(f"{stream} from {src}: got sequence number {seq}, expected {want}")
        s.fifo[key] = seq + 1
        s.fifo_seen += 1


def h_fifo_short(tok, seq, tag):
    s = _st(tok)
    _fifo(s, "short request", tok.source, seq)
    if tag != -seq:
        s.bad.append(f"fifo short: tag {tag} for seq {seq}")
    tok.reply_short(h_fifo_short_rep, seq)


def h_fifo_short_rep(tok, seq):
    _fifo(_st(tok), "short reply", tok.source, seq)


def h_fifo_medium(tok, payload, seq):
    s = _st(tok)
    _fifo(s, "medium request", tok.source, seq)
    if payload.tobytes() != fifo_payload(tok.source, seq):
        s.bad.append(f"fifo medium from {tok.source}: payload of seq {seq} is wrong")
    tok.reply_medium(h_fifo_medium_rep, payload, seq)


def h_fifo_medium_rep(tok, payload, seq):
    s = _st(tok)
    _fifo(s, "medium reply", tok.source, seq)
    if payload.tobytes() != fifo_payload(s.ep.rank, seq):
        s.bad.append(f"fifo medium reply from {tok.source}: payload of seq {seq} is wrong")


def fifo_payload(src: int, seq: int) -> bytes:
    return (seq * 1_000_003 + src).to_bytes(8, "little") * (seq % 7)


# -- handlers: declared categories and argument counts ---------------------------------------
@amnet.handler("short")
def h_decl_short(tok, a):
    s = _st(tok)
    s.reqs.append(("decl_short", tok.source, 0, 0, (a,), tok.is_request))
    tok.reply_short(h_short_rep, a)


@amnet.handler("medium", nargs=2)
def h_decl_med2(tok, payload, a, b):
    s = _st(tok)
    s.reqs.append(("decl_med2", tok.source, payload.nbytes, crc(payload), (a, b),
                   tok.is_request))
    try:  # a medium-only handler named in a Short reply
        tok.reply_short(h_decl_med2, a, b)
    except amnet.HandlerCategoryError as e:
        s.ctx.append(("decl_med2", "reply_short to a medium handler", _outcome(e)))
    try:  # the right category, the wrong count
        tok.reply_medium(h_decl_med2, payload, a)
    except amnet.AMArgumentError as e:
        s.ctx.append(("decl_med2", "reply_medium with 1 of 2 args", _outcome(e)))
    tok.reply_medium(h_medium_rep, payload, a, b)


def h_unregistered(tok):  # never registered
    raise AssertionError("h_unregistered ran")


def h_extra_req(tok, x):
    s = _st(tok)
    s.reqs.append(("extra", tok.source, 0, 0, (x,), tok.is_request))
    tok.reply_short(h_extra_rep, x + 1)


def h_extra_rep(tok, x):
    s = _st(tok)
    s.reps.append(("extra", tok.source, 0, 0, (x,), tok.is_request))


# -- handlers: the restricted context --------------------------------------------------------
def _outcome(e: BaseException | None) -> tuple[str, str]:
    return ("no error", "") if e is None else (type(e).__name__, str(e))


def _probe(s: State, where: str, what: str, fn) -> None:
    try:
        fn()
    except BaseException as e:  # recorded; the test says which type was right
        s.ctx.append((where, what, _outcome(e)))
    else:
        s.ctx.append((where, what, _outcome(None)))


def h_ctx_req(tok, tag):
    s = _st(tok)
    ep = s.ep
    src = tok.source
    tok.reply_short(h_ctx_rep, tag)  # the one allowed reply
    w = "request handler"
    _probe(s, w, "second reply_short", lambda: tok.reply_short(h_ctx_rep, tag))
    _probe(s, w, "second reply_medium", lambda: tok.reply_medium(h_medium_rep, b"x", tag))
    _probe(s, w, "second reply_long", lambda: tok.reply_long(h_long_rep, b"x", 0, tag))
    _probe(s, w, "request_short", lambda: ep.request_short(src, h_short_req, 1))
    _probe(s, w, "request_medium", lambda: ep.request_medium(src, h_medium_req, b"x"))
    _probe(s, w, "request_long", lambda: ep.request_long(src, h_long_req, b"x", 0))
    _probe(s, w, "ep.poll", ep.poll)
    _probe(s, w, "ep.wait_until", lambda: ep.wait_until(lambda: True))
    _probe(s, w, "ep.barrier", ep.barrier)
    _probe(s, w, "ep.barrier_notify", ep.barrier_notify)
    _probe(s, w, "ep.put", lambda: ep.put(src, 0, b"x"))
    _probe(s, w, "ep.get", lambda: ep.get(src, 0, 1))
    _probe(s, w, "ep.put_nb", lambda: ep.put_nb(src, 0, b"x"))
    _probe(s, w, "ep.fence", ep.fence)
    _probe(s, w, "ep.register_handlers", lambda: ep.register_handlers([h_extra_req]))
    s.kept = tok


def h_ctx_rep(tok, tag):
    s = _st(tok)
    ep = s.ep
    s.reps.append(("ctx", tok.source, 0, 0, (tag,), tok.is_request))
    w = "reply handler"
    _probe(s, w, "reply_short", lambda: tok.reply_short(h_short_rep, tag))
    _probe(s, w, "reply_medium", lambda: tok.reply_medium(h_medium_rep, b"x", tag))
    _probe(s, w, "request_short", lambda: ep.request_short(tok.source, h_short_req, 1))
    _probe(s, w, "ep.poll", ep.poll)
    _probe(s, w, "ep.wait_until", lambda: ep.wait_until(lambda: True))


def h_wait_handle(tok):
    s = _st(tok)
    h = s.handle
    s.ctx.append(("request handler", "handle pending", ("done" if h.done else "pending", "")))
    _probe(s, "request handler", "handle.wait", h.wait)
    tok.reply_short(h_pong, 0)


# -- handlers: errors escaping handlers ------------------------------------------------------
def h_raise_req(tok, tag):
    _st(tok)
    tok.reply_short(h_raise_rep, tag)
    raise ValueError(f"request handler fails on rank {tok.rank} (tag {tag})")


def h_raise_rep(tok, tag):
    _st(tok)
    raise KeyError(f"reply handler fails on rank {tok.rank} (tag {tag})")


def h_boom(tok, tag):
    _st(tok)
    raise ValueError(f"boom {tag} in the handler on rank {tok.rank}")


def h_badreply_req(tok, tag):
    """Bad replies are refused inside the handler; the good one after them goes out."""
    s = _st(tok)
    w = "bad reply"
    seg = s.ep.config.segment_size
    _probe(s, w, "17 args", lambda: tok.reply_short(h_short_rep, *range(17)))
    _probe(s, w, "str arg", lambda: tok.reply_short(h_short_rep, "1"))
    _probe(s, w, "arg 2**63", lambda: tok.reply_short(h_short_rep, 1 << 63))
    _probe(s, w, "medium over max",
           lambda: tok.reply_medium(h_medium_rep, bytes(s.ep.max_medium + 1)))
    _probe(s, w, "long past segment", lambda: tok.reply_long(h_long_rep, b"ab", seg - 1))
    _probe(s, w, "unregistered", lambda: tok.reply_short(h_unregistered))
    _probe(s, w, "str payload", lambda: tok.reply_medium(h_medium_rep, "text"))
    tok.reply_short(h_short_rep, tag)


# -- handlers: barrier phases ----------------------------------------------------------------
def h_phase(tok, k):
    s = _st(tok)
    with s.lock:
        s.phase[k] = s.phase.get(k, 0) + 1
    tok.reply_short(h_pong, k)


# -- handler tables for init/register mismatch tests -----------------------------------------
def h_a(tok, *args):
    _st(tok).reqs.append(("h_a", tok.source, 0, 0, args, tok.is_request))


def h_b(tok, *args):
    _st(tok).reqs.append(("h_b", tok.source, 0, 0, args, tok.is_request))


def h_c(tok, *args):
    _st(tok).reqs.append(("h_c", tok.source, 0, 0, args, tok.is_request))


CORE = [h_short_req, h_short_rep, h_medium_req, h_medium_rep, h_long_req, h_long_rep,
        h_ping, h_pong, h_fifo_short, h_fifo_short_rep, h_fifo_medium, h_fifo_medium_rep,
        h_decl_short, h_decl_med2, h_ctx_req, h_ctx_rep, h_wait_handle, h_raise_req,
        h_raise_rep, h_boom, h_badreply_req, h_phase]
EXTRA = [h_extra_req, h_extra_rep]


def mismatch_table(variant: str, who: str) -> list:
    """The handler list a rank registers in a mismatch test. ``who`` is the rank, or the
    rank-thread's name in a script (rank 1 and 3 are ``amnet-rank-1`` / ``amnet-rank-3``
    when every process has two rank-threads)."""
    if variant == "names1_order3":  # rank 1: another name at position 1; rank 3: swapped
        if who in (1, "amnet-rank-1"):
            return [h_a, h_c]
        if who in (3, "amnet-rank-3"):
            return [h_b, h_a]
    elif variant == "order3":
        if who in (3, "amnet-rank-3"):
            return [h_b, h_a]
    elif variant == "longer2":
        if who in (2, "amnet-rank-2"):
            return [h_a, h_b, h_c]
    return [h_a, h_b]


# -- the core job ----------------------------------------------------------------------------
def core(ep) -> dict:
    """Everything of the core AM API that one job can check (see test_am.py)."""
    s = setup(ep)
    assert 2 * ep.size * slot(ep) <= ep.config.segment_size, "segment too small for the Longs"
    out: dict = {"rank": ep.rank, "size": ep.size, "max_medium": ep.max_medium}
    for name, section in SECTIONS:
        t0 = time.monotonic()
        out[name] = section(ep, s)  # an exception here fails the job, naming the rank
        out.setdefault("seconds", {})[name] = round(time.monotonic() - t0, 3)
        ep.barrier()
    out["bad"] = list(s.bad)
    st = ep.statistics()
    out["refused"] = st.refused
    out["pshm"] = None if st.pshm is None else (st.pshm.backing, st.pshm.depth,
                                                st.pshm.processes, st.pshm.sent > 0)
    out["thread_safe"] = ep.config.thread_safe
    return out


def sec_echo(ep, s: State) -> dict:
    """Short, Medium and Long request -> reply of the same category, every argument count
    0..16, payloads of 0, 1, odd sizes and max_medium, to every rank (me included)."""
    problems: list[str] = []
    checked = {"short": 0, "medium": 0, "long": 0}
    seq = 0
    plan = [("short", None)] + [("medium", z) for z in medium_sizes(ep.max_medium)] + \
        [("long", z) for z in long_sizes(ep.max_medium)]
    for cat, size in plan:
        for nargs in range(amnet.MAX_ARGS + 1):
            seq += 1
            start = len(s.reps)
            expect = {}
            for d in range(ep.size):
                args = make_args(ep.rank, d, seq, nargs)
                if cat == "short":
                    ep.request_short(d, h_short_req, *args)
                    expect[d] = ("short", d, 0, 0, args, False)
                    continue
                p = pattern(ep.rank, d, seq, size)
                if cat == "medium":
                    ep.request_medium(d, h_medium_req, p, *args)
                else:
                    ep.request_long(d, h_long_req, p, long_req_offset(ep, ep.rank), *args)
                expect[d] = (cat, d, size, crc(p), args, False)
            wait(ep, lambda n=start + ep.size: len(s.reps) >= n, f"{cat} replies")
            got = s.reps[start:]
            if sorted(got, key=lambda g: g[1]) != [expect[d] for d in range(ep.size)]:
                problems.append(f"{cat} size {size} nargs {nargs}: replies {got!r:.400} "
                                f"expected {[expect[d] for d in range(ep.size)]!r:.400}")
            if cat == "long":  # the replies' bytes are in my segment where they landed
                for d in range(ep.size):
                    off = long_rep_offset(ep, d)
                    if bytes(ep.segment[off:off + size]) != pattern(ep.rank, d, seq, size):
                        problems.append(f"long reply bytes from {d} (size {size}) not at "
                                        f"offset {off}")
            checked[cat] += len(got)
    # what the request handlers saw, from every source: right args, payload and flags
    seen = {"short": 0, "medium": 0, "long": 0}
    ep.barrier()  # every rank's requests to me have been handled (they got their replies)
    for cat, *_, is_req in s.reqs:
        seen[cat] += 1
        if not is_req:
            problems.append(f"{cat} request handler saw token.is_request False")
    s.reqs.clear()
    s.reps.clear()
    return {"problems": problems, "checked": checked, "seen": seen}


def sec_fifo(ep, s: State, k: int = 150) -> dict:
    """A stream of k Short and k Medium requests to every rank, not waiting in between:
    each arrives in order, and so do the replies."""
    for seq in range(k):
        for d in range(ep.size):
            ep.request_short(d, h_fifo_short, seq, -seq)
            ep.request_medium(d, h_fifo_medium, fifo_payload(ep.rank, seq), seq)
    total = 4 * k * ep.size  # requests from everyone to me + replies to me
    wait(ep, lambda: all(s.fifo.get((st, d), 0) == k for st in ("short reply", "medium reply")
             for d in range(ep.size)), "FIFO replies")
    ep.barrier()
    return {"seen": s.fifo_seen, "expected": total,
            "last": {f"{st}|{src}": v for (st, src), v in sorted(s.fifo.items())}}


def sec_tables(ep, s: State) -> dict:
    """Names, declared categories and counts, handlers added later."""
    res: dict = {}
    d = (ep.rank + 1) % ep.size
    runs0 = s.runs

    def err(fn):
        try:
            fn()
        except BaseException as e:
            return (type(e).__name__, str(e), isinstance(e, TypeError))
        return ("no error", "", False)

    ep.barrier()  # runs0 counts everything before; nothing of this section ran yet
    res["unregistered_fn"] = err(lambda: ep.request_short(d, h_unregistered))
    res["unregistered_name"] = err(lambda: ep.request_short(d, "amjobs.h_nope"))
    res["extra_before"] = err(lambda: ep.request_short(d, h_extra_req, 1))
    res["short_as_medium"] = err(lambda: ep.request_medium(d, h_decl_short, b"x", 1))
    res["short_as_long"] = err(lambda: ep.request_long(d, h_decl_short, b"x", 0, 1))
    res["medium_as_short"] = err(lambda: ep.request_short(d, h_decl_med2, 1, 2))
    res["nargs_1_of_2"] = err(lambda: ep.request_medium(d, h_decl_med2, b"x", 1))
    res["nargs_3_of_2"] = err(lambda: ep.request_medium(d, h_decl_med2, b"x", 1, 2, 3))
    flush(ep, s)
    ep.barrier()  # every rank's flush reached me ...
    res["runs_during_errors"] = s.runs - runs0 - 2 * ep.size  # minus the flush
    ep.barrier()  # ... and nobody sends again before I counted

    # declared handlers used right; a handler named by its string; the name list
    start = len(s.reps)
    ep.request_short(d, h_decl_short, 5)
    ep.request_medium(d, h_decl_med2, b"hello", 6, 7)
    ep.request_short(d, "amjobs.h_short_req", 8)
    wait(ep, lambda: len(s.reps) >= start + 3, "declared-handler replies")
    res["declared_ok"] = sorted(r[4] for r in s.reps[start:])
    res["names"] = list(ep.handlers)

    # added collectively, usable at once (the peer may not have returned from the call yet)
    ep.register_handlers(EXTRA)  # serves AMs while it waits (peers may still flush)
    start = len(s.reps)
    ep.request_short(d, h_extra_req, 10 * ep.rank)
    wait(ep, lambda: len(s.reps) >= start + 1, "extra reply")
    res["extra_reply"] = s.reps[start]
    res["names_after"] = list(ep.handlers)
    res["register_again"] = err(lambda: ep.register_handlers([h_extra_req]))
    ep.barrier()
    res["decl_reply_errors"] = list(s.ctx)  # h_decl_med2's refused replies
    s.ctx.clear()
    s.reqs.clear()
    s.reps.clear()
    return res


def sec_context(ep, s: State) -> dict:
    """GASNet's restricted handler context: each breach is an AMContextError inside the
    handler; the job goes on."""
    s.ctx.clear()
    runs0 = s.runs
    start = len(s.reps)
    ep.barrier()
    for d in range(ep.size):
        ep.request_short(d, h_ctx_req, 100 + d)
    wait(ep, lambda: len(s.reps) >= start + ep.size, "context replies")
    ep.barrier()  # every rank's h_ctx_req ran on me (their replies came)
    # a reply after the handler returned, with the token it kept
    kept = s.kept
    try:
        kept.reply_short(h_ctx_rep, 1)
        late = ("no error", "")
    except BaseException as e:
        late = _outcome(e)
    # handle.wait in a handler (rank 0's), on a handle that cannot complete yet: its put
    # goes to the last rank, whose process sleeps without progress meanwhile. (With one
    # process there is no such rank: put_nb polls, so a put to myself may be done at once.
    # With PSHM on and the last rank on my node, a put to it is a direct copy, complete on
    # return: docs/design.md §5.)
    ep.barrier()
    direct = ep.segment_view(ep.size - 1) is not None
    local_put_done = None
    if ep.procs == 1:
        pass
    elif direct:
        if ep.rank == 0:
            h = ep.put_nb(ep.size - 1, 0, b"direct")
            local_put_done = h.done and h.test()
    elif ep.same_process(ep.size - 1):
        time.sleep(0.7)
    elif ep.rank == 0:
        time.sleep(0.2)  # the last rank's process has left the barrier and sleeps
        s.handle = ep.put_nb(ep.size - 1, 0, b"pending")
        p0 = s.pongs
        ep.request_short(ep.rank, h_wait_handle)
        wait(ep, lambda: s.pongs > p0, "h_wait_handle")
        s.handle.wait()
    flush(ep, s)
    ep.barrier()
    replies = sorted(r[4][0] for r in s.reps[start:] if r[0] == "ctx")
    s.reps.clear()
    return {"probes": list(s.ctx), "late_reply": late, "ctx_replies": replies,
            "runs": s.runs - runs0, "kept_is_request": kept.is_request,
            "direct": direct and ep.procs > 1, "local_put_done": local_put_done}


def sec_handler_errors(ep, s: State) -> dict:
    """ep.on_handler_error gets (exc, name, source) and the job goes on."""
    got: list[tuple] = []

    def cb(exc, name, source):
        got.append((type(exc).__name__, str(exc), name, source))

    ep.on_handler_error = cb
    ep.barrier()
    for d in range(ep.size):
        ep.request_short(d, h_raise_req, 1000 * ep.rank + d)
    flush(ep, s)  # my requests were handled, and their replies (which raise) ran here
    ep.barrier()  # everyone's requests to me were handled
    ep.on_handler_error = None
    return {"errors": sorted(got, key=lambda g: (g[2], g[3])), "cb_after": ep.on_handler_error}


def sec_bad_input(ep, s: State) -> dict:
    """Bad input raises before anything is sent; nothing arrives anywhere."""
    seg = ep.config.segment_size
    d = (ep.rank + 1) % ep.size
    runs0 = s.runs
    ep.barrier()
    errs: list[tuple] = []

    def probe(what, fn):
        try:
            fn()
        except BaseException as e:
            errs.append((what, type(e).__name__, str(e), isinstance(e, TypeError),
                         isinstance(e, amnet.AMNetError)))
        else:
            errs.append((what, "no error", "", False, False))

    for bad in (-1, ep.size, ep.size + 100, "1", 1.0, None):
        probe(f"short dest {bad!r}", lambda b=bad: ep.request_short(b, h_short_req))
        probe(f"medium dest {bad!r}", lambda b=bad: ep.request_medium(b, h_medium_req, b"x"))
        probe(f"long dest {bad!r}", lambda b=bad: ep.request_long(b, h_long_req, b"x", 0))
    mm = ep.max_medium
    probe("medium max+1", lambda: ep.request_medium(d, h_medium_req, bytes(mm + 1)))
    probe("medium 4*max", lambda: ep.request_medium(d, h_medium_req, np.zeros(4 * mm, "u1")))
    probe("long offset -1", lambda: ep.request_long(d, h_long_req, b"x", -1))
    probe("long seg-1 +2", lambda: ep.request_long(d, h_long_req, b"ab", seg - 1))
    probe("long seg +1", lambda: ep.request_long(d, h_long_req, b"a", seg))
    probe("long seg+1 +0", lambda: ep.request_long(d, h_long_req, b"", seg + 1))
    probe("long whole+1", lambda: ep.request_long(d, h_long_req, bytes(seg + 1), 0))
    probe("17 args", lambda: ep.request_short(d, h_short_req, *range(17)))
    probe("17 args medium", lambda: ep.request_medium(d, h_medium_req, b"", *range(17)))
    probe("str arg", lambda: ep.request_short(d, h_short_req, 1, "2"))
    probe("float arg", lambda: ep.request_short(d, h_short_req, 1.0))
    probe("None arg", lambda: ep.request_medium(d, h_medium_req, b"x", None))
    probe("2**63 arg", lambda: ep.request_short(d, h_short_req, 1 << 63))
    probe("-2**63-1 arg", lambda: ep.request_long(d, h_long_req, b"x", 0, I64_MIN - 1))
    probe("str payload", lambda: ep.request_medium(d, h_medium_req, "text"))
    probe("int payload", lambda: ep.request_medium(d, h_medium_req, 5))
    probe("None payload", lambda: ep.request_medium(d, h_medium_req, None))
    probe("list payload long", lambda: ep.request_long(d, h_long_req, [1, 2], 0))
    flush(ep, s)
    ep.barrier()  # every rank's flush reached me ...
    runs_bad = s.runs - runs0 - 2 * ep.size  # what ran besides the flush: nothing
    # bad replies are refused inside a handler, which then replies properly
    s.ctx.clear()
    ep.barrier()  # ... and nobody sends again before I counted
    start = len(s.reps)
    ep.request_short(d, h_badreply_req, 77)
    wait(ep, lambda: len(s.reps) >= start + 1, "the good reply")
    flush(ep, s)
    ep.barrier()
    replies = s.reps[start:]
    s.reps.clear()
    return {"errors": errs, "runs_bad": runs_bad, "bad_replies": list(s.ctx),
            "replies": replies}


def sec_bool_args(ep, s: State) -> dict:
    """bool is not an AM argument (the engine's own rule for ranks and its error text)."""
    d = (ep.rank + 1) % ep.size
    out = []
    for what, fn in (("bool arg", lambda: ep.request_short(d, h_short_req, True)),
                     ("bool dest", lambda: ep.request_short(True, h_short_req, 1))):
        try:
            fn()
            out.append((what, "no error"))
        except BaseException as e:
            out.append((what, type(e).__name__))
    flush(ep, s)
    ep.barrier()
    s.reqs.clear()
    s.reps.clear()
    return {"outcomes": out}


def sec_barriers(ep, s: State) -> dict:
    res: dict = {}
    n = ep.size
    # 1. many consecutive barriers
    t0 = time.monotonic()
    for _ in range(300):
        ep.barrier()
    res["plain_300_s"] = time.monotonic() - t0
    # 2. a barrier separates phases: every rank's phase-k requests reached me before it ends
    short = []
    for k in range(60):
        p0 = s.pongs
        for d in range(n):
            ep.request_short(d, h_phase, k)
        wait(ep, lambda p=p0: s.pongs >= p + n, "phase pongs")
        ep.barrier()
        with s.lock:
            got = s.phase.get(k, 0)
        if got != n:
            short.append((k, got))
    res["phase_short"] = short
    res["phases"] = len(s.phase)
    # 3. split phase: notify, compute, try until done; AMs still work between notify and wait
    late = ep.rank == 0
    if late:
        time.sleep(0.2)
    ep.barrier_notify()
    first_try = ep.barrier_try()  # rank 0 notifies 0.2 s late: others see False
    x = 0
    for i in range(20000):  # compute
        x += i * i
    p0 = s.pongs
    ep.request_short((ep.rank + 1) % n, h_ping, 1) if not first_try else None
    tries = 1
    done = first_try
    while not done:
        done = ep.barrier_try()
        tries += 1
    if not first_try:
        wait(ep, lambda: s.pongs > p0, "pong inside a split-phase barrier")
    res["split_first_try"] = first_try
    res["split_tries"] = tries
    # notify / compute / wait
    ep.barrier_notify("nw")
    x += sum(range(1000))
    ep.barrier_wait()
    # 4. named barriers: a mismatch fails every rank, then barriers work again
    outcomes = []
    for names in (lambda r: "same", lambda r: None if r % 2 else "named",
                  lambda r: "left" if r == 0 else "right", lambda r: 7 if r != n - 1 else 8,
                  lambda r: "after", lambda r: None):
        try:
            ep.barrier(names(ep.rank))
            outcomes.append("ok")
        except amnet.BarrierMismatch as e:
            outcomes.append(f"BarrierMismatch: {e}")
    res["named"] = outcomes
    try:  # split-phase mismatch: raised by wait
        ep.barrier_notify("odd" if ep.rank == n - 1 else "even")
        ep.barrier_wait()
        res["split_named"] = "ok"
    except amnet.BarrierMismatch as e:
        res["split_named"] = f"BarrierMismatch: {e}"
    # 5. mis-nesting
    nest = []
    for what, fn in (("wait without notify", ep.barrier_wait),
                     ("try without notify", ep.barrier_try)):
        try:
            fn()
            nest.append((what, "no error"))
        except BaseException as e:
            nest.append((what, type(e).__name__))
    ep.barrier_notify()
    try:
        ep.barrier_notify()
        nest.append(("double notify", "no error"))
    except BaseException as e:
        nest.append(("double notify", type(e).__name__))
    ep.barrier_wait()  # the first notify is still good
    ep.barrier()
    res["nesting"] = nest
    # 6. wait_until with a timeout that passes
    t0 = time.monotonic()
    res["wait_until_false"] = ep.wait_until(lambda: False, timeout=0.05)
    res["wait_until_s"] = time.monotonic() - t0
    return res


SECTIONS = [("echo", sec_echo), ("fifo", sec_fifo), ("tables", sec_tables),
            ("context", sec_context), ("handler_errors", sec_handler_errors),
            ("bad_input", sec_bad_input), ("barriers", sec_barriers)]


def bool_args(ep) -> dict:
    setup(ep)
    return sec_bool_args(ep, ST[ep.rank])


# -- handler table mismatches (amnet.run: register_handlers) ---------------------------------
def register_mismatch(ep, variant: str):
    ep.register_handlers([h_ping, h_pong])  # the same everywhere
    s = State(ep)
    ST[ep.rank] = s
    ep.barrier()
    try:
        ep.register_handlers(mismatch_table(variant, ep.rank))
        err = None
    except amnet.HandlerMismatch as e:
        err = str(e)
    # the job goes on with the handlers every rank agrees on
    ep.barrier()
    flush(ep, s)
    ep.barrier()
    return err, s.pongs


# -- handler failure -------------------------------------------------------------------------
def raise_in_handler(ep):
    """Rank 1 sends rank 2 an AM whose handler raises: the job ends, naming rank 2."""
    setup(ep)
    if ep.rank == 1:
        ep.request_short(2, h_boom, 7)
    ep.barrier()
    ep.barrier()
    return "survived"


# -- progress --------------------------------------------------------------------------------
def pingpong(ep, rounds: int = 40) -> dict:
    """Each rank pings its right neighbour ``rounds`` times (waiting for each pong) with
    Short and Medium requests, serving its left neighbour meanwhile."""
    s = setup(ep)
    right = (ep.rank + 1) % ep.size
    t0 = time.monotonic()
    bad = []
    for i in range(rounds):
        start = len(s.reps)
        if i % 2:
            ep.request_short(right, h_short_req, i, -i)
        else:
            ep.request_medium(right, h_medium_req, pattern(ep.rank, right, i, 100), i)
        wait(ep, lambda n=start + 1: len(s.reps) >= n, "pong")
        r = s.reps[start]
        if r[1] != right or r[4][0] != i:
            bad.append(r)
    elapsed = time.monotonic() - t0
    ep.barrier()
    return {"elapsed": elapsed, "bad": bad, "served": len(s.reqs), "wait_mode":
            ep.config.wait_mode, "progress_thread": ep.config.progress_thread}


def computing_peer(ep, how: str, seconds: float = 1.0) -> dict:
    """The ranks of the last rank's process compute (``how``: "busy" loop or "sleep") without
    calling amnet; rank 0 (another process) sends the last rank a request 0.15 s into that and
    times the reply. With a progress thread the handler runs at once."""
    s = setup(ep)
    target = ep.size - 1
    ep.barrier()
    rtt = None
    if ep.same_process(target):
        t0 = time.monotonic()
        if how == "busy":
            x = 0
            while time.monotonic() - t0 < seconds:
                x += 1
        else:
            time.sleep(seconds)
    elif ep.rank == 0:
        time.sleep(0.15)
        t0 = time.monotonic()
        ep.request_short(target, h_short_req, 42)
        wait(ep, lambda: len(s.reps) >= 1, "reply of the computing rank")
        rtt = time.monotonic() - t0
    ep.barrier()
    return {"rtt": rtt, "target_served": len(s.reqs) if ep.rank == target else None}


def latency(ep, reps: int = 15) -> dict:
    """Rank 0 times round trips to a rank of its node and to one of the other node."""
    s = setup(ep)
    out = {}
    if ep.rank == 0:
        same = next(r for r in ep.local_ranks if r != 0)
        other = ep.size - 1
        assert not ep.is_local(other) and ep.is_local(same)
        for name, d in (("same", same), ("cross", other)):
            times = []
            for i in range(reps):
                start = len(s.reps)
                t0 = time.monotonic()
                ep.request_short(d, h_short_req, i)
                wait(ep, lambda n=start + 1: len(s.reps) >= n, "pong")
                times.append(time.monotonic() - t0)
            out[name] = times
    ep.barrier()
    return out


def register_while_peer_waits(ep):
    """Rank 0 enters register_handlers at once; rank 1 first sends it a request and waits
    for the reply. Rank 0 must serve it while it waits for the collective."""
    s = setup(ep)
    got = None
    if ep.rank == 1:
        time.sleep(0.3)  # rank 0 waits in register_handlers by now
        t0 = time.monotonic()
        ep.request_short(0, h_short_req, 5)
        got = ep.wait_until(lambda: len(s.reps) >= 1, timeout=5.0), time.monotonic() - t0
    ep.register_handlers(EXTRA)
    return got


def oversubscribed(ep, rounds: int = 100) -> dict:
    """A ping-pong ring, then rank 0 computes while every other rank waits in a barrier:
    waiting ranks must leave the cores to it (their CPU time while waiting stays small)."""
    res = pingpong(ep, rounds)
    work = None
    c0 = time.process_time()
    if ep.rank == 0:
        t0 = time.monotonic()
        x = 0
        for i in range(10_000_000):
            x += i & 7
        work = time.monotonic() - t0
    ep.barrier()
    res["work"] = work
    res["wait_cpu"] = None if ep.rank == 0 else time.process_time() - c0
    return res


def register_after_mismatch(ep, variant: str):
    """A HandlerMismatch was caught; then every rank registers the same handlers. Either that
    is refused too, or the AMs run the handlers their senders named: never another one."""
    s = setup(ep, [h_ping, h_pong])
    try:
        ep.register_handlers(mismatch_table(variant, ep.rank))
    except amnet.HandlerMismatch:
        pass
    try:
        ep.register_handlers(EXTRA)
    except amnet.AMNetError as e:
        return "refused", type(e).__name__
    ep.barrier()
    for d in range(ep.size):
        ep.request_short(d, h_extra_req, 1000 + d)
    ep.wait_until(lambda: len(s.reps) >= ep.size, timeout=3.0)
    ep.barrier()
    return "ran", sorted(r[1] for r in s.reps), sorted((r[0], r[1]) for r in s.reqs)


# -- review regressions ------------------------------------------------------------------------
_REG: dict = {}


def h_boot_in_handler(tok):
    _REG[tok.rank].bootstrap.barrier()  # AMContextError, caught by on_handler_error


def bootstrap_in_handler_changes_nothing(ep):
    """A bootstrap collective refused inside a handler must not take a bootstrap step: the
    collectives after it still line up (they would hang otherwise)."""
    _REG[ep.rank] = ep
    errs = []
    # set before registering: the AM may arrive while register_handlers waits (it polls)
    ep.on_handler_error = lambda e, name, src: errs.append(type(e).__name__)
    ep.register_handlers([h_boot_in_handler])
    if ep.rank == 0:
        ep.request_short(1, h_boot_in_handler)
    ep.barrier()
    ep.barrier()
    ep.bootstrap.barrier()
    return errs


def rpc_exits():
    raise SystemExit(3)


def rpc_big(n):
    return b"x" * n


def rpc_edge_cases(ep):
    """rpc whose fn raises SystemExit, and one whose result is over the message limit: both
    come back to the caller as errors; the target keeps going."""
    ep.register_handlers([rpc_exits, rpc_big])
    out = {}
    if ep.rank == 0:
        try:
            ep.rpc(1, rpc_exits).wait()
        except BaseException as e:
            out["exit"] = type(e).__name__
        try:
            ep.rpc(1, rpc_big, (16 << 20) + 1).wait()  # segment 4 MiB: the limit is 16 MiB
        except amnet.AMNetError as e:
            out["big"] = type(e).__name__
        out["after"] = len(ep.rpc(1, rpc_big, 5).wait())
    ep.barrier()
    return out


def use_after_finalize(ep):
    amnet.finalize()
    errs = {}
    for name, call in [("request_short", lambda: ep.request_short(0, "amjobs.h_ping", 1)),
                       ("poll", ep.poll), ("fence", ep.fence),
                       ("wait_until", lambda: ep.wait_until(lambda: True)),
                       ("put", lambda: ep.put(0, 0, b"x"))]:
        try:
            call()
            errs[name] = None
        except amnet.InitError:
            errs[name] = "InitError"
    return errs


def wait_mode_of(ep):
    return ep.wait_mode
