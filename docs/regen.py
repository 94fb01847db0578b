#!/usr/bin/env python3
"""Regenerate and check the shell sessions and output blocks of the docs.

Every shell session and every output block in README.md and docs/*.md is produced by running
it: ``python docs/regen.py --check`` runs them all and reports a unified diff for each block
whose output no longer matches (exit status 1), ``python docs/regen.py --write`` rewrites
those blocks in place with the fresh output. ``tests/test_docs.py`` runs the check, so a
changed message cannot leave a stale doc behind. See docs/index.md for the conventions.

What is run, from the Markdown:

- A fenced block whose first line starts with ``$ `` is a **session**: each ``$ `` line is a
  command, run with bash (``set -o pipefail`` off), stdout and stderr together as a terminal
  shows them (``2>&1``); the lines up to the next ``$ `` line are its expected output. All
  the commands of a block run in one shell, in order (``$?`` is the previous command's
  status), in the doc's own temporary directory, which holds the doc's files (below) and a
  link ``examples`` to the repository's examples/.
- ``<!-- file: NAME -->`` before a fenced block makes the block's text the file NAME of the
  doc's directory (the listings are executed, too); ``<!-- file: NAME`` followed by the
  file's lines and a closing ``-->`` line is a file that the doc does not show.
- ``<!-- output: COMMAND -->`` before a fenced block: the block is the output of COMMAND,
  run as a session's command would be.
- ``<!-- not-run: REASON -->``: the block is not run (it needs what CI does not have).
- ``<!-- requires: TOOL -->``: the block is skipped, and reported, when TOOL is not on PATH.
- ``<!-- unordered -->``: the lines of each command's output are compared in sorted order
  (output of several ranks that is not piped through ``sort``).
- ``<!-- normalize: REGEX -->`` (any number): in this block only, what REGEX matches (each
  of its groups, if it has any) is replaced by ``<*>`` on both sides: for what varies from
  run to run (a count, which of several ranks came first). ``(?m)`` makes ``^``/``$`` lines.
- ``<!-- timeout: SECONDS -->``: a longer limit for the block than the default.

Markers go right before their block (blank lines and other markers between are fine). A
fenced block without a language that is none of these is an error: an output block must say
how it is made, and a block of another kind (a diagram, a formula) says ``text``.

Both sides are normalized before they are compared, narrowly: the host name (docs are
written with the host shown as ``vm``), durations (a number before ``µs``, ``us``, ``ms``,
``s``, ``MB/s``, ``GB/s``, and ``time``'s ``0m1.183s``), ``pid N``, TCP ports, amnet's
random hex names, temporary directories, and in tracebacks the directory of a file, the
line numbers of amnet's own files and Python's ``^^^`` marker lines. Any other change, a
word of a message, a number of messages, fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOC_HOST = "vm"  # the host name the docs show: --write writes this machine's name so
DEFAULT_TIMEOUT = 120.0
MARKERS = ("file", "output", "not-run", "requires", "unordered", "normalize", "timeout")
_MARKER = re.compile(r"<!--\s*(" + "|".join(MARKERS) + r")\b:?\s*(.*?)\s*(-->)?\s*$")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


class DocError(Exception):
    """A doc's markup that the tool cannot run (an unclassified block, a bad marker)."""


@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    indent: str
    fence: str
    info: str
    body: list[str]  # the lines between the fences, indentation removed
    markers: dict[str, list[str]] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)  # 0-based [start, end) of the body lines in the file

    @property
    def kind(self) -> str:
        if "not-run" in self.markers:
            return "not-run"
        if "file" in self.markers:
            return "file"
        if "output" in self.markers:
            return "output"
        if self.body and self.body[0].startswith("$ "):
            return "session"
        return "other"

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[tuple[str, list[str]]]:
        """(command, expected output lines) in order."""
        if self.kind == "output":
            return [(self.markers["output"][0], list(self.body))]
        out: list[tuple[str, list[str]]] = []
        for ln in self.body:
            if ln.startswith("$ "):
                out.append((ln[2:], []))
            else:
                out[-1][1].append(ln)
        return out

    def title(self) -> str:
        cmd = self.commands()[0][0]
        return f"{self.where} ({self.kind}: $ {cmd[:70]})"


@dataclass
class Doc:
    path: Path
    blocks: list[Block]
    files: dict[str, str]  # name -> text, in the doc's directory


