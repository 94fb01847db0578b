"""``python -m amnet.run`` is ``amnet-run``.

Importing this module as ``amnet.run`` keeps :func:`amnet.run` callable: the module object
forwards calls to the function.
"""

from __future__ import annotations

import sys
import types

if __name__ == "__main__":  # before anything else: is 'amnet' this package?
    from ._safepath import reexec_if_shadowed

    reexec_if_shadowed()

from .launch.api import run as _run


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return _run(*args, **kwargs)


if __name__ == "__main__":
    from .launch.cli import main

    main()
else:
    sys.modules[__name__].__class__ = _CallableModule
