"""What the test clusters' parts (``sshhosts.SshHosts``, ``slurmnode.SlurmNode``) share: the
check that one can be made here, and their life as a context manager."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any


def missing(needs: Sequence[str], root_for: str, packages: str) -> str | None:
    """Why a part cannot be made here (None: it can): it needs root (for ``root_for``) and
    the tools ``needs`` on PATH (``packages``: the Debian packages that bring them)."""
    if os.geteuid() != 0:
        return f"needs root ({root_for})"
    for tool in needs:
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install {packages})"
    return None


class Part:
    """A part brought up on entry (``_start``) and taken down (``close``) on exit, or at once
    when bringing it up fails part way."""

    def __enter__(self) -> Any:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
