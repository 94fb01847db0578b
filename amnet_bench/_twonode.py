"""What the ``am`` and ``rma`` suites share: options, a 2-node amnet job, the raw-zmq peer.

Both suites time amnet across two simulated nodes (``amnet.run(fn, n=2, nodes=2)``: one rank
per node, all traffic over the zmq conduit on TCP loopback) beside the raw-zmq peer
(:mod:`amnet_bench._rawzmq`) in its two wait strategies, interleaved in one run:
amnet, raw-zmq block, raw-zmq spin, amnet, ... Every repetition starts fresh processes.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import Any

from . import _options as options
from ._registry import BenchError
from ._report import interleave, rank_job, ranks_result

RAW_MODES = ("block", "spin")  # the raw-zmq peer's wait strategies
JOB_TIMEOUT_S = 300.0


def add_options(p: options.Parser, d: dict[str, Any], ops: str, conduit_peer: str,
                aio: str) -> None:
    """The options of ``am`` and ``rma``, with the suite's defaults ``d`` (its keywords by
    name): ``ops`` says what its node section times, ``conduit_peer`` what the mpi conduit
    runs beside, ``aio`` what its aio section measures."""
    options.reps(p, d["reps"], "a fresh amnet job and raw peers each")
    options.pin(p, d["pin"])
    options.conduits(p, d["conduit"], "the conduits between the nodes, each its own table: "
                     f"zmq and tcp beside raw pyzmq, mpi beside {conduit_peer}")
    options.mpi_paths(p)
    options.wait_modes(p, d["wait_modes"])
    options.sections(p, d["node"], d["network"], d["aio"], aio)
    options.count(p, "--node-iters", d["node_iters"], f"node section: timed {ops} per "
                  "repetition, rounded up to whole batches", metavar="I")
    options.warmup(p, d["node_warmup"], f"node section: untimed {ops} first",
                   flag="--node-warmup")
    options.count(p, "--node-batch", d["node_batch"], f"node section: {ops} per timed batch",
                  metavar="B")


SKIPPED = "skipped (--pin same)"


def raw_modes_for(pin: str) -> tuple[str, ...]:
    """The raw-zmq variants a run measures: both, but no spinning when every thread shares
    one core (two spinning processes on one core only progress at scheduler ticks, ms)."""
    return ("block",) if pin == "same" else RAW_MODES


def pin_note(pin: str) -> str | None:
    """The note a pinned run adds under its table."""
    if pin == "none":
        return None
    what = ("every thread of both processes (Python and libzmq I/O) on the first usable core"
            if pin == "same" else "each process's threads on its own core (rank 0 / the raw "
            "client on the first, rank 1 / the raw server on the second)")
    note = (f"--pin {pin}: {what}, for amnet and the raw peer alike, set with "
            "os.sched_setaffinity per thread once the sockets exist (amnet's auto wait mode "
            "was resolved before, from the unpinned affinity).")
    if pin == "same":
        note += (" raw-zmq spin is not run: two spinning processes on one core only make "
                 "progress when the scheduler switches them (milliseconds per message).")
    return note


class Network:
    """The runs of a network section (``am``, ``rma``): in every repetition amnet's job in
    each ``--wait-mode``, then the raw-zmq peer in each of its modes, fresh processes each.
    After :meth:`run`, ``resolved`` says what each amnet wait mode resolved to and
    ``unpinned`` which runs could not pin."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.raw_modes = raw_modes_for(opts.pin)
        self.variants = ([("amnet", m) for m in opts.wait_modes]
                         + [("raw", m) for m in self.raw_modes])
        self.resolved: dict[str, set[str]] = {m: set() for m in opts.wait_modes}
        self.unpinned: set[str] = set()

    def run(self, label: str, job: Callable, plan: dict[str, Any], raw_plan: dict[str, Any],
            amnet_opts: dict[str, Any], take: Callable[[str, str, dict[str, Any]], None],
            progress: bool, latency_us: float = 0.0, buf_size: int = 1 << 20) -> None:
        """Run every repetition: amnet's ``job`` through ``plan`` (``amnet_opts`` for
        ``amnet.run``), the raw peer through ``raw_plan``; ``take(who, mode, result)``
        keeps each run's figures."""

        def step(who: str, mode: str) -> tuple[str, Callable[[], None]]:
            def one() -> None:
                if who == "amnet":
                    r = run_amnet(job, plan, wait_mode=mode, **amnet_opts)
                    self.resolved[mode].add(r["wait_mode"])
                else:
                    r = run_raw(raw_plan, mode, latency_us, buf_size, pin=self.opts.pin)
                take(who, mode, r)
                if r.get("core") is None:
                    self.unpinned.add(f"{who} {mode}")
            return f"{who} {mode}", one

        interleave(label, self.opts.reps, [step(w, m) for w, m in self.variants], progress)

    def mode_label(self, mode: str) -> str:
        """``auto`` as it resolved: ``auto (spin/block)``, or the mode alone."""
        modes = sorted(self.resolved[mode])
        return mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"

    def notes(self, *more: str) -> list[str]:
        """The notes every network table ends with: what auto resolved to, ``more``, and
        how the runs were pinned."""
        notes = []
        if "auto" in self.opts.wait_modes:
            notes.append(f"amnet's auto wait mode resolved to "
                         f"{'/'.join(sorted(self.resolved['auto'])) or '-'} on this machine "
                         f"(2 ranks, one process each, {cpu_count()} usable cores).")
        notes += more
        if pin_note(self.opts.pin):
            notes.append(pin_note(self.opts.pin))
            if self.unpinned:
                notes.append(f"could not pin: {', '.join(sorted(self.unpinned))} (no "
                             "os.sched_setaffinity or /proc/self/task here); those ran "
                             "unpinned.")
        return notes

    def config(self) -> dict[str, Any]:
        """The section's config entries for its runs."""
        return {"wait_modes": self.opts.wait_modes, "pin": self.opts.pin,
                "order": [f"{w} {m}" for w, m in self.variants]}