def parse(path: Path, text: str | None = None) -> Doc:
    text = path.read_text() if text is None else text
    lines = text.split("\n")
    blocks: list[Block] = []
    files: dict[str, str] = {}
    pending: dict[str, list[str]] = {}

    def add_file(name: str, content: str, where: int) -> None:
        if name in files and files[name] != content:
            raise DocError(f"{path.name}:{where}: file {name!r} is defined twice, differently")
        files[name] = content

    i = 0
    while i < len(lines):
        ln = lines[i]
        m = _MARKER.match(ln.strip())
        if m and ln.lstrip().startswith("<!--"):
            key, value, closed = m.group(1), m.group(2), m.group(3)
            if key == "file" and not closed:  # a hidden file: its lines up to "-->"
                j = i + 1
                while j < len(lines) and lines[j].strip() != "-->":
                    j += 1
                if j == len(lines):
                    raise DocError(f"{path.name}:{i + 1}: <!-- file: {value} has no closing -->")
                add_file(value, "\n".join(lines[i + 1:j]) + "\n", i + 1)
                i = j + 1
                continue
            if not closed:
                raise DocError(f"{path.name}:{i + 1}: marker <!-- {key} must end on its line")
            pending.setdefault(key, []).append(value)
            i += 1
            continue
        f = _FENCE.match(ln)
        if not f:
            if pending and ln.strip():
                raise DocError(f"{path.name}:{i + 1}: markers {sorted(pending)} must come right "
                               f"before their fenced block")
            i += 1
            continue
        indent, fence, info = f.group(1), f.group(2), f.group(3).strip()
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence)
                                      and lines[j].strip().strip(fence[0]) == ""):
            j += 1
        if j == len(lines):
            raise DocError(f"{path.name}:{i + 1}: a fenced block that is never closed")
        body = [b[len(indent):] if b.startswith(indent) else b.lstrip() for b in lines[i + 1:j]]
        block = Block(path, i + 1, indent, fence, info, body, pending, (i + 1, j))
        pending = {}
        check_block(block)
        if block.kind == "file":
            add_file(block.markers["file"][0], "\n".join(body) + "\n", i + 1)
        blocks.append(block)
        i = j + 1
    if pending:
        raise DocError(f"{path.name}: markers {sorted(pending)} at the end, before no block")
    return Doc(path, blocks, files)


def check_block(b: Block) -> None:
    where = f"{b.doc.name}:{b.line}"
    if b.kind == "other" and not b.info:
        raise DocError(
            f"{where}: a fenced block without a language that is neither a session (first line "
            f"'$ COMMAND') nor marked: mark an output block <!-- output: COMMAND -->, or "
            f"<!-- not-run: REASON -->; give any other block a language (```text)")
    if b.kind == "other" and b.markers:
        raise DocError(f"{where}: markers {sorted(b.markers)} on a block that is not run")
    if b.kind == "session" and any(not ln.strip() for ln in b.body[-1:]):
        raise DocError(f"{where}: a session that ends with a blank line")
    if b.kind == "not-run" and not b.markers["not-run"][0]:
        raise DocError(f"{where}: <!-- not-run --> needs a reason")
    for key in ("file", "output", "timeout", "requires"):
        if key in b.markers and (len(b.markers[key]) > 1 or not b.markers[key][0]):
            raise DocError(f"{where}: <!-- {key}: ... --> needs one value")
    for rx in b.markers.get("normalize", []):
        try:
            re.compile(rx)
        except re.error as e:
            raise DocError(f"{where}: bad <!-- normalize: {rx} -->: {e}") from None


# -- normalization ---------------------------------------------------------------------------
_HOSTS = {h for h in (DOC_HOST, socket.gethostname()) if len(h) >= 2}
_HOST_RX = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(_HOSTS))) + r")(?![\w-])")
_TB_FILE = re.compile(r'File "([^"]+)", line (\d+)')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?=\s?(?:µs|us|ms|s|MB/s|GB/s)(?![\w/]))")
_TIME = re.compile(r"\b\d+m\d+\.\d+s\b")
_PID = re.compile(r"\bpid( |=)\d+")
_PORT = re.compile(r"(tcp://[\w.\-\[\]:]*?):\d+\b")
_HEX = re.compile(r"\bamnet-[0-9a-f]{16,}")
_TMPDIR = re.compile(r"/tmp(?:/[\w.@-]+)+/(?=[\w.-]+\.py\b)")


def _tb_file(m: re.Match) -> str:
    path, line = m.group(1), m.group(2)
    if "/amnet/" in path:  # amnet's own code: where it is installed, and its line numbers
        return f'File "<amnet>/{path.rsplit("/amnet/", 1)[1]}", line <n>'
    if "/examples/" in path:
        return f'File "<repo>/examples/{path.rsplit("/examples/", 1)[1]}", line {line}'
    return f'File "<dir>/{path.rsplit("/", 1)[-1]}", line {line}'


