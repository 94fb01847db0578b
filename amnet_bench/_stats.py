"""Statistics for ``amnet-bench``: the one owner of medians and percentiles.

Every figure of every suite comes from here. Percentiles interpolate linearly between the
sorted samples, as numpy's default method does; the median is the 50th percentile.

The standard library only, and nothing of amnet_bench: the peers that run as scripts
(``_shmpeer.py``, ``_mpipeer.py`` under ``mpiexec``) import it as their sibling module
``_stats``, in an interpreter with no amnet in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentiles(samples: Sequence[float], ps: Sequence[float]) -> list[float]:
    """The ``ps`` percentiles (0..100) of ``samples``, interpolated linearly between the
    sorted samples (numpy's default). Raises ValueError for no samples."""
    s = sorted(samples)
    if not s:
        raise ValueError("percentiles of no samples")
    out = []
    for p in ps:
        k = (len(s) - 1) * p / 100
        lo = math.floor(k)
        hi = min(lo + 1, len(s) - 1)
        out.append(s[lo] + (s[hi] - s[lo]) * (k - lo))
    return out


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (at least one)."""
    return percentiles(samples, [50])[0]


def stats(samples: Sequence[float], keep: bool = True) -> dict[str, Any]:
    """``median``, ``p10``, ``p90``, ``min``, ``max``, ``mean`` and ``n`` of ``samples``,
    and with ``keep`` every sample (``samples``). Raises ValueError for no samples."""
    p10, p50, p90 = percentiles(samples, [10, 50, 90])
    out: dict[str, Any] = {"median": p50, "p10": p10, "p90": p90, "min": min(samples),
                           "max": max(samples), "mean": sum(samples) / len(samples),
                           "n": len(samples)}
    if keep:
        out["samples"] = list(samples)
    return out


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """``{"median", "min", "max", "samples"}`` of a few samples (one figure a repetition)."""
    return {"median": median(samples), "min": min(samples), "max": max(samples),
            "samples": list(samples)}


def over_reps(per_rep: list[dict[str, Any]]) -> dict[str, Any]:
    """Repetitions' :func:`stats` combined: the median over the repetitions of each
    statistic, and every repetition's statistics (``reps``)."""
    keys = ("median", "p10", "p90", "min", "mean")
    out: dict[str, Any] = {k: median([r[k] for r in per_rep]) for k in keys}
    out["reps"] = per_rep
    return out
