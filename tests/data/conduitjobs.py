"""Job functions for tests/test_conduit.py: forged AM headers sent to a rank's conduit socket.

Rank 0 opens a raw zmq PUSH to the conduit address of the last rank (from the job's address
table), presenting the job's secret as the job's processes do, and sends messages built by
hand (wire format: ``amnet/core/_wire.py``; system handler indexes: ``amnet/core/_sys.py``),
then one valid Short AM on the same connection, which arrives after all of them. The target
counts what its engine refused, what ran, and whether its segment (all zeros) was touched.

``REFUSED``: malformed messages the engine refuses. ``MUST_NOT_CRASH``: wire fields that
the engine once used without checking, so that the forged message failed the target rank
instead of being refused:

- ``sys_put_without_payload``: a system put with no payload frame and no LONG flag reached
  ``_sys.h_put``, which read ``payload.nbytes`` (AttributeError). Fixed in 4edcf70.
- ``sys_atomic_value_out_of_range``: an i4 atomic whose int64 operand does not fit int32
  reached ``_atomics.apply`` (numpy OverflowError). Fixed in 4edcf70.
- ``user_nargs_mismatch``: a Short AM with 2 arguments to a handler declared with
  ``@amnet.handler("short", nargs=1)`` was run (TypeError in the handler, the job aborted).
  Fixed in 4edcf70.
- ``sys_rpc_ff_non_str_kwargs``: an rpc_ff whose msgpack kwargs have non-str keys (no real
  sender makes them) called ``fn(**{1: 2})``: TypeError as a handler failure, the job
  aborted. Fixed in cda88fb.
"""

from __future__ import annotations

from typing import Any

import msgpack
import zmq

import amnet
from amnet._security import apply_client
from amnet.core import _runtime
from amnet.core import _sys as S
from amnet.core import _wire as W

RAN: dict[int, list] = {}  # rank -> handlers that ran there (rank-threads share the module)
PONG: dict[int, list] = {}


@amnet.handler("short", nargs=1)
def note(tok, x):
    RAN.setdefault(tok.rank, []).append(["note", x])


@amnet.handler("long")
def long_sink(tok, view, *args):
    RAN.setdefault(tok.rank, []).append(["long_sink", bytes(view), list(args)])


@amnet.handler("short", nargs=1)
def one_arg(tok, x):
    RAN.setdefault(tok.rank, []).append(["one_arg", x])


def anything(tok, *args):
    RAN.setdefault(tok.rank, []).append(["anything", len(args)])


def rpc_fn(*args, **kwargs):
    return None


def ping(tok, x):
    tok.reply_short(pong, x)


def pong(tok, x):
    PONG[tok.rank] = [tok.source, x]


HANDLERS = [note, long_sink, one_arg, anything, rpc_fn, ping, pong]


def hdr(flags: int, hidx: int, src: int, dst: int, offset: int, *args: int,
        nargs: int | None = None) -> bytes:
    """An AM header (``nargs`` may lie about the number of arguments that follow)."""
    return (W.FIXED.pack(flags, len(args) if nargs is None else nargs, hidx, src, dst, offset)
            + b"".join(a.to_bytes(8, "little", signed=True) for a in args))


