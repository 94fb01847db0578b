"""amnet-bench `am` and `rma`: the figures each suite returns, from tiny real runs.

Behaviour only: benchmarks are never timed tests, so no assertion here is about speed. Each
section runs once with a few iterations (the network section: a real 2-node amnet job and
both raw-zmq peers; the node section: real one-node amnet jobs in each configuration, raw-shm
or memcpy, and mpi4py where it is installed) and the returned dict is checked for its shape,
positive figures, ratios computed from them, and targets judged from those ratios.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from benchcheck import check_tables

from amnet_bench import SUITES, BenchError, _node
from amnet_bench import am as am_mod
from amnet_bench import rma as rma_mod
from amnet_bench._report import markdown
from amnet_bench._stats import median
from amnet_bench._twonode import run_raw

BENCH = [sys.executable, "-m", "amnet_bench"]


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


def test_am_figures(marked):
    res = am_mod.am(["--no-aio", "--iters", "20", "--warmup", "2", "--reps", "2", "--sizes", "8,1K",
                     "--latency-us", "5", "--wait-mode", "auto,block", "--no-node",
                     "--conduit", "tcp"], progress=False)
    assert res["suite"] == "am"
    cfg = res["config"]
    assert (cfg["iters"], cfg["warmup"], cfg["reps"], cfg["sizes"]) == (20, 2, 2, [8, 1024])
    assert cfg["latency_us"] == 5 and cfg["amnet_options"]["net_latency_us"] == 5
    assert cfg["amnet_options"]["conduit"] == "tcp" and "over the tcp conduit" in \
        res["tables"][0]["title"]
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
    check_tables(res, per_result=True)
    assert res["table"]["rows"][0][0] == "Short (1 arg)"
    assert res["table"]["rows"][4][0] == "Medium 1 KiB"
    assert any("AMNET_NET_LATENCY_US=5" in n for n in res["notes"])
    assert any("lower is better" in c for c in res["table"]["columns"])


def test_rma_figures(marked):
    res = rma_mod.rma(reps=1, sizes="4K,1M", window=2, nbytes="2M", max_windows=8,
                      lat_sizes=[8], lat_iters=10, warmup=1, pin="split", node=False,
                      aio=False, progress=False)
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
    check_tables(res, per_result=True)
    assert any("higher is better" in r[6] for r in res["table"]["rows"])


def test_am_pinned_to_one_core_skips_the_spinning_peer(marked):
    res = am_mod.am(iters=10, warmup=1, reps=1, sizes=[8], pin="same", node=False, aio=False,
                    progress=False)
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


def test_raw_peer_failure_is_a_bench_error(marked):
    with pytest.raises(BenchError, match="raw-zmq peer"):
        run_raw({"am": {"warmup": 0, "iters": 1, "sizes": []}}, "sideways")


def test_cli_help_lists_suite_options():
    for suite, opt in (("am", "--latency-us"), ("rma", "--window"), ("am", "--node-iters"),
                       ("am", "--no-network"), ("rma", "--node-bw-sizes"),
                       ("rma", "--no-node-threads")):
        p = subprocess.run([*BENCH, suite, "--help"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0 and opt in p.stdout
    p = subprocess.run([*BENCH, "--list"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0

    listed = [line.split()[0] for line in p.stdout.splitlines()]
    assert listed == sorted(SUITES) and {"am", "rma"} <= set(listed)


# -- node sections ------------------------------------------------------------------------
def _check_batches(s: dict, reps: int, batches: int) -> None:
    """A node figure: per repetition, statistics over ``batches`` positive batch samples
    (every sample kept); over repetitions, the median of each statistic."""
    assert len(s["reps"]) == reps
    for r in s["reps"]:
        assert r["n"] == batches == len(r["samples"])
        assert all(x > 0 for x in r["samples"])
        assert 0 < r["min"] <= r["p10"] <= r["median"] <= r["p90"] <= r["max"]
    for k in ("median", "p10", "p90", "min", "mean"):
        assert s[k] == median([r[k] for r in s["reps"]])


def _verdicts(cell: str) -> list[str]:
    return [part.rsplit(": ", 1)[1] for part in cell.split("; ") if part]


def _check_targets(row: dict, cell: str) -> None:
    """Each target is judged from its ratio, and the table's cell says the same."""
    for t in row["targets"]:
        if t["ratio"] is None:
            assert t["met"] is None
        elif t["what"].startswith(">="):
            assert t["met"] == (t["ratio"] >= t["limit"])
        elif t["what"].startswith("<="):
            assert t["met"] == (t["ratio"] <= t["limit"])
    assert _verdicts(cell) == [_node.verdict(t["met"]) for t in row["targets"]]


