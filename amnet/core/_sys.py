"""System handlers: the target side of put, get, atomics, barriers and rpc.

Each takes ``(engine, rank_state, src, args, payload, offset, flags)``. Every field that came
off the wire is checked before it is used; a message that does not fit is refused (dropped and
counted), never run and never written to memory.
"""

from __future__ import annotations

import builtins
import traceback
from typing import Any

import msgpack
import numpy as np

from .._errors import PayloadTooLarge as PayloadTooLarge_
from . import _atomics
from . import _wire as W
from ._barrier import NO_TEXT, SYS_BARRIER

PUT, ACK, GET, GET_DATA, ATOMIC, BARRIER, RPC, RPC_RESULT = range(8)
assert BARRIER == SYS_BARRIER


def _complete(eng: Any, rs: Any, src: int, opid: int, value: Any = None,
              payload: Any = None) -> None:
    op = rs.claim(opid, src)
    if op is None:  # unknown, or not from the rank the op went to
        eng._refuse()
        return
    if op.is_get:
        n = 0 if payload is None else payload.nbytes
        out = op.out
        if n != len(out):
            op.complete(error=RuntimeError(f"get: expected {len(out)} bytes, got {n}"))
            return
        if n:
            np.frombuffer(out, dtype=np.uint8)[:] = np.frombuffer(payload, dtype=np.uint8)
        op.complete(op.value)
    else:
        op.complete(value)


def landed(payload: Any, view: np.ndarray) -> bool:
    """Whether ``payload`` is ``view``'s memory already (the conduit received it there)."""
    if not isinstance(payload, memoryview) or payload.obj is None:
        return False
    base = payload.obj
    return (isinstance(base, np.ndarray) and base.ctypes.data == view.ctypes.data
            and base.nbytes == view.nbytes)