def frames(case: str, ep: Any, t: int, junk_size: int = 10) -> list[list[bytes]]:
    """The messages (each a list of frames) of one forged case, from rank 0 to rank ``t``
    (``junk_size``: the bytes of the cases' junk payloads)."""
    seg = ep.segment.nbytes
    ix = {name.rsplit(".", 1)[1]: i for i, name in enumerate(ep.handlers)}
    sysf = W.SYSTEM
    junk = b"\xaa" * junk_size
    c = {
        # header shape
        "short_header": [[b"\x00\x01\x02"]],
        "empty_header": [[b""]],
        "nargs_larger_than_header": [[hdr(W.SHORT, ix["anything"], 0, t, 0, 1, nargs=3)]],
        "nargs_smaller_than_header": [[hdr(W.SHORT, ix["anything"], 0, t, 0, 1, 2, nargs=1)]],
        "too_many_args": [[hdr(W.SHORT, ix["anything"], 0, t, 0, *range(17))]],
        "bad_flags": [[hdr(W.SHORT | 0x10, ix["note"], 0, t, 0, 5)]],
        "high_flag": [[hdr(W.SHORT | 0x80, ix["note"], 0, t, 0, 5)]],
        # ranks
        "rank_not_in_process": [[hdr(W.SHORT, ix["note"], 0, 0, 0, 5)]],
        "dst_outside_job": [[hdr(W.SHORT, ix["note"], 0, 1000, 0, 5)]],
        "src_outside_job": [[hdr(W.SHORT, ix["note"], 1000, t, 0, 5)]],
        # user handlers
        "handler_out_of_range": [[hdr(W.SHORT, 200, 0, t, 0, 5)]],
        "handler_out_of_range_long": [[hdr(W.LONG, 200, 0, t, 0), junk]],
        "category_3": [[hdr(3, ix["anything"], 0, t, 0)]],
        "medium_to_short_handler": [[hdr(W.MEDIUM, ix["note"], 0, t, 0, 5), junk]],
        "short_with_payload": [[hdr(W.SHORT, ix["anything"], 0, t, 0), junk]],
        "long_beyond_segment": [[hdr(W.LONG, ix["long_sink"], 0, t, seg - 2), junk]],
        "long_offset_huge": [[hdr(W.LONG, ix["long_sink"], 0, t, 2**64 - 1), b"\x01"]],
        "long_reply_beyond": [[hdr(W.LONG | W.REPLY, ix["long_sink"], 0, t, seg), b"\x01"]],
        # system handlers
        "system_handler_out_of_range": [[hdr(sysf, 8, 0, t, 0, 1)],
                                        [hdr(sysf | W.LONG, 200, 0, t, 0, 1), junk]],
        "sys_put_beyond_segment": [[hdr(sysf | W.LONG, S.PUT, 0, t, seg + 100, 1), junk]],
        "sys_put_overlapping_end": [[hdr(sysf | W.LONG, S.PUT, 0, t, seg - 2, 1), junk]],
        "sys_put_as_reply": [[hdr(sysf | W.LONG | W.REPLY, S.PUT, 0, t, 0, 1), junk]],
        "sys_put_two_args": [[hdr(sysf | W.LONG, S.PUT, 0, t, 0, 1, 2), junk]],
        "sys_long_without_payload": [[hdr(sysf | W.LONG, S.PUT, 0, t, 0, 1)]],
        "sys_get_negative_length": [[hdr(sysf, S.GET, 0, t, 0, 1, -1)]],
        "sys_get_beyond_segment": [[hdr(sysf, S.GET, 0, t, seg, 1, 10)]],
        "sys_get_with_payload": [[hdr(sysf | W.LONG, S.GET, 0, t, 0, 1, 10), junk]],
        "sys_ack_unknown_op": [[hdr(sysf | W.REPLY, S.ACK, 0, t, 0, 987654)]],
        "sys_get_data_unknown_op": [[hdr(sysf | W.LONG | W.REPLY, S.GET_DATA, 0, t, 0,
                                         987654), junk]],
        "sys_get_data_not_a_reply": [[hdr(sysf | W.LONG, S.GET_DATA, 0, t, 0, 1), junk]],
        "sys_atomic_wrong_nargs": [[hdr(sysf, S.ATOMIC, 0, t, 0, 1, 4, 1, 1)]],
        "sys_barrier_wrong_nargs": [[hdr(sysf, S.BARRIER, t - 1, t, 0, 1, 0, 0)]],
        "sys_rpc_result_wrong_nargs": [[hdr(sysf | W.LONG | W.REPLY, S.RPC_RESULT, 0, t, 0,
                                            987654), msgpack.packb(1)]],
        "sys_ack_not_a_reply": [[hdr(sysf, S.ACK, 0, t, 0, 1)]],
        "sys_atomic_bad_op": [[hdr(sysf, S.ATOMIC, 0, t, 0, 1, 99, 1, 0, 0)]],
        "sys_atomic_bad_dtype": [[hdr(sysf, S.ATOMIC, 0, t, 0, 1, 4, 17, 1, 0)]],
        "sys_atomic_misaligned": [[hdr(sysf, S.ATOMIC, 0, t, 3, 1, 4, 1, 1, 0)]],
        "sys_atomic_beyond_segment": [[hdr(sysf, S.ATOMIC, 0, t, seg, 1, 4, 1, 1, 0)]],
        "sys_barrier_bad_round": [[hdr(sysf, S.BARRIER, 0, t, 0, 1, 99, 0, 0, 0, 0, 0)]],
        # round 0 comes from rank t - 1, never from t itself
        "sys_barrier_wrong_source": [[hdr(sysf, S.BARRIER, t, t, 0, 1, 0, 0, 0, 0, 0, 0)]],
        "sys_rpc_bad_msgpack": [[hdr(sysf | W.LONG, S.RPC, 0, t, 0, 1, ix["rpc_fn"]),
                                 b"\xc1\xc1"]],
        "sys_rpc_not_args_kwargs": [[hdr(sysf | W.LONG, S.RPC, 0, t, 0, 1, ix["rpc_fn"]),
                                     msgpack.packb(7)]],
        "sys_rpc_bad_index": [[hdr(sysf | W.LONG, S.RPC, 0, t, 0, 1, 999),
                               msgpack.packb([[], {}])]],
        "sys_rpc_to_short_handler": [[hdr(sysf | W.LONG, S.RPC, 0, t, 0, 1, ix["note"]),
                                      msgpack.packb([[1], {}])]],
        "sys_rpc_without_payload": [[hdr(sysf, S.RPC, 0, t, 0, 1, ix["rpc_fn"])]],
        "sys_rpc_result_unknown_op": [[hdr(sysf | W.LONG | W.REPLY, S.RPC_RESULT, 0, t, 0,
                                           987654, 0), msgpack.packb(1)]],
        # once taking the target down (see the module docstring)
        "sys_put_without_payload": [[hdr(sysf, S.PUT, 0, t, 0, 1)]],
        "sys_atomic_value_out_of_range": [[hdr(sysf, S.ATOMIC, 0, t, 0, 1, 4, 0, 2**40, 0)]],
        "user_nargs_mismatch": [[hdr(W.SHORT, ix["one_arg"], 0, t, 0, 1, 2)]],
        "sys_rpc_ff_non_str_kwargs": [[hdr(sysf | W.LONG, S.RPC, 0, t, 0, 0, ix["rpc_fn"]),
                                       msgpack.packb([[], {1: 2}])]],
    }
    return c[case]


