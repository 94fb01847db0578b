"""shmem_rt (OpenSHMEM 1.5 with shmem4py's API): its public surface against shmem4py's (the
names and signatures are written here from shmem4py's shmem.py, not read from an installed
shmem4py), that it imports nothing private of amnet, and every routine in real jobs, one
per mapping (tests/data/shmem_jobs.py checks inside the PEs against numpy models), leaving
nothing behind in /dev/shm."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import shmem_jobs

import amnet
import shmem_rt

ROOT = Path(__file__).resolve().parent.parent
SEGMENT = 8 << 20

NAMES = """
MAJOR_VERSION MINOR_VERSION VENDOR_STRING THREAD THREAD_SINGLE THREAD_FUNNELED
THREAD_SERIALIZED THREAD_MULTIPLE CTX CTX_PRIVATE CTX_SERIALIZED CTX_NOSTORE Ctx CTX_DEFAULT
CTX_INVALID Team TEAM_WORLD TEAM_SHARED TEAM_INVALID MALLOC MALLOC_ATOMICS_REMOTE
MALLOC_SIGNAL_REMOTE AMO AMO_SET AMO_INC AMO_ADD AMO_AND AMO_OR AMO_XOR SIGNAL SIGNAL_SET
SIGNAL_ADD OP OP_AND OP_OR OP_XOR OP_MAX OP_MIN OP_SUM OP_PROD CMP CMP_EQ CMP_NE CMP_GT
CMP_LE CMP_LT CMP_GE Lock
""".split()
SIGNATURES = {
    "info_get_version": "",
    "info_get_name": "",
    "init": "",
    "finalize": "",
    "global_exit": "status=0",
    "init_thread": "requested=THREAD_MULTIPLE",
    "query_thread": "",
    "Ctx.create": "options=0, team=None",
    "Ctx.destroy": "",
    "Ctx.get_team": "",
    "Ctx.fence": "",
    "Ctx.quiet": "",
    "Team.destroy": "",
    "Team.split_strided": "start=0, stride=1, size=None, config=None, **kwargs",
    "Team.get_config": "",
    "Team.my_pe": "",
    "Team.n_pes": "",
    "Team.translate_pe": "pe=None, team=None",
    "Team.create_ctx": "options=0",
    "Team.sync": "",
    "my_pe": "",
    "n_pes": "",
    "pe_accessible": "pe",
    "addr_accessible": "addr, pe",
    "ptr": "target, pe",
    "alloc": "count, size=1, align=None, hints=None, clear=True",
    "free": "mem",
    "fromalloc": "mem, shape=None, dtype=None, order='C'",
    "new_array": "shape, dtype=float, order='C', *, align=None, hints=None, clear=True",
    "del_array": "a",
    "array": "obj, dtype=None, *, order='K', align=None, hints=None",
    "empty": "shape, dtype=float, order='C', *, align=None, hints=None",
    "zeros": "shape, dtype=float, order='C', *, align=None, hints=None",
    "ones": "shape, dtype=float, order='C', *, align=None, hints=None",
    "full": "shape, fill_value, dtype=None, order='C', *, align=None, hints=None",
    "put": "target, source, pe, size=None, ctx=None",
    "get": "target, source, pe, size=None, ctx=None",
    "iput": "target, source, pe, tst=1, sst=1, size=None, ctx=None",
    "iget": "target, source, pe, tst=1, sst=1, size=None, ctx=None",
    "put_nbi": "target, source, pe, size=None, ctx=None",
    "get_nbi": "target, source, pe, size=None, ctx=None",
    "atomic_set": "target, value, pe, ctx=None",
    "atomic_inc": "target, pe, ctx=None",
    "atomic_add": "target, value, pe, ctx=None",
    "atomic_and": "target, value, pe, ctx=None",
    "atomic_or": "target, value, pe, ctx=None",
    "atomic_xor": "target, value, pe, ctx=None",
    "atomic_fetch": "source, pe, ctx=None",
    "atomic_swap": "target, value, pe, ctx=None",
    "atomic_compare_swap": "target, cond, value, pe, ctx=None",
    "atomic_fetch_inc": "target, pe, ctx=None",
    "atomic_fetch_add": "target, value, pe, ctx=None",
    "atomic_fetch_and": "target, value, pe, ctx=None",
    "atomic_fetch_or": "target, value, pe, ctx=None",
    "atomic_fetch_xor": "target, value, pe, ctx=None",
    "atomic_fetch_nbi": "fetch, source, pe, ctx=None",
    "atomic_swap_nbi": "fetch, target, value, pe, ctx=None",
    "atomic_compare_swap_nbi": "fetch, target, cond, value, pe, ctx=None",
    "atomic_fetch_inc_nbi": "fetch, target, pe, ctx=None",
    "atomic_fetch_add_nbi": "fetch, target, value, pe, ctx=None",
    "atomic_fetch_and_nbi": "fetch, target, value, pe, ctx=None",
    "atomic_fetch_or_nbi": "fetch, target, value, pe, ctx=None",
    "atomic_fetch_xor_nbi": "fetch, target, value, pe, ctx=None",
    "atomic_op": "target, value, op, pe, ctx=None",
    "atomic_fetch_op": "target, value, op, pe, ctx=None",
    "atomic_fetch_op_nbi": "fetch, target, value, op, pe, ctx=None",
    "new_signal": "",
    "del_signal": "signal",
    "signal_fetch": "signal",
    "put_signal": "target, source, pe, signal, value, sigop, size=None, ctx=None",
    "put_signal_nbi": "target, source, pe, signal, value, sigop, size=None, ctx=None",
    "barrier_all": "",
    "sync_all": "",
    "sync": "team=None",
    "broadcast": "target, source, root, size=None, team=None",
    "collect": "target, source, size=None, team=None",
    "fcollect": "target, source, size=None, team=None",
    "alltoall": "target, source, size=None, team=None",
    "alltoalls": "target, source, tst=1, sst=1, size=None, team=None",
    "reduce": "target, source, op=OP_SUM, size=None, team=None",
    "and_reduce": "target, source, size=None, team=None",
    "or_reduce": "target, source, size=None, team=None",
    "xor_reduce": "target, source, size=None, team=None",
    "max_reduce": "target, source, size=None, team=None",
    "min_reduce": "target, source, size=None, team=None",
    "sum_reduce": "target, source, size=None, team=None",
    "prod_reduce": "target, source, size=None, team=None",
    "wait_until": "ivar, cmp, value",
    "wait_until_all": "ivars, cmp, value, status=None",
    "wait_until_any": "ivars, cmp, value, status=None",
    "wait_until_some": "ivars, cmp, value, status=None",
    "wait_until_all_vector": "ivars, cmp, values, status=None",
    "wait_until_any_vector": "ivars, cmp, values, status=None",
    "wait_until_some_vector": "ivars, cmp, values, status=None",
    "test": "ivar, cmp, value",
    "test_all": "ivars, cmp, value, status=None",
    "test_any": "ivars, cmp, value, status=None",
    "test_some": "ivars, cmp, value, status=None",
    "test_all_vector": "ivars, cmp, values, status=None",
    "test_any_vector": "ivars, cmp, values, status=None",
    "test_some_vector": "ivars, cmp, values, status=None",
    "signal_wait_until": "signal, cmp, value",
    "fence": "ctx=None",
    "quiet": "ctx=None",
    "new_lock": "",
    "del_lock": "lock",
    "set_lock": "lock",
    "test_lock": "lock",
    "clear_lock": "lock",
    "Lock.destroy": "",
    "Lock.acquire": "blocking=True",
    "Lock.release": "",
    "pcontrol": "level=1",
}


# -- the public surface ---------------------------------------------------------------------
def _params(spec: str) -> list[tuple[str, str, object]]:
    """``"a, b=1, *, c=None, **kw"`` as (name, kind, default) triples."""
    out, kwonly = [], False
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part == "*":
            kwonly = True
            continue
        if part.startswith("**"):
            out.append((part[2:], "VAR_KEYWORD", inspect.Parameter.empty))
            continue
        name, _, default = part.partition("=")
        value = eval(default, vars(shmem_rt)) if default else inspect.Parameter.empty
        out.append((name, "KEYWORD_ONLY" if kwonly else "POSITIONAL_OR_KEYWORD", value))
    return out


def _actual(obj) -> list[tuple[str, str, object]]:
    ps = list(inspect.signature(obj).parameters.values())
    if ps and ps[0].name == "self":
        ps = ps[1:]
    return [(p.name, p.kind.name, p.default) for p in ps]


def test_every_public_name_of_shmem4py_is_there():
    missing = [n for n in [*NAMES, *SIGNATURES] if not _has(n)]
    assert missing == []


def _has(dotted: str) -> bool:
    obj = shmem_rt
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_matches_shmem4py(name):
    obj = shmem_rt
    for part in name.split("."):
        obj = getattr(obj, part)
    want = _params(SIGNATURES[name])
    got = _actual(obj)
    assert [w[:2] for w in want] == [g[:2] for g in got], name  # names, order and kinds
    for (pname, _, wd), (_, _, gd) in zip(want, got, strict=True):
        assert gd == wd, f"{name}: default of {pname} is {gd!r}, shmem4py's is {wd!r}"


def test_constants_match_shmem4py():
    s = shmem_rt
    assert [a.value for a in s.AMO] == ["set", "inc", "add", "and", "or", "xor"]
    assert [o.value for o in s.OP] == ["and", "or", "xor", "max", "min", "sum", "prod"]
    assert isinstance(s.AMO_ADD, str) and isinstance(s.OP_SUM, str)
    assert [c.name for c in s.CMP] == ["EQ", "NE", "GT", "LE", "LT", "GE"]
    assert [t.name for t in s.THREAD] == ["SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE"]
    assert list(s.THREAD) == sorted(s.THREAD)
    assert [x.name for x in s.SIGNAL] == ["SET", "ADD"]
    assert [x.name for x in s.CTX] == ["PRIVATE", "SERIALIZED", "NOSTORE"]
    assert [x.name for x in s.MALLOC] == ["ATOMICS_REMOTE", "SIGNAL_REMOTE"]
    assert (s.MAJOR_VERSION, s.MINOR_VERSION) == (1, 5) and isinstance(s.VENDOR_STRING, str)
    for n in NAMES:
        if n.startswith(("AMO_", "OP_", "CMP_", "THREAD_", "SIGNAL_", "CTX_", "MALLOC_")) \
                and n not in ("CTX_DEFAULT", "CTX_INVALID"):
            cls, member = n.split("_", 1)
            assert getattr(s, n) is getattr(s, cls)[member], n
    assert not s.TEAM_INVALID and not s.CTX_INVALID
    assert set(s.__all__) >= set(NAMES) | {k for k in SIGNATURES if "." not in k}


# -- nothing private of amnet -----------------------------------------------------------------
PUBLIC_MODULES = {"amnet", "amnet.coll"}


def private_imports(source: str) -> list[str]:
    """Imports of amnet's private parts in ``source``: a module other than ``amnet`` and
    ``amnet.coll``, or a name starting with ``_`` taken from them."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "amnet" and a.name not in PUBLIC_MODULES:
                    bad.append(f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "amnet":
            if node.module not in PUBLIC_MODULES:
                bad.append(f"from {node.module} import ...")
            for a in node.names:
                sub = node.module == "amnet" and a.name in _AMNET_MODULES  # a module
                if a.name.startswith("_") or (sub and f"amnet.{a.name}" not in PUBLIC_MODULES):
                    bad.append(f"from {node.module} import {a.name}")
    return bad


_AMNET_MODULES = {p.stem for p in (ROOT / "amnet").iterdir()}  # amnet.core, amnet.pshm...


def test_shmem_rt_imports_nothing_private_of_amnet():
    files = sorted((ROOT / "shmem_rt").glob("*.py"))
    assert len(files) >= 8
    found = {f.name: private_imports(f.read_text()) for f in files}
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("line", [
    "from amnet.core._hot import EndpointBase",
    "import amnet.core._hot",
    "import amnet._config as c",
    "from amnet import _guard",
    "from amnet.core import _hot",
    "from amnet.coll import _algos",
    "from amnet.core import endpoint",
    "def f():\n    from amnet.pshm._network import x\n",
])
def test_the_private_import_check_catches(line):
    assert private_imports(line) != []


def test_the_private_import_check_allows_the_public_api():
    ok = "import amnet\nimport amnet.coll as C\nfrom amnet.coll import AND, ADD\n" \
         "from amnet import Port, Extension, RankError\nfrom . import _state\n"
    assert private_imports(ok) == []


# -- real jobs ----------------------------------------------------------------------------------
MAPPINGS = [
    pytest.param(dict(n=1), id="n1"),
    pytest.param(dict(n=2), id="n2"),
    pytest.param(dict(n=4), id="n4"),
    pytest.param(dict(n=4, threads_per_proc=2), id="n4-T2"),
    pytest.param(dict(n=4, nodes=2), id="n4-2nodes"),
]


@pytest.mark.parametrize("topo", MAPPINGS)
def test_every_routine_in_a_job(topo, marked):
    facts = amnet.run(shmem_jobs.suite, **topo, segment_size=SEGMENT, timeout=100)
    n = topo["n"]
    assert [f["rank"] for f in facts] == list(range(n))
    # fetch_inc on one word from every PE handed out every ticket once
    assert sorted(t for f in facts for t in f["tickets"]) == list(range(20 * n))
    assert all(f["heap_left"] == {} for f in facts)  # every allocation was freed
    nodes = topo.get("nodes", 1)
    per = n // nodes
    for f in facts:  # TEAM_SHARED is the PEs of my node
        first = f["rank"] // per * per
        assert f["node"] == list(range(first, first + per))


SCRIPT = """
import numpy as np
import shmem_rt as shmem
me, n = shmem.my_pe(), shmem.n_pes()
a = shmem.zeros(4, dtype="i8")
shmem.put(a, np.arange(4, dtype="i8") + 10 * me, (me + 1) % n)
shmem.barrier_all()
assert list(a) == list(np.arange(4) + 10 * ((me - 1) % n)), a
r = shmem.zeros(1, "i8")
shmem.reduce(r, shmem.full(1, me + 1, dtype="i8"), shmem.OP_SUM)
assert r[0] == n * (n + 1) // 2
print("ok", me, n, shmem.ptr(a, (me + 1) % n) is not None, flush=True)
shmem.finalize()
try:
    shmem.barrier_all()
except Exception as e:
    print("after finalize:", type(e).__name__, flush=True)
"""


@pytest.mark.parametrize("args", [["-n", "2"], ["-n", "4", "--nodes", "2"],
                                  ["-n", "4", "--threads-per-proc", "2", "--no-pshm"]],
                         ids=["n2", "n4-2nodes", "n4-T2-nopshm"])
def test_a_shmem4py_style_script_under_amnet_run(runner, args):
    # a script as shmem4py programs are written: no init, the first call starts the PE
    script = runner.script("prog.py", SCRIPT)
    out = runner(*args, script, timeout=100)
    assert out.returncode == 0, out.stderr
    n = int(args[1])
    lines = out.stdout.splitlines()
    # ptr of my right neighbour: a view on my node, except across processes without PSHM
    local = "--nodes" not in args and "--no-pshm" not in args
    for me in range(n):
        ok = f"ok {me} {n} {local or me % 2 == 0}"
        assert ok in lines, out.stdout
    assert lines.count("after finalize: InitError") == n


EXIT_SCRIPT = """
import shmem_rt as shmem
shmem.barrier_all()
if shmem.my_pe() == 1:
    shmem.global_exit(3)
shmem.barrier_all()  # the others wait here until the job ends
print("not reached", flush=True)
"""


def test_global_exit_ends_every_pe_with_its_status(runner):
    script = runner.script("exit.py", EXIT_SCRIPT)
    out = runner("-n", "4", "--nodes", "2", script, timeout=60)
    assert out.returncode == 3, (out.returncode, out.stderr)
    assert "not reached" not in out.stdout
    assert "shmem.global_exit(3)" in out.stderr


LOCK_SCRIPT = """
import sys
import shmem_rt as shmem
me, n = shmem.my_pe(), shmem.n_pes()
lock, ctr = shmem.new_lock(), shmem.zeros(1, "i8")
for i in range(int(sys.argv[1])):
    shmem.set_lock(lock)
    v = shmem.g(ctr, n - 1)
    shmem.p(ctr, v + 1, n - 1)
    shmem.clear_lock(lock)
shmem.barrier_all()
if me == n - 1:
    print("count", int(ctr[0]), flush=True)
"""


@pytest.mark.parametrize("args", [["-n", "8", "--nodes", "2", "--threads-per-proc", "2"],
                                  ["-n", "6", "--nodes", "1"]],
                         ids=["n8-2nodes-T2", "n6-1node"])
def test_a_contended_lock_with_more_pes_than_cores(runner, args):
    # more PEs than cores (amnet's block wait mode): waits sleep instead of polling, and a
    # PE on another node than the lock's home reads the lock between waits (it once hung)
    script = runner.script("lock.py", LOCK_SCRIPT)
    out = runner(*args, script, "15", timeout=100)
    assert out.returncode == 0, out.stderr
    assert f"count {15 * int(args[1])}" in out.stdout.splitlines()


NUDGE_SCRIPT = """
import numpy as np
import shmem_rt as shmem
from shmem_rt import _init, _state
st = _init.current()
me = shmem.my_pe()
assert st.nudging, "4 processes on this machine's cores should wait in block mode"
flag = shmem.zeros(1, "i8")
sleeping = np.ndarray((1,), np.int64, buffer=st.view(0), offset=_state.SLEEPING)
shmem.barrier_all()
for rnd in range(3):
    if me == 0:
        shmem.wait_until(flag, shmem.CMP_EQ, rnd + 1)  # sleeps: only PE 1's store ends it
    elif me == 1:
        while sleeping[0] == 0:  # PE 0 sleeps in its wait now
            pass
        shmem.atomic_set(flag, rnd + 1, 0)
    shmem.barrier_all()
if me == 0:
    print("nudged", st.nudged, flush=True)
"""


def test_a_store_wakes_a_sleeping_wait_of_another_process(runner):
    # more PEs than cores: a PE waiting on a word sleeps, and a store into its memory from
    # another process of the node sends it a nudge (else it would wake only when its slice
    # ends): PE 0 sleeps each round before PE 1 stores, so every round takes a nudge
    script = runner.script("nudge.py", NUDGE_SCRIPT)
    out = runner("-n", "4", script, timeout=100)
    assert out.returncode == 0, out.stderr
    nudged = [int(line.split()[1]) for line in out.stdout.splitlines()
              if line.startswith("nudged")]
    assert nudged and nudged[0] >= 3, out.stdout


SPIN_SCRIPT = """
import time
import numpy as np
import shmem_rt as shmem
me, n = shmem.my_pe(), shmem.n_pes()
last = n - 1  # on the other node than PE 0
flag, word, lock = shmem.zeros(1, "i8"), shmem.zeros(1, "i8"), shmem.zeros(1, "i8")
dst, src, sig = shmem.zeros(4, "i8"), shmem.array(np.arange(4, dtype="i8") + 7), shmem.new_signal()
mine = np.zeros(2, "i8")

def spin(name, writer, store, spinner, done):
    # the spinner loops on a call that completes in it until the writer's store lands
    if me == writer:
        time.sleep(0.05)
        store()
    elif me == spinner:
        while not done():
            pass
        print(f"{name} loop ended", flush=True)
    shmem.barrier_all()

def got(a, want):
    shmem.get(mine, a, me)
    return list(mine) == want

shmem.barrier_all()
spin("atomic_fetch", 0, lambda: shmem.atomic_set(flag, 1, last),
     last, lambda: shmem.atomic_fetch(flag, me) == 1)
spin("signal_fetch", 0, lambda: shmem.put_signal(dst, src, last, sig, 1, shmem.SIGNAL_SET),
     last, lambda: shmem.signal_fetch(sig) == 1 and list(dst) == [7, 8, 9, 10])
if me == last:  # a lock built on compare-and-swap, held by a PE of the other node
    assert shmem.atomic_compare_swap(lock, 0, 1, 0) == 0
shmem.barrier_all()
spin("compare_swap", last, lambda: shmem.atomic_set(lock, 0, 0),
     0, lambda: shmem.atomic_compare_swap(lock, 0, 1, me) == 0)
spin("g", 0, lambda: shmem.p(word, 5, last), last, lambda: shmem.g(word, me) == 5)
spin("get", 0, lambda: (shmem.put(dst[:2], np.array([3, 4], "i8"), last), shmem.quiet()),
     last, lambda: got(dst[:2], [3, 4]))
"""


@pytest.mark.parametrize("args", [["-n", "4", "--nodes", "2"],
                                  ["-n", "4", "--nodes", "2", "--threads-per-proc", "2"],
                                  ["-n", "2", "--nodes", "2", "--conduit", "tcp"]],
                         ids=["n4-2nodes", "n4-2nodes-T2", "n2-2nodes-tcp"])
def test_a_pe_spinning_on_calls_that_complete_locally_takes_in_other_nodes(runner, args):
    # OpenSHMEM programs wait by polling their own memory with atomics, signal_fetch or g;
    # what ends the loop is a message from another node, which the spinning PE must take in
    # (it used to hang: those calls complete in the caller without polling)
    script = runner.script("spin.py", SPIN_SCRIPT)
    out = runner(*args, "--timeout", "30", script, timeout=60)
    assert out.returncode == 0, out.stderr
    for what in ("atomic_fetch", "signal_fetch", "compare_swap", "g", "get"):
        assert f"{what} loop ended" in out.stdout.splitlines(), out.stdout


RC_SCRIPT = """
import sys
import amnet
import shmem_rt as shmem
from shmem_rt import rc

def err(fn):
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"

case = sys.argv[1]
if case == "threads":
    rc(threads=True, thread_level="single")  # the automatic start asks for SINGLE
elif case == "bad-level":
    rc.threads, rc.thread_level = True, "several"
    print("first call:", err(shmem.my_pe), flush=True)
    rc.thread_level = "funneled"
print("rc", rc.initialize, rc.threads, rc.thread_level, rc.finalize, flush=True)
if not rc.initialize:
    print("before init:", err(shmem.my_pe), flush=True)
    shmem.init()
me = shmem.my_pe()
print(f"PE {me} level {shmem.query_thread().name}", flush=True)
shmem.barrier_all()
amnet.finalize()  # the rank's end: shmem_rt finalizes the PE there when rc says so
if me == 0:
    print("after the rank's end:", err(shmem.barrier_all), flush=True)
"""


@pytest.mark.parametrize(("case", "env", "says"), [
    ("plain", {}, ["rc True False multiple None", "PE 0 level FUNNELED",
                   "after the rank's end: InitError: shmem_rt call after shmem.finalize() "
                   "on this PE"]),
    ("plain", {"SHMEM4PY_RC_INITIALIZE": "no", "SHMEM4PY_RC_FINALIZE": "off"},
     ["rc False False multiple False",
      "before init: InitError: shmem_rt call before shmem.init(): shmem_rt.rc.initialize is "
      "False (or SHMEM4PY_RC_INITIALIZE says so), so the program starts each PE with "
      "shmem.init() or shmem.init_thread()", "PE 0 level FUNNELED"]),
    ("plain", {"SHMEM4PY_RC_THREADS": "1", "SHMEM4PY_RC_THREAD_LEVEL": "serialized"},
     ["rc True True serialized None", "PE 0 level FUNNELED"]),
    ("threads", {}, ["rc True True single None", "PE 0 level SINGLE"]),
    ("bad-level", {}, ["first call: ValueError: shmem_rt.rc.thread_level must be one of "
                       "single, funneled, serialized, multiple, got 'several'",
                       "rc True True funneled None", "PE 0 level FUNNELED"]),
], ids=["defaults", "no-initialize-no-finalize", "env-threads", "threads-single", "bad-level"])
def test_rc_configures_how_a_pe_starts_and_ends(runner, case, env, says):
    # shmem4py's rc: the same options, defaults, checks and SHMEM4PY_RC_* variables
    out = runner("-n", "2", runner.script("rc.py", RC_SCRIPT), case, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for line in says:
        assert line in lines, out.stdout
    if env.get("SHMEM4PY_RC_FINALIZE") == "off":  # not finalized: it ended with its rank
        assert ("after the rank's end: InitError: shmem_rt call after amnet.finalize() on "
                "this PE") in lines, out.stdout


def test_rc_refuses_unknown_options_as_shmem4py():
    with pytest.raises(TypeError, match="unexpected argument 'bogus'"):
        shmem_rt.rc(bogus=1, initialize=False)
    assert shmem_rt.rc.initialize is True  # nothing was set
    with pytest.raises(TypeError, match="object has no attribute 'bogus'"):
        shmem_rt.rc.bogus = 1
    import importlib

    assert importlib.import_module("shmem_rt.rc") is shmem_rt.rc
    from shmem_rt._rc import Rc, from_environment

    r = Rc()
    from_environment(r, {"SHMEM4PY_RC_INITIALIZE": "N", "SHMEM4PY_RC_THREADS": "yes",
                         "SHMEM4PY_RC_THREAD_LEVEL": "Funneled", "SHMEM4PY_RC_FINALIZE": ""})
    assert (r.initialize, r.threads, r.thread_level, r.finalize) == (False, True, "funneled",
                                                                      None)
    assert r.finalizes() is False and Rc(finalize=True).finalizes() is True