NODE_LABELS = [label for label, _, _ in _node.CONFIGS]


def test_am_both_sections_print_both_tables(marked):
    res = am_mod.am(["--iters", "5", "--warmup", "1", "--reps", "1", "--sizes", "8",
                     "--node-iters", "20", "--node-warmup", "2", "--node-batch", "10"],
                    progress=False)
    assert res["config"]["sections"] == ["network", "node", "aio"]
    assert [t["section"] for t in res["tables"]] == ["network", "node", "aio"]
    assert res["table"]["columns"][0] == "AM"  # the main table is still the network one
    check_tables(res, per_result=True)
    text = markdown(res)
    assert text.index("### Across nodes") < text.index("### On one node") < \
        text.index("### amnet.aio")
    aio = [r for r in res["results"] if r["section"] == "aio"]
    # per place: the awaited get and rpc, 1000 rpcs with gather and when_all, the idle await
    assert [(r["place"], r["what"]) for r in aio] == [
        (p, w) for p in ("within a node", "across nodes")
        for w in ("get await", "get floors", "rpc await", "1000 rpcs gather",
                  "1000 rpcs when_all", "handles with no loop", "gather floor",
                  "idle await")]
    for r in aio:
        if r["what"] == "get floors":
            assert r["floor_await"]["median"] > 0 and r["ratio_vs_handle"] > 0
        elif r["what"] == "gather floor":
            assert min(r["floor_s"]) > 0 and r["ratio_vs_handles"] > 0
        elif r["what"] == "handles with no loop":
            assert min(r["handles_s"]) > 0 and r["ratio_vs_handles"] > 0
        elif "ratio" in r:
            assert r["ratio"] > 0 and r["target"]["met"] == (r["ratio"] <= r["target"][
                "max_ratio"])
        else:
            assert 0 <= r["fraction"] < 1 and 0.95 < r["wall_s"] < 2


def test_am_node_figures(marked):
    res = am_mod.am(["--no-aio", "--no-network", "--reps", "1", "--node-iters", "40",
                     "--node-warmup",
                     "5", "--node-batch", "20"], progress=False)
    assert res["config"]["sections"] == ["node"]
    cfg = res["config"]["node"]
    assert (cfg["iters"], cfg["warmup"], cfg["batch"], cfg["reps"]) == (40, 5, 20, 1)
    assert list(cfg["configs"]) == NODE_LABELS
    assert cfg["configs"]["2 threads"]["threads_per_proc"] == 2
    assert cfg["configs"]["2 procs + loopback"]["pshm"] is False
    assert cfg["configs"]["2 procs + thread-safety"]["thread_safe"] == "1"
    mpi_why = _node.mpi_missing()
    assert cfg["mpi4py_missing"] == mpi_why
    rows = res["results"]
    amnet_rows = [r for r in rows if "config" in r]
    peer_rows = [r for r in rows if "peer" in r]
    assert [r["config"] for r in amnet_rows] == NODE_LABELS
    assert [r["peer"] for r in peer_rows] == ["raw-shm", "python calls",
                                              "mpi4py AM emulation", "mpi4py Send/Recv"]
    raw_shm = peer_rows[0]["figure"]
    _check_batches(raw_shm, reps=1, batches=2)
    _check_batches(peer_rows[1]["figure"], reps=1, batches=2)
    mpi_am = peer_rows[2]["figure"]
    if mpi_why is None:
        _check_batches(mpi_am, reps=1, batches=2)
        _check_batches(peer_rows[3]["figure"], reps=1, batches=2)
    else:
        assert mpi_am is None and peer_rows[2]["missing"] == mpi_why
    table_rows = res["table"]["rows"]
    by_key = {r["key"]: r for r in amnet_rows}
    for row, cells in zip(amnet_rows, table_rows, strict=False):
        assert cells[0] == row["config"]
        _check_batches(row["amnet"], reps=1, batches=2)
        assert row["cpu_per_round_trip"]["median"] > 0
        assert row["ratio_raw_shm"] == pytest.approx(row["amnet"]["median"]
                                                     / raw_shm["median"])
        assert cells[5] == f"{row['ratio_raw_shm']:.2f}"
        if mpi_why is None:
            assert row["ratio_mpi4py_am"] == pytest.approx(row["amnet"]["median"]
                                                           / mpi_am["median"])
            assert cells[4] == f"{row['ratio_mpi4py_am']:.2f}"
        else:
            assert row["ratio_mpi4py_am"] is None and cells[4] == "missing"
        assert set(row["wait_mode_resolved"]) <= {"spin", "block", "spin-then-block"}
        _check_targets(row, cells[6])
    # which targets each row carries
    what = {r["config"]: [t["what"] for t in r["targets"]] for r in amnet_rows}
    assert what["2 threads"] == ["<= 0.25x 2 procs", "<= 1.5x python calls in turns, every run"]
    t_calls = by_key["threads"]["targets"][1]  # the worst run's ratio to the floor in turns
    assert len(t_calls["runs"]) == 1 and t_calls["ratio"] == max(t_calls["runs"]) > 0
    assert t_calls["met"] == (t_calls["ratio"] <= 1.5)
    assert "in turns" in table_rows[0][7] and "runs " in table_rows[0][7]
    assert what["2 procs"] == ["<= 0.5x mpi4py AM emulation", "<= 3x raw-shm",
                               "ordering: slower than 2 threads"]
    for prev, label in itertools.pairwise(NODE_LABELS):
        assert what[label][-1] == f"ordering: slower than {prev}"
    t_threads = by_key["threads"]["targets"][0]
    assert t_threads["ratio"] == pytest.approx(by_key["threads"]["amnet"]["median"]
                                               / by_key["procs"]["amnet"]["median"])
    for prev, cur in itertools.pairwise(amnet_rows):
        order = cur["targets"][-1]
        assert order["met"] == (cur["amnet"]["median"] > prev["amnet"]["median"])
        held = "held" if order["met"] else "did not hold"
        assert any(f"{prev['config']} < {cur['config']}: {held}" in n for n in res["notes"])
    if mpi_why is None:
        assert any("default thread level" in n for n in res["notes"])
    check_tables(res, per_result=True)


