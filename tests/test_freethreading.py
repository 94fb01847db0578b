"""amnet without the interpreter lock (issue 43): every amnet extension module declares that
it runs without the GIL, so that on free-threaded CPython (3.13t and later) importing amnet
leaves the lock off; and amnet's shared state holds up when rank-threads really run at once
(the handler tables growing under traffic, op ids taken by several threads). On a default
build the same jobs run with the lock: the promise is the same (docs/design.md §3)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import ftjobs
import pytest

import amnet

ROOT = Path(__file__).resolve().parent.parent
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
LAYERS = ("amnet", "upc_rt", "shmem_rt", "amnet_bench")


def extension_sources() -> dict[str, list[Path]]:
    """setup.py's extension modules and their C sources."""
    text = (ROOT / "setup.py").read_text()
    exts = {}
    for m in re.finditer(r'Extension\("([\w.]+)",\s*\[([^\]]*)\]', text):
        exts[m.group(1)] = [ROOT / p for p in re.findall(r'"([^"]+\.c)"', m.group(2))]
    return exts


def test_every_extension_module_declares_it_runs_without_the_gil():
    exts = extension_sources()
    assert set(exts) >= {"amnet.core._hot", "amnet.pshm._native", "amnet.coll._cmail"}
    for name, sources in exts.items():
        text = "".join(p.read_text() for p in sources)
        assert "Py_MOD_GIL_NOT_USED" in text, f"{name} does not declare Py_MOD_GIL_NOT_USED"


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (3.13t+)")
def test_importing_every_amnet_module_leaves_the_lock_off():
    """With PYTHON_GIL unset, CPython turns the lock back on (with a RuntimeWarning) when a
    module that did not declare Py_MOD_GIL_NOT_USED is imported: none of amnet's does."""
    code = f"""
import importlib, pkgutil, sys, warnings
warnings.simplefilter("error", RuntimeWarning)
for top in {LAYERS!r}:
    pkg = importlib.import_module(top)
    for m in pkgutil.walk_packages(pkg.__path__, top + "."):
        if ".__main__" not in m.name:
            importlib.import_module(m.name)
print("gil", sys._is_gil_enabled())
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["gil", "False"], r.stdout + r.stderr


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (3.13t+)")
def test_rank_threads_run_with_the_lock_off():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = ("import amnet, ftjobs; print(amnet.run(ftjobs.gil_in_rank, n=4, threads_per_proc=2, "
            "timeout=120))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=180, cwd=Path(ftjobs.__file__).parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[False, False, False, False]", r.stdout + r.stderr


TOPOS = [
    pytest.param(dict(n=4, threads_per_proc=4), id="T4"),
    pytest.param(dict(n=6, threads_per_proc=3), id="2procs-T3"),
    pytest.param(dict(n=4, nodes=2, threads_per_proc=2), id="2nodes-T2"),
]


@pytest.mark.parametrize("topo", TOPOS)
def test_handler_tables_grow_while_other_threads_run_their_handlers(topo):
    res = amnet.run(ftjobs.tables_under_traffic, **topo, segment_size="1M", timeout=180)
    for r, got in enumerate(res):
        assert got["got"] == got["want"], r
        assert got["gil"] is (not FREE_THREADED or sys._is_gil_enabled()), got


@pytest.mark.parametrize("threads", [2, 3])
def test_op_ids_taken_by_several_threads_complete_once_each(threads):
    res = amnet.run(ftjobs.ops_from_two_threads, n=2 * threads, nodes=2,
                    threads_per_proc=threads, segment_size="1M", timeout=180)
    for got in res:
        assert got["bad"] == [] and got["gets"] == got["want"] and got["inflight"] == 0, got


@pytest.mark.parametrize("topo", [pytest.param(dict(n=4, threads_per_proc=2), id="2procs-T2"),
                                  pytest.param(dict(n=6, threads_per_proc=3), id="2procs-T3")])
def test_wait_conditions_that_make_progress_while_a_sibling_receives(topo):
    for _ in range(3):  # a lost race hangs a job: three jobs make one far likelier
        res = amnet.run(ftjobs.conditions_that_progress, **topo, segment_size="1M", timeout=60)
        for got in res:
            assert got["got"] == got["want"] and got["atomics"] == got["polls"], got


def test_deferred_work_never_runs_inside_a_drain():
    """A wait's condition runs inside a drain too (the thread that drains looks at it as
    messages arrive); a poll from there must not run deferred work, which sends and may block
    while the process cannot drain."""
    res = amnet.run(ftjobs.deferred_outside_drains, n=4, threads_per_proc=2,
                    segment_size="1M", timeout=60)
    assert sum(got["ran"] for got in res) > 0
    assert [got["in_drain"] for got in res] == [0] * 4, res
