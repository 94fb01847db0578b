"""The job spec: what every agent and rank process is told about the job."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._config import Config
from .._errors import ConfigError
from .._security import INSECURE_WARNING, make_job_keys, needs_curve, require_curve
from .._topology import Topology

if TYPE_CHECKING:
    from .spawners import Spawner


def curve_for(spawner: Spawner, bootstrap_addr: str | None, *, insecure: bool,
              warn: Callable[[str], None], conduit: str = "zmq") -> bool:
    """Whether a job started by ``spawner`` uses CurveZMQ on all its sockets.

    It does when any agent runs on another host, or the bootstrap service is bound beyond
    loopback (:func:`amnet._security.needs_curve`), unless ``insecure``: then ``warn`` is
    called with the one-line warning and the job runs without it.

    Raises:
        CurveUnavailable: curve is needed and libzmq has no CURVE support.
        ConfigError: curve is needed and ``conduit`` cannot encrypt (``tcp``).
    """
    if not needs_curve(spawner.agent_hosts(), bootstrap_addr):
        return False
    if insecure:
        warn(INSECURE_WARNING)
        return False
    from ..conduits import get_conduit

    if not getattr(get_conduit(conduit), "encrypts", True):
        raise ConfigError(f"the {conduit} conduit does not encrypt, and this job reaches "
                          "beyond this host (agents on other hosts, or a bootstrap address "
                          "beyond loopback): use AMNET_CONDUIT=zmq (CurveZMQ), or --insecure "
                          "on a trusted network")
    require_curve("this job reaches beyond this host (agents on other hosts, or a bootstrap "
                  "address beyond loopback), so it needs CurveZMQ")
    return True


def build_spec(topology: Topology, config: Config, *, label: bool = False,
               script: str | None = None, argv: list[str] | None = None,
               fn: bytes | None = None, main_path: str | None = None,
               curve: bool = False) -> dict[str, Any]:
    """A new job's spec with a fresh job token; the launcher adds the bootstrap address.

    With ``curve``, ``spec["curve"]`` holds fresh CURVE keys for every socket of the job
    (:func:`amnet._security.make_job_keys`); otherwise it is ``None``. Like the token, the
    keys are secrets: the spec reaches agents on standard input or in the environment, never on
    a command line, and is never printed.
    """
    spec: dict[str, Any] = {
        "token": secrets.token_hex(16), "bootstrap": None,
        "curve": make_job_keys() if curve else None,
        "topology": topology.to_wire(), "config": config.to_wire(), "label": bool(label),
        "cwd": os.getcwd(), "env": None, "mode": "fn" if fn is not None else "script",
    }
    if fn is not None:
        spec.update(fn=fn, sys_path=list(sys.path), main_path=main_path)
    else:
        spec.update(script=os.path.abspath(script), argv=list(argv or ()))
    return spec
