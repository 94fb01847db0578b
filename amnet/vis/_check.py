"""Checking VIS arguments and turning them into stream sides (:mod:`amnet.vis._layout`).

Everything here runs before anything is sent or copied: a bad argument raises and no byte
moves. Remote sides are checked against the segment size, local ones against their buffers.
"""

from __future__ import annotations

from itertools import chain
from math import prod
from typing import Any

import numpy as np

from .._errors import SegmentBoundsError
from ._layout import U8, Pieces, Views, extent, self_overlaps, simplify, strided_view

_U8 = np.dtype(U8)
MAX_LEVELS = 31  # numpy arrays have at most 32 dimensions; the element's bytes take one
INT64_MAX = (1 << 63) - 1


def as_int(v: Any, what: str) -> int:
    """``v`` as a Python int (ints and numpy integers; not bools).

    Raises:
        TypeError: anything else.
    """
    if type(v) is int:
        return v
    if isinstance(v, bool) or not isinstance(v, int | np.integer):
        raise TypeError(f"{what} must be an int, got {type(v).__name__}")
    return int(v)


def int_array(seq: Any, what: str, shape_hint: str) -> np.ndarray:
    """A sequence of ints as an int64 array (vectorized when it already is numeric).

    Raises:
        TypeError: an entry is not an int (bools and floats included).
        ValueError: an entry does not fit in int64, or the shape is not ``shape_hint``.
    """
    if isinstance(seq, np.ndarray):
        arr = seq
    else:
        try:
            seq = list(seq)
        except TypeError:
            raise TypeError(f"{what} must be a sequence ({shape_hint}), got "
                            f"{type(seq).__name__}") from None
        if not seq:
            return np.zeros(0, dtype=np.int64)
        flat = seq if not isinstance(seq[0], list | tuple) else chain.from_iterable(seq)
        try:
            kinds = set(map(type, flat))
        except TypeError:  # ragged: refused below, naming the entry
            kinds = set()
        if bool in kinds or np.bool_ in kinds:  # numpy would take True for 1
            raise TypeError(f"every entry of {what} must be an int, got bool")
        try:
            arr = np.array(seq)
        except (ValueError, OverflowError):
            arr = np.array(seq, dtype=object)
    if arr.dtype.kind == "u":
        if arr.size and int(arr.max()) > INT64_MAX:
            raise ValueError(f"{what}: an entry does not fit in int64")
        return arr.astype(np.int64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if arr.size == 0:
        return arr.astype(np.int64)
    for x in arr.ravel().tolist():  # name the first bad entry
        as_int(x, f"every entry of {what}")
        if not -INT64_MAX - 1 <= x <= INT64_MAX:
            raise ValueError(f"{what}: {x} does not fit in int64")
    raise TypeError(f"{what} must hold ints ({shape_hint})")


def remote_pieces(seg: np.ndarray | None, seg_size: int, rank: int, offs: np.ndarray,
                  lens: np.ndarray, what: str) -> Pieces:
    """Remote ``(offset, nbytes)`` pieces of ``rank``'s segment (``seg`` when addressable,
    else a stand-in: only the offsets are used).

    Raises:
        ValueError: a negative length.
        SegmentBoundsError: a piece leaves the segment.
    """
    if len(lens):
        bad = np.flatnonzero(lens < 0)
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"{what}: piece {i} has a negative length ({int(lens[i])})")
        bad = np.flatnonzero((offs < 0) | (lens > seg_size) | (offs > seg_size - lens))
        if len(bad):
            i = int(bad[0])
            o, n = int(offs[i]), int(lens[i])
            raise SegmentBoundsError(
                f"{what}: piece {i}, bytes [{o}, {o + n}), is outside rank {rank}'s segment "
                f"of {seg_size} bytes")
    return Pieces(seg if seg is not None else np.empty(0, dtype=U8), offs, lens)


