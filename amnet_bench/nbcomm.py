"""Suite ``nbcomm``: the autoNB paper's Fig. 7 -- four kernels written once with blocking
memput/memget, run blocking, made nonblocking by hand, and under amnet.nbcomm's automatic
scheduler ("Automatic Nonblocking Communication for Partitioned Global Address Space
Programs", Chen, Iancu, Yelick; ICS 2007, §4.4).

The kernels (:mod:`amnet_bench._nbkernels`): GUPS with bulk updates, a 3-D stencil's halo
exchange, FT's transpose with large puts, BT's sweep of many small gets. Each runs in four
forms in the same job, interleaved (:mod:`amnet_bench._nbjob`): ``blocking`` (the program as
written), ``manual`` (put_nbi/wait_nbi, get_nb placed by hand), ``auto`` (the program as
written on an :class:`amnet.nbcomm.Scheduler`) and ``compute`` (no communication: the floor
that overlap can at best reach). The job is ``amnet.run(fn, n=--ranks, nodes=--nodes)`` with
``AMNET_NET_LATENCY_US=--latency`` (default 2 ranks on 2 nodes, 10 µs), once per
repetition. The three communicating forms must compute bit-identical results, or the suite
fails.

Figures: µs per iteration (the slowest rank, median of rounds, median over repetitions);
speedup = blocking / form; the automatic form's share of the manual gain =
(auto speedup - 1) / (manual speedup - 1). Targets: the geometric-mean automatic speedup
>= 1.16 (the paper's 16-19%) and >= 75% of the manual gain; conflict-check time < 1% of the
automatic run for the kernels with monotone addresses (gups, stencil, transpose). With
``--out``, ``nbcomm_fig7.png`` draws the speedups as the paper's Fig. 7 does.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from . import _options as options
from ._nbjob import FORMS, nb_job
from ._nbkernels import DEFAULTS, KERNELS, check_params
from ._registry import suite
from ._report import Progress
from ._stats import median
from ._targets import NB_CHECK, NB_SHARE, NB_SPEEDUP
from ._twonode import run_job, segment_for

MONOTONE = ("gups", "stencil", "transpose")  # puts at monotone addresses
STAT_COLUMNS = (("puts_deferred", "puts deferred"), ("fast_checks", "box checks"),
                ("scans", "scans"), ("conflicts", "conflicts"), ("cap_syncs", "cap syncs"),
                ("prefetches_issued", "prefetches"), ("prefetch_hits", "hits"),
                ("prefetches_wasted", "wasted"), ("chunks", "chunks"),
                ("aggregated_calls", "VIS calls"), ("aggregated_ops", "aggregated ops"))


def _setting(text: str) -> tuple[str, str, int]:
    """``KERNEL.PARAM=INT`` (``--set``)."""
    try:
        left, value = text.split("=", 1)
        kernel, key = left.strip().split(".", 1)
        val = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KERNEL.PARAM=INT such as "
                                         f"gups.updates=32, got {text!r}") from None
    if kernel not in DEFAULTS or key not in DEFAULTS[kernel]:
        known = ", ".join(f"{k}.{p}" for k, ps in DEFAULTS.items() for p in ps)
        raise argparse.ArgumentTypeError(f"unknown parameter {left.strip()!r}; known: {known}")
    return kernel, key, val


def _parser(d: dict[str, Any]) -> options.Parser:
    """The options, with the suite's defaults ``d`` (its keywords by name)."""
    p = options.Parser(
        "nbcomm", "The autoNB paper's Fig. 7: four kernels written once with blocking "
                  "memput/memget, timed blocking, made nonblocking by hand, under the "
                  "automatic scheduler, and without communication. µs per iteration.")
    options.choices(p, "--kernels", d["kernels"], KERNELS, "kernels", metavar="K,K")
    options.reps(p, d["reps"], "a fresh job each")
    options.count(p, "--samples", d["samples"], "timed rounds of every form per kernel in each "
                  "job, after one warm-up round")
    options.count(p, "--iters", d["iters"], "iterations a timed run (the automatic form "
                  "records in the first)")
    options.ranks(p, d["ranks"], "ranks", 2, 256)
    options.nodes(p, d["nodes"], "simulated nodes the ranks are split over")
    options.latency(p, d["latency"])
    options.conduits(p, d["conduit"], "the conduit between the nodes", one=True)
    p.add_argument("--set", type=_setting, action="append", default=[], metavar="K.P=V",
                   dest="settings",
                   help="a kernel parameter, e.g. gups.updates=32 (repeatable; defaults: " +
                        "; ".join(f"{k}: " + ", ".join(f"{p}={v}" for p, v in ps.items())
                                  for k, ps in DEFAULTS.items()) + ")")
    return p


