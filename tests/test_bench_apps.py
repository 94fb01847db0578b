"""amnet-bench `apps` (the hybrid paper's Fig. 6 kernels on upc_rt, per procs x threads
split): real quick runs of every split, the normalization and the lock shares recomputed
from what the suite returns, the arithmetic of the GIL share on known records, wrong answers
refused. Behaviour only, no timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import amnet
from amnet_bench import SUITES, BenchError
from amnet_bench import apps as apps_mod
from amnet_bench._report import markdown
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]


@pytest.fixture(scope="module")
def res():
    return SUITES["apps"](["--quick", "--reps", "2"], progress=False)


def test_every_kernel_and_split_is_measured_and_normalized(res):
    cfg = res["config"]
    assert cfg["splits"] == ["1T-2P", "2T-1P"] and cfg["reference"] == "2T-1P"
    assert cfg["kernels"] == ["gups", "sobel", "mcop", "lock", "compute"] and cfg["gil"]
    allrows = res["results"]
    # the compute kernel's serial reference (one rank, both halves) comes last
    assert [(r["kernel"], r["split"]) for r in allrows] == [
        (k, s) for k in cfg["kernels"] for s in ("1T-2P", "2T-1P")] + [("compute", "1 rank")]
    serial, rows = allrows[-1], allrows[:-1]
    assert serial["ops"] == 2 * apps_mod.QUICK["compute"]["elems"] and len(
        serial["reps"]["auto"]) == 2
    for r in rows:
        if r["kernel"] == "compute":
            assert r["vs_serial"] == pytest.approx(r["seconds"] / serial["seconds"])
    assert any(n.startswith("compute: pure-Python work") for n in res["notes"])
    for r in rows:
        assert len(r["reps"]["auto"]) == 2 and len(r["reps"]["spin"]) == 2
        assert r["seconds"] == pytest.approx(median([x["seconds"] for x in r["reps"]["auto"]]))
        ref = next(x for x in rows if x["kernel"] == r["kernel"] and x["split"] == "2T-1P")
        assert r["vs_ref"] == pytest.approx(r["seconds"] / ref["seconds"])
        assert r["us_per_op"] == pytest.approx(r["seconds"] / r["ops"] * 1e6)
        assert 0 <= r["drain_share"] < 1
        if r["gil_share"] is not None:  # where the kernel offers schedstat
            assert 0 <= r["gil_share"] < 1
        if r["split"] == "1T-2P":  # one rank-thread a process: nobody to wait for
            assert r["drain_share"] == 0.0
    ops = {r["kernel"]: r["ops"] for r in rows}
    q = apps_mod.QUICK
    assert ops["gups"] == q["gups"]["updates"] and ops["lock"] == q["lock"]["per"]
    assert ops["sobel"] == q["sobel"]["rows"] * q["sobel"]["cols"]
    assert ops["compute"] == q["compute"]["elems"]
    fig = res["figures"][0]
    assert fig["kind"] == "bar" and fig["categories"] == cfg["kernels"]
    assert [s["y"] for s in fig["series"] if s["label"] == "2T-1P"] == [[1.0] * 5]
    assert markdown(res).startswith("## amnet-bench apps")


def test_the_gil_share_is_off_cpu_time_less_the_drain_lock_waits():
    # two rank-threads of one process (pid 7), one round: 10 s each on the wall
    recs = [{"wall": [10.0], "cpu": [4.0], "delay": [1.0], "drain": [2.0], "pid": 7,
             "ops": 5},
            {"wall": [10.0], "cpu": [6.0], "delay": [1.0], "drain": [1.5], "pid": 7,
             "ops": 5}]
    f = apps_mod.job_figures(recs)
    # off CPU: 5 + 3 = 8 s; the process's drain waits, seen by both: 2 s
    assert f["seconds"] == 10.0 and f["drain"] == pytest.approx(2 / 20)
    assert f["gil"] == pytest.approx((8 - 2) / 20)
    recs[0]["cpu"] = [None]  # no schedstat: no GIL figure, the drain lock still
    assert apps_mod.job_figures(recs)["gil"] is None


def test_a_wrong_answer_is_refused():
    rec = {"error": None, "bad": 30, "size": 1000}
    with pytest.raises(BenchError, match=r"gups \(2T-1P, auto waits\) computed a wrong "
                                         r"answer: gups: 60 of 1000 entries wrong"):
        apps_mod.verify("gups", [rec, rec], "2T-1P", "auto")
    apps_mod.verify("gups", [dict(rec, bad=5)] * 2, "2T-1P", "auto")  # 1%: HPCC's limit
    with pytest.raises(BenchError, match=r"lock .* the counter is 3, not 4"):
        apps_mod.verify("lock", [{"error": "lock: the counter is 3, not 4", "bad": None}],
                         "1T-2P", "spin")


def _drain(ep):
    for _ in range(50):
        ep.get((ep.rank + 2) % ep.size, 0, 8)
    ep.barrier()
    return ep.statistics().drain_wait_s


def test_drain_wait_is_zero_alone_and_counted_with_rank_threads():
    alone = amnet.run(_drain, n=4, nodes=2, timeout=120)
    assert alone == [0.0] * 4
    threads = amnet.run(_drain, n=4, nodes=2, threads_per_proc=2, timeout=120)
    assert all(isinstance(x, float) and x >= 0 for x in threads)


def test_cli_quick_writes_the_report_and_its_chart(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "apps", "--quick", "--no-gil", "--kernels", "lock,sobel",
                        "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["gil"] is False and doc["config"]["kernels"] == ["lock", "sobel"]
    assert all(r["gil_share"] is None for r in doc["results"])
    assert (out / "apps_fig6.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
