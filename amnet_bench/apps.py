"""Suite ``apps``: the hybrid paper's fine-grained application kernels for every procs x
threads split, normalized to the all-threads split as in its Fig. 6 ("Hybrid PGAS Runtime
Support for Multicore Nodes", §5), with the interpreter lock's share measured.

``--ranks`` ranks on ``--nodes`` nodes (default 4 on 2), once per split (``--splits``) and
repetition, fresh processes each: GUPS, Sobel, MCOP, a contended lock and pure-Python
compute on upc_rt
(:mod:`amnet_bench._appsjob`), each checked for its answer. A kernel's figure is the slowest
rank-thread's seconds per round (median of rounds, median over repetitions), and its ratio
to the all-threads split from the same run (below 1: faster than all threads).

Rank-threads of one process share one interpreter lock (the GIL) and amnet's drain lock, so
a thread split can lose time that is CPython's, not the runtime's. With ``--gil`` (default
on), every split runs once more per repetition in spin wait mode, where a rank-thread leaves
the CPU only to wait for one of the two locks: per round, the time the kernel's threads spent
neither on a CPU nor waiting for one (their schedstat), less the time amnet measured its
rank-threads waiting for the drain lock, is the GIL's; both are given as shares of the
threads' time. The all-processes split is the control (no lock shared: about 0%).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _options as options
from ._appsjob import KERNELS, apps_job
from ._registry import BenchError, suite
from ._report import Progress
from ._splits import split_caption
from ._stats import median
from ._twonode import cpu_count, run_job

DEFAULTS = {"gups": {"table": 1024, "updates": 128}, "sobel": {"rows": 16, "cols": 64},
            "mcop": {"n": 8}, "lock": {"per": 20}, "compute": {"elems": 2000, "work": 50}}
QUICK = {"gups": {"table": 256, "updates": 32}, "sobel": {"rows": 8, "cols": 32},
         "mcop": {"n": 4}, "lock": {"per": 8}, "compute": {"elems": 500, "work": 20}}
UNITS = {"gups": "updates", "sobel": "pixels", "mcop": "entries", "lock": "lock pairs",
         "compute": "elements"}
SERIAL = "1 rank"  # the compute kernel's reference: one rank doing a node's elements alone


def serial_plan(plan: dict[str, Any], per_node: int) -> dict[str, Any]:
    """The compute kernel's serial reference: one rank, the elements of a node's
    ``per_node`` ranks."""
    p = dict(plan["params"]["compute"])
    p["elems"] *= per_node
    return {"kernels": ["compute"], "samples": plan["samples"], "params": {"compute": p}}


PLOTS = ("apps_fig6.png",)


@suite("apps", plots=PLOTS)
def apps(args: Sequence[str] | None = None, *, ranks: int = 4, nodes: int = 2,
         splits: Any = "all", kernels: Any = tuple(KERNELS), reps: int = 3, samples: int = 3,
         gil: bool = True, progress: bool = True) -> dict[str, Any]:
    """GUPS, Sobel, MCOP, a lock, Python compute per procs x threads split (hybrid Fig. 6)."""
    p = options.Parser(
        "apps", "The hybrid paper's fine-grained kernels (GUPS, Sobel, MCOP, a contended "
                "lock) and pure-Python compute on upc_rt for every procs x threads split, "
                "normalized to the all-threads split (its Fig. 6), with the interpreter "
                "lock's share of each split's time measured.")
    options.split_sweep(p, ranks, nodes, splits, min_nodes=1)
    options.choices(p, "--kernels", kernels, KERNELS, "kernels", metavar="K,K")
    options.reps(p, reps)
    options.count(p, "--samples", samples, "timed rounds per kernel in each job, after a "
                  "warm-up round")
    options.toggle(p, "--gil", gil, "also run every split in spin wait mode to measure the "
                   "interpreter lock's share")
    opts = options.parse(p, args, {"reps": 1, "samples": 2},
                         "smaller kernels, 1 repetition of 2 rounds", fixed={
                             "--sizes": (None, "its kernels have no message size; their "
                                               "sizes are the paper's, scaled to the "
                                               "machine (--quick: smaller)")}, plots=PLOTS)
    chosen = options.chosen_splits(p, opts)
    params = QUICK if opts.quick else DEFAULTS
    plan = {"kernels": opts.kernels, "samples": opts.samples,
            "params": {k: params[k] for k in opts.kernels}}

    modes = ["auto"] + (["spin"] if opts.gil else [])
    bar = Progress("apps", opts.reps * len(chosen) * len(modes), progress)
    per: dict[tuple[str, str, str], list[Any]] = {}  # (split, mode, kernel) -> per rep
    for rep in range(opts.reps):
        for sp in chosen:
            for mode in modes:
                res = run_job(apps_job, plan, n=opts.ranks, nodes=opts.nodes,
                              wait_mode=mode, **sp.run_options())
                for k in opts.kernels:
                    verify(k, [r[k] for r in res], sp.label, mode)
                    per.setdefault((sp.label, mode, k), []).append(job_figures(
                        [r[k] for r in res]))
                bar.step(f"rep {rep + 1}, {sp.label}, {mode} waits")
        if "compute" in opts.kernels:  # the serial reference of the same run
            res = run_job(apps_job, serial_plan(plan, opts.ranks // opts.nodes), n=1)
            verify("compute", [r["compute"] for r in res], SERIAL, "auto")
            per.setdefault((SERIAL, "auto", "compute"), []).append(job_figures(
                [r["compute"] for r in res]))
    bar.close()
    return _report(opts, chosen, plan, per)


def verify(kernel: str, recs: list[dict[str, Any]], split: str, mode: str) -> None:
    errs = [r["error"] for r in recs if r["error"]]
    if recs[0]["bad"] is not None:  # GUPS: at most 1% of the table wrong (HPCC's rule)
        bad, n = sum(r["bad"] for r in recs), recs[0]["size"]
        if bad > 0.01 * n:
            errs.append(f"gups: {bad} of {n} entries wrong after undoing (at most 1%)")
    if errs:
        raise BenchError(f"{kernel} ({split}, {mode} waits) computed a wrong answer: "
                         f"{errs[0]}")


def job_figures(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's figures for one kernel: the slowest thread's seconds (median of rounds),
    and the GIL's and drain lock's shares of the threads' time (median of rounds; None
    without schedstat)."""
    rounds = len(recs[0]["wall"])
    secs = median([max(r["wall"][i] for r in recs) for i in range(rounds)])
    gil, drain = [], []
    for i in range(rounds):
        wall = sum(r["wall"][i] for r in recs)
        by_pid: dict[int, float] = {}
        for r in recs:  # the process's drain waits, seen alike by each of its threads
            by_pid[r["pid"]] = max(by_pid.get(r["pid"], 0.0), r["drain"][i])
        dw = sum(by_pid.values())
        drain.append(dw / wall)
        if any(r["cpu"][i] is None for r in recs):
            continue
        off = sum(max(0.0, r["wall"][i] - r["cpu"][i] - r["delay"][i]) for r in recs)
        gil.append(max(0.0, off - dw) / wall)
    return {"seconds": secs, "ops": recs[0]["ops"], "gil": median(gil) if gil else None,
            "drain": median(drain)}


