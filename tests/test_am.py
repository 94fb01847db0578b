"""The core AM API, in the spirit of GASNet's testcore1-5, testam, testsmall/testlarge and
testbarrier: Short/Medium/Long request -> reply with every argument count, payload sizes and
all pairs of ranks, FIFO per pair, handler tables, the restricted handler context, handler
failures, bad input, barriers, progress modes and oversubscription.

Most checks run inside one job per topology (``amjobs.core``, sections of a module-scoped
fixture); each test below asserts one section of what the ranks saw. The jobs live in
``tests/data/amjobs.py``.
"""

from __future__ import annotations

import base64
import functools
import os
import pickle
import socket
import statistics
import subprocess
import sys
import time

import amjobs
import pytest
from conftest import DATA

import amnet

N4 = {"n": 4, "nodes": 2}  # 4 processes, 2 simulated nodes
N4T2 = {"n": 4, "nodes": 2, "threads_per_proc": 2}  # 2 processes of 2 rank-threads, 2 nodes
# the mpi conduit between nodes (MPICH's network path, tests/conftest.py), with threads
N4T2MPI = {**N4T2, "conduit": "mpi"}
TOPOS = {"n4-nodes2": N4, "n4-nodes2-T2": N4T2, "n4-nodes2-T2-mpi": N4T2MPI}
HOST = socket.gethostname()


def names(fns) -> list[str]:
    return [f"amjobs.{f.__name__}" for f in fns]


# -- the core job, once per topology ---------------------------------------------------------
CORE_JOBS = {  # the default max_medium once, small ones elsewhere to keep it fast
    "n4-nodes2": dict(N4, segment_size="2M"),
    "n4-nodes2-T2": dict(N4T2, segment_size="2M", max_medium=4096),
    "n1": dict(n=1, segment_size="2M", max_medium=4096),
    # the shared-memory network (docs/design.md §6): each backing, PSHM off, T = 1, 2, 4
    # with processes sharing a node, the smallest queue depth, forced thread safety
    "n4-1node-sysv": dict(n=4, nodes=1, segment_size="2M", max_medium=4096,
                          pshm_backing="sysv"),
    "n4-nodes2-file": dict(N4, segment_size="2M", max_medium=4096, pshm_backing="file"),
    "n4-nodes2-nopshm": dict(N4, segment_size="2M", max_medium=4096, pshm=False),
    "n8-1node-T4": dict(n=8, nodes=1, threads_per_proc=4, segment_size="2M",
                        max_medium=4096),
    "n4-1node-T2-depth2": dict(n=4, nodes=1, threads_per_proc=2, segment_size="2M",
                               max_medium=4096, pshm_network_depth=2),
    "n2-1node-ts": dict(n=2, nodes=1, segment_size="2M", thread_safe="1"),
    # the tcp conduit between nodes, with threads (senders and drainers of one process)
    "n4-nodes2-tcp": dict(N4, segment_size="2M", conduit="tcp"),
    "n4-nodes2-T2-tcp-nopshm": dict(N4T2, segment_size="2M", max_medium=4096, conduit="tcp",
                                    pshm=False),
    "n4-nodes2-T2-mpi": dict(N4T2MPI, segment_size="2M", max_medium=4096),
}


@pytest.fixture(scope="module", params=list(CORE_JOBS))
def core(request, mark):
    """What every rank of ``amjobs.core`` returned (a list by rank)."""
    got = amnet.run(amjobs.core, timeout=120, **CORE_JOBS[request.param])
    assert [g["rank"] for g in got] == list(range(len(got)))
    return got


def check_echo(res: list[dict]) -> None:
    n = len(res)
    for r in res:
        mm = r["max_medium"]
        msgs = amnet.MAX_ARGS + 1  # argument counts 0..16
        want = {"short": msgs * n, "medium": msgs * len(amjobs.medium_sizes(mm)) * n,
                "long": msgs * len(amjobs.long_sizes(mm)) * n}
        e = r["echo"]
        assert e["problems"] == [], f"rank {r['rank']}"
        assert e["checked"] == want  # replies checked: args, sizes, checksums, source
        assert e["seen"] == want  # requests that reached my handlers, from every rank


