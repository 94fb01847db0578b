"""amnet.aio: asyncio (on uvloop) with amnet's progress driven by the loop.

``amnet.aio.run(main)`` runs ``async def main(ep)`` on a uvloop per rank (and rank-thread)
with the rank's progress attached to the loop: every amnet handle is awaitable (``await
ep.rpc(...)``, ``await ep.get_nb(...)``, ``await team.reduce_all_nb(...)``), combinable with
``asyncio.gather``, ``asyncio.wait_for`` and cancellation; the rank serves other ranks' AMs
whenever its loop is idle, woken by amnet's descriptors (the shared-memory doorbell, the
conduit's), not by spinning; handlers hand work to the loop with :func:`defer`; and
:func:`as_future`, :class:`Promise`, :func:`when_all` and :func:`on_complete` turn completions
into futures, a counted promise (UPC++'s ``promise``/``finalize``), one future of many
results without a task each, or callbacks. docs/aio.md is the guide.
"""

from ..core import _ops
from ._api import attach as attach
from ._api import defer as defer
from ._api import loop_of as loop_of
from ._api import run as run
from ._await import Promise as Promise
from ._await import as_future as as_future
from ._await import awaitable as awaitable
from ._await import on_complete as on_complete
from ._await import when_all as when_all

_ops.AWAITER[0] = awaitable

__all__ = ["Promise", "as_future", "attach", "awaitable", "defer", "loop_of", "on_complete",
           "run", "when_all"]
