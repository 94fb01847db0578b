"""Suite ``rma``: put bandwidth and put/get latency across nodes beside raw pyzmq streaming
(the network section), and put/get latency and bandwidth between the two processes of one
node beside mpi4py RMA and memcpy (the node section). ``--no-node`` / ``--no-network`` run
one only. Then amnet.aio's awaited puts and gets beside the blocking forms, and 1000 gets in
flight awaited together beside handles (the aio section, :mod:`amnet_bench._aiorma`;
``--no-aio`` skips it).

Network section.

**amnet**: a 2-rank job with one rank per simulated node (``amnet.run(fn, n=2, nodes=2)``,
zmq conduit over TCP loopback). Bandwidth: rank 0 starts a window of ``--window`` ``put_nbi``
of S bytes (a preallocated numpy array) to consecutive offsets of rank 1's segment, then
``wait_nbi()``; repeated for ``--bytes`` bytes per size (between ``MIN_WINDOWS`` and
``--max-windows`` windows), after ``--warmup`` untimed windows; MB/s = bytes / time
(10^6 bytes per MB). Latency: blocking ``ep.put(1, 0, data)`` and ``ep.get(1, 0, n, out)``
round trips per size. Rank 1 serves inside ``ep.wait_until``.

**peer** (:mod:`amnet_bench._rawzmq`): two processes with the conduit's sockets (PULL bound
on 127.0.0.1, PUSH to the other's). Streaming: the sender sends the same window of S-byte
messages (a 28-byte header frame + the payload frame, sent with a copy as ``put_nbi`` does),
then waits for one ack per message; the receiver takes each payload without a copy, copies
it into a preallocated numpy buffer at the header's offset (as amnet writes the segment) and
acks it with a 28-byte message. Latency: the same put (send, wait for the ack) and get (send
a header, the receiver answers with header + n bytes of its buffer, the sender copies them
into its ``out`` array). Each in a blocking-``recv()`` and a ``recv(NOBLOCK)``-spin variant.

Every repetition runs amnet, raw-zmq block and raw-zmq spin one after the other (fresh
processes each); figures are medians over repetitions.

Node section.

**amnet**: a 2-rank job on one node, 2 processes with PSHM on (``amnet.run(fn, n=2)``: puts
and gets are direct copies into / out of the peer's mapped segment), and unless
``--no-node-threads`` the same as 2 threads of one process (``threads_per_proc=2``). Rank 0:
blocking ``ep.put(1, 0, a)`` / ``ep.get(1, 0, n, out)`` of a preallocated numpy array; latency
per size timed in batches of ``--node-batch`` operations (a sample is a batch's time / its
size); bandwidth per size as MB/s of back-to-back blocking operations moving at least
``--node-bytes`` per sample.

**peers**: mpi4py RMA (:func:`amnet_bench._mpipeer.run_mpi`: ``Lock(1); Put/Get; Unlock(1)``
per operation for latency, a ``Lock`` epoch of Puts/Gets for bandwidth, in a
``MPI.Win.Allocate`` window) and memcpy (:func:`amnet_bench._shmpeer.memcpy_bw`: numpy
``dst[:] = src`` of the same sizes, the floor for intra-node bandwidth).

Every repetition runs each configuration (each wait mode), mpi4py and memcpy one after the
other, fresh processes each; targets are checked on the medians over repetitions.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from . import _mpinet, _node
from . import _options as options
from ._aiorma import rma_aio_section
from ._jobs import node_rma_job, rma_job
from ._mpipeer import run_mpi
from ._options import size_label
from ._registry import suite
from ._report import interleave
from ._shmpeer import memcpy_bw
from ._stats import over_reps, stats, summary
from ._targets import (
    RMA_BW,
    RMA_BW_SIZE,
    RMA_NODE_BW,
    RMA_NODE_BW_SIZE,
    RMA_NODE_PUT,
    RMA_NODE_PUT_SIZE,
)
from ._twonode import (
    SKIPPED,
    Network,
    add_options,
    cpu_cells,
    merge_sections,
    us,
)

MIN_WINDOWS = 4
DEFAULT_SEGMENT = 64 << 20
NODE_BW_WARMUP = 2  # untimed operations per size before a bandwidth's samples


def _parser(d: dict[str, Any]) -> options.Parser:
    """The options, with the suite's defaults ``d`` (its keywords by name)."""
    p = options.Parser(
        "rma", "Network section: put_nbi streaming bandwidth and blocking put/get latency "
               "across 2 simulated nodes (zmq conduit, TCP loopback) beside raw pyzmq "
               "streaming and ping-pong with the same message shapes. Node section: "
               "blocking put/get latency and bandwidth between 2 processes of one node "
               "(PSHM) and 2 threads of one process, beside mpi4py RMA and memcpy. Peers "
               "interleaved in the same run. Reports MB/s (higher is better) and µs "
               "(lower is better).")
    add_options(p, d, "latency operations of each size", "mpi4py Send/Recv on the same MPI",
                "amnet.aio's awaited puts and gets beside the blocking forms, within a node "
                "and across nodes")
    options.sizes(p, d["sizes"], "put_nbi sizes for bandwidth")
    options.count(p, "--window", d["window"], "put_nbi in flight before wait_nbi",
                  metavar="W")
    options.size(p, "--bytes", d["nbytes"], "bytes streamed per size per repetition")
    options.count(p, "--max-windows", d["max_windows"], "at most this many windows per size "
                  "per repetition (bounds small sizes)")
    options.sizes(p, d["lat_sizes"], "blocking put/get latency sizes", flag="--lat-sizes")
    options.count(p, "--iters", d["lat_iters"], "timed blocking puts (and gets) per latency "
                  "size per repetition", metavar="I")
    options.warmup(p, d["warmup"], "untimed windows before each size's bandwidth, and 10x as "
                   "many untimed puts/gets before latencies")
    options.toggle(p, "--node-threads", d["node_threads"],
                   "node section: also the 2-threads-of-one-process rows")
    for flag, key, what in (("--node-lat-sizes", "node_lat_sizes", "put/get latency sizes"),
                            ("--node-bw-sizes", "node_bw_sizes", "put/get bandwidth sizes")):
        options.sizes(p, d[key], f"node section: {what}", flag=flag, most=1 << 30,
                      unit="an operation")
    options.size(p, "--node-bytes", d["node_bytes"], "node section: bytes moved per "
                 "bandwidth sample")
    options.count(p, "--node-samples", d["node_samples"], "node section: bandwidth samples "
                  "per size per repetition")
    return p


