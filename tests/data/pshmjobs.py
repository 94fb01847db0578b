"""Jobs and handlers for tests/test_pshm.py: the shared-memory network between the processes
of a node (docs/design.md §6), in-line AMs within a process, direct copies and atomics.

Handlers reach their rank's state through ``FLOOD[token.rank]`` (this module is shared by the
rank-threads of a process; a handler may run on any thread of the destination process, or on
the sender's thread for in-line AMs). Jobs raise AssertionError naming what failed and return
what they counted, so the test also sees that nothing was skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
import zlib

import numpy as np

WAIT_S = 60.0


def wait(ep, pred, what: str, timeout: float = WAIT_S) -> None:
    if not ep.wait_until(pred, timeout=timeout):
        raise AssertionError(f"rank {ep.rank}: timed out after {timeout} s waiting for {what}")


# -- the flood: every rank -> every node-local rank, Medium requests echoed as replies ---------
class Flood:
    def __init__(self, ep) -> None:
        self.ep = ep
        mm = ep.max_medium
        self.block = np.random.default_rng([ep.rank, 99]).integers(
            0, 256, 2 * mm, dtype=np.uint8).tobytes()
        self.lock = threading.Lock()
        self.next_req: dict[int, int] = {}  # source -> next sequence number expected
        self.next_rep: dict[int, int] = {}  # replier -> next sequence number expected
        self.crcs: dict[tuple[int, int], int] = {}  # (dest, seq) -> crc of what I sent
        self.requests = 0
        self.replies = 0
        self.bytes_in = 0
        self.bad: list[str] = []


FLOOD: dict[int, Flood] = {}


def flood_payload(f: Flood, src: int, dst: int, seq: int) -> bytes:
    """Varied sizes 0..max_medium (max_medium itself included), bytes that differ per
    message."""
    mm = f.ep.max_medium
    size = mm if seq % 50 == 7 else (seq * 37 + src * 11 + dst * 5) % (mm + 1)
    off = (seq * 131 + dst * 17) % mm
    return f.block[off:off + size]


def _flood_arrived(tok, payload, seq: int, crc: int, request: bool) -> int:
    """What both flood handlers check of a message, under the rank's Flood lock: its place
    in its sender's sequence, its crc (a request's as its sender said; a reply's as the
    replier saw it and as I sent it); and count it. Returns the crc of the payload."""
    f = FLOOD[tok.rank]
    src = tok.source
    got = zlib.crc32(payload)
    kind, nxt = ("request", f.next_req) if request else ("reply", f.next_rep)
    with f.lock:
        want = nxt.get(src, 0)
        if seq != want:
            f.bad.append(f"{kind} from {src}: sequence number {seq}, expected {want}")
        nxt[src] = seq + 1
        if request:
            if got != crc:
                f.bad.append(f"request from {src} seq {seq}: crc {got:#x}, sender said {crc:#x}")
            f.requests += 1
            f.bytes_in += payload.nbytes
        else:
            sent = f.crcs.pop((src, seq), None)
            if got != crc or got != sent:
                f.bad.append(f"reply from {src} seq {seq}: crc {got:#x}, replier saw {crc:#x}, "
                             f"I sent {sent}")
            f.replies += 1
    return got


def h_flood_req(tok, payload, seq, crc):
    got = _flood_arrived(tok, payload, seq, crc, True)
    tok.reply_medium(h_flood_rep, payload, seq, got)  # echo the bytes back


def h_flood_rep(tok, payload, seq, crc):
    _flood_arrived(tok, payload, seq, crc, False)


FLOOD_HANDLERS = [h_flood_req, h_flood_rep]


def flood_setup(ep) -> Flood:
    f = Flood(ep)
    FLOOD[ep.rank] = f
    ep.register_handlers(FLOOD_HANDLERS)
    ep.barrier()
    return f


def flood_send(ep, f: Flood, seq: int, targets) -> None:
    for d in targets:
        p = flood_payload(f, ep.rank, d, seq)
        c = zlib.crc32(p)
        with f.lock:
            f.crcs[(d, seq)] = c
        ep.request_medium(d, h_flood_req, p, seq, c)


def flood(ep, k: int = 300) -> dict:
    """Every rank sends ``k`` Medium requests to every rank of its node (itself included)
    without waiting; every request handler echoes its payload in a reply. Then everyone
    waits for all its replies."""
    f = flood_setup(ep)
    targets = list(ep.local_ranks)
    t0 = time.monotonic()
    for seq in range(k):
        flood_send(ep, f, seq, targets)
    wait(ep, lambda: f.replies == k * len(targets), "flood replies")
    wait(ep, lambda: f.requests == k * len(targets), "flood requests")
    seconds = time.monotonic() - t0
    ep.barrier()
    st = ep.statistics()
    with f.lock:
        out = {"rank": ep.rank, "bad": list(f.bad), "requests": f.requests,
               "replies": f.replies, "next_req": dict(f.next_req),
               "next_rep": dict(f.next_rep), "unanswered": len(f.crcs),
               "bytes_in": f.bytes_in, "seconds": seconds,
               "pshm": None if st.pshm is None else dataclasses.asdict(st.pshm),
               "conduit_sent": st.conduit.sent, "refused": st.refused}
    return out


def flood_until_killed(ep, victim: int, after: int) -> None:
    """The kill -9 test (a script): flood without end; rank ``victim`` kills itself with
    SIGKILL after ``after`` rounds, printing the wall-clock time first."""
    f = flood_setup(ep)
    targets = list(ep.local_ranks)
    print(f"rank {ep.rank} flooding", flush=True)
    seq = 0
    while True:
        if ep.rank == victim and seq == after:
            print(f"KILL {time.time():.6f}", flush=True)
            os.kill(os.getpid(), 9)
        flood_send(ep, f, seq, targets)
        seq += 1


# -- segment views and direct copies -----------------------------------------------------------
def views(ep) -> dict:
    """segment_view(r) for every r; writes through the views are seen after a barrier; put,
    get and atomics to addressable ranks send no AM and are complete on return."""
    n, r = ep.size, ep.rank
    seg = ep.segment.nbytes
    ep.segment[:] = 0
    ep.barrier()
    have = [ep.segment_view(q) is not None for q in range(n)]
    for q in range(n):
        v = ep.segment_view(q)
        if v is None:
            continue
        assert isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.nbytes == seg
        assert v.flags.writeable
        # my stamp in q's segment, at my own place
        v[64 * r:64 * r + 8] = np.frombuffer(int(1000 * r + q + 1).to_bytes(8, "little"),
                                             dtype=np.uint8)
    assert ep.segment_view(r) is ep.segment or np.shares_memory(ep.segment_view(r), ep.segment)
    ep.barrier()
    seen = {}
    writers = ep.bootstrap.allgather(have)
    for w in range(n):
        stamp = int.from_bytes(bytes(ep.segment[64 * w:64 * w + 8]), "little")
        want = 1000 * w + r + 1 if writers[w][r] else 0
        assert stamp == want, (w, stamp, want)
        seen[w] = stamp
    ep.barrier()

    # put/get/atomic to addressable ranks: no AM (the counters are this process's, so the
    # ranks take turns, the others waiting in a bootstrap barrier that sends no AM)
    direct = [q for q in range(n) if have[q]]
    counted = []
    for turn in range(n):
        ep.bootstrap.barrier()
        if turn != r:
            continue
        st0 = ep.statistics()
        for q in direct:
            data = np.random.default_rng([r, q]).integers(0, 256, 100_003, dtype=np.uint8)
            ep.put(q, 8192, data)
            assert np.array_equal(ep.segment_view(q)[8192:8192 + data.size], data)
            got = ep.get(q, 8192, data.size)
            assert bytes(got) == data.tobytes()
            h = ep.put_nb(q, 4096, b"nb" * 100)
            assert h.done
            h = ep.get_nb(q, 4096, 200)
            assert h.done and bytes(h.wait()) == b"nb" * 100
            ep.put_nbi(q, 4096 + 200, b"nbi")
            assert ep.test_nbi()
            assert ep.atomic(q, 2048, "fadd", 5) == 0
            assert ep.atomic(q, 2048, "get") == 5
            ep.atomic(q, 2048, "set", 0)
        ep.fence()
        st1 = ep.statistics()
        assert st1.inflight == 0
        counted = [st1.conduit.sent - st0.conduit.sent,
                   None if st1.pshm is None else st1.pshm.sent - st0.pshm.sent]
    ep.bootstrap.barrier()
    ep.barrier()
    st = ep.statistics()
    return {"rank": r, "have": have, "local": [ep.is_local(q) for q in range(n)],
            "same_process": [ep.same_process(q) for q in range(n)], "seen": seen,
            "direct_sent": counted, "pshm_stats": st.pshm is not None,
            "config_pshm": ep.config.pshm}


# -- atomics within a node --------------------------------------------------------------------
def fadd_contention(ep, k: int = 2000) -> dict:
    """Every rank adds 1 to one i8 word of rank 0's segment ``k`` times: the old values are a
    permutation of 0..n*k-1 and the total is exact."""
    ep.segment[:] = 0
    ep.barrier()
    olds = [ep.atomic(0, 128, "fadd", 1) for _ in range(k)]
    assert olds == sorted(olds), "a rank's own fadds must see increasing values"
    ep.barrier()
    everyone = ep.bootstrap.allgather(olds)
    total = ep.atomic(0, 128, "get")
    ep.barrier()
    return {"total": total, "perm": sorted(v for vs in everyone for v in vs) ==
            list(range(ep.size * k)), "direct": ep.segment_view(0) is not None}


def cas_loop(ep, k: int = 300) -> dict:
    """Every rank adds 1.5 to one f8 word of rank 0's ``k`` times with a compare-and-swap
    loop; the total is exact (1.5 * n * k is representable)."""
    ep.segment[:] = 0
    ep.barrier()
    retries = 0
    cur = ep.atomic(0, 256, "get", dtype="f8")
    for _ in range(k):
        while True:
            prev = ep.atomic(0, 256, "cas", cur, cur + 1.5, dtype="f8")
            if prev == cur:
                cur = cur + 1.5
                break
            cur = prev
            retries += 1
    ep.barrier()
    total = ep.atomic(0, 256, "get", dtype="f8")
    ep.barrier()
    return {"total": total, "retries": retries}


# -- in-line AMs between rank-threads of a process --------------------------------------------
INLINE: dict[int, dict] = {}


def h_in_req(tok, payload, tag):
    st = INLINE[tok.rank]
    st["req_thread"] = threading.get_ident()
    st["req_readonly"] = payload.readonly
    st["req_bytes"] = payload.tobytes()
    try:
        payload[0:1] = b"x"
        st["req_write"] = "no error"
    except TypeError as e:
        st["req_write"] = f"TypeError: {e}"
    mine = INLINE[tok.source]
    before = mine.get("replies", 0)
    tok.reply_medium(h_in_rep, payload, tag + 1)
    # the reply ran inside reply_medium, before it returned (and so before request_medium)
    st["reply_ran_inside"] = mine.get("replies", 0) == before + 1


def h_in_rep(tok, payload, tag):
    st = INLINE[tok.rank]
    st["rep_thread"] = threading.get_ident()
    st["rep_readonly"] = payload.readonly
    st["rep_bytes"] = payload.tobytes()
    st["rep_tag"] = tag
    st["replies"] = st.get("replies", 0) + 1


def h_in_short(tok, tag):
    st = INLINE[tok.rank]
    st["short_thread"] = threading.get_ident()
    st["short_tag"] = tag
    tok.reply_short(h_in_short_rep, tag)


def h_in_short_rep(tok, tag):
    st = INLINE[tok.rank]
    st["short_replies"] = st.get("short_replies", 0) + 1


def h_in_long(tok, view, tag):
    st = INLINE[tok.rank]
    st["long_thread"] = threading.get_ident()
    st["long_bytes"] = bytes(view)
    st["long_readonly"] = view.readonly


INLINE_HANDLERS = [h_in_req, h_in_rep, h_in_short, h_in_short_rep, h_in_long]


def inline(ep) -> dict:
    """Rank-thread 0 of each process sends AMs to rank-thread 1 of the same process while
    rank-thread 1 waits in a bootstrap barrier: the handlers run on the sender's thread and
    the replies run before request_* returns."""
    r = ep.rank
    INLINE[r] = {}
    ep.register_handlers(INLINE_HANDLERS)
    ep.barrier()
    INLINE[r]["out_of_barrier"] = True
    out: dict = {"rank": r, "thread": threading.get_ident()}
    peer = r + 1 if ep.thread == 0 else r - 1
    assert ep.same_process(peer)
    if ep.thread == 0:
        # the process's counters count the sibling's sends too: it may still be sending its
        # barrier's rounds (free-threaded, at the same time as this thread)
        assert ep.wait_until(lambda: INLINE[peer].get("out_of_barrier"), timeout=30)
        st0 = ep.statistics()
        payload = bytearray(b"in-line payload " * 20)
        ep.request_medium(peer, h_in_req, payload, 41)
        mine, theirs = INLINE[r], INLINE[peer]
        out["replies_after_return"] = mine.get("replies", 0)
        out["req_thread"] = theirs.get("req_thread")
        out["req_readonly"] = theirs.get("req_readonly")
        out["req_write"] = theirs.get("req_write")
        out["req_bytes_ok"] = theirs.get("req_bytes") == bytes(payload)
        out["reply_ran_inside"] = theirs.get("reply_ran_inside")
        out["rep_thread"] = mine.get("rep_thread")
        out["rep_readonly"] = mine.get("rep_readonly")
        out["rep_ok"] = (mine.get("rep_bytes") == bytes(payload) and mine.get("rep_tag") == 42)
        ep.request_short(peer, h_in_short, 7)
        out["short"] = (theirs.get("short_thread"), theirs.get("short_tag"),
                        mine.get("short_replies"))
        ep.request_long(peer, h_in_long, b"long in-line", 4096, 3)
        out["long"] = (theirs.get("long_thread"), theirs.get("long_bytes"),
                       theirs.get("long_readonly"))
        out["long_in_segment"] = bytes(ep.segment_view(peer)[4096:4096 + 12])
        st1 = ep.statistics()
        out["sent"] = (st1.conduit.sent - st0.conduit.sent,
                       None if st1.pshm is None else st1.pshm.sent - st0.pshm.sent)
    ep.bootstrap.barrier()  # thread 1 waits here while thread 0 sends to it
    ep.barrier()
    return out


# -- rpc with arguments and results larger than max_medium -------------------------------------
def rpc_big(blob, tag):
    return [len(blob), hashlib.sha256(blob).hexdigest(), blob[::-1], tag]


def rpc_fragments(ep, size: int = 200_000) -> dict:
    """Every rank calls rpc_big on every rank of its node with ``size`` bytes of arguments
    (fragmented over the queues: more than max_medium); the result is as large."""
    ep.register_handlers([rpc_big])
    ep.barrier()
    r = ep.rank
    st0 = ep.statistics()
    done = []
    for k in range(3):
        hs = []
        for d in ep.local_ranks:
            blob = np.random.default_rng([r, d, k]).integers(0, 256, size,
                                                             dtype=np.uint8).tobytes()
            hs.append((d, blob, ep.rpc(d, rpc_big, blob, tag=1000 * r + d)))
        for d, blob, h in hs:
            length, digest, back, tag = h.wait()
            assert (length, digest, tag) == (size, hashlib.sha256(blob).hexdigest(),
                                             1000 * r + d)
            assert back == blob[::-1]
            done.append(d)
    st1 = ep.statistics()
    ep.barrier()
    return {"done": done, "max_medium": ep.max_medium,
            "pshm_sent": None if st1.pshm is None else st1.pshm.sent - st0.pshm.sent,
            "conduit_sent": st1.conduit.sent - st0.conduit.sent}


# -- doorbells --------------------------------------------------------------------------------
PONGS: dict[int, int] = {}


def h_dping(tok, x):
    tok.reply_short(h_dpong, x)


def h_dpong(tok, x):
    PONGS[tok.rank] = PONGS.get(tok.rank, 0) + 1


def doorbell_pingpong(ep, rounds: int = 200) -> dict:
    """Rank 0 and rank 1 (other processes of one node) play ``rounds`` round trips; the
    other ranks wait in a barrier."""
    PONGS[ep.rank] = 0
    ep.register_handlers([h_dping, h_dpong])
    ep.barrier()
    if ep.rank in (0, 1):
        other = 1 - ep.rank
        for i in range(rounds):
            before = PONGS[ep.rank]
            ep.request_short(other, h_dping, i)
            wait(ep, lambda b=before: PONGS[ep.rank] > b, "pong")
    ep.barrier()
    st = ep.statistics()
    return {"rank": ep.rank, "pongs": PONGS[ep.rank], "wait_mode": ep.wait_mode,
            "doorbells": st.pshm.doorbells, "received": st.pshm.received,
            "conduit_sent": st.conduit.sent}


# -- barriers only ----------------------------------------------------------------------------
def barriers(ep, k: int = 2000) -> int:
    for _ in range(k):
        ep.barrier()
    return k


def config_of(ep) -> dict:
    st = ep.statistics()
    return {"pshm": ep.config.pshm, "stats_pshm": st.pshm,
            "backing": ep.config.pshm_backing, "depth": ep.config.pshm_network_depth,
            "thread_safe": ep.config.thread_safe}



# -- fragment boundaries ----------------------------------------------------------------------
def rpc_same(blob):
    return blob


def rpc_boundaries(ep) -> dict:
    """rpc arguments and results whose encoded size falls on every byte around 1, 2 and 3
    payload slots (the msgpack framing adds a few bytes: the sweep covers the exact
    multiples), to every rank of the node."""
    ep.register_handlers([rpc_same])
    ep.barrier()
    slot = (ep.max_medium + 63) // 64 * 64
    sizes = sorted({z for k in (1, 2, 3) for z in range(k * slot - 12, k * slot + 12)}
                   | {0, 1, slot // 2})
    checked = 0
    for d in ep.local_ranks:
        hs = []
        for z in sizes:
            blob = bytes((i * 7 + z + ep.rank) % 251 for i in range(z))
            hs.append((blob, ep.rpc(d, rpc_same, blob)))
        for blob, h in hs:
            got = h.wait()
            assert got == blob, (d, len(blob), len(got))
            checked += 1
    ep.barrier()
    return {"checked": checked, "sizes": len(sizes)}
