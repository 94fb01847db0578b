"""The conformance jobs on real cluster parts, for tests/test_cluster.py and
tests/test_cluster_slurm.py: run one of ``tests/data/clusterfns.py``'s jobs (the core AM job,
VIS, upc_rt, every collective) through ``amnet.run`` in a process of its own, and check what
its ranks returned with the checks the job's own test module makes, and where they ran."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from conftest import DATA, MPICH_DEFAULTS

NAMES = ["core", "vis", "upc", "coll"]


def run(runner, name: str, options: dict, env: dict | None = None) -> list[dict]:
    """Run job ``name`` with ``amnet.run``'s keyword ``options`` (the spawner, hosts,
    topology) in the runner's environment, MPICH with its own choices, plus ``env``; return
    what every rank returned (``{"where": ..., "got": ...}``, by rank)."""
    out = runner.tmp / f"{name}.pkl"
    cmd = [sys.executable, str(DATA / "clusterfns.py"), name, str(out), json.dumps(options)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=200,
                       env=runner.env({**MPICH_DEFAULTS, **(env or {})}), cwd=runner.tmp,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return pickle.loads(out.read_bytes())


def check(name: str, ranks: list[dict]) -> None:
    """What the job's own test module asserts about it (4 ranks on 2 nodes)."""
    n = len(ranks)
    assert [r["where"]["rank"] for r in ranks] == list(range(n))
    got = [r["got"] for r in ranks]
    if name == "core":
        import test_am

        for fn in (test_am.check_echo, test_am.check_fifo, test_am.check_tables,
                   test_am.check_context, test_am.check_handler_errors,
                   test_am.check_barriers, test_am.check_clean):
            fn(got)
        test_am.check_bad_input(got, 2 << 20)
    elif name == "vis":
        import clusterfns
        import test_vis

        test_vis.check_fanout(got, clusterfns.VIS_ROUNDS)
    elif name == "upc":
        tickets = sorted(t for f in got for t in f["tickets"])
        assert tickets == list(range(5 * n))  # fetch_add handed out every ticket once
        assert [f["rank"] for f in got] == list(range(n))
    elif name == "coll":
        calls = [g[0] for g in got]
        assert len(set(calls)) == 1 and calls[0] > 100  # everyone checked the same calls
    else:
        raise ValueError(name)