def lock_shares(spin: list[dict[str, Any]] | None) -> tuple[float | None, float | None]:
    """The GIL's and the drain lock's shares over the spin-wait runs' figures (medians
    over repetitions; None when not measured, the GIL's also without schedstat)."""
    if not spin:
        return None, None
    gil = None if any(x["gil"] is None for x in spin) else median([x["gil"] for x in spin])
    return gil, median([x["drain"] for x in spin])


def _report(opts: Any, chosen: list, plan: dict[str, Any],
            per: dict[tuple[str, str, str], list[Any]]) -> dict[str, Any]:
    ref = max(chosen, key=lambda s: s.threads)
    results, rows = [], []
    norm: dict[str, list[float]] = {sp.label: [] for sp in chosen}
    for k in opts.kernels:
        base = median([x["seconds"] for x in per[(ref.label, "auto", k)]])
        for sp in chosen:
            runs = per[(sp.label, "auto", k)]
            secs = median([x["seconds"] for x in runs])
            ops = runs[0]["ops"]
            spin = per.get((sp.label, "spin", k))
            gil, drain = lock_shares(spin)
            ratio = secs / base
            norm[sp.label].append(ratio)
            results.append({"kernel": k, "split": sp.label, "threads": sp.threads,
                            "procs": sp.procs, "seconds": secs, "ops": ops,
                            "us_per_op": secs / max(ops, 1) * 1e6, "vs_ref": ratio,
                            "gil_share": gil, "drain_share": drain,
                            "reps": {"auto": runs, "spin": spin}})
            rows.append([k, sp.label, f"{secs * 1e3:.2f}", f"{secs / max(ops, 1) * 1e6:.1f}",
                         f"{ratio:.2f}", "-" if gil is None else f"{100 * gil:.0f}%",
                         "-" if drain is None else f"{100 * drain:.0f}%"])
    serial = per.get((SERIAL, "auto", "compute"))
    if serial:
        secs = median([x["seconds"] for x in serial])
        ops = serial[0]["ops"]
        results.append({"kernel": "compute", "split": SERIAL, "threads": 1, "procs": 1,
                        "seconds": secs, "ops": ops, "us_per_op": secs / max(ops, 1) * 1e6,
                        "vs_ref": None, "gil_share": None, "drain_share": None,
                        "reps": {"auto": serial, "spin": None}})
        rows.append(["compute", f"{SERIAL} (all {ops} elements)", f"{secs * 1e3:.2f}",
                     f"{secs / max(ops, 1) * 1e6:.1f}", "-", "-", "-"])
        for r in results:
            if r["kernel"] == "compute" and r["split"] != SERIAL:
                r["vs_serial"] = r["seconds"] / secs
    notes = [f"{opts.ranks} ranks on {opts.nodes} nodes ({opts.ranks // opts.nodes} a node); "
             f"{opts.reps} repetitions x {opts.samples} rounds; ms: the slowest rank-thread's "
             f"time per round; µs per op: per {', '.join(f'{k}: {UNITS[k]}' for k in opts.kernels)}"
             f" (of one thread's round). vs {ref.label}: the split's time over the all-threads "
             "split's from the same run (the paper's Fig. 6; below 1 is faster).",
             "GIL and drain lock: shares of the rank-threads' time spent waiting for the "
             "interpreter lock and for amnet's drain lock, measured in a spin-wait run of the "
             "same split (schedstat off-CPU time less the measured drain-lock waits); "
             "1T splits share neither, so theirs is the method's zero."]
    if not opts.gil:
        notes[-1] = "GIL and drain lock: not measured (--no-gil)."
    if serial:
        per_node = opts.ranks // opts.nodes
        notes.append(
            f"compute: pure-Python work between communication phases; {SERIAL}: one rank "
            f"doing the elements of a node's {per_node} ranks alone, in the same run. Time "
            "over it: " + ", ".join(f"{r['split']} {r['vs_serial']:.2f}x" for r in results
                                    if "vs_serial" in r)
            + f" (ranks that compute in parallel: 1/{per_node} at best; with the "
            "interpreter lock on, rank-threads of a process cannot go below 1).")
    if opts.ranks > cpu_count():
        notes.append(f"oversubscribed: {opts.ranks} rank-threads on {cpu_count()} cores: the "
                     "main runs wait by blocking; the spin-wait runs that measure the locks "
                     "also lose time waiting for a core, which is counted as neither lock.")
    fig = {"file": "apps_fig6.png", "kind": "bar",
           "title": f"Time relative to {ref.label}, {opts.ranks} ranks on {opts.nodes} nodes "
                    "(hybrid paper Fig. 6)",
           "xlabel": "kernel", "ylabel": f"time / {ref.label}'s time", "better": "lower",
           "caption": [split_caption([sp.label for sp in chosen])],
           "categories": list(opts.kernels),
           "series": [{"label": sp.label, "y": norm[sp.label]} for sp in chosen]}
    return {"suite": "apps",
            "config": {"ranks": opts.ranks, "nodes": opts.nodes,
                       "splits": [s.label for s in chosen], "kernels": opts.kernels,
                       "reps": opts.reps, "samples": opts.samples, "gil": opts.gil,
                       "quick": opts.quick, "params": plan["params"],
                       "reference": ref.label},
            "results": results,
            "table": {"columns": ["kernel", "split", "ms", "µs per op", f"vs {ref.label}",
                                  "GIL", "drain lock"], "rows": rows},
            "notes": notes,
            "figures": [fig]}
