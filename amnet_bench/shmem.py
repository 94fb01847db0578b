"""Suite ``shmem``: the results chapter of *An OpenSHMEM runtime for UPC*, three ways.

Every experiment of the paper's Figs. 13-24 in three forms measured in one run:

``upc-amnet``  upc_rt on amnet directly (``upc.init(runtime="amnet")``): the paper's
               Berkeley UPC on GASNet;
``upc-shmem``  upc_rt over shmem_rt (``upc.init(runtime="shmem")``): the paper's SHMEM-UPC;
``shmem4py``   the same operation in shmem4py on Open MPI's OpenSHMEM, the peer: this suite's
               :mod:`amnet_bench._shmem4pyjob` run by ``oshrun -np N PEER_PYTHON``, on this
               one host only.

Figures: put/get latency (``upc.memput`` + ``upc.fence`` / ``upc.memget``; ``put`` +
``quiet`` / ``get`` for the peer) 1 B-4 MiB within a node and across 2 nodes (amnet forms
only); barrier latency by thread count; ``upc_all_broadcast`` and ``upc_all_reduce``
latency by size, and the reduce with the threads as rank-threads of shared processes (the
paper's threaded reduce, ``--threads-per-proc``); CPI time, Stream-Triad time and
bandwidth, RandomAccess GUPS and error percentage by thread count. Then shmem_rt beside
shmem4py on the OSU OpenSHMEM basics: 8 B put (+quiet), 8 B get, fetch-add, put bandwidth
by size, ``barrier_all``, within a node (2 PEs) and, for shmem_rt, across 2 nodes.

Ratios: upc-shmem / upc-amnet for every figure (the paper's claim: the mapping costs
little), shmem_rt / shmem4py for the OSU basics. A peer that is not installed, or whose
launch fails, is reported so in its column and the notes, never measured otherwise.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _options as options
from ._options import parse_sizes, size_label
from ._registry import BenchError, suite
from ._report import Progress
from ._shmemjob import JOBS, osu_job
from ._stats import median
from ._twonode import cpu_count, run_job

FORMS = ("upc-amnet", "upc-shmem", "shmem4py")
UPC_FORMS = {"upc-amnet": "amnet", "upc-shmem": "shmem"}
PARTS = ("putget", "barrier", "bcast", "reduce", "apps", "osu")
DEFAULT_PEER = "/work/peers/shmem4py/bin/python"
PEER_ENV = "BENCH_SHMEM_PEER"  # not AMNET_*: amnet refuses unknown AMNET_ variables
OSHRUN_ENV = "BENCH_OSHRUN_FLAGS"
PEER_SCRIPT = Path(__file__).with_name("_shmem4pyjob.py")
PEER_TIMEOUT_S = 300.0
ONE_HOST = "n/a (the peer runs on one host)"
TOPO_LABEL = {"node": "within a node", "2nodes": "across 2 nodes"}
PLOTS = ("shmem_put_<topology>.png", "shmem_get_<topology>.png", "shmem_barrier.png",
         "shmem_broadcast.png", "shmem_reduce.png", "shmem_reduce_threaded.png",
         "shmem_cpi.png", "shmem_triad_time.png", "shmem_triad_bw.png", "shmem_ra_gups.png",
         "shmem_ra_error.png", "shmem_osu_latency.png", "shmem_osu_bw.png")
OSU_LAT = (("put8", "8 B put + quiet"), ("get8", "8 B get"), ("fadd", "fetch-add (8 B)"),
           ("barrier", "barrier_all"))


class PeerFailed(Exception):
    """The peer could not run an experiment (the message says why)."""


# -- the peer ---------------------------------------------------------------------------------
def peer_python(given: str | None) -> str:
    """The peer's Python: ``--shmem-peer``, else $AMNET_BENCH_SHMEM_PEER, else the default."""
    return given or os.environ.get(PEER_ENV) or DEFAULT_PEER