def h_put(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 1 or flags & W.REPLY or payload is None:
        return eng._refuse()
    n = payload.nbytes
    if offset + n > eng.seg_size:
        return eng._refuse()
    if n:
        view = rs.segment[offset:offset + n]
        if not landed(payload, view):  # the conduit may have received it there already
            view[:] = np.frombuffer(payload, dtype=np.uint8)
    eng.send_sys(rs.rank, src, ACK, (args[0],), reply=True)


def h_ack(eng, rs, src, args, payload, offset, flags) -> None:
    if not 1 <= len(args) <= 2 or not flags & W.REPLY:
        return eng._refuse()
    _complete(eng, rs, src, args[0], args[1] if len(args) == 2 else None)


def h_get(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 2 or flags & W.REPLY or payload is not None:
        return eng._refuse()
    opid, n = args
    if n < 0 or offset + n > eng.seg_size:
        return eng._refuse()
    data = rs.segment[offset:offset + n]
    eng.send_sys(rs.rank, src, GET_DATA, (opid,), payload=memoryview(data), reply=True)


def h_get_data(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 1 or not flags & W.REPLY:
        return eng._refuse()
    _complete(eng, rs, src, args[0], payload=payload)


def h_atomic(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 5 or flags & W.REPLY or payload is not None:
        return eng._refuse()
    opid, opi, di, b1, b2 = args
    if not 0 <= opi < len(_atomics.OPS) or not 0 <= di < len(_atomics.DTYPES):
        return eng._refuse()
    size = _atomics.NP_DTYPES[di].itemsize
    if offset % size or offset + size > eng.seg_size:
        return eng._refuse()
    if size == 4 and not (-(1 << 31) <= b1 < 1 << 31 and -(1 << 31) <= b2 < 1 << 31):
        return eng._refuse()  # operands of 4-byte words travel as sign-extended int32
    # a hardware atomic: ranks of this node may run direct ones on the same word
    old = eng.segment_words(rs.rank).atomic(offset, opi, di, b1, b2)
    eng.send_sys(rs.rank, src, ACK, (opid, old), reply=True)


def h_barrier(eng, rs, src, args, payload, offset, flags) -> None:
    # anonymous: 7 arguments; named: an 8th, where the payload (the two names) splits
    named = len(args) == 8 and payload is not None and args[2] == 1
    if not named and (len(args) != 7 or payload is not None or args[2] != 0):
        return eng._refuse()
    epoch, rnd, *state = args[:7]
    bar = rs.barrier
    if not 0 <= rnd < bar.rounds or src != (rs.rank - (1 << rnd)) % eng.size:
        return eng._refuse()
    texts = NO_TEXT
    if named:
        data = bytes(payload)
        cut = args[7]
        if not 0 < cut <= len(data):
            return eng._refuse()
        texts = (data[:cut], data[cut:] or data[:cut])
    bar.arrived(epoch, rnd, tuple(state), texts)


def h_rpc(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 2 or flags & W.REPLY or payload is None:
        return eng._refuse()
    opid, idx = args
    table = rs.table
    if not 0 <= idx < len(table.fns) or table.cats[idx] not in (None, 3):
        return eng._refuse()
    name = table.names[idx]
    try:
        call = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        fargs, fkwargs = call
        fargs = list(fargs)
        fkwargs = dict(fkwargs)
        if not all(isinstance(k, str) for k in fkwargs):
            raise TypeError("keyword names must be str")
    except Exception:
        return eng._refuse()
    fn = table.fns[idx]

    def run(tok, *_):
        tok._replied = True  # the system replies with fn's result
        return fn(*fargs, **fkwargs)

    if opid == 0:  # rpc_ff: an exception is a handler failure
        eng.run_handler(rs, run, name, src, True, ())
        return
    status, out = 0, b""
    try:
        result = _call_capturing(eng, rs, run, name, src)
        out = msgpack.packb(result, use_bin_type=True)
        if len(out) > eng.max_message:
            raise PayloadTooLarge_(f"the result of rpc {name} on rank {rs.rank} encodes to "
                                  f"{len(out)} bytes; at most {eng.max_message} bytes travel "
                                  "in one message")
    except _Raised as r:
        status, out = 1, encode_exception(r.exc, name, rs.rank)
    except PayloadTooLarge_ as e:
        status, out = 1, encode_exception(e, name, rs.rank)
    except Exception as e:  # the result could not be encoded
        err = TypeError(f"the result of rpc {name} on rank {rs.rank} is not msgpack-"
                        f"serialisable: {e}")
        status, out = 1, encode_exception(err, name, rs.rank)
    eng.send_sys(rs.rank, src, RPC_RESULT, (opid, status), payload=out, reply=True)


class _Raised(Exception):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _call_capturing(eng, rs, run, name, src):
    try:
        return eng.hot.run_handler(rs.rank - eng.first, run, name, src, True, (), True)
    except BaseException as e:  # SystemExit too: it belongs to the caller, not to this poll
        raise _Raised(e) from None


def h_rpc_result(eng, rs, src, args, payload, offset, flags) -> None:
    if len(args) != 2 or not flags & W.REPLY or payload is None:
        return eng._refuse()
    opid, status = args
    op = rs.ops.get(opid)
    if op is None or op.peer != src:
        return eng._refuse()
    try:
        if status == 0:
            value, error = msgpack.unpackb(payload, raw=False, strict_map_key=False), None
        else:
            value, error = None, decode_exception(payload, src)
    except Exception:
        return eng._refuse()
    del rs.ops[opid]
    op.complete(value, error)


def encode_exception(exc: BaseException, name: str, rank: int) -> bytes:
    tb = "".join(traceback.format_exception(exc))
    try:
        args = msgpack.packb(list(exc.args), use_bin_type=True)
    except Exception:
        args = None  # rebuilt from the message alone
    return msgpack.packb([type(exc).__module__, type(exc).__qualname__, str(exc), tb, name,
                          rank, args], use_bin_type=True)


def decode_exception(payload: Any, src: int) -> BaseException:
    """Re-create the remote exception: builtin and amnet exception types come back as
    themselves (with their message), any other as :class:`amnet.RPCError`. Nothing from the
    wire is unpickled, so a peer cannot make this process run code.
    """
    from .. import _errors
    from .._errors import RemoteTraceback, RPCError

    module, tname, text, tb, name, rank, packed_args = msgpack.unpackb(payload, raw=False)
    args = [text]
    if packed_args is not None:
        args = list(msgpack.unpackb(packed_args, raw=False, strict_map_key=False))
    cls = None
    if module == "builtins":
        cls = getattr(builtins, str(tname), None)
    elif module == "amnet":
        cls = getattr(_errors, str(tname), None)
    exc: BaseException
    try:
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            raise TypeError
        exc = cls(*args)
    except Exception:
        exc = RPCError(f"rpc {name} on rank {rank} raised {module}.{tname}: {text}")
    exc.add_note(f"(raised by rpc {name} on rank {rank})")
    exc.__cause__ = RemoteTraceback(tb)
    return exc


SYSTEM_HANDLERS = (h_put, h_ack, h_get, h_get_data, h_atomic, h_barrier, h_rpc, h_rpc_result)
