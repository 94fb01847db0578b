"""amnet.vis: vector, indexed and strided put/get with aggregation (docs/design.md §9).

Use it as ``ep.vis`` (a :class:`VIS`); see docs/vis.md. Within a node transfers are direct
numpy copies; between nodes they are packed into chunks of system AMs, pipelined.
"""

from typing import Any

from ._api import VIS as VIS
from ._remote import SYSTEM_HANDLERS as SYSTEM_HANDLERS

__all__ = ["VIS"]


def attach(ep: Any) -> VIS:
    """The object ``ep.vis`` returns (called once per endpoint by the core)."""
    return VIS(ep)