def normalize(text: str, *, tmp: Path | None = None, unordered: bool = False,
              extra: list[str] = ()) -> list[str]:
    if tmp is not None:
        for p in sorted({str(tmp), os.path.realpath(tmp)}, key=len, reverse=True):
            text = text.replace(p, "<tmp>")
    for p in sorted({str(REPO), os.path.realpath(REPO)}, key=len, reverse=True):
        text = text.replace(p, "<repo>")
    text = _TMPDIR.sub("<tmp>/", text)
    text = _TB_FILE.sub(_tb_file, text)
    text = _HOST_RX.sub("<host>", text)
    text = _TIME.sub("<t>", text)
    text = _DURATION.sub("<t>", text)
    text = _PID.sub(r"pid\1<pid>", text)
    text = _PORT.sub(r"\1:<port>", text)
    text = _HEX.sub("amnet-<hex>", text)
    for rx in extra:
        text = re.sub(rx, lambda m: _blank(m), text)
    lines = [ln.rstrip() for ln in text.split("\n") if not _CARETS.match(ln)]
    while lines and not lines[-1]:
        lines.pop()
    return sorted(lines) if unordered else lines


def _blank(m: re.Match) -> str:
    """``<*>`` for each group of the match that took part, or for the whole match."""
    if not m.re.groups:
        return "<*>"
    text, pos, start = m.group(0), 0, m.start()
    out = []
    for g in range(1, m.re.groups + 1):
        s, e = m.span(g)
        if s < 0 or s - start < pos:  # did not take part, or nested in the previous one
            continue
        out += [text[pos:s - start], "<*>"]
        pos = e - start
    return "".join(out) + text[pos:]


# -- running ---------------------------------------------------------------------------------
@dataclass
class Result:
    block: Block
    outputs: list[str] | None = None  # each command's output, as printed
    error: str | None = None  # it could not be run (timed out)
    skipped: str | None = None
    seconds: float = 0.0
    diff: str = ""

    @property
    def stale(self) -> bool:
        return bool(self.diff) or self.error is not None


def shims(root: Path) -> Path:
    """A bin directory for PATH: python, amnet-run and amnet-bench of this interpreter."""
    bindir = root / "bin"
    bindir.mkdir(exist_ok=True)
    here = Path(sys.executable).parent
    for name, module in (("python", None), ("amnet-run", "amnet.run"),
                         ("amnet-bench", "amnet_bench")):
        if (here / name).exists():
            continue
        call = shlex.quote(sys.executable) + (f" -m {module}" if module else "")
        (bindir / name).write_text(f'#!/bin/sh\nexec {call} "$@"\n')
        (bindir / name).chmod(0o755)
    return bindir


