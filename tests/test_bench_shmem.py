"""amnet-bench `shmem`: the figures it returns, from tiny real runs.

Behaviour only (benchmarks are never timed tests): the suite runs real upc_rt, shmem_rt and,
where it is installed, shmem4py jobs with tiny sizes; the returned dict is checked for its
tables, every form present or reported missing with why, and the ratios computed from the
figures. The peer is taken from where it is (present or not) in one test, and pointed at a
path with nothing there in the others, so both cases run on every machine.
"""

from __future__ import annotations

import sys

import pytest
from benchcheck import check_figures, check_tables

from amnet_bench import SUITES
from amnet_bench import shmem as shmem_mod
from amnet_bench._stats import median

TINY = ["--reps", "1", "--sizes", "8,4K", "--threads", "2", "--coll-sizes", "8,1K",
        "--app-threads", "1,2", "--iters", "4", "--samples", "2", "--cpi-n", "4096",
        "--triad-m", "256", "--ra-words", "64", "--ra-updates", "16", "--osu-sizes", "8,4K"]
UPC_SECTIONS = ["put_node", "get_node", "put_2nodes", "get_2nodes", "barrier", "broadcast",
                "reduce", "reduce_threaded", "cpi", "triad_time", "triad_bw", "ra_gups",
                "ra_error"]
MISSING = ("not installed: ", "not available: ", "failed: ")


def test_the_plots_are_named_for_the_suite():
    assert all(p.startswith("shmem_") for p in shmem_mod.shmem.plots)


def _check_forms(res: dict) -> None:
    """Every form of every upc table: a figure, or its reason for none in every cell."""
    missing = res["config"]["missing"]
    for t in res["tables"]:
        if t["section"] == "osu":
            continue
        assert t["columns"][1].startswith("upc-amnet") and t["columns"][2].startswith(
            "upc-shmem") and t["columns"][3] == "upc-shmem / upc-amnet"
        forms = {1: "upc-amnet", 2: "upc-shmem"}
        if t["section"] != "reduce_threaded":
            assert t["columns"][4].startswith("shmem4py")
            forms[4] = "shmem4py"
        for row in t["rows"]:
            for i, form in forms.items():
                if form in missing:
                    assert row[i] == missing[form]
                elif form == "shmem4py" and t["section"].endswith("2nodes"):
                    assert row[i] == shmem_mod.ONE_HOST
                else:
                    float(row[i])  # a figure
    for r in res["results"]:
        if r["section"] == "osu":
            assert r["shmem_rt"] > 0
            if "shmem4py" in missing:
                assert r["shmem4py"] is None and r["ratio"] is None
            else:
                assert r["shmem4py"] > 0 and r["ratio"] == pytest.approx(
                    r["shmem_rt"] / r["shmem4py"])
            assert r["amnet"] > 0  # the same operations on amnet's endpoint, same job
            assert r["mapping"] > 0  # shmem_rt / amnet in turns, in one job
            if r["shmem_rt_2nodes"] is not None:
                assert r["amnet_2nodes"] > 0 and r["mapping_2nodes"] > 0
            continue
        assert r["upc-amnet"] >= 0 and r["upc-amnet"] == median(r["samples"]["upc-amnet"])
        if "upc-shmem" in missing:
            assert r["upc-shmem"] is None and r["ratio"] is None
        else:
            assert r["upc-shmem"] >= 0
            if r["upc-amnet"] > 0:  # per repetition, then the median
                s = r["samples"]
                assert r["ratio"] == pytest.approx(median(
                    [a / b for a, b in zip(s["upc-shmem"], s["upc-amnet"], strict=True)]))
        peer = r.get("shmem4py")
        if "shmem4py" in missing or r["section"].endswith("2nodes") or \
                r["section"] == "reduce_threaded":
            assert peer is None
        else:
            assert peer >= 0
        if r["section"] == "ra_error":
            assert all(v is None or 0 <= v <= 100 for v in (r["upc-amnet"], r["upc-shmem"],
                                                              peer))
        elif r["section"] != "ra_error":
            assert r["upc-amnet"] > 0