def check_fifo(res: list[dict]) -> None:
    n = len(res)
    for r in res:
        f = r["fifo"]
        assert f["seen"] == f["expected"] == 4 * 150 * n
        streams = ("short request", "medium request", "short reply", "medium reply")
        assert f["last"] == {f"{st}|{src}": 150 for st in streams for src in range(n)}


def check_tables(res: list[dict]) -> None:
    n = len(res)
    core_names = names(amjobs.CORE)
    for r in res:
        t = r["tables"]
        rank = r["rank"]
        assert t["unregistered_fn"][:1] == ("HandlerNotRegistered",)
        assert "'amjobs.h_unregistered' is not a registered handler" in t["unregistered_fn"][1]
        assert t["unregistered_name"][:1] == ("HandlerNotRegistered",)
        assert "'amjobs.h_nope'" in t["unregistered_name"][1]
        assert t["extra_before"][:1] == ("HandlerNotRegistered",)
        for key, declared, sent in (("short_as_medium", "short", "medium"),
                                    ("short_as_long", "short", "long"),
                                    ("medium_as_short", "medium", "short")):
            kind, msg, is_type_error = t[key]
            assert kind == "HandlerCategoryError" and is_type_error
            assert f"declared {declared} but was sent as a {sent} AM" in msg
        assert t["nargs_1_of_2"] == ("AMArgumentError", "handler amjobs.h_decl_med2 is "
                                     "declared with 2 arguments, 1 given", True)
        assert t["nargs_3_of_2"][:1] == ("AMArgumentError",)
        assert "3 given" in t["nargs_3_of_2"][1]
        assert t["runs_during_errors"] == 0  # refused before sending: no handler ran anywhere
        assert t["declared_ok"] == [(5,), (6, 7), (8,)]
        # the declaration is checked on replies too
        assert [(w, what, out[0]) for w, what, out in t["decl_reply_errors"]] == [
            ("decl_med2", "reply_short to a medium handler", "HandlerCategoryError"),
            ("decl_med2", "reply_medium with 1 of 2 args", "AMArgumentError")]
        assert t["names"] == core_names
        assert t["names_after"] == core_names + names(amjobs.EXTRA)
        assert t["extra_reply"] == ("extra", (rank + 1) % n, 0, 0, (10 * rank + 1,), False)
        assert t["register_again"][:1] == ("ValueError",)
        assert "already registered" in t["register_again"][1]


REQ_PROBES = ["second reply_short", "second reply_medium", "second reply_long",
              "request_short", "request_medium", "request_long", "ep.poll", "ep.wait_until",
              "ep.barrier", "ep.barrier_notify", "ep.put", "ep.get", "ep.put_nb", "ep.fence",
              "ep.register_handlers"]
REP_PROBES = ["reply_short", "reply_medium", "request_short", "ep.poll", "ep.wait_until"]


def check_context(res: list[dict]) -> None:
    n = len(res)
    for r in res:
        c = r["context"]
        probes = c["probes"]
        req = [p for p in probes if p[0] == "request handler" and p[1] in REQ_PROBES]
        rep = [p for p in probes if p[0] == "reply handler"]
        # every rank's request handler ran here once (n times 15 probes), and my n replies
        assert sorted(p[1] for p in req) == sorted(REQ_PROBES * n)
        assert sorted(p[1] for p in rep) == sorted(REP_PROBES * n)
        for where, what, (kind, msg) in req + rep:
            assert kind == "AMContextError", (where, what, kind, msg)
            assert "amjobs.h_ctx_" in msg  # names the handler
        for _, what, (_, msg) in req:
            if what.startswith("second reply"):
                assert "already replied" in msg
        for *_, (_, msg) in rep:
            assert "reply handler amjobs.h_ctx_rep" in msg
        # handle.wait() in rank 0's handler, on a handle that was still pending
        waits = [p for p in probes if p[1] in ("handle pending", "handle.wait")]
        if c["direct"]:
            # the last rank is on my node with PSHM on: a put to it is a direct copy,
            # complete on return (docs/design.md §5), so no handle can be left pending
            assert waits == []
            assert c["local_put_done"] is (True if r["rank"] == 0 else None)
        elif r["rank"] == 0 and n > 1:
            assert waits[0][:2] == ("request handler", "handle pending") and len(waits) == 2
            # on a loaded machine the put's ack may come back before the handler runs: a
            # done handle's wait() returns at once; a pending one must refuse
            if waits[0][2] == ("pending", ""):
                assert waits[1][2][0] == "AMContextError"
                assert "put handle.wait() inside request handler amjobs.h_wait_handle" in \
                    waits[1][2][1]
        else:
            assert waits == []
        assert len(probes) == len(REQ_PROBES) * n + len(REP_PROBES) * n + len(waits)
        # a reply with a token kept past its handler
        assert c["late_reply"][0] == "AMContextError"
        assert "after handler amjobs.h_ctx_req returned" in c["late_reply"][1]
        assert c["kept_is_request"] is True
        # exactly one reply per request: the refused second replies never went out
        assert c["ctx_replies"] == [100 + d for d in range(n)]
        # and nothing the handlers tried to send ran anywhere: n ctx requests, n ctx replies,
        # the flush (n pings in, n pongs back), and on rank 0 h_wait_handle and its pong
        assert c["runs"] == 4 * n + (2 if waits else 0)


