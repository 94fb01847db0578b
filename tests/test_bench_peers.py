"""The intra-node benchmark peers (raw-shm, memcpy, mpi4py): tiny real runs, shapes checked.

Behaviour only: benchmarks are never timed tests, so nothing here asserts a speed; each peer
runs with a few iterations and its dict is checked for its keys, positive figures, ordered
statistics and every sample. The ``marked`` fixture fails a test that leaves a process of
its own behind; :func:`shm_clean` one that leaves anything new in /dev/shm.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys

import pytest

from amnet_bench import BenchError
from amnet_bench import _mpipeer as mpipeer
from amnet_bench import _shmpeer as shmpeer
from amnet_bench import _stats as stats
from amnet_bench._report import find_mpiexec


def _dev_shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


@pytest.fixture
def shm_clean(marked):
    """Nothing left behind: no marked process (``marked``), nothing new in /dev/shm."""
    before = _dev_shm()
    yield
    assert _dev_shm() - before == set()


def _check_figures(d: dict, n: int) -> None:
    """Statistics over ``n`` positive samples, in order."""
    assert d["n"] == n == len(d["samples"])
    assert all(s > 0 for s in d["samples"])
    assert 0 < d["min"] <= d["p10"] <= d["median"] <= d["p90"] <= d["max"]
    assert d["min"] <= d["mean"] <= d["max"]
    assert d["median"] == pytest.approx(statistics.median(d["samples"]))


def test_the_statistics_are_numpys():
    """One module owns the statistics: percentiles interpolated as numpy's default."""
    import numpy as np

    for xs in ([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0], [3.0, 1.0], [2.5]):
        s = stats.stats(xs)
        want = np.percentile(xs, [10, 50, 90, 25, 75])
        assert [s["p10"], s["median"], s["p90"]] == pytest.approx(list(want[:3]))
        assert stats.percentiles(xs, [25, 75]) == pytest.approx(list(want[3:]))
        assert stats.median(xs) == s["median"] == pytest.approx(statistics.median(xs))
        assert s["samples"] == xs and s["n"] == len(xs) and (s["min"], s["max"]) == (
            min(xs), max(xs))
        assert "samples" not in stats.stats(xs, keep=False)
    for empty in (stats.stats, stats.median):
        with pytest.raises(ValueError):
            empty([])


# -- raw-shm ------------------------------------------------------------------------------
@pytest.mark.parametrize("pin", ["none", "split"])
def test_raw_shm_rtt(shm_clean, pin):
    r = shmpeer.raw_shm_rtt(iters=250, warmup=20, pin=pin, batch=100)
    assert r["peer"] == "raw-shm" and r["unit"] == "s" and r["pin"] == pin
    assert (r["batch"], r["batches"], r["round_trips"], r["warmup"]) == (100, 3, 300, 20)
    _check_figures(r, 3)
    assert r["spin"] == ("busy" if r["usable_cores"] >= 2 else "yield")
    if pin == "none":
        assert r["cores"] is None
    elif r["cores"] is not None:  # pinned where /proc/self/task lets it
        usable = sorted(os.sched_getaffinity(0))
        assert r["cores"] == [usable[0], usable[1 % len(usable)]]


def test_raw_shm_rtt_batch_larger_than_iters(shm_clean):
    r = shmpeer.raw_shm_rtt(iters=50, warmup=0, batch=1000)
    assert (r["batch"], r["batches"]) == (50, 1)
    _check_figures(r, 1)


def test_raw_shm_rtt_bad_arguments():
    with pytest.raises(ValueError, match="pin"):
        shmpeer.raw_shm_rtt(10, 0, pin="same")
    with pytest.raises(ValueError):
        shmpeer.raw_shm_rtt(0, 0)


def test_raw_shm_timeout_kills_both_sides(shm_clean):
    with pytest.raises(BenchError, match="did not finish"):
        shmpeer.raw_shm_rtt(iters=10**10, warmup=0, timeout=1)


