"""Suite ``model``: MuPC's performance model for UPC ("A performance model for Unified Parallel
C", Z. Zhang, ch. 6-7) applied to upc_rt, predicted against measured in the same job.

For every ``--topology`` (``node``: ``--threads`` processes on one node; ``2nodes``: half on
each of 2) and ``--cache`` setting, one job per repetition (:mod:`amnet.bench._modeljob`)
characterizes the platform (the baseline, vector, coalesce, local and private access costs,
read and write, and a barrier's), then runs histogram, matrix multiply and Sobel, each with
its reference partitions counted and its computation timed on private arrays. The
prediction for a thread is

    T = T_comp + sum over partitions j of N_j x (c(pattern_j, op_j) - c(private, op_j))
        + barriers x c(barrier)

(Equation 6.1 with costs per access; ``T_comp`` already made every access privately), and
δ = (predicted - measured) / measured for the slowest thread (Equation 7.1), medians over
rounds and repetitions. Target: |δ| <= 15% (the thesis's bound) for the three kernels,
within one node and across 2 nodes, cache off and on.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

from . import BenchError, suite
from ._modeljob import KERNELS, model_job
from ._report import Progress, choice_list, median, quick_parse
from ._twonode import run_job

TARGET = 0.15
TOPOLOGIES = ("node", "2nodes")
DEFAULTS = {"histogram": {"size": 4096, "updates": 1500}, "matmul": {"n": 16},
            "sobel": {"rows": 12}}
QUICK = {"histogram": {"size": 1024, "updates": 400}, "matmul": {"n": 8},
         "sobel": {"rows": 6}}
PATTERNS = ("baseline", "vector", "coalesce", "local", "private")


@suite("model")
def model(args: Sequence[str] | None = None, *, threads: int = 2, topologies: Any = TOPOLOGIES,
          caches: Any = "off,on", kernels: Any = tuple(KERNELS), reps: int = 3,
          samples: int = 3, min_time: float = 0.1, progress: bool = True) -> dict[str, Any]:
    """MuPC's performance model: predicted vs measured time of three kernels (ch. 6-7)."""
    p = argparse.ArgumentParser(
        prog="amnet-bench model",
        description="MuPC's performance model on upc_rt: the platform's access costs by "
                    "pattern, three kernels' reference partitions, predicted against "
                    "measured run time (δ), within a node and across 2 nodes, cache off "
                    "and on.")
    p.add_argument("--threads", type=int, default=threads, metavar="T",
                   help="UPC threads, a process each (default: %(default)s)")
    p.add_argument("--topology",
                   type=functools.partial(choice_list, allowed=TOPOLOGIES, what="topologies"),
                   default=choice_list(topologies, TOPOLOGIES, "topologies"),
                   dest="topologies", metavar="X,X", help="node and/or 2nodes (default: both)")
    p.add_argument("--cache", type=functools.partial(choice_list, allowed=("off", "on"),
                                                     what="cache settings"),
                   default=choice_list(caches, ("off", "on"), "cache settings"),
                   dest="caches", metavar="C,C",
                   help="upc_rt's remote-reference cache (default: off,on)")
    p.add_argument("--kernels",
                   type=functools.partial(choice_list, allowed=KERNELS, what="kernels"),
                   default=choice_list(kernels, KERNELS, "kernels"), metavar="K,K",
                   help=f"(default: {','.join(KERNELS)})")
    p.add_argument("--reps", type=int, default=reps, metavar="R",
                   help="repetitions, fresh jobs each (default: %(default)s)")
    p.add_argument("--samples", type=int, default=samples, metavar="N",
                   help="timed runs of each kernel in each job (default: %(default)s)")
    p.add_argument("--min-time", type=float, default=min_time, metavar="S",
                   help="seconds each access pattern is timed for at least (default: "
                        "%(default)s)")
    opts = quick_parse(p, args, {"reps": 1, "samples": 2, "min_time": 0.03},
                       "smaller kernels, 1 repetition, 2 runs each, patterns timed 30 ms")
    for name in ("reps", "samples"):
        if getattr(opts, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(opts, name)}")
    if not 2 <= opts.threads <= 16 or ("2nodes" in opts.topologies and opts.threads % 2):
        p.error(f"--threads must be in 2..16 (even with 2nodes), got {opts.threads}")
    if not 0 < opts.min_time <= 10:
        p.error(f"--min-time must be in (0, 10] seconds, got {opts.min_time}")
    params = QUICK if opts.quick else DEFAULTS
    bar = Progress("model", opts.reps * len(opts.topologies) * len(opts.caches), progress)
    runs: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for rep in range(opts.reps):
        for topo in opts.topologies:
            for cache in opts.caches:
                plan = {"platform": {"cache": cache == "on", "block": 8192, "batch": 64,
                                     "min_s": opts.min_time, "patterns": list(PATTERNS),
                                     "seed": rep},
                        "barriers": 50, "kernels": opts.kernels, "samples": opts.samples,
                        "params": {k: params[k] for k in opts.kernels}}
                res = run_job(model_job, plan, n=opts.threads,
                              **({"nodes": 2} if topo == "2nodes" else {}))
                for r in res:
                    for k, kr in r["kernels"].items():
                        if not kr["ok"]:
                            raise BenchError(f"{k} ({topo}, cache {cache}) computed a wrong "
                                             f"answer on thread {r['thread']}")
                runs.setdefault((topo, cache), []).append(res)
                bar.step(f"rep {rep + 1}, {topo}, cache {cache}")
    bar.close()
    return _report(opts, params, runs)