MUST_NOT_CRASH = ["sys_put_without_payload", "sys_atomic_value_out_of_range",
                  "user_nargs_mismatch", "sys_rpc_ff_non_str_kwargs"]
REFUSED = [
    "short_header", "empty_header", "nargs_larger_than_header", "nargs_smaller_than_header",
    "too_many_args", "bad_flags", "high_flag", "rank_not_in_process", "dst_outside_job",
    "src_outside_job", "handler_out_of_range", "handler_out_of_range_long", "category_3",
    "medium_to_short_handler", "short_with_payload", "long_beyond_segment",
    "long_offset_huge", "long_reply_beyond", "system_handler_out_of_range",
    "sys_put_beyond_segment", "sys_put_overlapping_end", "sys_put_as_reply",
    "sys_put_two_args", "sys_long_without_payload", "sys_get_negative_length",
    "sys_get_beyond_segment", "sys_get_with_payload", "sys_ack_unknown_op",
    "sys_ack_not_a_reply", "sys_get_data_unknown_op", "sys_get_data_not_a_reply",
    "sys_atomic_wrong_nargs", "sys_barrier_wrong_nargs", "sys_rpc_result_wrong_nargs",
    "sys_atomic_bad_op", "sys_atomic_bad_dtype",
    "sys_atomic_misaligned", "sys_atomic_beyond_segment", "sys_barrier_bad_round",
    "sys_barrier_wrong_source", "sys_rpc_bad_msgpack", "sys_rpc_not_args_kwargs",
    "sys_rpc_bad_index", "sys_rpc_to_short_handler", "sys_rpc_without_payload",
    "sys_rpc_result_unknown_op",
]


