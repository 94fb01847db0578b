"""amnet-bench `nbcomm` (the autoNB paper's Fig. 7): the figures it returns, the counters its
kernels must produce, the bit-identical answers it insists on, the chart it draws.

Behaviour only (benchmarks are never timed tests): tiny kernels, few iterations, real 2-node
jobs with the emulated network latency; every figure checked is recomputed from the samples
the suite returns, every counter from the kernels' shapes.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys

import nbjobs
import pytest

import amnet
from amnet_bench import SUITES
from amnet_bench._nbjob import FORMS
from amnet_bench._nbkernels import DEFAULTS, KERNELS, check_params
from amnet_bench._report import markdown
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]
SMALL = {"gups": {"table_bits": 8, "batches": 2, "updates": 8, "work": 1},
         "stencil": {"nz": 4, "n": 8, "pieces": 2},
         "transpose": {"planes": 2, "n": 8},
         "sweep": {"cells": 4, "stride": 256}}
SETS = [x for k, ps in SMALL.items() for p, v in ps.items() for x in ("--set", f"{k}.{p}={v}")]
ITERS, SAMPLES, P = 4, 2, 2


@pytest.fixture(scope="module")
def res():
    return SUITES["nbcomm"](["--reps", "2", "--samples", str(SAMPLES), "--iters", str(ITERS),
                             *SETS], progress=False)


def test_the_kernels():
    assert list(KERNELS) == ["gups", "stencil", "transpose", "sweep"]


def test_figures_are_the_medians_and_ratios_of_the_samples(res):
    assert res["suite"] == "nbcomm"
    cfg = res["config"]
    assert cfg["ranks"] == 2 and cfg["nodes"] == 2 and cfg["latency_us"] == 10.0
    assert cfg["params"] == SMALL and cfg["kernels"] == list(KERNELS)
    assert [r["kernel"] for r in res["results"]] == list(KERNELS)
    for r in res["results"]:
        us = r["us_per_iter"]
        for f in FORMS:
            assert len(r["samples_us"][f]) == 2 and all(x > 0 for x in r["samples_us"][f])
            assert us[f] == pytest.approx(median(r["samples_us"][f]))
        for f in ("manual", "auto"):
            assert r["speedup"][f] == pytest.approx(us["blocking"] / us[f])
        sm, sa = r["speedup"]["manual"], r["speedup"]["auto"]
        assert r["auto_share"] == (pytest.approx((sa - 1) / (sm - 1)) if sm > 1 else None)
        assert r["comm_fraction"] == pytest.approx(1 - us["compute"] / us["blocking"])
        assert 0 <= r["check_fraction"] < 1
    geo = res["geomean"]
    for f in ("manual", "auto"):
        want = math.exp(sum(math.log(r["speedup"][f]) for r in res["results"]) / 4)
        assert geo[f] == pytest.approx(want)
    met = geo["auto"] >= 1.16
    note = next(n for n in res["notes"] if n.startswith("geometric-mean automatic speedup"))
    assert f"{geo['auto']:.2f}x (target >= 1.16x: {'met' if met else 'missed'})" in note
    worst = max(r["check_fraction"] for r in res["results"] if r["kernel"] != "sweep")
    note = next(n for n in res["notes"] if n.startswith("conflict checks"))
    assert f"at most {100 * worst:.2f}%" in note
    assert ("met" in note.rsplit(":", 1)[1]) == (worst < 0.01)
    main, stats = res["tables"]
    assert len(main["rows"]) == 5 and main["rows"][-1][0] == "geometric mean"
    assert all(len(row) == len(main["columns"]) for row in main["rows"])
    assert all(len(row) == len(stats["columns"]) for row in stats["rows"])
    text = markdown(res)
    assert text.startswith("## amnet-bench nbcomm") and "### Scheduler statistics" in text


def test_the_kernels_make_the_puts_gets_and_vis_calls_their_shapes_say(res):
    """Every timed automatic run, summed over both ranks (the last repetition)."""
    runs = SAMPLES * ITERS * P  # rank-iterations
    st = {r["kernel"]: r["stats"][-1] for r in res["results"]}
    g, s, t, w = SMALL["gups"], SMALL["stencil"], SMALL["transpose"], SMALL["sweep"]
    assert st["gups"]["puts_deferred"] == runs * g["batches"] * (P - 1)
    assert st["stencil"]["puts_deferred"] == runs * 2 * s["pieces"]
    assert st["transpose"]["puts_deferred"] == runs * t["planes"] * P  # its own block too
    for k in ("gups", "stencil", "transpose"):  # monotone addresses: never a scan
        assert st[k]["scans"] == 0 and st[k]["conflicts"] == 0
        assert st[k]["fast_checks"] == st[k]["puts_deferred"]
    # the sweep right is recorded in iterations 0 and 1 (two phase keys), then prefetched
    assert st["sweep"]["prefetch_hits"] == SAMPLES * P * (ITERS - 2) * w["cells"]
    # what the last barrier of a run prefetched for an iteration that never comes
    assert st["sweep"]["prefetches_wasted"] == SAMPLES * P * w["cells"]
    assert st["sweep"]["prefetches_issued"] == SAMPLES * P * (ITERS - 1) * w["cells"]
    # the sweep back gathers its cells in one VIS call an iteration
    assert st["sweep"]["aggregated_calls"] == runs
    assert st["sweep"]["aggregated_ops"] == runs * w["cells"]


def test_a_form_that_computes_something_else_fails_the_job(marked):
    plan = {"kernels": ["stencil"], "params": SMALL, "samples": 1, "iters": 3,
            "scheduler": {}}
    with pytest.raises(AssertionError, match=r"stencil on rank \d: the forms computed "
                       r"different answers in round 0: \{'blocking': '(\w+)', 'manual': "
                       r"'(?!\1)\w+', 'auto': '\1'\}"):
        amnet.run(functools.partial(nbjobs.nb_job_with_a_wrong_manual, plan=plan), n=2,
                  nodes=2, segment_size=1 << 20, timeout=120)


def test_the_default_parameters_are_valid_and_bad_ones_are_named():
    for k in KERNELS:
        assert check_params(k, DEFAULTS[k], 2) is None
        assert check_params(k, DEFAULTS[k], 16) is None
    assert "transpose.n (128) must be a multiple of the rank count (3)" == check_params(
        "transpose", DEFAULTS["transpose"], 3)


def test_cli_writes_json_markdown_and_the_bar_chart(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "nbcomm", "--reps", "1", "--samples", "1", "--iters", "3",
                        "--kernels", "gups,sweep", *SETS, "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("## amnet-bench nbcomm")
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == "nbcomm" and [r["kernel"] for r in doc["results"]] == [
        "gups", "sweep"]
    fig = doc["figures"][0]
    assert fig["kind"] == "bar" and fig["categories"] == ["gups", "sweep", "geo. mean"]
    assert [s["label"] for s in fig["series"]] == ["blocking", "manual", "auto"]
    png = (out / "nbcomm_fig7.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
