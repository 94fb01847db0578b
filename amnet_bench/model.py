"""Suite ``model``: MuPC's performance model for UPC ("A performance model for Unified Parallel
C", Z. Zhang, ch. 6-7) applied to upc_rt, predicted against measured in the same job.

For every ``--topology`` (``node``: ``--threads`` processes on one node; ``2nodes``: half on
each of 2) and ``--cache`` setting, one job per repetition (:mod:`amnet_bench._modeljob`)
runs ``--samples`` rounds: in each, histogram, matrix multiply and Sobel run once, timed,
and on private arrays (their computation), between two characterizations of the platform
(the baseline, vector, coalesce, local and private access costs, read and write, a
read-modify-write, with the cache on its miss, hit and write-back costs, and a barrier's),
whose mean prices the round. The prediction for a thread and round is

    T = T_comp + sum over partitions j of N_j x (c(pattern_j, op_j) - c(private, op_j))
        + wait + barriers x c(barrier)

(Equation 6.1 with costs per access; ``T_comp`` already made every access privately;
``wait``, :func:`attend`, the time requests to other nodes wait for a busy owner's next
poll) from that round's figures, and δ = (predicted - measured) / measured for the slowest
thread (Equation 7.1); the suite reports the median δ over rounds and repetitions and its
interquartile range. Target: |δ| <= 15% (the thesis's bound) for the three kernels, within
one node and across 2 nodes, cache off and on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _options as options
from ._modeljob import KERNELS, model_job
from ._registry import BenchError, suite
from ._report import Progress
from ._stats import median, percentiles
from ._targets import MODEL_DELTA
from ._twonode import run_job

TOPOLOGIES = ("node", "2nodes")
DEFAULTS = {"histogram": {"size": 4096, "updates": 1500}, "matmul": {"n": 16},
            "sobel": {"rows": 12}}
QUICK = {"histogram": {"size": 1024, "updates": 400}, "matmul": {"n": 8},
         "sobel": {"rows": 6}}
PATTERNS = ("baseline", "vector", "coalesce", "local", "private")


@suite("model")
def model(args: Sequence[str] | None = None, *, threads: int = 2, topologies: Any = TOPOLOGIES,
          caches: Any = "off,on", kernels: Any = tuple(KERNELS), reps: int = 3,
          samples: int = 8, min_time: float = 0.05, bind_to: str = "core",
          conduit: Any = "zmq", progress: bool = True) -> dict[str, Any]:
    """MuPC's performance model: predicted vs measured time of three kernels (ch. 6-7)."""
    p = options.Parser(
        "model", "MuPC's performance model on upc_rt: the platform's access costs by "
                 "pattern, three kernels' reference partitions, predicted against "
                 "measured run time (δ), within a node and across 2 nodes, cache off "
                 "and on.")
    options.ranks(p, threads, "UPC threads, a process each", 2, 16, threads=True)
    options.topologies(p, topologies)
    options.choices(p, "--cache", caches, ("off", "on"), "cache settings",
                    "upc_rt's remote-reference cache", dest="caches", metavar="C,C")
    options.choices(p, "--kernels", kernels, KERNELS, "kernels", metavar="K,K")
    p.add_argument("--bind-to", choices=("core", "none"), default=bind_to,
                   help="where the rank processes run: core, each bound to a core of its "
                        "own, as an HPC job binds its ranks; none, where the scheduler "
                        "puts them (default: %(default)s)")
    options.conduits(p, conduit, "the conduits between the nodes, each its own 2nodes rows")
    options.reps(p, reps)
    options.count(p, "--samples", samples, "rounds in each job, each every kernel run once "
                  "between two measurements of the platform")
    options.min_time(p, min_time, "seconds each access pattern is timed for at least, each "
                     "round")
    opts = options.parse(p, args, {"reps": 1, "samples": 3, "min_time": 0.02},
                         "smaller kernels, 1 repetition of 3 rounds, patterns timed 20 ms",
                         fixed={"--splits": ("1", "MuPC's threads are processes"),
                                "--sizes": (None, "its kernels have no message size "
                                                  "(--quick runs smaller kernels)")})
    if "2nodes" in opts.topologies and opts.threads % 2:
        p.error(f"--threads must be in 2..16 (even with 2nodes), got {opts.threads}")
    params = QUICK if opts.quick else DEFAULTS
    setups = [(t, c) for t in opts.topologies for c in (opts.conduit if t == "2nodes"
                                                          else opts.conduit[:1])]
    bar = Progress("model", opts.reps * len(setups) * len(opts.caches), progress)
    runs: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for rep in range(opts.reps):
        for topo, conduit in setups:
            label = topo if topo == "node" or len(opts.conduit) == 1 else f"{topo} {conduit}"
            for cache in opts.caches:
                plan = {"platform": {"cache": cache == "on", "block": 8192, "batch": 64,
                                     "min_s": opts.min_time, "least": 2 if opts.quick else 3,
                                     "patterns": list(PATTERNS), "seed": rep},
                        "barriers": 50, "kernels": opts.kernels, "samples": opts.samples,
                        "params": {k: params[k] for k in opts.kernels}}
                res = run_job(model_job, plan, n=opts.threads, bind_to=opts.bind_to,
                              conduit=conduit, **({"nodes": 2} if topo == "2nodes" else {}))
                for r in res:
                    for k, ok in r["ok"].items():
                        if not ok:
                            raise BenchError(f"{k} ({label}, cache {cache}) computed a wrong "
                                             f"answer on thread {r['thread']}")
                runs.setdefault((label, cache), []).append(res)
                bar.step(f"rep {rep + 1}, {label}, cache {cache}")
    bar.close()
    return _report(opts, params, runs)


