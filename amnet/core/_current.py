"""Which rank the calling thread is, and how a failing rank ends the job.

State the engine and the runtime (:mod:`._runtime`, above the engine) share, kept below both:
the runtime binds each rank-thread's ``RankContext`` here (``_tls.rank``), the engine reads it
and ends the job through :func:`fail_rank` when a handler raises. What the launcher is told
about the failure is the runtime's business: it installs that report with
:func:`set_failure_report` when it is imported.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_tls = threading.local()  # .rank: the RankContext bound to this thread (runtime.bind_rank)
_report: Callable[[int, BaseException, str], None] | None = None


def set_failure_report(report: Callable[[int, BaseException, str], None] | None) -> None:
    """``report(rank, exc, summary)`` tells the launcher that ``rank`` failed with ``exc``
    (set once, by :mod:`._runtime`); it must not raise."""
    global _report
    _report = report


def fail_rank(rank: int, exc: BaseException, summary: str, tb: str) -> None:
    """A handler failed on ``rank``: print why and end the job as that rank's failure.

    Never returns (the process exits with status 1).
    """
    text = f"amnet: {summary}\n{tb}"
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
        sys.stdout.flush()
    except Exception:
        pass
    report = _report
    if report is not None:
        report(rank, exc, summary)
    os._exit(1)