def test_shmpeer_command_line(shm_clean):
    out = subprocess.run([sys.executable, "-m", "amnet_bench._shmpeer", "rtt", "20", "2",
                          "none", "10"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith(shmpeer.PREFIX)
    bad = subprocess.run([sys.executable, "-m", "amnet_bench._shmpeer", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "usage" in bad.stderr


# -- memcpy -------------------------------------------------------------------------------
def test_python_calls_rtt_runs_the_handlers_and_batches():
    r = shmpeer.python_calls_rtt(iters=250, warmup=10, batch=100)
    assert r["n"] == 3 and len(r["samples"]) == 3  # 250 rounded up to whole batches of 100
    assert 0 < r["min"] <= r["median"] <= r["max"] < 1e-3


def test_memcpy_bw(shm_clean):
    sizes = [8, 1 << 20, 3 << 20]
    r = shmpeer.memcpy_bw(sizes, reps=3, min_bytes=4 << 20)
    assert r["peer"] == "memcpy" and r["unit"] == "MB/s" and r["reps"] == 3
    assert list(r["sizes"]) == [str(s) for s in sizes]
    for s in sizes:
        d = r["sizes"][str(s)]
        assert d["bytes"] == s
        assert d["copies_per_sample"] == max(1, min(shmpeer.MAX_COPIES, -(-(4 << 20) // s)))
        _check_figures(d, 3)


def test_memcpy_bad_arguments():
    with pytest.raises(ValueError):
        shmpeer.memcpy_bw([], reps=2)
    with pytest.raises(ValueError):
        shmpeer.memcpy_bw([8], reps=0)
    with pytest.raises(ValueError, match="pin"):
        shmpeer.memcpy_bw([8], reps=1, pin="same")


# -- mpi4py -------------------------------------------------------------------------------
MPI_MISSING = (importlib.util.find_spec("mpi4py") is None and "mpi4py is not installed") or \
    (find_mpiexec() is None and "mpiexec is not installed")

TINY = {"pingpong": {"warmup": 5, "iters": 30, "batch": 10},
        "am": {"warmup": 5, "iters": 30, "batch": 10},
        "rma_lat": {"sizes": [8, 1024], "warmup": 2, "iters": 20, "batch": 10},
        "rma_bw": {"sizes": [1 << 20, 2 << 20], "warmup": 1, "batches": 2, "batch": 2},
        "window_bytes": 2 << 20}


@pytest.mark.skipif(bool(MPI_MISSING), reason=str(MPI_MISSING))
@pytest.mark.parametrize("pin", ["none", "split"])
def test_mpi_peer_figures(shm_clean, pin):
    r = mpipeer.run_mpi({**TINY, "pin": pin}, timeout=120)
    assert r["peer"] == "mpi4py" and r["ranks"] == 2 and r["same_node"] is True
    assert r["pin"] == pin and r["thread_level"] in ("single", "funneled", "serialized",
                                                      "multiple")
    assert r["mpi_library"] and r["mpi4py"]
    for key in ("pingpong", "am"):
        d = r[key]
        assert (d["unit"], d["batch"], d["batches"], d["warmup"]) == ("s", 10, 3, 5)
        _check_figures(d, 3)
    for key in ("rma_put", "rma_get"):
        assert list(r[key]) == ["8", "1024"]
        for size, d in r[key].items():
            assert d["bytes"] == int(size) and d["unit"] == "s"
            _check_figures(d, 2)
    for key in ("rma_put_bw", "rma_get_bw"):
        assert list(r[key]) == [str(1 << 20), str(2 << 20)]
        for size, d in r[key].items():
            assert d["bytes"] == int(size) and d["unit"] == "MB/s" and d["batch"] == 2
            _check_figures(d, 2)
    assert r["plan"]["pingpong"] == TINY["pingpong"]


@pytest.mark.skipif(bool(MPI_MISSING), reason=str(MPI_MISSING))
def test_mpi_peer_runs_only_the_sections_asked(shm_clean):
    r = mpipeer.run_mpi({"pingpong": {"warmup": 0, "iters": 4, "batch": 2},
                         "thread_level": "single"}, timeout=120)
    assert r["thread_level"] == "single"
    _check_figures(r["pingpong"], 2)
    assert not {"am", "rma_put", "rma_get", "rma_put_bw", "rma_get_bw"} & set(r)


@pytest.mark.skipif(bool(MPI_MISSING), reason=str(MPI_MISSING))
def test_mpi_peer_timeout_ends_the_job(shm_clean):
    with pytest.raises(BenchError, match="did not finish"):
        mpipeer.run_mpi({"pingpong": {"warmup": 0, "iters": 10**10, "batch": 1000}},
                        timeout=2)


def test_mpi_plan_defaults_and_errors():
    assert mpipeer.full_plan() == mpipeer.DEFAULT_PLAN
    p = mpipeer.full_plan({"am": {"iters": 7}})
    assert p["am"] == {**mpipeer.DEFAULT_PLAN["am"], "iters": 7}
    assert "pingpong" not in p and p["pin"] == "none"
    with pytest.raises(ValueError, match="unknown plan keys"):
        mpipeer.full_plan({"bogus": 1})
    with pytest.raises(ValueError, match="unknown keys"):
        mpipeer.full_plan({"am": {"bogus": 1}})
    with pytest.raises(ValueError, match="pin"):
        mpipeer.full_plan({"pin": "same"})
    with pytest.raises(ValueError, match="window_bytes"):
        mpipeer.full_plan({"rma_bw": {"sizes": [2 << 20]}, "window_bytes": 1 << 20})
    with pytest.raises(ValueError, match="iters"):
        mpipeer.full_plan({"pingpong": {"iters": 0}})
    with pytest.raises(ValueError, match="thread_level"):
        mpipeer.full_plan({"thread_level": "many"})


def test_mpi_peer_missing_mpiexec(monkeypatch):
    # mpi4py present or not (the test extra does not install it): the check for mpiexec is
    # what is tested, so mpi4py is made to look installed
    import amnet_bench._report as report

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "mpi4py" else real(name, *a))
    monkeypatch.setattr(report, "find_mpiexec", lambda: None)
    with pytest.raises(BenchError, match="needs mpiexec, found neither"):
        mpipeer.run_mpi({"pingpong": {}})


def test_mpi_peer_missing_mpi4py(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else real(name, *a))
    with pytest.raises(BenchError, match="mpi4py"):
        mpipeer.run_mpi({"pingpong": {}})
