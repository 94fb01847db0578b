"""The rank side of the bootstrap protocol: one connection per process, shared by its ranks.

A daemon I/O thread owns the zmq DEALER socket (zmq sockets are not thread-safe); rank-threads
queue messages for it and wait on a condition for replies. An ``abort`` from the launcher wakes
every waiter with :class:`amnet.JobAborted`. A ``where`` from the launcher (on a timeout or
Ctrl-C) is answered by the I/O thread itself from what ``where()`` reads of the ranks' state,
so ranks blocked anywhere (in a wait, in a sleep) are described without their help.

For jobs across hosts the connection uses CurveZMQ with the job's keys (``spec["curve"]``,
see :mod:`amnet._security`).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import zmq

from .. import _protocol as proto
from .._errors import (
    BarrierMismatch,
    CollectiveMismatch,
    JobAborted,
    barrier_mismatch_message,
    barrier_name_text,
    cut_name_text,
)
from .._security import apply_client, mechanism

_ERRORS = {"BarrierMismatch": BarrierMismatch, "CollectiveMismatch": CollectiveMismatch}


def reply_value(reply: dict[str, Any], rank: int, name: Any) -> Any:
    """The value of a completed bootstrap collective for ``rank`` (which passed ``name``), or
    its error raised (the launcher's reply, or the MPI bootstrap's, which computes the same).

    Raises:
        CollectiveMismatch / BarrierMismatch: ranks disagreed on the op or the name.
    """
    err = reply.get("error")
    if err:
        if err[0] == "BarrierMismatch" and len(err) > 2:  # [.., barrier, [[rank, repr]]]
            mine = None if name is None else repr(name)
            raise BarrierMismatch(barrier_mismatch_message(
                err[1], rank, None if name is None else barrier_name_text(name),
                [(int(r), cut_name_text(str(t))) for r, t in err[2] if t != mine]))
        raise _ERRORS.get(err[0], CollectiveMismatch)(err[1])
    return reply.get("value")


class BootClient:
    """Bootstrap connection of one process. Thread-safe; every method may block.

    ``curve``: the job's CURVE keys (``spec["curve"]``), or None: then the connection
    proves the job's secret (``token``) with zmq's PLAIN mechanism (:mod:`amnet._security`).
    ``mechanism`` says what the connection uses (``"CURVE"`` or ``"PLAIN"``).
    """

    def __init__(
        self, address: str, token: str, proc: int, host: str, threads_per_proc: int,
        finished: list[list[int]], curve: Mapping[str, str] | None = None,
        where: Callable[[], list] | None = None,
    ) -> None:
        self.address = address
        self._where = where  # where this process's ranks are: [[rank, entry], ...]
        self._t = threads_per_proc
        self._ctx = zmq.Context()
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, proto.client_id(token, "p", proc))
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        apply_client(sock, curve, token)
        self.mechanism = mechanism(sock)
        sock.connect(address)
        self._sock = sock
        self._out: collections.deque[bytes] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._cond = threading.Condition()
        self._replies: dict[tuple, dict[str, Any]] = {}
        self._taken: collections.Counter = collections.Counter()
        self.aborted: JobAborted | None = None
        self.send({"t": "hello", "kind": "proc", "token": token, "proc": proc,
                   "pid": os.getpid(), "host": host, "done": finished})
        self._thread = threading.Thread(target=self._loop, name="amnet-bootstrap", daemon=True)
        self._thread.start()

    # -- rank-thread side -----------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        self._out.append(proto.pack(msg))
        os.write(self._wake_w, b"\0")

    def _wait(self, key: tuple, timeout: float | None = None) -> dict[str, Any] | None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: key in self._replies or self.aborted is not None, timeout)
            if key in self._replies:
                return self._replies[key]
            if self.aborted is not None:
                raise self.aborted
            assert not ok
            return None

    def has_reply(self, key: tuple) -> bool:
        return key in self._replies or self.aborted is not None

    def collective(self, rank: int, seq: int, op: str, name: str | None = None,
                   value: Any = None, waiter: Any = None) -> Any:
        """Enter the ``seq``-th bootstrap collective of ``rank`` and return its value.

        ``waiter(pred)``, when given, is how to wait (the AM engine's ``wait_until``, so a
        rank keeps serving AMs while it waits here).

        Raises:
            JobAborted: the job is being torn down while waiting.
            CollectiveMismatch / BarrierMismatch: ranks disagreed on the op or the name.
        """
        if self.aborted is not None:
            raise self.aborted
        self.send({"t": "coll", "rank": rank, "seq": seq, "op": op, "name": name,
                   "value": value})
        key = ("coll", seq)
        if waiter is not None:
            waiter(lambda: self.has_reply(key))
        reply = self._wait(key)
        with self._cond:
            self._taken[key] += 1
            if self._taken[key] >= self._t:
                del self._replies[key], self._taken[key]
        return reply_value(reply, rank, name)

    def report(self, msg: dict[str, Any], timeout: float = 5.0) -> bool:
        """Send a ``done``/``abort`` message and wait for the launcher's receipt."""
        key = ("ack", msg["rank"], msg["t"])
        self.send(msg)
        try:
            return self._wait(key, timeout) is not None
        except JobAborted:
            return False

    # -- I/O thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        sock = self._sock
        while True:
            events = dict(poller.poll())
            if self._wake_r in events:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            while self._out:
                sock.send(self._out.popleft())
            if sock in events:
                while True:
                    try:
                        data = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        try:
            msg = proto.unpack(data)
            t = msg["t"]
            key = (("coll", int(msg["seq"])) if t == "coll_done" else
                   ("ack", int(msg["rank"]), str(msg["of"])) if t == "ack" else None)
            if t == "where":  # the launcher asks where the ranks are: answer from here
                self._sock.send(proto.pack({"t": "here", "id": msg.get("id"),
                                            "ranks": self._where() if self._where else []}))
                return
        except Exception:
            return  # never let a bad frame stop this thread: ranks wait on it
        with self._cond:
            if key is not None:
                self._replies[key] = msg
            elif t == "abort":
                if self.aborted is None:
                    self.aborted = JobAborted(msg.get("reason", "job aborted"), msg.get("code", 1))
            else:
                return
            self._cond.notify_all()
