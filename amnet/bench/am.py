"""Suite ``am``: AM round-trip latency across nodes, beside raw pyzmq ping-pong.

**amnet**: a 2-rank job with one rank per simulated node (``amnet.run(fn, n=2, nodes=2)``, so
every message crosses the zmq conduit over TCP loopback). Rank 0 sends
``request_short(1, ping, i)`` and waits with ``ep.wait_until`` until the ``pong`` reply handler
has run; rank 1 serves inside ``ep.wait_until``. Then the same with Medium AMs per payload
size: ``request_medium(1, mping, payload, i)``, answered by ``reply_medium`` with the same
payload. Each round trip is timed with ``time.perf_counter`` after ``--warmup`` untimed ones.

**peer** (:mod:`amnet.bench._rawzmq`): two processes, each with a PULL socket bound on
127.0.0.1 and a PUSH connected to the other's (the conduit's sockets), exchanging the same
message shapes (a 28-byte header, i.e. ``20 + 8 * nargs`` with one argument, plus the payload
frame for Medium), once receiving with blocking ``recv()`` and once in a ``recv(NOBLOCK)``
spin loop. The headline ratio compares amnet with the faster of the two.

Every repetition runs amnet, raw-zmq block and raw-zmq spin one after the other (fresh
processes each), and the figures are medians over repetitions of each repetition's median
(p10, p90) round trip.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from . import suite
from ._jobs import am_job
from ._report import Progress
from ._twonode import (
    PIN_HELP,
    PINS,
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

TARGET_SHORT = 1.2  # the target: short-AM RTT across nodes <= 1.2x raw-zmq RTT


def _parser(iters: int, warmup: int, reps: int, sizes: Any, latency_us: float,
            wait_modes: Any, pin: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amnet-bench am",
        description="Short and Medium AM round trip across 2 simulated nodes (zmq conduit, TCP "
                    "loopback) beside raw pyzmq ping-pong with the same message shapes "
                    "(blocking and spinning receivers), interleaved in the same run. Reports "
                    "median (p10..p90) µs and the ratio amnet/raw (lower is better).")
    p.add_argument("--iters", type=int, default=iters, metavar="I",
                   help="timed round trips per shape per repetition (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=warmup, metavar="W",
                   help="untimed round trips before each shape's timed ones "
                        "(default: %(default)s)")
    p.add_argument("--reps", type=int, default=reps, metavar="R",
                   help="repetitions (fresh amnet job and raw peers each) "
                        "(default: %(default)s)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes(sizes), metavar="S,S",
                   help="Medium payload sizes, a comma list like 8,1K,64K (default: 8,1K,64K)")
    p.add_argument("--latency-us", type=float, default=latency_us, metavar="L",
                   help="AMNET_NET_LATENCY_US for amnet; the raw peer holds each received "
                        "message as long (default: %(default)s)")
    p.add_argument("--pin", choices=PINS, default=pin, help=PIN_HELP)
    p.add_argument("--wait-mode", type=parse_modes, default=parse_modes(wait_modes),
                   metavar="M,M", dest="wait_modes",
                   help="amnet wait modes to run, each its own row: auto, spin, block "
                        "(default: auto)")
    return p


@suite("am")
def am(args: Sequence[str] | None = None, *, iters: int = 2000, warmup: int = 200,
       reps: int = 7, sizes: str | Iterable[int] = "8,1K,64K", latency_us: float = 0.0,
       wait_modes: str | Iterable[str] = "auto", pin: str = "none",
       progress: bool = True) -> dict[str, Any]:
    """AM round trip across 2 nodes (Short, Medium by size) vs raw pyzmq ping-pong."""
    parser = _parser(iters, warmup, reps, sizes, latency_us, wait_modes, pin)
    opts = parser.parse_args(list(args or []))
    for name in ("iters", "reps"):
        if getattr(opts, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(opts, name)}")
    if opts.warmup < 0:
        parser.error(f"--warmup must be 0 or more, got {opts.warmup}")
    if not 0 <= opts.latency_us <= 1e6:
        parser.error(f"--latency-us must be within 0..1000000, got {opts.latency_us}")
    if max(opts.sizes) > 16 << 20:
        parser.error("Medium sizes are at most 16 MiB (AMNET_MAX_MEDIUM's limit)")

    plan = {"warmup": opts.warmup, "iters": opts.iters, "sizes": opts.sizes, "pin": opts.pin}
    amnet_opts: dict[str, Any] = {"max_medium": max(65536, max(opts.sizes))}
    if opts.latency_us:
        amnet_opts["net_latency_us"] = opts.latency_us
    shapes = ["short", *(str(s) for s in opts.sizes)]
    raw_modes = raw_modes_for(opts.pin)
    variants = [("amnet", m) for m in opts.wait_modes] + [("raw", m) for m in raw_modes]

    per_rep: dict[tuple[str, str], dict[str, list[dict[str, float]]]] = {
        v: {s: [] for s in shapes} for v in variants}
    cpu: dict[tuple[str, str], dict[str, list[float]]] = {
        v: {s: [] for s in shapes} for v in variants}
    resolved: dict[str, set[str]] = {m: set() for m in opts.wait_modes}
    unpinned: set[str] = set()  # runs that could not pin (or were not asked to)
    bar = Progress("am", len(variants) * opts.reps, enabled=progress)
    try:
        for rep in range(opts.reps):  # interleaved: amnet (each mode), raw block, raw spin
            for who, mode in variants:
                if who == "amnet":
                    r = run_amnet(am_job, plan, wait_mode=mode, **amnet_opts)
                    resolved[mode].add(r["wait_mode"])
                else:
                    r = run_raw({"am": plan}, mode, opts.latency_us, pin=opts.pin)
                got = per_rep[(who, mode)]
                got["short"].append(dist(r["short"]))
                for s in opts.sizes:
                    got[str(s)].append(dist(r["medium"][str(s)]))
                for shape in shapes:
                    cpu[(who, mode)][shape].append(r["cpu"][shape])
                if r.get("core") is None:
                    unpinned.add(f"{who} {mode}")
                bar.step(f"{who} {mode} rep {rep + 1}/{opts.reps}")
    finally:
        bar.close()

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for shape in shapes:
        raw = {m: over_reps(per_rep[("raw", m)][shape]) for m in raw_modes}
        fastest = min(raw_modes, key=lambda m: raw[m]["median"])
        raw_cpu = {m: rate_over_reps(cpu[("raw", m)][shape]) for m in raw_modes}
        for mode in opts.wait_modes:
            a = over_reps(per_rep[("amnet", mode)][shape])
            a_cpu = rate_over_reps(cpu[("amnet", mode)][shape])
            ratio = a["median"] / raw[fastest]["median"]
            ratios = {m: a["median"] / raw[m]["median"] for m in raw_modes}
            kind = "short" if shape == "short" else "medium"
            size = 0 if shape == "short" else int(shape)
            target = None
            if kind == "short":
                target = {"max_ratio": TARGET_SHORT, "met": ratio <= TARGET_SHORT}
            modes = sorted(resolved[mode])
            results.append({"am": kind, "payload_bytes": size, "wait_mode": mode,
                            "wait_mode_resolved": modes, "amnet": a, "raw_block": raw["block"],
                            "raw_spin": raw.get("spin"), "raw_faster": fastest, "ratio": ratio,
                            "ratio_vs": ratios, "target": target,
                            "cpu_per_round_trip": {"amnet": a_cpu,
                                                   "raw_block": raw_cpu["block"],
                                                   "raw_spin": raw_cpu.get("spin")}})
            what = "Short (1 arg)" if kind == "short" else f"Medium {size_label(size)}"
            wm = mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"
            verdict = ""
            if target:
                verdict = (f"<= {TARGET_SHORT:g}: " + ("met" if target["met"] else "missed"))
            cpus = cpu_cells(a_cpu, raw_cpu["block"], raw_cpu.get("spin"))
            rows.append([what, wm, us(a), us(raw["block"]), us(raw.get("spin")),
                         f"{ratio:.2f} (vs {fastest})", verdict, cpus])

    notes = [
        f"µs per round trip: median (p10..p90), each the median over {opts.reps} "
        f"repetitions of that repetition's figure over {opts.iters} timed round trips "
        f"(after {opts.warmup} untimed); amnet and the raw peers interleaved in the same run, "
        "fresh processes every repetition.",
        "amnet: `amnet.run(fn, n=2, nodes=2)`, one rank per simulated node, every AM over the "
        "zmq conduit (TCP loopback). Rank 0: `request_short(1, ping, i)` / "
        "`request_medium(1, mping, payload, i)`, then `ep.wait_until(reply handler ran)`; "
        "rank 1 answers in the handler with `reply_short` / `reply_medium` of the same payload.",
        "raw-zmq: two processes, PULL bound on 127.0.0.1 + PUSH to the other's (the conduit's "
        "sockets, HWM off), a 28-byte header frame (20 + 8 x 1 arg) plus the payload frame; "
        "the echo side answers with a new header of the same size and the payload it got "
        "(received without a copy, sent with one, as amnet does). block: blocking recv(); "
        "spin: recv(NOBLOCK) in a loop.",
        "ratio = amnet median / the faster raw variant's median: lower is better; "
        f"the Short-AM target is <= {TARGET_SHORT:g}.",
        "rank-0 thread CPU: time.thread_time() of the timing thread (amnet rank 0 / the raw "
        "client) over the timed round trips, per round trip, median over repetitions: the "
        "Python-side cost of one round trip on the initiator, without the libzmq I/O thread "
        "and less sensitive to scheduling than the wall-clock figures (a spinning thread's "
        "CPU time is its wall time).",
    ]
    if "auto" in opts.wait_modes:
        notes.append(f"amnet's auto wait mode resolved to "
                     f"{'/'.join(sorted(resolved['auto'])) or '-'} on this machine "
                     f"(2 ranks, one process each, {cpu_count()} usable cores).")
    if opts.latency_us:
        notes.append(f"AMNET_NET_LATENCY_US={opts.latency_us:g}: amnet delays each message "
                     "from the other node by that much; the raw peer holds each received "
                     "message as long (busy wait) before acting on it.")
    if pin_note(opts.pin):
        notes.append(pin_note(opts.pin))
        if unpinned:
            notes.append(f"could not pin: {', '.join(sorted(unpinned))} (no "
                         "os.sched_setaffinity or /proc/self/task here); those ran unpinned.")
    config = {"iters": opts.iters, "warmup": opts.warmup, "reps": opts.reps, "pin": opts.pin,
              "sizes": opts.sizes, "latency_us": opts.latency_us,
              "wait_modes": opts.wait_modes, "amnet_options": amnet_opts,
              "amnet_job": "amnet.run(amnet.bench._jobs.am_job, n=2, nodes=2)",
              "raw_peer": "python amnet/bench/_rawzmq.py server|client MODE",
              "order": [f"{w} {m}" for w, m in variants],
              "timer": "time.perf_counter per round trip, in rank 0 / the raw client"}
    table = {"columns": ["AM", "amnet wait mode", "amnet µs", "raw-zmq block µs",
                         "raw-zmq spin µs", "ratio amnet/raw (lower is better)", "target",
                         "rank-0 thread CPU µs/round trip: amnet / block / spin"],
             "rows": rows}
    return {"suite": "am", "config": config, "results": results, "table": table,
            "notes": notes}
