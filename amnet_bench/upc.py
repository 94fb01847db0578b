"""Suite ``upc``: upc_rt's access costs, the MuPC thesis's microbenchmarks and its peers.

Two sections, each in fresh jobs per repetition (the ranks' side is
:mod:`amnet_bench._upcjob`):

- **peers** (the headline): upc_rt beside what a user would write instead, each amnet pair
  timed interleaved in one job, and mpi4py in its own MPICH job of the same repetition. A
  remote element read ``X[i]`` within a node (2 processes, PSHM) beside an mpi4py RMA 8-byte
  Get in a window (``Lock``/``Get``/``Unlock``, passive target, 2 processes on this node);
  ``X[i]`` from another node beside amnet's own ``ep.get`` of 8 bytes; a local-affinity
  ``X[i]`` beside a numpy scalar read ``a[i]`` (the interpreter's floor); a 1 MiB slice
  from another node beside ``ep.get`` of the same bytes (contiguous on one thread) and
  beside the two matching
  ``ep.vis.get_strided_nb`` calls (spread over two threads); the naive matrix multiply of
  the thesis's Table 5.1 across 2 nodes with the remote-reference cache off and on
  (conduit messages sent and seconds).
- **patterns**: the thesis's Tables 6.1-6.4, the baseline, vector, coalesce and local
  patterns (plus ``private``, a numpy array, beside local, and ``slice``, the vector pattern
  as one bulk slice), read and write, µs per double word, at ``--threads`` UPC threads in
  one node (processes, PSHM) and across 2 nodes, cache off and on. A figure is the mean over
  the threads of each thread's median batch time per access, then the median over
  repetitions.

A ratio is upc_rt's time over its peer's (lower is better), except for the slices (upc_rt's
MB/s over the peer's) and the cache (cache off over cache on, messages and seconds), where
higher is better; each row names its target.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _options as options
from ._node import mpi_missing, verdict
from ._registry import suite
from ._report import Progress
from ._stats import median
from ._targets import UPC as UPC_TARGETS
from ._twonode import cpu_count, run_job
from ._upcjob import PATTERNS, matmul_job, net_peers_job, node_peers_job, patterns_job

TOPOLOGIES = {"node": {}, "2nodes": {"nodes": 2}}
TOPO_LABEL = {"node": "1 node", "2nodes": "2 nodes"}
SLICE_BYTES = 1 << 20
TABLE_PATTERNS = ("baseline", "vector", "coalesce", "local", "slice")
MUPC_TABLE = {"baseline": "6.1", "vector": "6.2", "coalesce": "6.3", "local": "6.4"}


def _parser(d: dict[str, Any]) -> options.Parser:
    """The options, with the suite's defaults ``d`` (its keywords by name)."""
    p = options.Parser(
        "upc", "upc_rt's element, slice and cache costs beside mpi4py RMA, ep.get, ep.vis "
               "and numpy (peers section), and the MuPC thesis's microbenchmark tables "
               "6.1-6.4 (patterns section), µs per double word.")
    options.reps(p, d["reps"])
    options.toggle(p, "--peers", True, "run the peers section")
    options.toggle(p, "--patterns", True, "run the patterns section")
    options.ranks(p, d["threads"], "patterns: UPC threads per job", many=True, threads=True)
    options.topologies(p, d["topologies"], "patterns: node (one node, a process per thread) "
                       "and/or 2nodes")
    options.choices(p, "--cache", d["caches"], ("off", "on"), "cache settings",
                    "patterns: the remote-reference cache", dest="caches", metavar="C,C")
    options.count(p, "--block", d["block"], "patterns: float64 elements per thread")
    options.count(p, "--batch", d["batch"], "patterns: accesses per timed batch, and the "
                  "vector length", least=16)
    options.min_time(p, d["min_time"], "patterns: seconds of batches per pattern and "
                     "operation at least")
    options.count(p, "--samples", d["samples"], "peers: interleaved samples per figure per "
                  "repetition")
    options.count(p, "--matmul-n", d["matmul_n"], "peers: the naive matrix multiply's N (a "
                  "multiple of 4)", least=4, most=256)
    return p