def find_peer(python: str, oshrun: str | None) -> tuple[str | None, str]:
    """``(oshrun, version)`` when the peer can run; ``(None, why not)`` otherwise."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return None, f"no Python at {python}"
    launcher = oshrun or shutil.which("oshrun") or \
        (str(Path(python).with_name("oshrun")) if Path(python).with_name("oshrun").is_file()
         else None)
    if launcher is None:
        return None, "no oshrun on PATH (apt-get install openmpi-bin)"
    try:
        p = subprocess.run([python, "-c", "import shmem4py, numpy; print(shmem4py.__version__,"
                            " numpy.__version__)"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{python} did not run: {e}"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"import shmem4py fails in {python}: {last}"
    v = p.stdout.split()
    return launcher, f"shmem4py {v[0]}, numpy {v[1]}" if len(v) == 2 else p.stdout.strip()


def oshrun_argv(oshrun: str, n: int) -> list[str]:
    """``oshrun -np n`` with the flags this machine needs: as root ``--allow-run-as-root``;
    ``--mca btl ^openib`` (else Open MPI 4.1's shmem_finalize crashes); ``--oversubscribe``
    beyond the usable cores; then $AMNET_BENCH_OSHRUN_FLAGS."""
    argv = [oshrun, "-np", str(n)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += ["--mca", "btl", "^openib"]
    if n > cpu_count():
        argv.append("--oversubscribe")
    return argv + shlex.split(os.environ.get(OSHRUN_ENV, ""))


def run_peer(peer: dict[str, Any], plan: dict[str, Any], n: int) -> list[Any]:
    """Run ``plan`` on ``n`` PEs of the peer; every PE's result, by PE. Raises PeerFailed."""
    from ._shmem4pyjob import PREFIX

    argv = [*oshrun_argv(peer["oshrun"], n), peer["python"], str(PEER_SCRIPT),
            json.dumps(plan)]
    peer.setdefault("argv", [*argv[:-1], "PLAN"])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=PEER_TIMEOUT_S,
                           cwd="/tmp")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerFailed(f"oshrun failed: {type(e).__name__}: {e}") from e
    got: dict[int, Any] = {}
    for line in p.stdout.splitlines():
        if line.startswith(PREFIX):
            rec = json.loads(line[len(PREFIX):])
            got[rec["pe"]] = rec["result"]
    if sorted(got) != list(range(n)):
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        raise PeerFailed(f"oshrun -np {n} ({plan['exp']}) exited {p.returncode} with "
                         f"{len(got)} of {n} results: {tail[:300]}")
    if p.returncode != 0:
        peer.setdefault("exit_codes", set()).add(p.returncode)
    return [got[i] for i in range(n)]


# -- options ----------------------------------------------------------------------------------
def _parser(d: dict[str, Any]) -> options.Parser:
    p = options.Parser(
        "shmem", "The OpenSHMEM-for-UPC paper's Figs. 13-24: upc_rt on amnet directly "
                 "(upc-amnet), upc_rt over shmem_rt (upc-shmem) and the same operations "
                 "in shmem4py on Open MPI's OpenSHMEM (shmem4py, the peer); then "
                 "shmem_rt vs shmem4py on the OSU OpenSHMEM basics.")
    options.reps(p, d["reps"])
    options.choices(p, "--parts", PARTS, PARTS, "parts", "experiments to run", metavar="P,P")
    options.choices(p, "--forms", FORMS, FORMS, "forms", "forms to run", metavar="F,F")
    options.sizes(p, d["sizes"], "put/get sizes", most=64 << 20, unit="a put or get")
    options.topologies(p, "node,2nodes", "put/get and OSU: 1 (within a node), 2 (across 2 "
                       "nodes, amnet forms and shmem_rt only) or 1,2", topology=False)
    options.ranks(p, d["threads"], "barrier: thread counts", many=True, threads=True)
    options.count(p, "--coll-threads", d["coll_threads"], "broadcast and reduce: threads",
                  least=2, metavar="T")
    options.sizes(p, d["coll_sizes"], "broadcast and reduce: sizes in bytes",
                  flag="--coll-sizes", most=16 << 20, unit="a block")
    options.count(p, "--threads-per-proc", 2, "the threaded reduce: --coll-threads threads "
                  "as processes of K rank-threads", metavar="K")
    options.counts(p, "--app-threads", d["app_threads"], "thread counts", "CPI, Triad, "
                   "RandomAccess: thread counts", 1, 64, metavar="T,T")
    for flag, help in (("--iters", "operations per timed batch (fewer for big messages)"),
                       ("--samples", "timed batches per figure per job"),
                       ("--cpi-n", "CPI: intervals"),
                       ("--triad-m", "Stream-Triad: float64 elements per thread per array"),
                       ("--ra-words", "RandomAccess: uint64 table words per thread, a power "
                                      "of two"),
                       ("--ra-updates", "RandomAccess: updates per thread")):
        options.count(p, flag, d[flag[2:].replace("-", "_")], help)
    options.sizes(p, d["osu_sizes"], "OSU put bandwidth sizes", flag="--osu-sizes")
    p.add_argument("--shmem-peer", metavar="PYTHON", default=None,
                   help=f"the peer virtualenv's Python, with shmem4py (default: "
                        f"${PEER_ENV}, else {DEFAULT_PEER})")
    p.add_argument("--oshrun", metavar="PATH", default=None,
                   help="the peer's launcher (default: oshrun on PATH); extra flags in "
                        f"${OSHRUN_ENV}")
    return p


