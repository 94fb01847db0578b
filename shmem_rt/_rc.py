"""shmem_rt's runtime configuration: ``shmem_rt.rc``, shmem4py's ``shmem4py.rc``.

The same four options, defaults, checks and environment variables as shmem4py's, read where
a PE starts instead of at import (a PE is an amnet rank: it starts on its first shmem_rt
call, or at ``shmem.init()``; rank-threads of one process share this module and so one
``rc``):

- ``initialize`` (True): a PE starts on its first shmem_rt call (shmem4py: at import).
  False: the program calls ``shmem.init()`` or ``shmem.init_thread()`` itself; any other
  call before that raises ``amnet.InitError``.
- ``threads`` (False) and ``thread_level`` ("multiple"): that automatic start asks for
  ``init_thread(thread_level)`` instead of ``init()`` (a PE is given at most FUNNELED).
- ``finalize`` (None): whether a PE that started and did not call ``shmem.finalize()`` is
  finalized when its rank ends (its operations completed, then a barrier); None: as
  ``initialize``.

``rc(**options)`` sets several at once; an unknown name is a ``TypeError``, as in
shmem4py. ``SHMEM4PY_RC_INITIALIZE``, ``_THREADS``, ``_THREAD_LEVEL`` and ``_FINALIZE``
(true/yes/on/y/1, false/no/off/n/0, or a level) are read when shmem_rt is imported;
settings the program makes after that win.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

_TRUE = ("true", "yes", "on", "y", "1")
_FALSE = ("false", "no", "off", "n", "0")


class Rc:
    """Runtime configuration options (see the module)."""

    initialize: bool = True
    threads: bool = False
    thread_level: str = "multiple"
    finalize: bool | None = None

    def __init__(self, **kwargs: Any) -> None:
        self(**kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(self, name):
            raise TypeError(f"object has no attribute {name!r}")
        super().__setattr__(name, value)

    def __call__(self, **kwargs: Any) -> None:
        """Set several options at once.

        Raises:
            TypeError: an unknown option (nothing is set then).
        """
        for key in kwargs:
            if not hasattr(self, key):
                raise TypeError(f"unexpected argument {key!r}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return "<shmem_rt.rc>"

    def finalizes(self) -> bool:
        """Whether a PE is finalized when its rank ends."""
        return bool(self.initialize if self.finalize is None else self.finalize)


def from_environment(rc: Rc, environ: Mapping[str, str] = os.environ) -> None:
    """Set ``rc`` from the ``SHMEM4PY_RC_*`` variables that are set and not empty, as
    shmem4py reads them."""
    for name in ("initialize", "threads", "thread_level", "finalize"):
        value: Any = environ.get(f"SHMEM4PY_RC_{name.upper()}")
        if value:
            value = value.lower()
            if value in _TRUE:
                value = True
            elif value in _FALSE:
                value = False
            setattr(rc, name, value)


rc = Rc()
from_environment(rc)