def session_env(bindir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMNET_")}
    # tracebacks as 3.11 prints them on every Python (3.13 adds ^~~ markers and every line of
    # a statement that spans several)
    env["PYTHONNODEBUGRANGES"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(bindir),
                                   env.get("PATH", "")])
    env.update(COLUMNS="80", LC_ALL="C.UTF-8", TERM="dumb", NO_COLOR="1")
    env.pop("PYTHONSTARTUP", None)
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> Result:
    res = Result(block)
    tool = block.markers.get("requires", [None])[0]
    if tool and shutil.which(tool, path=env["PATH"]) is None:
        res.skipped = f"needs {tool}"
        return res
    cmds = block.commands()
    sep = f"@@amnet-docs-{uuid.uuid4().hex}@@"
    script = ["exec 2>&1 </dev/null"]
    for cmd, _ in cmds:
        script += [cmd, f"__rc=$?; printf '%s' '{sep}'; (exit $__rc)"]
    limit = float(block.markers.get("timeout", [DEFAULT_TIMEOUT])[0])
    t0 = time.monotonic()
    # from a file: on bash's command line the commands would match a `pgrep -f` of the session
    path = cwd.parent / f"session-{uuid.uuid4().hex}.sh"
    path.write_text("\n".join(script) + "\n")
    proc = subprocess.Popen(["bash", str(path)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        raw, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            raw, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired as e:  # something outside the group holds the pipe
            raw = e.output or b""
        res.error = f"timed out after {limit:.0f} s"
    res.seconds = time.monotonic() - t0
    parts = raw.decode("utf-8", "replace").split(sep)
    outputs = parts[:len(cmds)] + [""] * (len(cmds) - len(parts[:len(cmds)]))
    res.outputs = outputs
    res.diff = compare(block, outputs, cwd)
    return res


def render(block: Block, outputs: list[str], norm=None) -> list[str]:
    """The block's body with these outputs (normalized by ``norm`` if given)."""
    lines: list[str] = []
    for (cmd, _), out in zip(block.commands(), outputs, strict=True):
        if block.kind != "output":
            lines.append(f"$ {cmd}")
        if norm is not None:
            lines += norm(out)
        else:
            text = out.rstrip("\n")
            lines += [ln.rstrip() for ln in text.split("\n")] if text else []
    return lines


def compare(block: Block, outputs: list[str], cwd: Path) -> str:
    def norm(text: str) -> list[str]:
        return normalize(text, tmp=cwd, unordered="unordered" in block.markers,
                         extra=block.markers.get("normalize", []))
    expected = render(block, ["\n".join(exp) for _, exp in block.commands()], norm)
    actual = render(block, outputs, norm)
    if expected == actual:
        return ""
    return "\n".join(difflib.unified_diff(
        expected, actual, f"{block.where} (in the doc, normalized)",
        "fresh output (normalized)", lineterm="", n=2))


def run_doc(doc: Doc, root: Path, jobs: int = 1, only: str | None = None) -> list[Result]:
    cwd = root / doc.path.stem
    cwd.mkdir()
    (cwd / "examples").symlink_to(REPO / "examples")
    for name, text in doc.files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
    env = session_env(shims(root))
    todo = [b for b in doc.blocks if b.kind in ("session", "output")
            and (only is None or only in b.where or any(only in c for c, _ in b.commands()))]
    # with --jobs > 1: the blocks given a long timeout first, so that the workers end together
    order = sorted(todo, key=lambda b: -float(b.markers.get("timeout", [0])[0]))
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {b.line: pool.submit(run_block, b, cwd, env) for b in order}
        return [futures[b.line].result() for b in todo]


def write_back(path: Path, results: list[Result]) -> int:
    """Rewrite the stale blocks of ``path`` in place; returns how many were rewritten.

    The file is read again first (others may have edited it meanwhile), and a block is
    rewritten only where its text is still the one that was run.
    """
    text = path.read_text()
    doc = parse(path, text)
    lines = text.split("\n")
    fresh = {}
    for r in results:
        if r.outputs is not None and r.diff and r.error is None:
            fresh[(r.block.line, tuple(r.block.body))] = r
    done = 0
    for b in reversed(doc.blocks):  # from the end: earlier spans stay valid
        r = fresh.get((b.line, tuple(b.body)))
        if r is None:
            r = next((x for (ln, body), x in fresh.items() if body == tuple(b.body)
                      and sum(1 for y in doc.blocks if tuple(y.body) == body) == 1), None)
        if r is None:
            continue
        body = render(b, r.outputs)
        if socket.gethostname() != DOC_HOST:
            body = [_HOST_RX.sub(DOC_HOST, ln) for ln in body]
        s, e = b.span
        lines[s:e] = [(b.indent + ln) if ln else ln for ln in body]
        done += 1
    if done:
        path.write_text("\n".join(lines))
    return done


def report(results: list[Result]) -> str:
    """Each stale block: where it is, its command, and the diff (or why it did not run)."""
    out = []
    for r in results:
        if r.error:
            out.append(f"{r.block.title()}: {r.error}")
        if r.diff:
            out.append(f"{r.block.title()} is stale:\n{r.diff}")
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python docs/regen.py", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="report stale blocks (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite stale blocks in place")
    mode.add_argument("--list", action="store_true", help="list the blocks and what they are")
    ap.add_argument("--jobs", "-j", type=int, default=1,
                    help="blocks of a doc run at once (default 1: some look at /dev/shm)")
    ap.add_argument("--only", help="only blocks whose doc:line or a command contains this")
    ap.add_argument("docs", nargs="*", type=Path, help="Markdown files (default: all docs)")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.docs] or DOCS
    try:
        docs = [parse(p) for p in paths]
    except DocError as e:
        print(f"regen: {e}", file=sys.stderr)
        return 2
    if args.list:
        for d in docs:
            for b in d.blocks:
                if b.kind != "other":
                    extra = ", ".join(f"{k}: {v}" for k, vs in b.markers.items() for v in vs)
                    print(f"{b.where}: {b.kind}" + (f" ({extra})" if extra else ""))
        return 0
    stale = 0
    t0 = time.monotonic()
    counts = {"run": 0, "skipped": 0, "not-run": 0}
    every: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="docs-regen-") as tmp:
        for d in docs:
            results = run_doc(d, Path(tmp), args.jobs, args.only)
            every += results
            counts["not-run"] += sum(b.kind == "not-run" for b in d.blocks)
            for r in results:
                if r.skipped:
                    counts["skipped"] += 1
                    print(f"{r.block.title()}: skipped ({r.skipped})")
                else:
                    counts["run"] += 1
            bad = [r for r in results if r.stale]
            stale += len(bad)
            if bad:
                print(report(bad), end="\n\n")
            if args.write and bad:
                n = write_back(d.path, bad)
                print(f"{d.path.relative_to(REPO)}: rewrote {n} block(s)")
    took = time.monotonic() - t0
    print(f"regen: {counts['run']} blocks run, {stale} stale, {counts['skipped']} skipped, "
          f"{counts['not-run']} not run, in {took:.0f} s")
    if stale and not args.write:
        print("regen: run `python docs/regen.py --write` to rewrite the stale blocks")
    failed = stale if not args.write else sum(r.error is not None for r in every)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
