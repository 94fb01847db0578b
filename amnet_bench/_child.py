"""The callers' side of the peers that run as commands (:mod:`amnet_bench._shmpeer`, the
mpi4py jobs of :mod:`amnet_bench._mpipeer`): start one in a session of its own, take the
result it prints, and make every failure a :class:`~amnet_bench._registry.BenchError` that
names it. A command that fails or outlives its time is ended with its whole process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

Stop = Callable[[subprocess.Popen], tuple[str, str]]


def kill_group(p: subprocess.Popen) -> tuple[str, str]:
    """End a command's whole session at once (SIGKILL); everything it printed."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return p.communicate()


def run_command(cmd: Sequence[str], what: str, prefix: str, timeout: float,
                stop: Stop = kill_group,
                printed: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``cmd`` in a session of its own; return the JSON after ``prefix`` on the last
    line of its output that starts with it. ``stop(p)`` ends it when it runs past
    ``timeout`` seconds (or the caller stops waiting); ``printed(out)`` is then given
    everything it printed, whatever became of it.

    Raises:
        BenchError: ``what`` could not start, failed, ran too long or printed no result.
    """
    from ._registry import BenchError

    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError as e:
        raise BenchError(f"{what} could not be started: {e}")
    out = err = ""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop(p)
        raise BenchError(f"{what} did not finish within {timeout:g} s")
    finally:
        if p.poll() is None:
            out, err = stop(p)
        if printed is not None:
            printed(out)
    if p.returncode != 0:
        raise BenchError(f"{what} exited with status {p.returncode}: {err.strip()[-2000:]}")
    for line in reversed(out.splitlines()):
        if line.startswith(prefix):
            return json.loads(line[len(prefix):])
    raise BenchError(f"{what} printed no result line: {out.strip()[-2000:]!r} "
                     f"{err.strip()[-2000:]}")
