"""amnet-bench `coll`: the figures it returns, from tiny real runs (behaviour only: nothing
here is timed)."""

from __future__ import annotations

import math

import pytest

from amnet.bench import SUITES
from amnet.bench import coll as coll_mod
from amnet.bench._plot import draw, require_matplotlib
from amnet.bench._report import markdown, median
from amnet.coll import ALGORITHMS

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
    # the fixed cost of small calls: amnet beside its two floors and mpi4py, every repetition
    small = [r for r in res["results"] if r["section"] == "small"]
    assert {(r["collective"], r["ranks"], r["size"]) for r in small} == {
        (w, 2, n) for w in ("broadcast", "reduce_all", "gather_all") for n in (8, 64)} | {
        ("barrier", 2, 8)}
    for r in small:
        assert r["amnet"] > 0 and r["floor"] > 0 and r["solo"] > 0
        if coll_mod.mpi_missing() is None:
            assert r["mpi4py"] > 0 and r["ratio"] == r["amnet"] / r["mpi4py"]
            assert r["ratios"] == [r["ratio"]]  # one repetition, listed
    assert res["tables"][2]["title"].startswith("Small collectives")
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
    assert markdown(res).startswith("## amnet-bench coll")
    only = SUITES["coll"]([*TINY, "--sync", "none", "--topology", "node", "--small-ranks",
                           "none"], progress=False)
    assert len(only["tables"]) == 1 and all(r["section"] == "algorithms"
                                            for r in only["results"])


@pytest.mark.parametrize("args", [["--ranks", "1"], ["--ranks", "3", "--topology", "2nodes"],
                                  ["--collectives", "gossip"], ["--calls", "0"],
                                  ["--skew", "0.5"], ["--compute", "-1"],
                                  ["--sync", "SOME"], ["--small-ranks", "1"],
                                  ["--small-calls", "0"]])
def test_bad_options_are_refused(args):
    with pytest.raises(SystemExit) as e:
        SUITES["coll"](args, progress=False)
    assert e.value.code == 2