def check_handler_errors(res: list[dict]) -> None:
    n = len(res)
    for r in res:
        me = r["rank"]
        h = r["handler_errors"]
        want = [("KeyError", repr(f"reply handler fails on rank {me} (tag {1000 * me + d})"),
                 "amjobs.h_raise_rep", d) for d in range(n)]
        want += [("ValueError", f"request handler fails on rank {me} (tag {1000 * s + me})",
                  "amjobs.h_raise_req", s) for s in range(n)]
        assert h["errors"] == sorted(want, key=lambda g: (g[2], g[3]))
        assert h["cb_after"] is None


def expected_bad_input(n: int, max_medium: int, seg: int) -> dict[str, tuple[str, str]]:
    """What each bad call must raise: (type name, text in the message)."""
    want: dict[str, tuple[str, str]] = {}
    for cat in ("short", "medium", "long"):
        for bad in (-1, n, n + 100):
            want[f"{cat} dest {bad!r}"] = ("RankError", f"rank {bad} is out of range")
        for bad, tname in (("1", "str"), (1.0, "float"), (None, "NoneType")):
            want[f"{cat} dest {bad!r}"] = ("RankError", f"must be an int, got {tname}")
    want["medium max+1"] = ("PayloadTooLarge", f"{max_medium + 1} bytes is over "
                            f"ep.max_medium = {max_medium}")
    want["medium 4*max"] = ("PayloadTooLarge", str(max_medium))
    seg_text = f"segment of {seg} bytes"
    for what in ("long offset -1", "long seg-1 +2", "long seg +1", "long seg+1 +0",
                 "long whole+1"):
        want[what] = ("SegmentBoundsError", seg_text)
    want["17 args"] = ("AMArgumentError", "17 AM arguments given; at most amnet.MAX_ARGS")
    want["17 args medium"] = want["17 args"]
    want["str arg"] = ("AMArgumentError", "AM argument 1 must be an int, got str")
    want["float arg"] = ("AMArgumentError", "must be an int, got float")
    want["None arg"] = ("AMArgumentError", "must be an int, got NoneType")
    want["2**63 arg"] = ("AMArgumentError", "does not fit in int64")
    want["-2**63-1 arg"] = ("AMArgumentError", "does not fit in int64")
    for what, tname in (("str payload", "str"), ("int payload", "int"),
                        ("None payload", "NoneType"), ("list payload long", "list")):
        want[what] = ("TypeError", f"must be bytes-like (bytes, bytearray, memoryview or a "
                      f"numpy array), got {tname}")
    return want


def check_bad_input(res: list[dict], seg: int) -> None:
    n = len(res)
    for r in res:
        b = r["bad_input"]
        want = expected_bad_input(n, r["max_medium"], seg)
        got = {what: (kind, msg) for what, kind, msg, _, _ in b["errors"]}
        assert set(got) == set(want)
        for what, (kind, text) in want.items():
            assert got[what][0] == kind and text in got[what][1], (what, got[what])
        for what, kind, _, is_type_error, is_amnet in b["errors"]:
            assert is_amnet or kind == "TypeError", what  # amnet's own errors...
            if kind in ("AMArgumentError", "TypeError"):
                assert is_type_error, what  # ... and TypeError where the design says so
        assert b["runs_bad"] == 0  # nothing was delivered anywhere
        # bad replies are refused inside a handler; its good reply after them arrives, once
        assert [(what, out[0]) for _, what, out in b["bad_replies"]] == [
            ("17 args", "AMArgumentError"), ("str arg", "AMArgumentError"),
            ("arg 2**63", "AMArgumentError"), ("medium over max", "PayloadTooLarge"),
            ("long past segment", "SegmentBoundsError"),
            ("unregistered", "HandlerNotRegistered"), ("str payload", "TypeError")]
        assert b["replies"] == [("short", (r["rank"] + 1) % n, 0, 0, (77,), False)]


