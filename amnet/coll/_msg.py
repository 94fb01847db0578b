"""The collectives' messages: a mailbox per rank, the algorithms' send and receive, the
agreement check, and the runs that drive an algorithm to completion.

An algorithm is a generator (:mod:`amnet.coll._algos`). It sends with ``ctx.send(index, tag,
data)`` and receives by yielding ``ctx.recv(index, tag)`` (one key) or a tuple of keys; it is
resumed with the bytes (a tuple of them) once they have all arrived. A message is keyed by
``(team id, sequence number, tag, source index)``: every member numbers the collectives of a
team in the order it calls them, so messages of different calls never mix, and one that
arrives before its receiver entered the call waits in the mailbox. Payloads larger than the
extension's ``max_medium`` travel in chunks.

Agreement: on entering a call every member sends a description of it (the collective, its
root, sizes, dtype, op, algorithm) to the team's first member, the checker. When the checker
has them all it sends each member a verdict: empty when they agree, else a message naming
the mismatch, which every member raises (``amnet.CollectiveMismatch``) -- also a member
still waiting for data that will never come, so a mismatch never hangs. A call completes
when its algorithm has finished and its verdict is in.

A member whose algorithm fails part way (a reduction function that raises, data of a
mismatched call) tells every other member (ABORT), so none waits for data that will not come;
every member then waits for the verdict and raises the mismatch if there is one, else the
failure (``amnet.AMNetError`` naming the member that failed).

System AMs (the extension's handlers, in this order): DATA, SIG, VERDICT, ABORT.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from .. import AMNetError, CollectiveMismatch

DATA, SIG, VERDICT, ABORT = range(4)
Key = tuple[int, int, int, int]  # team id, seq, tag, source index


class _Parts:
    __slots__ = ("got", "n", "parts")

    def __init__(self, n: int) -> None:
        self.n = n
        self.got = 0
        self.parts: list[bytes | None] = [None] * n


class Mailbox:
    """One rank's arrived messages and verdicts (handlers of any thread add to it)."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.lock = port.lock
        self.partial: dict[Key, _Parts] = {}
        self.ready: dict[Key, bytes] = {}
        self.sigs: dict[tuple[int, int], dict[int, str]] = {}
        self.verdicts: dict[tuple[int, int], str] = {}
        self.aborts: dict[tuple[int, int], str] = {}
        self.dead: set[tuple[int, int]] = set()  # failed calls: their late data is dropped

    # -- handlers -------------------------------------------------------------------------
    def on_data(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 6:
            self.port.refuse()
            return
        team, seq, tag, index, chunk, n = args
        if not 0 <= chunk < n:
            self.port.refuse()
            return
        if (team, seq) in self.dead:
            return
        data = b"" if payload is None else bytes(payload)
        key = (team, seq, tag, index)
        with self.lock:
            if n == 1:
                self.ready[key] = data
                return
            p = self.partial.get(key)
            if p is None:
                p = self.partial[key] = _Parts(n)
            if p.n != n or p.parts[chunk] is not None:
                self.port.refuse()
                return
            p.parts[chunk] = data
            p.got += 1
            if p.got == n:
                del self.partial[key]
                self.ready[key] = b"".join(p.parts)  # type: ignore[arg-type]

    def on_sig(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 3 or payload is None:
            self.port.refuse()
            return
        team, seq, index = args
        with self.lock:
            self.sigs.setdefault((team, seq), {})[index] = bytes(payload).decode(
                "utf-8", "replace")

    def on_verdict(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 2:
            self.port.refuse()
            return
        with self.lock:
            self.verdicts[(args[0], args[1])] = "" if payload is None else bytes(
                payload).decode("utf-8", "replace")

    def on_abort(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 2:
            self.port.refuse()
            return
        with self.lock:
            self.aborts[(args[0], args[1])] = "" if payload is None else bytes(
                payload).decode("utf-8", "replace")

    def forget(self, team: int, seq: int) -> None:
        """Drop what a failed call left (messages that will never be received), and what
        arrives for it later."""
        with self.lock:
            self.dead.add((team, seq))
            self.aborts.pop((team, seq), None)
            for d in (self.partial, self.ready):
                for k in [k for k in d if k[0] == team and k[1] == seq]:
                    del d[k]
            self.sigs.pop((team, seq), None)
            self.verdicts.pop((team, seq), None)


class Ctx:
    """What an algorithm sees of its call: the team, my index, sends and receive keys."""

    __slots__ = ("box", "index", "members", "port", "seq", "size", "team", "tid")

    def __init__(self, box: Mailbox, team: Any, seq: int) -> None:
        self.box = box
        self.port = box.port
        self.team = team
        self.tid = team.id
        self.seq = seq
        self.index = team.index
        self.size = team.size
        self.members = team.members

    def send(self, index: int, tag: int, data: Any) -> None:
        """Send ``data`` (bytes-like; reusable on return) to member ``index``."""
        mv = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else \
            memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1))
        rank = self.members[index]
        step = self.port.max_medium
        n = max(1, -(-len(mv) // step))
        if rank == self.port.rank:  # to myself: straight into the mailbox
            with self.box.lock:
                self.box.ready[(self.tid, self.seq, tag, self.index)] = bytes(mv)
            return
        send = self.port.send
        for c in range(n):
            send(rank, DATA, (self.tid, self.seq, tag, self.index, c, n),
                 mv[c * step:(c + 1) * step])

    def recv(self, index: int, tag: int) -> Key:
        """The key of the message of ``tag`` from member ``index`` (yield it)."""
        return (self.tid, self.seq, tag, index)


class Run:
    """One call on one member: its algorithm's generator, what it waits for, its verdict."""

    __slots__ = ("box", "ctx", "done", "error", "failed", "gen", "need", "result", "sig",
                 "verdict", "what")

    def __init__(self, box: Mailbox, ctx: Ctx, gen: Generator, sig: str, what: str) -> None:
        self.box = box
        self.ctx = ctx
        self.gen = gen
        self.sig = sig
        self.what = what
        self.need: Any = None
        self.done = False  # the algorithm has finished
        self.verdict: str | None = None  # None until it is in
        self.result: Any = None
        self.error: BaseException | None = None  # the algorithm's, raised after the verdict
        self.failed: BaseException | None = None  # raised while another call waited

    def start(self) -> None:
        ctx = self.ctx
        payload = self.sig.encode()
        if ctx.index == 0:
            with self.box.lock:
                self.box.sigs.setdefault((ctx.tid, ctx.seq), {})[0] = self.sig
        else:
            ctx.port.send(ctx.members[0], SIG, (ctx.tid, ctx.seq, ctx.index), payload)
        self._step(None)

    def _step(self, value: Any) -> None:
        try:
            self.need = self.gen.send(value)
        except StopIteration as e:
            self.done = True
            self.result = e.value
            self.need = None
        except Exception as e:  # data of a mismatched call, perhaps: the verdict decides
            self.done = True
            self.error = e
            self.need = None
            ctx = self.ctx
            text = (f"{self.what}: member {ctx.index} (rank {ctx.port.rank}) of {ctx.team} "
                    f"failed in call #{ctx.seq}: {type(e).__name__}: {e}").encode()
            for i in range(ctx.size):  # nobody waits for what I will not send
                if i != ctx.index:
                    ctx.port.send(ctx.members[i], ABORT, (ctx.tid, ctx.seq), text)

    def _have(self) -> Any:
        """The awaited payload(s) if all have arrived (taken from the mailbox), else None."""
        need, ready = self.need, self.box.ready
        if need == ():
            return ()
        if isinstance(need, tuple) and need and isinstance(need[0], tuple):
            if not all(k in ready for k in need):
                return None
            with self.box.lock:
                return tuple(ready.pop(k) for k in need)
        if need not in ready:
            return None
        with self.box.lock:
            return ready.pop(need)

    def ready(self) -> bool:
        """Whether :meth:`advance` can make progress now (the wait predicate: no side
        effects)."""
        ctx = self.ctx
        key = (ctx.tid, ctx.seq)
        if self.verdict is None:
            if key in self.box.verdicts:
                return True
            if ctx.index == 0 and len(self.box.sigs.get(key, ())) == ctx.size:
                return True
        if self.done:
            return self.verdict is not None
        if key in self.box.aborts:
            return True
        need = self.need
        ready = self.box.ready
        if isinstance(need, tuple) and (not need or isinstance(need[0], tuple)):
            return all(k in ready for k in need)
        return need in ready

    def advance(self) -> bool:
        """Make what progress is possible; True when the call is complete. Raises
        CollectiveMismatch when the members disagree about the call."""
        ctx = self.ctx
        key = (ctx.tid, ctx.seq)
        if self.verdict:  # asked again after it failed
            raise CollectiveMismatch(self.verdict)
        if self.verdict is None:
            if ctx.index == 0:
                self._judge(key)
            else:
                v = self.box.verdicts.get(key)
                if v is not None:
                    with self.box.lock:
                        self.verdict = self.box.verdicts.pop(key)
            if self.verdict:
                self.box.forget(*key)
                self.done = True
                raise CollectiveMismatch(self.verdict)
        while not self.done:
            if key in self.box.aborts:  # another member failed: wait only for the verdict
                with self.box.lock:
                    text = self.box.aborts.pop(key)
                self.done, self.need, self.error = True, None, AMNetError(text)
                break
            got = self._have()
            if got is None:
                break
            self._step(got)
        if self.done and self.verdict is not None and self.error is not None:
            self.box.forget(*key)
            raise self.error
        return self.done and self.verdict is not None

    def _judge(self, key: tuple[int, int]) -> None:
        """The checker: once every member's description is in, send the verdicts."""
        ctx = self.ctx
        sigs = self.box.sigs.get(key)
        if sigs is None or len(sigs) < ctx.size:
            return
        with self.box.lock:
            sigs = self.box.sigs.pop(key)
        first = sigs[0]
        verdict = ""
        for i in range(1, ctx.size):
            if sigs[i] != first:
                verdict = (f"{self.what}: the members of {ctx.team} disagree about call "
                           f"#{ctx.seq} on it: member {i} (rank {ctx.members[i]}) called "
                           f"{sigs[i]}, member 0 (rank {ctx.members[0]}) {first}")
                break
        payload = verdict.encode()
        for i in range(1, ctx.size):
            ctx.port.send(ctx.members[i], VERDICT, key, payload)
        self.verdict = verdict
