"""``amnet-bench``: named measurement suites, each beside a peer measured in the same run.

A suite is a plain function registered with :func:`suite`. Like the commands of
``mpi4py.bench`` it parses its own options (``args``, a list of strings, with defaults taken
from its keyword arguments) and *returns* its figures as a dict, so tests and scripts can call
it directly; the command line (:mod:`amnet_bench.cli`) only adds the machine description,
prints the Markdown table and writes ``results.json`` / ``results.md``.

The dict a suite returns has these keys:

``suite``    the suite's name
``config``   the options it ran with and the commands it timed
``results``  a list of rows of figures, every sample included
``table``    ``{"columns": [...], "rows": [[str, ...], ...]}``: what the Markdown table shows
``notes``    lines printed under the table (how to read it, oversubscription, missing peers)
``tables``   optional, for a suite with several tables (``am``, ``rma``: across nodes, on one
             node): a list of ``{"section", "title", "columns", "rows", "notes"}`` printed
             in order, each under its title; ``table`` is then the first and ``notes`` all
             the tables' notes
``figures``  optional: plots that ``--out DIR`` draws as DIR/<file> PNGs (the keys are
             :mod:`amnet_bench._plot`'s); such a suite names them in :func:`suite`

A package of its own beside :mod:`amnet`, :mod:`upc_rt` and :mod:`shmem_rt`, not part of the
library: it uses them, and nothing in them imports it.
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


# The suites register themselves on import (`--list` shows them sorted by name).
from . import am as am  # noqa: E402
from . import apps as apps  # noqa: E402
from . import coll as coll  # noqa: E402
from . import hybrid as hybrid  # noqa: E402
from . import inject as inject  # noqa: E402
from . import model as model  # noqa: E402
from . import nbcomm as nbcomm  # noqa: E402
from . import rma as rma  # noqa: E402
from . import shmem as shmem  # noqa: E402
from . import startup as startup  # noqa: E402
from . import upc as upc  # noqa: E402
from . import vis as vis  # noqa: E402

__all__ = ["SUITES", "BenchError", "suite"]