def check_barriers(res: list[dict]) -> None:
    n = len(res)
    texts = {}
    for r in res:
        b = r["barriers"]
        assert b["phase_short"] == [] and b["phases"] == 60
        if n > 1 and r["rank"] != 0:  # rank 0 had not notified yet
            assert b["split_first_try"] is False
            assert b["split_tries"] > 1
        assert b["nesting"] == [("wait without notify", "BarrierStateError"),
                                ("try without notify", "BarrierStateError"),
                                ("double notify", "BarrierStateError")]
        assert b["wait_until_false"] is False and b["wait_until_s"] >= 0.04
        named = b["named"]
        if n == 1:
            assert named == ["ok"] * 6 and b["split_named"] == "ok"
            continue
        # same name; anonymous with named; "left"/"right"; 7/8; then barriers work again
        assert named[:2] == ["ok", "ok"] and named[4:] == ["ok", "ok"]
        me, last = r["rank"], n - 1
        # each rank says what it passed, then the lowest rank that passed the other name
        for i, (text, mine, other) in enumerate((
                (named[2], "'left'" if me == 0 else "'right'",
                 "rank 1 passed 'right'" if me == 0 else "rank 0 passed 'left'"),
                (named[3], "8" if me == last else "7",
                 "rank 0 passed 7" if me == last else f"rank {last} passed 8"),
                (b["split_named"], "'odd'" if me == last else "'even'",
                 "rank 0 passed 'even'" if me == last else f"rank {last} passed 'odd'"))):
            head, _, tail = text.partition(": this rank ")
            assert tail == f"({me}) passed {mine}, but {other}", text
            texts.setdefault(i, set()).add(head)
    # every rank raised in the same barrier
    assert all(len(t) == 1 and t.pop().startswith("BarrierMismatch: names differ in barrier #")
               for t in texts.values())


def check_clean(res: list[dict]) -> None:
    for r in res:
        assert r["bad"] == [], f"rank {r['rank']}"  # what the handlers found wrong
        assert r["refused"] == 0  # no malformed message was ever received


def test_echo_every_category_argument_count_and_size(core):
    check_echo(core)


def test_fifo_per_pair(core):
    check_fifo(core)


def test_handler_tables_declarations_and_late_registration(core):
    check_tables(core)


def test_restricted_handler_context(core):
    check_context(core)


def test_on_handler_error_gets_exception_name_and_source(core):
    check_handler_errors(core)


def test_bad_input_is_refused_before_sending(core):
    check_bad_input(core, 2 << 20)


def test_barriers(core):
    check_barriers(core)


def test_handlers_found_nothing_wrong(core):
    check_clean(core)


def test_core_job_ran_on_the_network_asked_for(core, request):
    """The configuration of each core job took effect: node-local traffic between processes
    went through the shared-memory network (with the backing and depth asked for) unless PSHM
    is off or a node has one process."""
    cfg = CORE_JOBS[request.node.callspec.params["core"]]
    n, nodes, t = cfg["n"], cfg.get("nodes", 1), cfg.get("threads_per_proc", 1)
    procs_per_node = n // t // nodes
    for r in core:
        if not cfg.get("pshm", True) or procs_per_node == 1:
            assert r["pshm"] is None
        else:
            assert r["pshm"] == (cfg.get("pshm_backing", "posix"),
                                 cfg.get("pshm_network_depth", 8), procs_per_node, True)
        assert r["thread_safe"] == cfg.get("thread_safe", "auto")


