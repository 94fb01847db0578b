"""A rank's failure as the launcher is told it: the record of an exception.

Shared by the rank process's main program (:mod:`._procmain`), whose rank-threads end with it,
and the runtime (:mod:`._runtime`), whose failing handlers end the job with it; below both.
"""

from __future__ import annotations

import os
import pickle
import traceback
from typing import Any

# the rank process's main program: its frames are amnet's, not the user's (not shown)
_HERE = os.path.normcase(os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                      "_procmain.py")))


def _user_traceback(exc: BaseException) -> str:
    """Format ``exc`` without the frames of the rank process's main program."""
    tb = exc.__traceback__
    while tb is not None and os.path.normcase(tb.tb_frame.f_code.co_filename) == _HERE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _error_record(exc: BaseException, with_pickle: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": type(exc).__name__, "msg": str(exc),
                           "tb": _user_traceback(exc), "exc": None}
    context = getattr(exc, "__amnet_context__", None)  # "in handler X (AM from rank S)"
    if isinstance(context, str):
        rec["context"] = context
    if with_pickle:
        try:
            rec["exc"] = pickle.dumps(exc, protocol=5)
        except Exception:
            pass
    return rec
