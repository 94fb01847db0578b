"""Shared helpers: run amnet-run as a user would, and look for anything a job left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))


def leftovers(mark: str) -> list[str]:
    """Processes whose environment carries ``AMTEST_MARK=mark`` (a job's descendants)."""
    needle = f"AMTEST_MARK={mark}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if needle in env.split(b"\0"):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{pid}: {cmdline}")
        except OSError:
            continue
    return found


def shm_objects() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if "amnet" in n.lower()}
    except FileNotFoundError:
        return set()


class Runner:
    """Runs ``python -m amnet.run ARGS`` with a unique marker in its environment."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.mark = uuid.uuid4().hex

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMNET_")}
        env["AMTEST_MARK"] = self.mark
        env["PYTHONPATH"] = os.pathsep.join([str(DATA), env.get("PYTHONPATH", "")])
        env.update(extra or {})
        return env

    def script(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "amnet.run", *args]

    def __call__(self, *args: str, timeout: float = 60, env: dict | None = None,
                 cwd: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), capture_output=True, text=True,
                              timeout=timeout, env=self.env(env), cwd=cwd or self.tmp)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(env),
                                cwd=self.tmp, start_new_session=True)

    def assert_clean(self) -> None:
        assert leftovers(self.mark) == []


@pytest.fixture
def runner(tmp_path):
    r = Runner(tmp_path)
    before = shm_objects()
    yield r
    r.assert_clean()
    assert shm_objects() <= before
