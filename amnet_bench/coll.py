"""Suite ``coll``: amnet's collectives by algorithm, with the UPC collectives report's testbed
("High Performance UPC Collectives for Linux/Myrinet Platforms", §4.5: computation about
twice the collective between calls, the slowest rank's average, optional skew), beside
mpi4py's Bcast, Allgather, Alltoall and Allreduce measured the same way in the same run.

For every ``--ranks`` count and ``--topology`` (one node: a process per rank; 2 nodes: half
the ranks on each), one amnet job runs every ``--collectives`` x algorithm x ``--sizes``
case on the world team (:mod:`amnet_bench._colljob`); mpi4py runs the same cases with
``mpiexec -n P`` on this machine (one node). Naive algorithms (a message per byte) run only
up to ``--naive-max`` bytes. Figures are µs per call; with ``--out``, ``coll_<collective>.png``
plots each algorithm's time against the size per rank count and topology.

Targets, at the largest size and the largest rank count: the best algorithm >= 2x faster
than the reference memcpy push (``memcpy_push``: blocking puts one after another, the
report's baseline) for broadcast and exchange; within one node, the best algorithm no
slower than 1.5x mpi4py.

A second table, the node collectives (``--small-ranks``, ``none`` to skip, and
``--small-topologies``): broadcast, reduce_all, gather_all and barrier at 8 B and 64 B,
broadcast and reduce_all at 64 KiB, OSU-style, on the node area beside the AM path and
mpi4py; 2 rank-threads beside 2 processes; 2 nodes of 2 beside ``hier_am``
(:mod:`amnet_bench._collsmall`, which has the targets and floors).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from . import _options as options
from ._colljob import PREFIX, SYNC_MODES, coll_job, upc_sync_job
from ._collsmall import PREFIX as SMALL_PREFIX
from ._collsmall import SMALL, TOPOLOGIES, small_job, small_table
from ._node import mpi_missing
from ._options import size_label
from ._registry import suite
from ._report import Progress, interpreter_line, machine_info
from ._stats import median
from ._targets import COLL_MPI, COLL_PUSH
from ._twonode import JOB_TIMEOUT_S, cpu_count, run_job

COLLECTIVES = ("broadcast", "gather_all", "exchange", "reduce_all")
MPI_NAME = {"broadcast": "Bcast", "gather_all": "Allgather", "exchange": "Alltoall",
            "reduce_all": "Allreduce"}


PLOTS = ("coll_<collective>.png",)


@suite("coll", plots=PLOTS)
def coll(args: Sequence[str] | None = None, *, reps: int = 1, ranks: Any = "2,4,8",
         topologies: Any = "node,2nodes", collectives: Any = COLLECTIVES,
         sizes: Any = "8,64,512,4K,64K", calls: int = 10, warmup: int = 3,
         compute: float = 2.0, skew: float = 1.0, naive_max: Any = "64",
         sync: Any = SYNC_MODES, small_ranks: Any = "2,4", small_calls: int = 2000,
         small_topologies: Any = TOPOLOGIES, progress: bool = True) -> dict[str, Any]:
    """Collectives by algorithm (the UPC collectives testbed) beside mpi4py."""
    from amnet.coll import ALGORITHMS

    p = options.Parser(
        "coll", "amnet's collectives by algorithm with the UPC collectives report's "
                "testbed (computation x the collective between calls, slowest rank's "
                "mean), beside mpi4py Bcast/Allgather/Alltoall/Allreduce. µs per call.")
    options.reps(p, reps)
    options.ranks(p, ranks, "rank counts", many=True)
    options.topologies(p, topologies)
    options.choices(p, "--collectives", collectives, COLLECTIVES, "collectives",
                    metavar="C,C")
    options.sizes(p, sizes, "bytes per block", most=16 << 20, unit="a block")
    options.count(p, "--calls", calls, "timed rounds per case")
    options.warmup(p, warmup, "untimed calls, then as many timed without computation",
                   least=1)
    options.number(p, "--compute", compute, "computation after each call, x the warm-up "
                   "time", 0, 100)
    options.number(p, "--skew", skew, "the last rank computes X times longer (the report "
                   "uses 10; 1: no skew)", 1, 100)
    options.size(p, "--naive-max", naive_max, "largest size the naive algorithms run at")
    options.choices(p, "--sync", sync, SYNC_MODES, "sync modes", "upc_rt's all_broadcast and "
                    "all_exchange under these IN/OUT modes (ALL, MY, NO: the report's test "
                    "cases 1, 7, 8), or none", metavar="M,M", none=True, fold=True)
    options.counts(p, "--small-ranks", small_ranks, "rank counts", "the node table "
                   "(broadcast, reduce_all, gather_all, barrier at 8 B and 64 B, broadcast and "
                   "reduce_all at 64 KiB) at these rank counts of one node, or none", 2, 64,
                   metavar="P,P", none=True)
    options.choices(p, "--small-topologies", small_topologies, TOPOLOGIES,
                    "node-table topologies", "the node table's topologies: node "
                    "(--small-ranks processes), threads (2 rank-threads of a process), 2nodes "
                    "(2 of 2)")
    options.count(p, "--small-calls", small_calls, "timed rounds a case in that table")
    opts = options.parse(p, args, {
        "ranks": [2, 4], "sizes": [8, 4096], "calls": 3, "warmup": 1, "naive_max": 8,
        "small_ranks": [2], "small_calls": 100, "small_topologies": ["node"]},
        "2 and 4 ranks, 8 B and 4 KiB, 3 calls a case",
        fixed={"--splits": ("1", "its ranks are processes, a UPC thread each")},
        plots=PLOTS)
    if "2nodes" in opts.topologies and any(r % 2 for r in opts.ranks):
        p.error(f"--ranks must be even with --topology 2nodes, got {opts.ranks}")
    plan = {"collectives": opts.collectives, "sizes": opts.sizes, "calls": opts.calls,
            "warmup": opts.warmup, "compute": opts.compute, "skew_factor": opts.skew,
            "naive_max": opts.naive_max,
            "algorithms": {w: list(ALGORITHMS[w]) for w in opts.collectives}}
    plan["sync"] = opts.sync
    upc_too = bool(opts.sync) and any(w in opts.collectives for w in ("broadcast", "exchange"))
    why = mpi_missing()
    st = opts.small_topologies if opts.small_ranks else []
    node_rows = opts.small_ranks if "node" in st else []
    jobs = opts.reps * (len(opts.ranks) * (len(opts.topologies) * (1 + upc_too) + (why is None))
                        + len(node_rows) * (1 + (why is None)) + ("threads" in st)
                        + ("2nodes" in st))
    small = {"small": list(SMALL), "small_sizes": [8, 64], "big": True,
             "calls": opts.small_calls, "warmup": max(1, opts.small_calls // 10)}
    bar = Progress("coll", jobs, progress)
    per: dict[tuple[str, int, str], list[float]] = {}
    for rep in range(opts.reps):
        for P in opts.ranks:
            pl = {**plan, "skew_rank": P - 1}
            for topo in opts.topologies:
                res = run_job(coll_job, pl, n=P, **({"nodes": 2} if topo == "2nodes" else {}))
                _into(per, topo, P, _slowest(res))  # the slowest rank's mean
                bar.step(f"rep {rep + 1}, {P} ranks, {topo}")
                if upc_too:
                    res = run_job(upc_sync_job, pl, n=P,
                                  **({"nodes": 2} if topo == "2nodes" else {}))
                    _into(per, f"upc-{topo}", P, _slowest(res))
                    bar.step(f"rep {rep + 1}, {P} ranks, {topo}, upc_rt sync modes")
            if why is None:
                from ._colljob import __file__ as script

                _into(per, "mpi", P, _mpi(script, P, pl, PREFIX))
                bar.step(f"rep {rep + 1}, {P} ranks, mpi4py")
        for P in node_rows:  # amnet and mpi4py back to back: their ratio
            _into(per, "small", P, _slowest(run_job(small_job, small, n=P)))
            bar.step(f"rep {rep + 1}, {P} ranks, node table")
            if why is None:
                from ._collsmall import __file__ as small_script

                _into(per, "small-mpi", P, _mpi(small_script, P, small, SMALL_PREFIX))
                bar.step(f"rep {rep + 1}, {P} ranks, node table, mpi4py")
        if "threads" in st:
            _into(per, "small-threads", 2,
                  _slowest(run_job(small_job, small, n=2, threads_per_proc=2)))
            bar.step(f"rep {rep + 1}, 2 rank-threads, node table")
        if "2nodes" in st:
            paired = {**small, "paired": True}  # hier and hier_am take turns, call by call
            _into(per, "small-2nodes", 4, _slowest(run_job(small_job, paired, n=4, nodes=2)))
            bar.step(f"rep {rep + 1}, 2 nodes of 2, node table")
    bar.close()
    out = _report(opts, per, why)
    if st:
        sres, stable = small_table(per, node_rows, st, small, opts.reps, why,
                                   interpreter_line(machine_info()))
        out["results"] += sres
        out["tables"].append(stable)
    out["config"].update(small_ranks=opts.small_ranks, small_calls=opts.small_calls,
                         small_topologies=st)
    return out


def _slowest(res: list[dict[str, float]]) -> dict[str, float]:
    """Every case's slowest rank's figure."""
    return {k: max(r[k] for r in res) for k in res[0]}


def _into(per: dict, where: str, P: int, got: dict[str, float]) -> None:
    for k, v in got.items():
        per.setdefault((where, P, k), []).append(v)


def _mpi(script: str, P: int, plan: dict[str, Any], prefix: str) -> dict[str, float]:
    """``script`` run by ``mpiexec -n P`` (mpi4py's side of a case set)."""
    from ._mpipeer import run_script

    return run_script(script, P, plan, JOB_TIMEOUT_S, prefix)


def _sync_table(opts: argparse.Namespace, med: dict) -> tuple[list, list, list]:
    """The synchronisation-mode rows (upc_rt), their results and notes."""
    results, rows, notes = [], [], []
    whats = [w for w in ("broadcast", "exchange") if w in opts.collectives]
    for what in whats:
        for topo in opts.topologies:
            for P in opts.ranks:
                for n in opts.sizes:
                    sec = {m: med.get((f"upc-{topo}", P, f"{what}/{m}/{n}")) for m in opts.sync}
                    if not any(sec.values()):
                        continue
                    results.append({"section": "sync", "collective": what, "topology": topo,
                                    "ranks": P, "size": n, "seconds": sec})
                    base = sec.get("ALL")
                    rows.append([f"all_{what}", topo, str(P), size_label(n),
                                 " / ".join(f"{sec[m] * 1e6:.0f}" for m in opts.sync),
                                 " / ".join(f"{sec[m] / base:.2f}" for m in opts.sync
                                            if m != "ALL") if base else "-"])
    n, P = max(opts.sizes), max(opts.ranks)
    for r in results:
        base = r["seconds"].get("ALL")
        if r["size"] == n and r["ranks"] == P and base:
            less = [m for m in opts.sync if m != "ALL" and r["seconds"][m] < base]
            notes.append(f"all_{r['collective']}, {r['topology']}, {P} ranks, "
                         f"{size_label(n)}: " + ", ".join(
                             f"{m}SYNC {r['seconds'][m] / base:.2f}x ALLSYNC"
                             for m in opts.sync if m != "ALL")
                         + (" (less synchronisation, less time)" if len(less) == len(
                             opts.sync) - 1 else " (not all faster)"))
    notes.append("upc_rt's collectives with IN_xSYNC | OUT_xSYNC for x in the modes, in the "
                 "same testbed: ALLSYNC adds a barrier before and after; MYSYNC and NOSYNC "
                 "start and return at once (MYSYNC holds by construction, docs/collectives.md).")
    return results, rows, notes


TOPO_STYLE = {"node": "-", "2nodes": ":"}
MARKERS = "os^Dv<>p"


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def _marker(ranks: Sequence[int], P: int) -> str:
    """The marker of the rank count ``P``, one per count of ``ranks``."""
    return MARKERS[list(ranks).index(P) % len(MARKERS)]


def _report(opts: argparse.Namespace, per: dict, why: str | None) -> dict[str, Any]:
    from amnet.coll import ALGORITHMS

    results, rows, notes, figures = [], [], [], []
    med = {k: median(v) for k, v in per.items()}
    for what in opts.collectives:
        series = []
        for topo in opts.topologies:
            for P in opts.ranks:
                for alg in ALGORITHMS[what]:
                    ys = [_us(med.get((topo, P, f"{what}/{alg}/{n}"))) for n in opts.sizes]
                    if any(y is not None for y in ys):  # a size not run is a gap
                        series.append({"label": f"{alg}, {P} ranks, {topo}",
                                       "x": list(opts.sizes), "y": ys, "group": alg,
                                       "style": TOPO_STYLE[topo],
                                       "marker": _marker(opts.ranks, P)})
                for n in opts.sizes:
                    row = {a: med.get((topo, P, f"{what}/{a}/{n}")) for a in ALGORITHMS[what]}
                    have = {a: v for a, v in row.items() if v is not None}
                    best = min(have, key=have.get)
                    mpi = med.get(("mpi", P, f"{what}/mpi4py/{n}")) if topo == "node" else None
                    floor = med.get((topo, P, f"{what}/floor/{n}"))
                    solo = med.get((topo, P, f"{what}/solo/{n}"))
                    results.append({"section": "algorithms", "collective": what,
                                    "topology": topo, "ranks": P,
                                    "size": n, "seconds": row, "best": best, "mpi4py": mpi,
                                    "floor": floor, "solo": solo,
                                    "samples": {a: per.get((topo, P, f"{what}/{a}/{n}"))
                                                for a in have}})
                    rows.append([what, topo, str(P), size_label(n),
                                 " / ".join("-" if row[a] is None else f"{row[a] * 1e6:.0f}"
                                            for a in ALGORITHMS[what]),
                                 best, "-" if floor is None else f"{floor * 1e6:.0f}",
                                 "-" if solo is None else f"{solo * 1e6:.1f}",
                                 "-" if mpi is None else f"{mpi * 1e6:.0f}",
                                 "-" if mpi is None else f"{have[best] / mpi:.2f}"])
            if topo == "node" and why is None:
                for P in opts.ranks:
                    ys = [_us(med.get(("mpi", P, f"{what}/mpi4py/{n}"))) for n in opts.sizes]
                    if any(y is not None for y in ys):
                        series.append({"label": f"mpi4py {MPI_NAME[what]}, {P} ranks",
                                       "x": list(opts.sizes), "y": ys, "group": "mpi4py",
                                       "style": "--", "marker": _marker(opts.ranks, P)})
        figures.append({"file": f"coll_{what}.png", "title": f"{what}: µs per call (slowest "
                        "rank's mean)", "xlabel": "bytes per block", "ylabel": "µs per call",
                        "better": "lower", "xlog": True, "xbytes": True,
                        "caption": ["One colour per algorithm; line: solid within a node, "
                                    "dotted across 2 nodes, dashed mpi4py (within a node); "
                                    "marker: the rank count. A size an algorithm did not run "
                                    "at is a gap."],
                        "series": series})
    n, P = max(opts.sizes), max(opts.ranks)
    for r in results:
        if r["size"] != n or r["ranks"] != P:
            continue
        best = r["seconds"][r["best"]]
        if r["collective"] in ("broadcast", "exchange") and r["seconds"].get("memcpy_push"):
            x = r["seconds"]["memcpy_push"] / best
            eager = r["seconds"].get("push")
            notes.append(f"{r['collective']}, {r['topology']}, {P} ranks, {size_label(n)}: "
                         f"best ({r['best']}) = {x:.2f}x faster than the reference memcpy "
                         f"push (target >= {COLL_PUSH:g}x: "
                         f"{'met' if x >= COLL_PUSH else 'missed'})"
                         + (f"; {eager / best:.2f}x the eager push" if eager else ""))
        if r["topology"] == "node" and r["mpi4py"]:
            x = best / r["mpi4py"]
            notes.append(f"{r['collective']}, one node, {P} ranks, {size_label(n)}: best "
                         f"({r['best']}) = {x:.2f}x mpi4py {MPI_NAME[r['collective']]} "
                         f"(target <= {COLL_MPI:g}x: {'met' if x <= COLL_MPI else 'missed'})")
    if why is not None:
        notes.append(f"mpi4py peer missing: {why}.")
    if max(opts.ranks) > cpu_count():
        notes.append(f"{cpu_count()} usable cores: jobs of more ranks are oversubscribed "
                     "(amnet waits blocking; MPICH polls), which the times include.")
    notes.append("AM floor: the push's messages (every block straight to its destination) "
                 "sent as plain Medium AMs "
                 "(ep.request_medium and a handler that copies), with no collective logic: "
                 "the least amnet's Python API spends moving the same bytes.")
    notes.append("team of one: the same collective (its default algorithm) on a team of one "
                 "member, in the same job: the collective layer's own Python (argument "
                 "checks, the call's description, its algorithm, the mailbox) with no message. "
                 "AM floor + team of one is the least a collective call written in Python on "
                 "amnet's AMs costs.")
    notes.append(f"Each case: {opts.warmup} untimed calls, {opts.warmup} timed without "
                 f"computation (the warm-up time), then {opts.calls} rounds of a call and "
                 f"{opts.compute:g}x the warm-up time of local computation"
                 + (f" ({opts.skew:g}x on the last rank)" if opts.skew > 1 else "")
                 + f"; the slowest rank's mean; median of {opts.reps} repetition(s).")
    cols = ["collective", "topology", "ranks", "block", "µs by algorithm (" + "; ".join(
        f"{w}: {' / '.join(ALGORITHMS[w])}" for w in opts.collectives) + ")", "best",
        "AM floor µs", "team of one µs", "mpi4py µs", "best / mpi4py"]
    table = {"title": "Collectives by algorithm, beside mpi4py", "columns": cols,
             "rows": rows, "notes": notes}
    tables = [table]
    if any(k[0].startswith("upc-") for k in med):
        sres, srows, snotes = _sync_table(opts, med)
        results += sres
        tables.append({"title": "upc_rt: synchronisation modes (the report's test cases 1, "
                                "7 and 8)",
                       "columns": ["collective", "topology", "ranks", "block",
                                   "µs by mode (" + " / ".join(opts.sync) + ")",
                                   "x ALLSYNC (" + " / ".join(m for m in opts.sync
                                                              if m != "ALL") + ")"],
                       "rows": srows, "notes": snotes})
    return {"suite": "coll",
            "config": {k: getattr(opts, k) for k in ("reps", "ranks", "topologies",
                                                     "collectives", "sizes", "calls",
                                                     "warmup", "compute", "skew",
                                                     "naive_max", "sync")},
            "results": results, "table": table, "tables": tables, "notes": notes,
            "figures": figures}
