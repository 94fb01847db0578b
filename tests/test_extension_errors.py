"""A bug in a runtime's system handler (an extension's handler that raises) ends the job the
same way on every route -- in-line between rank-threads, the shared-memory queues (handler
run from C or from the Python dispatcher), the zmq, tcp and mpi conduits -- with the
traceback from the rank whose handler raised and a diagnosis naming the extension and the
handler. It once was refused and counted when it came from another process: the caller hung
in ``Handle.wait()`` and a fire-and-forget send exited 0. Refusing stays for what a handler
itself refuses (``port.refuse()``: tests/data/extjob.py). A handler whose signature cannot take
the five arguments is refused when the extension is made."""

from __future__ import annotations

from pathlib import Path

import pytest

import amnet

DATA = Path(__file__).parent / "data"
ROUTES = {
    "inline": ["-n", "2", "--threads-per-proc", "2"],
    "pshm": ["-n", "2"],
    "zmq": ["-n", "2", "--nodes", "2"],
    "tcp": ["-n", "2", "--nodes", "2", "--conduit", "tcp"],
    "mpi": ["-n", "2", "--nodes", "2", "--conduit", "mpi"],
}
CASES = [(r, m, w) for r in ROUTES for m, w in (("wait", "warm"), ("ff", "cold"))]
CASES += [("pshm", "wait", "cold"), ("zmq", "ff", "warm")]


@pytest.mark.parametrize(("route", "mode", "warmth"), CASES,
                         ids=[f"{r}-{m}-{w}" for r, m, w in CASES])
def test_a_raising_extension_handler_ends_the_job(runner, route, mode, warmth):
    out = runner("--timeout", "60", *ROUTES[route], str(DATA / "extboom.py"),
                 mode, warmth, timeout=120)
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "survived" not in out.stdout
    assert ("amnet: handler __main__.h_boom of extension boomext on rank 1 (AM from rank 0) "
            "raised ValueError: boom") in out.stderr, out.stderr
    assert "in h_boom\n    raise ValueError(" in out.stderr  # the traceback, from rank 1
    diagnosis = [ln for ln in out.stderr.splitlines() if ln.startswith("amnet-run: ")]
    assert len(diagnosis) == 1, out.stderr
    assert diagnosis[0].startswith("amnet-run: rank 1 ("), diagnosis
    assert diagnosis[0].endswith(", in handler __main__.h_boom of extension boomext (AM from "
                                 "rank 0), raised ValueError: boom " + ("1" if mode == "wait" else "7")
                                 + " in a runtime's handler on rank 1"), diagnosis
    assert "timed out" not in out.stderr


def h_no_is_reply(port, src, args, payload):
    pass


def h_token_style(token, a):
    pass


@pytest.mark.parametrize("h", [h_no_is_reply, h_token_style, lambda: None])
def test_an_extension_handler_of_the_wrong_signature_is_refused_when_made(h):
    with pytest.raises(TypeError, match=r"extension bad: handler .* cannot be called as "
                                        r"h\(port, src, args, payload, is_reply\)"):
        amnet.Extension("bad", [h])


def test_a_handler_taking_any_arguments_is_accepted():
    def h_any(*args, **kwargs):
        pass

    assert amnet.Extension("ok", [h_any, print]).handlers == (h_any, print)
