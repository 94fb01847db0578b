"""The docs' shell sessions and output blocks are what the code prints today.

Runs ``docs/regen.py``'s check on every doc: each session and output block is run again and
compared with the doc, normalized (host name, timings, ports, pids, temporary paths, and
what a block's own markers say). A failure names the doc and the block, shows the diff, and
says how to rewrite the stale blocks.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _load_regen():
    spec = importlib.util.spec_from_file_location("amnet_docs_regen", ROOT / "docs" / "regen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


regen = _load_regen()


@pytest.mark.parametrize("doc", regen.DOCS, ids=lambda p: p.name)
def test_doc_sessions_are_current(doc, mark):
    parsed = regen.parse(doc)
    with tempfile.TemporaryDirectory(prefix="docs-regen-") as tmp:
        results = regen.run_doc(parsed, Path(tmp))
    stale = [r for r in results if r.stale]
    if stale:
        pytest.fail(
            f"{len(stale)} block(s) of {doc.relative_to(ROOT)} no longer match what the code "
            f"prints; check the new output, then run `python docs/regen.py --write "
            f"{doc.relative_to(ROOT)}` to rewrite them:\n\n" + regen.report(stale),
            pytrace=False)


def test_every_fenced_output_block_is_made_by_a_command():
    """A fenced block without a language must be a session or say how it is made."""
    doc = ROOT / "docs" / "x.md"
    with pytest.raises(regen.DocError, match="neither a session"):
        regen.parse(doc, "text\n\n```\nsome output\n```\n")
    parsed = regen.parse(doc, "<!-- output: echo hi -->\n```\nhi\n```\n\n```text\ndiagram\n```\n")
    assert [b.kind for b in parsed.blocks] == ["output", "other"]
    with pytest.raises(regen.DocError, match="right before"):
        regen.parse(doc, "<!-- unordered -->\nA paragraph.\n\n```\n$ echo hi\nhi\n```\n")


def test_normalization_is_narrow():
    def same(a: str, b: str, **kw) -> bool:
        return regen.normalize(a, **kw) == regen.normalize(b, **kw)

    host = sorted(regen._HOSTS)[-1]
    assert same("get took 447 ms, round trip 24 us", "get took 6 ms, round trip 4183 us")
    assert same("real\t0m1.183s", "real\t0m2.001s")
    assert same("tcp://127.0.0.1:35323 pid 3141", "tcp://127.0.0.1:42471 pid 7")
    assert same(f"rank 0 (node 0, proc 0, host {host})", "rank 0 (node 0, proc 0, host vm)")
    assert same('File "/tmp/a/x.py", line 5', 'File "/tmp/docs-regen-1/ug/x.py", line 5')
    assert same('File "/tmp/a/x.py", line 5', 'File "/tmp/a/x.py", line 6') is False
    assert same('File "/usr/lib/amnet/core/e.py", line 5', 'File "/r/amnet/core/e.py", line 9')
    assert same("refused 5 connections", "refused 6 connections") is False
    assert same("exit status 1", "exit status 2") is False
    assert same("the job goes on", "the job went on") is False
    assert same("b\na", "a\nb") is False
    assert same("b\na", "a\nb", unordered=True)
    assert same("sent=3 received=4", "sent=3 received=5", extra=[r"received=(\d+)"])
    assert same("sent=3 received=4", "sent=2 received=4", extra=[r"received=(\d+)"]) is False