DEFAULTS = {"reps": 3, "sizes": "1,8,64,512,4K,32K,256K,1M,4M", "threads": "2,4",
            "coll_threads": 2, "coll_sizes": "8,64,512,4K,32K,256K", "app_threads": "1,2,4",
            "iters": 100, "samples": 5, "cpi_n": 1 << 21, "triad_m": 1 << 18,
            "ra_words": 1 << 14, "ra_updates": 2048, "osu_sizes": "8,64,512,4K,32K,256K,1M"}
QUICK = {"reps": 1, "sizes": parse_sizes("8,64K"), "threads": [2],
         "coll_sizes": parse_sizes("8,4K"), "app_threads": [2], "iters": 10,
         "samples": 2, "cpi_n": 1 << 14, "triad_m": 1 << 12, "ra_words": 1 << 10,
         "ra_updates": 64, "osu_sizes": parse_sizes("8,64K")}


def upc_shmem_missing() -> str | None:
    """Why upc_rt cannot run over shmem_rt here, or None."""
    try:
        import upc_rt
    except ImportError as e:
        return f"upc_rt does not import: {e}"
    if "runtime" not in inspect.signature(upc_rt.init).parameters:
        return "this upc_rt has no upc.init(runtime='shmem') yet"
    return None


@suite("shmem", plots=PLOTS)
def shmem(args: Sequence[str] | None = None, *, progress: bool = True) -> dict[str, Any]:
    """OpenSHMEM-for-UPC paper Figs. 13-24: upc_rt direct vs over shmem_rt vs shmem4py."""
    p = _parser(DEFAULTS)
    opts = options.parse(p, args, QUICK, "1 repetition, 2 samples of 10 operations, sizes "
                         "8 B and 64 KiB, 2 threads, tiny kernels", fixed={
                             "--splits": ("1", "a thread is a process, except in the "
                                               "threaded reduce (--threads-per-proc)")},
                         plots=PLOTS)
    if opts.coll_threads % opts.threads_per_proc:
        p.error(f"--threads-per-proc must divide --coll-threads ({opts.coll_threads}), got "
                f"{opts.threads_per_proc}")
    if opts.ra_words < 2 or opts.ra_words & (opts.ra_words - 1):
        p.error(f"--ra-words must be a power of two, got {opts.ra_words}")

    missing: dict[str, str] = {}
    if "upc-shmem" in opts.forms and (why := upc_shmem_missing()):
        missing["upc-shmem"] = f"not available: {why}"
    peer = {"python": peer_python(opts.shmem_peer)}
    if "shmem4py" in opts.forms:
        launcher, info = find_peer(peer["python"], opts.oshrun)
        if launcher is None:
            missing["shmem4py"] = f"not installed: {info}"
        else:
            peer.update(oshrun=launcher, version=info)
    forms = [f for f in opts.forms if f not in missing]
    upc_forms = [f for f in forms if f in UPC_FORMS]
    run = _Runner(opts, peer, missing, forms, upc_forms, progress)
    for rep in range(opts.reps):
        run.rep(rep)
    run.bar.close()
    return _report(opts, run, peer, missing)


# -- measuring --------------------------------------------------------------------------------
def _med(xs: Sequence[float]) -> float:
    return median(list(xs))


def _slowest(ranks: list[dict[str, Any]], key: str) -> float:
    """The slowest rank's median of ``key``'s samples."""
    return max(_med(r[key]) for r in ranks)