def predict(rnd: dict[str, Any], parts: list[dict[str, Any]], kernel: str) -> dict[str, float]:
    """One thread's prediction for ``kernel`` in one round ``rnd`` of its record, from that
    round's platform figures and the kernel's partitions ``parts``: ``comp`` (its private
    run), ``comm`` (the partitions' extra cost over private accesses), ``sync`` (its
    barriers), their sum ``total``; and for :func:`attend`, ``requests`` (accesses that wait
    for their owner to answer), ``waiting`` (the seconds of ``comm`` spent so, polling) and
    ``accesses`` (shared element accesses).

    With the remote-reference cache on and threads on other nodes (``rnd["cache"]``),
    remote accesses are priced as the thesis's §7.2 does: by the kernel's own cache
    statistics, hits at the cost of a hit and misses at the miss penalty, plus the lines
    written back; remote accesses the cache did not see (threads of this node, reached
    directly) at the local cost."""
    kr, plat, cc = rnd["kernels"][kernel], rnd["platform"], rnd.get("cache")

    def cost(pattern: str, op: str) -> float:
        # what an access costs beyond a private one; a shared access is never cheaper, so a
        # negative difference (the two measured within noise of each other) counts as none
        return max(0.0, plat[f"{pattern}/{op}"]["wall"] - plat[f"private/{op}"]["wall"])

    comm = waiting = requests = accesses = 0.0
    remote = {"read": 0.0, "write": 0.0}
    for part in parts:
        op = part["op"]
        for pattern, n in part["counts"].items():
            accesses += 2 * n if op == "update" else n
            if cc is None or pattern == "local":
                comm += n * cost(pattern, op)
                if pattern != "local" and op != "write":  # a get: waits for the owner
                    requests += n
                    waiting += n * cost(pattern, op)
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
        requests = total * far * (1 - hit)  # the misses
        waiting = requests * cc["miss"]
    comp = kr["comp"]
    sync = kr["barriers"] * rnd["barrier_s"]
    return {"comp": comp, "comm": comm, "sync": sync, "total": comp + comm + sync,
            "requests": requests, "waiting": waiting, "accesses": accesses, "attend": 0.0}


def attend(preds: list[dict[str, float]], nodes: list[int], every: int) -> None:
    """Add to each thread's prediction (in place) the time its requests to other nodes
    wait for their owners to look: an owner serves a request at once while it waits itself
    (it polls), else at its next poll, every ``every`` element accesses (``upc_poll_every``),
    so a request waits (1 - a) x P / 2 on average, with P the owner's time between polls
    and a the share of its time it spends waiting. MuPC's thesis has no such term: its
    runtime answers from a communication thread of its own (§4.4); upc_rt's threads poll."""
    if not every:
        return
    idle = []
    for p in preds:
        busy = p["comp"] + p["comm"]
        period = every * busy / p["accesses"] if p["accesses"] else 0.0
        share = min(1.0, p["waiting"] / busy) if busy else 1.0
        idle.append((1 - share) * period / 2)
    for i, p in enumerate(preds):
        far = [idle[j] for j in range(len(preds)) if nodes[j] != nodes[i]]
        if far and p["requests"]:
            extra = p["requests"] * sum(far) / len(far)
            p["comm"] += extra
            p["total"] += extra
            p["attend"] = extra


def pairs(res: list[dict[str, Any]], kernel: str) -> list[tuple[float, dict[str, float]]]:
    """One job's rounds for ``kernel``: (the slowest thread's measured seconds, the slowest
    thread's prediction) each."""
    out = []
    nodes = [r["node"] for r in res]
    for i in range(len(res[0]["rounds"])):
        meas = max(r["rounds"][i]["kernels"][kernel]["actual"] for r in res)
        ps = [predict(r["rounds"][i], r["partitions"][kernel], kernel) for r in res]
        attend(ps, nodes, res[0]["poll_every"])
        out.append((meas, max(ps, key=lambda x: x["total"])))
    return out


def _quartiles(xs: list[float]) -> tuple[float, float]:
    q1, q3 = percentiles(xs, [25, 75])
    return q1, q3


