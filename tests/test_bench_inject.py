"""amnet-bench `inject` (the hybrid paper's Figs. 2-5) and the procs x threads splits it
sweeps: real jobs of every split, figures recomputed from what the suite returns, the
reference split's ratios, the options it refuses. Behaviour only, no timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amnet_bench import SUITES
from amnet_bench._options import parse_threads
from amnet_bench._report import markdown
from amnet_bench._splits import Split, choose, splits_of
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]
TINY = ["--sizes", "8,4K", "--modes", "B,NB8,NB", "--reps", "2", "--samples", "1",
        "--bytes", "8K"]


def test_splits_are_every_divisor_labelled_as_the_paper_labels_them():
    assert [s.label for s in splits_of(4)] == ["1T-4P", "2T-2P", "4T-1P"]
    assert [s.label for s in splits_of(6)] == ["1T-6P", "2T-3P", "3T-2P", "6T-1P"]
    assert Split(2, 8).run_options() == {"threads_per_proc": 2, "procs_per_node": 8}
    assert parse_threads("all") is None and parse_threads("4,1,4") == [1, 4]
    assert [s.label for s in choose(4, [1, 4])] == ["1T-4P", "4T-1P"]
    with pytest.raises(ValueError, match=r"--splits 3 must divide the ranks per node \(4\)"):
        choose(4, [3])


@pytest.fixture(scope="module")
def res():
    return SUITES["inject"](TINY, progress=False)


def test_every_split_pattern_size_and_mode_is_measured(res):
    cfg = res["config"]
    assert cfg["splits"] == ["1T-2P", "2T-1P"] and cfg["reference"] == "2T-1P"
    assert cfg["msgs"] == {"8": 1024, "4096": 16}  # 8 KiB a round, 16..1024 puts
    rows = res["results"]
    assert [(r["split"], r["pattern"], r["size"]) for r in rows] == [
        (s, p, z) for s in ("1T-2P", "2T-1P") for p in ("p2p", "p2m") for z in (8, 4096)]
    for r in rows:
        for m in ("B", "NB8", "NB"):
            assert len(r["reps"][m]) == 2 and all(x["mb_s"] > 0 for x in r["reps"][m])
            assert r["mb_s"][m] == pytest.approx(median([x["mb_s"] for x in r["reps"][m]]))
            ref = next(x for x in rows if x["split"] == "2T-1P" and x["pattern"] ==
                       r["pattern"] and x["size"] == r["size"])
            assert r["vs_ref"][m] == pytest.approx(r["mb_s"][m] / ref["mb_s"][m])
        assert r["inject_us"] == pytest.approx(
            median([x["inject_s"] for x in r["reps"]["NB"]]) * 1e6)
        assert r["inject_us"] > 0 and all(x["inject_s"] is None for x in r["reps"]["B"])
    assert all(r["vs_ref"]["B"] == 1.0 for r in rows if r["split"] == "2T-1P")
    assert len(res["table"]["rows"]) == len(rows)
    assert all(len(x) == len(res["table"]["columns"]) for x in res["table"]["rows"])
    assert [f["file"] for f in res["figures"]] == [
        "inject_bandwidth_p2p.png", "inject_bandwidth_p2m.png", "inject_overhead.png"]
    assert markdown(res).startswith("## amnet-bench inject")


def test_quick_runs_through_the_cli_and_writes_its_plots(marked, tmp_path):
    out = tmp_path / "b"
    p = subprocess.run([*BENCH, "inject", "--quick", "--sizes", "8,4K", "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "results.json").read_text())
    cfg = doc["config"]
    assert cfg["quick"] and cfg["modes"] == ["B", "NB32", "NB"] and cfg["reps"] == 1
    assert cfg["sizes"] == [8, 4096]  # given explicitly: wins over --quick's
    for name in ("inject_bandwidth_p2p.png", "inject_bandwidth_p2m.png",
                 "inject_overhead.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
