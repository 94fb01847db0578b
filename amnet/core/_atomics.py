"""Remote atomics (docs/design.md §5): ops, dtypes, and how values travel as int64.

An atomic runs at the owner of the target word, inside the owner's progress (one handler at
a time per process), so concurrent atomics on a word from every rank are serialised there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._errors import AtomicError

OPS = ("get", "set", "swap", "cas", "fadd", "fsub", "fand", "for", "fxor", "fmin", "fmax")
OP_INDEX = {op: i for i, op in enumerate(OPS)}
BITWISE = frozenset({"fand", "for", "fxor"})
DTYPES = ("i4", "i8", "u4", "u8", "f4", "f8")
DTYPE_INDEX = {d: i for i, d in enumerate(DTYPES)}
NP_DTYPES = [np.dtype("<" + d) for d in DTYPES]
#: the fetch-and-op ops, as the numpy ufunc each applies in place (ints wrap, as numpy's do)
UFUNCS = {"fadd": np.add, "fsub": np.subtract, "fand": np.bitwise_and, "for": np.bitwise_or,
          "fxor": np.bitwise_xor, "fmin": np.minimum, "fmax": np.maximum}
BITS = [np.dtype("<i4"), np.dtype("<i8")] * 3  # the signed int of the same size


def check(op: Any, dtype: Any, value: Any, value2: Any, offset: int) -> tuple[int, int, int, int]:
    """Validate an atomic and encode it: ``(op index, dtype index, value bits, value2 bits)``.

    Raises:
        AtomicError: unknown op or dtype, a bitwise op on floats, a missing or extra
            ``value2``, a value of the wrong kind or out of range, a misaligned offset.
    """
    if not isinstance(op, str) or op not in OP_INDEX:
        raise AtomicError(f"unknown atomic op {op!r}; ops are: {', '.join(OPS)}")
    if not isinstance(dtype, str) or dtype not in DTYPE_INDEX:
        raise AtomicError(f"unknown atomic dtype {dtype!r}; dtypes are: {', '.join(DTYPES)}")
    di = DTYPE_INDEX[dtype]
    dt = NP_DTYPES[di]
    if dt.kind == "f" and op in BITWISE:
        raise AtomicError(f"atomic op {op!r} is bitwise and needs an integer dtype, not {dtype}")
    if offset % dt.itemsize:
        raise AtomicError(f"atomic offset {offset} is not aligned to the {dt.itemsize}-byte "
                          f"dtype {dtype}")
    if op == "cas":
        if value2 is None:
            raise AtomicError("atomic 'cas' needs value (the expected value) and value2 (the "
                              "new value)")
    elif value2 is not None:
        raise AtomicError(f"atomic {op!r} takes no value2")
    v1 = 0 if op == "get" and value is None else encode(value, di)
    v2 = encode(value2, di) if op == "cas" else 0
    return OP_INDEX[op], di, v1, v2


def encode(value: Any, di: int) -> int:
    dt = NP_DTYPES[di]
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise AtomicError(f"atomic value must be a number, got {type(value).__name__}")
    if dt.kind in "iu" and not isinstance(value, int | np.integer):
        raise AtomicError(f"atomic value for dtype {DTYPES[di]} must be an int, got "
                          f"{type(value).__name__}")
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= int(value) <= info.max:
            raise AtomicError(f"atomic value {value} does not fit dtype {DTYPES[di]} "
                              f"({info.min}..{info.max})")
    else:
        try:
            f = float(value)
        except OverflowError:  # an int too large for any float
            raise AtomicError(f"atomic value {value} does not fit dtype {DTYPES[di]}") from None
        with np.errstate(all="ignore"):
            conv = np.array([f], dtype=dt)
        if np.isinf(conv[0]) and not math.isinf(f):
            raise AtomicError(f"atomic value {value} does not fit dtype {DTYPES[di]}")
        return int(conv.view(BITS[di])[0])
    return int(np.array([value], dtype=dt).view(BITS[di])[0])


def decode(bits: int, di: int) -> int | float:
    v = np.array([bits], dtype=BITS[di]).view(NP_DTYPES[di])[0]
    return v.item()


def apply(segment: np.ndarray, offset: int, opi: int, di: int, b1: int, b2: int) -> int:
    """Run the atomic on ``segment`` and return the old value's bits."""
    dt = NP_DTYPES[di]
    word = segment[offset:offset + dt.itemsize].view(dt)
    old_bits = int(segment[offset:offset + dt.itemsize].view(BITS[di])[0])
    if OPS[opi] == "get":
        return old_bits
    with np.errstate(all="ignore"):  # float overflow/NaN: IEEE results, never an exception
        return _apply(word, old_bits, dt, di, OPS[opi], b1, b2)


def _apply(word: np.ndarray, old_bits: int, dt: np.dtype, di: int, op: str, b1: int,
           b2: int) -> int:
    v = np.array([b1], dtype=BITS[di]).view(dt)
    if op in ("set", "swap"):
        word[0] = v[0]
    elif op == "cas":
        if old_bits == b1 or (dt.kind == "f" and word[0] == v[0]):
            word[:] = np.array([b2], dtype=BITS[di]).view(dt)
    else:
        UFUNCS[op](word, v, out=word)
    return old_bits
