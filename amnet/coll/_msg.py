"""The collectives' messages: a mailbox per rank, the algorithms' send and receive, the
agreement check, and the runs that drive an algorithm to completion.

An algorithm is a generator (:mod:`amnet.coll._algos`). It sends with ``ctx.send(index, tag,
data)`` and receives by yielding ``ctx.recv(index, tag)`` (one key) or a tuple of keys; it is
resumed with the bytes (a tuple of them) once they have all arrived. A receive whose bytes
end in a buffer, ``ctx.recv_into(index, tag, view)``, *posts* that buffer when it is at least
``POST_MIN`` bytes: a message that arrives while the call waits for it is copied by the
handler straight from the queue into it (one copy, not two), and the receive yields
``LANDED`` instead of bytes (``land(view, data)`` copies whatever did not land).

A message is keyed by ``(team id, sequence number, tag, source index)``: every member numbers
the collectives of a team in the order it calls them, so messages of different calls never
mix, and one that arrives before its receiver entered the call waits in the mailbox.
Payloads larger than the extension's ``max_medium`` travel in chunks.

Agreement. Every call has a description (the collective, its algorithm, root, sizes, dtype,
op) and a 63-bit digest of it, which every data message carries. The members compare their
descriptions -- the *check* -- at the team's first member, the checker: each sends it its
description (SIG), and once it has them all it sends every member the verdict (VERDICT):
empty when they agree, else a message naming the mismatch, which a member still in the call
raises (``amnet.CollectiveMismatch``).

When the check runs is the ``coll_check`` option:

- ``strict``: at every call; a call completes only when its verdict is in, so every member
  of a mismatched call raises from that call. It costs every call a message to the checker
  and one back.
- a number of seconds (the default, lazy): only when a member has a reason to doubt -- data
  whose digest is not its own, data left over when it completes a call or arriving after,
  a call that has made no progress for that long, arguments it refuses -- does it ask every
  member for its description (CHECK). Agreeing calls cost
  nothing more than their data. A member that had already completed its part of a
  mismatched call (a broadcast's root, say) learns of it at the end of its next call on that
  team, which raises the mismatch (the call itself having completed, the team stays in
  step). Nobody waits for ever: the members waiting in the call raise once the verdict is in.

Members remember the descriptions of their last ``KEEP`` calls on each team, to answer a
check of a call they have completed.

A member whose algorithm fails part way (a reduction function that raises) tells every other
member (ABORT), so none waits for data that will not come; they raise ``amnet.AMNetError``
naming the member that failed.

A message sent with ``ack=True`` is acknowledged by the receiver's handler once all of it
has arrived (a reply, ACK), whatever its algorithm is doing: ``yield ctx.ack(index, tag)``
waits for that, as a blocking put waits for its completion (the reference memcpy push).

System AMs (the extension's handlers, in this order): DATA, SIG, VERDICT, ABORT, CHECK, ACK.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from .. import AMNetError, CollectiveMismatch
from ._shm import Cond

DATA, SIG, VERDICT, ABORT, CHECK, ACK = range(6)
KEEP = 4096  # calls of a team whose descriptions a member remembers (to answer a check)
CONFLICT = -1  # a call's data came with two different digests
_MIXED = object()  # _have: data of another call is there
Key = tuple[int, int, int, int]  # team id, seq, tag, source index
#: A call's description: (collective, algorithm, nbytes, root, perm, dtype, op name,
#: element size), None where it does not apply; or a text (a call with refused arguments).
Sig = tuple | str
POST_MIN = 2048  # receive buffers of at least this many bytes are posted (Run.recv_into)
LANDED = b"<landed>"  # what a receive yields when its message went straight into its buffer


def describe(sig: Sig) -> str:
    """A description as the mismatch message shows it."""
    if isinstance(sig, str):
        return sig
    what, alg, nbytes, root, perm, dtype, op, elem = sig
    parts = [f"{what}(algorithm={alg}"]
    for name, v in (("nbytes", nbytes), ("root", root), ("perm", perm), ("dtype", dtype),
                    ("op", op), ("elemsize", elem)):
        if v is not None:
            parts.append(f"{name}={list(v) if name == 'perm' else v}")
    return ", ".join(parts) + ")"


def digest(sig: Sig) -> int:
    """A description's 63-bit digest (the same in every process)."""
    h = hashlib.blake2b(repr(sig).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


class _Parts:
    __slots__ = ("got", "n", "parts")

    def __init__(self, n: int) -> None:
        self.n = n
        self.got = 0
        self.parts: list[bytes | None] = [None] * n


class Mailbox:
    """One rank's arrived messages, the descriptions of its calls and the checks' state
    (handlers of any thread add to it, under ``lock``)."""

    def __init__(self, port: Any) -> None:
        self.port = port
        self.rank = port.rank
        self.lock = port.lock
        self.max_medium = port.max_medium
        self.send_data = port.sender(DATA)
        self.partial: dict[Key, _Parts] = {}
        self.ready: dict[Key, bytes] = {}  # arrived messages (LANDED: in their buffer)
        self.posted: dict[Key, tuple[np.ndarray, int]] = {}  # receive buffers, digests
        self.digests: dict[tuple[int, int], int] = {}  # call -> digest of its data (or CONFLICT)
        self.teams: dict[int, Any] = {}  # team id -> Team
        self.next_seq: dict[int, int] = {}  # team id -> number of my next call on it
        self.active: dict[tuple[int, int], Run] = {}  # my calls in flight
        self.history: dict[tuple[int, int], Sig] = {}  # my calls' descriptions (last KEEP)
        self.prune_at = 2 * KEEP  # history pruned when it holds more descriptions than this
        self.asked: set[tuple[int, int]] = set()  # checks of calls I have not yet entered
        self.answered: set[tuple[int, int]] = set()  # checks I have sent my description to
        self.sigs: dict[tuple[int, int], dict[int, str]] = {}  # as checker: descriptions
        self.judged: set[tuple[int, int]] = set()  # as checker: checks already decided
        self.verdicts: dict[tuple[int, int], str] = {}
        self.failed: dict[int, list[str]] = {}  # team -> mismatches of calls I completed
        self.aborts: dict[tuple[int, int], str] = {}
        self.dead: set[tuple[int, int]] = set()  # failed calls: their late data is dropped
        # team id -> (source, seq, tag) of data sent with ack=True that arrived before I had
        # made the team (a member that finished the split first and called at once)
        self.early_acks: dict[int, list[tuple[int, int, int]]] = {}
        # what amnet.coll._cmail.store files a whole data message into (these objects are
        # never rebound)
        self.c_state = (self.lock.acquire, self.lock.release, self.dead, self.active,
                        self.next_seq, self.digests, self.posted, self.ready, CONFLICT)

    # -- handlers -------------------------------------------------------------------------
    def on_data(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 8:
            self.port.refuse()
            return
        team, seq, tag, index, chunk, n, digest, ack = args
        if not 0 <= chunk < n:
            self.port.refuse()
            return
        if not ack:
            self._store(team, seq, tag, index, chunk, n, digest, payload)
            return
        if self._store(team, seq, tag, index, chunk, n, digest, payload):  # all in: ack it
            with self.lock:
                t = self.teams.get(team)
                if t is None:  # a team I am still making (a split ending here): kept, and
                    self.early_acks.setdefault(team, []).append((src, seq, tag))  # acked
                    return  # once add_team has it
            self.port.reply(src, ACK, (team, seq, -1 - tag, t.index))

    def _store(self, team: int, seq: int, tag: int, index: int, chunk: int, n: int,
               digest: int, payload: Any) -> bool:
        """File a data message; True when the whole message is in (or was dropped).
        amnet.coll._cmail.store files the common case (one chunk, no acknowledgement, no
        posted buffer, a call neither dead nor completed) the same way in C: a change to
        what is filed here changes it there too."""
        call = (team, seq)
        key = (team, seq, tag, index)
        with self.lock:
            if call in self.dead:
                return True
            if call not in self.active and seq < self.next_seq.get(team, 0):
                # data of a call I have completed: none comes when the members agree
                if call not in self.answered:
                    self.port.defer(lambda: self.ask(call))
                return True
            d = self.digests.get(call)
            if d is None:
                self.digests[call] = digest
            elif d != digest:
                self.digests[call] = CONFLICT
            if n == 1:
                if self.posted:
                    post = self.posted.pop(key, None)
                    if (post is not None and post[1] == digest and payload is not None
                            and post[0].nbytes == payload.nbytes):
                        post[0].data[:] = payload  # straight into its receiver's buffer
                        self.ready[key] = LANDED
                        return True
                self.ready[key] = b"" if payload is None else bytes(payload)
                return True
            data = b"" if payload is None else bytes(payload)
            p = self.partial.get(key)
            if p is None:
                p = self.partial[key] = _Parts(n)
            if p.n != n or p.parts[chunk] is not None:
                self.port.refuse()
                return False
            p.parts[chunk] = data
            p.got += 1
            if p.got == n:
                del self.partial[key]
                self.ready[key] = b"".join(p.parts)  # type: ignore[arg-type]
                if self.posted:
                    self.posted.pop(key, None)
                return True
        return False

    def on_ack(self, src: int, args: tuple, payload: Any) -> None:
        """A receiver has all of a message I sent with ``ack=True``."""
        if len(args) != 4 or args[2] >= 0:
            self.port.refuse()
            return
        if (args[0], args[1]) in self.dead:
            return
        with self.lock:
            self.ready[(args[0], args[1], args[2], args[3])] = b""

    def on_check(self, src: int, args: tuple, payload: Any) -> None:
        """A member asks for my description of a call (now, or when I enter it)."""
        if len(args) != 2:
            self.port.refuse()
            return
        call = (args[0], args[1])
        with self.lock:
            if call in self.answered or call in self.dead:
                return
            if args[0] not in self.teams:  # a team I am still making: answer on entering
                self.asked.add(call)
                return
            if call in self.history or args[1] < self.next_seq.get(args[0], 0):
                self._answered(call)
                text = self._description(call)
                self.port.defer(lambda: self.send_sig(call, text))
            else:
                self.asked.add(call)

    def on_sig(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 3 or payload is None:
            self.port.refuse()
            return
        call = (args[0], args[1])
        text = bytes(payload).decode("utf-8", "replace")
        with self.lock:  # add_team looks at sigs under the lock, after it adds the team
            if args[0] not in self.teams:  # a team I am still making (a split ending here)
                self.sigs.setdefault(call, {})[args[2]] = text
                return
        if self.add_sig(call, args[2], text):
            self.port.defer(lambda: self.judge(call))

    def on_verdict(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 2:
            self.port.refuse()
            return
        self.verdict((args[0], args[1]),
                     "" if payload is None else bytes(payload).decode("utf-8", "replace"))

    def on_abort(self, src: int, args: tuple, payload: Any) -> None:
        if len(args) != 2:
            self.port.refuse()
            return
        with self.lock:
            self.aborts[(args[0], args[1])] = "" if payload is None else bytes(
                payload).decode("utf-8", "replace")

    def add_team(self, team: Any) -> None:
        """A team of mine, made now (not in a handler): acknowledge the data that came for it
        before (its senders wait for that), judge the checks whose descriptions came
        before it. Whatever else came early is in the mailbox already, keyed by the team."""
        with self.lock:
            self.teams[team.id] = team
            acks = self.early_acks.pop(team.id, ())
            every = set(range(team.size))
            early = [c for c, sigs in self.sigs.items()
                     if c[0] == team.id and set(sigs) == every] if team.index == 0 else []
        for src, seq, tag in acks:
            self.port.send(src, ACK, (team.id, seq, -1 - tag, team.index))
        for call in early:
            self.judge(call)

    def prune(self) -> None:
        """Forget the descriptions of calls more than KEEP back on their team (under
        ``lock``)."""
        nxt = self.next_seq
        h = self.history  # in place: the C core (amnet.coll._cmail) holds this dict too
        for c in [c for c in h if c[1] < nxt.get(c[0], 0) - KEEP]:
            h.pop(c, None)
        # many teams: not at every call (never below 2 KEEP: Core.start looks only past it)
        self.prune_at = 2 * max(KEEP, len(self.history))

    # -- the check --------------------------------------------------------------------------
    def _answered(self, call: tuple[int, int]) -> None:
        self.answered.add(call)
        self.answered.discard((call[0], call[1] - KEEP))

    def ask(self, call: tuple[int, int]) -> None:
        """Ask every member of the call's team for its description, and send mine (not
        from a handler)."""
        team = self.teams[call[0]]
        with self.lock:
            if call in self.answered:  # asked already, or answering another's request
                return
            self._answered(call)
            text = self._description(call)
        for i in range(team.size):
            if i != team.index:
                self.port.send(team.members[i], CHECK, call)
        self.send_sig(call, text)

    def _description(self, call: tuple[int, int]) -> str:
        sig = self.history.get(call)
        return describe(sig) if sig is not None else \
            f"a call more than {KEEP} calls back (forgotten)"

    def send_sig(self, call: tuple[int, int], text: str) -> None:
        """My description of ``call`` to the team's checker (not from a handler)."""
        team = self.teams[call[0]]
        if team.index == 0:
            if self.add_sig(call, 0, text):
                self.judge(call)
        else:
            self.port.send(team.members[0], SIG, (call[0], call[1], team.index), text.encode())

    def add_sig(self, call: tuple[int, int], index: int, text: str) -> bool:
        """As checker: a member's description; True when they are all in."""
        team = self.teams[call[0]]
        if not 0 <= index < team.size or team.index != 0:
            self.port.refuse()
            return False
        with self.lock:
            if call in self.judged:
                return False
            sigs = self.sigs.setdefault(call, {})
            sigs[index] = text
            return len(sigs) == team.size

    def judge(self, call: tuple[int, int]) -> None:
        """As checker, every description in: send the verdicts (not from a handler)."""
        with self.lock:
            sigs = self.sigs.pop(call, None)
            if sigs is None or call in self.judged:
                return
            self.judged.add(call)
            self.judged.discard((call[0], call[1] - KEEP))
        team = self.teams[call[0]]
        first, verdict = sigs[0], ""
        for i in range(1, team.size):
            if sigs[i] != first:
                verdict = (f"amnet.coll: the members of {team} disagree about call "
                           f"#{call[1]} on it: member {i} (rank {team.members[i]}) called "
                           f"{sigs[i]}, member 0 (rank {team.members[0]}) {first}")
                break
        payload = verdict.encode()
        for i in range(1, team.size):
            self.port.send(team.members[i], VERDICT, call, payload)
        self.verdict(call, verdict)

    def verdict(self, call: tuple[int, int], text: str) -> None:
        """A verdict in: for a call in flight or not yet entered it waits for the call; a
        mismatch of a call I have completed is raised at the end of my next call on the
        team."""
        with self.lock:
            if call in self.active or call[1] >= self.next_seq.get(call[0], 0):
                self.verdicts[call] = text
            elif text:
                self.failed.setdefault(call[0], []).append(
                    f"{text} (this member had completed its part of that call; raised at "
                    f"the end of its next one on the team)")
                self._forget(call)

    def _forget(self, call: tuple[int, int]) -> None:
        """Drop what a failed call left (messages that will never be received), and what
        arrives for it later (under ``lock``)."""
        self.dead.add(call)
        team, seq = call
        self.aborts.pop(call, None)
        self.digests.pop(call, None)
        self.verdicts.pop(call, None)
        for d in (self.partial, self.ready, self.posted):
            for k in [k for k in d if k[0] == team and k[1] == seq]:
                del d[k]


def land(view: np.ndarray, data: bytes) -> None:
    """Copy a message received with :meth:`Run.recv_into` into ``view``, unless it is
    there already."""
    if data is not LANDED:
        view.data[:] = data


class Run:
    """One call on one member: what its algorithm sees of it (the team, my index, sends and
    receive keys: the algorithm's ``ctx``), the algorithm's generator, what it waits for,
    its verdict."""

    __slots__ = ("box", "call", "checked", "digest", "done", "failed", "gen", "index",
                 "members", "need", "port", "rank", "result", "seq", "sig", "since", "size",
                 "strict", "team", "tid", "verdict", "what")

    def __init__(self, box: Mailbox, team: Any, seq: int, digest: int, sig: Sig, what: str,
                 strict: bool) -> None:
        self.box = box
        self.port = box.port
        self.rank = box.rank
        self.team = team
        self.tid = tid = team.id
        self.seq = seq
        self.call = (tid, seq)
        self.digest = digest
        self.index = team.index
        self.size = team.size
        self.members = team.members
        self.gen: Any = None  # the algorithm's generator (set before start)
        self.sig = sig
        self.what = what
        self.strict = strict  # complete only with the verdict in
        self.checked = False  # my description has gone to the checker
        self.since = 0.0  # when the call last made progress (for the lazy check)
        self.need: Any = None
        self.done = False  # the algorithm has finished
        self.verdict: str | None = None  # None until it is in
        self.result: Any = None
        self.failed: BaseException | None = None  # raised while another call waited

    # -- what the algorithm uses ------------------------------------------------------------
    def send(self, index: int, tag: int, data: Any, ack: bool = False) -> None:
        """Send ``data`` (bytes-like; reusable on return) to member ``index``; with ``ack``,
        the receiver acknowledges it once all of it is in (see :meth:`ack`)."""
        if type(data) is not np.ndarray or data.dtype != np.uint8 or data.ndim != 1:
            data = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else \
                np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        rank = self.members[index]
        if rank == self.rank:  # to myself: straight into the mailbox
            with self.box.lock:
                self.box.ready[(self.tid, self.seq, tag, self.index)] = bytes(data)
                if ack:
                    self.box.ready[(self.tid, self.seq, -1 - tag, self.index)] = b""
            return
        step = self.box.max_medium
        n = len(data)
        a = 1 if ack else 0
        if n <= step:
            self.box.send_data(rank, (self.tid, self.seq, tag, self.index, 0, 1, self.digest,
                                      a), data)
            return
        n = -(-n // step)
        send = self.box.send_data
        for c in range(n):
            send(rank, (self.tid, self.seq, tag, self.index, c, n, self.digest, a),
                 data[c * step:(c + 1) * step])

    def recv(self, index: int, tag: int) -> Key:
        """The key of the message of ``tag`` from member ``index`` (yield it)."""
        return (self.tid, self.seq, tag, index)

    def recv_into(self, index: int, tag: int, view: np.ndarray) -> Key:
        """As :meth:`recv`, for a message that ends in ``view`` (uint8): a large one that
        arrives while the call waits for it goes straight there, and the receive yields
        LANDED; else its bytes, for :func:`land` to copy."""
        key = (self.tid, self.seq, tag, index)
        if view.nbytes >= POST_MIN:
            box = self.box
            with box.lock:
                if key not in box.ready and key not in box.partial:
                    box.posted[key] = (view, self.digest)
        return key

    def ack(self, index: int, tag: int) -> Key:
        """The key of member ``index``'s acknowledgement of my message of ``tag`` (yield
        it)."""
        return (self.tid, self.seq, -1 - tag, index)

    # -- driving it -------------------------------------------------------------------------
    def start(self, check: bool = False) -> None:
        """Enter the call (``check``: ask every member for its description at once)."""
        box, call = self.box, self.call
        with box.lock:
            box.next_seq[call[0]] = call[1] + 1
            box.active[call] = self
            history = box.history
            history[call] = self.sig
            history.pop((call[0], call[1] - KEEP), None)
            if len(history) > box.prune_at:
                box.prune()
            asked = bool(box.asked) and call in box.asked
            if asked:
                box.asked.discard(call)
            mine = (asked or self.strict) and not check  # my description goes now
            if mine:
                box._answered(call)
        if check:  # refused arguments: every member asked for its description at once
            self.check()
        elif mine:
            self.checked = True
            box.send_sig(call, describe(self.sig))
        self.since = time.monotonic()
        self._step(None)

    def check(self) -> None:
        """Ask every member for its description of this call (the lazy check)."""
        if not self.checked:
            self.checked = True
            self.box.ask(self.call)

    def __str__(self) -> str:
        """What a blocking call waits in, for a timeout's diagnosis (Port.waiting)."""
        return f"amnet.coll {self.what} (call #{self.seq} on {self.team})"

    def _step(self, value: Any) -> None:
        try:
            self.need = self.gen.send(value)
        except StopIteration as e:
            self.done = True
            self.result = e.value
            self.need = None
        except Exception as e:
            text = (f"amnet.coll {self.what}: member {self.index} (rank {self.rank}) of "
                    f"{self.team} failed in call #{self.seq}: {type(e).__name__}: {e}").encode()
            for i in range(self.size):  # nobody waits for what I will not send
                if i != self.index:
                    self.port.send(self.members[i], ABORT, self.call, text)
            self._close(True)
            raise

    def _have(self) -> Any:
        """The awaited payload(s) if all have arrived (taken from the mailbox), else None;
        _MIXED, taking nothing, when data of this call came with another digest."""
        need, box = self.need, self.box
        if type(need) is Cond:  # a node-area wait (amnet.coll._node)
            return () if need() else None
        ready, call = box.ready, self.call
        if need == ():
            return ()
        many = isinstance(need, tuple) and need and isinstance(need[0], tuple)
        if many:
            if not all(k in ready for k in need):
                return None
        elif need not in ready:
            return None
        with box.lock:  # the handler stores data and its digest under the lock
            if box.digests.get(call, self.digest) != self.digest:
                return _MIXED
            if many:
                return tuple(ready.pop(k) for k in need)
            return ready.pop(need)

    def ready(self) -> bool:
        """Whether :meth:`advance` can make progress now (the wait predicate: no side
        effects)."""
        box, call = self.box, self.call
        if call in box.verdicts or call in box.aborts:
            return True
        if self.done:
            return False
        need = self.need
        if type(need) is Cond:  # a node-area wait (amnet.coll._node)
            return bool(need())
        d = box.digests.get(call)
        if d is not None and d != self.digest:
            return not self.checked
        ready = box.ready
        if isinstance(need, tuple) and (not need or isinstance(need[0], tuple)):
            return all(k in ready for k in need)
        return need in ready

    def advance(self) -> bool:
        """Make what progress is possible; True when the call is complete. Raises
        CollectiveMismatch when the members disagree about the call, AMNetError when
        another member failed in it, and what the algorithm raised."""
        box, call = self.box, self.call
        if self.verdict:  # asked again after it failed
            raise CollectiveMismatch(self.verdict)
        if call in box.verdicts:
            with box.lock:
                v = box.verdicts.pop(call, "")
            if v:
                self.verdict = v
                self._close(True)
                raise CollectiveMismatch(v)
            self.verdict = ""
        while not self.done:
            if box.aborts and call in box.aborts:  # another member failed
                with box.lock:
                    text = box.aborts.pop(call)
                self._close(True)
                raise AMNetError(text)
            got = self._have()
            if got is None:
                if box.digests.get(call, self.digest) != self.digest:
                    self.check()  # data of another call is here: the members compare
                return False
            if got is _MIXED:
                self.check()
                return False
            self.since = time.monotonic()
            self._step(got)
        if self.verdict is None and self.strict:
            return False
        self._close(False)
        return True

    def _close(self, failed: bool) -> None:
        self.done = True
        self.need = None
        if failed and self.gen is not None:
            self.gen.close()  # its cleanup now (a node-area call marks its steps done)
        box, call = self.box, self.call
        with box.lock:
            box.active.pop(call, None)
            if failed:
                box._forget(call)
                return
            # a verdict that came after advance() looked (a handler on another thread, or
            # one my own sends ran): still in the call, this member raises it
            v = box.verdicts.pop(call, None) if box.verdicts else None
            if v:
                box._forget(call)
            else:
                d = box.digests.pop(call, None)
                if box.posted:  # receive buffers never used (none when the members agree)
                    for k in [k for k in box.posted if k[0] == call[0] and k[1] == call[1]]:
                        del box.posted[k]
        if v:
            self.verdict = v
            raise CollectiveMismatch(v)
        if d is not None and d != self.digest and not self.checked:
            box.ask(call)  # data of another call came and was not needed: compare
