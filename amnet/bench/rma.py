"""Suite ``rma``: put bandwidth and put/get latency across nodes, beside raw pyzmq streaming.

**amnet**: a 2-rank job with one rank per simulated node (``amnet.run(fn, n=2, nodes=2)``,
zmq conduit over TCP loopback). Bandwidth: rank 0 starts a window of ``--window`` ``put_nbi``
of S bytes (a preallocated numpy array) to consecutive offsets of rank 1's segment, then
``wait_nbi()``; repeated for ``--bytes`` bytes per size (between ``MIN_WINDOWS`` and
``--max-windows`` windows), after ``--warmup`` untimed windows; MB/s = bytes / time
(10^6 bytes per MB). Latency: blocking ``ep.put(1, 0, data)`` and ``ep.get(1, 0, n, out)``
round trips per size. Rank 1 serves inside ``ep.wait_until``.

**peer** (:mod:`amnet.bench._rawzmq`): two processes with the conduit's sockets (PULL bound
on 127.0.0.1, PUSH to the other's). Streaming: the sender sends the same window of S-byte
messages (a 28-byte header frame + the payload frame, sent with a copy as ``put_nbi`` does),
then waits for one ack per message; the receiver takes each payload without a copy, copies
it into a preallocated numpy buffer at the header's offset (as amnet writes the segment) and
acks it with a 28-byte message. Latency: the same put (send, wait for the ack) and get (send
a header, the receiver answers with header + n bytes of its buffer, the sender copies them
into its ``out`` array). Each in a blocking-``recv()`` and a ``recv(NOBLOCK)``-spin variant.

Every repetition runs amnet, raw-zmq block and raw-zmq spin one after the other (fresh
processes each); figures are medians over repetitions.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from . import suite
from ._jobs import rma_job
from ._report import Progress
from ._twonode import (
    PIN_HELP,
    PINS,
    SKIPPED,
    cpu_cells,
    cpu_count,
    dist,
    over_reps,
    parse_modes,
    parse_sizes,
    pin_note,
    rate_over_reps,
    raw_modes_for,
    run_amnet,
    run_raw,
    size_label,
    us,
)

TARGET_BW = 0.7  # the target: 1 MiB put bandwidth >= 0.7x raw streaming
TARGET_SIZE = 1 << 20
MIN_WINDOWS = 4
DEFAULT_SEGMENT = 64 << 20


def _one_size(text: str | int) -> int:
    from .._config import parse_size

    try:
        size = parse_size(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected a size such as 128M, got {text!r}")
    if size < 1:
        raise argparse.ArgumentTypeError(f"the size must be positive, got {text!r}")
    return size


def _parser(reps: int, sizes: Any, window: int, nbytes: Any, max_windows: int,
            lat_sizes: Any, lat_iters: int, warmup: int,
            wait_modes: Any, pin: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amnet-bench rma",
        description="put_nbi streaming bandwidth and blocking put/get latency across 2 "
                    "simulated nodes (zmq conduit, TCP loopback) beside raw pyzmq streaming "
                    "and ping-pong with the same message shapes, interleaved in the same run. "
                    "Reports MB/s (ratio amnet/raw: higher is better) and µs (lower is "
                    "better).")
    p.add_argument("--reps", type=int, default=reps, metavar="R",
                   help="repetitions (fresh amnet job and raw peers each) "
                        "(default: %(default)s)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes(sizes), metavar="S,S",
                   help="put_nbi sizes for bandwidth (default: 4K,64K,1M,4M)")
    p.add_argument("--window", type=int, default=window, metavar="W",
                   help="put_nbi in flight before wait_nbi (default: %(default)s)")
    p.add_argument("--bytes", type=_one_size, default=_one_size(nbytes), metavar="B",
                   help="bytes streamed per size per repetition (default: 128M)")
    p.add_argument("--max-windows", type=int, default=max_windows, metavar="N",
                   help="at most this many windows per size per repetition (bounds small "
                        "sizes) (default: %(default)s)")
    p.add_argument("--lat-sizes", type=parse_sizes, default=parse_sizes(lat_sizes),
                   metavar="S,S", help="blocking put/get latency sizes (default: 8,1K)")
    p.add_argument("--iters", type=int, default=lat_iters, metavar="I",
                   help="timed blocking puts (and gets) per latency size per repetition "
                        "(default: %(default)s)")
    p.add_argument("--warmup", type=int, default=warmup, metavar="W",
                   help="untimed windows before each size's bandwidth, and 10x as many "
                        "untimed puts/gets before latencies (default: %(default)s)")
    p.add_argument("--pin", choices=PINS, default=pin, help=PIN_HELP)
    p.add_argument("--wait-mode", type=parse_modes, default=parse_modes(wait_modes),
                   metavar="M,M", dest="wait_modes",
                   help="amnet wait modes to run, each its own row: auto, spin, block "
                        "(default: auto)")
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
        wait_modes: str | Iterable[str] = "auto", pin: str = "none",
        progress: bool = True) -> dict[str, Any]:
    """put_nbi bandwidth and put/get latency across 2 nodes vs raw pyzmq streaming."""
    parser = _parser(reps, sizes, window, nbytes, max_windows, lat_sizes, lat_iters, warmup,
                     wait_modes, pin)
    opts = parser.parse_args(list(args or []))
    for name in ("reps", "window", "max_windows", "iters"):
        if getattr(opts, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, "
                         f"got {getattr(opts, name)}")
    if opts.warmup < 0:
        parser.error(f"--warmup must be 0 or more, got {opts.warmup}")
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
    amnet_opts: dict[str, Any] = {"segment_size": seg}
    raw_modes = raw_modes_for(opts.pin)
    variants = [("amnet", m) for m in opts.wait_modes] + [("raw", m) for m in raw_modes]

    bw: dict[tuple[str, str], dict[int, list[float]]] = {
        v: {s: [] for s in opts.sizes} for v in variants}
    bw_cpu: dict[tuple[str, str], dict[int, list[float]]] = {
        v: {s: [] for s in opts.sizes} for v in variants}
    lat: dict[tuple[str, str], dict[tuple[str, int], list[dict[str, float]]]] = {
        v: {(op, s): [] for op in ("put", "get") for s in opts.lat_sizes} for v in variants}
    resolved: dict[str, set[str]] = {m: set() for m in opts.wait_modes}
    unpinned: set[str] = set()  # runs that could not pin (or were not asked to)
    bar = Progress("rma", len(variants) * opts.reps, enabled=progress)
    try:
        for rep in range(opts.reps):  # interleaved: amnet (each mode), raw block, raw spin
            for who, mode in variants:
                if who == "amnet":
                    r = run_amnet(rma_job, plan, wait_mode=mode, **amnet_opts)
                    resolved[mode].add(r["wait_mode"])
                else:
                    r = run_raw({"rma": plan}, mode, 0.0, seg, pin=opts.pin)
                for s in opts.sizes:
                    moved = s * opts.window * windows[s]
                    bw[(who, mode)][s].append(moved / r["bw"][str(s)] / 1e6)
                    bw_cpu[(who, mode)][s].append(
                        r["bw_cpu"][str(s)] / (opts.window * windows[s]))
                for op in ("put", "get"):
                    for s in opts.lat_sizes:
                        lat[(who, mode)][(op, s)].append(dist(r[op][str(s)]))
                if r.get("core") is None:
                    unpinned.add(f"{who} {mode}")
                bar.step(f"{who} {mode} rep {rep + 1}/{opts.reps}")
    finally:
        bar.close()

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []

    def wm_label(mode: str) -> str:
        modes = sorted(resolved[mode])
        return mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"

    for s in opts.sizes:
        raw = {m: rate_over_reps(bw[("raw", m)][s]) for m in raw_modes}
        fastest = max(raw_modes, key=lambda m: raw[m]["median"])
        raw_cpu = {m: rate_over_reps(bw_cpu[("raw", m)][s]) for m in raw_modes}
        for mode in opts.wait_modes:
            a = rate_over_reps(bw[("amnet", mode)][s])
            a_cpu = rate_over_reps(bw_cpu[("amnet", mode)][s])
            ratio = a["median"] / raw[fastest]["median"]
            target = None
            if s == TARGET_SIZE:
                target = {"min_ratio": TARGET_BW, "met": ratio >= TARGET_BW}
            results.append({"op": "put_nbi bandwidth", "unit": "MB/s", "bytes": s,
                            "window": opts.window, "windows": windows[s],
                            "wait_mode": mode, "wait_mode_resolved": sorted(resolved[mode]),
                            "amnet": a, "raw_block": raw["block"], "raw_spin": raw.get("spin"),
                            "raw_faster": fastest, "ratio": ratio,
                            "ratio_vs": {m: a["median"] / raw[m]["median"] for m in raw_modes},
                            "better": "higher", "target": target,
                            "cpu_per_put": {"amnet": a_cpu, "raw_block": raw_cpu["block"],
                                            "raw_spin": raw_cpu.get("spin")}})
            verdict = ""
            if target:
                verdict = f">= {TARGET_BW:g}: " + ("met" if target["met"] else "missed")
            rows.append([f"put_nbi stream MB/s, W={opts.window}", size_label(s),
                         wm_label(mode), _mbs(a), _mbs(raw["block"]), _mbs(raw.get("spin")),
                         f"{ratio:.2f} (vs {fastest}; higher is better)", verdict,
                         cpu_cells(a_cpu, raw_cpu["block"], raw_cpu.get("spin"))])
    for op in ("put", "get"):
        for s in opts.lat_sizes:
            raw = {m: over_reps(lat[("raw", m)][(op, s)]) for m in raw_modes}
            fastest = min(raw_modes, key=lambda m: raw[m]["median"])
            for mode in opts.wait_modes:
                a = over_reps(lat[("amnet", mode)][(op, s)])
                ratio = a["median"] / raw[fastest]["median"]
                results.append({"op": f"blocking {op} latency", "unit": "s", "bytes": s,
                                "wait_mode": mode,
                                "wait_mode_resolved": sorted(resolved[mode]), "amnet": a,
                                "raw_block": raw["block"], "raw_spin": raw.get("spin"),
                                "raw_faster": fastest, "ratio": ratio,
                                "ratio_vs": {m: a["median"] / raw[m]["median"]
                                             for m in raw_modes},
                                "better": "lower", "target": None})
                rows.append([f"blocking {op} µs", size_label(s), wm_label(mode), us(a),
                             us(raw["block"]), us(raw.get("spin")),
                             f"{ratio:.2f} (vs {fastest}; lower is better)", "", ""])

    notes = [
        f"Bandwidth: MB/s (10^6 bytes/s), median (min..max) over {opts.reps} repetitions; each "
        f"repetition streams `--window` {opts.window} puts then waits for all, "
        + ", ".join(f"{windows[s]} windows of {size_label(s)}" for s in opts.sizes)
        + f", after {opts.warmup} untimed windows. Latency: µs "
        f"per blocking operation, median (p10..p90), medians over the repetitions of "
        f"{opts.iters} timed operations each (after {10 * opts.warmup} untimed).",
        "amnet: `amnet.run(fn, n=2, nodes=2)`, one rank per simulated node, zmq conduit over "
        "TCP loopback. Rank 0: `ep.put_nbi(1, k*S, src)` for k < W, then `ep.wait_nbi()` "
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
        f"for bandwidth higher is better (target at 1 MiB: >= {TARGET_BW:g}); for latency "
        "lower is better.",
    ]
    if "auto" in opts.wait_modes:
        notes.append(f"amnet's auto wait mode resolved to "
                     f"{'/'.join(sorted(resolved['auto'])) or '-'} on this machine "
                     f"(2 ranks, one process each, {cpu_count()} usable cores).")
    if pin_note(opts.pin):
        notes.append(pin_note(opts.pin))
        if unpinned:
            notes.append(f"could not pin: {', '.join(sorted(unpinned))} (no "
                         "os.sched_setaffinity or /proc/self/task here); those ran unpinned.")
    config = {"reps": opts.reps, "sizes": opts.sizes, "window": opts.window, "pin": opts.pin,
              "bytes": total, "max_windows": opts.max_windows, "windows": windows,
              "lat_sizes": opts.lat_sizes, "iters": opts.iters, "warmup": opts.warmup,
              "wait_modes": opts.wait_modes, "amnet_options": amnet_opts,
              "amnet_job": "amnet.run(amnet.bench._jobs.rma_job, n=2, nodes=2)",
              "raw_peer": "python amnet/bench/_rawzmq.py server|client MODE",
              "order": [f"{w} {m}" for w, m in variants],
              "timer": "time.perf_counter in rank 0 / the raw client"}
    table = {"columns": ["operation", "size", "amnet wait mode", "amnet", "raw-zmq block",
                         "raw-zmq spin", "ratio amnet/raw", "target",
                         "sender thread CPU µs/put: amnet / block / spin"], "rows": rows}
    return {"suite": "rma", "config": config, "results": results, "table": table,
            "notes": notes}