def test_am_node_without_mpi4py_says_missing(marked, monkeypatch):
    monkeypatch.setattr(_node, "mpi_missing", lambda: "mpi4py is not installed (test)")
    res = am_mod.am(["--no-aio", "--no-network", "--reps", "1", "--node-iters", "10",
                     "--node-warmup",
                     "1", "--node-batch", "10"], progress=False)
    rows = {r.get("config") or r["peer"]: r for r in res["results"]}
    procs = rows["2 procs"]
    assert procs["ratio_mpi4py_am"] is None
    assert procs["targets"][0]["met"] is None and procs["targets"][1]["met"] is not None
    table = {r[0]: r for r in res["table"]["rows"]}
    assert table["2 procs"][4] == "missing"
    assert table["2 procs"][6].startswith("<= 0.5x mpi4py AM emulation: n/a (peer missing)")
    for peer in ("mpi4py AM emulation", "mpi4py Send/Recv"):
        assert rows[peer]["figure"] is None
        assert rows[peer]["missing"] == "mpi4py is not installed (test)"
        assert table[peer][2] == "missing: mpi4py is not installed (test)"
    assert table["raw-shm"][2] != "missing"
    assert any("mpi4py peer missing: mpi4py is not installed (test)" in n
               for n in res["notes"])
    check_tables(res, per_result=True)


def test_rma_aio_section(marked):
    """rma's aio rows: awaited put_nb/get_nb per size beside ep.put/ep.get, within a node and
    across nodes, and 1000 gets in flight with when_all and gather beside handles."""
    res = rma_mod.rma(["--no-node", "--no-network", "--reps", "1", "--node-lat-sizes", "8,1K",
                       "--node-iters", "20", "--node-warmup", "2", "--node-batch", "10"],
                      progress=False)
    assert res["config"]["sections"] == ["aio"]
    check_tables(res, per_result=True)
    got = [(r["place"], r["what"], r.get("bytes")) for r in res["results"]]
    assert got == [(p, w, b) for p in ("within a node", "across nodes")
                   for w, b in [(f"{op} await", n) for n in (8, 1024) for op in ("put", "get")]
                   + [("1000 gets when_all", None), ("1000 gets gather", None)]]
    for r in res["results"]:
        assert r["ratio"] > 0
        if "aio" in r:
            assert r["aio"]["median"] > 0 and r["blocking"]["median"] > 0
            # the target applies to the 8 B get only
            assert (r["target"] is not None) == (r["what"] == "get await" and r["bytes"] == 8)
        else:
            assert len(r["aio_s"]) == len(r["handles_s"]) == 3  # rounds: a multiple of 3
        if r["target"] is not None:
            assert r["target"]["met"] == (r["ratio"] <= r["target"]["max_ratio"])
    rows = res["tables"][0]["rows"]
    assert rows[0][:2] == ["within a node", "await put_nb 8 B"]
    assert rows[-1][:2] == ["across nodes", "1000 8 B gets in flight: asyncio.gather"]


