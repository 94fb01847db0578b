"""Suite ``am``: AM round-trip latency across nodes beside raw pyzmq ping-pong (the network
section), and node-local Short-AM round trips in the hybrid paper's Table 2 configurations
beside raw-shm and mpi4py (the node section). ``--no-node`` / ``--no-network`` run one only.

Network section.

**amnet**: a 2-rank job with one rank per simulated node (``amnet.run(fn, n=2, nodes=2)``, so
every message crosses the conduit, ``--conduit``, default zmq, over TCP loopback). Rank 0 sends
``request_short(1, ping, i)`` and waits with ``ep.wait_until`` until the ``pong`` reply handler
has run; rank 1 serves inside ``ep.wait_until``. Then the same with Medium AMs per payload
size: ``request_medium(1, mping, payload, i)``, answered by ``reply_medium`` with the same
payload. Each round trip is timed with ``time.perf_counter`` after ``--warmup`` untimed ones.

**peer** (:mod:`amnet_bench._rawzmq`): two processes, each with a PULL socket bound on
127.0.0.1 and a PUSH connected to the other's (the conduit's sockets), exchanging the same
message shapes (a 28-byte header, i.e. ``20 + 8 * nargs`` with one argument, plus the payload
frame for Medium), once receiving with blocking ``recv()`` and once in a ``recv(NOBLOCK)``
spin loop. The headline ratio compares amnet with the faster of the two.

Every repetition runs amnet, raw-zmq block and raw-zmq spin one after the other (fresh
processes each), and the figures are medians over repetitions of each repetition's median
(p10, p90) round trip.

Node section (the hybrid paper's Table 2).

**amnet**: the same Short-AM ping-pong (``request_short(1, ping, i)``, rank 0 in
``ep.wait_until`` until the ``pong`` reply handler ran, rank 1 serving in ``ep.wait_until``),
one fresh 2-rank job on one node per configuration of :data:`amnet_bench._node.CONFIGS`:
2 threads (one process, in-line AMs), 2 procs (PSHM), 2 procs + thread-safety,
2 procs + loopback (``pshm=False``: the zmq conduit), 2 procs + thread-safety + loopback.
Round trips are timed in batches of ``--node-batch`` (a ``perf_counter`` pair costs about
0.1 µs, as much as what is measured); a sample is a batch's time / its size.

**peers**, timed the same way: raw-shm (:func:`amnet_bench._shmpeer.raw_shm_rtt`, two
processes spinning on a shared page: the floor), mpi4py Send/Recv ping-pong and mpi4py AM
emulation (Iprobe + Recv + dict dispatch + reply Send) (:func:`amnet_bench._mpipeer.run_mpi`,
MPICH's shared-memory transport, mpi4py's default thread level).

Every repetition runs each configuration (each wait mode), raw-shm and mpi4py one after the
other, fresh processes each; targets are checked on the medians over repetitions.

aio section (:mod:`amnet_bench._aio`, ``--no-aio`` skips it): amnet.aio's awaited 8 B get and
Short rpc beside their blocking forms, 1000 rpcs awaited with ``asyncio.gather`` beside
handles, and the CPU of an idle awaiting rank, within a node and across nodes.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from . import _mpinet, _node
from . import _options as options
from ._aio import aio_section
from ._jobs import am_job, node_am_job
from ._mpipeer import run_mpi
from ._options import size_label
from ._registry import suite
from ._report import interleave
from ._shmpeer import python_calls_rtt, raw_shm_rtt
from ._stats import median, over_reps, stats, summary
from ._targets import (
    AM_PROCS_VS_MPI_AM,
    AM_PROCS_VS_RAW_SHM,
    AM_SHORT,
    AM_THREADS_VS_CALLS,
    AM_THREADS_VS_PROCS,
)
from ._twonode import (
    Network,
    add_options,
    cpu_cells,
    merge_sections,
    us,
)


def _parser(d: dict[str, Any]) -> options.Parser:
    """The options, with the suite's defaults ``d`` (its keywords by name)."""
    p = options.Parser(
        "am", "Network section: Short and Medium AM round trip across 2 simulated nodes "
              "(--conduit, TCP loopback) beside raw pyzmq ping-pong with the same message "
              "shapes (blocking and spinning receivers). Node section: the "
              "hybrid paper's Table 2, Short-AM round trip between 2 ranks of one node "
              "as 2 threads, 2 procs (PSHM), + thread-safety, + loopback, beside "
              "raw-shm and mpi4py (AM emulation, Send/Recv). Peers interleaved in the "
              "same run. Reports median (p10..p90) µs and ratios (lower is better).")
    add_options(p, d, "round trips of each configuration and peer",
                "mpi4py on the same MPI", "amnet.aio's awaited get and rpc beside the "
                "blocking forms, 1000 rpcs with asyncio.gather beside handles, the CPU of an "
                "idle awaiting rank")
    options.count(p, "--iters", d["iters"], "timed round trips per shape per repetition",
                  metavar="I")
    options.warmup(p, d["warmup"], "untimed round trips before each shape's timed ones")
    options.sizes(p, d["sizes"], "Medium payload sizes", most=16 << 20,
                  unit="a Medium payload (AMNET_MAX_MEDIUM's limit)")
    options.latency(p, d["latency_us"], "AMNET_NET_LATENCY_US for amnet; the raw peer holds "
                    "each received message as long", flag="--latency-us")
    return p


