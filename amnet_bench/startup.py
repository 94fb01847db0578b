"""Suite ``startup``: what it costs to start (and end) a job that does nothing.

Times ``amnet-run -n N EMPTY.py`` (an empty script in a temporary directory) beside the peer
``mpiexec -n N python -c pass`` (MPICH's Hydra starting the same interpreter), both as wall
time of the whole command around :func:`subprocess.run`, in the same run and interleaved
(amnet, peer, amnet, peer, ...) after a warm-up of each. Every split of N (``--splits``:
rank-threads per process, by default every divisor of the ranks per node) is its own amnet
row, against the same peer figure; ``--nodes K`` deals the ranks over K simulated nodes.

``--program init`` times a job that joins instead: the script calls ``amnet.init()`` (and the
implicit ``finalize`` barrier), beside ``mpiexec -n N python -c "from mpi4py import MPI;
MPI.COMM_WORLD.Barrier()"`` (MPI_Init, a barrier, MPI_Finalize).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import _options as options
from ._registry import BenchError, suite
from ._report import Progress, find_mpiexec
from ._stats import summary

PEER_MISSING = "not installed (pip install -e '.[peers]')"
#: what each rank runs: (amnet script, peer ``python -c`` code, module the peer needs)
PROGRAMS = {
    "empty": ("", "pass", None),
    "init": ("import amnet\namnet.init()\n", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()",
             "mpi4py"),
}
TIMEOUT_S = 300.0  # a launch that takes this long is hung, not slow


def amnet_run_command() -> list[str]:
    """``amnet-run`` as installed beside this Python, else ``python -m amnet.run``."""
    exe = Path(sys.executable).with_name("amnet-run")
    if exe.is_file() and os.access(exe, os.X_OK):
        return [str(exe)]
    return [sys.executable, "-P", "-m", "amnet.run"]


def _parser(reps: int, ranks: Any, warmup: int) -> options.Parser:
    p = options.Parser(
        "startup", "Job start-up cost: wall time of `amnet-run -n N EMPTY.py` beside "
                   "`mpiexec -n N python -c pass`, interleaved in the same run. Reports the "
                   "median (min, max) and the ratio amnet/peer (lower is better).")
    options.reps(p, reps, "timed runs of each command per N")
    options.ranks(p, ranks, "rank counts", 1, 1 << 20, many=True)
    options.nodes(p, 1, "simulated nodes the ranks are dealt over")
    options.splits(p, "all", "rank-threads per process, each a row where it divides the ranks "
                   "per node, or all (every divisor)")
    options.warmup(p, warmup, "untimed runs of each command before timing")
    p.add_argument("--program", choices=sorted(PROGRAMS), default="empty",
                   help="empty: a script that does nothing vs `python -c pass`; init: a "
                        "script that calls amnet.init() vs mpi4py's MPI_Init + Barrier "
                        "(default: %(default)s)")
    return p


def _timed(cmd: Sequence[str], cwd: str) -> float:
    """Wall time of ``cmd`` run to completion; a failure is a BenchError naming it."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, cwd=cwd,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BenchError(f"`{shlex.join(cmd)}` did not finish within {TIMEOUT_S:g} s")
    except OSError as e:
        raise BenchError(f"`{shlex.join(cmd)}` could not be started: {e}")
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip() or "(no stderr)"
        raise BenchError(f"`{shlex.join(cmd)}` exited with status {p.returncode}; "
                         f"stderr:\n{err}")
    return elapsed


def _who(key: str, tpp: int | None) -> str:
    return f"{key} T={tpp}" if tpp and tpp > 1 else key


def _ms(s: dict[str, Any]) -> str:
    return f"{s['median'] * 1e3:.1f} ({s['min'] * 1e3:.1f}..{s['max'] * 1e3:.1f})"


def _launcher(n: int, nodes: int, tpp: int) -> list[str]:
    """``amnet-run``'s options for N ranks on ``nodes`` nodes, ``tpp`` rank-threads a
    process."""
    return ["-n", str(n), *(["--nodes", str(nodes)] if nodes > 1 else []),
            *(["--threads-per-proc", str(tpp)] if tpp > 1 else [])]


def _commands(n: int, amnet: list[str], mpiexec: str | None, empty: str,
              peer_code: str = "pass", nodes: int = 1,
              splits: list[int] | None = None) -> list[tuple[str, int | None, list[str]]]:
    """What is timed for N ranks, in the interleaving order: (who, threads-per-proc, argv):
    amnet for each split (rank-threads per process; None: every divisor of the ranks per
    node), the peer after the first."""
    per_node = n // nodes
    tpps = [t for t in (splits or range(1, per_node + 1)) if per_node % t == 0]
    cmds: list[tuple[str, int | None, list[str]]] = [
        ("amnet", t, [*amnet, *_launcher(n, nodes, t), empty]) for t in tpps]
    if mpiexec:
        cmds.insert(1, ("peer", None, [mpiexec, "-n", str(n), sys.executable, "-c",
                                       peer_code]))
    return cmds


