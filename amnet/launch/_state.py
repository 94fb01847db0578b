"""The launcher's book-keeping: collectives, rank ends, the first failure and its diagnosis.

Pure logic with no I/O, so the rules (when a job has failed, what the one-line diagnosis
says) are easy to read and to test.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from .._topology import Topology, format_ranks

_WHAT = {"init": "amnet.init()", "barrier": "a barrier", "allgather": "an allgather",
         "finalize": "amnet.finalize()"}


def _ranks_word(ranks) -> str:
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + format_ranks(ranks)


def _wait_verb(ranks) -> str:
    return "waits" if len(set(ranks)) == 1 else "wait"


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
            a = min(c.names)
            b = next(r for r in sorted(c.names) if c.names[r] != c.names[a])
            reply["error"] = ["BarrierMismatch",
                              f"barrier name mismatch: rank {a} passed {c.names[a]!r} but "
                              f"rank {b} passed {c.names[b]!r}"]
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
            self.fail(1, f"{self.where([rank])} raised {error['type']}: {error['msg']}",
                      rank, error)
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

    def describe_waits(self) -> str:
        """Where the ranks are, for a timeout or interrupt diagnosis."""
        for seq, c in self.pending():
            missing = [r for r in range(self.topo.size) if r not in c.arrived]
            what = _WHAT[c.ops[min(c.arrived)]]
            return (f"{_ranks_word(c.arrived)} {_wait_verb(c.arrived)} in {what} (bootstrap "
                    f"step {seq}); {_ranks_word(missing)} never reached it")
        running = [r for r in range(self.topo.size) if r not in self.done]
        if running:
            return f"{_ranks_word(running)} still running"
        return "all ranks had ended"

    def outcome_code(self) -> int:
        if self.failure is not None:
            return self.failure.code
        bad = [c for c in self.proc_exit.values() if c]
        return bad[0] if bad else 0
