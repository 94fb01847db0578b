"""The bootstrap protocol shared by the launcher (``amnet.launch``) and the ranks (``amnet.core``).

Every message is one msgpack-encoded map with a ``"t"`` (type) key. The launcher hosts a zmq
ROUTER; agents and rank processes connect DEALER sockets and must open with a ``hello`` that
carries the job token, or everything they send is dropped.

Client -> launcher:
    hello   {kind: "agent"|"proc", token, node|proc, pid, host, done?}
    coll    {rank, seq, op, name, value}       a rank enters its seq-th bootstrap collective
    done    {rank, code, result?, error?}      a rank finished (acked with "ack")
    abort   {rank, code, msg}                  amnet.abort() (acked with "ack")
    exit    {proc, pid, code}                  agent: a process ended (code < 0: signal)
    here    {id, ranks: [[rank, entry], ...]}  a process answers "where" (entries: see
                                               amnet.core._runtime.ProcessState.where)
Launcher -> client:
    coll_done {seq, value, error?}             one per process once every rank entered
    ack {rank}                                 delivery receipt for done/abort
    abort {reason, code}                       tear down: wake waiters, stop processes
    where {id}                                 a timeout or signal: where are your ranks?
    ping {}                                    agent liveness
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

import msgpack

SPEC_ENV = "AMNET_JOB_SPEC"
#: the largest bootstrap message (an amnet.run result travels in one)
MAX_MESSAGE = 512 << 20
_LEN = struct.Struct(">I")


class ProtocolError(ValueError):
    """A frame that is not a well-formed amnet bootstrap message."""


def client_id(token: str, kind: str, index: int) -> bytes:
    """A client's zmq routing id: stable across reconnections, unguessable without the token."""
    tag = hashlib.blake2s(f"{kind}{index}".encode(), key=token.encode()[:32],
                          digest_size=8).hexdigest()
    return f"{kind}{index}.{tag}".encode()


def pack(msg: dict[str, Any]) -> bytes:
    return msgpack.packb(msg, use_bin_type=True)


def unpack(data: bytes) -> dict[str, Any]:
    """Decode one message; raise :class:`ProtocolError` on anything malformed."""
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable frame ({e})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise ProtocolError("frame is not a message map with a type")
    return msg


def frame_spec(spec: dict[str, Any]) -> bytes:
    """Length-prefixed spec, as written on an agent's standard input."""
    body = pack(dict(spec, t="spec"))
    return _LEN.pack(len(body)) + body


def read_framed_spec(stream) -> dict[str, Any]:
    head = stream.read(_LEN.size)
    if len(head) != _LEN.size:
        raise ProtocolError("no job spec on standard input (was this agent started by amnet-run?)")
    (n,) = _LEN.unpack(head)
    body = stream.read(n)
    if len(body) != n:
        raise ProtocolError("truncated job spec on standard input")
    return unpack(body)


def spec_to_env(spec: dict[str, Any]) -> str:
    return base64.b64encode(pack(dict(spec, t="spec"))).decode("ascii")


def spec_from_env(text: str) -> dict[str, Any]:
    """The spec of ``AMNET_JOB_SPEC``: the spec itself, or ``@PATH`` of a file holding it
    (a spec too large for the environment, written by the MPI launcher's side)."""
    if text.startswith("@"):
        try:
            with open(text[1:]) as f:
                text = f.read()
        except OSError as e:
            raise ProtocolError(f"bad {SPEC_ENV}: cannot read {text[1:]!r}: {e}") from None
    try:
        return unpack(base64.b64decode(text))
    except (ValueError, TypeError) as e:
        raise ProtocolError(f"bad {SPEC_ENV}: {e}") from None
