"""amnet-bench `upc`: the figures it returns, from tiny real runs.

Behaviour only (benchmarks are never timed tests): the suite runs real upc_rt jobs with tiny
sizes, and the returned dict is checked for its shape, positive figures, ratios and verdicts
computed from them, the cache's effect on messages (a count, not a time), and the peer
reported missing when it is.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from benchcheck import check_tables

from amnet_bench import SUITES
from amnet_bench import upc as upc_mod
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]
TINY = ["--reps", "2", "--threads", "2", "--block", "2048", "--batch", "32", "--min-time",
        "0.01", "--samples", "2", "--matmul-n", "8"]
PEERS = ["x_remote_node", "x_remote_net", "x_local", "slice_contig", "slice_spread",
         "matmul_messages", "matmul_time"]


def test_upc_figures(marked):
    res = SUITES["upc"](TINY, progress=False)
    assert res["suite"] == "upc"
    cfg = res["config"]
    assert cfg["sections"] == ["peers", "baseline", "vector", "coalesce", "local", "slice"]
    assert cfg["topologies"] == ["node", "2nodes"] and cfg["caches"] == ["off", "on"]
    peers = [r for r in res["results"] if r["section"] == "peers"]
    assert [r["figure"] for r in peers] == PEERS
    for r in peers:
        if r["figure"] == "x_remote_node" and r["peer"] is None:
            continue  # mpi4py not installed here: checked in its own test
        assert r["upc_rt"] > 0 and r["peer"] > 0
        assert r["upc_rt"] == median(r["samples"]["upc_rt"])
        assert r["peer"] == median(r["samples"]["peer"])
        inverse = r["figure"].startswith(("slice", "matmul"))
        want = r["peer"] / r["upc_rt"] if inverse else r["upc_rt"] / r["peer"]
        assert r["ratio"] == pytest.approx(want)
    rows = {row[0]: row for row in res["tables"][0]["rows"]}
    for r, row in zip(peers, res["tables"][0]["rows"], strict=True):
        cmp, bound = upc_mod.UPC_TARGETS[r["figure"]]
        assert row[5] == f"{cmp} {bound:g}"
        if r["ratio"] is not None:
            met = r["ratio"] <= bound if cmp == "<=" else r["ratio"] >= bound
            assert row[6] == ("met" if met else "missed")
    # the cache sends fewer messages in the naive matmul, every repetition (a count)
    msgs = next(r for r in peers if r["figure"] == "matmul_messages")
    assert all(on < off for on, off in zip(msgs["samples"]["upc_rt"],
                                            msgs["samples"]["peer"], strict=True))
    assert len(rows) == len(PEERS)
    # the patterns: one row per thread count, a figure per topology x cache x op
    for pattern in ("baseline", "vector", "coalesce", "local", "slice"):
        got = [r for r in res["results"] if r["section"] == pattern]
        ops = [r for r in got if r["op"] in ("read", "write")]
        assert len(ops) == 2 * 2 * 2
        for r in ops:
            assert len(r["samples_us"]) == 2 and all(x > 0 for x in r["samples_us"])
            assert r["us_per_access"] == pytest.approx(median(r["samples_us"]))
            assert r["cpu_us_per_access"] > 0
        if pattern == "local":
            assert {r["op"] for r in got} >= {"private read", "private write"}
    check_tables(res)


def test_upc_peer_missing_is_said(marked, monkeypatch):
    monkeypatch.setattr(upc_mod, "mpi_missing", lambda: "mpi4py is not installed (test)")
    res = SUITES["upc"]([*TINY[:2], "--no-patterns", "--samples", "1", "--matmul-n", "4"],
                        progress=False)
    first = res["results"][0]
    assert first["figure"] == "x_remote_node" and first["peer"] is None
    assert first["ratio"] is None
    row = res["tables"][0]["rows"][0]
    assert row[3] == "missing" and row[6] == "n/a (peer missing)"
    assert any("mpi4py peer missing: mpi4py is not installed (test)" in n
               for n in res["notes"])
    assert res["config"]["sections"] == ["peers"]


def test_cli_lists_and_helps_upc():
    p = subprocess.run([*BENCH, "upc", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--matmul-n" in p.stdout and "--no-patterns" in p.stdout
    p = subprocess.run([*BENCH, "--list"], capture_output=True, text=True, timeout=60)
    assert "upc" in [line.split()[0] for line in p.stdout.splitlines()]
