"""The ``mpi`` sections of ``amnet-bench am`` and ``rma`` (``--conduit ...,mpi``): amnet over
the mpi conduit beside mpi4py on the same MPI with the same transport settings.

**amnet**: the suites' 2-rank jobs (:func:`amnet_bench._jobs.am_job`,
:func:`~amnet_bench._jobs.rma_job`) with one rank per simulated node, ``conduit="mpi"``: its
processes are started by ``mpiexec`` and every AM crosses MPI.

**peer**: ``mpiexec -n 2`` of :mod:`amnet_bench._mpipeer` with mpi4py: the AM emulation a
Python user would write (``Send``, ``Iprobe`` + ``Recv`` + dict dispatch, reply ``Send``) and
the ``Send``/``Recv`` ping-pong for the round trip; ``Isend``/``Irecv`` windows with an ack per
window (OSU's ``osu_bw``) for bandwidth, as amnet's ``put_nbi`` window + ``wait_nbi``.

**Transport** (``--mpi-paths``, each path its own table): ``tcp`` runs both with
:func:`amnet_bench._amnet.mpich_network_path` in their environment (MPICH's network
module forced onto TCP by libfabric, no shared-memory shortcut between the two processes of
this host: the path that crosses hosts on a TCP cluster); ``nolocal`` with
``MPIR_CVAR_NOLOCAL=1`` alone (MPICH's default network module, no shared-memory shortcut:
a round trip of a few µs, the class of an InfiniBand or Slingshot fabric, where amnet's own
cost is no longer hidden). Every repetition runs amnet (each wait mode) and mpi4py one after
the other, fresh processes each; figures are medians over repetitions.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

from ._amnet import mpich_network_path
from ._jobs import am_job, rma_job
from ._mpipeer import run_mpi
from ._options import size_label
from ._report import interleave
from ._stats import over_reps, stats, summary
from ._targets import MPI_BW, MPI_BW_SIZE, MPI_SHORT
from ._twonode import run_amnet, us

#: the section (and its table) of each path
SECTION = {"tcp": "mpi", "nolocal": "mpi-nolocal"}


def path_env(path: str) -> dict[str, str]:
    """The MPICH settings of a path (see the module)."""
    return mpich_network_path() if path == "tcp" else {"MPIR_CVAR_NOLOCAL": "1"}


@contextlib.contextmanager
def network_path(path: str = "tcp") -> Iterator[dict[str, str]]:
    """MPICH's settings of ``path`` for every ``mpiexec`` started meanwhile (amnet's and
    mpi4py's); the other path's settings are out of the environment meanwhile."""
    env = path_env(path)
    keys = set(mpich_network_path()) | set(env)
    saved = {k: os.environ.get(k) for k in keys}
    for k in keys - set(env):
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wm(mode: str, resolved: set[str]) -> str:
    modes = sorted(resolved)
    return mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"


def _env_note(env: dict[str, str]) -> str:
    what = ("MPICH's network module over TCP loopback, no shared-memory shortcut: what "
            "crosses hosts on a TCP cluster" if "FI_PROVIDER" in env else
            "MPICH's default network module, no shared-memory shortcut: a round trip in the "
            "class of a fast fabric's")
    return ("transport: " + " ".join(f"{k}={v}" for k, v in env.items()) + " for amnet's "
            f"mpiexec and mpi4py's alike ({what}).")


def _steps(opts: argparse.Namespace, amnet: Callable[[str], None],
           mpi4py: Callable[[], None]) -> list[tuple[str, Callable[[], None]]]:
    """A repetition of an mpi section: amnet in each wait mode, then mpi4py."""
    return [*((f"amnet mpi {m}", functools.partial(amnet, m)) for m in opts.wait_modes),
            ("mpi4py", mpi4py)]


def _path_title(path: str) -> str:
    return "TCP network path" if path == "tcp" else "no shared memory, MPIR_CVAR_NOLOCAL=1"


def am_section(opts: argparse.Namespace, progress: bool, path: str = "tcp") -> dict[str, Any]:
    """``am``'s mpi section on MPICH's ``path``: Short-AM round trip (and Medium sizes) over
    the mpi conduit beside mpi4py's AM emulation and Send/Recv ping-pong."""
    target_short = MPI_SHORT[path]
    plan = {"warmup": opts.warmup, "iters": opts.iters, "sizes": opts.sizes, "pin": opts.pin}
    step = {"warmup": opts.warmup, "iters": opts.iters, "batch": min(100, opts.iters)}
    mpi_plan = {"pin": "split" if opts.pin == "split" else "none", "pingpong": dict(step),
                "am": dict(step)}
    amnet_opts = {"max_medium": max(65536, max(opts.sizes)), "conduit": "mpi"}
    shapes = ["short", *(str(s) for s in opts.sizes)]
    got: dict[str, dict[str, list]] = {m: {s: [] for s in shapes} for m in opts.wait_modes}
    resolved: dict[str, set[str]] = {m: set() for m in opts.wait_modes}
    peer: dict[str, list] = {"am": [], "pingpong": []}
    info: dict[str, Any] = {}

    def amnet(mode: str) -> None:
        r = run_amnet(am_job, plan, wait_mode=mode, **amnet_opts)
        resolved[mode].add(r["wait_mode"])
        got[mode]["short"].append(stats(r["short"], keep=False))
        for s in opts.sizes:
            got[mode][str(s)].append(stats(r["medium"][str(s)], keep=False))

    def mpi4py() -> None:
        m = run_mpi(mpi_plan)
        peer["am"].append(m["am"])
        peer["pingpong"].append(m["pingpong"])
        info.update({k: m.get(k) for k in ("mpi_library", "mpi4py", "thread_level")})

    with network_path(path) as env:
        interleave(f"am mpi {path}", opts.reps, _steps(opts, amnet, mpi4py), progress)
    emu, pp = over_reps(peer["am"]), over_reps(peer["pingpong"])
    results, rows = [], []
    for shape in shapes:
        for mode in opts.wait_modes:
            a = over_reps(got[mode][shape])
            short = shape == "short"
            ratio = a["median"] / emu["median"] if short else None
            target = ({"max_ratio": target_short, "met": ratio <= target_short}
                      if short else None)
            results.append({"section": SECTION[path], "path": path,
                            "am": "short" if short else "medium",
                            "payload_bytes": 0 if short else int(shape), "wait_mode": mode,
                            "wait_mode_resolved": sorted(resolved[mode]), "amnet": a,
                            "mpi4py_am": emu if short else None,
                            "mpi4py_pingpong": pp if short else None,
                            "ratio_mpi4py_am": ratio, "target": target})
            what = "Short (1 arg)" if short else f"Medium {size_label(int(shape))}"
            verdict = ""
            if target:
                verdict = f"<= {target_short:g}: " + ("met" if target["met"] else "missed")
            rows.append([what, _wm(mode, resolved[mode]), us(a), us(emu) if short else "-",
                         us(pp) if short else "-",
                         f"{ratio:.2f}" if ratio is not None else "-", verdict])
    notes = [
        f"µs per round trip: median (p10..p90), medians over {opts.reps} repetitions of "
        f"{opts.iters} timed round trips (after {opts.warmup} untimed); amnet and mpi4py "
        "interleaved in the same run, fresh processes every repetition.",
        "amnet: `amnet.run(fn, n=2, nodes=2, conduit=\"mpi\")`, one rank per simulated node "
        "(processes started by mpiexec); rank 0 `request_short(1, ping, i)` / "
        "`request_medium(1, mping, payload, i)`, then `ep.wait_until(reply handler ran)`.",
        "mpi4py AM emulation: `Send` of 4 x int64 (tag = handler), `Iprobe(ANY_SOURCE, "
        "ANY_TAG)` + `Recv` + dict dispatch, reply `Send`; Send/Recv: 8-byte ping-pong. Timed "
        f"in batches of {step['batch']}. The Medium rows have no mpi4py shape to compare with.",
        f"ratio = amnet Short median / mpi4py AM emulation median (lower is better; target "
        f"on this path <= {target_short:g}).",
        _env_note(env),
    ]
    if info:
        notes.append(f"peer: {info.get('mpi_library')}, mpi4py {info.get('mpi4py')} "
                     f"(thread level {info.get('thread_level')}); amnet's processes run MPI "
                     "at MPI_THREAD_SERIALIZED.")
    config = {"iters": opts.iters, "warmup": opts.warmup, "reps": opts.reps,
              "sizes": opts.sizes, "wait_modes": opts.wait_modes, "amnet_options": amnet_opts,
              "mpi_plan": mpi_plan, "env": env, "path": path, "peer": info}
    return {"config": config, "results": results, "table": {
        "section": SECTION[path], "title": "Across nodes over MPI: AM round trip on the mpi "
        f"conduit vs mpi4py (same MPI, {_path_title(path)})",
        "columns": ["AM", "amnet wait mode", "amnet µs", "mpi4py AM emulation µs",
                    "mpi4py Send/Recv µs", "ratio amnet/AM emulation", "target"],
        "rows": rows, "notes": notes}}