def test_singleton_runs_the_core_job(tmp_path):
    """``python app.py`` (no launcher): the same checks with one rank, max_medium = 512."""
    script = tmp_path / "single.py"
    script.write_text(
        "import base64, pickle\n"
        "import amjobs\n"
        "import amnet\n"
        "ep = amnet.init()\n"
        "print('RESULT', base64.b64encode(pickle.dumps([amjobs.core(ep)])).decode())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMNET_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(DATA), env.get("PYTHONPATH")) if p),
               AMNET_SEGMENT_SIZE="2M", AMNET_MAX_MEDIUM="512")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    res = pickle.loads(base64.b64decode(line.split()[1]))
    assert res[0]["max_medium"] == 512 and res[0]["size"] == 1
    for check in (check_echo, check_fifo, check_tables, check_context, check_handler_errors,
                  check_barriers, check_clean):
        check(res)
    check_bad_input(res, 2 << 20)


def test_bool_is_not_an_am_argument(mark):
    """A bool is refused as a rank; as an AM argument it must be refused too (the engine's
    own message says "AM argument i must be an int, got bool")."""
    got = amnet.run(amjobs.bool_args, **N4)
    assert [r["outcomes"] for r in got] == \
        [[("bool arg", "AMArgumentError"), ("bool dest", "RankError")]] * 4


# -- handler tables: init / register_handlers mismatches -------------------------------------
MISMATCH = {  # variant: (first differing rank, position, rank 0's name, its name)
    "names1_order3": (1, 1, "'amjobs.h_b'", "'amjobs.h_c'"),
    "order3": (3, 0, "'amjobs.h_a'", "'amjobs.h_b'"),
    "longer2": (2, 2, "'(nothing)'", "'amjobs.h_c'"),
}


def mismatch_text(what: str, variant: str, before: int = 0) -> str:
    """``before``: handlers already in the table (positions count from the table's start)."""
    rank, pos, a, b = MISMATCH[variant]
    return (f"{what}: rank {rank} registered a different handler table than rank 0: at "
            f"position {before + pos} rank 0 has {a} and rank {rank} has {b}")


@pytest.mark.parametrize("variant", list(MISMATCH))
@pytest.mark.parametrize("topo", list(TOPOS))
def test_register_handlers_mismatch_fails_every_rank(mark, topo, variant):
    got = amnet.run(functools.partial(amjobs.register_mismatch, variant=variant),
                    **TOPOS[topo], timeout=60)
    text = mismatch_text("ep.register_handlers()", variant, before=2)  # h_ping, h_pong
    for err, pongs in got:
        assert err is not None and err.startswith(text)
        assert pongs == 4  # the job goes on with the handlers every rank agrees on


def test_tables_stay_consistent_after_a_caught_mismatch(mark):
    """Rank 2 registered one handler more than the others (HandlerMismatch, caught). A later
    registration that every rank makes alike must not leave rank 2's indices shifted: either
    it is refused, or every AM runs the handler its sender named (the failed registration
    is rolled back on every rank)."""
    got = amnet.run(functools.partial(amjobs.register_after_mismatch, variant="longer2"),
                    **N4, timeout=60)
    if got[0][0] == "refused":
        assert all(g[0] == "refused" for g in got), got
        return
    for r, g in enumerate(got):
        assert g == ("ran", [0, 1, 2, 3], [("extra", s) for s in range(4)]), (r, g)


@pytest.mark.parametrize("variant", ["names1_order3", "order3"])
def test_init_handler_mismatch_fails_every_rank(runner, variant):
    """amnet.init(handlers=...) in a script; ranks 1 and 3 are the second rank-threads of
    their processes (documented thread names), so they can differ before init."""
    script = runner.script("mismatch.py", (
        "import sys, threading\n"
        "import amjobs\n"
        "import amnet\n"
        "me = threading.current_thread().name\n"
        "try:\n"
        "    ep = amnet.init(handlers=amjobs.mismatch_table(sys.argv[1], me))\n"
        "except amnet.HandlerMismatch as e:\n"
        "    print(f'HandlerMismatch: {e}', flush=True)\n"
        "else:\n"
        "    print('no error', flush=True)\n"))
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", "2", "--label", script,
                 variant)
    assert out.returncode == 0, out.stderr
    text = mismatch_text("amnet.init()", variant)
    lines = sorted(out.stdout.splitlines())
    assert len(lines) == 4
    for r, line in enumerate(lines):
        assert line.startswith(f"[{r}] HandlerMismatch: {text}"), line