def predict(thread: dict[str, Any], kernel: str) -> dict[str, float]:
    """One thread's prediction for ``kernel`` from its own platform figures: ``comp`` (its
    private run, median), ``comm`` (the partitions' extra cost over private accesses),
    ``sync`` (its barriers) and their sum ``total``.

    With the remote-reference cache on and threads on other nodes (``thread["cache"]``),
    remote accesses are priced as the thesis's §7.2 does: by the kernel's own cache
    statistics, hits at the cost of a hit and misses at the miss penalty, plus the lines
    written back; remote accesses the cache did not see (threads of this node, reached
    directly) at the local cost."""
    kr, plat, cc = thread["kernels"][kernel], thread["platform"], thread.get("cache")

    def cost(pattern: str, op: str) -> float:
        return plat[f"{pattern}/{op}"]["wall"] - plat[f"private/{op}"]["wall"]

    comp = median(kr["comp"])
    comm = 0.0
    remote = {"read": 0.0, "write": 0.0}
    for part in kr["partitions"]:
        op = part["op"]
        for pattern, n in part["counts"].items():
            if cc is None or pattern == "local":
                comm += n * cost(pattern, op)
            else:
                for o in (("read", "write") if op == "update" else (op,)):
                    remote[o] += n
    if cc is not None and remote["read"] + remote["write"]:
        st = kr["cache_stats"]
        seen = st["hits"] + st["victim_hits"] + st["misses"]
        total = remote["read"] + remote["write"]
        far = min(1.0, seen / total)  # the share of remote accesses the cache saw
        hit = (st["hits"] + st["victim_hits"]) / seen if seen else 0.0
        for op in ("read", "write"):
            floor = plat[f"private/{op}"]["wall"]
            n = remote[op]
            comm += n * far * (hit * (cc[f"hit_{op}"] - floor) + (1 - hit) * (cc["miss"] - floor))
            comm += n * (1 - far) * cost("local", op)
        comm += st["writebacks"] * cc["writeback"]
    sync = kr["barriers"] * thread["barrier_s"]
    return {"comp": comp, "comm": comm, "sync": sync, "total": comp + comm + sync}


def _misses(kernel: str, res: list[dict[str, Any]]) -> str:
    """``kernel: misses of cached`` accesses a run, medians over threads."""
    st = [r["kernels"][kernel]["cache_stats"] for r in res]
    seen = median([x["hits"] + x["victim_hits"] + x["misses"] for x in st])
    return f"{kernel}: {median([x['misses'] for x in st]):.0f} of {seen:.0f}"


