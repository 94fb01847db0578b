"""``amnet-bench am``'s aio section: amnet.aio's awaits beside the blocking forms, in the
same job (jobs in :mod:`amnet_bench._aiojob`).

Rows, each within a node (2 processes, the shared-memory network) and across nodes (2
simulated nodes, the ``--conduit``'s first conduit other than mpi, else zmq):

- an 8 B get and a Short rpc round trip: ``await ep.get_nb(...)`` / ``await ep.rpc(...)``
  beside ``ep.get(...)`` / ``ep.rpc(...).wait()``; target: at most 1.5x the blocking form;
- 1000 rpcs from rank 0 to the three others (4 ranks): ``asyncio.gather`` of the awaited
  rpcs, and ``amnet.aio.when_all`` of them (no task per rpc), beside the same issued as
  handles and waited for with ``amnet.wait_all``; target: at most 1.0x (beside: the
  handles again once the loop let go of the rank, and 1000 tasks with no communication);
- an idle rank awaiting ``asyncio.sleep(1)``: its process's CPU time over the wall time;
  target: under 5% of a core.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from ._aiojob import idle_job, many_job, rtt_job
from ._report import interleave
from ._stats import median, over_reps, stats
from ._targets import AIO_AWAIT, AIO_IDLE, AIO_MANY
from ._twonode import run_job, us


def aio_places(opts: argparse.Namespace) -> tuple[str, dict[str, dict[str, Any]]]:
    """The conduit across nodes (``--conduit``'s first other than mpi, else zmq) and the two
    places an aio section measures: 2 processes of one node, and 2 simulated nodes."""
    conduit = next((c for c in opts.conduit if c != "mpi"), "zmq")
    return conduit, {"within a node": dict(n=2, nodes=1),
                     "across nodes": dict(n=2, nodes=2, conduit=conduit)}


def rounds_of(reps: int) -> int:
    """Rounds of the 1000-operation forms: at least 2 a job, a multiple of 3 (each of the
    three forms first equally often)."""
    return 3 * -(-max(2, reps) // 3)


def await_row(place: str, what: str, label: str, aw: dict[str, Any], blk: dict[str, Any],
              blk_label: str, target: bool = True, **extra: Any
              ) -> tuple[dict[str, Any], list[str]]:
    """The result and table row of an awaited form beside its blocking one (``target``:
    whether AIO_AWAIT applies to it)."""
    ratio = aw["median"] / blk["median"]
    met = ratio <= AIO_AWAIT
    result = {"section": "aio", "place": place, "what": what, **extra, "aio": aw,
              "blocking": blk, "ratio": ratio,
              "target": {"max_ratio": AIO_AWAIT, "met": met} if target else None}
    return result, [place, label, us(aw), f"{blk_label}: {us(blk)}", f"{ratio:.2f}",
                    (f"<= {AIO_AWAIT:g}: " + ("met" if met else "missed")) if target
                    else "-"]


def ms(xs: list[float], digits: int = 1) -> str:
    """``median ms (min..max)`` of samples in seconds."""
    return (f"{median(xs) * 1e3:.{digits}f} ms ({min(xs) * 1e3:.{digits}f}.."
            f"{max(xs) * 1e3:.{digits}f})")


def many_row(place: str, what: str, label: str, g: list[float], h: list[float],
             digits: int = 1, **extra: Any) -> tuple[dict[str, Any], list[str]]:
    """The result and table row of 1000 operations awaited together (``g``) beside the
    handles and ``amnet.wait_all`` (``h``), seconds per round."""
    ratio = median(g) / median(h)
    met = ratio <= AIO_MANY
    result = {"section": "aio", "place": place, "what": what, "aio_s": g, "handles_s": h,
              **extra, "ratio": ratio, "target": {"max_ratio": AIO_MANY, "met": met}}
    return result, [place, label, ms(g, digits), f"handles + wait_all: {ms(h, digits)}",
                    f"{ratio:.2f}", f"<= {AIO_MANY:g}: " + ("met" if met else "missed")]


def aio_section(opts: argparse.Namespace, progress: bool) -> dict[str, Any]:
    conduit, places = aio_places(opts)
    plan = {"batch": max(10, opts.node_batch // 2), "warmup": opts.node_warmup // 10 + 5,
            "batches": max(3, opts.node_iters // max(10, opts.node_batch // 2) // 4)}
    many = {"count": 1000, "rounds": rounds_of(opts.reps)}
    idle = {"seconds": 1.0}
    rtts: dict[str, dict[str, list]] = {p: {} for p in places}
    gathers: dict[str, dict[str, list[float]]] = {
        p: {"handles": [], "gather": [], "when_all": [], "floor": [], "handles no loop": []}
        for p in places}
    idles: dict[str, dict[str, float]] = {}

    def rtt(place: str) -> None:
        got = run_job(rtt_job, plan, **places[place])[0]
        for key, samples in got.items():
            rtts[place].setdefault(key, []).append(stats(samples, keep=False))

    def gather(place: str) -> None:
        m = run_job(many_job, many, **{**places[place], "n": 4})[0]
        for k in ("handles", "gather", "when_all", "floor", "handles no loop"):
            gathers[place][k] += m[k]

    def idle_cpu(place: str) -> None:
        idles[place] = run_job(idle_job, idle, **places[place])[0]

    interleave("am aio", opts.reps, [
        step for place in places for step in (
            (f"{place} round trips", functools.partial(rtt, place)),
            (f"{place} 1000 rpcs", functools.partial(gather, place)))], progress)
    interleave("am aio idle", 1, [(f"{place} idle", functools.partial(idle_cpu, place))
                                  for place in places], progress)

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for place in places:
        for form, label in (("get", "8 B get round trip"), ("rpc", "Short rpc round trip")):
            aw = over_reps(rtts[place][f"{form} await"])
            result, row = await_row(place, f"{form} await", f"await {label}", aw,
                                    over_reps(rtts[place][f"{form} blocking"]), "blocking")
            results.append(result)
            rows.append(row)
            if form == "get":  # what an await costs at least, and the handle form
                hd = over_reps(rtts[place]["get handle"])
                fl = over_reps(rtts[place]["floor await"])
                results.append({"section": "aio", "place": place, "what": "get floors",
                                "handle": hd, "floor_await": fl,
                                "ratio_vs_handle": aw["median"] / hd["median"]})
                rows.append([place, "  beside: get_nb(...).wait(); await of a coroutine "
                             "that returns at once", f"{aw['median'] * 1e6:.1f} / "
                             f"{hd['median'] * 1e6:.1f} = {aw['median'] / hd['median']:.2f}x "
                             "the handle form", f"floor: {us(fl)}", "-", "-"])
        h, fl = gathers[place]["handles"], gathers[place]["floor"]
        for key, label in (("gather", "asyncio.gather"), ("when_all", "amnet.aio.when_all")):
            result, row = many_row(place, f"1000 rpcs {key}", f"1000 rpcs to 3 others: {label}",
                                   gathers[place][key], h, floor_s=fl)
            results.append(result)
            rows.append(row)
        nl = gathers[place]["handles no loop"]
        results.append({"section": "aio", "place": place, "what": "handles with no loop",
                        "handles_s": nl, "ratio_vs_handles": median(nl) / median(h)})
        rows.append([place, "  beside: handles + wait_all with no loop attached", ms(nl),
                     "-", f"{median(nl) / median(h):.2f}", "-"])
        results.append({"section": "aio", "place": place, "what": "gather floor",
                        "floor_s": fl, "ratio_vs_handles": median(fl) / median(h)})
        rows.append([place, "  beside: asyncio.gather of 1000 coroutines on futures, no "
                     "communication", ms(fl), "-", f"{median(fl) / median(h):.2f}", "-"])
        i = idles[place]
        frac = i["cpu"] / i["wall"]
        met = frac < AIO_IDLE
        results.append({"section": "aio", "place": place, "what": "idle await",
                        "cpu_s": i["cpu"], "wall_s": i["wall"], "fraction": frac,
                        "target": {"max_fraction": AIO_IDLE, "met": met}})
        rows.append([place, f"idle rank awaiting {idle['seconds']:g} s: CPU of its process",
                     f"{i['cpu'] * 1e3:.1f} ms ({frac * 100:.2f}% of a core)", "-", "-",
                     f"< {AIO_IDLE * 100:g}%: " + ("met" if met else "missed")])
    notes = [
        f"Round trips: µs, median (p10..p90) over {opts.reps} fresh jobs of each job's "
        f"{plan['batches']} batches of {plan['batch']} (after {plan['warmup']} of each form "
        "untimed), the blocking and the awaited form alternating batch by batch in rank 0's "
        "coroutine (amnet.aio.run), rank 1 serving in a blocking ep.wait_until for both.",
        f"1000 rpcs: rank 0 of 4 (2 per node across nodes) to ranks 1, 2, 3 in turn; "
        f"seconds per 1000, median (min..max) over {many['rounds']} rounds of each of "
        f"{opts.reps} jobs (after a round untimed), the three forms one after another, "
        "each first in turn.",
        "Floors, measured in the same jobs: an 8 B get within a node is a copy in C (the "
        "blocking form; get_nb's copy and complete handle are in C too); an await costs at "
        "least the await of a coroutine that returns at once. asyncio.gather makes a task "
        "per awaitable it is given: its row without communication is what 1000 tasks cost; "
        "amnet.aio.when_all counts amnet handles to one future without a task each. The "
        "handles are timed again after the loop let go of the rank: while a loop is attached "
        "every reply rings the doorbell of rank 0's process (the loop never says when it "
        "sleeps), so that row is what the loop's attachment itself costs the handles.",
        "Idle: rank 0 awaits asyncio.sleep(1) while rank 1 waits in ep.wait_until; "
        "time.process_time() of rank 0's process over the wall time.",
        f"ratio = awaited / blocking (lower is better). Across nodes: the {conduit} "
        "conduit.",
    ]
    config = {"plan": plan, "many": many, "idle": idle, "places": {
        p: dict(t) for p, t in places.items()}, "reps": opts.reps}
    return {"config": config, "results": results,
            "table": {"section": "aio", "title": "amnet.aio: awaited operations beside the "
                      "blocking forms", "columns": ["where", "what", "amnet.aio",
                                                    "the blocking form", "ratio", "target"],
                      "rows": rows, "notes": notes}}
