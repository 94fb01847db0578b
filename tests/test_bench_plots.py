"""amnet-bench's plots and `--out`: every suite's `--help` lists `--out`; a missing matplotlib
stops the command line before anything is measured (unless `--no-plots`); the figures drawn,
inspected as matplotlib objects (axis scales, labels, captions, the points drawn), never as
pixels."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amnet_bench import SUITES
from amnet_bench import hybrid as hybrid_mod
from amnet_bench._plot import LOG_SPAN, draw, plot, wants_log

BENCH = [sys.executable, "-m", "amnet_bench"]
DOCS_HYBRID = Path(__file__).resolve().parent.parent / "docs" / "hybrid"
PLOTTING = sorted(name for name, fn in SUITES.items() if fn.plots)


def _close(f) -> None:
    import matplotlib.pyplot as plt

    plt.close(f)


def _texts(f) -> str:
    """Every text written on the figure itself (captions), joined."""
    return "\n".join(t.get_text() for t in f.texts)


def _points(ax) -> int:
    """The data points the axes' lines draw: finite (x, y) pairs."""
    return sum(1 for line in ax.get_lines() for x, y in line.get_xydata()
               if math.isfinite(x) and math.isfinite(y))


def _without_matplotlib(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import matplotlib` fails, as where it is not installed."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "matplotlib.py").write_text(
        'raise ImportError("No module named \'matplotlib\' (test shim)")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH")) if p)
    return env


def test_the_plotting_suites_are_those_that_draw_figures():
    assert PLOTTING == ["apps", "coll", "hybrid", "inject", "nbcomm", "shmem", "vis"]


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suites_help_lists_out(name):
    p = subprocess.run([*BENCH, name, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # argparse wraps the help to the terminal's width
    assert "--out DIR" in text and "DIR/results.json" in text, p.stdout
    if SUITES[name].plots:
        assert "--no-plots" in text and "matplotlib" in text
        assert all(png in text for png in SUITES[name].plots), p.stdout
    else:
        assert "this suite draws no plots" in text and "--no-plots" not in text


def test_a_suite_called_from_python_refuses_out(capsys):
    with pytest.raises(SystemExit) as e:
        SUITES["startup"](["--out", "/tmp/x"], progress=False)
    assert e.value.code == 2
    assert "--out and --no-plots are the amnet-bench command line's" in capsys.readouterr().err


def test_missing_matplotlib_stops_before_anything_is_measured(tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "apps", "--quick", "--kernels", "lock", "--out", str(out)],
                       capture_output=True, text=True, timeout=300,
                       env=_without_matplotlib(tmp_path))
    assert p.returncode == 1
    assert p.stderr.startswith("amnet-bench: error: apps: the plots of --out need matplotlib")
    assert "pip install matplotlib" in p.stderr and "--no-plots" in p.stderr
    assert "[apps]" not in p.stderr and p.stdout == ""  # no progress, no table: nothing ran
    assert not out.exists()


def test_no_plots_writes_the_results_without_matplotlib(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "apps", "--quick", "--kernels", "lock", "--no-gil",
                        "--splits", "1", "--out", str(out), "--no-plots"],
                       capture_output=True, text=True, timeout=300,
                       env=_without_matplotlib(tmp_path))
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["figures"] and sorted(x.name for x in out.iterdir()) == [
        "results.json", "results.md"]
    assert ".png" not in p.stderr


def test_a_suite_without_plots_needs_no_matplotlib(tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "startup", "--reps", "1", "--ranks", "2", "--warmup", "0",
                        "--out", str(out)], capture_output=True, text=True, timeout=300,
                       env=_without_matplotlib(tmp_path))
    assert p.returncode == 0, p.stderr
    assert (out / "results.json").is_file()


def test_bars_spanning_orders_of_magnitude_get_a_log_axis():
    fig = {"kind": "bar", "title": "t", "xlabel": "partner", "ylabel": "µs",
           "better": "lower", "caption": ["1T-2P: one rank-thread in each of 2 processes"],
           "categories": ["node", "net"],
           "series": [{"label": "1T-2P", "y": [2.7, 400.0]}, {"label": "2T-1P",
                                                              "y": [3.1, 410.0]}]}
    f = draw(fig)
    ax = f.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "µs (lower is better)"
    assert "1T-2P: one rank-thread" in _texts(f)
    assert len(ax.patches) == 4  # every bar drawn
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1T-2P", "2T-1P"]
    _close(f)
    close = dict(fig, series=[{"label": "a", "y": [1.0, 1.4]}, {"label": "b", "y": [1.2, 0.9]}],
                 better="higher")
    f = draw(close)
    assert f.axes[0].get_yscale() == "linear"
    assert f.axes[0].get_ylabel() == "µs (higher is better)"
    _close(f)


def test_the_data_decide_the_scale_unless_the_figure_says():
    assert wants_log([2.7, 400]) and not wants_log([1.0, LOG_SPAN])
    assert not wants_log([0.0, 400]) and not wants_log([None, None])
    assert wants_log([None, 1.0, 100.0])
    fig = {"title": "t", "xlabel": "x", "ylabel": "y", "ylog": False,
           "series": [{"label": "a", "x": [1, 2], "y": [1.0, 1000.0]}]}
    f = draw(fig)
    assert f.axes[0].get_yscale() == "linear"
    _close(f)


def test_curves_mark_measured_points_and_leave_gaps():
    sizes = [8, 64, 512, 4096]
    fig = {"title": "t", "xlabel": "bytes per put", "ylabel": "MB/s", "better": "higher",
           "xlog": True, "xbytes": True,
           "series": [{"label": "a", "x": sizes, "y": [0.1, 1.0, None, 100.0]},
                      {"label": "b", "x": sizes, "y": [None, 2.0, 20.0, None],
                       "style": "--"}]}
    f = draw(fig)
    ax = f.axes[0]
    assert _points(ax) == 5  # the measured points, nothing interpolated
    a, b = ax.get_lines()
    assert a.get_marker() == "o" and b.get_marker() == "o"  # a marker at every point
    assert math.isnan(a.get_ydata()[2])  # the line breaks where a size was not measured
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"  # 0.1..100: 1000x
    assert list(ax.get_xticks()) == sizes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8 B", "64 B", "512 B", "4 KiB"]
    assert ax.get_ylabel() == "MB/s (higher is better)"
    _close(f)


def test_a_bad_better_is_refused():
    fig = {"title": "t", "xlabel": "x", "ylabel": "y", "better": "faster",
           "series": [{"label": "a", "x": [1], "y": [1.0]}]}
    with pytest.raises(ValueError, match="'lower' or 'higher'"):
        draw(fig)


def test_the_committed_hybrid_report_redraws_with_its_notation_explained(tmp_path):
    doc = json.loads((DOCS_HYBRID / "results-8ranks-2nodes.json").read_text())
    figs = {f["file"]: f for f in hybrid_mod.figures(doc["config"], doc["results"])}
    assert list(figs) == ["hybrid_am.png", "hybrid_apps.png", "hybrid_bandwidth_p2p.png",
                          "hybrid_bandwidth_p2m.png", "hybrid_coll.png"]
    assert figs == {f["file"]: f for f in doc["figures"]}  # as committed with the PNGs
    f = draw(figs["hybrid_am.png"])
    ax = f.axes[0]
    assert ax.get_yscale() == "log"  # a few µs in a process beside ~500 µs across nodes
    assert "lower is better" in ax.get_ylabel()
    assert "xT-yP: x rank-threads (T) in each of y processes (P)" in _texts(f)
    assert "1T-4P: 4 processes of 1 rank-thread each" in _texts(f)
    _close(f)
    f = draw(figs["hybrid_apps.png"])
    assert f.axes[0].get_yscale() == "linear" and "lower is better" in f.axes[0].get_ylabel()
    _close(f)
    f = draw(figs["hybrid_bandwidth_p2p.png"])
    ax = f.axes[0]
    assert "higher is better" in ax.get_ylabel()
    assert "B: blocking puts" in _texts(f) and "NB: nonblocking puts" in _texts(f)
    assert "xT-yP" in _texts(f)
    assert _points(ax) == 3 * 2 * 5  # splits x modes x sizes, as measured
    _close(f)
    assert plot(tmp_path / "a.png", figs["hybrid_am.png"]).read_bytes()[:4] == b"\x89PNG"