def _report(opts: Any, params: dict[str, Any],
            runs: dict[tuple[str, str], list[list[dict[str, Any]]]]) -> dict[str, Any]:
    results, rows, prow, crow = [], [], [], []
    worst = 0.0
    for (topo, cache), reps in runs.items():
        for k in opts.kernels:
            meas, pred, parts = [], [], []
            for res in reps:  # one job: the slowest thread measured, the slowest predicted
                meas.append(max(median(r["kernels"][k]["actual"]) for r in res))
                ps = [predict(r, k) for r in res]
                slow = max(ps, key=lambda x: x["total"])
                pred.append(slow["total"])
                parts.append(slow)
            m, pr = median(meas), median(pred)
            delta = (pr - m) / m
            worst = max(worst, abs(delta))
            comp = median([x["comp"] for x in parts])
            results.append({"topology": topo, "cache": cache, "kernel": k,
                            "measured_s": m, "predicted_s": pr, "delta": delta,
                            "comp_s": comp,
                            "comm_s": median([x["comm"] for x in parts]),
                            "sync_s": median([x["sync"] for x in parts]),
                            "reps": {"measured": meas, "predicted": pred},
                            "partitions": reps[-1][0]["kernels"][k]["partitions"]})
            rows.append([topo, cache, k, f"{m * 1e3:.1f}", f"{pr * 1e3:.1f}",
                         f"{100 * delta:+.1f}%", f"{100 * comp / pr:.0f}%",
                         "met" if abs(delta) <= TARGET else "missed"])
        plat = [r["platform"] for r in reps[-1]]
        prow.append([topo, cache] + [
            f"{median([x[f'{pt}/{op}']['wall'] for x in plat]) * 1e6:.2f}"
            for pt in PATTERNS for op in ("read", "write")] +
            [f"{median([x[f'{pt}/update']['wall'] for x in plat]) * 1e6:.2f}"
             for pt in ("baseline", "local", "private")] +
            [f"{median([r['barrier_s'] for r in reps[-1]]) * 1e6:.0f}"])
        cc = [r["cache"] for r in reps[-1] if r.get("cache")]
        if cc:
            crow.append([topo] + [f"{median([c[f] for c in cc]) * 1e6:.2f}"
                                  for f in ("miss", "hit_read", "hit_write", "writeback")] +
                        [" / ".join(_misses(k, reps[-1]) for k in opts.kernels)])
    notes = [f"{opts.threads} threads, a process each; {opts.reps} repetitions x "
             f"{opts.samples} runs; ms: the slowest thread's time (a barrier after the "
             "kernel included); predicted: the slowest thread's T_comp + the partitions' "
             "extra cost over private accesses + a barrier, from its own platform figures of "
             "the same job; δ = (predicted - measured) / measured; comp: T_comp's share of "
             "the prediction.",
             f"|δ| at most {100 * worst:.1f}% (target <= {100 * TARGET:.0f}%: "
             f"{'met' if worst <= TARGET else 'missed'})",
             "Sizes: " + "; ".join(f"{k} " + ", ".join(f"{a}={b}" for a, b in
                                                      params[k].items())
                                   for k in opts.kernels) + "."]
    platform = {"section": "platform", "title": "The platform: µs per access by pattern (the "
                "MuPC thesis's §6.4, median over threads; r read, w write, update a "
                "read-modify-write of a cyclic table), and a barrier",
                "columns": ["topology", "cache"] + [f"{pt} {op[0]}" for pt in PATTERNS
                                                    for op in ("read", "write")] +
                           [f"{pt} update" for pt in ("baseline", "local", "private")] +
                           ["barrier µs"],
                "rows": prow, "notes": []}
    cache_table = {"section": "cache", "title": "The remote-reference cache across nodes "
                   "(§7.2): µs per miss, per hit, per line written back; each kernel's misses "
                   "of its cached accesses a run (median over threads)",
                   "columns": ["topology", "miss", "hit read", "hit write", "writeback",
                               "misses / cached accesses"],
                   "rows": crow,
                   "notes": ["With the cache on, remote accesses to other nodes are priced "
                             "from the kernel's own cache statistics: hits at the hit cost, "
                             "misses at the miss penalty, plus the lines written back."]}
    main = {"section": "model", "title": "Predicted against measured (Tables 7.1-7.3)",
            "columns": ["topology", "cache", "kernel", "measured ms", "predicted ms", "δ",
                        "comp", "target"],
            "rows": rows, "notes": notes}
    return {"suite": "model",
            "config": {"threads": opts.threads, "topologies": opts.topologies,
                       "caches": opts.caches, "kernels": opts.kernels, "reps": opts.reps,
                       "samples": opts.samples, "min_time_s": opts.min_time,
                       "quick": opts.quick, "params": {k: params[k] for k in opts.kernels}},
            "results": results,
            "worst_delta": worst,
            "tables": [main, platform] + ([cache_table] if crow else []),
            "table": {"columns": main["columns"], "rows": rows},
            "notes": notes}
