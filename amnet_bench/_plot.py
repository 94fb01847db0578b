"""The PNG plots of ``amnet-bench --out``: a suite's figure dicts drawn with matplotlib.

A figure is plain data (it goes into ``results.json`` as it is), so a plot can be redrawn from
a results file. Keys:

``file``      the PNG's name under ``--out DIR``
``title``, ``xlabel``, ``ylabel``
``better``    ``"lower"`` or ``"higher"``: which way the y axis is better, written on it
``caption``   lines drawn on the figure under the axes: what the labels' notation means
              (``1T-2P``, ``B``/``NB``)
``ylog``      True or False; left out, the data decide: a log axis when the positive values
              span more than :data:`LOG_SPAN` (a 2 µs bar beside a 300 µs one stays visible)
``xlog``      a log2 x axis (message sizes); ``xbytes``: ticks at the measured x values,
              labelled in bytes, KiB, MiB
``series``    curves ``{"label", "x", "y", "style", "group", "marker"}``: a marker at every
              measured point, a line only between measured neighbours; a ``y`` of None is a
              size not measured, drawn as a gap. A ``group`` keeps one colour.
``kind``      ``"bar"``: grouped bars instead, a bar per series ``{"label", "y"}`` in each of
              the ``categories``, its value written above it (nothing where ``y`` is None);
              more than 6 categories get smaller tick labels, so that they do not overlap
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from ._options import size_label

#: Positive values spanning more than this factor get a log y axis (unless ``ylog`` is given).
LOG_SPAN = 30.0

#: What to do without matplotlib: the package, the install commands, and the way out.
MISSING = ("the plots of --out need matplotlib, which is not installed: pip install "
           "matplotlib (or pip install 'amnet[peers]'); or add --no-plots to write only "
           "results.json and results.md")


def require_matplotlib() -> Any:
    """Import matplotlib's pyplot on the Agg backend (no display needed) and return it.

    Raises:
        BenchError: matplotlib is not installed; the message names the package, the install
            command and ``--no-plots``.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from ._registry import BenchError

        raise BenchError(MISSING) from None
    return plt


def _measured(ys: Any) -> list[float]:
    """The measured values among ``ys``: finite numbers (None is not measured)."""
    return [float(v) for v in ys if v is not None and math.isfinite(float(v))]


def wants_log(values: Any, span: float = LOG_SPAN) -> bool:
    """Whether ``values`` (None for not measured) need a log axis: all positive, and the
    largest more than ``span`` times the smallest."""
    vals = _measured(values)
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > span


def _ylabel(fig: dict[str, Any]) -> str:
    better = fig.get("better")
    if better is None:
        return fig["ylabel"]
    if better not in ("lower", "higher"):
        raise ValueError(f"a figure's 'better' is 'lower' or 'higher', got {better!r}")
    return f"{fig['ylabel']} ({better} is better)"


def draw(fig: dict[str, Any]) -> Any:
    """Draw one figure dict (see the module's docstring) and return the matplotlib Figure;
    the caller saves and closes it (:func:`plot` does both).

    Raises:
        BenchError: matplotlib is not installed.
        ValueError: ``better`` is neither ``"lower"`` nor ``"higher"``.
    """
    plt = require_matplotlib()
    caption = fig.get("caption") or []
    if isinstance(caption, str):
        caption = [caption]
    lines = [w for c in caption for w in textwrap.wrap(c, 120)]
    f, ax = plt.subplots(figsize=(7, 4.5 + 0.16 * len(lines)), dpi=120)
    ys = [y for s in fig["series"] for y in s["y"]]
    ylog = fig.get("ylog")
    if ylog is None:
        ylog = wants_log(ys)
    if fig.get("kind") == "bar":
        _bars(ax, fig, ylog)
    else:
        _curves(ax, fig, ylog)
    ax.set_xlabel(fig["xlabel"])
    ax.set_ylabel(_ylabel(fig))
    ax.set_title(fig["title"], fontsize=10)
    if fig["series"]:
        ax.legend(fontsize=7)
    bottom = 0.0
    if lines:
        height = f.get_figheight() * 72  # points
        bottom = (len(lines) * 9 + 8) / height
        f.text(0.01, 0.01, "\n".join(lines), fontsize=7, va="bottom", ha="left")
    f.tight_layout(rect=(0, bottom, 1, 1))
    return f


def plot(path: Path, fig: dict[str, Any]) -> Path:
    """Draw one figure of a suite's result (see :func:`draw`) as the PNG ``path``.

    Raises:
        BenchError: matplotlib is not installed (the message says how to install it).
    """
    f = draw(fig)
    try:
        f.savefig(path)
    finally:
        require_matplotlib().close(f)
    return path


def _curves(ax: Any, fig: dict[str, Any], ylog: bool) -> None:
    from matplotlib.ticker import NullLocator

    colours: dict[str, str] = {}
    for s in fig["series"]:
        group = s.get("group", s["label"])
        y = [math.nan if v is None else float(v) for v in s["y"]]  # NaN: a gap in the line
        line = ax.plot(s["x"], y, s.get("style", "-"), marker=s.get("marker", "o"),
                       markersize=4, linewidth=1, label=s["label"],
                       color=colours.get(group))[0]
        colours.setdefault(group, line.get_color())
    if fig.get("xlog"):
        ax.set_xscale("log", base=2)
    if fig.get("xbytes"):
        xs = sorted({x for s in fig["series"] for x, y in zip(s["x"], s["y"], strict=True)
                     if y is not None})
        ax.set_xticks(xs, [size_label(int(x)) for x in xs], fontsize=7)
        ax.xaxis.set_minor_locator(NullLocator())  # no ticks at sizes not measured
    if ylog:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def _number(v: float) -> str:
    """A bar's value: three significant digits (``1.00``, ``68.4``, ``0.0120``), whole from
    100 up."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:#.3g}"


def _bars(ax: Any, fig: dict[str, Any], ylog: bool) -> None:
    cats, series = fig["categories"], fig["series"]
    width = 0.8 / max(len(series), 1)
    for i, s in enumerate(series):
        xs = [c + (i - (len(series) - 1) / 2) * width for c in range(len(cats))]
        ys = [math.nan if v is None else float(v) for v in s["y"]]
        bars = ax.bar(xs, ys, width, label=s["label"], log=ylog)
        ax.bar_label(bars, labels=["" if math.isnan(v) else _number(v) for v in ys],
                     fontsize=6)
    ax.set_xticks(range(len(cats)), cats, fontsize=7 if len(cats) > 6 else None)  # fit
    ax.grid(True, axis="y", which="both" if ylog else "major", alpha=0.3)
