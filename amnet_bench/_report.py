"""Reporting for ``amnet-bench``: the machine description, Markdown and JSON, progress.

Small and dependency-free on purpose: suites call :class:`Progress`; the command line calls
:func:`machine_info`, :func:`markdown` and :func:`write` (the statistics are
:mod:`amnet_bench._stats`'s).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ._plot import plot

# -- tools --------------------------------------------------------------------------------


def find_mpiexec() -> str | None:
    """The peer's ``mpiexec``: the one installed beside this Python, else the first on PATH.

    The ``[peers]`` extra's mpich wheel puts ``mpiexec`` next to ``sys.executable``; taking
    that one first keeps a version-manager shim on PATH (pyenv adds tens of ms per call) out
    of the peer's figures.
    """
    here = Path(sys.executable).with_name("mpiexec")
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")


def mpich_version(mpiexec: str | None = None) -> str | None:
    """MPICH's version: from the mpich wheel's metadata, else from ``mpiexec --version``."""
    from importlib import metadata

    try:
        return metadata.version("mpich")
    except metadata.PackageNotFoundError:
        pass
    mpiexec = mpiexec or find_mpiexec()
    if not mpiexec:
        return None
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Version:\s*(\S+)", out)
    return m.group(1) if m else None


def amnet_version() -> str:
    """amnet's version (see :func:`amnet_bench._amnet.package_version`)."""
    from ._amnet import package_version

    return package_version()


#: The interpreter lock as the ranks of this run's jobs saw it at their end (True: on), added
#: by the job runners (:func:`rank_job`); the bench driver is one thread, so one set serves.
RANKS_GIL: set[bool] = set()


