"""Suite ``hybrid``: the whole hybrid study ("Hybrid PGAS Runtime Support for Multicore
Nodes") in one command: AM round trips, the injection microbenchmark, the fine-grained
kernels and amnet's collectives over every procs x threads split of ``--ranks`` ranks on
``--nodes`` nodes, in one report that answers *which mapping to use for this message size
and this pattern on this machine*.

Per repetition and split, one job runs the four parts (:mod:`amnet_bench._hybridjob`,
the collectives in :mod:`amnet_bench._hcolljob`) and,
with ``--gil``, a second one runs the kernels in spin wait mode to measure the interpreter
lock's and the drain lock's shares (as ``amnet-bench apps`` does). Every figure is compared
with the other splits of the same run; the all-threads split is the reference the paper
normalizes to. With ``--out``: ``hybrid_am.png``, ``hybrid_bandwidth_<pattern>.png``,
``hybrid_apps.png`` and ``hybrid_coll.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _hcolljob as hcoll
from . import _options as options
from . import apps as apps_mod
from ._appsjob import KERNELS
from ._hcolljob import COLLECTIVES
from ._hybridjob import hybrid_job
from ._options import choice_list, one_size, parse_sizes, size_label
from ._registry import suite
from ._report import Progress
from ._splits import split_caption
from ._stats import median
from ._twonode import cpu_count, run_job, segment_for
from .inject import (
    MODES,
    PATTERNS,
    add_put_options,
    job_figures,
    job_plan,
    modes_caption,
    plotted_modes,
)

QUICK = {"sizes": "8,4K,64K", "modes": "B,NB", "patterns": "p2p", "reps": 1, "samples": 2,
         "bytes": "128K", "trips": 20, "coll_calls": 5}
COLL_MAX = 1 << 20  # the largest --coll-sizes block


PLOTS = ("hybrid_am.png", "hybrid_bandwidth_<pattern>.png", "hybrid_apps.png",
         "hybrid_coll.png")


@suite("hybrid", plots=PLOTS)
def hybrid(args: Sequence[str] | None = None, *, ranks: int = 8, nodes: int = 2,
           splits: Any = "all", sizes: Any = "8,512,4K,32K,256K", modes: Any = "B,NB32,NB",
           patterns: Any = PATTERNS, kernels: Any = tuple(KERNELS), reps: int = 2,
           samples: int = 3, nbytes: Any = "512K", trips: int = 50, gil: bool = True,
           collectives: Any = COLLECTIVES, coll_sizes: Any = "8,4K", coll_calls: int = 20,
           progress: bool = True) -> dict[str, Any]:
    """The hybrid study: am + inject + apps + coll over every procs x threads split, one report."""
    p = options.Parser(
        "hybrid", "The hybrid paper's study in one run: AM round trips, injection "
                  "bandwidth, the fine-grained kernels and the collectives (world team) "
                  "for every procs x threads split of the ranks of a node, and which split "
                  "to use for which message size and pattern.")
    add_put_options(p, locals(), "put modes, as for inject", "bytes each rank puts per round")
    options.choices(p, "--kernels", kernels, KERNELS, "kernels", metavar="K,K")
    options.count(p, "--trips", trips, "AM round trips per round")
    options.toggle(p, "--gil", gil, "measure the interpreter lock's share of the kernels")
    options.choices(p, "--collectives", collectives, COLLECTIVES, "collectives", "collectives "
                    "on the world team, default algorithms, each call checked, or none to "
                    "skip them", metavar="C,C", none=True)
    options.sizes(p, coll_sizes, "bytes a block, for every collective but barrier",
                  flag="--coll-sizes", most=COLL_MAX, unit="a block")
    options.count(p, "--coll-calls", coll_calls, "calls of a collective per timed round")
    opts = options.parse(p, args, {
        "sizes": parse_sizes(QUICK["sizes"]),
        "modes": choice_list(QUICK["modes"], MODES, "modes"),
        "patterns": choice_list(QUICK["patterns"], PATTERNS, "patterns"),
        "reps": QUICK["reps"], "samples": QUICK["samples"],
        "nbytes": one_size(QUICK["bytes"]), "trips": QUICK["trips"],
        "coll_calls": QUICK["coll_calls"], "ranks": 4},
        "4 ranks, sizes 8,4K,64K, modes B,NB, p2p, smaller kernels, collectives of "
        f"{QUICK['coll_calls']} calls a round, 1 repetition of 2 rounds", plots=PLOTS)
    chosen = options.chosen_splits(p, opts)
    inject_plan = job_plan(opts)
    msgs = inject_plan["msgs"]
    kparams = apps_mod.QUICK if opts.quick else apps_mod.DEFAULTS
    apps_plan = {"kernels": opts.kernels, "samples": opts.samples,
                 "params": {k: kparams[k] for k in opts.kernels}}
    coll_plan = {"collectives": opts.collectives, "sizes": opts.coll_sizes,
                 "samples": opts.samples, "calls": opts.coll_calls} if opts.collectives \
        else None
    plan = {"am": {"samples": opts.samples, "trips": opts.trips},
            "inject": inject_plan,
            "apps": apps_plan,
            "coll": coll_plan}
    segment = segment_for(opts.ranks * max(opts.sizes))

    bar = Progress("hybrid", opts.reps * len(chosen) * (1 + opts.gil), progress)
    am: dict[tuple[str, str], list[float]] = {}
    bw: dict[tuple[str, str], list[float]] = {}
    kern: dict[tuple[str, str, str], list[Any]] = {}
    coll: dict[tuple[str, str], list[float]] = {}
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
            if coll_plan is not None:
                recs = [r["coll"] for r in res]
                hcoll.verify(recs, sp.label)
                for case, sec in hcoll.job_seconds(recs).items():
                    coll.setdefault((sp.label, case), []).append(sec)
            bar.step(f"rep {rep + 1}, {sp.label}")
            if opts.gil:
                res = run_job(hybrid_job, {"am": None, "inject": None, "apps": apps_plan,
                                          "coll": None},
                              n=opts.ranks, nodes=opts.nodes, wait_mode="spin",
                              **sp.run_options())
                for k in opts.kernels:
                    recs = [r["apps"][k] for r in res]
                    apps_mod.verify(k, recs, sp.label, "spin")
                    kern.setdefault((sp.label, "spin", k), []).append(
                        apps_mod.job_figures(recs))
                bar.step(f"rep {rep + 1}, {sp.label}, spin waits")
    bar.close()
    return _report(opts, chosen, msgs, am, bw, kern, coll, apps_plan)


def _best(values: dict[str, float], higher: bool) -> tuple[str, float]:
    """The best split and how much better it is than the worst (a ratio >= 1)."""
    best = (max if higher else min)(values, key=values.__getitem__)
    worst = (min if higher else max)(values.values())
    ratio = values[best] / worst if higher else worst / values[best]
    return best, ratio


def _report(opts: Any, chosen: list, msgs: dict, am: dict, bw: dict, kern: dict,
            coll: dict, apps_plan: dict) -> dict[str, Any]:
    labels = [s.label for s in chosen]
    ref = max(chosen, key=lambda s: s.threads).label
    others = [s for s in labels if s != ref]  # the reference's ratio to itself says nothing
    tables, results = [], {"am": [], "inject": [], "apps": [], "coll": []}
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
                              [f"{k}: split / {ref}" for k in kinds],
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
                   "columns": ["split", "pattern"] + [f"{size_label(z)}, {m}" for z in opts.sizes
                                                      for m in ("B", "NB") if m in opts.modes],
                   "rows": rows, "notes": [modes_caption([m for m in ("B", "NB")
                                                          if m in opts.modes])]})
    # -- the kernels
    rows = []
    secs = {(s, k): median([x["seconds"] for x in kern[(s, "auto", k)]])
            for s in labels for k in opts.kernels}
    for k in opts.kernels:
        best, ratio = _best({s: secs[(s, k)] for s in labels}, higher=False)
        row = [k, f"{secs[(ref, k)]:.3f}"] + \
              [f"{secs[(s, k)] / secs[(ref, k)]:.2f}" for s in others] + [f"{best} ({ratio:.2f}x)"]
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
                   "columns": ["kernel", f"{ref} s"] + [f"{s} / {ref}" for s in others] +
                              ["best (over the worst)"] +
                              [f"{s} GIL / drain" for s in labels],
                   "rows": rows,
                   "notes": ["GIL / drain: shares of the rank-threads' time spent waiting for "
                             "the interpreter lock and for amnet's drain lock, measured in a "
                             "spin-wait run of the split (see amnet-bench apps)."
                             if opts.gil else "GIL / drain: not measured (--no-gil)."]})
    if opts.collectives:
        tables.append(_coll_table(opts, labels, ref, coll, results["coll"]))
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
              "apps": apps_plan["params"], "collectives": opts.collectives,
              "coll_sizes": opts.coll_sizes, "coll_calls": opts.coll_calls}
    return {"suite": "hybrid",
            "config": config,
            "results": results,
            "tables": tables,
            "table": {"columns": tables[0]["columns"], "rows": tables[0]["rows"]},
            "notes": [n for t in tables for n in t["notes"]],
            "figures": figures(config, results)}


def _case_label(what: str, n: int | None) -> str:
    """A collectives bar's category: ``broadcast`` over ``8 B``, or ``barrier``."""
    return what if n is None else f"{what}\n{size_label(n)}"