@suite("startup")
def startup(args: Sequence[str] | None = None, *, reps: int = 10,
            ranks: str | int | Iterable[int] = "8", warmup: int = 1,
            progress: bool = True) -> dict[str, Any]:
    """Job start-up: `amnet-run -n N` of an empty script vs `mpiexec -n N python -c pass`."""
    parser = _parser(reps, ranks, warmup)
    opts = options.parse(parser, args, {"reps": 2, "ranks": [2]}, "2 repetitions of 2 ranks",
                         fixed={"--sizes": (None, "its jobs send nothing")})
    for n in opts.ranks:
        per = n // opts.nodes
        if opts.splits and not any(per % t == 0 for t in opts.splits):
            parser.error(f"--splits {','.join(map(str, opts.splits))}: none divides the "
                         f"{per} ranks per node of N={n}")

    cpus = os.cpu_count() or 1
    amnet = amnet_run_command()
    script_text, peer_code, peer_needs = PROGRAMS[opts.program]
    mpiexec = find_mpiexec()
    if mpiexec and peer_needs and importlib.util.find_spec(peer_needs) is None:
        mpiexec = None  # the peer program cannot run without its module
    peer_tpl = [mpiexec, "-n", "N", sys.executable, "-c", peer_code] if mpiexec else None

    with tempfile.TemporaryDirectory(prefix="amnet-bench-startup-") as tmp:
        empty = str(Path(tmp, f"{opts.program}.py"))
        Path(empty).write_text(script_text)
        plans = [(n, _commands(n, amnet, mpiexec, empty, peer_code, opts.nodes, opts.splits))
                 for n in opts.ranks]
        total = sum(len(c) for _, c in plans) * (opts.warmup + opts.reps)
        bar = Progress("startup", total, enabled=progress)
        samples: dict[tuple[int, str, int | None], list[float]] = {}
        try:
            for n, cmds in plans:
                for _ in range(opts.warmup):
                    for key, tpp, cmd in cmds:
                        _timed(cmd, tmp)
                        bar.step(f"warm-up N={n} {_who(key, tpp)}")
                for rep in range(opts.reps):  # interleaved: amnet, peer, amnet(T=2), ...
                    for key, tpp, cmd in cmds:
                        samples.setdefault((n, key, tpp), []).append(_timed(cmd, tmp))
                        bar.step(f"N={n} {_who(key, tpp)} rep {rep + 1}/{opts.reps}")
        finally:
            bar.close()

    results: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    for n, cmds in plans:
        peer = None
        if peer_tpl:
            peer_cmd = next(c for k, _, c in cmds if k == "peer")
            peer = {"command": peer_cmd,
                    **summary(samples[(n, "peer", None)])}
        for key, tpp, cmd in cmds:
            if key != "amnet":
                continue
            am = {"command": [c if c != empty else f"{opts.program.upper()}.py" for c in cmd],
                  **summary(samples[(n, key, tpp)])}
            ratio = am["median"] / peer["median"] if peer else None
            over = n > cpus
            results.append({"ranks": n, "nodes": opts.nodes, "threads_per_proc": tpp,
                            "procs": n // tpp, "oversubscribed": over, "amnet": am,
                            "peer": peer, "ratio": ratio})
            launcher = shlex.join(["amnet-run", *_launcher(n, opts.nodes, tpp)])
            rows.append([str(n), f"`{launcher}`", _ms(am), _ms(peer) if peer else PEER_MISSING,
                         f"{ratio:.2f}" if ratio is not None else "-",
                         f"oversubscribed: {n} ranks > {cpus} cores" if over else ""])

    notes = [f"Median of {opts.reps} repetitions (min..max) in ms, after {opts.warmup} "
             f"warm-up run(s) of each command, amnet and peer interleaved in the same run.",
             "ratio = amnet-run median / mpiexec median from this run: lower is better "
             "(below 1: amnet starts a job faster than MPICH's mpiexec)."]
    if opts.program != "empty":
        notes.insert(0, f"program: {opts.program}: the amnet script is "
                        f"{script_text.strip()!r}; the peer runs `python -c {peer_code!r}`.")
    if peer_tpl:
        notes.append(f"peer: `{mpiexec} -n N {sys.executable} -c {shlex.quote(peer_code)}`; "
                     "every split of N is compared to the same figure.")
    else:
        notes.append(f"peer: mpiexec {PEER_MISSING}; amnet's figures only.")
    big = [n for n in opts.ranks if n > cpus]
    if big:
        notes.append(f"Oversubscribed: N={','.join(map(str, big))} exceeds this machine's "
                     f"{cpus} cores (os.cpu_count()); ranks share cores.")
    config = {"reps": opts.reps, "ranks": opts.ranks, "nodes": opts.nodes,
              "splits": opts.splits or "all", "warmup": opts.warmup, "program": opts.program,
              "cpu_count": cpus,
              "amnet_run": [*amnet, "-n", "N", f"{opts.program.upper()}.py"],
              "mpiexec": mpiexec,
              "peer": peer_tpl, "python": sys.executable,
              "timer": "time.perf_counter around subprocess.run, output captured"}
    table = {"columns": ["N", "amnet launcher", "amnet-run ms: median (min..max)",
                         "mpiexec ms: median (min..max)", "ratio amnet/peer (lower is better)",
                         "note"], "rows": rows}
    return {"suite": "startup", "config": config, "results": results, "table": table,
            "notes": notes}
