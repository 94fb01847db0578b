"""amnet-bench `coll`: the figures it returns, from tiny real runs (behaviour only: nothing
here is timed)."""

from __future__ import annotations

import math

from amnet.coll import ALGORITHMS
from amnet_bench import SUITES
from amnet_bench import coll as coll_mod
from amnet_bench._plot import draw, require_matplotlib
from amnet_bench._report import markdown
from amnet_bench._stats import median

TINY = ["--ranks", "2", "--sizes", "8,600", "--calls", "2", "--warmup", "1",
        "--collectives", "broadcast,exchange", "--naive-max", "8", "--small-ranks", "2",
        "--small-calls", "3"]


def test_coll_figures(marked):
    res = SUITES["coll"](TINY, progress=False)
    assert res["suite"] == "coll"
    rows = [r for r in res["results"] if r["section"] == "algorithms"]
    assert {(r["collective"], r["topology"], r["size"]) for r in rows} == {
        (w, t, n) for w in ("broadcast", "exchange") for t in ("node", "2nodes")
        for n in (8, 600)}
    for r in rows:
        ran = {a for a, v in r["seconds"].items() if v is not None}
        naive = {a for a in ALGORITHMS[r["collective"]] if a.startswith("naive")}
        # every algorithm ran, the naive ones only up to --naive-max
        assert ran == set(ALGORITHMS[r["collective"]]) - (naive if r["size"] > 8 else set())
        assert r["best"] == min(ran, key=lambda a: r["seconds"][a])
        for a in ran:
            assert r["seconds"][a] == median(r["samples"][a]) > 0
        assert r["floor"] > 0  # the same bytes as plain AMs, measured beside them
        assert r["solo"] > 0  # and the same call on a team of one: the layer's own cost
        assert (r["mpi4py"] is None) == (r["topology"] == "2nodes" or
                                          coll_mod.mpi_missing() is not None)
    assert len(res["table"]["rows"]) == len(rows) and res["tables"][0] is res["table"]
    # upc_rt's all_broadcast and all_exchange under ALL, MY and NO sync, same cases
    sync = [r for r in res["results"] if r["section"] == "sync"]
    assert {(r["collective"], r["topology"], r["size"]) for r in sync} == {
        (w, t, n) for w in ("broadcast", "exchange") for t in ("node", "2nodes")
        for n in (8, 600)}
    for r in sync:
        assert set(r["seconds"]) == {"ALL", "MY", "NO"} and all(
            v > 0 for v in r["seconds"].values())
    assert len(res["tables"][1]["rows"]) == len(sync)
    # the node table: the node area beside the AM path and its peer, every repetition
    small = [r for r in res["results"] if r["section"] == "small"]
    cases = {(w, n) for w in ("broadcast", "reduce_all", "gather_all") for n in (8, 64)} | {
        ("barrier", 8), ("broadcast", 65536), ("reduce_all", 65536)}
    assert {(r["topology"], r["ranks"], r["collective"], r["size"]) for r in small} == {
        (t, P, w, n) for t, P in (("node", 2), ("threads", 2), ("2nodes", 4))
        for w, n in cases}
    node = {(r["collective"], r["size"]): r for r in small if r["topology"] == "node"}
    for r in small:
        assert r["amnet"] > 0 and r["am"] > 0 and r["solo"] > 0
        if r["topology"] == "threads":  # beside the 2 processes of the same repetition
            assert r["peer"] == node[(r["collective"], r["size"])]["amnet"]
            assert r["floor_name"] in ("handoff", "team of one") and r["floor_ratio"] > 0
        elif r["topology"] == "2nodes":  # beside hier_am, in the same job
            assert r["peer"] == r["am"] and r["peer_name"] == "hier_am"
        elif coll_mod.mpi_missing() is None:
            assert r["mpi4py"] == r["peer"] > 0
        if r["peer"]:
            assert r["ratio"] == r["amnet"] / r["peer"]
            assert r["ratios"] == [r["ratio"]]  # one repetition, listed
    assert res["tables"][2]["title"].startswith("Node collectives")
    assert len(res["tables"][2]["rows"]) == len(small)
    assert sum("x ALLSYNC" in n for n in res["tables"][1]["notes"]) == 4
    assert [f["file"] for f in res["figures"]] == ["coll_broadcast.png", "coll_exchange.png"]
    for fig in res["figures"]:  # a size an algorithm did not run at is a gap, not a line
        what = fig["file"][5:-4]
        drawn = draw(fig)
        ax = drawn.axes[0]
        ran = [(r["topology"], a) for r in rows if r["collective"] == what
               for a, v in r["seconds"].items() if v is not None]
        mpi = [r for r in rows if r["collective"] == what and r["mpi4py"] is not None]
        assert sum(1 for line in ax.get_lines() for _, y in line.get_xydata()
                   if math.isfinite(y)) == len(ran) + len(mpi)
        naive = [s for s in fig["series"] if s["label"].startswith("naive")]
        assert naive and all(s["x"] == [8, 600] and s["y"][1] is None for s in naive)
        assert ax.get_ylabel() == "µs per call (lower is better)"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["8 B", "600 B"]
        require_matplotlib().close(drawn)
    pushes = [n for n in res["notes"] if "faster than the reference memcpy push" in n]
    assert len(pushes) == 4  # broadcast and exchange, both topologies, at 600 B and 2 ranks
    assert any(n.startswith("AM floor:") for n in res["notes"])
    assert any(n.startswith("team of one:") for n in res["notes"])
    assert any(n.startswith("node area:") for n in res["tables"][2]["notes"])
    assert markdown(res).startswith("## amnet-bench coll")
    only = SUITES["coll"]([*TINY, "--sync", "none", "--topology", "node", "--small-ranks",
                           "none"], progress=False)
    assert len(only["tables"]) == 1 and all(r["section"] == "algorithms"
                                            for r in only["results"])