#: The put_nbi streams of the mpi section, by the rma job's result key.
VARIANTS = {"put_nbi": "bw", "put_nbi(bulk=True)": "bw_bulk",
            "copies of the source alone (put_nbi's extra work), MB/s": "bw_copy"}


def rma_section(opts: argparse.Namespace, progress: bool, seg: int,
                path: str = "tcp") -> dict[str, Any]:
    """``rma``'s mpi section on MPICH's ``path``: put_nbi streaming bandwidth over the mpi
    conduit beside mpi4py Isend/Irecv streaming, and blocking put/get latency."""
    windows = {s: max(2, min(opts.max_windows, -(-opts.bytes // (s * opts.window))))
               for s in opts.sizes}
    plan = {"window": opts.window, "warmup": opts.warmup, "pin": opts.pin,
            "bw": [[s, windows[s]] for s in opts.sizes], "bulk": True,
            "lat_sizes": opts.lat_sizes,
            "lat_iters": opts.iters, "lat_warmup": 10 * opts.warmup}
    mpi_plan = {"window_bytes": max(16 << 20, max(opts.sizes)), "send_bw": {
        "sizes": opts.sizes, "window": opts.window, "warmup": opts.warmup,
        "windows": max(windows.values())}}
    # by variant (put_nbi copying the source, put_nbi(bulk=True)), wait mode and size
    bw: dict[str, dict[str, dict[int, list[float]]]] = {
        v: {m: {s: [] for s in opts.sizes} for m in opts.wait_modes} for v in VARIANTS}
    lat: dict[str, dict[tuple[str, int], list]] = {
        m: {(op, s): [] for op in ("put", "get") for s in opts.lat_sizes}
        for m in opts.wait_modes}
    resolved: dict[str, set[str]] = {m: set() for m in opts.wait_modes}
    peer: dict[int, list[float]] = {s: [] for s in opts.sizes}

    def amnet(mode: str) -> None:
        r = run_amnet(rma_job, plan, wait_mode=mode, conduit="mpi", segment_size=seg)
        resolved[mode].add(r["wait_mode"])
        for s in opts.sizes:
            moved = s * opts.window * windows[s]
            for v, key in VARIANTS.items():
                bw[v][mode][s].append(moved / r[key][str(s)] / 1e6)
        for op in ("put", "get"):
            for s in opts.lat_sizes:
                lat[mode][(op, s)].append(stats(r[op][str(s)], keep=False))

    def mpi4py() -> None:
        m = run_mpi(mpi_plan)
        for s in opts.sizes:
            peer[s].append(m["send_bw"][str(s)]["aggregate"])

    with network_path(path) as env:
        interleave(f"rma mpi {path}", opts.reps, _steps(opts, amnet, mpi4py), progress)
    results, rows = [], []
    for v, key in VARIANTS.items():
        floor = key == "bw_copy"  # what the copying put adds: a floor, with no target
        for s in opts.sizes:
            p = summary(peer[s])
            for mode in opts.wait_modes[:1] if floor else opts.wait_modes:  # one copy row
                a = summary(bw[v][mode][s])
                ratio = a["median"] / p["median"]
                target = ({"min_ratio": MPI_BW, "met": ratio >= MPI_BW}
                          if s == MPI_BW_SIZE and not floor else None)
                results.append({"section": SECTION[path], "path": path,
                                "op": f"{v} bandwidth", "unit": "MB/s",
                                "bytes": s, "wait_mode": mode,
                                "wait_mode_resolved": sorted(resolved[mode]), "amnet": a,
                                "mpi4py_send_bw": p, "ratio": ratio, "better": "higher",
                                "target": target})
                verdict = ""
                if target:
                    verdict = f">= {MPI_BW:g}: " + ("met" if target["met"] else "missed")
                rows.append([v if floor else f"{v} stream MB/s, W={opts.window}",
                             size_label(s), "-" if floor else _wm(mode, resolved[mode]),
                             _mbs(a), _mbs(p), f"{ratio:.2f} (higher is better)", verdict])
    for op in ("put", "get"):
        for s in opts.lat_sizes:
            for mode in opts.wait_modes:
                a = over_reps(lat[mode][(op, s)])
                results.append({"section": SECTION[path], "path": path,
                                "op": f"blocking {op} latency",
                                "unit": "s", "bytes": s, "wait_mode": mode,
                                "wait_mode_resolved": sorted(resolved[mode]), "amnet": a,
                                "better": "lower", "target": None})
                rows.append([f"blocking {op} µs", size_label(s), _wm(mode, resolved[mode]),
                             us(a), "-", "-", ""])
    notes = [
        f"Bandwidth: MB/s (10^6 bytes/s), median (min..max) over {opts.reps} repetitions. "
        f"amnet: `ep.put_nbi(1, k*S, src)` for k < {opts.window}, then `ep.wait_nbi()`, "
        + ", ".join(f"{windows[s]} windows of {size_label(s)}" for s in opts.sizes)
        + f" after {opts.warmup} untimed. put_nbi: `src` may change as soon as the call "
        "returns, so amnet sends a copy (a put over max_medium travels as an envelope and a "
        "bulk MPI message, from a bounce buffer); put_nbi(bulk=True): `src` stays unchanged "
        "until wait_nbi, MPI_Isend's own contract, so a put of 16 KiB or more goes from `src` "
        "to the target's segment with no copy on either side. The same job measures both, "
        "and the copies alone (np.copyto of `src` into 8 buffers, as many as the stream "
        "makes): a copying stream moves its bytes through the CPU once more, so where the "
        "copies run at C MB/s and the bulk stream at B, the copying one cannot pass "
        "1/(1/B + 1/C) on this path.",
        f"mpi4py: `Isend` x {opts.window} of S bytes + `Waitall`, the receiver `Irecv`s into "
        "consecutive slots of one buffer + `Waitall`, then an 8-byte ack (OSU osu_bw), "
        f"{max(windows.values())} windows of each size after {opts.warmup} untimed; a "
        "repetition's figure is their bytes over their time, as osu_bw reports and as "
        "amnet's streams are timed.",
        f"ratio = amnet / mpi4py Send/Recv (higher is better; target at 1 MiB: >= "
        f"{MPI_BW:g}). Latency rows: amnet's blocking put/get round trips, µs median "
        "(p10..p90); mpi4py has no shape of theirs here.",
        _env_note(env),
    ]
    config = {"reps": opts.reps, "sizes": opts.sizes, "window": opts.window,
              "windows": windows, "lat_sizes": opts.lat_sizes, "iters": opts.iters,
              "wait_modes": opts.wait_modes, "mpi_plan": mpi_plan, "env": env, "path": path,
              "amnet_options": {"conduit": "mpi", "segment_size": seg}}
    return {"config": config, "results": results, "table": {
        "section": SECTION[path], "title": "Across nodes over MPI: put/get on the mpi conduit "
        f"vs mpi4py Send/Recv (same MPI, {_path_title(path)})",
        "columns": ["operation", "size", "amnet wait mode", "amnet", "mpi4py Send/Recv",
                    "ratio amnet/mpi4py", "target"], "rows": rows, "notes": notes}}


def _mbs(s: dict[str, Any]) -> str:
    return f"{s['median']:.0f} ({s['min']:.0f}..{s['max']:.0f})"
