"""amnet-bench `vis`: the figures it returns and the plot it draws, from tiny real runs.

Behaviour only (benchmarks are never timed tests): the suite runs real 2-node jobs with a few
small sizes, and the returned dict is checked for its shape, positive figures, ratios and
target lines computed from them; through the command line, ``--out`` writes the JSON, the
Markdown and a PNG.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amnet_bench import SUITES, BenchError, _report
from amnet_bench import vis as vis_mod
from amnet_bench._report import markdown
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]
TINY = ["--reps", "2", "--sizes", "1K,16K,1M", "--latency", "0,10", "--samples", "1",
        "--min-time", "0.001"]


def test_vis_figures(marked):
    res = SUITES["vis"](TINY, progress=False)
    assert res["suite"] == "vis"
    cfg = res["config"]
    assert cfg["sizes"] == [1024, 16384, 1 << 20] and cfg["latencies_us"] == [0.0, 10.0]
    assert cfg["conduits"] == ["zmq", "tcp"]  # the default: both, a job each
    assert cfg["elem"] == 256 and cfg["stride"] == 850
    assert cfg["segment_size"] >= (1 << 20) // 256 * 850
    rows = res["results"]
    assert [(r["conduit"], r["latency_us"], r["size"]) for r in rows] == [
        (cd, lat, s) for cd in ("zmq", "tcp") for lat in (0.0, 10.0)
        for s in (1024, 16384, 1 << 20)]
    for r in rows:
        for m in vis_mod.METHODS:
            assert len(r["samples"][m]) == 2 and all(x > 0 for x in r["samples"][m])
            assert r["seconds"][m] == median(r["samples"][m])
            assert r["mb_s"][m] == pytest.approx(r["size"] / r["seconds"][m] / 1e6)
    table = res["table"]
    assert len(table["rows"]) == len(rows)
    assert all(len(row) == len(table["columns"]) for row in table["rows"])
    one = [r for r in rows if r["size"] == 1 << 20]
    targets = [n for n in res["notes"] if ", 1 MiB: VIS = " in n]
    assert len(targets) == 4
    for r, note in zip(one, targets, strict=True):
        assert note.startswith(f"{r['conduit']}, latency {r['latency_us']:g} µs, 1 MiB")
        vf = r["mb_s"]["vis"] / r["mb_s"]["flood"]
        vc = r["mb_s"]["vis"] / r["mb_s"]["contig"]
        assert f"{vf:.1f}x the flood" in note and f"{vc:.2f}x the contiguous" in note
        assert ("target >= 20x: met" in note) == (vf >= 20)
        assert ("target >= 0.5x: met" in note) == (vc >= 0.5)
    assert [f["file"] for f in res["figures"]] == ["vis_fig6_zmq.png", "vis_fig6_tcp.png"]
    for fig in res["figures"]:
        assert len(fig["series"]) == 6
        for s in fig["series"]:
            assert s["x"] == cfg["sizes"] and len(s["y"]) == 3 and all(y > 0 for y in s["y"])
    text = markdown(res)
    assert text.startswith("## amnet-bench vis") and all(f"- {n}" in text for n in res["notes"])


def test_cli_writes_json_markdown_and_png(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "vis", "--reps", "1", "--sizes", "1K,4K", "--latency", "0",
                        "--samples", "1", "--min-time", "0.001", "--conduit", "tcp",
                        "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("## amnet-bench vis")
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == "vis" and len(doc["results"]) == 2
    assert (out / "results.md").read_text().startswith("## amnet-bench vis")
    assert not (out / "vis_fig6_zmq.png").exists()
    png = (out / "vis_fig6_tcp.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert str(out / "vis_fig6_tcp.png") in p.stderr


def test_plot_without_matplotlib_is_a_bench_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    fig = {"file": "f.png", "title": "t", "xlabel": "x", "ylabel": "y",
           "series": [{"label": "a", "x": [1, 2], "y": [1, 2]}]}
    with pytest.raises(BenchError, match="matplotlib"):
        _report.plot(tmp_path / "f.png", fig)
    assert not (tmp_path / "f.png").exists()
