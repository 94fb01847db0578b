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

# The suites register themselves on import (`--list` shows them sorted by name).
from . import am as am
from . import apps as apps
from . import coll as coll
from . import hybrid as hybrid
from . import inject as inject
from . import model as model
from . import nbcomm as nbcomm
from . import rma as rma
from . import shmem as shmem
from . import startup as startup
from . import upc as upc
from . import vis as vis
from ._registry import SUITES, BenchError, Suite, suite

__all__ = ["SUITES", "BenchError", "Suite", "suite"]