@suite("am")
def am(args: Sequence[str] | None = None, *, iters: int = 2000, warmup: int = 200,
       reps: int = 7, sizes: str | Iterable[int] = "8,1K,64K", latency_us: float = 0.0,
       wait_modes: str | Iterable[str] = "auto", pin: str = "none", node: bool = True,
       network: bool = True, node_iters: int = 10000, node_warmup: int = 1000,
       node_batch: int = 200, conduit: str = "zmq", aio: bool = True,
       progress: bool = True) -> dict[str, Any]:
    """AM round trip across 2 nodes vs raw pyzmq, on one node vs raw-shm/mpi4py; amnet.aio.

    The network and node sections, then amnet.aio's awaits beside the blocking forms."""
    opts = options.parse(_parser(locals()), args, {
        "reps": 1, "iters": 200, "warmup": 20, "sizes": [8, 1024], "node_iters": 1000,
        "node_warmup": 100, "node_batch": 100}, "1 repetition, 200 round trips of 8 B and "
        "1 KiB, 1000 on the node", fixed={
            "--ranks": ("2", "am times round trips between a pair of ranks (amnet-bench "
                             "hybrid sweeps rank counts)"),
            "--splits": ("1,2", "its node section runs the pair as 2 processes (1) and as 2 "
                                "rank-threads of one process (2), side by side")})

    nets = []
    if opts.network:
        for c in opts.conduit:
            if c == "mpi":
                for path in opts.mpi_paths:
                    nets.append(_mpinet.am_section(opts, progress, path))
            else:
                nets.append(_network(argparse.Namespace(**{**vars(opts), "conduit": c}),
                                     progress))
    return merge_sections("am", *nets, _node_section(opts, progress) if opts.node else None,
                          aio_section(opts, progress) if opts.aio else None)


