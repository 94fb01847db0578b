"""Every `amnet-bench` suite runs with `--quick` (the short run meant for a 2-core machine)
through the command line and writes a results.json with the keys a reader relies on and
sane numbers. A smoke test: no timing assertions."""

from __future__ import annotations

import importlib
import json
import math
import re
import subprocess
import sys

import pytest
from benchcheck import check_figures

from amnet_bench import SUITES
from amnet_bench import _options as options
from amnet_bench._plot import draw, wants_log
from amnet_bench._report import free_threaded

BENCH = [sys.executable, "-m", "amnet_bench"]
KEYS = {"suite", "date", "argv", "machine", "config", "results", "notes"}


# signed by nature: the model's relative error (negative when it predicts too little);
# nbcomm's share of the manual gain (negative when the automatic form loses to blocking) and
# communication fraction (negative when the run without communication happens to be slower)
SIGNED = {"delta", "delta_iqr", "auto_share", "comm_fraction",
          "comm_s"}  # comm_s: a difference of costs


def _numbers(x, key=""):
    """Every number under ``x`` but the signed ones."""
    if isinstance(x, bool) or key in SIGNED:
        return
    if isinstance(x, int | float):
        yield float(x)
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, k)
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _numbers(v, key)


def test_every_suite_is_covered():
    assert set(SUITES) == {"am", "apps", "coll", "hybrid", "inject", "model", "nbcomm",
                           "rma", "shmem", "startup", "upc", "vis"}
    for name, fn in SUITES.items():  # the function of its name in the module of its name
        assert fn is getattr(importlib.import_module(f"amnet_bench.{name}"), name)
        assert fn.suite_name == name


