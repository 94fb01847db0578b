"""The suite registry of ``amnet-bench``: :data:`SUITES`, :func:`suite` and
:class:`BenchError`.

It imports nothing of amnet_bench: every suite imports it to register itself, and the
package (``amnet_bench/__init__.py``) imports the suites, so that importing the package
registers them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Suite = Callable[..., dict[str, Any]]

#: Every registered suite by name, in registration order.
SUITES: dict[str, Suite] = {}


class BenchError(RuntimeError):
    """A suite could not measure: a command failed, a tool is unusable. The message says why."""


def suite(name: str, plots: Sequence[str] = ()) -> Callable[[Suite], Suite]:
    """Register the decorated function as the suite ``name``; ``plots`` names the PNG files
    its figures become with ``--out`` (``<pattern>`` for a part that varies), none for a
    suite that draws none: the command line checks for matplotlib before running a suite
    that draws some.

    Raises:
        ValueError: another function is registered as ``name``.
    """

    def register(fn: Suite) -> Suite:
        if name in SUITES and SUITES[name] is not fn:
            raise ValueError(f"suite {name!r} is already registered")
        SUITES[name] = fn
        fn.suite_name = name  # type: ignore[attr-defined]
        fn.plots = tuple(plots)  # type: ignore[attr-defined]
        return fn

    return register
