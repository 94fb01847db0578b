"""Suite ``vis``: the autoNB paper's Fig. 6 across two simulated nodes.

A strided get of ``--elem``-byte elements (256) ``--stride`` bytes apart (850) at both ends,
for totals of 1 KiB..4 MiB, done three ways in the same job (:mod:`amnet_bench._visjob`):
one ``ep.vis.get_strided`` call, a flood of single ``ep.get_nbi`` of one element each (then
``wait_nbi``), and one contiguous ``ep.get`` of the same number of bytes (the bandwidth
ceiling). The job is ``amnet.run(fn, n=2, nodes=2)`` (TCP loopback between the nodes) once
per ``--conduit`` (default both: ``zmq`` and ``tcp``), ``--latency`` value
(``AMNET_NET_LATENCY_US``, default 0 and 10) and repetition, fresh processes each; within a
job the three are interleaved, each sample at least ``--min-time`` of back-to-back calls.
Figures are MB/s (10^6 bytes per second) of the medians over repetitions of each
repetition's median. Targets at 1 MiB: VIS >= 20x the flood and >= 0.5x the contiguous get,
judged per conduit. With ``--out``, ``vis_fig6_<conduit>.png`` plots the three curves per
latency.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import _options as options
from ._options import size_label
from ._registry import suite
from ._report import Progress
from ._stats import median
from ._targets import VIS_CONTIG, VIS_FLOOD, VIS_SIZE
from ._twonode import run_amnet, segment_for
from ._visjob import vis_job

METHODS = ("vis", "flood", "contig")


def _parser(d: dict[str, Any]) -> options.Parser:
    """The options, with the suite's defaults ``d`` (its keywords by name)."""
    p = options.Parser(
        "vis", "Strided get across 2 simulated nodes (the autoNB paper's Fig. 6): one "
               "VIS call vs a flood of single gets vs one contiguous get of the same "
               "bytes, per emulated network latency. Reports MB/s (higher is better).")
    options.reps(p, d["reps"], "a fresh job per conduit and latency each")
    options.sizes(p, d["sizes"], "total bytes per transfer")
    options.count(p, "--elem", d["elem"], "bytes per element", metavar="B")
    options.count(p, "--stride", d["stride"], "bytes from one element to the next, both "
                  "ends", metavar="B")
    options.latency(p, d["latencies"], "AMNET_NET_LATENCY_US values, a job each", many=True,
                    dest="latencies")
    options.conduits(p, d["conduits"], "conduits between the nodes, a job each",
                     dest="conduits")
    options.count(p, "--samples", d["samples"], "timed samples per size and method in each "
                  "job")
    options.min_time(p, d["min_time"], "seconds of back-to-back calls per sample at least")
    return p


PLOTS = ("vis_fig6_<conduit>.png",)