PLOTS = ("nbcomm_fig7.png",)


@suite("nbcomm", plots=PLOTS)
def nbcomm(args: Sequence[str] | None = None, *, kernels: Any = tuple(KERNELS), reps: int = 3,
           samples: int = 3, iters: int = 20, ranks: int = 2, nodes: int = 2,
           latency: float = 10.0, conduit: str = "zmq", progress: bool = True
           ) -> dict[str, Any]:
    """Fig. 7 of the autoNB paper: blocking, manual and automatic nonblocking kernels."""
    parser = _parser(locals())
    opts = options.parse(parser, args, {"reps": 1, "samples": 1, "iters": 10},
                         "1 repetition, 1 round of 10 iterations", fixed={
                             "--splits": ("1", "its ranks are processes, as the paper's are"),
                             "--sizes": (None, "its kernels have no message size of their "
                                               "own (set their parameters with --set "
                                               "KERNEL.PARAM=V)")}, plots=PLOTS)
    params = {k: dict(v) for k, v in DEFAULTS.items()}
    for k, key, val in opts.settings:
        params[k][key] = val
    for k in opts.kernels:
        why = check_params(k, params[k], opts.ranks)
        if why:
            parser.error(why)
    used = max(KERNELS[k].segment_bytes(params[k], opts.ranks) for k in opts.kernels)
    segment = segment_for(used)
    plan = {"kernels": opts.kernels, "params": params, "samples": opts.samples,
            "iters": opts.iters, "scheduler": {}}

    bar = Progress("nbcomm", opts.reps, progress)
    per: dict[tuple[str, str], list[float]] = {}  # (kernel, form) -> a figure per rep
    stats: dict[str, list[dict[str, float]]] = {k: [] for k in opts.kernels}
    for rep in range(opts.reps):
        res = run_job(nb_job, plan, n=opts.ranks, nodes=opts.nodes,
                      net_latency_us=opts.latency, segment_size=segment,
                      conduit=opts.conduit[0])
        for k in opts.kernels:
            for f in FORMS:
                rounds = zip(*(r[k]["seconds"][f] for r in res), strict=True)
                per.setdefault((k, f), []).append(median([max(x) for x in rounds]))
            stats[k].append(_stat_sum(r[k]["stats"] for r in res))
            stats[k][-1]["check_share"] = max(
                r[k]["stats"]["check_seconds"] / r[k]["stats"]["seconds"] for r in res)
        bar.step(f"rep {rep + 1}")
    bar.close()
    return _report(opts, params, segment, per, stats)