@suite("upc")
def upc(args: Sequence[str] | None = None, *, reps: int = 3, threads: Any = "2,4,8",
        topologies: Any = "node,2nodes", caches: Any = "off,on", block: int = 1 << 17,
        batch: int = 256, min_time: float = 0.2, samples: int = 15, matmul_n: int = 32,
        progress: bool = True) -> dict[str, Any]:
    """upc_rt element/slice/cache costs beside peers; MuPC Tables 6.1-6.4."""
    parser = _parser(locals())
    opts = options.parse(parser, args, {
        "reps": 1, "threads": [2], "block": 8192, "batch": 64, "min_time": 0.02,
        "samples": 3, "matmul_n": 8}, "1 repetition, 2 threads, short patterns, an 8 x 8 "
        "matrix multiply", fixed={
            "--splits": ("1", "MuPC's threads are processes"),
            "--sizes": (None, "it times element accesses (--block and --batch size the "
                              "patterns)")})
    if 8 * opts.batch > opts.block:
        parser.error(f"--batch must be at most --block / 8 ({opts.block // 8}: "
                     f"the coalesce pattern spans up to 8 elements an access), got "
                     f"{opts.batch}")
    if opts.block * 8 > 256 << 20:
        parser.error(f"--block {opts.block} is {opts.block * 8} bytes a thread; at most 256 MiB")
    if opts.matmul_n % 4:
        parser.error(f"--matmul-n must be a multiple of 4 in 4..256, got {opts.matmul_n}")
    if not (opts.peers or opts.patterns):
        parser.error("nothing to run: both --no-peers and --no-patterns")

    configs = [(t, topo, c) for t in opts.threads for topo in opts.topologies
               for c in opts.caches]
    steps = opts.reps * ((4 if opts.peers else 0) + (len(configs) if opts.patterns else 0))
    bar = Progress("upc", steps, progress)
    peer_reps: list[dict[str, Any]] = []
    pat_reps: dict[tuple[int, str, str], list[dict[str, Any]]] = {c: [] for c in configs}
    for rep in range(opts.reps):
        if opts.peers:
            peer_reps.append(_peers_rep(opts, bar, rep))
        if opts.patterns:
            for t, topo, c in configs:
                plan = {"block": opts.block, "batch": opts.batch, "min_s": opts.min_time,
                        "cache": c == "on", "patterns": list(PATTERNS), "seed": rep}
                got = run_job(patterns_job, plan, n=t, **TOPOLOGIES[topo],
                           segment_size=_segment(opts.block * 8))
                pat_reps[(t, topo, c)].append(_thread_mean(got))
                bar.step(f"rep {rep + 1}, patterns, {t} threads, {topo}, cache {c}")
    bar.close()

    tables, results = [], []
    if opts.peers:
        t, r = _peers_table(opts, peer_reps)
        tables.append(t)
        results += r
    if opts.patterns:
        for pattern in TABLE_PATTERNS:
            t, r = _pattern_table(opts, pattern, configs, pat_reps)
            tables.append(t)
            results += r
    if opts.patterns and max(opts.threads) > cpu_count():
        tables[-1]["notes"].append(
            f"{cpu_count()} usable cores: jobs of more threads than that are oversubscribed "
            "(amnet's blocking waits); their wall-clock times include waiting for a core "
            "(results.json keeps each figure's CPU time beside it).")
    cfg = {"reps": opts.reps, "peers": opts.peers, "patterns": opts.patterns,
           "threads": opts.threads, "topologies": opts.topologies, "caches": opts.caches,
           "block": opts.block, "batch": opts.batch, "min_time_s": opts.min_time,
           "samples": opts.samples, "matmul_n": opts.matmul_n,
           "sections": [t["section"] for t in tables]}
    return {"suite": "upc", "config": cfg, "results": results, "tables": tables,
            "table": {"columns": tables[0]["columns"], "rows": tables[0]["rows"]},
            "notes": [n for t in tables for n in t["notes"]]}


def _segment(nbytes: int) -> int:
    """A segment holding ``nbytes`` of shared array a thread, the heap's own use, slack."""
    return max(16 << 20, 1 << (2 * nbytes + (4 << 20) - 1).bit_length())


