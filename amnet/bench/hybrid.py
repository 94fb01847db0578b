"""Suite ``hybrid``: the whole hybrid study ("Hybrid PGAS Runtime Support for Multicore
Nodes") in one command: AM round trips, the injection microbenchmark and the fine-grained
kernels over every procs x threads split of ``--ranks`` ranks on ``--nodes`` nodes, in one
report that answers *which mapping to use for this message size and this pattern on this
machine*.

Per repetition and split, one job runs the three parts (:mod:`amnet.bench._hybridjob`) and,
with ``--gil``, a second one runs the kernels in spin wait mode to measure the interpreter
lock's and the drain lock's shares (as ``amnet-bench apps`` does). Every figure is compared
with the other splits of the same run; the all-threads split is the reference the paper
normalizes to. With ``--out``: ``hybrid_am.png``, ``hybrid_bandwidth_<pattern>.png`` and
``hybrid_apps.png``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

from . import apps as apps_mod
from . import suite
from ._appsjob import KERNELS
from ._hybridjob import hybrid_job
from ._report import Progress, choice_list, median, quick_parse
from ._splits import add_options, check_options, split_caption
from ._twonode import cpu_count, parse_sizes, run_job, segment_for, size_label
from .inject import MODES, PATTERNS, job_figures, job_plan, modes_caption, plotted_modes

QUICK = {"sizes": "8,4K,64K", "modes": "B,NB", "patterns": "p2p", "reps": 1, "samples": 2,
         "bytes": "128K", "trips": 20}


PLOTS = ("hybrid_am.png", "hybrid_bandwidth_<pattern>.png", "hybrid_apps.png")


@suite("hybrid", plots=PLOTS)
def hybrid(args: Sequence[str] | None = None, *, ranks: int = 8, nodes: int = 2,
           splits: Any = "all", sizes: Any = "8,512,4K,32K,256K", modes: Any = "B,NB32,NB",
           patterns: Any = PATTERNS, kernels: Any = tuple(KERNELS), reps: int = 2,
           samples: int = 3, nbytes: Any = "512K", trips: int = 50, gil: bool = True,
           progress: bool = True) -> dict[str, Any]:
    """The hybrid study: am + inject + apps over every procs x threads split, one report."""
    p = argparse.ArgumentParser(
        prog="amnet-bench hybrid",
        description="The hybrid paper's study in one run: AM round trips, injection "
                    "bandwidth and the fine-grained kernels for every procs x threads split "
                    "of the ranks of a node, and which split to use for which message size "
                    "and pattern.")
    add_options(p, ranks, nodes, splits, min_nodes=2)
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes(sizes), metavar="S,S",
                   help="put sizes (default: 8,512,4K,32K,256K)")
    p.add_argument("--modes", type=functools.partial(choice_list, allowed=MODES, what="modes"),
                   default=choice_list(modes, MODES, "modes"), metavar="M,M",
                   help="put modes, as for inject (default: B,NB32,NB)")
    p.add_argument("--patterns",
                   type=functools.partial(choice_list, allowed=PATTERNS, what="patterns"),
                   default=choice_list(patterns, PATTERNS, "patterns"), metavar="P,P",
                   help="p2p and/or p2m (default: both)")
    p.add_argument("--kernels",
                   type=functools.partial(choice_list, allowed=KERNELS, what="kernels"),
                   default=choice_list(kernels, KERNELS, "kernels"), metavar="K,K",
                   help=f"(default: {','.join(KERNELS)})")
    p.add_argument("--reps", type=int, default=reps, metavar="R",
                   help="repetitions, fresh jobs each (default: %(default)s)")
    p.add_argument("--samples", type=int, default=samples, metavar="N",
                   help="timed rounds per case in each job (default: %(default)s)")
    p.add_argument("--bytes", type=parse_sizes, default=parse_sizes(nbytes), metavar="B",
                   dest="nbytes", help="bytes each rank puts per round (default: 512K)")
    p.add_argument("--trips", type=int, default=trips, metavar="N",
                   help="AM round trips per round (default: %(default)s)")
    p.add_argument("--gil", action=argparse.BooleanOptionalAction, default=gil,
                   help="measure the interpreter lock's share of the kernels (default: on)")
    opts = quick_parse(p, args, {
        "sizes": parse_sizes(QUICK["sizes"]),
        "modes": choice_list(QUICK["modes"], MODES, "modes"),
        "patterns": choice_list(QUICK["patterns"], PATTERNS, "patterns"),
        "reps": QUICK["reps"], "samples": QUICK["samples"],
        "nbytes": parse_sizes(QUICK["bytes"]), "trips": QUICK["trips"], "ranks": 4},
        "4 ranks, sizes 8,4K,64K, modes B,NB, p2p, smaller kernels, 1 repetition of 2 "
        "rounds", plots=PLOTS)
    for name in ("reps", "samples", "trips"):
        if getattr(opts, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(opts, name)}")
    if max(opts.sizes) > 16 << 20:
        p.error(f"--sizes: at most 16 MiB a put, got {max(opts.sizes)}")
    chosen = check_options(p, opts, min_nodes=2)
    inject_plan = job_plan(opts)
    msgs = inject_plan["msgs"]
    kparams = apps_mod.QUICK if opts.quick else apps_mod.DEFAULTS
    apps_plan = {"kernels": opts.kernels, "samples": opts.samples,
                 "params": {k: kparams[k] for k in opts.kernels}}
    plan = {"am": {"samples": opts.samples, "trips": opts.trips},
            "inject": inject_plan,
            "apps": apps_plan}
    segment = segment_for(opts.ranks * max(opts.sizes))

    bar = Progress("hybrid", opts.reps * len(chosen) * (1 + opts.gil), progress)
    am: dict[tuple[str, str], list[float]] = {}
    bw: dict[tuple[str, str], list[float]] = {}
    kern: dict[tuple[str, str, str], list[Any]] = {}
    for rep in range(opts.reps):
        for sp in chosen:
            res = run_job(hybrid_job, plan, n=opts.ranks, nodes=opts.nodes,
                          segment_size=segment, **sp.run_options())
            for kind in ("node", "net"):
                got = [r["am"][kind] for r in res if r["am"][kind] is not None]
                if got:
                    am.setdefault((sp.label, kind), []).append(
                        median([max(x) for x in zip(*got, strict=True)]))
            for case, fig in job_figures([r["inject"] for r in res], msgs).items():
                bw.setdefault((sp.label, case), []).append(fig["mb_s"])
            for k in opts.kernels:
                recs = [r["apps"][k] for r in res]
                apps_mod.verify(k, recs, sp.label, "auto")
                kern.setdefault((sp.label, "auto", k), []).append(apps_mod.job_figures(recs))
            bar.step(f"rep {rep + 1}, {sp.label}")
            if opts.gil:
                res = run_job(hybrid_job, {"am": None, "inject": None, "apps": apps_plan},
                              n=opts.ranks, nodes=opts.nodes, wait_mode="spin",
                              **sp.run_options())
                for k in opts.kernels:
                    recs = [r["apps"][k] for r in res]
                    apps_mod.verify(k, recs, sp.label, "spin")
                    kern.setdefault((sp.label, "spin", k), []).append(
                        apps_mod.job_figures(recs))
                bar.step(f"rep {rep + 1}, {sp.label}, spin waits")
    bar.close()
    return _report(opts, chosen, msgs, am, bw, kern, apps_plan)


def _best(values: dict[str, float], higher: bool) -> tuple[str, float]:
    """The best split and how much better it is than the worst (a ratio >= 1)."""
    best = (max if higher else min)(values, key=values.__getitem__)
    worst = (min if higher else max)(values.values())
    ratio = values[best] / worst if higher else worst / values[best]
    return best, ratio


def _report(opts: Any, chosen: list, msgs: dict, am: dict, bw: dict, kern: dict,
            apps_plan: dict) -> dict[str, Any]:
    labels = [s.label for s in chosen]
    ref = max(chosen, key=lambda s: s.threads).label
    tables, results = [], {"am": [], "inject": [], "apps": []}
    # -- AM round trips
    rows = []
    kinds = [k for k in ("node", "net") if (labels[0], k) in am]
    rtt = {(s, k): median(am[(s, k)]) for s in labels for k in kinds}
    for s in labels:
        rows.append([s] + [f"{rtt[(s, k)] * 1e6:.1f}" for k in kinds] +
                    [f"{rtt[(s, k)] / rtt[(ref, k)]:.2f}" for k in kinds])
        results["am"].append({"split": s, **{f"{k}_us": rtt[(s, k)] * 1e6 for k in kinds},
                              "reps": {k: am[(s, k)] for k in kinds}})
    tables.append({"section": "am", "title": "Short AM round trip, every pair at once (µs)",
                   "columns": ["split"] + [f"{k} µs" for k in kinds] +
                              [f"{k} vs {ref}" for k in kinds],
                   "rows": rows,
                   "notes": ["node: the partner on the same node; net: the partner on the "
                             "next node. The slowest rank's mean round trip, median of "
                             "rounds and repetitions."]})
    # -- injection: which split for which size, mode and pattern
    fig = {(s, pat, z, m): median(bw[(s, f"{pat}/{z}/{m}")])
           for s in labels for pat in opts.patterns for z in opts.sizes for m in opts.modes}
    combos = [(m, pat) for pat in opts.patterns for m in opts.modes]
    rows = []
    for z in opts.sizes:
        row = [size_label(z)]
        for m, pat in combos:
            best, ratio = _best({s: fig[(s, pat, z, m)] for s in labels}, higher=True)
            row.append(f"{best} ({ratio:.2f}x)")
            results["inject"].append({"size": z, "mode": m, "pattern": pat, "best": best,
                                      "best_over_worst": ratio,
                                      "mb_s": {s: fig[(s, pat, z, m)] for s in labels}})
        rows.append(row)
    tables.append({"section": "inject", "title": "Which split moves the most bytes: the best "
                   "split per put size, mode and pattern (its bandwidth over the worst split's)",
                   "columns": ["size"] + [f"{m} {pat}" for m, pat in combos], "rows": rows,
                   "notes": ["Every rank puts to ranks of other nodes at once; bandwidth is "
                             "every rank's bytes over the slowest rank's time. Puts a round "
                             "per rank: " + ", ".join(f"{size_label(int(z))}: {n}"
                                                      for z, n in msgs.items()) + "."]})
    rows = []
    for s in labels:
        for pat in opts.patterns:
            rows.append([s, pat] + [f"{fig[(s, pat, z, m)]:.1f}" for z in opts.sizes
                                    for m in ("B", "NB") if m in opts.modes])
    tables.append({"section": "bandwidth", "title": "Aggregate bandwidth (MB/s)",
                   "columns": ["split", "pattern"] + [f"{size_label(z)} {m}" for z in opts.sizes
                                                      for m in ("B", "NB") if m in opts.modes],
                   "rows": rows, "notes": []})
    # -- the kernels
    rows = []
    secs = {(s, k): median([x["seconds"] for x in kern[(s, "auto", k)]])
            for s in labels for k in opts.kernels}
    for k in opts.kernels:
        best, ratio = _best({s: secs[(s, k)] for s in labels}, higher=False)
        row = [k] + [f"{secs[(s, k)] / secs[(ref, k)]:.2f}" for s in labels] + \
              [f"{best} ({ratio:.2f}x)"]
        shares = []
        for s in labels:
            gil, drain = apps_mod.lock_shares(kern.get((s, "spin", k)))
            shares.append("-" if gil is None else f"{100 * gil:.0f}% / {100 * drain:.0f}%")
            results["apps"].append({"kernel": k, "split": s, "seconds": secs[(s, k)],
                                    "vs_ref": secs[(s, k)] / secs[(ref, k)],
                                    "gil_share": gil, "drain_share": drain})
        rows.append(row + shares)
    tables.append({"section": "apps", "title": f"Kernels: time relative to {ref} (lower is "
                   "better), the best split, and each split's GIL / drain-lock share",
                   "columns": ["kernel"] + labels + ["best (over the worst)"] +
                              [f"{s} GIL / drain" for s in labels],
                   "rows": rows,
                   "notes": ["GIL / drain: shares of the rank-threads' time spent waiting for "
                             "the interpreter lock and for amnet's drain lock, measured in a "
                             "spin-wait run of the split (see amnet-bench apps)."
                             if opts.gil else "GIL / drain: not measured (--no-gil)."]})
    notes = [f"{opts.ranks} ranks on {opts.nodes} nodes ({opts.ranks // opts.nodes} a node), "
             f"splits {', '.join(labels)}; {opts.reps} repetitions x {opts.samples} rounds; "
             f"every split from the same run."]
    if opts.ranks > cpu_count():
        notes.append(f"oversubscribed: {opts.ranks} ranks on {cpu_count()} cores (blocking "
                     "waits): the splits' differences are mostly the machine's, not the "
                     "runtime's; a machine with a core per rank tells them apart.")
    tables[0]["notes"] = notes + tables[0]["notes"]
    config = {"ranks": opts.ranks, "nodes": opts.nodes, "splits": labels, "reference": ref,
              "sizes": opts.sizes, "modes": opts.modes, "patterns": opts.patterns,
              "kernels": opts.kernels, "reps": opts.reps, "samples": opts.samples,
              "msgs": msgs, "trips": opts.trips, "gil": opts.gil, "quick": opts.quick,
              "apps": apps_plan["params"]}
    return {"suite": "hybrid",
            "config": config,
            "results": results,
            "tables": tables,
            "table": {"columns": tables[0]["columns"], "rows": tables[0]["rows"]},
            "notes": [n for t in tables for n in t["notes"]],
            "figures": figures(config, results)}


def figures(config: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """The plots of a run from its ``config`` and ``results`` (as in its ``results.json``,
    so that a committed report's plots can be redrawn): the round trips and the kernels as
    bars, the bandwidth per pattern as curves of the blocking and the least throttled
    nonblocking mode."""
    where = f"{config['ranks']} ranks on {config['nodes']} nodes"
    ref, labels = config["reference"], config["splits"]
    kinds = [k for k in ("node", "net") if f"{k}_us" in (results["am"] or [{}])[0]]
    am = {a["split"]: a for a in results["am"]}
    vs_ref = {(a["split"], a["kernel"]): a["vs_ref"] for a in results["apps"]}
    bw = {(r["pattern"], r["size"], r["mode"]): r["mb_s"] for r in results["inject"]}
    modes = plotted_modes(config["modes"])
    out = [{"file": "hybrid_am.png", "kind": "bar",
            "title": f"Short AM round trip, {where}",
            "xlabel": "partner (node: the same node; net: the next node)",
            "ylabel": "µs per round trip", "better": "lower", "caption": [split_caption(labels)],
            "categories": kinds,
            "series": [{"label": s, "y": [am[s][f"{k}_us"] for k in kinds]} for s in labels]},
           {"file": "hybrid_apps.png", "kind": "bar",
            "title": f"Kernels relative to {ref}, {where}",
            "xlabel": "kernel", "ylabel": f"time / {ref}'s time", "better": "lower",
            "caption": [split_caption(labels)], "categories": list(config["kernels"]),
            "series": [{"label": s, "y": [vs_ref[(s, k)] for k in config["kernels"]]}
                       for s in labels]}]
    for pat in config["patterns"]:
        out.append({"file": f"hybrid_bandwidth_{pat}.png",
                    "title": f"Aggregate bandwidth, {pat}, {where}",
                    "xlabel": "bytes per put", "ylabel": "MB/s", "better": "higher",
                    "xlog": True, "xbytes": True,
                    "caption": [split_caption(labels), modes_caption(modes)],
                    "series": [{"label": f"{s} {m}", "x": list(config["sizes"]),
                                "y": [bw[(pat, z, m)][s] for z in config["sizes"]],
                                "style": "-" if m == "B" else "--", "group": s}
                               for s in labels for m in modes]})
    return out
