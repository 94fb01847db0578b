"""amnet.vis: vector, indexed and strided put/get with aggregation (docs/design.md §9).

Use it as ``ep.vis`` (a :class:`VIS`); see docs/vis.md. Within a node transfers are direct
numpy copies; between nodes they are packed into chunks of system AMs, pipelined.
"""

from .. import Extension
from ._api import VIS as VIS
from ._remote import SYSTEM_HANDLERS

__all__ = ["VIS"]

#: VIS is an amnet extension like any outside runtime would be: its own system handlers,
#: and ``ep.vis`` (``ep.extension("vis")``) made by ``attach``. amnet's package metadata
#: declares it as the ``vis`` entry point of the ``amnet.extensions`` group.
EXTENSION = Extension("vis", SYSTEM_HANDLERS, attach=VIS)