def test_shmem_every_form(marked):
    """The peer where it is: run when installed, reported as not installed otherwise."""
    launcher, why = shmem_mod.find_peer(shmem_mod.peer_python(None), None)
    res = SUITES["shmem"](TINY, progress=False)
    assert res["suite"] == "shmem"
    assert res["config"]["sections"] == [*UPC_SECTIONS, "osu"]
    check_tables(res)
    check_figures(res)
    _check_forms(res)
    missing = res["config"]["missing"]
    assert "upc-shmem" not in missing  # upc_rt runs over shmem_rt
    if launcher is None:
        assert missing["shmem4py"] == f"not installed: {why}"
    else:
        assert "shmem4py" not in missing, missing
        assert any("shmem4py peer: shmem4py" in n for n in res["notes"])
    osu = res["tables"][-1]
    assert osu["columns"] == ["figure", "shmem_rt, 1 node", "shmem4py, 1 node",
                              "shmem_rt / shmem4py", "amnet, 1 node", "shmem_rt, 2 nodes",
                              "amnet, 2 nodes", "shmem_rt / amnet, 2 nodes"]
    assert len(osu["rows"]) == len(shmem_mod.OSU_LAT) + 2


def test_missing_peer_is_reported_and_the_rest_runs(marked, tmp_path):
    nowhere = tmp_path / "no-venv" / "bin" / "python"
    res = SUITES["shmem"]([*TINY, "--shmem-peer", str(nowhere), "--parts",
                           "putget,reduce,osu", "--nodes", "1"], progress=False)
    why = f"not installed: no Python at {nowhere}"
    assert res["config"]["missing"] == {"shmem4py": why}
    assert res["config"]["sections"] == ["put_node", "get_node", "reduce", "reduce_threaded",
                                         "osu"]
    check_tables(res)
    check_figures(res)
    _check_forms(res)
    assert f"shmem4py: {why}." in res["notes"]
    osu = res["tables"][-1]
    assert osu["columns"] == ["figure", "shmem_rt, 1 node", "shmem4py, 1 node",
                              "shmem_rt / shmem4py", "amnet, 1 node"]
    assert all(row[2] == why for row in osu["rows"])
    assert all(float(row[4]) > 0 for row in osu["rows"])  # amnet's floor needs no peer
    # no peer curve is drawn from nothing
    assert all(s["label"] != "shmem4py" for f in res["figures"] for s in f["series"])


def test_peer_from_the_environment(marked, tmp_path, monkeypatch):
    nowhere = tmp_path / "python"
    monkeypatch.setenv(shmem_mod.PEER_ENV, str(nowhere))
    res = SUITES["shmem"]([*TINY, "--parts", "barrier", "--forms", "upc-amnet,shmem4py"],
                          progress=False)
    assert res["config"]["missing"] == {"shmem4py": f"not installed: no Python at {nowhere}"}
    assert res["config"]["forms_run"] == ["upc-amnet"]
    (row,) = res["tables"][0]["rows"]
    assert row[0] == "2" and float(row[1]) > 0 and row[2] == "-" and row[3] == "-"
    assert row[4].startswith("not installed: no Python at")


def test_a_python_without_shmem4py_is_not_installed():
    launcher, why = shmem_mod.find_peer(sys.executable, None)
    assert launcher is None
    assert "oshrun" in why or "import shmem4py fails" in why


def test_oshrun_flags():
    argv = shmem_mod.oshrun_argv("oshrun", 64)
    assert argv[:3] == ["oshrun", "-np", "64"]
    assert "--oversubscribe" in argv and argv[argv.index("--mca") + 1:][:2] == ["btl",
                                                                                "^openib"]
    assert "--oversubscribe" not in shmem_mod.oshrun_argv("oshrun", 1)


def test_mapping_ratio_is_paired_per_repetition():
    """upc-shmem / upc-amnet is the median of each repetition's ratio, not the ratio of
    the medians: a drift that moves both forms of a repetition together cancels."""
    run = type("R", (), {})()
    run.vals = {"upc-amnet": {"k": [1.0, 2.0, 4.0]}, "upc-shmem": {"k": [1.1, 2.2, 4.4]}}
    assert shmem_mod._paired(run, "k") == pytest.approx(1.1)
    run.vals = {"upc-amnet": {"k": [1.0, 3.0, 10.0]}, "upc-shmem": {"k": [1.2, 3.3, 1.0]}}
    assert shmem_mod._paired(run, "k") == pytest.approx(1.1)  # ratio of medians: 0.4
    run.vals = {"upc-amnet": {}, "upc-shmem": {}}
    assert shmem_mod._paired(run, "k") is None