def free_threaded() -> bool:
    """Whether this CPython is a free-threaded build (PEP 703: ``--disable-gil``)."""
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled() -> bool:
    """Whether the interpreter lock is on in this process now (always on a default build)."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def rank_job(fn: Any, ep: Any, plan: Any) -> tuple[Any, bool]:
    """A job's rank side as the runners start it: ``fn(ep, plan)``'s result and whether the
    interpreter lock was on in the rank at its end (:func:`ranks_result` takes them apart)."""
    return fn(ep, plan), gil_enabled()


def ranks_result(res: list[tuple[Any, bool]]) -> list[Any]:
    """The ranks' results of a job run through :func:`rank_job`; their lock states are kept
    in :data:`RANKS_GIL` for the report."""
    RANKS_GIL.update(g for _, g in res)
    return [r for r, _ in res]


def interpreter_line(machine: dict[str, Any]) -> str:
    """``Python 3.13.5 (free-threaded, GIL off in the ranks)``: the interpreter of a run and
    whether its lock was on where the ranks ran."""
    py = f"Python {machine.get('python')}"
    if not machine.get("free_threaded"):
        return py
    ranks = machine.get("gil_in_ranks")
    where = ("in the ranks" if ranks else "in the driver")
    states = ranks if ranks else [machine.get("gil")]
    state = "on" if all(states) else "off" if not any(states) else "on in some, off in others"
    return f"{py} (free-threaded, GIL {state} {where})"


def machine_info() -> dict[str, Any]:
    """Where and with what a run was made: host, cores, Python (its build and whether the
    interpreter lock was on, in the driver and in the ranks of the run's jobs), amnet,
    pyzmq/libzmq, MPICH."""
    import amnet.coll  # noqa: F401  (what every job imports: were it to turn the lock on,
    import upc_rt  # noqa: F401  the driver would see it too)

    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else None,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "free_threaded": free_threaded(),
        "gil": gil_enabled(),
        "gil_in_ranks": sorted(RANKS_GIL) or None,
        "amnet": amnet_version(),
    }
    try:
        import zmq

        info["pyzmq"], info["libzmq"] = zmq.pyzmq_version(), zmq.zmq_version()
    except ImportError:
        info["pyzmq"] = info["libzmq"] = None
    mpiexec = find_mpiexec()
    info["mpiexec"] = mpiexec
    info["mpich"] = mpich_version(mpiexec)
    return info


# -- output -------------------------------------------------------------------------------


def now() -> str:
    """The current time, UTC, ISO 8601 to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cells(row: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"

    return [cells(columns), "|" + "|".join("---" for _ in columns) + "|",
            *(cells(r) for r in rows)]


def markdown(result: dict[str, Any], machine: dict[str, Any] | None = None,
             date: str | None = None) -> str:
    """The report of one suite run as Markdown: heading, machine line, table, notes; with a
    ``tables`` list, each of its tables under its ``title`` with its own ``notes``."""
    lines = [f"## amnet-bench {result['suite']}", ""]
    if machine:
        lines += [f"{date or now()} on {machine.get('hostname')}: "
                  f"{machine.get('cpu_count')} cores, {interpreter_line(machine)}, "
                  f"amnet {machine.get('amnet')}, pyzmq {machine.get('pyzmq')} "
                  f"(libzmq {machine.get('libzmq')})"
                  + (f", MPICH {machine['mpich']}" if machine.get("mpich") else ""), ""]
    if result.get("tables"):  # several tables, each with its title and notes
        for k, table in enumerate(result["tables"]):
            if k:
                lines.append("")
            if table.get("title"):
                lines += [f"### {table['title']}", ""]
            lines += _table(table["columns"], table["rows"])
            if table.get("notes"):
                lines.append("")
                lines += [f"- {n}" for n in table["notes"]]
        return "\n".join(lines) + "\n"
    table = result["table"]
    lines += _table(table["columns"], table["rows"])
    if result.get("notes"):
        lines.append("")
        lines += [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def write(out: Path, result: dict[str, Any], machine: dict[str, Any], argv: Sequence[str],
          date: str | None = None, plots: bool = True) -> tuple[Path, Path]:
    """Write ``out/results.json`` (everything) and ``out/results.md`` and, with ``plots``, a
    PNG per figure of ``result`` (:func:`amnet_bench._plot.plot`); return the first two.

    Raises:
        BenchError: a figure to draw and matplotlib not installed.
    """
    date = date or now()
    out.mkdir(parents=True, exist_ok=True)
    doc = {"suite": result["suite"], "date": date, "argv": list(argv), "machine": machine,
           **{k: v for k, v in result.items() if k != "suite"}}
    js, md = out / "results.json", out / "results.md"
    js.write_text(json.dumps(doc, indent=2) + "\n")
    md.write_text(markdown(result, machine, date))
    for fig in result.get("figures", ()) if plots else ():
        plot(out / fig["file"], fig)
    return js, md


class Progress:
    """Plain-text progress on stderr: one rewritten line on a terminal, else every ~10%."""

    def __init__(self, label: str, total: int, enabled: bool = True,
                 stream: TextIO | None = None):
        self.label, self.total, self.done = label, max(total, 1), 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self._last_decile = -1
        self._t0 = time.perf_counter()

    def step(self, what: str) -> None:
        """Count one unit of work done; ``what`` says which."""
        self.done += 1
        if not self.enabled:
            return
        pct = 100 * self.done // self.total
        line = f"[{self.label}] {self.done}/{self.total} ({pct}%) {what}"
        if self.tty:
            self.stream.write("\r" + line[:100].ljust(100))
        elif pct // 10 != self._last_decile:
            self._last_decile = pct // 10
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the progress display (newline on a terminal, elapsed time)."""
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
        elapsed = time.perf_counter() - self._t0
        self.stream.write(f"[{self.label}] done in {elapsed:.1f} s\n")
        self.stream.flush()


def interleave(label: str, reps: int, steps: Sequence[tuple[str, Callable[[], Any]]],
               progress: bool = True) -> None:
    """Run ``reps`` repetitions of ``steps``, each ``(what, fn)`` by calling ``fn()`` in
    turn (a figure and its peers interleaved in every repetition, each run in fresh
    processes), with a :class:`Progress` line under ``label``."""
    bar = Progress(label, reps * len(steps), enabled=progress)
    try:
        for rep in range(reps):
            for what, fn in steps:
                fn()
                bar.step(f"{what} rep {rep + 1}/{reps}")
    finally:
        bar.close()