def _network(opts: argparse.Namespace, progress: bool) -> dict[str, Any]:
    """The network section: its config, results and table (with its notes)."""
    plan = {"warmup": opts.warmup, "iters": opts.iters, "sizes": opts.sizes, "pin": opts.pin}
    amnet_opts: dict[str, Any] = {"max_medium": max(65536, max(opts.sizes)),
                                  "conduit": opts.conduit}
    if opts.latency_us:
        amnet_opts["net_latency_us"] = opts.latency_us
    shapes = ["short", *(str(s) for s in opts.sizes)]
    net = Network(opts)
    raw_modes = net.raw_modes
    per_rep: dict[tuple[str, str], dict[str, list[dict[str, float]]]] = {
        v: {s: [] for s in shapes} for v in net.variants}
    cpu: dict[tuple[str, str], dict[str, list[float]]] = {
        v: {s: [] for s in shapes} for v in net.variants}

    def take(who: str, mode: str, r: dict[str, Any]) -> None:
        got = per_rep[(who, mode)]
        got["short"].append(stats(r["short"], keep=False))
        for s in opts.sizes:
            got[str(s)].append(stats(r["medium"][str(s)], keep=False))
        for shape in shapes:
            cpu[(who, mode)][shape].append(r["cpu"][shape])

    net.run("am", am_job, plan, {"am": plan}, amnet_opts, take, progress, opts.latency_us)

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for shape in shapes:
        raw = {m: over_reps(per_rep[("raw", m)][shape]) for m in raw_modes}
        fastest = min(raw_modes, key=lambda m: raw[m]["median"])
        raw_cpu = {m: summary(cpu[("raw", m)][shape]) for m in raw_modes}
        for mode in opts.wait_modes:
            a = over_reps(per_rep[("amnet", mode)][shape])
            a_cpu = summary(cpu[("amnet", mode)][shape])
            ratio = a["median"] / raw[fastest]["median"]
            ratios = {m: a["median"] / raw[m]["median"] for m in raw_modes}
            kind = "short" if shape == "short" else "medium"
            size = 0 if shape == "short" else int(shape)
            target = None
            if kind == "short":
                target = {"max_ratio": AM_SHORT, "met": ratio <= AM_SHORT}
            results.append({"section": "network", "am": kind, "payload_bytes": size,
                            "wait_mode": mode,
                            "wait_mode_resolved": sorted(net.resolved[mode]), "amnet": a,
                            "raw_block": raw["block"], "raw_spin": raw.get("spin"),
                            "raw_faster": fastest, "ratio": ratio,
                            "ratio_vs": ratios, "target": target,
                            "cpu_per_round_trip": {"amnet": a_cpu,
                                                   "raw_block": raw_cpu["block"],
                                                   "raw_spin": raw_cpu.get("spin")}})
            what = "Short (1 arg)" if kind == "short" else f"Medium {size_label(size)}"
            verdict = ""
            if target:
                verdict = (f"<= {AM_SHORT:g}: " + ("met" if target["met"] else "missed"))
            cpus = cpu_cells(a_cpu, raw_cpu["block"], raw_cpu.get("spin"))
            rows.append([what, net.mode_label(mode), us(a), us(raw["block"]),
                         us(raw.get("spin")), f"{ratio:.2f} (vs {fastest})", verdict, cpus])

    notes = [
        f"µs per round trip: median (p10..p90), each the median over {opts.reps} "
        f"repetitions of that repetition's figure over {opts.iters} timed round trips "
        f"(after {opts.warmup} untimed); amnet and the raw peers interleaved in the same run, "
        "fresh processes every repetition.",
        "amnet: `amnet.run(fn, n=2, nodes=2)`, one rank per simulated node, every AM over the "
        f"{opts.conduit} conduit (TCP loopback). Rank 0: `request_short(1, ping, i)` / "
        "`request_medium(1, mping, payload, i)`, then `ep.wait_until(reply handler ran)`; "
        "rank 1 answers in the handler with `reply_short` / `reply_medium` of the same payload.",
        "raw-zmq: two processes, PULL bound on 127.0.0.1 + PUSH to the other's (the conduit's "
        "sockets, HWM off), a 28-byte header frame (20 + 8 x 1 arg) plus the payload frame; "
        "the echo side answers with a new header of the same size and the payload it got "
        "(received without a copy, sent with one, as amnet does). block: blocking recv(); "
        "spin: recv(NOBLOCK) in a loop.",
        "ratio = amnet median / the faster raw variant's median: lower is better; "
        f"the Short-AM target is <= {AM_SHORT:g}.",
        "rank-0 thread CPU: time.thread_time() of the timing thread (amnet rank 0 / the raw "
        "client) over the timed round trips, per round trip, median over repetitions: the "
        "Python-side cost of one round trip on the initiator, without the libzmq I/O thread "
        "and less sensitive to scheduling than the wall-clock figures (a spinning thread's "
        "CPU time is its wall time).",
    ]
    notes += net.notes(*[f"AMNET_NET_LATENCY_US={opts.latency_us:g}: amnet delays each "
                         "message from the other node by that much; the raw peer holds each "
                         "received message as long (busy wait) before acting on it."]
                       * bool(opts.latency_us))
    config = {"iters": opts.iters, "warmup": opts.warmup, "reps": opts.reps,
              "sizes": opts.sizes, "latency_us": opts.latency_us, **net.config(),
              "amnet_options": amnet_opts,
              "amnet_job": "amnet.run(amnet_bench._jobs.am_job, n=2, nodes=2)",
              "raw_peer": "python amnet_bench/_rawzmq.py server|client MODE",
              "timer": "time.perf_counter per round trip, in rank 0 / the raw client"}
    table = {"columns": ["AM", "amnet wait mode", "amnet µs", "raw-zmq block µs",
                         "raw-zmq spin µs", "ratio amnet/raw (lower is better)", "target",
                         "rank-0 thread CPU µs/round trip: amnet / block / spin"],
             "rows": rows}
    return {"config": config, "results": results,
            "table": {"section": "network", "title": f"Across nodes: AM round trip over the "
                      f"{opts.conduit} conduit (TCP loopback) vs raw-zmq", **table,
                      "notes": notes}}


