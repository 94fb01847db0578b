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
    tag = "1" if mode == "wait" else "7"  # the op id, or the fire-and-forget argument
    assert diagnosis[0].endswith(", in handler __main__.h_boom of extension boomext (AM from "
                                 f"rank 0), raised ValueError: boom {tag} in a runtime's "
                                 "handler on rank 1"), diagnosis
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


def _send_too_much(ep):
    port = ep.port("vis")  # any extension's port: the checks come before anything is sent
    out = {"max_payload": port.max_payload, "max_medium": port.max_medium}
    for name, payload in (("big", bytes(port.max_payload + 1)), ("str", "text")):
        try:
            port.send(ep.rank, 0, (1,), payload)
        except (amnet.PayloadTooLarge, TypeError) as e:
            out[name] = f"{type(e).__name__}: {e}"
    out["refused"] = ep.statistics().refused
    return out


def test_port_send_refuses_a_payload_over_max_payload_before_sending():
    (got,) = amnet.run(_send_too_much, n=1, segment_size="1M", timeout=60)
    assert got["max_payload"] == 16 << 20 and got["max_medium"] < got["max_payload"]
    assert got["big"] == (f"PayloadTooLarge: extension vis: a payload of {(16 << 20) + 1} "
                          f"bytes is over port.max_payload = {16 << 20} bytes"), got
    assert got["str"].startswith("TypeError: extension vis: a payload must be bytes-like"), got
    assert got["refused"] == 0
