"""Suite ``inject``: message injection overhead and aggregate bandwidth for every procs x
threads split, the hybrid paper's Figs. 2-5 ("Hybrid PGAS Runtime Support for Multicore
Nodes", §4.1).

``--ranks`` ranks on ``--nodes`` simulated nodes (default 4 on 2), once per split of the
ranks of a node into processes of rank-threads (``--splits``, default every one: ``1T-2P``,
``2T-1P`` for 2 a node) and repetition, fresh processes each. In each job every rank puts to
ranks on other nodes at once (:mod:`amnet_bench._injectjob`): one partner (``p2p``) or the
next one for every message (``p2m``), blocking (``B``) or nonblocking with at most 8, 32, 128
or any number in flight (``NB8``..``NB``). Figures: the aggregate bandwidth (every rank's
bytes over the slowest rank's time, MB/s), and the injection overhead (µs inside ``put_nb``
per put, mean over ranks, from the uncapped nonblocking run), medians over rounds and
repetitions. The peer is the all-threads split measured in the same run (the paper's
UPC-pthreads, which its Fig. 5 normalizes against): each split's bandwidth is also given as a
ratio to it. With ``--out``, ``inject_bandwidth_<pattern>.png`` and ``inject_overhead.png``
draw the curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _options as options
from ._injectjob import inject_job
from ._options import choice_list, one_size, parse_sizes, size_label
from ._registry import suite
from ._report import Progress
from ._splits import split_caption
from ._stats import median
from ._twonode import cpu_count, run_job, segment_for

MODES = ("B", "NB8", "NB32", "NB128", "NB")
PATTERNS = ("p2p", "p2m")
QUICK = {"sizes": "8,4K,64K", "modes": "B,NB32,NB", "reps": 1, "samples": 2,
         "bytes": "256K"}


PLOTS = ("inject_bandwidth_<pattern>.png", "inject_overhead.png")


@suite("inject", plots=PLOTS)
def inject(args: Sequence[str] | None = None, *, ranks: int = 4, nodes: int = 2,
           splits: Any = "all", sizes: Any = "8,64,512,4K,32K,256K", modes: Any = MODES,
           patterns: Any = PATTERNS, reps: int = 3, samples: int = 3, nbytes: Any = "1M",
           latency: float = 0.0, progress: bool = True) -> dict[str, Any]:
    """Injection overhead and bandwidth per procs x threads split (hybrid paper Figs. 2-5)."""
    p = options.Parser(
        "inject", "Message injection overhead and aggregate bandwidth between nodes for "
                  "every procs x threads split of the ranks of a node, blocking and "
                  "nonblocking with in-flight caps, one partner (p2p) or many (p2m): the "
                  "hybrid paper's Figs. 2-5.")
    add_put_options(p, locals(), "B (blocking), NB8, NB32, NB128 (nonblocking, at most that "
                    "many in flight), NB (no cap)", "bytes each rank puts per round: the put "
                    "count is B / size, 16..1024")
    options.latency(p, latency)
    opts = options.parse(p, args, {
        "sizes": parse_sizes(QUICK["sizes"]), "modes": choice_list(QUICK["modes"], MODES,
                                                                    "modes"),
        "reps": QUICK["reps"], "samples": QUICK["samples"],
        "nbytes": one_size(QUICK["bytes"])},
        "sizes 8,4K,64K, modes B,NB32,NB, 1 repetition of 2 rounds of 256 KiB", plots=PLOTS)
    chosen = options.chosen_splits(p, opts)
    plan = job_plan(opts)
    msgs, segment = plan["msgs"], segment_for(opts.ranks * max(opts.sizes))

    bar = Progress("inject", opts.reps * len(chosen), progress)
    per: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (split, case) -> a figure per rep
    for rep in range(opts.reps):
        for sp in chosen:
            res = run_job(inject_job, plan, n=opts.ranks, nodes=opts.nodes,
                          net_latency_us=opts.latency, segment_size=segment,
                          **sp.run_options())
            for case, fig in job_figures(res, msgs).items():
                per.setdefault((sp.label, case), []).append(fig)
            bar.step(f"rep {rep + 1}, {sp.label}")
    bar.close()
    return _report(opts, chosen, per, msgs, segment)


def add_put_options(p: options.Parser, d: dict[str, Any], modes: str, nbytes: str) -> None:
    """The options of the puts :func:`job_plan` makes (inject's and hybrid's), with the
    suite's defaults ``d`` (its keywords by name); ``modes`` and ``nbytes`` say what its
    --modes and --bytes are."""
    options.split_sweep(p, d["ranks"], d["nodes"], d["splits"], min_nodes=2)
    options.sizes(p, d["sizes"], "bytes per put", most=16 << 20, unit="a put")
    options.choices(p, "--modes", d["modes"], MODES, "modes", modes, metavar="M,M")
    options.choices(p, "--patterns", d["patterns"], PATTERNS, "patterns", "p2p and/or p2m",
                    metavar="P,P")
    options.reps(p, d["reps"])
    options.count(p, "--samples", d["samples"], "timed rounds per case in each job, after a "
                  "warm-up round")
    options.size(p, "--bytes", d["nbytes"], nbytes, dest="nbytes")


def job_plan(opts: Any) -> dict[str, Any]:
    """What :func:`amnet_bench._injectjob.inject_job` runs for parsed options (``patterns``,
    ``sizes``, ``modes``, ``samples``, ``nbytes``): ``nbytes`` a round per rank, in 16 to
    1024 puts of each size."""
    nbytes = opts.nbytes
    return {"patterns": opts.patterns, "sizes": opts.sizes, "modes": opts.modes,
            "samples": opts.samples,
            "msgs": {str(s): max(16, min(1024, nbytes // s)) for s in opts.sizes}}


def job_figures(res: list[dict[str, Any]], msgs: dict[str, int]) -> dict[str, Any]:
    """One job's figures per case (``pattern/size/mode``): the aggregate MB/s (every rank's
    bytes over the slowest rank's time, median of rounds) and the injection overhead
    (seconds inside ``put_nb`` per put, mean over ranks, median of rounds; None when
    blocking)."""
    out = {}
    for case in res[0]:
        rounds = list(zip(*(r[case]["seconds"] for r in res), strict=True))
        size = int(case.split("/")[1])
        bw = median([len(res) * msgs[str(size)] * size / max(x) / 1e6 for x in rounds])
        inj = None
        if res[0][case]["inject"] is not None:
            inj = median([sum(x) / len(x) for x in
                          zip(*(r[case]["inject"] for r in res), strict=True)])
        out[case] = {"mb_s": bw, "inject_s": inj}
    return out


def _cap(mode: str) -> float:
    """How many puts a mode keeps in flight (``B``: 1; ``NB``: no cap)."""
    return 1 if mode == "B" else float(mode[2:] or "inf")


def plotted_modes(modes: Sequence[str]) -> list[str]:
    """The modes a bandwidth plot draws: ``B`` (if run) and the least throttled nonblocking
    mode run (``NB`` if run, else the largest cap)."""
    nb = sorted((m for m in modes if m != "B"), key=_cap)
    return (["B"] if "B" in modes else []) + nb[-1:]


def modes_caption(modes: Sequence[str]) -> str:
    """The line a plot of put modes carries to say what its labels mean."""
    what = {"B": "blocking puts (put)", "NB": "nonblocking puts (put_nb), any number in "
            "flight"}
    return "Modes: " + "; ".join(
        f"{m}: {what.get(m) or f'nonblocking puts, at most {m[2:]} in flight'}"
        for m in modes) + "."


def _report(opts: Any, chosen: list, per: dict, msgs: dict, segment: int) -> dict[str, Any]:
    ref = max(chosen, key=lambda s: s.threads)  # the all-threads split (or the most threaded)
    nb = [m for m in opts.modes if m != "B"]
    inj_mode = plotted_modes(nb)[-1] if nb else None  # the least throttled
    results, rows = [], []
    bw: dict[tuple[str, str, int, str], float] = {}
    inj: dict[tuple[str, str, int], float | None] = {}
    for sp in chosen:
        for pat in opts.patterns:
            for size in opts.sizes:
                for m in opts.modes:
                    reps = per[(sp.label, f"{pat}/{size}/{m}")]
                    bw[(sp.label, pat, size, m)] = median([r["mb_s"] for r in reps])
                    if m == inj_mode:
                        inj[(sp.label, pat, size)] = median([r["inject_s"] for r in reps])
    for sp in chosen:
        for pat in opts.patterns:
            for size in opts.sizes:
                fig = {m: bw[(sp.label, pat, size, m)] for m in opts.modes}
                ratio = {m: fig[m] / bw[(ref.label, pat, size, m)] for m in opts.modes}
                i = inj.get((sp.label, pat, size))
                results.append({"split": sp.label, "threads": sp.threads, "procs": sp.procs,
                                "pattern": pat, "size": size, "msgs": msgs[str(size)],
                                "mb_s": fig, "vs_ref": ratio, "inject_us":
                                None if i is None else i * 1e6,
                                "reps": {m: per[(sp.label, f"{pat}/{size}/{m}")]
                                         for m in opts.modes}})
                rows.append([sp.label, pat, size_label(size),
                             "-" if i is None else f"{i * 1e6:.1f}"] +
                            [f"{fig[m]:.1f}" for m in opts.modes] +
                            [f"{ratio[m]:.2f}x" for m in opts.modes if m in ("B", "NB")])
    ratio_cols = [f"{m} vs {ref.label}" for m in opts.modes if m in ("B", "NB")]
    cols = ["split", "pattern", "size", f"inject µs ({inj_mode or '-'})"] + \
        [f"{m} MB/s" for m in opts.modes] + ratio_cols
    over = opts.ranks > cpu_count()
    notes = [f"{opts.ranks} ranks on {opts.nodes} nodes ({opts.ranks // opts.nodes} a node), "
             f"AMNET_NET_LATENCY_US={opts.latency:g}; every rank puts to ranks of other "
             f"nodes at once; {opts.reps} repetitions x {opts.samples} rounds; puts a round "
             f"per rank: " + ", ".join(f"{size_label(s)}: {msgs[str(s)]}" for s in opts.sizes)
             + ". MB/s: every rank's bytes over the slowest rank's time. inject µs: time "
             "inside put_nb per put, mean over ranks.",
             f"Ratios are against {ref.label} (all rank-threads of a node in one process, the "
             "paper's UPC-pthreads) from the same run. Rank-threads of one process share one "
             "interpreter lock and one drain lock: a thread split's injection is serialized "
             "by both, which is CPython's share of the difference, not the network's."]
    if over:
        notes.append(f"oversubscribed: {opts.ranks} ranks (plus the conduit's I/O threads) on "
                     f"{cpu_count()} cores; amnet's auto wait mode blocks instead of spinning.")
    labels = [sp.label for sp in chosen]
    where = f"{opts.ranks} ranks on {opts.nodes} nodes"
    figures = []
    drawn = plotted_modes(opts.modes)
    for pat in opts.patterns:
        figures.append({"file": f"inject_bandwidth_{pat}.png",
                        "title": f"Aggregate bandwidth, {where}, {pat} (hybrid paper "
                                 "Figs. 2-4)",
                        "xlabel": "bytes per put", "ylabel": "MB/s", "better": "higher",
                        "xlog": True, "xbytes": True,
                        "caption": [split_caption(labels), modes_caption(drawn)],
                        "series": [{"label": f"{sp.label} {m}", "x": list(opts.sizes),
                                    "y": [bw[(sp.label, pat, s, m)] for s in opts.sizes],
                                    "style": "-" if m == "B" else "--", "group": sp.label}
                                   for sp in chosen for m in drawn]})
    if inj_mode is not None:
        figures.append({"file": "inject_overhead.png",
                        "title": f"Injection overhead ({inj_mode}), {where} (hybrid paper "
                                 "Fig. 2)",
                        "xlabel": "bytes per put", "ylabel": "µs inside put_nb per put",
                        "better": "lower", "xlog": True, "xbytes": True,
                        "caption": [split_caption(labels), modes_caption([inj_mode]) +
                                    " p2p: every put to one partner; p2m: to the next "
                                    "partner each time."],
                        "series": [
                            {"label": f"{sp.label} {pat}", "x": list(opts.sizes),
                             "y": [inj[(sp.label, pat, s)] * 1e6 for s in opts.sizes],
                             "style": "-" if pat == "p2p" else "--", "group": sp.label}
                            for sp in chosen for pat in opts.patterns]})
    return {"suite": "inject",
            "config": {"ranks": opts.ranks, "nodes": opts.nodes,
                       "splits": [s.label for s in chosen], "sizes": opts.sizes,
                       "modes": opts.modes, "patterns": opts.patterns, "reps": opts.reps,
                       "samples": opts.samples, "msgs": msgs, "latency_us": opts.latency,
                       "segment_size": segment, "reference": ref.label,
                       "oversubscribed": over, "quick": opts.quick},
            "results": results,
            "table": {"columns": cols, "rows": rows},
            "notes": notes,
            "figures": figures}