def _misses(kernel: str, res: list[dict[str, Any]]) -> str:
    """``kernel: misses of cached`` accesses a run, medians over threads and rounds."""
    st = [rd["kernels"][kernel]["cache_stats"] for r in res for rd in r["rounds"]]
    seen = median([x["hits"] + x["victim_hits"] + x["misses"] for x in st])
    return f"{kernel}: {median([x['misses'] for x in st]):.0f} of {seen:.0f}"


def _report(opts: Any, params: dict[str, Any],
            runs: dict[tuple[str, str], list[list[dict[str, Any]]]]) -> dict[str, Any]:
    results, rows, prow, crow = [], [], [], []
    worst = 0.0
    spreads = []
    for (topo, cache), reps in runs.items():
        for k in opts.kernels:
            got = [p for res in reps for p in pairs(res, k)]
            meas = [m for m, _ in got]
            pred = [p["total"] for _, p in got]
            deltas = [(p - m) / m for m, p in zip(meas, pred, strict=True)]
            delta = median(deltas)
            lo, hi = _quartiles(deltas)
            worst = max(worst, abs(delta))
            m, pr = median(meas), median(pred)
            comp = median([p["comp"] for _, p in got])
            results.append({"topology": topo, "cache": cache, "kernel": k,
                            "measured_s": m, "predicted_s": pr, "delta": delta,
                            "delta_iqr": [lo, hi], "comp_s": comp,
                            "comm_s": median([p["comm"] for _, p in got]),
                            "sync_s": median([p["sync"] for _, p in got]),
                            "rounds": {"measured": meas, "predicted": pred, "delta": deltas},
                            "partitions": reps[-1][0]["partitions"][k]})
            rows.append([topo, cache, k, f"{m * 1e3:.1f}", f"{pr * 1e3:.1f}",
                         f"{100 * delta:+.1f}%", f"{100 * lo:+.0f}..{100 * hi:+.0f}%",
                         f"{100 * comp / pr:.0f}%",
                         "met" if abs(delta) <= MODEL_DELTA else "missed"])
        rds = [rd for res in reps for r in res for rd in r["rounds"]]
        plat = [rd["platform"] for rd in rds]
        prow.append([topo, cache] + [
            f"{median([x[f'{pt}/{op}']['wall'] for x in plat]) * 1e6:.2f}"
            for pt in PATTERNS for op in ("read", "write")] +
            [f"{median([x[f'{pt}/update']['wall'] for x in plat]) * 1e6:.2f}"
             for pt in ("baseline", "local", "private")] +
            [f"{median([rd['barrier_s'] for rd in rds]) * 1e6:.0f}"])
        base = [x["baseline/read"]["wall"] for x in plat]
        q1, q3 = _quartiles(base)
        spreads.append(f"{topo}, cache {cache}: {q1 * 1e6:.1f}..{q3 * 1e6:.1f} µs "
                       f"(±{50 * (q3 - q1) / median(base):.0f}%)")
        cc = [rd["cache"] for rd in rds if rd.get("cache")]
        if cc:
            crow.append([topo] + [f"{median([c[f] for c in cc]) * 1e6:.2f}"
                                  for f in ("miss", "hit_read", "hit_write", "writeback")] +
                        [" / ".join(_misses(k, [r for res in reps for r in res])
                                    for k in opts.kernels)])
    bound = ("each process bound to a core (--bind-to core)" if opts.bind_to == "core"
             else "processes placed by the scheduler (--bind-to none)")
    notes = [f"{opts.threads} threads, a process each, {bound}; {opts.reps} repetitions x "
             f"{opts.samples} rounds, each every kernel run once between two measurements of "
             "the platform; ms: the slowest thread's time (a barrier after the kernel "
             "included), median over rounds; predicted: the slowest thread's T_comp + the "
             "partitions' extra cost over private accesses + the wait of its requests to "
             "other nodes for a busy owner's next poll + a barrier, from its own platform "
             "figures of the round (the mean of the two measurements); δ = (predicted - "
             "measured) / measured of each round, median and interquartile range over "
             "rounds; comp: T_comp's share of the prediction.",
             f"|δ| at most {100 * worst:.1f}% (target <= {100 * MODEL_DELTA:.0f}%: "
             f"{'met' if worst <= MODEL_DELTA else 'missed'})",
             "The platform's own repeatability, the floor under δ: a baseline read (the "
             "interquartile range over rounds and threads) " + "; ".join(spreads) + ".",
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
                        "δ IQR", "comp", "target"],
            "rows": rows, "notes": notes}
    return {"suite": "model",
            "config": {"threads": opts.threads, "topologies": opts.topologies,
                       "bind_to": opts.bind_to, "conduit": opts.conduit,
                       "caches": opts.caches, "kernels": opts.kernels, "reps": opts.reps,
                       "samples": opts.samples, "min_time_s": opts.min_time,
                       "quick": opts.quick, "params": {k: params[k] for k in opts.kernels}},
            "results": results,
            "worst_delta": worst,
            "tables": [main, platform] + ([cache_table] if crow else []),
            "table": {"columns": main["columns"], "rows": rows},
            "notes": notes}