def _coll_table(opts: Any, labels: list[str], ref: str, coll: dict,
                results: list) -> dict[str, Any]:
    """The collectives table (a row per collective and block size) and its ``results``."""
    rows = []
    for what, n in hcoll.cases(opts.collectives, opts.coll_sizes):
        case = hcoll.key(what, n)
        us = {s: median(coll[(s, case)]) * 1e6 for s in labels}
        best, ratio = _best(us, higher=False)
        vs = {s: us[s] / us[ref] for s in labels}
        rows.append([what, "-" if n is None else size_label(n)] +
                    [f"{us[s]:.1f}" for s in labels] +
                    [f"{vs[s]:.2f}" for s in labels if s != ref] + [f"{best} ({ratio:.2f}x)"])
        results.append({"collective": what, "size": n, "us": us, "vs_ref": vs, "best": best,
                        "best_over_worst": ratio,
                        "reps_us": {s: [x * 1e6 for x in coll[(s, case)]] for s in labels}})
    notes = [f"amnet's collectives on the world team ({opts.ranks} ranks), each with its "
             "default algorithm; block: the bytes a rank sends to each destination "
             "(broadcast: the root's, the root moving round the ranks; gather_all: every "
             "rank's, gathered on every rank; exchange: one to every rank; reduce_all: that "
             "many bytes of int64s summed, at least one). Each call is timed on its own and "
             "its result checked against a model after its clock stops (a wrong answer "
             f"stops the run). {opts.coll_calls} calls a round after a warm-up round; the "
             "slowest rank's mean µs per call, median of rounds and repetitions."]
    if opts.ranks > cpu_count():
        notes.append(f"{opts.ranks} ranks on {cpu_count()} cores: every rank, a rank-thread "
                     "too, waits for a collective's messages in blocking wait mode (it "
                     "sleeps until the message wakes it), so each step of an algorithm that "
                     "waits costs a wake-up from the scheduler; the figures are those of an "
                     "oversubscribed machine, not of a core per rank.")
    return {"section": "coll", "title": "Collectives per split (µs per call, lower is better)",
            "columns": ["collective", "block"] + [f"{s} µs" for s in labels] +
                       [f"{s} / {ref}" for s in labels if s != ref] +
                       ["best (over the worst)"],
            "rows": rows, "notes": notes}


def figures(config: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """The plots of a run from its ``config`` and ``results`` (as in its ``results.json``,
    so that a committed report's plots can be redrawn): the round trips, the kernels and
    the collectives (where the run has them) as bars, the bandwidth per pattern as curves
    of the blocking and the least throttled nonblocking mode."""
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
    if results.get("coll"):
        out.append({"file": "hybrid_coll.png", "kind": "bar",
                    "title": f"Collectives on the world team, {where}",
                    "xlabel": "collective and block size", "ylabel": "µs per call",
                    "better": "lower",
                    "caption": [split_caption(labels), "The slowest rank's mean time per "
                                "call, default algorithms; every result checked."],
                    "categories": [_case_label(c["collective"], c["size"])
                                   for c in results["coll"]],
                    "series": [{"label": s, "y": [c["us"][s] for c in results["coll"]]}
                               for s in labels]})
    return out