def merge_sections(suite: str, *sections: dict[str, Any] | None) -> dict[str, Any]:
    """A suite's result from its sections (each a dict of ``config``, ``results`` and
    ``table``, or None when not run): every table, the first as ``table``. The config of
    the first section across nodes is the suite's; the node section's goes under ``node``,
    each later one's under its section's name (a second conduit's network section under
    ``network:CONDUIT``)."""
    tables: list[dict[str, Any]] = []
    out: dict[str, Any] = {"suite": suite, "config": {}, "results": []}
    placed = False  # the config of the first section across nodes is the suite's
    for sec in sections:
        if sec is None:
            continue
        name = sec["table"]["section"]
        if name == "node":
            out["config"]["node"] = sec["config"]
        elif not placed:
            out["config"].update(sec["config"])
            placed = True
        else:
            key = name if name not in out["config"] else \
                f"{name}:{sec['config'].get('amnet_options', {}).get('conduit')}"
            out["config"][key] = sec["config"]
        out["results"] += sec["results"]
        tables.append(sec["table"])
    out["config"]["sections"] = [t["section"] for t in tables]
    out["tables"] = tables
    out["table"] = {"columns": tables[0]["columns"], "rows": tables[0]["rows"]}
    out["notes"] = [n for t in tables for n in t["notes"]]
    return out


def segment_for(nbytes: int) -> int:
    """The segment size for a job that addresses ``nbytes`` of it: the next power of two,
    at least 1 MiB."""
    return max(1 << 20, 1 << (max(nbytes, 1) - 1).bit_length())


def run_amnet(fn: Callable, plan: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Run ``fn(ep, plan)`` as a 2-rank, 2-node amnet job; return rank 0's result."""
    import amnet

    try:
        res = amnet.run(functools.partial(fn, plan=plan), n=2, nodes=2,
                        timeout=JOB_TIMEOUT_S, **kw)
    except Exception as e:
        raise BenchError(f"the amnet job {fn.__name__} (n=2, nodes=2, {kw}) failed: "
                         f"{type(e).__name__}: {e}") from e
    return res[0]


def run_job(fn: Callable, plan: dict[str, Any], **kw: Any) -> list[Any]:
    """Run ``fn(ep, plan)`` as ``amnet.run(..., **kw)``; return every rank's result.
    Raises BenchError naming the job when it fails."""
    import amnet

    try:
        res = amnet.run(functools.partial(rank_job, fn, plan=plan), timeout=JOB_TIMEOUT_S,
                        **kw)
    except Exception as e:
        raise BenchError(f"the amnet job {fn.__name__} ({kw}) failed: "
                         f"{type(e).__name__}: {e}") from e
    return ranks_result(res)


def run_raw(plan: dict[str, Any], mode: str, latency_us: float = 0.0,
            buf_size: int = 1 << 20, pin: str = "none") -> dict[str, Any]:
    """Run the raw-zmq peer (two processes) through ``plan`` in wait ``mode``."""
    from ._rawzmq import run_pair

    try:
        return run_pair(plan, mode, latency_us, buf_size, pin)
    except Exception as e:
        raise BenchError(f"the raw-zmq peer ({mode}) failed: {type(e).__name__}: {e}") from e


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_cells(*figures: dict[str, Any] | None) -> str:
    """``a / b / c``: the medians in µs, ``-`` for a variant not run."""
    return " / ".join("-" if f is None else f"{f['median'] * 1e6:.1f}" for f in figures)


def us(s: dict[str, Any] | None) -> str:
    """``median (p10..p90)`` in µs."""
    if s is None:
        return SKIPPED
    return f"{s['median'] * 1e6:.1f} ({s['p10'] * 1e6:.1f}..{s['p90'] * 1e6:.1f})"
