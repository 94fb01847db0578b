"""amnet-bench `model` (MuPC's performance model, ch. 6-7): the prediction's arithmetic on a
known thread, the reference partitions the kernels count, a real quick run in which every
figure is recomputed from the returned samples, the options it refuses. Behaviour only: the
accuracy (|δ| <= 15%) is a measurement, in docs/benchmarks.md, not a test."""

from __future__ import annotations

import pytest

from amnet.bench import SUITES
from amnet.bench import model as model_mod
from amnet.bench._report import markdown, median


def _thread(partitions, comp=(1.0, 3.0, 2.0)):
    plat = {f"{pt}/{op}": {"wall": w} for pt, w in
            (("private", 1e-6), ("local", 3e-6), ("baseline", 50e-6), ("vector", 20e-6),
             ("coalesce", 30e-6)) for op in ("read", "write", "update")}
    return {"thread": 0, "platform": plat, "barrier_s": 0.5,
            "kernels": {"k": {"comp": list(comp), "actual": [9.0], "barriers": 1,
                              "partitions": partitions, "ok": True}}}


def test_the_prediction_is_t_comp_plus_each_partitions_extra_cost_plus_barriers():
    parts = [{"name": "a", "op": "read", "counts": {"local": 1000, "baseline": 100}},
             {"name": "b", "op": "write", "counts": {"vector": 10}}]
    p = model_mod.predict(_thread(parts), "k")
    assert p["comp"] == 2.0 and p["sync"] == 0.5  # the median private run; one barrier
    want = 1000 * (3e-6 - 1e-6) + 100 * (50e-6 - 1e-6) + 10 * (20e-6 - 1e-6)
    assert p["comm"] == pytest.approx(want)
    assert p["total"] == pytest.approx(2.0 + want + 0.5)


@pytest.fixture(scope="module")
def res():
    return SUITES["model"](["--quick", "--cache", "off"], progress=False)


def test_a_quick_run_predicts_every_kernel_in_both_topologies(res):
    assert SUITES["model"] is model_mod.model
    cfg = res["config"]
    assert cfg["topologies"] == ["node", "2nodes"] and cfg["caches"] == ["off"]
    rows = res["results"]
    assert [(r["topology"], r["kernel"]) for r in rows] == [
        (t, k) for t in ("node", "2nodes") for k in ("histogram", "matmul", "sobel")]
    for r in rows:
        assert r["measured_s"] == pytest.approx(median(r["reps"]["measured"]))
        assert r["predicted_s"] == pytest.approx(median(r["reps"]["predicted"]))
        assert r["delta"] == pytest.approx((r["predicted_s"] - r["measured_s"]) /
                                           r["measured_s"])
        assert r["comp_s"] > 0 and r["comm_s"] > 0 and r["sync_s"] > 0
    assert res["worst_delta"] == pytest.approx(max(abs(r["delta"]) for r in rows))
    assert markdown(res).startswith("## amnet-bench model")


def test_the_kernels_count_their_partitions_from_their_index_sets(res):
    q = model_mod.QUICK
    by = {(r["topology"], r["kernel"]): r["partitions"] for r in res["results"]}
    hist = by[("node", "histogram")]  # thread 0's: every increment one update
    assert [p["op"] for p in hist] == ["update"]
    assert sum(hist[0]["counts"].values()) == q["histogram"]["updates"]
    n = q["matmul"]["n"]
    mm = {p["name"]: p["counts"] for p in by[("node", "matmul")]}
    rows = n // 2  # thread 0 of 2: the first half of the rows
    assert mm["A[i][k]"] == {"local": rows * n * n}
    assert sum(mm["B[k][j]"].values()) == rows * n * n
    assert mm["B[k][j]"]["vector"] == rows * n * n // 2  # the other thread's columns
    assert mm["C[i][j]"] == {"local": rows * n}
    sob = {p["name"]: p["counts"] for p in by[("node", "sobel")]}
    r = q["sobel"]["rows"]
    n = 2 * r
    assert sob["E[i][j]"] == {"local": (r - 1) * (n - 2)}  # thread 0 skips the image's row 0
    assert sob["O[i+1][*]"]["vector"] == 5 * (n - 2)  # its last row reads thread 1's first
    assert sob["O[i-1][*]"].get("vector", 0) == 0


@pytest.mark.parametrize(("args", "says"), [
    (["--reps", "0"], "--reps must be at least 1"),
    (["--threads", "3"], "--threads must be in 2..16 (even with 2nodes)"),
    (["--min-time", "0"], "--min-time must be in (0, 10]"),
    (["--kernels", "fft"], "kernels are histogram, matmul, sobel"),
])
def test_bad_options_are_refused_with_the_reason(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        SUITES["model"](args, progress=False)
    assert e.value.code == 2 and says in capsys.readouterr().err
