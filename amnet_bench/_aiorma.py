"""``amnet-bench rma``'s aio section: awaited puts and gets beside the blocking forms, in the
same job (the job is :func:`amnet_bench._aiojob.rma_aio_job`).

Rows, each within a node (2 processes, the shared-memory network) and across nodes (2
simulated nodes, the ``--conduit``'s first conduit other than mpi, else zmq):

- per ``--node-lat-sizes`` size, a put and a get round trip: ``await ep.put_nb(...)`` /
  ``await ep.get_nb(...)`` beside ``ep.put(...)`` / ``ep.get(...)``; target (the 8 B get):
  at most 1.5x the blocking form;
- 1000 8 B gets in flight to the other rank: ``amnet.aio.when_all`` and ``asyncio.gather``
  of the awaited gets beside the same issued as handles and waited for with
  ``amnet.wait_all``; target: at most 1.0x.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from ._aio import aio_places, await_row, many_row, rounds_of
from ._aiojob import rma_aio_job
from ._options import size_label
from ._report import interleave
from ._stats import over_reps, stats
from ._twonode import run_job


def rma_aio_section(opts: argparse.Namespace, progress: bool) -> dict[str, Any]:
    conduit, places = aio_places(opts)
    sizes = list(opts.node_lat_sizes)
    batch = max(10, opts.node_batch // 2)
    plan = {"sizes": sizes, "batch": batch, "warmup": opts.node_warmup // 10 + 5,
            "batches": max(3, opts.node_iters // batch // 4), "count": 1000,
            "rounds": rounds_of(opts.reps)}
    per: dict[str, dict[str, list]] = {p: {} for p in places}

    def run(place: str) -> None:
        got = run_job(rma_aio_job, plan, segment_size=max(sizes) + (1 << 20), **places[place])[0]
        for key, samples in got.items():
            per[place].setdefault(key, []).append(
                samples if key.startswith("gets") else stats(samples, keep=False))

    interleave("rma aio", opts.reps, [(place, functools.partial(run, place))
                                      for place in places], progress)

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for place in places:
        for n in sizes:
            for op in ("put", "get"):
                result, row = await_row(
                    place, f"{op} await", f"await {op}_nb {size_label(n)}",
                    over_reps(per[place][f"{op} {n} await"]),
                    over_reps(per[place][f"{op} {n} blocking"]), op,
                    target=op == "get" and n == 8, bytes=n)
                results.append(result)
                rows.append(row)
        h = [s for rep in per[place]["gets handles"] for s in rep]
        for key, label in (("when_all", "amnet.aio.when_all"), ("gather", "asyncio.gather")):
            result, row = many_row(place, f"1000 gets {key}", f"1000 8 B gets in flight: {label}",
                                   [s for rep in per[place][f"gets {key}"] for s in rep], h,
                                   digits=2)
            results.append(result)
            rows.append(row)
    notes = [
        f"Round trips: µs, median (p10..p90) over {opts.reps} fresh jobs of each job's "
        f"{plan['batches']} batches of {plan['batch']} (after {plan['warmup']} of each form "
        "untimed), the blocking and the awaited form alternating batch by batch in rank 0's "
        "coroutine (amnet.aio.run), rank 1 serving in a blocking ep.wait_until.",
        "Within a node a put or get of any form is a copy in C (the nonblocking forms' "
        "handles are complete on return), so there an await costs what the await of a "
        "complete handle adds; across nodes it waits for the other rank's reply.",
        f"1000 gets: rank 0 to rank 1; seconds per 1000, median (min..max) over "
        f"{plan['rounds']} rounds of each of {opts.reps} jobs (after a round untimed), the "
        "three forms one after another, each first in turn. asyncio.gather makes a task per "
        "handle; amnet.aio.when_all counts the handles to one future.",
        f"ratio = awaited / blocking (lower is better). Across nodes: the {conduit} "
        "conduit.",
    ]
    config = {"plan": plan, "places": {p: dict(t) for p, t in places.items()},
              "reps": opts.reps}
    return {"config": config, "results": results,
            "table": {"section": "aio", "title": "amnet.aio: awaited puts and gets beside "
                      "the blocking forms", "columns": ["where", "what", "amnet.aio",
                                                        "the blocking form", "ratio",
                                                        "target"],
                      "rows": rows, "notes": notes}}
