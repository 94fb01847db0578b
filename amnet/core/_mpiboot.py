"""The bootstrap of a job without amnet's launcher: its collectives as MPI collectives.

A job started by an MPI launcher (``mpiexec ... python -m amnet app.py``, or ``amnet-run
--conduit mpi``, which runs ``mpiexec`` itself) has no bootstrap service. Its processes
complete the bootstrap collectives (``amnet.init``'s address table and handler-table check,
bootstrap barriers and allgathers, ``amnet.finalize``) among themselves:

- the rank-threads of a process meet in a slot of the collective's sequence number; the last
  to arrive posts ``MPI_Iallgather`` of the process's entries' lengths, then
  ``MPI_Iallgatherv`` of the entries (pickled), on the bootstrap's own communicator;
- every rank-thread waits through the engine's ``wait_until`` (AMs keep being served) or, before
  the engine runs, in naps, testing the requests under :data:`amnet.conduits._mpi.MPI_LOCK`;
- every process then feeds all ranks' entries to its own :class:`amnet._jobstate.JobState`,
  which completes the collective by the launcher's rules: the same values, the same
  ``CollectiveMismatch`` and ``BarrierMismatch`` on every rank.

Collectives of one communicator must be called in the same order everywhere; they are: a
process posts collective ``s + 1`` only after all its rank-threads completed ``s``.

A rank's end is reported to the process that started the job, if any: :meth:`MPIBoot.report`
writes a result (``amnet.run``) or the job's first failure into the job's result directory
(``spec["mpi_results"]``). A failure, an uncaught exception or ``amnet.abort()``, ends the
whole job at once with ``MPI_Abort``; its one-line diagnosis (the launcher's wording) goes to
standard error first when no amnet launcher waits to print it.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .._jobstate import JobState, raised_text
from .._topology import Topology
from ..conduits._mpi import MPI_LOCK, NAP_MAX_S, NAP_MIN_S
from ._bootclient import reply_value

ABORT_GRACE_S = 0.3  # before MPI_Abort: time for the launcher to forward the last output
FAILURE = "failure"  # the result directory's file for the job's first failure


def result_name(rank: int) -> str:
    return f"rank-{rank}.result"


class _Exchange:
    """One process's part of one bootstrap collective: allgather lengths, then entries."""

    def __init__(self, MPI: Any, comm: Any, data: bytes) -> None:
        import numpy as np

        self.MPI, self.comm, self.np = MPI, comm, np
        self.data = np.frombuffer(data, dtype=np.uint8)
        self.mine = np.array([len(data)], dtype=np.int64)
        self.lengths = np.empty(comm.Get_size(), dtype=np.int64)
        self.req = comm.Iallgather([self.mine, MPI.INT64_T], [self.lengths, MPI.INT64_T])
        self.step = 0
        self.chunks: list[bytes] | None = None

    def test(self) -> bool:
        """Advance (the caller holds MPI_LOCK); True once every process's entries are here."""
        if self.chunks is not None:
            return True
        if not self.req.Test():
            return False
        np, MPI = self.np, self.MPI
        if self.step == 0:
            counts = [int(n) for n in self.lengths]
            self.displs = [0, *np.cumsum(counts)[:-1].tolist()]
            self.counts = counts
            self.all = np.empty(sum(counts), dtype=np.uint8)
            self.req = self.comm.Iallgatherv(
                [self.data, MPI.BYTE], [self.all, (counts, self.displs), MPI.BYTE])
            self.step = 1
            return self.test()
        raw = self.all.tobytes()
        self.chunks = [raw[d:d + c] for d, c in zip(self.displs, self.counts, strict=True)]
        return True