class _Runner:
    """Runs every job of a repetition; ``vals[form][figure]`` collects one value per
    repetition."""

    def __init__(self, opts: argparse.Namespace, peer: dict[str, Any],
                 missing: dict[str, str], forms: list[str], upc_forms: list[str],
                 progress: bool) -> None:
        self.opts, self.peer, self.missing = opts, peer, missing
        self.forms, self.upc_forms = forms, upc_forms
        self.vals: dict[str, dict[str, list[float]]] = {f: {} for f in FORMS}
        for f in ("shmem_rt", "shmem_rt:2nodes", "amnet", "amnet:2nodes"):
            self.vals[f] = {}
        o = opts
        peer_on = "shmem4py" in forms
        nup = len(upc_forms)
        steps = {"putget": nup * len(o.topologies) + peer_on * ("node" in o.topologies),
                 "barrier": (nup + peer_on) * len(o.threads), "bcast": nup + peer_on,
                 "reduce": 2 * nup + peer_on, "apps": (nup + peer_on) * len(o.app_threads),
                 "osu": len(o.topologies) + peer_on * ("node" in o.topologies)}
        self.bar = Progress("shmem", o.reps * sum(steps[k] for k in o.parts), progress)
        self.base = {"iters": o.iters, "samples": o.samples,
                     "warmup": max(2, o.iters // 5)}

    def put(self, form: str, key: str, v: float) -> None:
        self.vals[form].setdefault(key, []).append(v)

    def upc(self, form: str, part: str, plan: dict[str, Any], **kw: Any) -> list[Any]:
        return run_job(JOBS[part], {**self.base, **plan, "runtime": UPC_FORMS[form]}, **kw)

    def shm(self, plan: dict[str, Any], n: int, keep: Callable[[list[Any]], None],
            what: str) -> None:
        """The peer's run of ``plan`` on ``n`` PEs, where it runs: ``keep`` takes its
        results (none once it failed: it is marked failed, and the rest still runs)."""
        if "shmem4py" not in self.forms:
            return
        if "shmem4py" not in self.missing:
            try:
                keep(run_peer(self.peer, {**self.base, **plan}, n))
            except PeerFailed as e:
                self.missing["shmem4py"] = f"failed: {e}"
        self.bar.step(f"{what}, shmem4py")

    def rep(self, rep: int) -> None:
        o, step = self.opts, self.bar.step
        # the upc forms back to back, in alternating order (their ratio is taken per rep)
        ups = self.upc_forms if rep % 2 == 0 else self.upc_forms[::-1]
        if "putget" in o.parts:
            plan = {"exp": "putget", "sizes": o.sizes}
            seg = max(16 << 20, 1 << (4 * max(o.sizes)).bit_length())
            for topo in o.topologies:
                for f in ups:
                    r = self.upc(f, "putget", plan, n=2, segment_size=seg,
                                 **({"nodes": 2} if topo == "2nodes" else {}))
                    self._putget(f, topo, r[0])
                    step(f"rep {rep + 1}, put/get {topo}, {f}")
            if "node" in o.topologies:
                self.shm(plan, 2, lambda r: self._putget("shmem4py", "node", r[0]),
                         f"rep {rep + 1}, put/get")
        if "barrier" in o.parts:
            for t in o.threads:
                for f in ups:
                    r = self.upc(f, "barrier", {"exp": "barrier"}, n=t)
                    self.put(f, f"barrier/{t}", _slowest(r, "barrier"))
                    step(f"rep {rep + 1}, barrier {t} threads, {f}")
                self.shm({"exp": "barrier"}, t, lambda r, t=t: self.put(
                    "shmem4py", f"barrier/{t}", _slowest(r, "barrier")),
                    f"rep {rep + 1}, barrier {t} threads")
        T = o.coll_threads
        seg = max(16 << 20, 1 << (4 * max(o.coll_sizes)).bit_length())
        for part in ("bcast", "reduce"):
            if part not in o.parts:
                continue
            plan = {"exp": part, "sizes": o.coll_sizes}
            for f in ups:
                self._coll(f, part, self.upc(f, part, plan, n=T, segment_size=seg))
                step(f"rep {rep + 1}, {part}, {f}")
                if part == "reduce":
                    r = self.upc(f, part, plan, n=T, segment_size=seg,
                                 threads_per_proc=o.threads_per_proc)
                    self._coll(f, "treduce", r)
                    step(f"rep {rep + 1}, threaded reduce, {f}")
            self.shm(plan, T, lambda r, part=part: self._coll("shmem4py", part, r),
                     f"rep {rep + 1}, {part}")
        if "apps" in o.parts:
            plan = {"exp": "apps", "cpi_n": o.cpi_n, "triad_m": o.triad_m,
                    "triad_iters": max(2, o.iters // 10), "ra_words": o.ra_words,
                    "ra_updates": o.ra_updates}
            seg = max(16 << 20, 1 << (8 * (3 * o.triad_m + o.ra_words) * 2).bit_length())
            for t in o.app_threads:
                for f in ups:
                    self._apps(f, t, self.upc(f, "apps", plan, n=t, segment_size=seg))
                    step(f"rep {rep + 1}, apps {t} threads, {f}")
                self.shm(plan, t, lambda r, t=t: self._apps("shmem4py", t, r),
                         f"rep {rep + 1}, apps {t} threads")
        if "osu" in o.parts:
            plan = {"exp": "osu", "bw_sizes": o.osu_sizes, "window": 16}
            seg = max(16 << 20, 1 << (4 * max(o.osu_sizes)).bit_length())
            for topo in o.topologies:
                r = run_job(osu_job, {**self.base, **plan}, n=2, segment_size=seg,
                            **({"nodes": 2} if topo == "2nodes" else {}))
                self._osu("shmem_rt" if topo == "node" else "shmem_rt:2nodes", r)
                amnet_form = "amnet" if topo == "node" else "amnet:2nodes"
                self._osu(amnet_form, [x["amnet"] for x in r])
                for k, v in r[0]["amnet"]["pair"].items():
                    self.put(amnet_form, f"pair/osu/{k}", v)
                step(f"rep {rep + 1}, OSU basics {topo}, shmem_rt")
            if "node" in o.topologies:
                self.shm(plan, 2, lambda r: self._osu("shmem4py", r), f"rep {rep + 1}, OSU basics")

    def _putget(self, form: str, topo: str, r0: dict[str, Any]) -> None:
        for op in ("put", "get"):
            for n, s in r0[op].items():
                self.put(form, f"{op}/{topo}/{n}", _med(s))

    def _coll(self, form: str, part: str, ranks: list[dict[str, Any]]) -> None:
        for n in ranks[0]:
            self.put(form, f"{part}/{n}", _slowest(ranks, n))

    def _apps(self, form: str, t: int, ranks: list[dict[str, Any]]) -> None:
        o = self.opts
        if any(r["cpi_error"] > 1e-6 for r in ranks):
            raise BenchError(f"CPI ({form}, {t} threads) computed pi wrong by "
                             f"{max(r['cpi_error'] for r in ranks):.3g}")
        self.put(form, f"cpi/{t}", _slowest(ranks, "cpi"))
        triad = _slowest(ranks, "triad")
        self.put(form, f"triad_s/{t}", triad)
        self.put(form, f"triad_mbs/{t}", 3 * 8 * o.triad_m * t / triad / 1e6)
        ra = _slowest(ranks, "ra")
        self.put(form, f"ra_gups/{t}", t * o.ra_updates / ra / 1e9)
        errs = _med([sum(e) for e in zip(*(r["ra_errors"] for r in ranks), strict=True)])
        self.put(form, f"ra_err/{t}", 100.0 * errs / (o.ra_words * t))

    def _osu(self, form: str, ranks: list[dict[str, Any]]) -> None:
        r0 = ranks[0]
        for k in ("put8", "get8", "fadd"):
            self.put(form, f"osu/{k}", _med(r0[k]))
        self.put(form, "osu/barrier", _slowest(ranks, "barrier"))
        for n, s in r0["bw"].items():
            self.put(form, f"osu/bw/{n}", _med(s))


# -- the report -------------------------------------------------------------------------------
def _get(run: _Runner, form: str, key: str) -> float | None:
    v = run.vals[form].get(key)
    return median(v) if v else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _paired(run: _Runner, key: str) -> float | None:
    """upc-shmem / upc-amnet: the median over repetitions of each repetition's ratio (the
    two forms' jobs ran back to back, in alternating order), so that drift between
    repetitions cancels."""
    a, b = run.vals["upc-shmem"].get(key, []), run.vals["upc-amnet"].get(key, [])
    if len(a) != len(b):  # a form that did not run (a failing job ends the whole run)
        return None
    rs = [x / y for x, y in zip(a, b, strict=True) if y]
    return median(rs) if rs else None


def _report(opts: argparse.Namespace, run: _Runner, peer: dict[str, Any],
            missing: dict[str, str]) -> dict[str, Any]:
    tables: list[dict[str, Any]] = []
    figures: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def us(v: float) -> str:
        return f"{v * 1e6:.2f}"

    def ms(v: float) -> str:
        return f"{v * 1e3:.3f}"

    def form_table(section: str, title: str, label: str, rows_spec: list[tuple[Any, str]],
                   fmt: Callable[[float], str], unit: str, scale: float, file: str,
                   better: str, xsizes: bool, na: dict[str, str] | None = None,
                   forms: Sequence[str] = FORMS, notes: Sequence[str] = ()) -> None:
        cols = [label] + [f"{f} ({unit})" for f in forms[:2]] + ["upc-shmem / upc-amnet"] \
            + [f"{f} ({unit})" for f in forms[2:]]
        rows = []
        series: dict[str, list[float | None]] = {f: [] for f in forms}
        for x, key in rows_spec:
            got = {}
            for f in forms:
                if f in missing:
                    got[f] = None
                elif na and f in na:
                    got[f] = None
                else:
                    got[f] = _get(run, f, key)
                series[f].append(None if got[f] is None else got[f] * scale)
            r = _paired(run, key)  # None where either upc form has no figures

            def cell(f: str, got: dict[str, float | None] = got) -> str:
                if f in missing:
                    return missing[f]
                if na and f in na:
                    return na[f]
                return "-" if got[f] is None else fmt(got[f])

            xl = size_label(x) if xsizes else str(x)
            rows.append([xl, cell(forms[0]), cell(forms[1]),
                         "-" if r is None else f"{r:.2f}"] + [cell(f) for f in forms[2:]])
            results.append({"section": section, "figure": key, "x": x,
                            **{f: got[f] for f in forms}, "ratio": r,
                            "samples": {f: run.vals[f].get(key, []) for f in forms}})
        tables.append({"section": section, "title": title, "columns": cols, "rows": rows,
                       "notes": list(notes)})
        xs = [x for x, _ in rows_spec]
        figures.append({"file": file, "title": title, "xlabel": label, "ylabel": unit,
                        "better": better, "xlog": xsizes, "xbytes": xsizes,
                        "series": [{"label": f, "x": xs, "y": series[f]} for f in forms
                                   if any(v is not None for v in series[f])]})

    o = opts
    if "putget" in o.parts:
        for topo in o.topologies:
            for op, fig in (("put", "13"), ("get", "14")):
                what = "upc_memput + upc_fence" if op == "put" else "upc_memget"
                form_table(f"{op}_{topo}", f"Fig. {fig}: {op} latency {TOPO_LABEL[topo]} "
                           f"({what}; shmem {op}{' + quiet' if op == 'put' else ''})",
                           "size", [(n, f"{op}/{topo}/{n}") for n in o.sizes], us, "µs", 1e6,
                           f"shmem_{op}_{topo}.png", "lower", True,
                           na={"shmem4py": ONE_HOST} if topo == "2nodes" else None)
    if "barrier" in o.parts:
        form_table("barrier", "Figs. 15/22: barrier latency by thread count", "threads",
                   [(t, f"barrier/{t}") for t in o.threads], us, "µs", 1e6,
                   "shmem_barrier.png", "lower", False)
    T = o.coll_threads
    if "bcast" in o.parts:
        form_table("broadcast", f"Fig. 16: upc_all_broadcast latency, {T} threads "
                   "(shmem broadcast)", "size", [(n, f"bcast/{n}") for n in o.coll_sizes],
                   us, "µs", 1e6, "shmem_broadcast.png", "lower", True)
    if "reduce" in o.parts:
        form_table("reduce", f"Fig. 17: upc_all_reduce (ADD, float64) latency, {T} threads "
                   "(shmem: local sum + sum_reduce)", "size",
                   [(n, f"reduce/{n}") for n in o.coll_sizes], us, "µs", 1e6,
                   "shmem_reduce.png", "lower", True)
        k = o.threads_per_proc
        form_table("reduce_threaded", f"Fig. 18: threaded upc_all_reduce, {T} threads as "
                   f"{T // k} process(es) of {k} rank-threads", "size",
                   [(n, f"treduce/{n}") for n in o.coll_sizes], us, "µs", 1e6,
                   "shmem_reduce_threaded.png", "lower", True, forms=FORMS[:2])
    if "apps" in o.parts:
        ts = o.app_threads
        for section, title, key, fmt, unit, scale, better in (
                ("cpi", f"Fig. 19: CPI time ({o.cpi_n} intervals)", "cpi", ms, "ms", 1e3,
                 "lower"),
                ("triad_time", f"Fig. 20: Stream-Triad time per pass ({o.triad_m} float64 "
                 "a thread)", "triad_s", ms, "ms", 1e3, "lower"),
                ("triad_bw", "Fig. 21: Stream-Triad bandwidth (3 x 8 B per element)",
                 "triad_mbs", lambda v: f"{v:.0f}", "MB/s", 1.0, "higher"),
                ("ra_gups", f"Fig. 23: RandomAccess GUPS ({o.ra_updates} updates a thread, "
                 f"{o.ra_words} words a thread)", "ra_gups", lambda v: f"{v:.2e}", "GUPS",
                 1.0, "higher"),
                ("ra_error", "Fig. 24: RandomAccess error (% of the table's words wrong)",
                 "ra_err", lambda v: f"{v:.3f}", "%", 1.0, "lower")):
            form_table(section, title, "threads", [(t, f"{key}/{t}") for t in ts], fmt, unit,
                       scale, f"shmem_{section}.png", better,
                       False)
    if "osu" in o.parts:
        _osu_tables(o, run, missing, tables, figures, results)

    notes = _notes(o, run, peer, missing)
    if tables:
        tables[-1]["notes"] += notes
    else:
        raise BenchError("nothing measured")
    cfg = dict(vars(o))
    cfg.update(forms_run=run.forms, missing=missing, sections=[t["section"] for t in tables],
               peer={k: v for k, v in peer.items() if k != "exit_codes"} |
               {"exit_codes": sorted(peer.get("exit_codes", ()))})
    return {"suite": "shmem", "config": cfg, "results": results, "tables": tables,
            "table": {"columns": tables[0]["columns"], "rows": tables[0]["rows"]},
            "notes": [n for t in tables for n in t["notes"]], "figures": figures}


def _osu_tables(o: argparse.Namespace, run: _Runner, missing: dict[str, str],
                tables: list, figures: list, results: list) -> None:
    peer = missing.get("shmem4py")
    two = "2nodes" in o.topologies
    node = "node" in o.topologies
    cols = ["figure"] + (["shmem_rt, 1 node", "shmem4py, 1 node", "shmem_rt / shmem4py",
                          "amnet, 1 node"] if node else []) + \
        (["shmem_rt, 2 nodes", "amnet, 2 nodes", "shmem_rt / amnet, 2 nodes"] if two else [])
    rows, bars = [], {"shmem_rt": [], "shmem4py": [], "shmem_rt, 2 nodes": []}

    def row(label: str, key: str, fmt: Callable[[float], str], scale: float) -> None:
        a, b = _get(run, "shmem_rt", key), None if peer else _get(run, "shmem4py", key)
        c = _get(run, "shmem_rt:2nodes", key)
        d, e = _get(run, "amnet", key), _get(run, "amnet:2nodes", key)
        r = _ratio(a, b)
        # the mapping's cost: the median over repetitions of each job's median ratio of
        # turns (a time's ratio, a bandwidth's inverse: above 1 is a cost)
        m = _get(run, "amnet:2nodes", f"pair/{key}")
        cells = [label]
        if node:
            cells += ["-" if a is None else fmt(a), peer or ("-" if b is None else fmt(b)),
                      "-" if r is None else f"{r:.2f}", "-" if d is None else fmt(d)]
        if two:
            cells += ["-" if c is None else fmt(c), "-" if e is None else fmt(e),
                      "-" if m is None else f"{m:.2f}"]
        rows.append(cells)
        results.append({"section": "osu", "figure": key, "shmem_rt": a, "shmem4py": b,
                        "shmem_rt_2nodes": c, "amnet": d, "amnet_2nodes": e, "ratio": r,
                        "mapping_2nodes": m,
                        "mapping": _get(run, "amnet", f"pair/{key}"),
                        "samples": {"shmem_rt": run.vals["shmem_rt"].get(key, []),
                                    "shmem4py": run.vals["shmem4py"].get(key, []),
                                    "shmem_rt_2nodes":
                                        run.vals["shmem_rt:2nodes"].get(key, []),
                                    "amnet": run.vals["amnet"].get(key, []),
                                    "amnet_2nodes": run.vals["amnet:2nodes"].get(key, [])}})
        if key.startswith("osu/bw"):
            return
        for name, v in (("shmem_rt", a), ("shmem4py", b), ("shmem_rt, 2 nodes", c)):
            bars[name].append(None if v is None else v * scale)

    for k, label in OSU_LAT:
        row(f"{label} (µs)", f"osu/{k}", lambda v: f"{v * 1e6:.2f}", 1e6)
    for n in o.osu_sizes:
        row(f"put bandwidth {size_label(n)} (MB/s)", f"osu/bw/{n}", lambda v: f"{v:.1f}",
            1.0)
    notes = ["OSU basics: shmem_rt / shmem4py, lower is better for the latencies, higher for "
             "the bandwidths; put bandwidth is a window of 16 put_nbi then quiet. The "
             "peer runs on one host only, so shmem_rt across 2 nodes has no peer.",
             "amnet: the same operations as amnet endpoint calls (ep.put, ep.get, ep.atomic, "
             "ep.barrier, a window of ep.put_nbi then ep.wait_nbi) at the same objects, "
             "later in the same job, in turns with shmem_rt's (a batch of one, a batch of "
             "the other): the floor shmem_rt's mapping sits on. shmem_rt / amnet, 2 nodes: "
             "the median ratio of those turns (median over repetitions), the mapping's "
             "cost with the job-to-job and moment-to-moment noise of a loopback between "
             "processes taken out; for bandwidths amnet / shmem_rt, so above 1 is a cost "
             "there too."]
    tables.append({"section": "osu", "title": "OSU OpenSHMEM basics: shmem_rt beside "
                   "shmem4py", "columns": cols, "rows": rows, "notes": notes})
    figures.append({"file": "shmem_osu_latency.png", "kind": "bar",
                    "title": "OSU OpenSHMEM latencies: shmem_rt vs shmem4py",
                    "xlabel": "operation", "ylabel": "µs", "better": "lower",
                    "categories": [label for _, label in OSU_LAT],
                    "series": [{"label": k, "y": v} for k, v in bars.items()
                               if any(x is not None for x in v)]})
    series = []
    for name, form in (("shmem_rt", "shmem_rt"), ("shmem4py", "shmem4py"),
                       ("shmem_rt, 2 nodes", "shmem_rt:2nodes")):
        ys = [_get(run, form, f"osu/bw/{n}") for n in o.osu_sizes]
        if any(y is not None for y in ys) and not (form == "shmem4py" and peer):
            series.append({"label": name, "x": list(o.osu_sizes), "y": ys})
    figures.append({"file": "shmem_osu_bw.png", "title": "OSU put bandwidth: shmem_rt vs "
                    "shmem4py", "xlabel": "size", "ylabel": "MB/s", "better": "higher",
                    "xlog": True, "xbytes": True, "series": series})


def _notes(o: argparse.Namespace, run: _Runner, peer: dict[str, Any],
           missing: dict[str, str]) -> list[str]:
    notes = ["upc-amnet: upc_rt on amnet (upc.init(runtime='amnet')), the paper's Berkeley "
             "UPC on GASNet; "
             "upc-shmem: upc_rt over shmem_rt (upc.init(runtime='shmem')), the paper's "
             "SHMEM-UPC; shmem4py: the same operation in shmem4py on Open MPI's OpenSHMEM "
             "(the peer), on this one host only.",
             "upc-shmem / upc-amnet: the mapping's cost (1.00: none); for times lower is "
             "better, for MB/s and GUPS higher; for the error % it compares lost updates. "
             "It is the median over repetitions of each repetition's ratio: the two forms' "
             "jobs run back to back, in alternating order, so that the drift of a loopback "
             "between processes from one repetition to the next cancels.",
             "Each figure: the median over repetitions of the slowest thread's median batch "
             "(put/get: thread 0 to thread 1). Broadcast and reduce run IN_ALLSYNC | "
             "OUT_ALLSYNC; the peer's reduce is a local sum then sum_reduce of one value, "
             "the work upc_all_reduce does."]
    for f, why in missing.items():
        notes.append(f"{f}: {why}.")
    if "version" in peer:
        cmd = " ".join(peer.get("argv", []))
        notes.append(f"shmem4py peer: {peer['version']}, {peer['python']}, launched as "
                     f"`{cmd}`." if cmd else f"shmem4py peer: {peer['version']}.")
        if peer.get("exit_codes"):
            notes.append(f"oshrun exited {sorted(peer['exit_codes'])} after every PE had "
                         "printed its figures (a crash in shmem_finalize; add --mca btl "
                         "^openib).")
    most = max([*(o.threads if "barrier" in o.parts else []),
                *(o.app_threads if "apps" in o.parts else []), o.coll_threads])
    if most > cpu_count():
        notes.append(f"{cpu_count()} usable cores: jobs of more threads than that are "
                     "oversubscribed (amnet's blocking waits; oshrun --oversubscribe), and "
                     "their times include waiting for a core.")
    return notes
