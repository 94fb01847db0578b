"""What the node sections of the ``am`` and ``rma`` suites share: the runtime configurations
of the hybrid paper's Table 2, a 2-rank one-node amnet job, the intra-node peers' availability.

Every node-local figure is timed in batches (one ``perf_counter`` pair per batch of
operations, see :mod:`amnet_bench._jobs`), so a sample is a batch's time divided by its
size; per repetition the figures are the median, p10 and p90 over the batches
(:func:`amnet_bench._stats.stats`, every sample kept), and over repetitions the median of
each (:func:`amnet_bench._stats.over_reps`).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

from ._registry import BenchError
from ._report import find_mpiexec, rank_job, ranks_result
from ._twonode import JOB_TIMEOUT_S, cpu_count

#: The hybrid paper's Table 2 configurations, in the paper's (expected ascending) order:
#: (label, short name, amnet.run keywords). Every option is given explicitly, so AMNET_*
#: variables of the caller's environment cannot change what a row means.
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("2 threads", "threads", {"threads_per_proc": 2, "pshm": True, "thread_safe": "auto"}),
    ("2 procs", "procs", {"pshm": True, "thread_safe": "auto"}),
    ("2 procs + thread-safety", "procs_ts", {"pshm": True, "thread_safe": "1"}),
    ("2 procs + loopback", "procs_loopback", {"pshm": False, "thread_safe": "auto"}),
    ("2 procs + thread-safety + loopback", "procs_ts_loopback",
     {"pshm": False, "thread_safe": "1"}),
]

#: What each configuration is, for the notes and the docs.
CONFIG_HELP = {
    "2 threads": "`amnet.run(fn, n=2, threads_per_proc=2)`: one process, two rank-threads; "
                 "AMs between them run in-line in the sender",
    "2 procs": "`amnet.run(fn, n=2)`: one node, two processes, AMs over the shared-memory "
               "(PSHM) queues, no locks (thread_safe=auto with one rank-thread per process)",
    "2 procs + thread-safety": "as 2 procs with `thread_safe=\"1\"` (AMNET_THREAD_SAFE=1): "
                               "the locks a multi-threaded process takes",
    "2 procs + loopback": "as 2 procs with `pshm=False` (--no-pshm): node-local AMs through "
                          "the zmq conduit",
    "2 procs + thread-safety + loopback": "`pshm=False, thread_safe=\"1\"`",
}

#: Node-local placements: raw-shm and mpi4py know none and split only.
NODE_PINS = ("none", "split")


def node_pin(pin: str) -> str:
    """The placement the node section uses for the suite's ``--pin``: ``same`` (every thread
    on one core) is the network section's; the node section then runs unpinned."""
    return pin if pin in NODE_PINS else "none"


def run_node(fn: Callable, plan: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Run ``fn(ep, plan)`` as a 2-rank job on one node (``amnet.run(fn, n=2, **options)``,
    ``threads_per_proc`` among the options); return rank 0's result."""
    import amnet

    try:
        res = amnet.run(functools.partial(rank_job, fn, plan=plan), n=2,
                        timeout=JOB_TIMEOUT_S, **options)
    except Exception as e:
        raise BenchError(f"the amnet job {fn.__name__} (n=2, one node, {options}) failed: "
                         f"{type(e).__name__}: {e}") from e
    return ranks_result(res)[0]


def auto_and_pin_notes(opts: Any, pin: str, resolved: dict, unpinned: str,
                       split: str) -> list[str]:
    """The node section's notes on what ``auto`` resolved to (``resolved``: (key, mode) ->
    the modes it ran as) and on ``--pin``: ``unpinned`` names the peers that know no
    pinning, ``split`` says where ``--pin split`` put everything."""
    notes = []
    if "auto" in opts.wait_modes:
        got = sorted({m for (_, mode), ms in resolved.items() if mode == "auto" for m in ms})
        notes.append(f"amnet's auto wait mode resolved to {'/'.join(got) or '-'} here "
                     f"(2 ranks on one node, {cpu_count()} usable cores).")
    if pin != opts.pin:
        notes.append(f"--pin {opts.pin} applies to the network section; the node section ran "
                     f"unpinned ({unpinned} know none and split).")
    elif pin == "split":
        notes.append(f"--pin split: {split}")
    return notes


def mpi_missing() -> str | None:
    """Why the mpi4py peer cannot run here (mpi4py or mpiexec missing), or None."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install -e '.[peers]')"
    if find_mpiexec() is None:
        return "no mpiexec beside this Python nor on PATH (pip install -e '.[peers]')"
    return None


def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    """``a["median"] / b["median"]``, None when either is missing."""
    if a is None or b is None or not b["median"]:
        return None
    return a["median"] / b["median"]


def ratio_cell(r: float | None, missing: str = "missing") -> str:
    return missing if r is None else f"{r:.2f}"


def verdict(met: bool | None) -> str:
    return "n/a (peer missing)" if met is None else "met" if met else "missed"


def us_cell(s: dict[str, Any] | None, missing: str = "missing") -> str:
    """``median (p10..p90)`` in µs, ``missing`` for no figure."""
    if s is None:
        return missing
    return f"{s['median'] * 1e6:.2f} ({s['p10'] * 1e6:.2f}..{s['p90'] * 1e6:.2f})"


def mbs_cell(s: dict[str, Any] | None, missing: str = "missing") -> str:
    """``median (p10..p90)`` MB/s, ``missing`` for no figure."""
    if s is None:
        return missing
    return f"{s['median']:.0f} ({s['p10']:.0f}..{s['p90']:.0f})"
