"""amnet-bench `model` (MuPC's performance model, ch. 6-7): the prediction's arithmetic on a
known round (cache off and on, and the wait for a busy owner), the reference partitions the
kernels count, a real quick run in which every figure is recomputed from the returned
rounds, the options it refuses. Behaviour only: the
accuracy (|δ| <= 15%) is a measurement, in docs/benchmarks.md, not a test."""

from __future__ import annotations

import pytest

from amnet_bench import SUITES
from amnet_bench import model as model_mod
from amnet_bench._report import markdown
from amnet_bench._stats import median


def _round(comp=2.0, cache=None, stats=None):
    plat = {f"{pt}/{op}": {"wall": w} for pt, w in
            (("private", 1e-6), ("local", 3e-6), ("baseline", 50e-6), ("vector", 20e-6),
             ("coalesce", 30e-6)) for op in ("read", "write", "update")}
    return {"platform": plat, "barrier_s": 0.5, "cache": cache,
            "kernels": {"k": {"comp": comp, "actual": 9.0, "barriers": 1,
                              "cache_stats": stats}}}


def test_the_prediction_is_t_comp_plus_each_partitions_extra_cost_plus_barriers():
    parts = [{"name": "a", "op": "read", "counts": {"local": 1000, "baseline": 100}},
             {"name": "b", "op": "write", "counts": {"vector": 10}}]
    p = model_mod.predict(_round(), parts, "k")
    assert p["comp"] == 2.0 and p["sync"] == 0.5  # the private run; one barrier
    want = 1000 * (3e-6 - 1e-6) + 100 * (50e-6 - 1e-6) + 10 * (20e-6 - 1e-6)
    assert p["comm"] == pytest.approx(want)
    assert p["total"] == pytest.approx(2.0 + want + 0.5)
    # what waits for an owner: the 100 remote reads (the writes are not waited for)
    assert p["requests"] == 100 and p["waiting"] == pytest.approx(100 * 49e-6)
    assert p["accesses"] == 1110


def test_with_the_cache_remote_accesses_are_priced_by_the_kernels_cache_statistics():
    parts = [{"name": "u", "op": "update", "counts": {"local": 10, "baseline": 40}}]
    cc = {"miss": 100e-6, "hit_read": 2e-6, "hit_write": 4e-6, "writeback": 30e-6}
    st = {"hits": 76, "victim_hits": 0, "misses": 4, "writebacks": 3}
    p = model_mod.predict(_round(cache=cc, stats=st), parts, "k")
    hit = 76 / 80  # 40 reads and 40 writes, all seen by the cache
    want = (10 * (3e-6 - 1e-6)  # local updates at the local cost
            + 40 * (hit * (2e-6 - 1e-6) + (1 - hit) * (100e-6 - 1e-6))
            + 40 * (hit * (4e-6 - 1e-6) + (1 - hit) * (100e-6 - 1e-6)) + 3 * 30e-6)
    assert p["comm"] == pytest.approx(want)
    assert p["requests"] == pytest.approx(4) and p["waiting"] == pytest.approx(4 * 100e-6)


def test_a_request_waits_half_its_busy_owners_poll_interval():
    def pred(comp, comm, waiting, requests, accesses):
        return {"comp": comp, "comm": comm, "sync": 0.0, "total": comp + comm,
                "waiting": waiting, "requests": requests, "accesses": accesses, "attend": 0.0}

    ps = [pred(1.0, 3.0, 1.0, 10, 400), pred(2.0, 2.0, 2.0, 5, 800)]
    model_mod.attend(ps, nodes=[0, 1], every=64)
    # owner 1: 64 accesses take 64 * 4 / 800 s, half its time spent waiting itself
    assert ps[0]["attend"] == pytest.approx(10 * (1 - 0.5) * (64 * 4.0 / 800) / 2)
    assert ps[1]["attend"] == pytest.approx(5 * (1 - 0.25) * (64 * 4.0 / 400) / 2)
    assert ps[0]["total"] == pytest.approx(4.0 + ps[0]["attend"])
    same = [pred(1.0, 3.0, 1.0, 10, 400), pred(2.0, 2.0, 2.0, 5, 800)]
    model_mod.attend(same, nodes=[0, 0], every=64)  # one node: nothing waits for a poll
    model_mod.attend(same, nodes=[0, 1], every=0)  # upc_poll_every=0: no term
    assert [p["attend"] for p in same] == [0.0, 0.0]


@pytest.fixture(scope="module")
def res():
    return SUITES["model"](["--quick", "--cache", "off"], progress=False)


def test_a_quick_run_predicts_every_kernel_in_both_topologies(res):
    cfg = res["config"]
    assert cfg["topologies"] == ["node", "2nodes"] and cfg["caches"] == ["off"]
    rows = res["results"]
    assert [(r["topology"], r["kernel"]) for r in rows] == [
        (t, k) for t in ("node", "2nodes") for k in ("histogram", "matmul", "sobel")]
    assert cfg["bind_to"] == "core" and cfg["conduit"] == ["zmq"]
    for r in rows:
        rd = r["rounds"]
        assert len(rd["measured"]) == len(rd["predicted"]) == cfg["samples"]
        assert r["measured_s"] == pytest.approx(median(rd["measured"]))
        assert r["predicted_s"] == pytest.approx(median(rd["predicted"]))
        assert rd["delta"] == pytest.approx([(p - m) / m for m, p in
                                             zip(rd["measured"], rd["predicted"], strict=True)])
        assert r["delta"] == pytest.approx(median(rd["delta"]))
        lo, hi = r["delta_iqr"]
        assert min(rd["delta"]) <= lo <= r["delta"] <= hi <= max(rd["delta"])
        # communication is the cost beyond private accesses: never negative, and 0 where
        # the shared accesses measured no dearer than private ones (within noise)
        assert r["comp_s"] > 0 and r["comm_s"] >= 0 and r["sync_s"] > 0
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