def _stat_sum(per_rank: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for st in per_rank:
        for f, v in st.items():
            out[f] = out.get(f, 0) + v
    return out


def _report(opts: Any, params: dict[str, Any], segment: int,
            per: dict[tuple[str, str], list[float]],
            stats: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    results, rows, srows = [], [], []
    speed: dict[str, list[float]] = {"manual": [], "auto": []}
    checks: dict[str, float] = {}
    for k in opts.kernels:
        us = {f: median(per[(k, f)]) * 1e6 for f in FORMS}
        sp = {f: us["blocking"] / us[f] for f in ("manual", "auto")}
        share = _share(sp["auto"], sp["manual"])
        comm = 1 - us["compute"] / us["blocking"]
        check = median([s["check_share"] for s in stats[k]])
        checks[k] = check
        for f in speed:
            speed[f].append(sp[f])
        per_rep = {f: [x * 1e6 for x in per[(k, f)]] for f in FORMS}
        results.append({"kernel": k, "params": params[k], "us_per_iter": us,
                        "samples_us": per_rep, "speedup": sp, "auto_share": share,
                        "comm_fraction": comm, "check_fraction": check,
                        "stats": stats[k]})
        rows.append([k, f"{us['blocking']:.0f}", f"{us['manual']:.0f}", f"{us['auto']:.0f}",
                     f"{us['compute']:.0f}", f"{100 * comm:.0f}%", f"{sp['manual']:.2f}x",
                     f"{sp['auto']:.2f}x", _pct(share), f"{100 * check:.2f}%"])
        last = stats[k][-1]
        srows.append([k] + [f"{last.get(f, 0):.0f}" for f, _ in STAT_COLUMNS] +
                     [f"{1e3 * last['check_seconds']:.1f}"])
    geo = {f: math.exp(sum(map(math.log, v)) / len(v)) for f, v in speed.items()}
    gshare = _share(geo["auto"], geo["manual"])
    rows.append(["geometric mean", "", "", "", "", "", f"{geo['manual']:.2f}x",
                 f"{geo['auto']:.2f}x", _pct(gshare), ""])
    notes = [f"{opts.ranks} ranks on {opts.nodes} nodes, AMNET_NET_LATENCY_US="
             f"{opts.latency:g}, {opts.conduit[0]} conduit; {opts.reps} repetitions x "
             f"{opts.samples} rounds x {opts.iters} iterations; µs per iteration of the "
             "slowest rank (median of rounds, median over repetitions). comm = 1 - compute / "
             "blocking. auto share = (auto speedup - 1) / (manual speedup - 1). check = "
             "conflict-check time / the automatic run's time, the worst rank.",
             f"geometric-mean automatic speedup {geo['auto']:.2f}x (target >= "
             f"{NB_SPEEDUP:g}x: {'met' if geo['auto'] >= NB_SPEEDUP else 'missed'}); "
             f"{_pct(gshare)} of the manual gain ({geo['manual']:.2f}x) (target >= "
             f"{NB_SHARE:.0%}: "
             f"{'met' if gshare is not None and gshare >= NB_SHARE else 'missed'})"]
    mono = [k for k in opts.kernels if k in MONOTONE]
    if mono:
        worst = max(checks[k] for k in mono)
        notes.append(f"conflict checks of the monotone kernels ({', '.join(mono)}): at most "
                     f"{100 * worst:.2f}% of the automatic run (target < "
                     f"{NB_CHECK:.0%}: {'met' if worst < NB_CHECK else 'missed'})")
    notes.append("The forms computed bit-identical results in every round (the job fails "
                 "otherwise).")
    stat_table = {"section": "stats", "title": "Scheduler statistics of the automatic form "
                  "(last repetition, all ranks, every timed round)",
                  "columns": ["kernel"] + [c for _, c in STAT_COLUMNS] + ["check ms"],
                  "rows": srows, "notes": []}
    main = {"section": "speedup", "title": "Per iteration, and speedup over blocking",
            "columns": ["kernel", "blocking µs", "manual µs", "auto µs", "compute µs",
                        "comm", "manual", "auto", "auto share", "check"],
            "rows": rows, "notes": notes}
    names = [*opts.kernels, "geo. mean"]
    fig = {"file": "nbcomm_fig7.png", "kind": "bar",
           "title": f"Speedup over blocking, {opts.ranks} ranks on {opts.nodes} nodes, "
                    f"{opts.latency:g} µs (the autoNB paper's Fig. 7)",
           "xlabel": "kernel", "ylabel": "speedup over blocking", "better": "higher",
           "caption": ["blocking: the kernel as written, blocking memput/memget; manual: "
                       "made nonblocking by hand (put_nbi/wait_nbi, get_nb); auto: as "
                       "written, on amnet.nbcomm's automatic scheduler."],
           "categories": names,
           "series": [{"label": "blocking", "y": [1.0] * len(names)},
                      {"label": "manual", "y": speed["manual"] + [geo["manual"]]},
                      {"label": "auto", "y": speed["auto"] + [geo["auto"]]}]}
    return {
        "suite": "nbcomm",
        "config": {"kernels": opts.kernels, "reps": opts.reps, "samples": opts.samples,
                   "iters": opts.iters, "ranks": opts.ranks, "nodes": opts.nodes,
                   "latency_us": opts.latency, "conduit": opts.conduit[0],
                   "params": {k: params[k] for k in opts.kernels},
                   "segment_size": segment},
        "results": results,
        "geomean": {"manual": geo["manual"], "auto": geo["auto"], "auto_share": gshare},
        "tables": [main, stat_table],
        "table": {"columns": main["columns"], "rows": rows},
        "notes": notes,
        "figures": [fig],
    }


def _share(auto: float, manual: float) -> float | None:
    """The automatic form's share of the manual gain (None when manual gained nothing)."""
    return (auto - 1) / (manual - 1) if manual > 1 else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"