class MPIBoot:
    """The bootstrap of one process of an MPI-launched job (see the module docstring).

    Args:
        MPI: mpi4py's MPI module (initialized).
        comm: the bootstrap's communicator (a duplicate of the job's), one process per rank
            of it, in process order.
        topology: the job's shape.
        proc: this process.
        hosts: every process's host name (for diagnoses).
        results: the job's result directory (the launcher reads it), or None.
    """

    def __init__(self, MPI: Any, comm: Any, topology: Topology, proc: int, hosts: list[str],
                 results: str | None) -> None:
        self.MPI, self.comm, self.topo, self.proc = MPI, comm, topology, proc
        self.results = results
        self.aborted = None  # an MPI job ends at once on failure: no one is told to stop
        self.mechanism = "MPI"
        self.state = JobState(topology)
        self.state.proc_host.update(enumerate(hosts))
        self._t = topology.threads_per_proc
        self._cond = threading.Condition()
        self._slots: dict[int, dict[int, tuple[str, Any, Any]]] = {}
        self._running: dict[int, _Exchange] = {}
        self._replies: dict[int, dict[int, dict[str, Any]]] = {}

    # -- collectives --------------------------------------------------------------------------
    def collective(self, rank: int, seq: int, op: str, name: Any = None, value: Any = None,
                   waiter: Callable[[Callable[[], bool]], Any] | None = None) -> Any:
        """Enter the ``seq``-th bootstrap collective of ``rank`` and return its value.

        Raises:
            CollectiveMismatch / BarrierMismatch: ranks disagreed on the op or the name.
        """
        with self._cond:
            slot = self._slots.setdefault(seq, {})
            slot[rank] = (op, name, value)
            if len(slot) == self._t:  # the last of the process's rank-threads: post it
                del self._slots[seq]
                data = pickle.dumps(sorted((r, *e) for r, e in slot.items()), protocol=5)
                with MPI_LOCK:
                    self._running[seq] = _Exchange(self.MPI, self.comm, data)

        def done() -> bool:
            return self._advance(seq, rank)

        if waiter is not None:
            waiter(done)
        nap = NAP_MIN_S
        while not done():
            time.sleep(nap)
            nap = min(2 * nap, NAP_MAX_S)
        with self._cond:
            reply = self._replies[seq].pop(rank)
            if not self._replies[seq]:
                del self._replies[seq]
        return reply_value(reply, rank, name)

    def _advance(self, seq: int, rank: int) -> bool:
        with self._cond:
            got = self._replies.get(seq)
            if got is not None and rank in got:
                return True
            ex = self._running.get(seq)
            if ex is None:
                return False
            with MPI_LOCK:
                if not ex.test():
                    return False
            del self._running[seq]
            reply = None
            for chunk in ex.chunks or ():
                for r, op, name, value in pickle.loads(chunk):
                    reply = self.state.enter(r, seq, op, name, value) or reply
            assert reply is not None, "a bootstrap collective completed without every rank"
            mine = self.topo.ranks_of_proc(self.proc)
            self._replies[seq] = {r: reply for r in mine}
            return True

    # -- the end of a rank ------------------------------------------------------------------
    def report(self, msg: dict[str, Any], timeout: float = 5.0) -> bool:
        """A rank ended (``done``) or called ``amnet.abort()`` (``abort``). A result is
        written for the launcher; a failure ends the job with ``MPI_Abort`` (no return)."""
        rank, st = int(msg["rank"]), self.state
        if msg["t"] == "abort":
            code = int(msg["code"])
            text = f": {msg['msg']}" if msg.get("msg") else ""
            self._fail(code, f"{st.where([rank])} called amnet.abort({code}){text}", rank, None)
        code, error = int(msg.get("code") or 0), msg.get("error")
        if error is not None:
            self._fail(1, f"{st.where([rank])}{raised_text(error)}", rank, error)
        if code:
            self._fail(code, f"{st.where([rank])} exited with code {code}", rank, None)
        if msg.get("result") is not None and self.results:
            _write(os.path.join(self.results, result_name(rank)), msg["result"])
        return True

    def _fail(self, code: int, diagnosis: str, rank: int, error: dict | None) -> None:
        """Record the job's first failure and end the job (``MPI_Abort``); never returns."""
        record = pickle.dumps({"code": code, "diagnosis": diagnosis, "rank": rank,
                               "where": self.state.where([rank]), "error": error}, protocol=5)
        first = True
        if self.results:
            try:
                fd = os.open(os.path.join(self.results, FAILURE),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                first = False  # another rank failed first: this is a consequence
            except OSError:
                pass
            else:
                with os.fdopen(fd, "wb") as f:
                    f.write(record)
        elif first:
            try:
                os.write(2, f"amnet: {diagnosis}; ending the job with MPI_Abort({code})\n"
                         .encode("utf-8", "backslashreplace"))
            except OSError:
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        # The MPI's launcher ends every process at once on MPI_Abort, dropping output its
        # proxies have not forwarded yet (seen with MPICH's Hydra): give them a moment.
        time.sleep(ABORT_GRACE_S)
        try:
            self.MPI.COMM_WORLD.Abort(code)
        finally:
            os._exit(code)


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