# -- handler failures ------------------------------------------------------------------------
@pytest.mark.parametrize("topo", list(TOPOS))
def test_exception_in_handler_aborts_the_job_naming_rank_and_handler(mark, topo):
    with pytest.raises(ValueError, match="boom 7 in the handler on rank 2") as info:
        amnet.run(amjobs.raise_in_handler, **TOPOS[topo], timeout=60)
    notes = info.value.__notes__
    assert "(handler amjobs.h_boom on rank 2 (AM from rank 1))" in notes
    assert any(n.startswith("raised on rank 2 (node 1, proc ") for n in notes), notes
    assert isinstance(info.value.__cause__, amnet.RemoteTraceback)
    assert "in h_boom" in info.value.__cause__.tb


@pytest.mark.parametrize("topo", ["n4-nodes2", "n4-nodes2-T2"])
def test_exception_in_handler_cli_diagnosis(runner, topo):
    script = runner.script("boom.py", (
        "import amjobs\n"
        "import amnet\n"
        "ep = amnet.init(handlers=amjobs.CORE)\n"
        "print(amjobs.raise_in_handler(ep), flush=True)\n"))
    args = ["-n", "4", "--nodes", "2"]
    if topo.endswith("T2"):
        args += ["--threads-per-proc", "2"]
    out = runner(*args, script)
    assert out.returncode == 1, out.stderr
    assert "survived" not in out.stdout
    assert ("amnet: handler amjobs.h_boom on rank 2 (AM from rank 1) raised ValueError: "
            "boom 7 in the handler on rank 2") in out.stderr
    assert 'in h_boom\n    raise ValueError(f"boom {tag}' in out.stderr  # the traceback
    diagnosis = [ln for ln in out.stderr.splitlines() if ln.startswith("amnet-run: ")]
    assert len(diagnosis) == 1
    proc = 2 if topo == "n4-nodes2" else 1
    assert diagnosis[0].startswith(f"amnet-run: rank 2 (node 1, proc {proc}")
    assert diagnosis[0].endswith("raised ValueError: boom 7 in the handler on rank 2")


# -- a collective call keeps serving AMs ------------------------------------------------------
def test_register_handlers_serves_ams_while_it_waits(mark):
    """Rank 0 waits in the register_handlers collective while rank 1 (another process) sends
    it a request and waits for the reply before joining: rank 0 must make AM progress
    (docs/design.md §4: every amnet call polls), or the job deadlocks."""
    got = amnet.run(amjobs.register_while_peer_waits, n=2, timeout=60)
    replied, seconds = got[1]
    assert replied, f"rank 0 did not reply in {seconds:.1f} s while in register_handlers"


# -- progress --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [{"wait_mode": "spin"}, {"wait_mode": "block"},
                                  {"progress_thread": True}], ids=["spin", "block", "thread"])
@pytest.mark.parametrize("topo", list(TOPOS))
def test_pingpong_in_every_progress_mode(mark, topo, mode):
    got = amnet.run(functools.partial(amjobs.pingpong, rounds=20), **TOPOS[topo], **mode,
                    timeout=60)
    for g in got:
        assert g["bad"] == [] and g["served"] == 20
        assert g["wait_mode"] == mode.get("wait_mode", "auto")
        assert g["progress_thread"] is mode.get("progress_thread", False)


@pytest.mark.parametrize("how", ["busy", "sleep"])
@pytest.mark.parametrize("topo", list(TOPOS))
def test_progress_thread_runs_handlers_while_ranks_compute(mark, topo, how):
    """The target's process computes for 1 s without calling amnet; a request sent 0.15 s in
    gets its reply at once from the progress thread (without it: after ~0.85 s, see the
    control below)."""
    got = amnet.run(functools.partial(amjobs.computing_peer, how=how), **TOPOS[topo],
                    progress_thread=True, timeout=60)
    assert got[-1]["target_served"] == 1
    assert got[0]["rtt"] < 0.4


def test_without_progress_thread_a_computing_rank_answers_late(mark):
    """The control of the test above: it measures what it claims to."""
    got = amnet.run(functools.partial(amjobs.computing_peer, how="sleep"), **N4,
                    progress_thread=False, timeout=60)
    assert got[-1]["target_served"] == 1
    assert got[0]["rtt"] > 0.6


