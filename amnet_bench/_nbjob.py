"""The ranks' side of ``amnet-bench nbcomm``: every kernel in every form, interleaved.

For each kernel (:mod:`amnet_bench._nbkernels`), ``samples + 1`` rounds (the first a
warm-up, not kept), each running the forms one after another in an order that rotates by
round. A form's run: the segment zeroed, the kernel reset, a barrier, ``iters`` iterations
timed, then its digest. The forms:

``blocking``  ``step`` with plain blocking put/get (:class:`~._nbkernels.Blocking`)
``manual``    ``manual``: the same iteration with nonblocking calls placed by hand
``auto``      ``step`` with a fresh :class:`amnet.nbcomm.Scheduler` (made before the clock
              starts: its first iteration records, the later ones prefetch; after the
              clock stops, a ``sync`` retires the prefetches that the last barrier issued
              for an iteration that never comes, so they count as wasted and no get of
              one form is in flight during the next)
``compute``   ``step`` with no communication (:class:`~._nbkernels.NoComm`): the floor

The blocking, manual and automatic runs of a round must leave the same digest on every rank,
or the job fails: a faster wrong answer is no answer. A rank returns, per kernel, its
seconds per iteration for every kept round and form, the automatic runs' scheduler
statistics (summed over rounds) and the digests.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ._nbkernels import KERNELS, Blocking, NoComm

FORMS = ("blocking", "manual", "auto", "compute")
CHECKED = ("blocking", "manual", "auto")  # the forms that must compute the same answer


def nb_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    from amnet.nbcomm import Scheduler

    out: dict[str, Any] = {}
    pc = time.perf_counter
    for name in plan["kernels"]:
        k = KERNELS[name](ep, plan["params"][name])
        used = k.segment_bytes(plan["params"][name], ep.size)
        secs: dict[str, list[float]] = {f: [] for f in FORMS}
        stats: dict[str, float] = {}
        digests: list[str] = []
        for rnd in range(plan["samples"] + 1):
            order = FORMS[rnd % len(FORMS):] + FORMS[:rnd % len(FORMS)]
            seen: dict[str, str] = {}
            for form in order:
                ep.segment[:used] = 0
                k.reset()
                c: Any = None
                if form == "auto":
                    c = Scheduler(ep, **plan["scheduler"])
                elif form == "blocking":
                    c = Blocking(ep)
                elif form == "compute":
                    c = NoComm(ep)
                ep.barrier()
                t0 = pc()
                for it in range(plan["iters"]):
                    if c is None:
                        k.manual(it)
                    else:
                        k.step(c, it)
                t = pc() - t0
                if form == "auto":  # retire what the last barrier prefetched for an
                    c.sync(event="end")  # iteration that never comes (counted as wasted)
                ep.barrier()
                if form in CHECKED:
                    seen[form] = k.digest()
                if rnd:
                    secs[form].append(t / plan["iters"])
                    if form == "auto":
                        for f, v in dataclasses.asdict(c.stats).items():
                            stats[f] = stats.get(f, 0) + v
                        stats["seconds"] = stats.get("seconds", 0.0) + t
            if len(set(seen.values())) != 1:
                raise AssertionError(f"{name} on rank {ep.rank}: the forms computed different "
                                     f"answers in round {rnd}: {seen}")
            digests.append(seen["blocking"])
        out[name] = {"seconds": secs, "stats": stats, "digests": digests}
    return out
