"""amnet: a GASNet-style active-message communication layer for Python.

What exists: the launcher (``amnet-run``, :func:`amnet.run`), the AM core and extended API
(handlers, Short/Medium/Long requests and replies, put/get, atomics, barriers, rpc), the
shared-memory network inside a node (:mod:`amnet.pshm`), vector/indexed/strided transfers
(``ep.vis``), teams and collectives (``ep.coll``) and the ``amnet-bench`` measurements.
Automatic nonblocking memput/memget: :class:`amnet.nbcomm.Scheduler` (upc_rt uses it with
``auto_nb``; ``amnet-bench nbcomm`` measures it). The UPC runtime, :mod:`upc_rt`, is built
on the public extension interface (:class:`amnet.Extension`).

The public namespace is curated here; everything else lives in private modules. See
``docs/user-guide.md`` to run jobs and ``docs/design.md`` for the architecture and contract.
"""

from ._config import Config as Config
from ._errors import AMArgumentError as AMArgumentError
from ._errors import AMContextError as AMContextError
from ._errors import AMNetError as AMNetError
from ._errors import AtomicError as AtomicError
from ._errors import BarrierMismatch as BarrierMismatch
from ._errors import BarrierStateError as BarrierStateError
from ._errors import CollectiveMismatch as CollectiveMismatch
from ._errors import ConfigError as ConfigError
from ._errors import HandlerCategoryError as HandlerCategoryError
from ._errors import HandlerMismatch as HandlerMismatch
from ._errors import HandlerNotRegistered as HandlerNotRegistered
from ._errors import InitError as InitError
from ._errors import JobAborted as JobAborted
from ._errors import JobFailed as JobFailed
from ._errors import PayloadTooLarge as PayloadTooLarge
from ._errors import PshmAttachError as PshmAttachError
from ._errors import PshmSpaceError as PshmSpaceError
from ._errors import RankError as RankError
from ._errors import RemoteTraceback as RemoteTraceback
from ._errors import RPCError as RPCError
from ._errors import SegmentBoundsError as SegmentBoundsError
from ._errors import TopologyError as TopologyError
from ._topology import Topology as Topology
from .core._extension import Extension as Extension
from .core._extension import Port as Port
from .core._extension import register_extension as register_extension
from .core._handlers import handler as handler
from .core._hot import Token as Token
from .core._ops import AccessRegion as AccessRegion
from .core._ops import Handle as Handle
from .core._ops import Op as Op
from .core._ops import wait_all as wait_all
from .core._ops import wait_any as wait_any
from .core._runtime import abort as abort
from .core._runtime import endpoint as endpoint
from .core._runtime import finalize as finalize
from .core._runtime import init as init
from .core._wire import MAX_ARGS as MAX_ARGS
from .launch.api import run as run

__version__ = "0.1.0"

for _cls in (AMArgumentError, AMContextError, AMNetError, AtomicError, BarrierMismatch,
             BarrierStateError, CollectiveMismatch, ConfigError, HandlerCategoryError,
             HandlerMismatch, HandlerNotRegistered, InitError, JobAborted, JobFailed,
             PayloadTooLarge, PshmAttachError, PshmSpaceError, RankError, RemoteTraceback,
             RPCError, SegmentBoundsError, TopologyError):
    _cls.__module__ = __name__  # tracebacks and pickles say amnet.X, the public name
del _cls


def __getattr__(name: str):
    if name == "Endpoint":  # imported on first use: it brings numpy, which amnet-run never needs
        from .core.endpoint import Endpoint

        globals()["Endpoint"] = Endpoint
        return Endpoint
    if name == "config":  # the job's resolved configuration, as this process sees it
        from .core._runtime import current_config

        return current_config()
    raise AttributeError(f"module 'amnet' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "config", "Endpoint"})

__all__ = [
    "MAX_ARGS",
    "AMArgumentError",
    "AMContextError",
    "AMNetError",
    "AccessRegion",
    "AtomicError",
    "BarrierMismatch",
    "BarrierStateError",
    "CollectiveMismatch",
    "Config",
    "ConfigError",
    "Endpoint",
    "Extension",
    "Handle",
    "HandlerCategoryError",
    "HandlerMismatch",
    "HandlerNotRegistered",
    "InitError",
    "JobAborted",
    "JobFailed",
    "Op",
    "PayloadTooLarge",
    "Port",
    "PshmAttachError",
    "PshmSpaceError",
    "RPCError",
    "RankError",
    "RemoteTraceback",
    "SegmentBoundsError",
    "Token",
    "Topology",
    "TopologyError",
    "abort",
    "config",
    "endpoint",
    "finalize",
    "handler",
    "init",
    "register_extension",
    "run",
    "wait_all",
    "wait_any",
]