@pytest.mark.parametrize("topo", list(TOPOS))
def test_net_latency_delays_only_inter_node_messages(mark, topo):
    got = amnet.run(amjobs.latency, **TOPOS[topo], net_latency_us=2000, timeout=60)
    same, cross = got[0]["same"], got[0]["cross"]
    # request and reply each cross the network: >= 2 x 2 ms (margin for clock granularity)
    assert min(cross) >= 3.5e-3, cross
    assert statistics.median(same) < 1.5e-3, same
    assert statistics.median(cross) - statistics.median(same) > 2.5e-3


def test_oversubscribed_ring_completes_quickly(mark):
    """8 ranks on this host (2 cores here): auto blocks instead of spinning, so a ring of
    ping-pongs is quick and the ranks that wait leave the cores to the one that computes."""
    import time

    t0 = time.monotonic()
    got = amnet.run(amjobs.oversubscribed, n=8, timeout=60)
    assert time.monotonic() - t0 < 20
    for g in got:
        assert g["bad"] == [] and g["served"] == 100 and g["wait_mode"] == "auto"
    if len(os.sched_getaffinity(0)) < 8:
        # while rank 0 computes, the 7 waiting ranks sleep: spinning, they would take about
        # 1.5x its wall time of CPU on 2 cores (blocking: well under 1%)
        waiting = sum(g["wait_cpu"] for g in got[1:])
        assert waiting < 0.25 * got[0]["work"], (waiting, got[0]["work"])


KILLED_PEER = """
import os, signal, amnet
got = []
def pong(tok): got.append(1)
def ping(tok): os.kill(os.getpid(), signal.SIGKILL)   # the target dies inside the handler
ep = amnet.init(handlers=[ping, pong])
if ep.rank == 0:
    ep.request_short(ep.size - 1, ping)
    try:
        ep.wait_until(lambda: got)
    except amnet.JobAborted as e:
        print("rank 0 got JobAborted:", e, flush=True)
        raise
else:
    ep.barrier()
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_kill_9_of_a_peer_ends_ranks_waiting_for_its_reply(runner, threads):
    """A rank waiting in ep.wait_until for a reply from a rank that was SIGKILLed gets
    JobAborted; the job ends at once with the diagnosis and leaves nothing behind (the runner
    checks the process table)."""
    script = runner.script("killed.py", KILLED_PEER)
    t0 = time.monotonic()
    out = runner("-n", "4", "--nodes", "2", "--threads-per-proc", threads, script)
    assert time.monotonic() - t0 < 10
    assert out.returncode == 137, out
    assert "killed by signal 9 (SIGKILL)" in out.stderr
    who = "rank 3 (node 1, proc 3" if threads == "1" else "ranks 2-3 (node 1, proc 1"
    assert f"rank 0 got JobAborted: {who}" in out.stdout


# -- regressions from the review of the core ---------------------------------------------------
def test_bootstrap_refused_in_handler_takes_no_step(mark):
    assert amnet.run(amjobs.bootstrap_in_handler_changes_nothing, **N4, timeout=60) == \
        [[], ["AMContextError"], [], []]


def test_rpc_system_exit_and_oversized_result_come_back_as_errors(mark):
    got = amnet.run(amjobs.rpc_edge_cases, **N4, segment_size=4 << 20, timeout=60)
    # SystemExit is not re-raised as itself in the caller (it would end the caller's
    # script): it comes back as an RPCError naming it
    assert got[0] == {"exit": "RPCError", "big": "PayloadTooLarge", "after": 5}


def test_endpoint_refuses_communication_after_finalize(mark):
    got = amnet.run(amjobs.use_after_finalize, n=2, timeout=60)
    assert got == [{k: "InitError" for k in
                    ("request_short", "poll", "fence", "wait_until", "put")}] * 2


def test_wait_mode_says_what_auto_resolved_to(mark):
    assert amnet.run(amjobs.wait_mode_of, n=2, wait_mode="spin", timeout=60) == ["spin"] * 2
    assert amnet.run(amjobs.wait_mode_of, n=2, wait_mode="block", timeout=60) == ["block"] * 2
    cores = len(os.sched_getaffinity(0))
    got = amnet.run(amjobs.wait_mode_of, n=cores + 1, timeout=60)  # more ranks than cores
    assert got == ["block"] * (cores + 1)
    if cores >= 2:
        assert amnet.run(amjobs.wait_mode_of, n=2, timeout=60) == ["spin-then-block"] * 2