def _mbs(s: dict[str, Any] | None) -> str:
    if s is None:
        return SKIPPED
    return f"{s['median']:.0f} ({s['min']:.0f}..{s['max']:.0f})"


@suite("rma")
def rma(args: Sequence[str] | None = None, *, reps: int = 7,
        sizes: str | Iterable[int] = "4K,64K,1M,4M", window: int = 8,
        nbytes: str | int = "128M", max_windows: int = 128,
        lat_sizes: str | Iterable[int] = "8,1K", lat_iters: int = 1000, warmup: int = 2,
        wait_modes: str | Iterable[str] = "auto", pin: str = "none", node: bool = True,
        network: bool = True, node_threads: bool = True,
        node_lat_sizes: str | Iterable[int] = "8,1K,64K",
        node_bw_sizes: str | Iterable[int] = "1M,4M,16M", node_iters: int = 5000,
        node_warmup: int = 200, node_batch: int = 200, node_bytes: str | int = "64M",
        node_samples: int = 5, aio: bool = True, conduit: str = "zmq",
        progress: bool = True) -> dict[str, Any]:
    """put/get across 2 nodes vs raw pyzmq; on one node vs mpi4py RMA and memcpy; amnet.aio.

    The network and node sections, then amnet.aio's awaited puts and gets beside the
    blocking forms."""
    parser = _parser(locals())
    opts = options.parse(parser, args, {
        "reps": 1, "sizes": [4096, 1 << 20], "bytes": 8 << 20, "max_windows": 16,
        "lat_sizes": [8], "iters": 100, "node_lat_sizes": [8], "node_bw_sizes": [1 << 20],
        "node_iters": 500, "node_warmup": 50, "node_bytes": 8 << 20, "node_samples": 3},
        "1 repetition, 4 KiB and 1 MiB puts, 8 MiB a sample, 100 latency round trips",
        fixed={"--ranks": ("2", "rma times puts and gets between a pair of ranks"),
               "--splits": ("1", "its ranks are processes (--node-threads adds the "
                                 "rank-thread rows of the node section)")})

    nets = []
    if opts.network:
        for c in opts.conduit:
            if c == "mpi":
                seg = max(DEFAULT_SEGMENT, opts.window * max(opts.sizes), max(opts.lat_sizes))
                for path in opts.mpi_paths:
                    nets.append(_mpinet.rma_section(opts, progress, seg, path))
            else:
                nets.append(_network(parser, argparse.Namespace(**{**vars(opts),
                                                                  "conduit": c}), progress))
    return merge_sections("rma", *nets, _node_section(opts, progress) if opts.node else None,
                          rma_aio_section(opts, progress) if opts.aio else None)


