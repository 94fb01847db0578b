"""amnet-bench: the suite registry, the `startup` suite's figures, the CLI's files and errors.

Behaviour only: benchmarks are never timed tests, so no assertion here is about speed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amnet_bench import BenchError
from amnet_bench import startup as startup_mod
from amnet_bench._report import find_mpiexec
from amnet_bench._stats import median

BENCH = [sys.executable, "-m", "amnet_bench"]


def _check_summary(s: dict, reps: int) -> None:
    assert len(s["samples"]) == reps
    assert all(x > 0 for x in s["samples"])
    assert s["min"] <= s["median"] <= s["max"]
    assert s["median"] == median(s["samples"])


def _bench_imports() -> dict[str, set[str]]:
    """Which modules of amnet_bench each of its modules imports (function-level imports
    included); ``amnet_bench`` is the package itself, whose ``__init__`` imports the suites."""
    import ast
    from pathlib import Path

    import amnet_bench

    here = Path(amnet_bench.__file__).parent
    mods = {p.stem for p in here.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in here.glob("*.py"):
        got: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if not node.level and not mod.startswith("amnet_bench"):
                    continue
                mod = mod.removeprefix("amnet_bench").lstrip(".")
                if mod:
                    got.add(mod)
                else:  # from . import x: the module x, else a name of the package
                    got |= {a.name if a.name in mods else "__init__" for a in node.names}
            elif isinstance(node, ast.Import):
                got |= {a.name.partition(".")[2] or "__init__" for a in node.names
                        if a.name.split(".")[0] == "amnet_bench"}
        graph[path.stem] = got - {path.stem}
    return graph


def test_the_registry_imports_nothing_back_and_no_import_cycle():
    graph = _bench_imports()
    assert graph["_registry"] == set()
    assert [m for m, got in graph.items() if "__init__" in got] == ["cli"]  # nothing else
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, " -> ".join((*path, m))
        if m not in done:
            for n in sorted(graph.get(m, ())):
                visit(n, (*path, m))
            done.add(m)

    for m in sorted(graph):
        visit(m, ())


def test_amnets_private_modules_are_imported_in_one_place():
    """amnet_bench's imports of amnet's private modules are all in amnet_bench/_amnet.py."""
    import ast
    from pathlib import Path

    import amnet_bench

    found = set()
    for path in Path(amnet_bench.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level \
                else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found |= {(path.name, n) for n in names
                      if n.split(".")[0] == "amnet" and any(x.startswith("_")
                                                            for x in n.split(".")[1:])}
    assert found and {f for f, _ in found} == {"_amnet.py"}, found


def test_startup_figures():
    res = startup_mod.startup(reps=2, ranks=[2], progress=False)
    assert res["suite"] == "startup"
    assert res["config"]["reps"] == 2 and res["config"]["ranks"] == [2]
    peer_ran = find_mpiexec() is not None
    # N=2 is even: one row of 2 processes, one of 1 process x 2 rank-threads.
    assert [(r["ranks"], r["threads_per_proc"]) for r in res["results"]] == [(2, 1), (2, 2)]
    for row in res["results"]:
        _check_summary(row["amnet"], 2)
        assert row["amnet"]["median"] > 0
        if peer_ran:
            _check_summary(row["peer"], 2)
            assert row["ratio"] == pytest.approx(row["amnet"]["median"] / row["peer"]["median"])
        else:
            assert row["peer"] is None and row["ratio"] is None
    if peer_ran:  # both amnet rows are compared to the same peer figure
        assert res["results"][0]["peer"] == res["results"][1]["peer"]
    assert len(res["table"]["rows"]) == 2
    assert all(len(r) == len(res["table"]["columns"]) for r in res["table"]["rows"])
    assert any("lower is better" in c for c in res["table"]["columns"])


def test_startup_without_peer(monkeypatch):
    monkeypatch.setattr(startup_mod, "find_mpiexec", lambda: None)
    res = startup_mod.startup(["--reps", "1", "--ranks", "1"], progress=False)
    (row,) = res["results"]  # N=1 is odd: no --threads-per-proc 2 row
    assert row["peer"] is None and row["ratio"] is None
    _check_summary(row["amnet"], 1)
    assert "not installed (pip install -e '.[peers]')" in res["table"]["rows"][0]


def test_startup_oversubscription_is_said(monkeypatch):
    monkeypatch.setattr(startup_mod.os, "cpu_count", lambda: 1)
    monkeypatch.setattr(startup_mod, "find_mpiexec", lambda: None)
    res = startup_mod.startup(reps=1, ranks="2", warmup=0, progress=False)
    assert all(r["oversubscribed"] for r in res["results"])
    assert any("Oversubscribed" in n for n in res["notes"])


def test_startup_failing_command_names_it(monkeypatch):
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(4)"]
    monkeypatch.setattr(startup_mod, "amnet_run_command", lambda: fail)
    with pytest.raises(BenchError, match=r"(?s)exited with status 4.*boom"):
        startup_mod.startup(reps=1, ranks=[1], progress=False)


def test_cli_writes_results(tmp_path):
    out = tmp_path / "bench"
    p = subprocess.run([*BENCH, "startup", "--reps", "1", "--ranks", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "| N |" in p.stdout and "lower is better" in p.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["suite"] == "startup"
    assert doc["config"]["reps"] == 1 and doc["config"]["ranks"] == [2]
    for key in ("hostname", "cpu_count", "python", "amnet", "pyzmq", "libzmq", "mpich"):
        assert key in doc["machine"]
    assert all(len(r["amnet"]["samples"]) == 1 for r in doc["results"])
    md = (out / "results.md").read_text()
    assert md.startswith("## amnet-bench startup")
    assert "| N |" in md and "|---|" in md


def test_cli_list():
    p = subprocess.run([*BENCH, "--list"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "startup" in p.stdout


def test_cli_help_says_what_out_writes():
    p = subprocess.run([*BENCH, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out_help = " ".join(p.stdout.split())  # the help is wrapped to the terminal's width
    for what in ("DIR/results.json", "DIR/results.md", "PNG plots", "matplotlib", "--version"):
        assert what in out_help, p.stdout


def test_cli_version():
    from importlib import metadata

    p = subprocess.run([*BENCH, "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"amnet-bench {metadata.version('amnet')}\n"


def test_cli_unknown_suite():
    p = subprocess.run([*BENCH, "no-such-suite"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "unknown suite 'no-such-suite'" in p.stderr and "startup" in p.stderr


def test_startup_program_init():
    res = startup_mod.startup(["--reps", "1", "--ranks", "2", "--program", "init",
                               "--warmup", "0"], progress=False)
    assert res["config"]["program"] == "init"
    assert res["results"][0]["amnet"]["command"][-1] == "INIT.py"
    if res["config"]["mpiexec"]:  # mpi4py is there: the peer joins an MPI job
        assert "MPI.COMM_WORLD.Barrier()" in res["results"][0]["peer"]["command"][-1]
    assert any("program: init" in n for n in res["notes"])
