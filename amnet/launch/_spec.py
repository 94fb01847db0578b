"""The job spec: what every agent and rank process is told about the job."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

from .._config import Config
from .._topology import Topology


def build_spec(topology: Topology, config: Config, *, label: bool = False,
               script: str | None = None, argv: list[str] | None = None,
               fn: bytes | None = None, main_path: str | None = None) -> dict[str, Any]:
    """A new job's spec with a fresh job token; the launcher adds the bootstrap address."""
    spec: dict[str, Any] = {
        "token": secrets.token_hex(16), "bootstrap": None,
        "topology": topology.to_wire(), "config": config.to_wire(), "label": bool(label),
        "cwd": os.getcwd(), "env": None, "mode": "fn" if fn is not None else "script",
    }
    if fn is not None:
        spec.update(fn=fn, sys_path=list(sys.path), main_path=main_path)
    else:
        spec.update(script=os.path.abspath(script), argv=list(argv or ()))
    return spec
