"""The initiator side of the extended API: start puts, gets, atomics and rpcs.

Each function checks everything before sending (nothing is sent on bad input), registers an
:class:`~amnet.core._ops.Op` under a fresh op id, and sends one system AM; the reply that
names the op id completes it (:mod:`amnet.core._sys`).
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from .._errors import AMArgumentError, HandlerCategoryError, PayloadTooLarge
from . import _atomics
from . import _sys as S
from ._bytes import as_bytes
from ._ops import DONE, Bucket, Done, Op


def bucket_of(rs: Any, nbi: bool) -> Bucket | None:
    if not nbi:
        return None
    return rs.regions[-1] if rs.regions else rs.nbi


def check_bulk(bulk: Any, what: str) -> bool:
    if type(bulk) is not bool:
        raise TypeError(f"{what}: bulk must be True or False, got {type(bulk).__name__}")
    return bulk


def start_put(eng: Any, rs: Any, dest: int, offset: Any, data: Any, nbi: bool,
              blocking: bool, what: str, bulk: bool = False) -> Op | Done:
    """Send a put. A blocking put of ``bytes`` (immutable) goes out without a copy; anything
    else is copied, so the caller may reuse or resize its buffer as soon as the call returns
    (zero-copy sends keep the buffer exported until zmq releases it, which may be later).
    Two exceptions:

    - a blocking put on a conduit that gains by it (``mpi``: its ``direct_min``) goes from the
      buffer itself, and waits until the conduit has taken it (it waits for more anyway);
    - ``bulk``: the caller keeps ``data`` unchanged until the put completes (GASNet's
      ``put_nbi_bulk``), so nothing waits and nothing is copied: the conduit sends from it.
    """
    eng.forbid_send_in_handler(what)
    dest = eng.check_dest(dest)
    payload, n = as_bytes(data, "put data")
    offset = eng.check_range(what, dest, offset, n)
    seg = eng.local_segment(dest)
    if seg is not None:  # within the node: a direct copy, complete on return
        if n:
            seg[offset:offset + n] = np.frombuffer(payload, dtype=np.uint8)
        return DONE
    op = Op(rs, dest, False, None, bucket_of(rs, nbi))
    opid = rs.new_op(op)
    _send(eng, rs, op, opid, dest, S.PUT, (opid,), payload=payload, offset=offset,
          copy=not (bulk or (blocking and isinstance(data, bytes))), direct=blocking)
    return op


def start_get(eng: Any, rs: Any, src: int, offset: Any, nbytes: Any, out: Any, nbi: bool,
              what: str) -> Op | Done:
    """Send a get; the data lands in ``out`` (or a new bytearray, the op's value)."""
    eng.forbid_send_in_handler(what)
    src = eng.check_dest(src)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | np.integer):
        raise TypeError(f"{what}: nbytes must be an int, got {type(nbytes).__name__}")
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"{what}: nbytes must be >= 0, got {nbytes}")
    offset = eng.check_range(what, src, offset, nbytes)
    if out is None:
        out = bytearray(nbytes)
        view = memoryview(out)
    else:
        try:
            view = memoryview(out)
        except TypeError:
            raise TypeError(f"{what}: out must be a writable bytes-like object or numpy "
                            f"array, got {type(out).__name__}") from None
        if view.readonly:
            raise TypeError(f"{what}: out is read-only")
        if not view.c_contiguous:
            raise TypeError(f"{what}: out must be contiguous")
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if view.nbytes < nbytes:
            raise ValueError(f"{what}: out holds {view.nbytes} bytes, {nbytes} requested")
        view = view[:nbytes]
    seg = eng.local_segment(src)
    if seg is not None:  # within the node: a direct copy, complete on return
        if nbytes:
            view[:] = seg[offset:offset + nbytes]
        return Done(out)
    op = Op(rs, src, True, view, bucket_of(rs, nbi))
    op.value = out
    opid = rs.new_op(op)
    _send(eng, rs, op, opid, src, S.GET, (opid, nbytes), offset=offset)
    return op


def start_atomic(eng: Any, rs: Any, dest: int, offset: Any, op: Any, value: Any,
                 value2: Any, dtype: Any) -> tuple[Op | Done, int]:
    eng.forbid_send_in_handler("ep.atomic()")
    dest = eng.check_dest(dest)
    size = _atomics.NP_DTYPES[_atomics.DTYPE_INDEX[dtype]].itemsize \
        if dtype in _atomics.DTYPE_INDEX else 1
    offset = eng.check_range("ep.atomic()", dest, offset, size)
    opi, di, b1, b2 = _atomics.check(op, dtype, value, value2, offset)
    if eng.local_segment(dest) is not None:  # within the node: a hardware atomic
        return Done(eng.segment_words(dest).atomic(offset, opi, di, b1, b2)), di
    o = Op(rs, dest)
    opid = rs.new_op(o)
    _send(eng, rs, o, opid, dest, S.ATOMIC, (opid, opi, di, b1, b2), offset=offset)
    return o, di


def start_rpc(eng: Any, rs: Any, dest: int, fn: Any, args: tuple, kwargs: dict,
              ff: bool) -> Op | None:
    what = "ep.rpc_ff()" if ff else "ep.rpc()"
    eng.forbid_send_in_handler(what)
    dest = eng.check_dest(dest)
    table = rs.table
    idx = table.index(fn)
    if table.cats[idx] not in (None, 3):
        raise HandlerCategoryError(
            f"{table.names[idx]} is declared as a "
            f"{('short', 'medium', 'long')[table.cats[idx]]} handler, not an rpc function")
    try:
        payload = msgpack.packb([args, kwargs], use_bin_type=True)
    except Exception as e:
        raise AMArgumentError(f"{what} arguments must be msgpack-serialisable: {e}") from None
    if len(payload) > eng.max_message:
        raise PayloadTooLarge(f"{what} arguments encode to {len(payload)} bytes; at most "
                              f"{eng.max_message} bytes travel in one message")
    if ff:
        eng.send_sys(rs.rank, dest, S.RPC, (0, idx), payload=payload)
        return None
    o = Op(rs, dest)
    opid = rs.new_op(o)
    _send(eng, rs, o, opid, dest, S.RPC, (opid, idx), payload=payload)
    return o


def _send(eng: Any, rs: Any, op: Op, opid: int, dest: int, hidx: int, args: tuple,
          **kw: Any) -> None:
    """Send an operation's request; if sending fails, the operation is taken back (so no
    counter that fence or wait_nbi waits on is left raised) and the error propagates."""
    try:
        eng.send_sys(rs.rank, dest, hidx, args, **kw)
    except BaseException as e:
        rs.ops.pop(opid, None)
        op.complete(error=e)
        raise