def _runs_cell(fig: dict[str, Any] | None) -> str:
    """The spread over runs: ``runs a..b µs``, the least and greatest repetition's median."""
    if not fig or not fig.get("reps"):
        return ""
    ms = [r["median"] * 1e6 for r in fig["reps"]]
    return f"runs {min(ms):.2f}..{max(ms):.2f} µs"


def _node_section(opts: argparse.Namespace, progress: bool) -> dict[str, Any]:
    """The node section (the hybrid paper's Table 2): config, results, table with notes."""
    pin = _node.node_pin(opts.pin)
    plan = {"warmup": opts.node_warmup, "iters": opts.node_iters, "batch": opts.node_batch,
            "pin": pin}
    step = {"warmup": opts.node_warmup, "iters": opts.node_iters, "batch": opts.node_batch}
    mpi_plan = {"pin": pin, "pingpong": dict(step), "am": dict(step)}
    mpi_why = _node.mpi_missing()
    configs = [(label, key, kw, mode) for mode in opts.wait_modes
               for label, key, kw in _node.CONFIGS]
    per_rep: dict[tuple[str, str], list[dict[str, Any]]] = {
        (key, mode): [] for _, key, _, mode in configs}
    cpu: dict[tuple[str, str], list[float]] = {(key, mode): [] for _, key, _, mode in configs}
    # in-line: each run's median ratio to the python calls loop timed in turns with it
    turns: dict[str, list[float]] = {mode: [] for mode in opts.wait_modes}
    resolved: dict[tuple[str, str], set[str]] = {(key, mode): set()
                                                 for _, key, _, mode in configs}
    peers: dict[str, list[dict[str, Any]]] = {"raw_shm": [], "mpi_am": [], "mpi_pingpong": [],
                                              "calls": []}
    peer_info: dict[str, Any] = {}
    batch = min(opts.node_batch, opts.node_iters)

    def amnet(key: str, kw: dict[str, Any], mode: str) -> None:
        r = _node.run_node(node_am_job, plan, wait_mode=mode, **kw)
        per_rep[(key, mode)].append(stats(r["short"]))
        cpu[(key, mode)].append(r["cpu"])
        resolved[(key, mode)].add(r["wait_mode"])
        if "turns" in r:
            turns[mode].append(median(r["turns"]))

    def raw_shm() -> None:  # and python calls, in the same step
        shm = raw_shm_rtt(opts.node_iters, opts.node_warmup, pin, opts.node_batch)
        peers["raw_shm"].append(shm)
        peer_info["raw_shm"] = {k: shm.get(k) for k in ("spin", "usable_cores", "pin",
                                                        "batch", "batches")}
        peers["calls"].append(python_calls_rtt(opts.node_iters, opts.node_warmup,
                                               opts.node_batch))

    def mpi4py() -> None:
        m = run_mpi(mpi_plan)
        peers["mpi_am"].append(m["am"])
        peers["mpi_pingpong"].append(m["pingpong"])
        peer_info["mpi4py"] = {k: m.get(k) for k in ("mpi_library", "mpi4py", "thread_level",
                                                     "same_node")}

    # interleaved in every repetition: every configuration, raw-shm, mpi4py
    interleave("am node", opts.reps, [
        *((f"{label} ({mode})", functools.partial(amnet, key, kw, mode))
          for label, key, kw, mode in configs),
        ("raw-shm", raw_shm), *([("mpi4py", mpi4py)] if mpi_why is None else [])], progress)

    raw_shm = over_reps(peers["raw_shm"])
    calls = over_reps(peers["calls"])
    mpi_am = over_reps(peers["mpi_am"]) if peers["mpi_am"] else None
    mpi_pp = over_reps(peers["mpi_pingpong"]) if peers["mpi_pingpong"] else None
    missing = f"missing: {mpi_why}" if mpi_why else "missing"

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    ordering: dict[str, list[str]] = {}
    for mode in opts.wait_modes:
        figs = {key: over_reps(per_rep[(key, mode)]) for _, key, _ in _node.CONFIGS}
        cpus = {key: summary(cpu[(key, mode)]) for _, key, _ in _node.CONFIGS}
        held: list[str] = []
        prev: tuple[str, str] | None = None
        for label, key, kw in _node.CONFIGS:
            a = figs[key]
            targets: list[dict[str, Any]] = []
            note = ""
            if key == "procs":
                r_mpi = _node.ratio(a, mpi_am)
                targets.append({"what": f"<= {AM_PROCS_VS_MPI_AM:g}x mpi4py AM emulation",
                                "ratio": r_mpi, "limit": AM_PROCS_VS_MPI_AM,
                                "met": None if r_mpi is None
                                else r_mpi <= AM_PROCS_VS_MPI_AM})
                r_shm = _node.ratio(a, raw_shm)
                targets.append({"what": f"<= {AM_PROCS_VS_RAW_SHM:g}x raw-shm",
                                "ratio": r_shm, "limit": AM_PROCS_VS_RAW_SHM,
                                "met": r_shm <= AM_PROCS_VS_RAW_SHM})
            if key == "threads":
                r_t = _node.ratio(a, figs["procs"])
                targets.append({"what": f"<= {AM_THREADS_VS_PROCS:g}x 2 procs",
                                "ratio": r_t, "limit": AM_THREADS_VS_PROCS,
                                "met": r_t <= AM_THREADS_VS_PROCS})
                runs = turns[mode]
                worst = max(runs) if runs else None
                targets.append({"what": f"<= {AM_THREADS_VS_CALLS:g}x python calls in "
                                "turns, every run", "ratio": worst,
                                "limit": AM_THREADS_VS_CALLS, "runs": list(runs),
                                "met": None if worst is None
                                else worst <= AM_THREADS_VS_CALLS})
                note = (f"{r_t:.2f}x 2 procs; {_node.ratio(a, calls):.2f}x python calls (the "
                        "in-line floor)" + ("" if not runs else
                                           f", in turns {median(runs):.2f}x (runs "
                                           f"{min(runs):.2f}..{max(runs):.2f})"))
            if prev is not None:
                r_prev = _node.ratio(a, figs[prev[1]])
                ok = a["median"] > figs[prev[1]]["median"]
                targets.append({"what": f"ordering: slower than {prev[0]}", "ratio": r_prev,
                                "limit": 1.0, "met": ok})
                note = (note + "; " if note else "") + f"{r_prev:.2f}x {prev[0]}"
                held.append(f"{prev[0]} < {label}: {'held' if ok else 'did not hold'} "
                            f"({r_prev:.2f}x)")
            modes = sorted(resolved[(key, mode)])
            r_mpi, r_shm = _node.ratio(a, mpi_am), _node.ratio(a, raw_shm)
            results.append({"section": "node", "config": label, "key": key,
                            "amnet_run": {"n": 2, **kw}, "wait_mode": mode,
                            "wait_mode_resolved": modes, "amnet": a,
                            "cpu_per_round_trip": cpus[key], "raw_shm": raw_shm,
                            "mpi4py_am": mpi_am, "mpi4py_pingpong": mpi_pp,
                            "ratio_mpi4py_am": r_mpi, "ratio_raw_shm": r_shm,
                            "targets": targets})
            note = (note + "; " if note else "") + _runs_cell(a)
            wm = mode if modes == [mode] else f"{mode} ({'/'.join(modes)})"
            rows.append([label, wm, _node.us_cell(a), f"{cpus[key]['median'] * 1e6:.2f}",
                         _node.ratio_cell(r_mpi, "missing"), _node.ratio_cell(r_shm),
                         "; ".join(f"{t['what']}: {_node.verdict(t['met'])}"
                                   for t in targets), note])
            prev = (label, key)
        ordering[mode] = held

    spin = "spin (busy poll)"
    for key, label, fig, wait, what in (
            ("raw_shm", "raw-shm", raw_shm, spin,
             "peer: two processes spinning on a shared page"),
            ("python_calls", "python calls", calls, "none (one thread)",
             "peer: the same loop with plain Python functions for amnet (the in-line floor)"),
            ("mpi4py_am", "mpi4py AM emulation", mpi_am, spin,
             "peer: Send + Iprobe/Recv + dict dispatch + reply Send"),
            ("mpi4py_pingpong", "mpi4py Send/Recv", mpi_pp, spin,
             "peer: 8-byte Send/Recv ping-pong")):
        results.append({"section": "node", "peer": label, "key": key, "figure": fig,
                        "ratio_mpi4py_am": _node.ratio(fig, mpi_am),
                        "ratio_raw_shm": _node.ratio(fig, raw_shm),
                        "missing": None if fig is not None else mpi_why})
        rows.append([label, wait, _node.us_cell(fig, missing), "-",
                     _node.ratio_cell(_node.ratio(fig, mpi_am), "missing"),
                     _node.ratio_cell(_node.ratio(fig, raw_shm), "missing"), "",
                     f"{what}; {_runs_cell(fig)}" if fig is not None
                     else f"{what}; {missing}"])

    notes = [
        f"Node section: µs per round trip, median (p10..p90) over batches of {batch} round "
        f"trips ({opts.node_iters} timed after {opts.node_warmup} untimed, per configuration "
        f"and peer), each the median over {opts.reps} repetitions; every configuration and "
        "peer interleaved in each repetition, fresh processes each. Batches, not single round "
        "trips, are timed: a perf_counter pair costs about 0.1 µs, as much as what is "
        "measured here.",
        "amnet: rank 0 `request_short(1, ping, i)` then `ep.wait_until(pong ran)`, rank 1 "
        "answers with `reply_short` while it serves in `ep.wait_until`; the same loop in "
        "every configuration. "
        + "; ".join(f"{label}: {_node.CONFIG_HELP[label]}" for label, _, _ in _node.CONFIGS)
        + ".",
        "rank-0 CPU: time.thread_time() of rank 0's thread over the timed round trips, per "
        "round trip, median over repetitions (a spinning thread's CPU time is its wall time).",
        "raw-shm: two processes in pure Python, one flag each on a shared anonymous page, "
        f"busy spinning ({peer_info.get('raw_shm', {}).get('spin', '-')} wait here): the "
        "floor for any Python round trip on one node.",
        "python calls: rank 0's loop in one thread with plain Python functions standing in "
        "for amnet (request_short calls ping, whose token.reply_short calls pong; wait_until "
        "calls the predicate once): the same Python frames as an in-line round trip and "
        "nothing else, the floor for the 2 threads row in CPython "
        "(amnet_bench._shmpeer.python_calls_rtt). The 2 threads job also times that loop in "
        "turns with its own batches (a batch of one, a batch of the other, in rank 0's "
        "thread): 'in turns' is the median of those ratios, over runs, with the least and "
        "greatest run's; the machine's speed drifts between separate measurements.",
        "runs a..b: the least and the greatest repetition's median, the spread over runs.",
    ]
    if mpi_why is None:
        info = peer_info.get("mpi4py", {})
        notes.append(
            f"mpi4py {info.get('mpi4py')} on {' '.join(str(info.get('mpi_library')).split())}, "
            "2 ranks of one "
            "`mpiexec -n 2` job (shared-memory transport), mpi4py's default thread level "
            f"(MPI reports {info.get('thread_level')}). AM emulation: rank 0 Sends 4 x int64 "
            "(tag = handler id), polls Iprobe(ANY_SOURCE, ANY_TAG) + Recv + dispatch through "
            "a dict until its pong handler ran; rank 1 runs the same poll loop and answers "
            "with a Send. Send/Recv: 8-byte ping-pong. Both busy poll.")
    else:
        notes.append(f"mpi4py peer missing: {mpi_why}; its rows and ratios say missing and "
                     "the target against it is not judged.")
    notes.append(
        f"Targets (PSHM issue): 2 procs <= {AM_PROCS_VS_MPI_AM:g}x mpi4py AM emulation "
        f"and <= {AM_PROCS_VS_RAW_SHM:g}x raw-shm; 2 threads <= "
        f"{AM_THREADS_VS_PROCS:g}x 2 procs and <= {AM_THREADS_VS_CALLS:g}x python "
        "calls in turns in every run (fixed-costs issue); the paper's ordering 2 threads < "
        "2 procs < 2 procs + thread-safety < 2 procs + loopback < 2 procs + thread-safety + "
        "loopback (each row slower than the one before).")
    for mode, held in ordering.items():
        notes.append(f"ordering ({mode}): " + "; ".join(held) + ".")
    notes += _node.auto_and_pin_notes(
        opts, pin, resolved, "raw-shm and mpi4py",
        "rank 0 / side A on the first usable core, rank 1 / side B on the second (for 2 "
        "threads: each rank's thread only).")
    config = {"iters": opts.node_iters, "warmup": opts.node_warmup, "batch": batch,
              "reps": opts.reps, "pin": pin, "wait_modes": opts.wait_modes,
              "configs": {label: {"n": 2, **kw} for label, _, kw in _node.CONFIGS},
              "amnet_job": "amnet.run(amnet_bench._jobs.node_am_job, n=2, **config)",
              "raw_shm": "amnet_bench._shmpeer.raw_shm_rtt", "mpi4py_plan": mpi_plan,
              "mpi4py_missing": mpi_why, "peers": peer_info,
              "order": [f"{label} ({mode})" for label, _, _, mode in configs]
              + ["raw-shm"] + (["mpi4py"] if mpi_why is None else []),
              "timer": f"time.perf_counter per batch of {batch} round trips"}
    table = {"section": "node", "title": "On one node (hybrid paper Table 2): Short-AM round "
             "trip by runtime configuration vs raw-shm and mpi4py",
             "columns": ["configuration", "wait mode", "µs per round trip",
                         "rank-0 CPU µs/round trip", "ratio to mpi4py AM emulation",
                         "ratio to raw-shm", "target", "note"],
             "rows": rows, "notes": notes}
    return {"config": config, "results": results, "table": table}
