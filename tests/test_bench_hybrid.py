"""amnet-bench `hybrid` (the hybrid study in one run: AM round trips, injection bandwidth,
the kernels and the collectives over every procs x threads split): a real quick run, the
"which split" answers recomputed from the bandwidths the suite returns, the reference split's
ratios, the collectives' model and the refusal of a wrong answer, the options it refuses.
Behaviour only, no timing assertions."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import hcolljobs
import numpy as np
import pytest

import amnet
from amnet_bench import SUITES, BenchError
from amnet_bench import _hcolljob as hcoll
from amnet_bench import hybrid as hybrid_mod
from amnet_bench._hcolljob import COLLECTIVES
from amnet_bench._options import choice_list
from amnet_bench._plot import draw, require_matplotlib, wants_log
from amnet_bench._report import markdown

BENCH = [sys.executable, "-m", "amnet_bench"]


@pytest.fixture(scope="module")
def res():
    return SUITES["hybrid"](["--quick", "--ranks", "4", "--kernels", "gups,lock"],
                            progress=False)


def test_one_report_answers_which_split_for_each_size_mode_and_pattern(res):
    cfg = res["config"]
    assert cfg["splits"] == ["1T-2P", "2T-1P"] and cfg["reference"] == "2T-1P"
    assert cfg["quick"] and cfg["modes"] == ["B", "NB"] and cfg["patterns"] == ["p2p"]
    assert [t["section"] for t in res["tables"]] == ["am", "inject", "bandwidth", "apps",
                                                     "coll"]
    am = res["results"]["am"]
    assert [a["split"] for a in am] == ["1T-2P", "2T-1P"]
    assert all(a["node_us"] > 0 and a["net_us"] > 0 for a in am)
    answers = res["results"]["inject"]
    assert [(a["size"], a["mode"]) for a in answers] == [
        (z, m) for z in (8, 4096, 65536) for m in ("B", "NB")]
    for a in answers:  # the best split is the one that moved the most bytes
        bws = a["mb_s"]
        assert a["best"] == max(bws, key=bws.get)
        assert a["best_over_worst"] == pytest.approx(max(bws.values()) / min(bws.values()))
    kernels = res["results"]["apps"]
    assert [(k["kernel"], k["split"]) for k in kernels] == [
        (k, s) for k in ("gups", "lock") for s in ("1T-2P", "2T-1P")]
    assert all(k["vs_ref"] == 1.0 for k in kernels if k["split"] == "2T-1P")
    assert all(k["drain_share"] == 0.0 for k in kernels if k["split"] == "1T-2P")
    assert [f["file"] for f in res["figures"]] == [
        "hybrid_am.png", "hybrid_apps.png", "hybrid_bandwidth_p2p.png", "hybrid_coll.png"]
    text = markdown(res)
    assert text.startswith("## amnet-bench hybrid") and "### Which split" in text
    apps = next(t for t in res["tables"] if t["section"] == "apps")
    assert apps["columns"][:4] == ["kernel", "2T-1P s", "1T-2P / 2T-1P",
                                   "best (over the worst)"]
    bw = next(t for t in res["tables"] if t["section"] == "bandwidth")
    assert bw["columns"][2:4] == ["8 B, B", "8 B, NB"]
    assert bw["notes"][0].startswith("Modes: B: blocking puts")


def test_the_report_reads_as_text_for_a_user(res):
    # what a user reads: no column that is always 1.00, no "8 B B", no MPICH line for a
    # suite without MPICH, no commit names
    machine = {"hostname": "h", "cpu_count": 2, "python": "3.11", "amnet": "0.1.0",
               "pyzmq": "27", "libzmq": "4.3", "mpich": None}
    text = markdown(res, machine)
    assert "MPICH" not in text.splitlines()[2] and "(libzmq 4.3)" in text.splitlines()[2]
    assert "MPICH 4.3.0" in markdown(res, {**machine, "mpich": "4.3.0"}).splitlines()[2]
    assert "2T-1P vs 2T-1P" not in text and "2T-1P / 2T-1P" not in text
    assert " B B" not in text
    assert "commit" not in text.lower()


def test_collectives_per_split_with_their_ratio_to_all_threads(res):
    cfg = res["config"]
    assert cfg["collectives"] == list(hcoll.COLLECTIVES) and cfg["coll_sizes"] == [8, 4096]
    assert cfg["coll_calls"] == hybrid_mod.QUICK["coll_calls"]
    coll = res["results"]["coll"]
    assert [(c["collective"], c["size"]) for c in coll] == [
        (w, z) for w in ("broadcast", "reduce_all", "gather_all", "exchange")
        for z in (8, 4096)] + [("barrier", None)]
    for c in coll:
        assert set(c["us"]) == {"1T-2P", "2T-1P"} and all(v > 0 for v in c["us"].values())
        assert c["vs_ref"]["2T-1P"] == 1.0
        assert c["vs_ref"]["1T-2P"] == pytest.approx(c["us"]["1T-2P"] / c["us"]["2T-1P"])
        assert c["best"] == min(c["us"], key=c["us"].get)
        assert [len(v) for v in c["reps_us"].values()] == [1, 1]  # --quick: 1 repetition
    table = res["tables"][-1]
    assert table["title"] == "Collectives per split (µs per call, lower is better)"
    # the reference's ratio to itself (always 1.00) is no column
    assert table["columns"] == ["collective", "block", "1T-2P µs", "2T-1P µs",
                                "1T-2P / 2T-1P", "best (over the worst)"]
    assert [r[:2] for r in table["rows"]][-2:] == [["exchange", "4 KiB"], ["barrier", "-"]]
    assert any("blocking wait mode" in n for n in table["notes"])  # 4 ranks on 2 cores
    fig = res["figures"][-1]
    assert fig["better"] == "lower" and fig["kind"] == "bar"
    assert fig["categories"][0] == "broadcast\n8 B" and fig["categories"][-1] == "barrier"
    assert [s["y"] for s in fig["series"]] == [[c["us"][s] for c in coll]
                                               for s in ("1T-2P", "2T-1P")]
    assert "### Collectives per split" in markdown(res)
    f = draw(fig)  # the plotting conventions: log axis only where the values span > 30x
    ax = f.axes[0]
    assert ax.get_yscale() == ("log" if wants_log(fig["series"][0]["y"] + fig["series"][1]["y"])
                               else "linear")
    assert ax.get_ylabel() == "µs per call (lower is better)"
    assert len(ax.patches) == 2 * 9  # a bar per split and case, all measured
    assert {t.get_fontsize() for t in ax.get_xticklabels()} == {7}  # 9 labels that fit
    assert "1T-2P: 2 processes of 1 rank-thread each" in " ".join(t.get_text() for t in f.texts)
    require_matplotlib().close(f)


@pytest.mark.parametrize("what", ["broadcast", "reduce_all", "gather_all", "exchange"])
def test_the_collectives_model_refuses_a_wrong_or_stale_answer(what):
    P, n = 4, 24
    for me in range(P):
        for k in range(3):
            assert hcoll.check(what, n, P, me, k, hcoll.expect(what, n, P, me, k)) is None
    got = hcoll.expect(what, n, P, 1, 5).copy()
    got[-1] += 1
    assert hcoll.check(what, n, P, 1, 5, got).startswith(f"{what}, 24 B, call 5, rank 1: "
                                                         f"element {got.size - 1} is ")
    stale = hcoll.expect(what, n, P, 1, 4)  # the previous call's answer, left in place
    assert "differ" in hcoll.check(what, n, P, 1, 5, stale)
    assert "elements, expected" in hcoll.check(what, n, P, 1, 5, stale[:-1])


def test_the_collectives_model_is_what_the_sources_make():
    """The model against numpy on the sources: the root's block, the sum, the gathered and
    the exchanged blocks."""
    P, n, k = 3, 16, 7
    src = [hcoll.source(w, n, P, r, k) for w in ("broadcast",) for r in range(P)]
    assert [s is None for s in src] == [r != k % P for r in range(P)]
    assert np.array_equal(hcoll.expect("broadcast", n, P, 2, k), src[k % P])
    total = sum(hcoll.source("reduce_all", n, P, r, k) for r in range(P))
    assert np.array_equal(hcoll.expect("reduce_all", n, P, 0, k), total)
    assert np.array_equal(hcoll.expect("gather_all", n, P, 1, k),
                          np.concatenate([hcoll.source("gather_all", n, P, r, k)
                                          for r in range(P)]))
    ex = [hcoll.source("exchange", n, P, r, k).reshape(P, n) for r in range(P)]
    for me in range(P):
        assert np.array_equal(hcoll.expect("exchange", n, P, me, k),
                              np.concatenate([ex[r][me] for r in range(P)]))


def test_a_wrong_answer_is_refused_not_measured():
    """Ranks whose gather_all model is off by one report it, and the suite's check refuses
    the job naming the split and the first wrong result."""
    recs = amnet.run(functools.partial(hcolljobs.wrong_model, what="gather_all"), n=4,
                     nodes=2, threads_per_proc=2, timeout=120)
    assert all(r["errors"] and all(e.startswith("gather_all, 8 B") for e in r["errors"])
               for r in recs)
    assert [r["wrong"] for r in recs] == [4] * 4  # a warm-up and a timed round of 2 calls
    assert all(len(r["errors"]) == hcoll.MAX_ERRORS for r in recs)  # the first ones
    assert set(recs[0]["seconds"]) == {"broadcast/8", "gather_all/8", "barrier"}
    with pytest.raises(BenchError, match=r"collectives \(2T-1P\) computed a wrong answer, "
                                         r"not measured: gather_all, 8 B, call 0, rank \d: "
                                         r"element 0 is .* \(16 wrong results in all\)"):
        hcoll.verify(recs, "2T-1P")
    hcoll.verify([{**r, "errors": []} for r in recs], "2T-1P")  # no error: accepted


def test_collectives_none_skips_the_part_and_old_results_still_plot():
    coll = functools.partial(choice_list, allowed=COLLECTIVES, what="collectives", none=True)
    assert coll("none") == [] and coll("barrier,exchange") == ["barrier", "exchange"]
    doc = json.loads((Path(__file__).parent.parent / "docs" / "hybrid" /
                      "results-8ranks-2nodes.json").read_text())
    assert "hybrid_coll.png" in [f["file"] for f in hybrid_mod.figures(doc["config"],
                                                                       doc["results"])]
    # results measured before the collectives part (or with --collectives none) still plot
    old = {k: v for k, v in doc["results"].items() if k != "coll"}
    assert "hybrid_coll.png" not in [f["file"] for f in hybrid_mod.figures(doc["config"], old)]


def test_best_is_the_best_and_says_by_how_much():
    assert hybrid_mod._best({"a": 2.0, "b": 5.0, "c": 4.0}, higher=True) == ("b", 2.5)
    assert hybrid_mod._best({"a": 2.0, "b": 5.0}, higher=False) == ("a", 2.5)


def test_cli_quick_writes_the_report_and_its_plots(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "hybrid", "--quick", "--ranks", "4", "--no-gil", "--kernels",
                        "sobel", "--collectives", "barrier", "--out", str(out)],
                       capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == "hybrid" and doc["config"]["gil"] is False
    assert [c["collective"] for c in doc["results"]["coll"]] == ["barrier"]
    assert "### Collectives per split" in (out / "results.md").read_text()
    for name in ("hybrid_am.png", "hybrid_apps.png", "hybrid_bandwidth_p2p.png",
                 "hybrid_coll.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
