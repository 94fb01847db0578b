"""amnet-bench `hybrid` (the hybrid study in one run: AM round trips, injection bandwidth and
the kernels over every procs x threads split): a real quick run, the "which split" answers
recomputed from the bandwidths the suite returns, the reference split's ratios, the options
it refuses. Behaviour only, no timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amnet.bench import SUITES
from amnet.bench import hybrid as hybrid_mod
from amnet.bench._report import markdown

BENCH = [sys.executable, "-m", "amnet.bench"]


@pytest.fixture(scope="module")
def res():
    return SUITES["hybrid"](["--quick", "--ranks", "4", "--kernels", "gups,lock"],
                            progress=False)


def test_one_report_answers_which_split_for_each_size_mode_and_pattern(res):
    assert SUITES["hybrid"] is hybrid_mod.hybrid
    cfg = res["config"]
    assert cfg["splits"] == ["1T-2P", "2T-1P"] and cfg["reference"] == "2T-1P"
    assert cfg["quick"] and cfg["modes"] == ["B", "NB"] and cfg["patterns"] == ["p2p"]
    assert [t["section"] for t in res["tables"]] == ["am", "inject", "bandwidth", "apps"]
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
        "hybrid_am.png", "hybrid_apps.png", "hybrid_bandwidth_p2p.png"]
    text = markdown(res)
    assert text.startswith("## amnet-bench hybrid") and "### Which split" in text


def test_best_is_the_best_and_says_by_how_much():
    assert hybrid_mod._best({"a": 2.0, "b": 5.0, "c": 4.0}, higher=True) == ("b", 2.5)
    assert hybrid_mod._best({"a": 2.0, "b": 5.0}, higher=False) == ("a", 2.5)


@pytest.mark.parametrize(("args", "says"), [
    (["--trips", "0"], "--trips must be at least 1"),
    (["--nodes", "1"], "--nodes must be at least 2 and divide --ranks"),
    (["--ranks", "8", "--splits", "3"], "--splits 3 must divide the ranks per node (4)"),
    (["--modes", "NB9"], "modes are B, NB8, NB32, NB128, NB"),
])
def test_bad_options_are_refused_with_the_reason(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        SUITES["hybrid"](args, progress=False)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_cli_quick_writes_the_report_and_its_plots(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "hybrid", "--quick", "--ranks", "4", "--no-gil", "--kernels",
                        "sobel", "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == "hybrid" and doc["config"]["gil"] is False
    for name in ("hybrid_am.png", "hybrid_apps.png", "hybrid_bandwidth_p2p.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