def _thread_mean(per_thread: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's mean over the threads (wall and CPU seconds per access)."""
    out: dict[str, Any] = {}
    for key in per_thread[0]:
        if "/" in key:
            out[key] = {k: float(np.mean([f[key][k] for f in per_thread]))
                        for k in ("wall", "cpu")}
    out["cache"] = {k: sum(f["cache"][k] for f in per_thread)
                    for k in ("hits", "misses", "victim_hits", "writebacks")}
    return out


def _peers_rep(opts: argparse.Namespace, bar: Progress, rep: int) -> dict[str, Any]:
    """One repetition of the peers section: medians of each figure (seconds, counts)."""
    out: dict[str, Any] = {}
    node = run_job(node_peers_job, {"block": 4096, "per": 1, "accesses": 2000,
                                 "samples": opts.samples}, n=2)[0]
    out.update({f"node_{k}": median(v) for k, v in node.items()})
    bar.step(f"rep {rep + 1}, peers in a node")
    net = run_job(net_peers_job, {"block": 4096, "accesses": 50, "samples": opts.samples,
                               "slice_bytes": SLICE_BYTES, "per_slice": 3},
               n=4, nodes=2, segment_size=_segment(SLICE_BYTES))[0]
    out.update({f"net_{k}": median(v) for k, v in net.items()})
    bar.step(f"rep {rep + 1}, peers across 2 nodes")
    for c in ("off", "on"):
        got = run_job(matmul_job, {"n": opts.matmul_n, "cache": c == "on"}, n=4, nodes=2)
        out[f"matmul_{c}_s"] = max(f["seconds"] for f in got)
        out[f"matmul_{c}_sent"] = sum(f["sent"] for f in got)
        out[f"matmul_{c}_cache"] = {k: sum(f["cache"][k] for f in got)
                                    for k in ("hits", "misses")}
    bar.step(f"rep {rep + 1}, naive matmul, cache off and on")
    why = mpi_missing()
    if why is None:
        from ._mpipeer import run_mpi

        got = run_mpi({"rma_lat": {"sizes": [8], "warmup": 200, "iters": 2000, "batch": 100}})
        out["mpi_get_8"] = got["rma_get"]["8"]["median"]
        out["mpi_library"] = got["mpi_library"]
    else:
        out["mpi_missing"] = why
    bar.step(f"rep {rep + 1}, mpi4py RMA")
    return out


def _over(reps: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in reps if key in r]
    return median(vals) if vals else None


def _judge(name: str, ratio: float | None) -> str:
    cmp, bound = UPC_TARGETS[name]
    if ratio is None:
        return verdict(None)
    return verdict(ratio <= bound if cmp == "<=" else ratio >= bound)


def _peers_table(opts: argparse.Namespace,
                 reps: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    g = functools.partial(_over, reps)

    def us(s: float) -> str:
        return f"{s * 1e6:.3f} µs"

    mbs = SLICE_BYTES / 1e6
    n = opts.matmul_n
    # (figure, what, upc_rt's key, the peer, its key, format, ratio = peer / upc_rt)
    rows_spec = [
        ("x_remote_node", "remote element read X[i], 1 node (2 procs, PSHM)",
         "node_x_remote", "mpi4py RMA 8 B Get (Lock/Get/Unlock)", "mpi_get_8", us,
         False),
        ("x_remote_net", "remote element read X[i], from another node",
         "net_x_remote", "ep.get of 8 B", "net_ep_get", us, False),
        ("x_local", "local-affinity element read X[i]", "node_x_local",
         "numpy scalar read a[i]", "node_numpy", us, False),
        ("slice_contig", "1 MiB slice from another node, contiguous on one thread",
         "net_slice_contig", "ep.get of the same 1 MiB", "net_get_contig",
         lambda s: f"{mbs / s:.0f} MB/s", True),
        ("slice_spread", "1 MiB column slice from another node, spread over 2 threads",
         "net_slice_spread", "the 2 matching ep.vis.get_strided_nb", "net_vis_spread",
         lambda s: f"{mbs / s:.0f} MB/s", True),
        ("matmul_messages", f"naive {n}x{n} matmul, 4 threads on 2 nodes: messages, "
         "cache on", "matmul_on_sent", "the same, cache off", "matmul_off_sent",
         lambda v: f"{v:.0f}", True),
        ("matmul_time", f"naive {n}x{n} matmul, 4 threads on 2 nodes: time, cache on",
         "matmul_on_s", "the same, cache off", "matmul_off_s",
         lambda s: f"{s * 1e3:.1f} ms", True),
    ]
    rows, results = [], []
    for name, what, mkey, peer_what, pkey, fmt, inverse in rows_spec:
        mine, peer = g(mkey), g(pkey)
        ratio = None
        if mine is not None and peer is not None and mine > 0 and peer > 0:
            ratio = peer / mine if inverse else mine / peer
        cmp, bound = UPC_TARGETS[name]
        rows.append([what, "missing" if mine is None else fmt(mine), peer_what,
                     "missing" if peer is None else fmt(peer),
                     "missing" if ratio is None else f"{ratio:.2f}", f"{cmp} {bound:g}",
                     _judge(name, ratio)])
        results.append({"section": "peers", "figure": name, "upc_rt": mine, "peer": peer,
                        "ratio": ratio, "target": [cmp, bound],
                        "samples": {"upc_rt": [r.get(mkey) for r in reps],
                                    "peer": [r.get(pkey) for r in reps]}})
    notes = [
        "ratio: upc_rt / peer for times (lower is better), peer / upc_rt for the slices' MB/s "
        "and for the cache's messages and time (higher is better); each against the "
        "target beside it.",
        "A slice returns a new array, so every upc_rt slice allocates its 1 MiB result; its "
        "peers write into a buffer allocated once.",
        f"For reference, in the same jobs: ep.get of 8 B within a node "
        f"{_cell(g('node_ep_get'))}, the bare `for i in idx` loop {_cell(g('node_loop'))} "
        "per access (included in every element figure, the numpy one too).",
    ]
    hits = [r.get("matmul_on_cache") for r in reps if r.get("matmul_on_cache")]
    if hits:
        notes.append(f"matmul cache counters (all threads, first repetition): "
                     f"{hits[0]['hits']} hits, {hits[0]['misses']} misses.")
    missing = [r["mpi_missing"] for r in reps if "mpi_missing" in r]
    if missing:
        notes.append(f"mpi4py peer missing: {missing[0]}.")
    lib = [r["mpi_library"] for r in reps if "mpi_library" in r]
    if lib:
        notes.append(f"mpi4py peer: {lib[0]}, 2 processes on this node.")
    notes.append(f"Medians over {opts.reps} repetitions of each repetition's median of "
                 f"{opts.samples} interleaved samples.")
    table = {"section": "peers", "title": "upc_rt beside its peers (same run)",
             "columns": ["figure", "upc_rt", "peer", "peer figure", "ratio", "target",
                         "verdict"], "rows": rows, "notes": notes}
    return table, results


def _cell(s: float | None) -> str:
    return "missing" if s is None else f"{s * 1e6:.3f} µs"


def _pattern_table(opts: argparse.Namespace, pattern: str, configs: list[tuple[int, str, str]],
                   got: dict[tuple[int, str, str], list[dict[str, Any]]]
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cols = [(topo, c) for topo in opts.topologies for c in opts.caches]
    columns = ["THREADS"] + [f"{TOPO_LABEL[topo]}, cache {c}, {op}" for topo, c in cols
                             for op in ("read", "write")]
    if pattern == "local":
        columns += ["private read", "private write"]
    rows, results = [], []
    for t in opts.threads:
        row = [str(t)]
        for topo, c in cols:
            for op in ("read", "write"):
                reps = got[(t, topo, c)]
                wall = median([r[f"{pattern}/{op}"]["wall"] for r in reps])
                cpu = median([r[f"{pattern}/{op}"]["cpu"] for r in reps])
                row.append(f"{wall * 1e6:.3f}")
                results.append({"section": pattern, "threads": t, "topology": topo,
                                "cache": c, "op": op, "us_per_access": wall * 1e6,
                                "cpu_us_per_access": cpu * 1e6,
                                "samples_us": [r[f"{pattern}/{op}"]["wall"] * 1e6
                                               for r in reps]})
        if pattern == "local":
            for op in ("read", "write"):
                vals = [r[f"private/{op}"]["wall"] for k in configs if k[0] == t
                        for r in got[k]]
                row.append(f"{median(vals) * 1e6:.3f}")
                results.append({"section": pattern, "threads": t, "topology": "any",
                                "cache": "n/a", "op": f"private {op}",
                                "us_per_access": median(vals) * 1e6,
                                "samples_us": [v * 1e6 for v in vals]})
        rows.append(row)
    what = {
        "baseline": "each access a random element of a random other thread",
        "vector": f"{opts.batch} consecutive elements of a random other thread",
        "coalesce": f"{opts.batch} elements of a random other thread, strides 1..8",
        "local": "random elements with affinity to the reader; private: a numpy array",
        "slice": f"the vector pattern as one slice X[a:a+{opts.batch}] per batch",
    }[pattern]
    title = (f"MuPC Table {MUPC_TABLE[pattern]}: {pattern} pattern" if pattern in MUPC_TABLE
             else "vector pattern as a bulk slice") + " (µs per double word)"
    notes = [f"{pattern}: {what}; element by element, a upc.fence() ends each batch of "
             f"{opts.batch}." if pattern != "slice" else f"slice: {what}; a upc.fence() "
             "ends each batch."]
    return ({"section": pattern, "title": title, "columns": columns, "rows": rows,
             "notes": notes}, results)