def forged(ep, cases):
    """Rank 0 sends every message of ``cases`` to the last rank; see the module docstring.

    Returns (on the target) how many messages its process refused and dropped meanwhile,
    the handlers that ran there, and whether its segment is still all zeros; (on rank 0)
    the reply of a normal request sent afterwards.
    """
    ep.register_handlers(HANDLERS)
    n, r = ep.size, ep.rank
    t = n - 1
    out: dict[str, Any] = {"target": t}
    on_mpi = amnet.config.conduit == "mpi"
    # over mpi, junk larger than a Medium AM: a Long's payload then travels as a bulk
    # message, which the target receives straight into the segment where the message is
    # one its engine will accept (Engine.land): a refused one must not have written a byte
    msgs = [m for case in cases
            for m in frames(case, ep, t, ep.max_medium + 100 if on_mpi else 10)]
    valid = hdr(W.SHORT, ep.handlers.index("conduitjobs.note"), 0, t, 0, 42)
    ep.barrier()
    st0 = ep.statistics()
    ep.bootstrap.barrier()
    if r == 0 and on_mpi:
        _send_mpi(ep.bootstrap.table[t]["conduit"], [*msgs, [valid]], ep.max_medium)
    elif r == 0:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        # a process of the job: it holds the secret, so its frames reach the target's engine
        apply_client(sock, None, _runtime._process.spec["token"])
        sock.connect(ep.bootstrap.table[t]["conduit"])
        for m in msgs:
            sock.send_multipart(m)
        # a valid AM on the same connection arrives after all of them
        sock.send(valid)
    if r == t:
        assert ep.wait_until(lambda: RAN.get(t), timeout=30), "the valid AM never arrived"
    ep.barrier()
    if r == 0 and not on_mpi:
        sock.close(linger=1000)
        ctx.term()
    if r == t:
        st1 = ep.statistics()
        out.update(refused=st1.refused - st0.refused,
                   dropped=st1.conduit.dropped - st0.conduit.dropped,
                   ran=list(RAN.get(t, [])), segment_zero=not ep.segment.any(),
                   messages=len(msgs))
    ep.barrier()
    # the job still works: a normal request and its reply
    if r == 0:
        ep.request_short(t, ping, 7)
        assert ep.wait_until(lambda: 0 in PONG, timeout=30), "no reply from the target"
        out["pong"] = PONG[0]
    ep.barrier()
    return out


def _send_mpi(address: str, msgs: list[list[bytes]], inline: int) -> None:
    """Send ``msgs`` to the mpi conduit at ``address`` as its peers do (envelope, then a bulk
    message for a payload over ``inline`` bytes), on the job's communicator, in order."""
    from amnet.conduits import _mpi as M

    _, rank, channel = address.split(":")
    tag = M.TAG_BASE + 2 * int(channel)
    comm = M._job["comm"]
    reqs = []
    with M.MPI_LOCK:
        for m in msgs:
            header, payload = m[0], (m[1] if len(m) > 1 else None)
            if payload is None:
                env = M.ENV.pack(M.KIND_HEADER, len(header), 0, 0) + header
            elif len(payload) <= inline:
                env = M.ENV.pack(M.KIND_INLINE, len(header), 0, len(payload)) + header + payload
            else:
                env = M.ENV.pack(M.KIND_BULK, len(header), 0, len(payload)) + header
            reqs.append(comm.Isend(env, int(rank), tag))
            if payload is not None and len(payload) > inline:
                reqs.append(comm.Isend(payload, int(rank), tag + 1))
    while True:
        with M.MPI_LOCK:
            if all(q.Test() for q in reqs):
                return


def all_to_all(ep, rounds):
    """Every rank, each round: a 4 KiB put_nbi, a small get and a strided VIS get to every
    other rank, checked; then 1 MiB put_nbi to every other rank at once (megabytes waiting
    to be sent: the tcp conduit's backlogs), the source overwritten, ``wait_nbi`` and a
    barrier. Returns the bytes
    each rank finally holds from each peer's last 1 MiB put, as (peer, first, last, ok)."""
    import numpy as np

    n, me = ep.size, ep.rank
    seg = ep.segment
    seg[:] = me
    slot = 1 << 20  # byte 4 MiB + slot * peer: the 1 MiB puts
    ep.barrier()
    for r in range(rounds):
        big = np.full(slot, (me + r) % 251, np.uint8)
        for k in range(1, n):
            peer = (me + k) % n
            ep.put_nbi(peer, 4096 * me, big[:4096])
            got = bytes(ep.get(peer, 3 << 20, 64))
            assert got == bytes([peer]) * 64, (r, peer, got[:4])
            out = np.zeros(64 * 850, np.uint8)
            ep.vis.get_strided(peer, out, 0, [850], 3 << 20, [850], 256, [64])
            assert (np.lib.stride_tricks.as_strided(out, (64, 256), (850, 1)) == peer).all()
        ep.barrier()  # everyone is done reading before the 1 MiB puts land
        for k in range(1, n):
            ep.put_nbi((me + k) % n, (4 << 20) + slot * me, big)
        big[:] = 255  # a put's source may be reused at once, queued bytes or not
        ep.wait_nbi()
        ep.barrier()
    last = (rounds - 1)
    return [(p, int(seg[(4 << 20) + slot * p]), int(seg[(4 << 20) + slot * (p + 1) - 1]),
             bool((seg[(4 << 20) + slot * p:(4 << 20) + slot * (p + 1)] == (p + last) % 251)
                  .all())) for p in range(n) if p != me]
