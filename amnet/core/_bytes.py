"""Payloads as bytes: the contiguous byte view the engine and the extended API send from."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_bytes(data: Any, what: str) -> tuple[Any, int]:
    """A contiguous byte view of ``data`` and its length.

    Raises:
        TypeError: ``data`` is not bytes-like (or a numpy array).
    """
    if isinstance(data, bytes):
        return data, len(data)
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        mv = memoryview(data).cast("B") if data.ndim else memoryview(data.reshape(1)).cast("B")
        return mv, mv.nbytes
    try:
        mv = memoryview(data)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like (bytes, bytearray, memoryview or a numpy "
                        f"array), got {type(data).__name__}") from None
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv, mv.nbytes
