"""Reduction operators of the collectives: UPC's ``upc_op_t`` (ADD ... MAX, FUNC,
NONCOMM_FUNC) on numpy arrays, element by element.

``combine(op, a, b, func)`` returns ``a op b`` for two arrays of one dtype (``a`` from the
lower team index: NONCOMM_FUNC relies on that order). Raises TypeError for an op the dtype
has no meaning for (a bitwise op on floats).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ADD, MULT, AND, OR, XOR, LOGAND, LOGOR, MIN, MAX, FUNC, NONCOMM_FUNC = range(11)

NAMES = {ADD: "ADD", MULT: "MULT", AND: "AND", OR: "OR", XOR: "XOR", LOGAND: "LOGAND",
         LOGOR: "LOGOR", MIN: "MIN", MAX: "MAX", FUNC: "FUNC", NONCOMM_FUNC: "NONCOMM_FUNC"}
BY_NAME = {v: k for k, v in NAMES.items()}
UFUNC = _UFUNC = {ADD: np.add, MULT: np.multiply, AND: np.bitwise_and, OR: np.bitwise_or,
          XOR: np.bitwise_xor, MIN: np.minimum, MAX: np.maximum}
BITWISE = (AND, OR, XOR)


def check_op(op: Any, dtype: np.dtype, func: Callable | None, what: str) -> int:
    """``op`` as its number (a name such as ``"ADD"`` is accepted too), checked against
    ``dtype`` and ``func``.

    Raises:
        ValueError: an unknown op; FUNC/NONCOMM_FUNC without a callable ``func``, or a
            ``func`` given with another op.
        TypeError: a bitwise op on a dtype that is not integer or bool.
    """
    if isinstance(op, str):
        if op.upper() not in BY_NAME:
            raise ValueError(f"{what}: unknown reduction op {op!r}; the ops are "
                             f"{', '.join(NAMES.values())}")
        op = BY_NAME[op.upper()]
    if isinstance(op, bool) or not isinstance(op, int | np.integer) or int(op) not in NAMES:
        raise ValueError(f"{what}: unknown reduction op {op!r}; the ops are "
                         f"{', '.join(NAMES.values())}")
    op = int(op)
    if op in (FUNC, NONCOMM_FUNC):
        if not callable(func):
            raise ValueError(f"{what}: {NAMES[op]} needs func, a function of two arrays")
    elif func is not None:
        raise ValueError(f"{what}: func is only for FUNC and NONCOMM_FUNC, not {NAMES[op]}")
    if op in BITWISE and dtype.kind not in "iub":
        raise TypeError(f"{what}: {NAMES[op]} needs an integer or bool dtype, not {dtype}")
    if dtype.kind not in "iubfc":
        raise TypeError(f"{what}: reductions need a numeric or bool dtype, not {dtype}")
    return op


def combine(op: int, a: np.ndarray, b: np.ndarray, func: Callable | None) -> np.ndarray:
    """``a op b`` element by element, in ``a``'s dtype (a new array)."""
    if op in _UFUNC:
        return _UFUNC[op](a, b).astype(a.dtype, copy=False)
    if op == LOGAND:
        return np.logical_and(a, b).astype(a.dtype)
    if op == LOGOR:
        return np.logical_or(a, b).astype(a.dtype)
    out = np.asarray(func(a, b))  # type: ignore[misc]
    if out.shape != a.shape:
        raise ValueError(f"the reduction function returned shape {out.shape}, not {a.shape}")
    return out.astype(a.dtype, copy=False)


def fold(op: int, x: np.ndarray, func: Callable | None) -> np.ndarray:
    """``x[0] op x[1] op ...`` in order, as a 1-element array of ``x``'s dtype."""
    if op in _UFUNC:
        return np.asarray([_UFUNC[op].reduce(x)], dtype=x.dtype)
    if op in (LOGAND, LOGOR) and len(x) > 1:  # one element is itself, as in a scan
        f = np.logical_and if op == LOGAND else np.logical_or
        return np.asarray([f.reduce(x)], dtype=x.dtype)
    acc = x[:1].copy()
    for k in range(1, len(x)):
        acc = combine(op, acc, x[k:k + 1], func)
    return acc


def scan(op: int, x: np.ndarray, func: Callable | None) -> np.ndarray:
    """The inclusive prefixes ``x[0], x[0] op x[1], ...`` in order (a new array)."""
    if op in _UFUNC:
        return _UFUNC[op].accumulate(x).astype(x.dtype, copy=False)
    if op in (LOGAND, LOGOR):
        f = np.logical_and if op == LOGAND else np.logical_or
        out = f.accumulate(x.astype(bool)).astype(x.dtype)
        out[:1] = x[:1]  # the first prefix is the element itself
        return out
    out = x.copy()
    for k in range(1, len(x)):
        out[k:k + 1] = combine(op, out[k - 1:k], x[k:k + 1], func)
    return out