@suite("vis", plots=PLOTS)
def vis(args: Sequence[str] | None = None, *, reps: int = 3,
        sizes: str | Iterable[int] = "1K,4K,16K,64K,256K,1M,4M", elem: int = 256,
        stride: int = 850, latencies: str | Iterable[float] = "0,10", samples: int = 3,
        min_time: float = 0.02, conduits: str | Iterable[str] = "zmq,tcp",
        progress: bool = True) -> dict[str, Any]:
    """Strided get across 2 nodes: one VIS call vs a flood of gets vs a contiguous get."""
    parser = _parser(locals())
    opts = options.parse(parser, args, {
        "reps": 1, "sizes": [1024, 64 << 10, 1 << 20], "samples": 1, "min_time": 0.005},
        "1 repetition of 1 KiB, 64 KiB and 1 MiB, one 5 ms sample each", fixed={
            "--ranks": ("2", "vis times one rank's strided gets from another"),
            "--nodes": ("2", "the paper's experiment is across 2 nodes"),
            "--splits": ("1", "its two ranks are processes")}, plots=PLOTS)
    if opts.stride < opts.elem:
        parser.error(f"--stride ({opts.stride}) must be at least --elem ({opts.elem}): the "
                     "elements of a get may not overlap")
    bad = [s for s in opts.sizes if s % opts.elem]
    if bad:
        parser.error(f"sizes must be multiples of --elem ({opts.elem}); not {bad}")
    biggest = max(opts.sizes) // opts.elem * opts.stride
    if biggest > 1 << 30:
        parser.error(f"the largest transfer spans {biggest} bytes of segment; at most 1 GiB")
    segment = segment_for(biggest)
    plan = {"sizes": opts.sizes, "elem": opts.elem, "stride": opts.stride,
            "samples": opts.samples, "min_s": opts.min_time}

    bar = Progress("vis", opts.reps * len(opts.conduits) * len(opts.latencies), progress)
    per: dict[tuple[str, float, int, str], list[float]] = {}
    for rep in range(opts.reps):
        for cd in opts.conduits:
            for lat in opts.latencies:
                got = run_amnet(vis_job, plan, net_latency_us=lat, segment_size=segment,
                                conduit=cd)
                for size in opts.sizes:
                    for m in METHODS:
                        per.setdefault((cd, lat, size, m), []).append(
                            median(got[str(size)][m]))
                bar.step(f"rep {rep + 1}, {cd}, latency {lat:g} µs")
    bar.close()

    results, rows, notes = [], [], []
    figures: list[dict[str, Any]] = []
    for cd in opts.conduits:
        series: list[dict[str, Any]] = []
        for lat in opts.latencies:
            curves: dict[str, list[float]] = {m: [] for m in METHODS}
            for size in opts.sizes:
                taken = {m: per[(cd, lat, size, m)] for m in METHODS}
                sec = {m: median(taken[m]) for m in METHODS}
                mbs = {m: size / sec[m] / 1e6 for m in METHODS}
                for m in METHODS:
                    curves[m].append(mbs[m])
                results.append({"conduit": cd, "latency_us": lat, "size": size,
                                "seconds": sec, "mb_s": mbs, "samples": taken})
                vf, vc = mbs["vis"] / mbs["flood"], mbs["vis"] / mbs["contig"]
                rows.append([cd, f"{lat:g}", size_label(size), f"{mbs['vis']:.1f}",
                             f"{mbs['flood']:.1f}", f"{mbs['contig']:.1f}", f"{vf:.1f}x",
                             f"{vc:.2f}x"])
                if size == VIS_SIZE:
                    notes.append(
                        f"{cd}, latency {lat:g} µs, 1 MiB: VIS = {vf:.1f}x the flood (target "
                        f">= {VIS_FLOOD:g}x: {'met' if vf >= VIS_FLOOD else 'missed'}), "
                        f"{vc:.2f}x the contiguous get (target >= {VIS_CONTIG:g}x: "
                        f"{'met' if vc >= VIS_CONTIG else 'missed'})")
            style = "-" if lat == opts.latencies[0] else "--"
            for m, label in (("vis", "VIS get_strided"), ("flood", "flood of single gets"),
                             ("contig", "contiguous get")):
                series.append({"label": f"{label}, {lat:g} µs", "x": list(opts.sizes),
                               "y": curves[m], "style": style, "group": m})
        figures.append({"file": f"vis_fig6_{cd}.png",
                        "title": f"Strided get across 2 nodes ({cd} conduit): {opts.elem} B "
                                 f"elements, stride {opts.stride} B",
                        "xlabel": "total bytes per transfer", "ylabel": "MB/s",
                        "better": "higher", "xlog": True, "xbytes": True,
                        "caption": [f"Each line style is one emulated network latency "
                                    f"(AMNET_NET_LATENCY_US: "
                                    f"{', '.join(f'{lat:g} µs' for lat in opts.latencies)})."],
                        "series": series})
    notes.append(f"{opts.reps} repetitions x {opts.samples} samples per size and method; a "
                 f"sample is at least {opts.min_time:g} s of back-to-back calls. Ratios are "
                 "of medians from the same jobs.")
    return {
        "suite": "vis",
        "config": {"reps": opts.reps, "sizes": opts.sizes, "elem": opts.elem,
                   "stride": opts.stride, "latencies_us": opts.latencies,
                   "samples": opts.samples, "min_time_s": opts.min_time,
                   "segment_size": segment, "conduits": opts.conduits},
        "results": results,
        "table": {"columns": ["conduit", "latency µs", "total", "VIS MB/s", "flood MB/s",
                              "contiguous MB/s", "VIS / flood", "VIS / contiguous"],
                  "rows": rows},
        "notes": notes,
        "figures": figures,
    }