def _network(parser: argparse.ArgumentParser, opts: argparse.Namespace,
             progress: bool) -> dict[str, Any]:
    """The network section: its config, results and table (with its notes)."""
    total = opts.bytes
    span = opts.window * max(opts.sizes)  # the window's puts land side by side
    if span > 1 << 30:
        parser.error(f"--window x the largest size is {span} bytes; keep it within 1 GiB")
    if max(opts.lat_sizes) > DEFAULT_SEGMENT:
        parser.error("latency sizes are at most 64 MiB")

    windows = {s: max(MIN_WINDOWS, min(opts.max_windows, -(-total // (s * opts.window))))
               for s in opts.sizes}
    seg = max(DEFAULT_SEGMENT, span, max(opts.lat_sizes))
    plan = {"window": opts.window, "warmup": opts.warmup, "pin": opts.pin,
            "bw": [[s, windows[s]] for s in opts.sizes],
            "lat_sizes": opts.lat_sizes, "lat_iters": opts.iters,
            "lat_warmup": 10 * opts.warmup}
    amnet_opts: dict[str, Any] = {"segment_size": seg, "conduit": opts.conduit}
    net = Network(opts)
    raw_modes = net.raw_modes
    bw: dict[tuple[str, str], dict[int, list[float]]] = {
        v: {s: [] for s in opts.sizes} for v in net.variants}
    bw_cpu: dict[tuple[str, str], dict[int, list[float]]] = {
        v: {s: [] for s in opts.sizes} for v in net.variants}
    lat: dict[tuple[str, str], dict[tuple[str, int], list[dict[str, float]]]] = {
        v: {(op, s): [] for op in ("put", "get") for s in opts.lat_sizes} for v in net.variants}

    def take(who: str, mode: str, r: dict[str, Any]) -> None:
        for s in opts.sizes:
            moved = s * opts.window * windows[s]
            bw[(who, mode)][s].append(moved / r["bw"][str(s)] / 1e6)
            bw_cpu[(who, mode)][s].append(r["bw_cpu"][str(s)] / (opts.window * windows[s]))
        for op in ("put", "get"):
            for s in opts.lat_sizes:
                lat[(who, mode)][(op, s)].append(stats(r[op][str(s)], keep=False))

    net.run("rma", rma_job, plan, {"rma": plan}, amnet_opts, take, progress, 0.0, seg)

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []

    for s in opts.sizes:
        raw = {m: summary(bw[("raw", m)][s]) for m in raw_modes}
        fastest = max(raw_modes, key=lambda m: raw[m]["median"])
        raw_cpu = {m: summary(bw_cpu[("raw", m)][s]) for m in raw_modes}
        for mode in opts.wait_modes:
            a = summary(bw[("amnet", mode)][s])
            a_cpu = summary(bw_cpu[("amnet", mode)][s])
            ratio = a["median"] / raw[fastest]["median"]
            target = None
            if s == RMA_BW_SIZE:
                target = {"min_ratio": RMA_BW, "met": ratio >= RMA_BW}
            results.append({"section": "network", "op": "put_nbi bandwidth", "unit": "MB/s",
                            "bytes": s,
                            "window": opts.window, "windows": windows[s],
                            "wait_mode": mode, "wait_mode_resolved": sorted(net.resolved[mode]),
                            "amnet": a, "raw_block": raw["block"], "raw_spin": raw.get("spin"),
                            "raw_faster": fastest, "ratio": ratio,
                            "ratio_vs": {m: a["median"] / raw[m]["median"] for m in raw_modes},
                            "better": "higher", "target": target,
                            "cpu_per_put": {"amnet": a_cpu, "raw_block": raw_cpu["block"],
                                            "raw_spin": raw_cpu.get("spin")}})
            verdict = ""
            if target:
                verdict = f">= {RMA_BW:g}: " + ("met" if target["met"] else "missed")
            rows.append([f"put_nbi stream MB/s, W={opts.window}", size_label(s),
                         net.mode_label(mode), _mbs(a), _mbs(raw["block"]), _mbs(raw.get("spin")),
                         f"{ratio:.2f} (vs {fastest}; higher is better)", verdict,
                         cpu_cells(a_cpu, raw_cpu["block"], raw_cpu.get("spin"))])
    for op in ("put", "get"):
        for s in opts.lat_sizes:
            raw = {m: over_reps(lat[("raw", m)][(op, s)]) for m in raw_modes}
            fastest = min(raw_modes, key=lambda m: raw[m]["median"])
            for mode in opts.wait_modes:
                a = over_reps(lat[("amnet", mode)][(op, s)])
                ratio = a["median"] / raw[fastest]["median"]
                results.append({"section": "network", "op": f"blocking {op} latency",
                                "unit": "s", "bytes": s,
                                "wait_mode": mode,
                                "wait_mode_resolved": sorted(net.resolved[mode]), "amnet": a,
                                "raw_block": raw["block"], "raw_spin": raw.get("spin"),
                                "raw_faster": fastest, "ratio": ratio,
                                "ratio_vs": {m: a["median"] / raw[m]["median"]
                                             for m in raw_modes},
                                "better": "lower", "target": None})
                rows.append([f"blocking {op} µs", size_label(s), net.mode_label(mode), us(a),
                             us(raw["block"]), us(raw.get("spin")),
                             f"{ratio:.2f} (vs {fastest}; lower is better)", "", ""])

    notes = [
        f"Bandwidth: MB/s (10^6 bytes/s), median (min..max) over {opts.reps} repetitions; each "
        f"repetition streams `--window` {opts.window} puts then waits for all, "
        + ", ".join(f"{windows[s]} windows of {size_label(s)}" for s in opts.sizes)
        + f", after {opts.warmup} untimed windows. Latency: µs "
        f"per blocking operation, median (p10..p90), medians over the repetitions of "
        f"{opts.iters} timed operations each (after {10 * opts.warmup} untimed).",
        f"amnet: `amnet.run(fn, n=2, nodes=2)`, one rank per simulated node, "
        f"{opts.conduit} conduit over TCP loopback. Rank 0: `ep.put_nbi(1, k*S, src)` for "
        "k < W, then `ep.wait_nbi()` "
        "(each put is acked by rank 1's system handler after it wrote the segment); "
        "`ep.put(1, 0, data)` / `ep.get(1, 0, n, out)` for latency. Rank 1 serves in "
        "`ep.wait_until`.",
        "raw-zmq: two processes, PULL bound on 127.0.0.1 + PUSH to the other's (HWM off). "
        "Stream: the sender sends W messages (28-byte header frame + S-byte payload frame, "
        "sent with a copy like put_nbi), then receives W acks; the receiver takes each "
        "payload without a copy, copies it into a preallocated numpy buffer at the header's "
        "offset and sends a 28-byte ack per message. Put: the same, one at a time. Get: "
        "28-byte request, the receiver answers header + n bytes of its buffer, the sender "
        "copies them into a numpy array. block: blocking recv(); spin: recv(NOBLOCK) loop.",
        "sender thread CPU: time.thread_time() of the sending thread (amnet rank 0 / the raw "
        "sender) over the timed windows, per put, median over repetitions (puts, acks and "
        "waiting included; the libzmq I/O thread not; a spinning thread's CPU time is its "
        "wall time).",
        "ratio = amnet / the better raw variant (higher bandwidth, lower latency): "
        f"for bandwidth higher is better (target at 1 MiB: >= {RMA_BW:g}); for latency "
        "lower is better.",
    ]
    notes += net.notes()
    config = {"reps": opts.reps, "sizes": opts.sizes, "window": opts.window,
              "bytes": total, "max_windows": opts.max_windows, "windows": windows,
              "lat_sizes": opts.lat_sizes, "iters": opts.iters, "warmup": opts.warmup,
              **net.config(), "amnet_options": amnet_opts,
              "amnet_job": "amnet.run(amnet_bench._jobs.rma_job, n=2, nodes=2)",
              "raw_peer": "python amnet_bench/_rawzmq.py server|client MODE",
              "timer": "time.perf_counter in rank 0 / the raw client"}
    table = {"columns": ["operation", "size", "amnet wait mode", "amnet", "raw-zmq block",
                         "raw-zmq spin", "ratio amnet/raw", "target",
                         "sender thread CPU µs/put: amnet / block / spin"], "rows": rows}
    return {"config": config, "results": results,
            "table": {"section": "network", "title": "Across nodes: put/get over the "
                      f"{opts.conduit} conduit (TCP loopback) vs raw-zmq", **table,
                      "notes": notes}}


def _node_section(opts: argparse.Namespace, progress: bool) -> dict[str, Any]:
    """The node section: config, results, table with notes."""
    pin = _node.node_pin(opts.pin)
    lat_sizes, bw_sizes = opts.node_lat_sizes, opts.node_bw_sizes
    biggest = max(lat_sizes + bw_sizes)
    seg = max(DEFAULT_SEGMENT, biggest)
    batch = min(opts.node_batch, opts.node_iters)
    plan = {"pin": pin, "lat_sizes": lat_sizes, "lat_warmup": opts.node_warmup,
            "lat_iters": opts.node_iters, "lat_batch": opts.node_batch, "bw_sizes": bw_sizes,
            "bw_warmup": NODE_BW_WARMUP, "bw_samples": opts.node_samples,
            "bw_bytes": opts.node_bytes}
    ops = {s: max(1, -(-opts.node_bytes // s)) for s in bw_sizes}  # per bandwidth sample
    # mpi4py: one Lock epoch per bandwidth sample, the same number of operations per epoch
    # for every size (MPI completes an epoch's Puts together; a Lock/Unlock pair costs a few
    # µs against the milliseconds of an epoch)
    mpi_epoch = min(ops.values())
    mpi_plan = {"pin": pin, "window_bytes": max(16 << 20, biggest),
                "rma_lat": {"sizes": lat_sizes, "warmup": opts.node_warmup,
                            "iters": opts.node_iters, "batch": opts.node_batch},
                "rma_bw": {"sizes": bw_sizes, "warmup": 1, "batches": opts.node_samples,
                           "batch": mpi_epoch}}
    mpi_why = _node.mpi_missing()
    labels = {"threads": "2 threads", "procs": "2 procs"}
    keys = (["threads"] if opts.node_threads else []) + ["procs"]
    runs = {"threads": {"threads_per_proc": 2, "pshm": True, "thread_safe": "auto"},
            "procs": {"pshm": True, "thread_safe": "auto"}}
    variants = [(k, m) for m in opts.wait_modes for k in keys]
    lat: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {
        (k, m, op, s): [] for k, m in variants for op in ("put", "get") for s in lat_sizes}
    bw: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {
        (k, m, op, s): [] for k, m in variants for op in ("put", "get") for s in bw_sizes}
    resolved: dict[tuple[str, str], set[str]] = {v: set() for v in variants}
    direct: dict[str, set[bool]] = {k: set() for k in keys}
    mpi: dict[tuple[str, int], list[dict[str, Any]]] = {
        (op, s): [] for op in ("put", "get", "put_bw", "get_bw")
        for s in (lat_sizes if op in ("put", "get") else bw_sizes)}
    memcpy: dict[int, list[dict[str, Any]]] = {s: [] for s in bw_sizes}
    mpi_info: dict[str, Any] = {}

    def amnet(k: str, mode: str) -> None:
        r = _node.run_node(node_rma_job, plan, wait_mode=mode, segment_size=seg, **runs[k])
        resolved[(k, mode)].add(r["wait_mode"])
        direct[k].add(bool(r["direct"]))
        for op in ("put", "get"):
            for s in lat_sizes:
                lat[(k, mode, op, s)].append(stats(r[op][str(s)]))
            for s in bw_sizes:
                bw[(k, mode, op, s)].append(stats(r[f"{op}_bw"][str(s)]))

    def copies() -> None:
        m = memcpy_bw(bw_sizes, opts.node_samples, pin, opts.node_bytes)
        for s in bw_sizes:
            memcpy[s].append(m["sizes"][str(s)])

    def mpi4py() -> None:
        res = run_mpi(mpi_plan)
        mpi_info.update({k: res.get(k) for k in ("mpi_library", "mpi4py", "thread_level",
                                                 "same_node")})
        for op in ("put", "get"):
            for s in lat_sizes:
                mpi[(op, s)].append(res[f"rma_{op}"][str(s)])
            for s in bw_sizes:
                mpi[(f"{op}_bw", s)].append(res[f"rma_{op}_bw"][str(s)])

    # interleaved in every repetition: amnet configurations, memcpy, mpi4py
    interleave("rma node", opts.reps, [
        *((f"{labels[k]} ({mode})", functools.partial(amnet, k, mode)) for k, mode in variants),
        ("memcpy", copies), *([("mpi4py", mpi4py)] if mpi_why is None else [])], progress)

    missing = f"missing: {mpi_why}" if mpi_why else "missing"

    def peer(key: tuple[str, int]) -> dict[str, Any] | None:
        return over_reps(mpi[key]) if mpi[key] else None

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []

    def add(op: str, s: int, k: str, mode: str, a: dict[str, Any], m_fig: Any, c_fig: Any,
            targets: list[dict[str, Any]], latency: bool) -> None:
        """A result and its row: latency (no memcpy) or bandwidth."""
        r_mpi, r_cpy = _node.ratio(a, m_fig), _node.ratio(a, c_fig)
        cell = _node.us_cell if latency else _node.mbs_cell
        results.append({"section": "node",
                        "op": f"blocking {op} {'latency' if latency else 'bandwidth'}",
                        "unit": "s" if latency else "MB/s", "bytes": s,
                        **({} if latency else {"ops_per_sample": ops[s]}),
                        "config": labels[k], "amnet_run": {"n": 2, **runs[k]},
                        "wait_mode": mode, "wait_mode_resolved": sorted(resolved[(k, mode)]),
                        "amnet": a, "mpi4py_rma": m_fig, "memcpy": c_fig, "ratio_mpi4py": r_mpi,
                        "ratio_memcpy": r_cpy, "better": "lower" if latency else "higher",
                        "targets": targets})
        rows.append([f"blocking {op} {'µs' if latency else 'MB/s'}", size_label(s), labels[k],
                     _wm(mode, resolved[(k, mode)]), cell(a), cell(m_fig, missing),
                     "-" if latency else cell(c_fig), _node.ratio_cell(r_mpi),
                     "-" if latency else _node.ratio_cell(r_cpy),
                     "; ".join(f"{t['what']}: {_node.verdict(t['met'])}" for t in targets)])

    for op in ("put", "get"):
        for s in lat_sizes:
            m_fig = peer((op, s))
            for k, mode in variants:
                a = over_reps(lat[(k, mode, op, s)])
                r_mpi = _node.ratio(a, m_fig)
                targets = [{"what": f"<= {RMA_NODE_PUT:g}x mpi4py RMA put", "ratio": r_mpi,
                            "limit": RMA_NODE_PUT,
                            "met": None if r_mpi is None else r_mpi <= RMA_NODE_PUT}
                           ] if op == "put" and s == RMA_NODE_PUT_SIZE and k == "procs" else []
                add(op, s, k, mode, a, m_fig, None, targets, latency=True)
    for op in ("put", "get"):
        for s in bw_sizes:
            m_fig, c_fig = peer((f"{op}_bw", s)), over_reps(memcpy[s])
            for k, mode in variants:
                a = over_reps(bw[(k, mode, op, s)])
                r_cpy = _node.ratio(a, c_fig)
                targets = [{"what": f">= {RMA_NODE_BW:g}x memcpy", "ratio": r_cpy,
                            "limit": RMA_NODE_BW, "met": r_cpy >= RMA_NODE_BW}
                           ] if s >= RMA_NODE_BW_SIZE and k == "procs" else []
                add(op, s, k, mode, a, m_fig, c_fig, targets, latency=False)

    notes = [
        f"Node section: latency in µs per blocking operation, median (p10..p90) over batches "
        f"of {batch} operations ({opts.node_iters} timed after {opts.node_warmup} untimed, per "
        "size); bandwidth in MB/s (10^6 bytes/s), median (p10..p90) over "
        f"{opts.node_samples} samples per size, each at least {size_label(opts.node_bytes)} of "
        "back-to-back blocking operations (" + ", ".join(f"{ops[s]} x {size_label(s)}"
                                                         for s in bw_sizes)
        + f"), after {NODE_BW_WARMUP} untimed; every figure the median over {opts.reps} "
        "repetitions, amnet configurations and peers interleaved in each, fresh processes each.",
        "amnet: rank 0 `ep.put(1, 0, a)` / `ep.get(1, 0, n, out)` of preallocated numpy "
        "arrays, rank 1 serves in `ep.wait_until`. 2 procs: `amnet.run(fn, n=2)`, one node, "
        "PSHM on: direct copies into / out of the peer's mapped segment"
        + ("" if direct["procs"] == {True} else " (but the peer's segment was NOT mapped: "
           "segment_view(1) was None)")
        + (". 2 threads: `amnet.run(fn, n=2, threads_per_proc=2)`, one process (extra "
           "context, no target)" if opts.node_threads else "")
        + f". segment_size {size_label(seg)}.",
        "memcpy: numpy `dst[:] = src` of preallocated, touched arrays of the same size in a "
        "fresh process, back-to-back copies of at least the same bytes per sample: the floor "
        "for intra-node bandwidth.",
    ]
    if mpi_why is None:
        notes.append(
            f"mpi4py {mpi_info.get('mpi4py')} on "
            f"{' '.join(str(mpi_info.get('mpi_library')).split())}, 2 ranks of one "
            "`mpiexec -n 2` job, mpi4py's default thread level (MPI reports "
            f"{mpi_info.get('thread_level')}), a `MPI.Win.Allocate` window of "
            f"{size_label(mpi_plan['window_bytes'])}. Latency: `win.Lock(1); win.Put(buf, 1, "
            "0); win.Unlock(1)` (Get alike) per operation, batched as amnet's; bandwidth: one "
            f"Lock(1) epoch per sample of {mpi_epoch} Puts (Gets) of the whole size, completed "
            "by Unlock(1), after one untimed epoch; rank 1 idle in a Barrier (passive "
            "target).")
    else:
        notes.append(f"mpi4py peer missing: {mpi_why}; its columns say missing and the "
                     "target against it is not judged.")
    notes.append(
        f"Targets (PSHM issue, 2 procs): {size_label(RMA_NODE_PUT_SIZE)} blocking put "
        f"latency <= {RMA_NODE_PUT:g}x mpi4py RMA put; put and get bandwidth >= "
        f"{RMA_NODE_BW:g}x memcpy for sizes >= {size_label(RMA_NODE_BW_SIZE)}. Ratios: "
        "amnet / peer, lower is better for latency, higher for bandwidth.")
    notes += _node.auto_and_pin_notes(
        opts, pin, resolved, "memcpy and mpi4py",
        "rank 0 on the first usable core, rank 1 on the second (for 2 threads: each rank's "
        "thread only); memcpy on the first.")
    config = {"reps": opts.reps, "pin": pin, "wait_modes": opts.wait_modes,
              "lat_sizes": lat_sizes, "iters": opts.node_iters, "warmup": opts.node_warmup,
              "batch": batch, "bw_sizes": bw_sizes, "bw_bytes": opts.node_bytes,
              "bw_samples": opts.node_samples, "bw_warmup": NODE_BW_WARMUP,
              "ops_per_sample": ops, "segment_size": seg, "threads": opts.node_threads,
              "configs": {labels[k]: {"n": 2, **runs[k]} for k in keys},
              "amnet_job": "amnet.run(amnet_bench._jobs.node_rma_job, n=2, **config)",
              "memcpy": "amnet_bench._shmpeer.memcpy_bw", "mpi4py_plan": mpi_plan,
              "order": [f"{labels[k]} ({m})" for k, m in variants] + ["memcpy"]
              + (["mpi4py"] if mpi_why is None else []),
              "mpi4py_missing": mpi_why, "mpi4py": mpi_info,
              "timer": f"time.perf_counter per batch of {batch} operations (latency), per "
                       "sample (bandwidth)"}
    table = {"section": "node", "title": "On one node: blocking put/get between 2 processes "
             "(PSHM) and 2 threads vs mpi4py RMA and memcpy",
             "columns": ["operation", "size", "configuration", "wait mode", "amnet",
                         "mpi4py RMA", "memcpy", "amnet / mpi4py", "amnet / memcpy", "target"],
             "rows": rows, "notes": notes}
    return {"config": config, "results": results, "table": table}


def _wm(mode: str, resolved: set[str]) -> str:
    modes = sorted(resolved)
    return mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"