def vector_list(pairs: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """A remote vector list ``[(offset, nbytes), ...]`` as two int64 arrays."""
    arr = int_array(pairs, what, "[(offset, nbytes), ...]")
    if arr.size == 0:
        return arr.reshape(0), arr.reshape(0)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{what} must be a list of (offset, nbytes) pairs")
    return arr[:, 0].copy(), arr[:, 1].copy()


def pieces_overlap(p: Pieces, what: str) -> None:
    """Raise ValueError when two destination pieces share a byte."""
    if len(p.lens) < 2:
        return
    order = np.argsort(p.offs, kind="stable")
    o = p.offs[order]
    end = o + p.lens[order]
    bad = np.flatnonzero(o[1:] < end[:-1])
    if len(bad):
        i, j = int(order[bad[0]]), int(order[bad[0] + 1])
        raise ValueError(f"{what}: destination pieces overlap (bytes "
                         f"[{int(p.offs[i])}, {int(p.offs[i] + p.lens[i])}) and "
                         f"[{int(p.offs[j])}, {int(p.offs[j] + p.lens[j])}))")


def byte_view(buf: Any, writable: bool, what: str) -> np.ndarray:
    """A local buffer as a uint8 view of its bytes in C order (numpy arrays of any strides).

    Raises:
        TypeError: not bytes-like, holds Python objects, or read-only where written.
    """
    if isinstance(buf, np.ndarray):
        if buf.dtype is _U8 and buf.ndim == 1:  # the common case, as it is
            if writable and not buf.flags.writeable:
                raise TypeError(f"{what} is read-only")
            return buf
        arr = buf
    else:
        try:
            mv = memoryview(buf)
        except TypeError:
            raise TypeError(f"{what} must be bytes-like (bytes, bytearray, memoryview or a "
                            f"numpy array), got {type(buf).__name__}") from None
        arr = np.asarray(mv) if mv.ndim else np.asarray(mv).reshape(1)
    if arr.dtype.hasobject:
        raise TypeError(f"{what} holds Python objects, not bytes")
    if writable and not arr.flags.writeable:
        raise TypeError(f"{what} is read-only")
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.dtype.itemsize == 0:
        return np.empty(0, dtype=U8)
    return arr[..., None].view(U8)


def buffer_list(bufs: Any, writable: bool, what: str, each: int | None = None) -> list:
    """Local buffers as byte views; ``each``: the length every one must have."""
    if isinstance(bufs, bytes | bytearray | memoryview | np.ndarray):
        raise TypeError(f"{what} must be a list of buffers, not one {type(bufs).__name__}")
    try:
        items = list(bufs)
    except TypeError:
        raise TypeError(f"{what} must be a list of buffers, got {type(bufs).__name__}") \
            from None
    views = [byte_view(b, writable, f"{what}[{i}]") for i, b in enumerate(items)]
    if each is not None:
        for i, v in enumerate(views):
            if v.size != each:
                raise ValueError(f"{what}[{i}] holds {v.size} bytes; every entry must hold "
                                 f"exactly {each} bytes (the length given)")
    return views


def region_overlaps(region: Views | Strided) -> bool:
    """True when a strided destination region (one mapped view, or the description of
    one on another node) has two elements sharing a byte."""
    if isinstance(region, Strided):
        return region.overlaps()
    v = region.views[0] if region.views else None
    if v is None:
        return False
    cs, ss, e = simplify(tuple(reversed(v.shape)), tuple(reversed(v.strides)), 1)
    return self_overlaps(cs, ss, e)


def views_overlap(views: list[np.ndarray], what: str) -> None:
    """Raise ValueError when destination buffers (or one buffer with itself) share a byte."""
    if len(views) == 1 and views[0].flags.c_contiguous:
        return  # one contiguous buffer: nothing to share a byte with
    spans = []
    for i, v in enumerate(views):
        if not v.size:
            continue
        cs, ss, e = simplify(tuple(reversed(v.shape)), tuple(reversed(v.strides)), 1)
        if self_overlaps(cs, ss, e):
            raise ValueError(f"{what}[{i}] overlaps itself (a broadcast or self-overlapping "
                             "view cannot be a destination)")
        lo, hi = np.lib.array_utils.byte_bounds(v) if hasattr(np.lib, "array_utils") \
            else np.byte_bounds(v)
        spans.append((lo, hi, i))
    spans.sort()
    active: list[tuple[int, int]] = []  # (hi, index) of earlier spans that may reach on
    for lo, hi, j in spans:
        active = [(h, i) for h, i in active if h > lo]
        for _, i in active:
            if np.shares_memory(views[i], views[j]):
                raise ValueError(f"{what}: destination buffers {min(i, j)} and {max(i, j)} "
                                 "share memory")
        active.append((hi, j))


class Strided:
    """A checked strided description: ``counts``/``strides`` (dimension 0 innermost),
    ``elemsz`` and ``origin``, already simplified; ``total`` bytes."""

    __slots__ = ("counts", "elemsz", "origin", "strides", "total")

    def __init__(self, origin: int, counts: tuple, strides: tuple, elemsz: int) -> None:
        self.origin = origin
        self.counts, self.strides, self.elemsz = simplify(counts, strides, elemsz)
        self.total = elemsz * prod(counts)

    def view(self, base: np.ndarray) -> np.ndarray:
        return strided_view(base, self.origin, self.counts, self.strides, self.elemsz)

    def overlaps(self) -> bool:
        return self_overlaps(self.counts, self.strides, self.elemsz)


def strided(offset: Any, strides: Any, elemsz: int, counts: tuple, side: str,
            limit: int, what: str, rank: int | None = None) -> Strided:
    """Check one side of a strided transfer against ``limit`` bytes (the segment, or the
    local buffer when ``rank`` is None).

    Raises:
        TypeError: a non-int offset or stride.
        ValueError: ``strides`` and ``count`` differ in length; a local region outside its
            buffer.
        SegmentBoundsError: a remote region outside the segment.
    """
    offset = as_int(offset, f"{what}: {side}_offset")
    st = tuple(as_int(s, f"{what}: every {side}_strides entry") for s in _seq(
        strides, f"{what}: {side}_strides"))
    if len(st) != len(counts):
        raise ValueError(f"{what}: {side}_strides has {len(st)} entries and count has "
                         f"{len(counts)}; they must match (one stride per level)")
    s = Strided(offset, counts, st, elemsz)
    if s.total:
        lo, hi = extent(offset, counts, st, elemsz)
        if lo < 0 or hi > limit:
            where = (f"rank {rank}'s segment of {limit} bytes" if rank is not None else
                     f"the {side} buffer of {limit} bytes")
            msg = (f"{what}: the {side} region reaches bytes [{lo}, {hi}), outside {where}")
            if rank is not None:
                raise SegmentBoundsError(msg)
            raise ValueError(msg)
    return s


def counts_of(elemsz: Any, count: Any, what: str) -> tuple[int, tuple[int, ...]]:
    """Check ``elemsz`` and ``count``.

    Raises:
        TypeError: not ints.
        ValueError: negative, or more than MAX_LEVELS levels.
    """
    elemsz = as_int(elemsz, f"{what}: elemsz")
    if elemsz < 0:
        raise ValueError(f"{what}: elemsz must be >= 0, got {elemsz}")
    counts = tuple(as_int(c, f"{what}: every count entry") for c in _seq(count, f"{what}: count"))
    if len(counts) > MAX_LEVELS:
        raise ValueError(f"{what}: {len(counts)} stride levels; at most {MAX_LEVELS}")
    for i, c in enumerate(counts):
        if c < 0:
            raise ValueError(f"{what}: count[{i}] must be >= 0, got {c}")
    return elemsz, counts


def local_strided(buf: Any, offset: Any, strides: Any, elemsz: int, counts: tuple,
                  side: str, writable: bool, what: str) -> np.ndarray:
    """The local side of a strided transfer as one uint8 view; a destination
    (``writable``) is checked not to overlap itself.

    Either ``offset`` and ``strides`` describe the region in a contiguous buffer, or both
    are None and ``buf`` is a numpy array whose own shape and strides describe it (its C-order
    bytes are the stream; it must hold exactly the region's bytes, whole values per element).

    Raises:
        TypeError, ValueError: as :func:`strided`; a size or dtype that does not match.
    """
    total = elemsz * prod(counts)
    if offset is None and strides is None:
        if not isinstance(buf, np.ndarray):
            raise TypeError(f"{what}: {side}_offset and {side}_strides may be None only when "
                            f"{side} is a numpy array (its strides describe the region)")
        v = byte_view(buf, writable, f"{what}: {side}")
        if buf.nbytes != total:
            raise ValueError(f"{what}: the {side} array holds {buf.nbytes} bytes "
                             f"({buf.dtype}, shape {buf.shape}) but the region is {total} "
                             f"bytes (elemsz {elemsz} x count {list(counts)})")
        if elemsz and buf.itemsize and elemsz % buf.itemsize:
            raise ValueError(f"{what}: elemsz {elemsz} is not a whole number of {buf.dtype} "
                             f"values ({buf.itemsize} bytes each)")
        if writable:
            views_overlap([v], f"{what}: destination buffer")
        return v
    if offset is None or strides is None:
        raise TypeError(f"{what}: give both {side}_offset and {side}_strides, or neither")
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise TypeError(f"{what}: with explicit {side}_strides the {side} buffer must be "
                            "contiguous (or pass the strided array itself with "
                            f"{side}_offset=None, {side}_strides=None)")
        base = byte_view(buf, writable, f"{what}: {side}").reshape(-1)
    else:
        byte_view(buf, writable, f"{what}: {side}")  # the type checks
        mv = memoryview(buf)
        if not mv.c_contiguous:
            raise TypeError(f"{what}: the {side} buffer must be contiguous")
        base = np.frombuffer(mv, dtype=U8) if mv.nbytes else np.empty(0, dtype=U8)
    s = strided(offset, strides, elemsz, counts, side, base.size, what)
    v = s.view(base)
    if writable and s.overlaps():
        raise ValueError(f"{what}: the {side} region overlaps itself (two elements share "
                         "a byte)")
    return v


def _seq(v: Any, what: str) -> list:
    if type(v) is list:
        return v
    if isinstance(v, int | np.integer) or isinstance(v, str | bytes):
        raise TypeError(f"{what} must be a sequence of ints, got {type(v).__name__}")
    try:
        return list(v)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, got {type(v).__name__}") from None


def same_total(dst: int, src: int, what: str) -> None:
    if dst != src:
        raise ValueError(f"{what}: the destination describes {dst} bytes and the source "
                         f"{src}; they must be equal")
