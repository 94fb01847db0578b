"""Every `amnet-bench` suite runs with `--quick` (the short run meant for a 2-core machine)
through the command line and writes a results.json with the keys a reader relies on and
sane numbers. A smoke test: no timing assertions."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from amnet.bench import SUITES

BENCH = [sys.executable, "-m", "amnet.bench"]
KEYS = {"suite", "date", "argv", "machine", "config", "results", "notes"}


# signed by nature: the model's relative error (negative when it predicts too little);
# nbcomm's share of the manual gain (negative when the automatic form loses to blocking) and
# communication fraction (negative when the run without communication happens to be slower)
SIGNED = {"delta", "auto_share", "comm_fraction", "comm_s"}  # comm_s: a difference of costs


def _numbers(x, key=""):
    """Every number under ``x`` but the signed ones."""
    if isinstance(x, bool) or key in SIGNED:
        return
    if isinstance(x, int | float):
        yield float(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, k)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _numbers(v, key)


def test_every_suite_is_covered():
    assert set(SUITES) == {"am", "apps", "coll", "hybrid", "inject", "model", "nbcomm",
                           "rma", "startup", "upc", "vis"}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_quick_runs_and_writes_its_results(suite, marked, tmp_path):
    out = tmp_path / suite
    p = subprocess.run([*BENCH, suite, "--quick", "--out", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"## amnet-bench {suite}")
    doc = json.loads((out / "results.json").read_text())
    assert KEYS <= set(doc) and doc["suite"] == suite and "--quick" in doc["argv"]
    assert doc["machine"]["cpu_count"] >= 1 and doc["results"]
    nums = list(_numbers(doc["results"]))
    assert nums and all(math.isfinite(v) and v >= 0 for v in nums)
    assert any(v > 0 for v in nums)
    for fig in doc.get("figures", ()):
        assert (out / fig["file"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