@pytest.mark.parametrize("threads", [True, False])
def test_rma_node_figures(marked, threads):
    res = rma_mod.rma(network=False, node_threads=threads, reps=1, node_lat_sizes=[8, 1024],
                      node_bw_sizes="1M", node_iters=20, node_warmup=2, node_batch=10,
                      node_bytes="2M", node_samples=2, aio=False, progress=False)
    cfg = res["config"]["node"]
    assert res["config"]["sections"] == ["node"]
    assert cfg["ops_per_sample"] == {1 << 20: 2}
    assert cfg["segment_size"] >= 1 << 20
    mpi_why = _node.mpi_missing()
    labels = (["2 threads"] if threads else []) + ["2 procs"]
    got = [(r["op"], r["bytes"], r["config"]) for r in res["results"]]
    assert got == [(f"blocking {op} {what}", s, label)
                   for what, sizes in (("latency", [8, 1024]), ("bandwidth", [1 << 20]))
                   for op in ("put", "get") for s in sizes for label in labels]
    for row, cells in zip(res["results"], res["table"]["rows"], strict=True):
        assert (cells[1], cells[2]) == (rma_mod.size_label(row["bytes"]), row["config"])
        _check_batches(row["amnet"], reps=1, batches=2)
        if mpi_why is None:
            _check_batches(row["mpi4py_rma"], reps=1, batches=2)
            assert row["ratio_mpi4py"] == pytest.approx(row["amnet"]["median"]
                                                        / row["mpi4py_rma"]["median"])
            assert cells[7] == f"{row['ratio_mpi4py']:.2f}"
        else:
            assert row["mpi4py_rma"] is None and cells[7] == "missing"
        if row["unit"] == "MB/s":
            assert row["better"] == "higher"
            _check_batches(row["memcpy"], reps=1, batches=2)
            assert row["ratio_memcpy"] == pytest.approx(row["amnet"]["median"]
                                                        / row["memcpy"]["median"])
            assert cells[8] == f"{row['ratio_memcpy']:.2f}"
        else:
            assert row["better"] == "lower" and row["memcpy"] is None and cells[8] == "-"
        _check_targets(row, cells[9])
        # the targets: 8 B put latency vs mpi4py, >= 1 MiB bandwidth vs memcpy, 2 procs only
        want = []
        if row["config"] == "2 procs":
            if row["op"] == "blocking put latency" and row["bytes"] == 8:
                want = ["<= 0.3x mpi4py RMA put"]
            elif row["unit"] == "MB/s":
                want = [">= 0.8x memcpy"]
        assert [t["what"] for t in row["targets"]] == want
    check_tables(res, per_result=True)


def test_am_and_rma_over_mpi_beside_mpi4py(marked):
    """--conduit tcp,mpi: the raw-zmq table for tcp, then an mpi table beside mpi4py on the
    same MPI for each of MPICH's paths (no shared memory with the default network module;
    forced onto TCP), each Short / 1 MiB row with its target."""
    res = am_mod.am(["--quick", "--no-node", "--no-aio", "--conduit", "tcp,mpi", "--sizes", "8"],
                    progress=False)
    assert [t["section"] for t in res["tables"]] == ["network", "mpi-nolocal", "mpi"]
    assert "over the tcp conduit" in res["tables"][0]["title"]
    assert "MPIR_CVAR_NOLOCAL=1" in res["tables"][1]["title"]
    assert "TCP network path" in res["tables"][2]["title"]
    for section, target in (("mpi-nolocal", 1.5), ("mpi", 1.0)):
        mpi = [r for r in res["results"] if r["section"] == section]
        short = next(r for r in mpi if r["am"] == "short")
        assert short["amnet"]["median"] > 0 and short["mpi4py_am"]["median"] > 0
        assert short["ratio_mpi4py_am"] == (short["amnet"]["median"]
                                            / short["mpi4py_am"]["median"])
        assert short["target"]["max_ratio"] == target
    assert res["config"]["mpi"]["env"]["FI_PROVIDER"] == "tcp"
    assert res["config"]["mpi-nolocal"]["env"] == {"MPIR_CVAR_NOLOCAL": "1"}
    assert any(n.startswith("transport: MPIR_CVAR_NOLOCAL=1 for") for n in res["notes"])
    res = rma_mod.rma(["--quick", "--no-node", "--no-aio", "--conduit", "mpi", "--sizes",
                       "1M", "--mpi-paths", "nolocal"], progress=False)
    assert [t["section"] for t in res["tables"]] == ["mpi-nolocal"]
    bw = next(r for r in res["results"] if r["op"] == "put_nbi bandwidth")
    assert bw["bytes"] == 1 << 20 and bw["amnet"]["median"] > 0 and bw["path"] == "nolocal"
    assert bw["mpi4py_send_bw"]["median"] > 0 and bw["target"]["min_ratio"] == 0.8
