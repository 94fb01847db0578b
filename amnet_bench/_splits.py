"""The procs x threads splits of the hybrid study ("Hybrid PGAS Runtime Support for Multicore
Nodes", §4): with R ranks on each node, a split runs T rank-threads in each of R / T
processes, labelled as the paper labels them (``2T-8P``: 8 processes of 2 pthreads a node).
``1T-RP`` is the all-processes split (UPC-pshm), ``RT-1P`` the all-threads one
(UPC-pthreads), which the paper normalizes against (Fig. 5, Fig. 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Split:
    """T rank-threads in each of P processes per node."""

    threads: int
    procs: int

    @property
    def label(self) -> str:
        return f"{self.threads}T-{self.procs}P"

    def run_options(self) -> dict[str, Any]:
        """The ``amnet.run`` keywords that make this split."""
        return {"threads_per_proc": self.threads, "procs_per_node": self.procs}


def split_caption(labels: Sequence[str]) -> str:
    """The line a plot of splits carries to say what its labels mean, with the first of
    ``labels`` (``xT-yP``) as the example."""
    example = labels[0] if labels else "1T-2P"
    t, p = example.rstrip("P").split("T-")
    procs = f"{p} process" + ("" if p == "1" else "es")
    threads = f"{t} rank-thread" + ("" if t == "1" else "s")
    return (f"Splits xT-yP: x rank-threads (T) in each of y processes (P) on every node; "
            f"{example}: {procs} of {threads} each.")


def splits_of(per_node: int) -> list[Split]:
    """Every split of ``per_node`` ranks, from all processes to all threads."""
    return [Split(t, per_node // t) for t in range(1, per_node + 1) if per_node % t == 0]


def choose(per_node: int, threads: list[int] | None) -> list[Split]:
    """The splits to run: every one (``threads`` None) or those asked for.

    Raises:
        ValueError: a thread count that does not divide ``per_node``.
    """
    if threads is None:
        return splits_of(per_node)
    bad = [t for t in threads if per_node % t]
    if bad:
        raise ValueError(f"--splits {','.join(map(str, bad))} must divide the ranks per node "
                         f"({per_node}); possible: "
                         f"{','.join(str(s.threads) for s in splits_of(per_node))}")
    return [Split(t, per_node // t) for t in threads]
