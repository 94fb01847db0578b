"""Job topology: how ranks map to threads, processes and nodes (docs/design.md §2).

Ranks are numbered node-major, then process, then thread::

    rank = (node * procs_per_node + local_proc) * threads_per_proc + thread

so the ranks of a process are contiguous and so are the ranks of a node. The last node may
hold fewer processes than ``procs_per_node``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import RankError, TopologyError

MAX_RANKS = 1 << 20
MAX_THREADS_PER_PROC = 1024
MAX_PROCS_PER_NODE = 4096


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise TopologyError(f"{name} must be at least 1, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Topology:
    """The shape of a job. Build one with :meth:`Topology.make`, which validates it."""

    size: int
    threads_per_proc: int
    procs_per_node: int
    nodes: int

    @classmethod
    def make(
        cls,
        n: int,
        procs_per_node: int | None = None,
        threads_per_proc: int = 1,
        nodes: int | None = None,
    ) -> Topology:
        """Validate a job shape and return it.

        ``n`` ranks, ``threads_per_proc`` rank-threads per process, processes packed
        ``procs_per_node`` to a node; ``nodes`` may be given instead of (or consistently
        with) ``procs_per_node``. With neither, the job runs on one node.

        Raises:
            TopologyError: a value is not a positive integer, ``n`` is not a multiple of
                ``threads_per_proc``, or ``nodes`` cannot be reached (see the message).
        """
        n = _positive("the number of ranks (-n)", n)
        t = _positive("threads per process (--threads-per-proc)", threads_per_proc)
        if n > MAX_RANKS:
            raise TopologyError(f"-n {n} is more than amnet's limit of {MAX_RANKS} ranks")
        if t > MAX_THREADS_PER_PROC:
            raise TopologyError(f"--threads-per-proc {t} is more than the limit of "
                                f"{MAX_THREADS_PER_PROC} rank-threads per process")
        if n % t:
            below, above = n - n % t, n + t - n % t
            hint = f"-n {below} or -n {above}" if below else f"-n {above}"
            raise TopologyError(
                f"-n {n} is not a multiple of --threads-per-proc {t}: every process hosts "
                f"the same number of rank-threads (try {hint})"
            )
        procs = n // t
        if procs_per_node is not None:
            p = _positive("processes per node (--procs-per-node)", procs_per_node)
        if nodes is not None:
            k = _positive("the number of nodes (--nodes)", nodes)
            if k > procs:
                raise TopologyError(
                    f"--nodes {k} is more than the {procs} process(es) of this job "
                    f"(-n {n} / --threads-per-proc {t}): a node needs at least one process"
                )
            p_for_k = -(-procs // k)
            if -(-procs // p_for_k) != k:
                raise TopologyError(
                    f"--nodes {k} does not fit {procs} processes: packing the same number "
                    f"on every node gives {-(-procs // p_for_k)} node(s) with "
                    f"{p_for_k} per node"
                )
            if procs_per_node is not None and -(-procs // p) != k:
                raise TopologyError(
                    f"--procs-per-node {p} and --nodes {k} disagree: {procs} processes "
                    f"packed {p} to a node make {-(-procs // p)} node(s)"
                )
            p = p_for_k if procs_per_node is None else p
        elif procs_per_node is None:
            p = procs
        p = min(p, procs)
        if p > MAX_PROCS_PER_NODE:
            raise TopologyError(
                f"a node would host {p} processes, more than the limit of {MAX_PROCS_PER_NODE}: "
                "use --threads-per-proc, --procs-per-node or --nodes")
        return cls(size=n, threads_per_proc=t, procs_per_node=p, nodes=-(-procs // p))

    # -- derived shape ------------------------------------------------------------------
    @property
    def procs(self) -> int:
        """Number of processes in the job."""
        return self.size // self.threads_per_proc

    def check_rank(self, rank: int) -> int:
        """Return ``rank`` if it names a rank of this job, else raise :class:`RankError`."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise RankError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
        if not 0 <= rank < self.size:
            raise RankError(f"rank {rank} is out of range: this job has ranks 0..{self.size - 1}")
        return rank

    def proc_of(self, rank: int) -> int:
        return rank // self.threads_per_proc

    def thread_of(self, rank: int) -> int:
        return rank % self.threads_per_proc

    def node_of_proc(self, proc: int) -> int:
        return proc // self.procs_per_node

    def node_of(self, rank: int) -> int:
        return self.node_of_proc(self.proc_of(rank))

    def local_proc_of(self, proc: int) -> int:
        return proc % self.procs_per_node

    def procs_of_node(self, node: int) -> range:
        first = node * self.procs_per_node
        return range(first, min(first + self.procs_per_node, self.procs))

    def ranks_of_proc(self, proc: int) -> range:
        return range(proc * self.threads_per_proc, (proc + 1) * self.threads_per_proc)

    def ranks_of_node(self, node: int) -> range:
        procs = self.procs_of_node(node)
        return range(procs.start * self.threads_per_proc, procs.stop * self.threads_per_proc)

    def rank_of(self, node: int, local_proc: int, thread: int) -> int:
        return (node * self.procs_per_node + local_proc) * self.threads_per_proc + thread

    def describe(self) -> str:
        return (
            f"{self.size} rank(s) = {self.procs} process(es) x {self.threads_per_proc} "
            f"thread(s), {self.procs_per_node} process(es) per node, {self.nodes} node(s)"
        )

    def to_wire(self) -> list[int]:
        return [self.size, self.threads_per_proc, self.procs_per_node, self.nodes]

    @classmethod
    def from_wire(cls, w: list[int]) -> Topology:
        return cls(*w)


def format_ranks(ranks) -> str:
    """Format a set of ranks compactly: ``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    rs = sorted(set(ranks))
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)
