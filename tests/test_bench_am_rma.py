"""amnet-bench `am` and `rma`: the figures each suite returns, from tiny real runs.

Behaviour only: benchmarks are never timed tests, so no assertion here is about speed. Each
suite runs once with a few iterations (a real 2-node amnet job and both raw-zmq peers) and the
returned dict is checked for its shape, positive figures, and ratios computed from them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from amnet.bench import SUITES, BenchError
from amnet.bench import am as am_mod
from amnet.bench import rma as rma_mod
from amnet.bench._report import markdown, median
from amnet.bench._twonode import run_raw

BENCH = [sys.executable, "-m", "amnet.bench"]


def _check_dist(s: dict, reps: int, n: int) -> None:
    """A latency figure: medians over repetitions of per-repetition statistics."""
    assert len(s["reps"]) == reps
    for r in s["reps"]:
        assert r["n"] == n
        assert 0 < r["min"] <= r["p10"] <= r["median"] <= r["p90"]
        assert r["mean"] > 0
    for k in ("median", "p10", "p90", "min", "mean"):
        assert s[k] == median([r[k] for r in s["reps"]])
    assert s["p10"] <= s["median"] <= s["p90"]


def _check_rate(s: dict, reps: int) -> None:
    assert len(s["samples"]) == reps and all(x > 0 for x in s["samples"])
    assert s["min"] <= s["median"] <= s["max"]
    assert s["median"] == median(s["samples"])


def _check_table(res: dict) -> None:
    table = res["table"]
    assert len(table["rows"]) == len(res["results"])
    assert all(len(r) == len(table["columns"]) for r in table["rows"])
    text = markdown(res)
    assert text.startswith(f"## amnet-bench {res['suite']}")
    assert all(f"- {n}" in text for n in res["notes"])


def test_registry_has_am_and_rma():
    assert SUITES["am"] is am_mod.am
    assert SUITES["rma"] is rma_mod.rma


def test_am_figures(marked):
    res = am_mod.am(["--iters", "20", "--warmup", "2", "--reps", "2", "--sizes", "8,1K",
                     "--latency-us", "5", "--wait-mode", "auto,block"], progress=False)
    assert res["suite"] == "am"
    cfg = res["config"]
    assert (cfg["iters"], cfg["warmup"], cfg["reps"], cfg["sizes"]) == (20, 2, 2, [8, 1024])
    assert cfg["latency_us"] == 5 and cfg["amnet_options"]["net_latency_us"] == 5
    assert cfg["wait_modes"] == ["auto", "block"] and cfg["pin"] == "none"
    assert not any(n.startswith("--pin") for n in res["notes"])
    # one row per (shape, amnet wait mode): Short, Medium 8 B, Medium 1 KiB
    got = [(r["am"], r["payload_bytes"], r["wait_mode"]) for r in res["results"]]
    assert got == [(k, s, m) for k, s in (("short", 0), ("medium", 8), ("medium", 1024))
                   for m in ("auto", "block")]
    for row in res["results"]:
        for who in ("amnet", "raw_block", "raw_spin"):
            _check_dist(row[who], reps=2, n=20)
        for c in row["cpu_per_round_trip"].values():
            _check_rate(c, reps=2)
        raw = {m: row[f"raw_{m}"]["median"] for m in ("block", "spin")}
        assert row["raw_faster"] == min(raw, key=raw.get)
        assert row["ratio"] == pytest.approx(row["amnet"]["median"] / min(raw.values()))
        assert row["ratio_vs"] == {m: pytest.approx(row["amnet"]["median"] / raw[m])
                                   for m in raw}
        # block asks for block; auto resolves to spin or block, and says which
        if row["wait_mode"] == "block":
            assert row["wait_mode_resolved"] == ["block"]
        else:
            assert set(row["wait_mode_resolved"]) <= {"spin", "block", "spin-then-block"}
        if row["am"] == "short":
            assert row["target"] == {"max_ratio": 1.2, "met": row["ratio"] <= 1.2}
        else:
            assert row["target"] is None
    # both wait modes of one shape are compared to the same raw figures
    assert res["results"][0]["raw_block"] == res["results"][1]["raw_block"]
    _check_table(res)
    assert res["table"]["rows"][0][0] == "Short (1 arg)"
    assert res["table"]["rows"][4][0] == "Medium 1 KiB"
    assert any("AMNET_NET_LATENCY_US=5" in n for n in res["notes"])
    assert any("lower is better" in c for c in res["table"]["columns"])


def test_rma_figures(marked):
    res = rma_mod.rma(reps=1, sizes="4K,1M", window=2, nbytes="2M", max_windows=8,
                      lat_sizes=[8], lat_iters=10, warmup=1, pin="split", progress=False)
    assert res["suite"] == "rma"
    cfg = res["config"]
    assert cfg["pin"] == "split"
    assert any(n.startswith("--pin split:") for n in res["notes"])
    # 2 MiB per size, W=2: 4 KiB is capped at 8 windows, 1 MiB needs 1 but gets MIN_WINDOWS
    assert cfg["windows"] == {4096: 8, 1 << 20: rma_mod.MIN_WINDOWS}
    assert cfg["amnet_options"]["segment_size"] >= 2 * (1 << 20)
    ops = [(r["op"], r["bytes"]) for r in res["results"]]
    assert ops == [("put_nbi bandwidth", 4096), ("put_nbi bandwidth", 1 << 20),
                   ("blocking put latency", 8), ("blocking get latency", 8)]
    for row in res["results"]:
        raw = {m: row[f"raw_{m}"]["median"] for m in ("block", "spin")}
        if row["unit"] == "MB/s":
            for who in ("amnet", "raw_block", "raw_spin"):
                _check_rate(row[who], reps=1)
                _check_rate(row["cpu_per_put"][who], reps=1)
            assert row["better"] == "higher"
            assert row["raw_faster"] == max(raw, key=raw.get)
            assert row["ratio"] == pytest.approx(row["amnet"]["median"] / max(raw.values()))
        else:
            for who in ("amnet", "raw_block", "raw_spin"):
                _check_dist(row[who], reps=1, n=10)
            assert row["better"] == "lower"
            assert row["raw_faster"] == min(raw, key=raw.get)
            assert row["ratio"] == pytest.approx(row["amnet"]["median"] / min(raw.values()))
    bw_1m = res["results"][1]
    assert bw_1m["target"] == {"min_ratio": 0.7, "met": bw_1m["ratio"] >= 0.7}
    assert res["results"][0]["target"] is None
    _check_table(res)
    assert any("higher is better" in r[6] for r in res["table"]["rows"])


def test_am_pinned_to_one_core_skips_the_spinning_peer(marked):
    res = am_mod.am(iters=10, warmup=1, reps=1, sizes=[8], pin="same", progress=False)
    assert res["config"]["pin"] == "same"
    assert [r["am"] for r in res["results"]] == ["short", "medium"]
    for row in res["results"]:
        assert row["raw_spin"] is None and row["cpu_per_round_trip"]["raw_spin"] is None
        _check_dist(row["raw_block"], reps=1, n=10)
        assert row["raw_faster"] == "block"
        assert row["ratio"] == pytest.approx(row["amnet"]["median"]
                                             / row["raw_block"]["median"])
    assert all(r[4] == "skipped (--pin same)" for r in res["table"]["rows"])
    assert all(r[-1].endswith(" / -") for r in res["table"]["rows"])
    assert any(n.startswith("--pin same:") and "raw-zmq spin is not run" in n
               for n in res["notes"])


@pytest.mark.parametrize("suite,args", [
    ("am", ["--iters", "0"]),
    ("am", ["--sizes", "8,nope"]),
    ("am", ["--wait-mode", "fast"]),
    ("am", ["--latency-us", "-1"]),
    ("rma", ["--window", "0"]),
    ("rma", ["--bytes", "lots"]),
    ("rma", ["--sizes", "0"]),
    ("rma", ["--pin", "everywhere"]),
])
def test_bad_options_are_refused(suite, args):
    with pytest.raises(SystemExit) as e:
        SUITES[suite](args, progress=False)
    assert e.value.code == 2


def test_raw_peer_failure_is_a_bench_error(marked):
    with pytest.raises(BenchError, match="raw-zmq peer"):
        run_raw({"am": {"warmup": 0, "iters": 1, "sizes": []}}, "sideways")


def test_cli_help_lists_suite_options():
    for suite, opt in (("am", "--latency-us"), ("rma", "--window")):
        p = subprocess.run([*BENCH, suite, "--help"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0 and opt in p.stdout
    p = subprocess.run([*BENCH, "--list"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert [line.split()[0] for line in p.stdout.splitlines()][:2] == ["am", "rma"]
