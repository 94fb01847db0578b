"""The two shapes a side of a VIS transfer takes, as a stream of bytes.

Every VIS transfer moves one logical stream of bytes: the concatenation, in order, of the
source pieces goes into the concatenation, in order, of the destination pieces (GASNet VIS:
the two sides may cut the stream differently). A side is either

- :class:`Views`: numpy uint8 views of any strides, taken in C order one after another (a
  strided region is one view: ``count`` reversed, then the element's bytes innermost; a
  local buffer list is one view per buffer), or
- :class:`Pieces`: ``(offset, nbytes)`` pieces of one flat byte array (a remote vector or
  indexed list), kept as numpy int64 arrays so that thousands of pieces cost no Python loop.

Both read and write any byte range ``[a, b)`` of their stream; a partial range of a strided
view is cut into at most ``2 * ndim`` hyper-rectangles (:func:`blocks`), each copied by numpy.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod

import numpy as np

U8 = np.uint8
_SCATTER_MIN_PIECES = 32  # below this, or with long pieces, a loop of slices beats an index
_SCATTER_MAX_MEAN = 256  # mean piece length above which slices win


def blocks(shape: tuple[int, ...], a: int, b: int) -> Iterator[tuple[tuple, int]]:
    """Cut the C-order flat range ``[a, b)`` of an array of ``shape`` into hyper-rectangles.

    Yields ``(index, n)``: ``array[index]`` is a view whose C-order bytes are the next ``n``
    of the range. At most ``2 * len(shape) - 1`` blocks.
    """
    if a >= b:
        return
    if len(shape) == 1:
        yield (slice(a, b),), b - a
        return
    inner = prod(shape[1:])
    i0, r0 = divmod(a, inner)
    i1, r1 = divmod(b, inner)
    if i0 == i1:
        for idx, n in blocks(shape[1:], r0, r1):
            yield (i0, *idx), n
        return
    if r0:
        for idx, n in blocks(shape[1:], r0, inner):
            yield (i0, *idx), n
        i0 += 1
    if i1 > i0:
        yield (slice(i0, i1),), (i1 - i0) * inner
    if r1:
        for idx, n in blocks(shape[1:], 0, r1):
            yield (i1, *idx), n


def strided_view(base: np.ndarray, origin: int, counts: tuple[int, ...],
                 strides: tuple[int, ...], elemsz: int) -> np.ndarray:
    """The uint8 view of a strided region of ``base`` (1-d uint8): ``counts[i]`` elements
    of ``elemsz`` bytes along dimension ``i`` (0 innermost) at ``strides[i]`` bytes apart,
    the first at byte ``origin``. The caller checked it lies inside ``base``; numpy checks
    again."""
    shape = (*reversed(counts), elemsz)
    st = (*reversed(strides), 1)
    if 0 in shape:
        return np.empty(shape, dtype=U8)
    return np.ndarray(shape, dtype=U8, buffer=base, offset=origin, strides=st)


def extent(origin: int, counts: tuple[int, ...], strides: tuple[int, ...],
           elemsz: int) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` a non-empty strided region touches."""
    lo = hi = origin
    for c, s in zip(counts, strides, strict=True):
        if s < 0:
            lo += (c - 1) * s
        else:
            hi += (c - 1) * s
    return lo, hi + elemsz


