"""Keep a folder named ``amnet`` in the current directory from shadowing amnet.

``python -m MODULE`` puts the current directory first on ``sys.path``. Standing in the parent
of a clone of this repository (a folder ``amnet``), ``import amnet`` then finds that folder
instead of the installed package: a namespace package, or whatever ``amnet/__init__.py`` is
there. Every Python process amnet starts itself runs with ``python -P`` (no such entry,
Python >= 3.11); the ``python -m amnet...`` entry points a user starts call
:func:`reexec_if_shadowed` first, which starts the same command again with ``-P`` when
``amnet`` is not this package. Only the standard library is used here: the package may be a
stranger's when this runs.
"""

from __future__ import annotations

import os
import sys

#: the interpreter flag that keeps the current directory (or the script's) off ``sys.path``
SAFE_PATH_FLAG = "-P"


def _ours() -> bool:
    pkg = sys.modules.get("amnet")
    here = os.path.dirname(os.path.abspath(__file__))
    where = getattr(pkg, "__file__", None)
    return where is not None and os.path.dirname(os.path.abspath(where)) == here


def reexec_if_shadowed() -> None:
    """Start this ``python -m ...`` command again with ``-P`` when ``sys.modules["amnet"]``
    is not this package (a folder ``amnet`` in the current directory shadowed it); return
    when it is. Nothing has run yet, and ``os.execv`` keeps the process id, so what started
    the command (a shell, an MPI launcher) sees one process.

    Raises:
        SystemExit: ``amnet`` is shadowed although the current directory is not on
            ``sys.path`` (``-P`` was given): the message names what shadows it.
    """
    if _ours():
        return
    pkg = sys.modules.get("amnet")
    where = getattr(pkg, "__file__", None) or next(iter(getattr(pkg, "__path__", None) or ["?"]))
    if sys.flags.safe_path or not sys.executable:
        raise SystemExit(f"amnet: 'import amnet' found {where}, not the installed amnet "
                         f"({os.path.dirname(os.path.abspath(__file__))}); rename or move it")
    os.execv(sys.executable, [sys.executable, SAFE_PATH_FLAG, *sys.orig_argv[1:]])
