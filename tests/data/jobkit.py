"""What the job modules of the AM tests (amjobs, hotjobs) share: a wait that fails with a
message where it would hang, and a rank's set-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def waiter(limit: float) -> Callable[..., None]:
    """``wait(ep, pred, what, timeout=limit)``: ``ep.wait_until(pred)``, which fails with a
    message after ``timeout`` seconds (a wait that takes longer is a hang)."""

    def wait(ep: Any, pred: Callable[[], Any], what: str, timeout: float = limit) -> None:
        if not ep.wait_until(pred, timeout=timeout):
            raise AssertionError(f"rank {ep.rank}: timed out after {timeout} s waiting for "
                                 f"{what}")

    return wait


def set_up(ep: Any, handlers: list[Callable], states: dict[int, Any],
           make: Callable[[Any], Any]) -> Any:
    """A rank's set-up: ``handlers`` registered (collective) unless they are already (by
    ``amnet.init(handlers=...)``), its state ``make(ep)`` made and filed in ``states`` by
    rank, then a barrier: nobody sends before every rank has its state. Returns the state."""
    first = handlers[0]
    if f"{first.__module__}.{first.__qualname__}" not in ep.handlers:
        ep.register_handlers(handlers)
    s = states[ep.rank] = make(ep)
    ep.barrier()
    return s