def simplify(counts: tuple[int, ...], strides: tuple[int, ...],
             elemsz: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The same region with fewer dimensions: dimensions of count 1 dropped, a dimension
    whose elements touch folded into the element, and neighbours that continue each other
    merged. The stream order is unchanged."""
    cs: list[int] = []
    ss: list[int] = []
    for c, s in zip(counts, strides, strict=True):
        if c == 1:
            continue
        if not cs and s == elemsz:  # elements back to back: one longer element
            elemsz *= c
            continue
        if cs and s == cs[-1] * ss[-1]:
            cs[-1] *= c
            continue
        cs.append(c)
        ss.append(s)
    return tuple(cs), tuple(ss), elemsz


def self_overlaps(counts: tuple[int, ...], strides: tuple[int, ...], elemsz: int) -> bool:
    """True when two elements of a strided region share a byte (exact).

    Fast test first: with the dimensions sorted by |stride|, none overlaps if each stride is
    at least the span of the dimensions inside it. Otherwise every element's start is
    computed, sorted and compared (vectorized).
    """
    if elemsz == 0 or 0 in counts:
        return False
    dims = sorted((abs(s), c) for c, s in zip(counts, strides, strict=True) if c > 1)
    span = elemsz
    for s, c in dims:
        if s < span:
            break
        span += (c - 1) * s
    else:
        return False
    starts = np.zeros(1, dtype=np.int64)
    for s, c in dims:
        starts = (starts[None, :] + np.arange(c, dtype=np.int64)[:, None] * s).ravel()
    starts.sort()
    return bool(np.any(np.diff(starts) < elemsz))


class Views:
    """A side made of numpy uint8 views, read and written in C order one after another."""

    __slots__ = ("checked", "cum", "total", "views")

    def __init__(self, views: list[np.ndarray], checked: bool = False) -> None:
        self.checked = checked  # a destination already known not to overlap itself
        self.views = [v for v in views if v.size]
        if len(self.views) == 1:
            self.total = self.views[0].size
            self.cum = None
            return
        self.cum = np.cumsum([0, *[v.size for v in self.views]], dtype=np.int64)
        self.total = int(self.cum[-1])

    def _parts(self, a: int, b: int) -> Iterator[tuple[np.ndarray, int, int]]:
        """(view, start, end) for each view's share of the stream range [a, b)."""
        if len(self.views) == 1:
            yield self.views[0], a, b
            return
        i = int(np.searchsorted(self.cum, a, side="right")) - 1
        cum = self.cum
        while i < len(self.views) and cum[i] < b:
            base = int(cum[i])
            yield self.views[i], max(a, base) - base, min(b, int(cum[i + 1])) - base
            i += 1

    def read(self, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
        """Bytes ``[a, b)`` of the stream, contiguous (into ``out`` when given)."""
        if out is None:
            out = np.empty(b - a, dtype=U8)
        pos = 0
        for v, s, e in self._parts(a, b):
            if s == 0 and e == v.size:
                out[pos:pos + e].reshape(v.shape)[...] = v
                pos += e
                continue
            for idx, n in blocks(v.shape, s, e):
                part = v[idx]
                out[pos:pos + n].reshape(part.shape)[...] = part
                pos += n
        return out

    def write(self, a: int, b: int, data: np.ndarray) -> None:
        """Store ``data`` (``b - a`` contiguous bytes) as bytes ``[a, b)`` of the stream."""
        pos = 0
        for v, s, e in self._parts(a, b):
            if s == 0 and e == v.size:
                v[...] = data[pos:pos + e].reshape(v.shape)
                pos += e
                continue
            for idx, n in blocks(v.shape, s, e):
                part = v[idx]
                part[...] = data[pos:pos + n].reshape(part.shape)
                pos += n


class Pieces:
    """A side made of ``(offset, nbytes)`` pieces of one flat uint8 array ``base``."""

    __slots__ = ("base", "cum", "lens", "offs", "total")

    def __init__(self, base: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> None:
        keep = lens > 0
        if not keep.all():
            offs, lens = offs[keep], lens[keep]
        self.base = base
        self.offs = offs
        self.lens = lens
        self.cum = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=self.cum[1:])
        self.total = int(self.cum[-1])

    def _cut(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """The offsets and lengths of the pieces that make up stream bytes [a, b)."""
        cum = self.cum
        i = int(np.searchsorted(cum, a, side="right")) - 1
        j = int(np.searchsorted(cum, b, side="left"))
        offs = self.offs[i:j].copy()
        lens = self.lens[i:j].copy()
        if len(lens):
            head = a - int(cum[i])
            offs[0] += head
            lens[0] -= head
            lens[-1] -= int(cum[j]) - b
        return offs, lens

    def _index(self, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """The byte index into ``base`` of each stream byte of these pieces."""
        starts = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        return np.repeat(offs - starts, lens) + np.arange(int(lens.sum()), dtype=np.int64)

    @staticmethod
    def _by_slices(lens: np.ndarray) -> bool:
        return len(lens) < _SCATTER_MIN_PIECES or lens.mean() > _SCATTER_MAX_MEAN

    def read(self, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
        offs, lens = self._cut(a, b)
        if self._by_slices(lens):
            if out is None:
                out = np.empty(b - a, dtype=U8)
            pos = 0
            base = self.base
            for o, n in zip(offs.tolist(), lens.tolist(), strict=True):
                out[pos:pos + n] = base[o:o + n]
                pos += n
            return out
        got = self.base[self._index(offs, lens)]
        if out is None:
            return got
        out[:] = got
        return out

    def write(self, a: int, b: int, data: np.ndarray) -> None:
        offs, lens = self._cut(a, b)
        if self._by_slices(lens):
            pos = 0
            base = self.base
            for o, n in zip(offs.tolist(), lens.tolist(), strict=True):
                base[o:o + n] = data[pos:pos + n]
                pos += n
            return
        self.base[self._index(offs, lens)] = data[:b - a]


def copy_stream(dst: Views | Pieces, src: Views | Pieces) -> None:
    """Copy all of ``src``'s stream into ``dst``'s (same total): directly when both are one
    view of the same shape, else through one packed buffer."""
    if (isinstance(dst, Views) and isinstance(src, Views) and len(dst.views) == 1
            and len(src.views) == 1 and dst.views[0].shape == src.views[0].shape):
        np.copyto(dst.views[0], src.views[0])
        return
    if dst.total:
        dst.write(0, dst.total, src.read(0, src.total))