#: On a free-threaded build only the suites whose figures turn on the interpreter lock run
#: their quick CLI (rank-threads against processes); the others' command line, report and
#: plots do not depend on the build and are checked on the default one (CI runs both within
#: the hour).
LOCK_BOUND = {"apps", "coll", "hybrid"}
FREE_THREADED = free_threaded()


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_quick_runs_and_writes_its_results(suite, marked, tmp_path):
    if FREE_THREADED and suite not in LOCK_BOUND:
        pytest.skip(f"{suite}: its quick CLI is checked on the default build")
    out = tmp_path / suite
    p = subprocess.run([*BENCH, suite, "--quick", "--out", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"## amnet-bench {suite}")
    doc = json.loads((out / "results.json").read_text())
    assert KEYS <= set(doc) and doc["suite"] == suite and "--quick" in doc["argv"]
    assert doc["machine"]["cpu_count"] >= 1 and doc["results"]
    nums = list(_numbers(doc["results"]))
    assert nums and all(math.isfinite(v) and v >= 0 for v in nums)
    assert any(v > 0 for v in nums)
    for fig in doc.get("figures", ()):
        assert (out / fig["file"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the suite names the plots it draws (the command line checks for matplotlib first)
    assert bool(doc.get("figures")) == bool(SUITES[suite].plots)
    check_figures(doc)
    for fig in doc.get("figures", ()):
        _check_drawn(fig)


def _check_drawn(fig):
    """A suite's figure as drawn: which way is better on the y axis, the notation of its
    labels explained on the figure, a log axis where the values span orders of magnitude,
    and exactly the measured points (bars)."""
    import matplotlib.pyplot as plt

    f = draw(fig)
    ax = f.axes[0]
    captions = "\n".join(t.get_text() for t in f.texts)
    labels = [s["label"] for s in fig["series"]]
    measured = [y for s in fig["series"] for y in s["y"] if y is not None]
    assert ax.get_ylabel().endswith(("(lower is better)", "(higher is better)"))
    if any(re.search(r"\b\d+T-\d+P\b", x) for x in labels):
        assert "xT-yP: x rank-threads (T) in each of y processes (P)" in captions
    if any(re.search(r"\bNB\d*\b|\bB$", x) for x in labels):
        assert "Modes: " in captions
    assert (ax.get_yscale() == "log") == fig.get("ylog", wants_log(measured))
    if fig.get("kind") == "bar":
        assert len(ax.patches) == sum(len(s["y"]) for s in fig["series"])
    else:
        assert sum(1 for line in ax.get_lines() for x, y in line.get_xydata()
                   if math.isfinite(y)) == len(measured)
    plt.close(f)


COMMON = ("--ranks", "--splits", "--nodes", "--sizes", "--reps", "--quick")


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_takes_the_common_options(name, capsys):
    with pytest.raises(SystemExit) as e:
        SUITES[name](["--help"], progress=False)
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert all(f" {flag}" in out for flag in COMMON), (name, out)


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_quick_setting_is_an_option_of_its_suite(name, monkeypatch):
    """--quick sets options by destination: a name that is none (a typo) would change
    nothing and the quick run would silently be a full one."""
    got = {}

    def parse(p, args, quick, *rest, **kw):
        got.update(unknown=set(quick) - {a.dest for a in p._actions})
        raise SystemExit(0)

    monkeypatch.setattr(options, "parse", parse)
    with pytest.raises(SystemExit):
        SUITES[name]([], progress=False)
    assert got["unknown"] == set()


#: Bad options, each refused (exit status 2) with its reason. An option the suites share
#: (amnet_bench/_options.py) is tried in one of them; each suite's own checks, and the
#: common options its experiment fixes, in every suite.
REFUSED = [
    # counts, numbers and lists of names, as every suite defines them
    ("hybrid", ["--trips", "0"], "--trips must be at least 1, got 0"),
    ("am", ["--node-warmup", "-1"], "--node-warmup must be 0 or more, got -1"),
    ("upc", ["--matmul-n", "260"], "--matmul-n must be in 4..256, got 260"),
    ("coll", ["--skew", "0.5"], "--skew must be in 1..100, got 0.5"),
    ("inject", ["--latency", "-1"], "--latency must be in 0..1000000 µs, got -1.0"),
    ("vis", ["--latency", "fast"], "expected a comma list of latencies such as 0,10"),
    ("vis", ["--min-time", "0"], "--min-time must be in (0, 10] seconds, got 0.0"),
    ("inject", ["--modes", "NB7"], "modes are B, NB8, NB32, NB128, NB; got 'NB7'"),
    ("hybrid", ["--collectives", "scatter"], "exchange, barrier, or none to skip them"),
    ("coll", ["--sync", "SOME"], "sync modes are ALL, MY, NO, or none to skip them"),
    ("upc", ["--threads", "2,x"], "expected a comma list of thread counts such as 2,4,8"),
    ("coll", ["--small-ranks", "1"], "rank counts are 2..64, got '1'"),
    # sizes
    ("am", ["--sizes", "8,nope"], "expected a comma list of sizes such as 8,1K,64K"),
    ("hybrid", ["--coll-sizes", "0"], "sizes must be positive, got '0'"),
    ("inject", ["--sizes", "32M"], "--sizes: at most 16 MiB a put, got 33554432"),
    ("rma", ["--bytes", "lots"], "expected a size such as 128M, got 'lots'"),
    # where the jobs run
    ("apps", ["--ranks", "1"], "--ranks must be in 2..64, got 1"),
    ("apps", ["--nodes", "3"], "--nodes must be at least 1 and divide --ranks (4), got 3"),
    ("inject", ["--ranks", "6", "--nodes", "4"], "at least 2 and divide --ranks (6), got 4"),
    ("hybrid", ["--ranks", "8", "--splits", "3"],
     "--splits 3 must divide the ranks per node (4); possible: 1,2,4"),
    ("inject", ["--splits", "x"], "expected all or a comma list of rank-threads"),
    ("upc", ["--topology", "moon"], "topologies are node, 2nodes; got 'moon'"),
    ("shmem", ["--nodes", "3"], "--nodes takes 1, 2 or 1,2 here"),
    ("rma", ["--no-node", "--no-network", "--no-aio"], "leave nothing to run"),
    ("model", ["--conduit", "carrier-pigeon"], "expected a comma list of registered conduits"),
    ("vis", ["--conduit", ""], "expected a comma list of registered conduits"),
    ("nbcomm", ["--conduit", "zmq,tcp"], "--conduit takes one conduit, got zmq,tcp"),
    ("am", ["--wait-mode", "fast"], "wait modes are auto, spin, block; got 'fast'"),
    ("rma", ["--pin", "everywhere"], "invalid choice: 'everywhere'"),
    ("am", ["--mpi-paths", "ib"], "MPI paths are nolocal, tcp; got 'ib'"),
    # the common options a suite's experiment fixes
    ("am", ["--ranks", "4"], "--ranks 4: am times round trips between a pair of ranks"),
    ("am", ["--splits", "4"], "this suite runs --splits 1,2 only"),
    ("rma", ["--ranks", "3"], "this suite runs --ranks 2 only"),
    ("vis", ["--nodes", "1"], "--nodes 1: the paper's experiment is across 2 nodes"),
    ("vis", ["--splits", "2"], "this suite runs --splits 1 only"),
    ("nbcomm", ["--sizes", "8"], "--sizes 8: its kernels have no message size of their own"),
    ("coll", ["--splits", "2"], "its ranks are processes"),
    ("upc", ["--sizes", "8"], "it times element accesses"),
    ("model", ["--splits", "2"], "MuPC's threads are processes"),
    ("apps", ["--sizes", "1K"], "its kernels have no message size"),
    ("shmem", ["--splits", "2"], "a thread is a process, except in the threaded reduce"),
    ("startup", ["--sizes", "1K"], "its jobs send nothing"),
    # each suite's own checks
    ("startup", ["--ranks", "2", "--splits", "4"], "none divides the 2 ranks per node"),
    ("model", ["--threads", "3"], "--threads must be in 2..16 (even with 2nodes)"),
    ("model", ["--bind-to", "socket"], "invalid choice: 'socket'"),
    ("nbcomm", ["--set", "gups.colour=3"], "unknown parameter 'gups.colour'"),
    ("nbcomm", ["--set", "gups.updates"], "expected KERNEL.PARAM=INT"),
    ("nbcomm", ["--set", "stencil.nz=2"], "stencil.nz must be in 3..1024, got 2"),
    ("nbcomm", ["--ranks", "3", "--nodes", "1"], "transpose.n (128) must be a multiple"),
    ("coll", ["--ranks", "3", "--topology", "2nodes"], "--ranks must be even with --topology"),
    ("shmem", ["--ra-words", "100"], "--ra-words must be a power of two, got 100"),
    ("shmem", ["--threads-per-proc", "3"], "--threads-per-proc must divide --coll-threads"),
    ("upc", ["--block", "2048", "--batch", "300"], "--batch must be at most --block / 8"),
    ("upc", ["--block", "40000000"], "--block 40000000 is 320000000 bytes a thread"),
    ("upc", ["--matmul-n", "10"], "--matmul-n must be a multiple of 4"),
    ("upc", ["--no-peers", "--no-patterns"], "nothing to run: both --no-peers"),
    ("vis", ["--stride", "100"], "--stride (100) must be at least --elem (256)"),
    ("vis", ["--sizes", "1000"], "sizes must be multiples of --elem (256)"),
    ("vis", ["--sizes", "2G"], "the largest transfer spans 7130316800 bytes"),
]


@pytest.mark.parametrize(("name", "args", "says"), REFUSED)
def test_bad_options_are_refused_with_the_reason(name, args, says, capsys):
    with pytest.raises(SystemExit) as e:
        SUITES[name](args, progress=False)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_ranks_and_nodes_name_the_models_threads_and_topologies():
    res = SUITES["model"](["--quick", "--nodes", "1", "--ranks", "2", "--cache", "off",
                           "--kernels", "matmul"], progress=False)
    assert res["config"]["topologies"] == ["node"] and res["config"]["threads"] == 2
    assert [r["topology"] for r in res["results"]] == ["node"]


def test_startup_sweeps_the_splits_over_nodes():
    res = SUITES["startup"](["--quick", "--reps", "1", "--ranks", "4", "--nodes", "2",
                             "--splits", "1,2,4"], progress=False)
    got = [(r["nodes"], r["threads_per_proc"]) for r in res["results"]]
    assert got == [(2, 1), (2, 2)]  # 4 does not divide the 2 ranks per node
    assert [r["amnet"]["command"][:5] for r in res["results"]][1][1:] == [
        "-n", "4", "--nodes", "2"]
