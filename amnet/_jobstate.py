"""The book-keeping of a job's bootstrap: collectives, rank ends, the first failure and its
diagnosis. The launcher keeps one per job; the MPI bootstrap (:mod:`amnet.core._mpiboot`), which
has no launcher, completes its collectives with the same rules in every process.

Pure logic with no I/O, so the rules (when a job has failed, what the one-line diagnosis
says) are easy to read and to test.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import cut_name_text
from ._topology import Topology, format_ranks

_WHAT = {"init": "amnet.init()", "barrier": "a bootstrap barrier", "allgather": "an allgather",
         "finalize": "amnet.finalize()"}


def _ranks_word(ranks) -> str:
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + format_ranks(ranks)


def _wait_verb(ranks) -> str:
    return "waits" if len(set(ranks)) == 1 else "wait"


def _be(ranks) -> str:
    return "is" if len(set(ranks)) == 1 else "are"


@dataclass
class Coll:
    op: str
    arrived: dict[int, Any] = field(default_factory=dict)
    ops: dict[int, str] = field(default_factory=dict)
    names: dict[int, Any] = field(default_factory=dict)


@dataclass
class Failure:
    code: int
    diagnosis: str
    rank: int | None = None
    error: dict[str, Any] | None = None


class JobState:
    """Tracks one job. Methods return messages to send as ``(proc, message)`` pairs."""

    def __init__(self, topology: Topology) -> None:
        self.topo = topology
        self.colls: dict[int, Coll] = {}
        self.next_seq = [0] * topology.size
        self.done: dict[int, int] = {}  # rank -> exit code
        self.results: dict[int, bytes] = {}
        self.proc_host: dict[int, str] = {}
        self.proc_exit: dict[int, int] = {}
        self.failure: Failure | None = None

    # -- naming ---------------------------------------------------------------------------
    def where(self, ranks) -> str:
        ranks = sorted(set(ranks))
        t = self.topo
        procs = sorted({t.proc_of(r) for r in ranks})
        nodes = sorted({t.node_of(r) for r in ranks})
        hosts = sorted({self.proc_host.get(p, "?") for p in procs})
        parts = [f"node {format_ranks(nodes)}", f"proc {format_ranks(procs)}"]
        if len(ranks) == 1 and t.threads_per_proc > 1:
            parts.append(f"thread {t.thread_of(ranks[0])}")
        parts.append(f"host {', '.join(hosts)}")
        return f"{_ranks_word(ranks)} ({', '.join(parts)})"

    def fail(self, code: int, diagnosis: str, rank: int | None = None,
             error: dict | None = None) -> bool:
        """Record the job's first failure; later ones are consequences. True if first."""
        if self.failure is not None:
            return False
        self.failure = Failure(code or 1, diagnosis, rank, error)
        return True

    # -- collectives ----------------------------------------------------------------------
    def enter(self, rank: int, seq: int, op: str, name: Any, value: Any):
        """A rank entered its ``seq``-th collective. Returns the reply when it completes."""
        if seq != self.next_seq[rank] or rank in self.done:
            return None  # out of order: a confused or hostile client; ignore
        self.next_seq[rank] = seq + 1
        c = self.colls.setdefault(seq, Coll(op))
        c.arrived[rank] = value
        c.ops[rank] = op
        if name is not None:
            c.names[rank] = name
        if len(c.arrived) < self.topo.size:
            return None
        del self.colls[seq]
        reply: dict[str, Any] = {"t": "coll_done", "seq": seq, "value": None}
        first = min(c.ops)
        other = next((r for r in sorted(c.ops) if c.ops[r] != c.ops[first]), None)
        if other is not None:
            reply["error"] = ["CollectiveMismatch",
                              f"collective mismatch at bootstrap step {seq}: rank {first} "
                              f"called {_WHAT[c.ops[first]]} but rank {other} called "
                              f"{_WHAT[c.ops[other]]}"]
        elif len(set(map(repr, c.names.values()))) > 1:
            # each rank's client says which name it passed and which the others did: it
            # gets the lowest rank that passed each name (amnet._errors.BarrierMismatch)
            first: dict[str, int] = {}
            for r in sorted(c.names):
                first.setdefault(repr(c.names[r]), r)
            reply["error"] = ["BarrierMismatch", f"a bootstrap barrier (bootstrap step {seq})",
                              [[r, text] for text, r in first.items()]]
        elif op in ("allgather", "init"):
            reply["value"] = [c.arrived[r] for r in range(self.topo.size)]
        return reply

    def pending(self) -> list[tuple[int, Coll]]:
        return sorted(self.colls.items())

    def check_stranded(self) -> None:
        """Fail the job when a finished rank can never join a collective others wait in."""
        for _seq, c in self.pending():
            gone = [r for r in self.done if r not in c.arrived]
            if gone:
                waiting = sorted(c.arrived)
                what = _WHAT[c.ops[waiting[0]]]
                verb = "calling" if c.op in ("init", "finalize") else "entering"
                self.fail(1, f"{self.where([gone[0]])} ended without {verb} {what} while "
                             f"{_ranks_word(waiting)} {_wait_verb(waiting)} in it", gone[0])
                return

    # -- rank and process ends ----------------------------------------------------------------
    def rank_done(self, rank: int, code: int, result: bytes | None,
                  error: dict[str, Any] | None) -> None:
        self.done[rank] = code
        if result is not None:
            self.results[rank] = result
        if error is not None:
            self.fail(1, f"{self.where([rank])}{raised_text(error)}", rank, error)
        elif code:
            self.fail(code, f"{self.where([rank])} exited with code {code}", rank)
        self.check_stranded()

    def proc_exited(self, proc: int, code: int) -> None:
        self.proc_exit[proc] = code
        ranks = list(self.topo.ranks_of_proc(proc))
        for r in ranks:
            self.done.setdefault(r, code)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            self.fail(128 - code, f"{self.where(ranks)} killed by signal {-code} ({name})",
                      ranks[0])
        elif code > 0:
            self.fail(code, f"{self.where(ranks)} exited with code {code}", ranks[0])
        self.check_stranded()

    def describe_waits(self, where: dict[int, list] | None = None,
                       unanswered: Iterable[int] = (),
                       silent_agents: Mapping[int, str] | None = None,
                       answer_s: float = 1.0) -> str:
        """Where the ranks are, for a timeout or interrupt diagnosis.

        The launcher knows who waits in a bootstrap collective and who ended. ``where`` has
        what the rank processes answered when asked (rank -> entry, as
        ``amnet.core._runtime.ProcessState.where`` makes them): who waits in which AM
        barrier, and what a layer said a rank waits in (``amnet.Port.waiting``).
        ``unanswered``: the processes that were asked and did not answer within
        ``answer_s`` seconds (stopped, or stuck in C code that holds the GIL);
        ``silent_agents``: node -> host of the agents that did not answer. A rank not in
        ``where`` whose process was not asked (it never connected) is "still running".
        """
        where = where or {}
        quiet_procs = sorted(p for p in set(unanswered) if p not in self.proc_exit)
        quiet_set = set(quiet_procs)
        waits: dict[tuple, list[int]] = {}  # (kind, number, what) -> ranks waiting in it
        notified: dict[tuple, list[int]] = {}  # ... that notified it, not waiting in it
        inside: dict[str, list[int]] = {}  # what a layer said -> ranks waiting in it
        placed: set[int] = set()
        for seq, c in self.pending():
            names = {repr(v) for v in c.names.values()}
            name = f", name {cut_name_text(names.pop())}" if len(names) == 1 else ""
            what = f"{_WHAT[c.ops[min(c.arrived)]]} (bootstrap step {seq}{name})"
            waits[("boot", seq, what)] = sorted(c.arrived)
            placed.update(c.arrived)
        running: dict[int, int] = {}  # rank -> AM barriers it notified so far
        silent: list[int] = []  # not asked: its process never connected
        quiet: list[int] = []  # its process was asked and did not answer
        ended: list[int] = []
        for r in range(self.topo.size):
            e = where.get(r)
            if r in placed:
                continue
            elif r in self.done:
                ended.append(r)
            elif self.topo.proc_of(r) in quiet_set:
                quiet.append(r)
            elif not e or e[0] not in ("barrier", "running", "in"):
                silent.append(r)
            elif e[0] == "running":
                running[r] = int(e[1])
            elif e[0] == "in":
                inside.setdefault(str(e[2]), []).append(r)
            else:
                _, number, name, waiting, finalizing = e
                tag = f", name {name}" if name else ""
                what = (f"amnet.finalize() (barrier #{number}{tag})" if finalizing else
                        f"barrier #{number}" + (f" (name {name})" if name else ""))
                (waits if waiting else notified).setdefault(("am", number, what), []).append(r)
        barriers = {key[:2] for key in (*waits, *notified)}  # which barriers they are in
        if barriers and all(kind == "boot" for kind, _ in barriers):
            # no rank outside a bootstrap collective is in it: the launcher would know
            running.update(dict.fromkeys([*silent, *quiet], -1))
            silent = []
        groups = [(ranks, key[2]) for key, ranks in waits.items()]
        groups += [(ranks, what) for what, ranks in inside.items()]
        parts = [f"{_ranks_word(ranks)} {_wait_verb(ranks)} in {what}"
                 for ranks, what in sorted(groups, key=lambda g: g[0][0])]
        for key, ranks in sorted(notified.items(), key=lambda kv: kv[1][0]):
            it = "it" if len(barriers) == 1 and waits else key[2]
            parts.append(f"{_ranks_word(ranks)} notified {it} but {_be(ranks)} not waiting "
                         "in it")
        if running and barriers:
            if len(barriers) == 1:
                kind, number = next(iter(barriers))
                before = [r for r, k in running.items() if kind == "boot" or k < number]
                past = [r for r in running if r not in before]
                if before:
                    parts.append(f"{_ranks_word(before)} never reached it")
                if past:
                    parts.append(f"{_ranks_word(past)} {_be(past)} past it")
            else:
                parts.append(f"{_ranks_word(running)} {_be(running)} in no barrier")
        elif running:
            silent = sorted([*running, *silent])  # answered or not asked: running either way
        if silent:
            parts.append(f"{_ranks_word(silent)} still running")
        if ended:
            parts.append(f"{_ranks_word(ended)} had ended" if parts else "all ranks had ended")
        if quiet_procs:
            ranks = [r for p in quiet_procs for r in self.topo.ranks_of_proc(p)]
            who = (f"the processes of {_ranks_word(ranks)}" if len(quiet_procs) > 1 else
                   f"{_ranks_word(ranks)}'s process" if len(ranks) == 1 else
                   f"the process of {_ranks_word(ranks)}")
            parts.append(f"{who} did not answer in {answer_s:g} s: stopped or stuck in C")
        if silent_agents:
            nodes = sorted(silent_agents)
            hosts = ", ".join(sorted(set(silent_agents.values())))
            who = (f"the agent of node {nodes[0]} (host {hosts})" if len(nodes) == 1 else
                   f"the agents of nodes {format_ranks(nodes)} (hosts {hosts})")
            parts.append(f"{who} did not answer in {answer_s:g} s: stopped or stuck")
        return "; ".join(parts)

    def outcome_code(self) -> int:
        if self.failure is not None:
            return self.failure.code
        bad = [c for c in self.proc_exit.values() if c]
        return bad[0] if bad else 0


def raised_text(error: dict[str, Any]) -> str:
    """`` raised Type: message`` for a rank's error record, with where it was raised when the
    record says (``, in handler X (AM from rank S),``: a handler's exception)."""
    context = error.get("context")
    where = f", {context}," if isinstance(context, str) and context else ""
    return f"{where} raised {error['type']}: {error['msg']}"
