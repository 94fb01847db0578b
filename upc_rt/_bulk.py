"""Bulk access to shared arrays: slices and index arrays, read and written.

Each owning thread gets at most one transfer, all in flight together: a numpy copy when the
thread is on my node; otherwise one ``ep.get_nb``/``ep.put_nbi`` when its elements are
contiguous in its segment, one strided VIS call when they are evenly spaced, one indexed VIS
call otherwise. Reads complete before returning; writes are relaxed (complete at the next
fence, barrier or lock operation, or strict access).

Element access (:mod:`upc_rt._array`) shares two helpers of this module: :func:`fit` (a
value checked against the array's dtype) and :func:`as_bytes`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._layout import Piece
from ._rt import touch


def _prog(a: np.ndarray) -> tuple[int, int, np.ndarray | None]:
    """(start, stride, None) for an arithmetic progression, else (a[0], 0, a)."""
    if len(a) == 1:
        return int(a[0]), 1, None
    d = np.diff(a)
    if (d == d[0]).all() and d[0] != 0:
        return int(a[0]), int(d[0]), None
    return int(a[0]), 0, np.ascontiguousarray(a, dtype=np.int64)


def _piece(t: int, loc: np.ndarray, pos: np.ndarray) -> Piece:
    ls, lstep, larr = _prog(loc)
    ps, pstep, parr = _prog(pos)
    return Piece(thread=t, count=len(loc), local_start=ls, local_stride=lstep, local=larr,
                 pos_start=ps, pos_stride=pstep, pos=parr)


def _basic(shape: tuple[int, ...], key: Any) -> list[tuple[int, int, int, bool]] | None:
    """Per dimension ``(start, step, count, kept)`` for a basic index (ints, slices, at most
    one Ellipsis), or None for anything else (index arrays: the general path). Raises
    IndexError for an int out of range."""
    key = key if isinstance(key, tuple) else (key,)
    at = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(at) > 1:
        return None
    if at:
        i = at[0]
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    if len(key) > len(shape):
        return None
    key = key + (slice(None),) * (len(shape) - len(key))
    dims = []
    for k, d in zip(key, shape, strict=True):
        if isinstance(k, slice):
            s, e, st = k.indices(d)
            dims.append((s, st, len(range(s, e, st)), True))
        elif isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_):
            j = int(k) + (d if k < 0 else 0)
            if not 0 <= j < d:
                raise IndexError(f"index {int(k)} is out of range for a dimension of {d}")
            dims.append((j, 1, 1, False))
        else:
            return None
    return dims


def _plan(a: Any, key: Any) -> tuple[list[Piece], tuple[int, ...], tuple[int, int, int]]:
    """Per-thread pieces of the selection ``key``, the shape of its result, and its grid
    ``(rows, local_row_stride, pos_row_stride)``: each piece describes the selection's
    first row, and row r of a thread's share is its first row moved by ``r *
    local_row_stride`` local indices and ``r * pos_row_stride`` positions (rows is 1 when
    the selection is not such a grid)."""
    one = (1, 0, 0)
    if isinstance(key, slice) and len(a.shape) == 1:
        try:
            start, stop, step = key.indices(a._n)
        except (TypeError, ValueError) as e:  # step 0, a float bound
            raise IndexError(f"{a.name}: {key!r} is not a valid index ({e})") from None
        m = len(range(start, stop, step))
        return a._lay.pieces(start, stop, step), (m,), one
    try:
        dims = _basic(a.shape, key)
    except IndexError as e:
        raise IndexError(f"{a.name}: {e}") from None
    except (TypeError, ValueError) as e:  # a slice's step 0, a float bound
        raise IndexError(f"{a.name}: {key!r} is not a valid index ({e})") from None
    if dims is not None:
        shape = tuple(c for _, _, c, kept in dims if kept)
        if 0 in shape:
            return [], shape, one
        mul = [int(k) for k in np.cumprod((1, *a.shape[:0:-1]))[::-1]]  # per step of a dim
        s, st, c, _ = dims[-1]
        many = [d for d in range(len(dims) - 1) if dims[d][2] > 1]
        if len(many) <= 1:  # the rows are a progression: no arrays at all
            first = sum(dims[d][0] * mul[d] for d in range(len(dims) - 1)) + s
            rows = dims[many[0]][2] if many else 1
            D = dims[many[0]][1] * mul[many[0]] if many else 0
            pieces = a._lay.pieces(first, first + c * st, st)
            if rows == 1:
                return pieces, shape, one
            B, T = a._B, a._T
            if B == 0 or T == 1:
                lrow: int | None = D
            elif D % (B * T) == 0:
                lrow = D // (B * T) * B
            else:
                lrow = None
            if lrow is not None and all(pc.local is None and pc.pos is None for pc in pieces):
                return pieces, shape, (rows, lrow, c)
        outer = np.zeros(1, np.int64)
        for (s0, st0, c0, _), k in zip(dims[:-1], mul[:-1], strict=True):
            outer = (outer[:, None] + (s0 + st0 * np.arange(c0, dtype=np.int64)) * k).ravel()
        idx = (outer[:, None] + (s + st * np.arange(c, dtype=np.int64))[None, :]).reshape(shape)
    elif (len(a.shape) == 1 and isinstance(key, np.ndarray | list) and
          np.asarray(key).dtype.kind in "iu" and np.asarray(key).ndim >= 1):
        idx = np.asarray(key).astype(np.int64)  # an index array: O(its length), not O(n)
        idx = np.where(idx < 0, idx + a._n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= a._n):
            raise IndexError(f"{a.name}: an index is out of range: the array has {a._n} "
                             "elements")
    else:
        try:
            idx = np.arange(a._n, dtype=np.int64).reshape(a.shape)[key]
        except IndexError as e:
            raise IndexError(f"{a.name}: {e}") from None
        except (TypeError, ValueError) as e:
            raise IndexError(f"{a.name}: {key!r} is not a valid index ({e})") from None
    idx = np.asarray(idx)
    flat = idx.ravel()
    if flat.size == 0:
        return [], idx.shape, one
    own = a._lay.owners(flat)
    loc = a._lay.local_indices(flat)
    order = np.argsort(own.astype(np.int16) if a._T < 2**15 else own, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(own, minlength=a._T))))
    pieces = []
    for t in range(a._T):
        sel = order[bounds[t]:bounds[t + 1]]
        if len(sel):
            pieces.append(_piece(t, loc[sel], sel.astype(np.int64)))
    return pieces, idx.shape, one


def _grid(arr: np.ndarray, start: int, stride: int, count: int, rows: int,
          row_stride: int) -> np.ndarray:
    """The (rows, count) view of the 1-D ``arr`` whose element (r, k) is ``arr[start + r *
    row_stride + k * stride]`` (every such index is inside ``arr``)."""
    e = arr.itemsize
    return np.lib.stride_tricks.as_strided(arr[start:], (rows, count),
                                           (row_stride * e, stride * e))


def _vis_shape(pc: Piece, rows: int, lrow: int, prow: int,
               E: int) -> tuple[list[int], list[int], int, list[int]]:
    """``(segment strides, buffer strides, element bytes, counts)`` of a grid piece's VIS
    transfer: whole runs when both ends are contiguous within a row, else single elements."""
    if pc.count == 1:
        return [lrow * E], [prow * E], E, [rows]
    if pc.local_stride == 1 and pc.pos_stride == 1:
        return [lrow * E], [prow * E], pc.count * E, [rows]
    return ([pc.local_stride * E, lrow * E], [pc.pos_stride * E, prow * E], E,
            [pc.count, rows])


def _local_sel(pc: Piece) -> Any:
    if pc.local is not None:
        return pc.local
    stop = pc.local_start + pc.local_stride * pc.count
    return slice(pc.local_start, stop if stop >= 0 else None, pc.local_stride)


def _pos(pc: Piece) -> Any:
    s = pc.pos_slice()
    return s if s is not None else pc.positions()


def _contiguous(pc: Piece) -> int | None:
    """The lowest local index when the piece is one run in increasing order."""
    if pc.local is None and (pc.local_stride == 1 or pc.count == 1):
        return pc.local_start
    return None


def _touch(a: Any, t: int, lo: int | None, count: int, write: bool) -> None:
    """With auto_nb, tell the scheduler of a bulk access to thread ``t`` (another node): its
    contiguous elements ``lo .. lo + count``, or (strided, indexed) the array's whole part
    there."""
    if a._rt.nb is None:
        return
    E = a._E
    if lo is None:
        touch(a._rt, t, a.base, a._lay.max_local() * E, write)
    else:
        touch(a._rt, t, a.base + lo * E, count * E, write)


def bulk_get(a: Any, key: Any) -> np.ndarray:
    """``a[key]`` for a slice or index array: a new numpy array."""
    pieces, shape, (rows, lrow, prow) = _plan(a, key)
    result = np.empty(int(np.prod(shape)), a.dtype)
    out = as_bytes(result)  # copies below move bytes, padding included
    rt = a._rt
    if rt.cache is not None:
        rt.cache.flush("bulk")
    ep, E, base = a._ep, a._E, a.base
    pending = []
    for pc in pieces:
        view = a._views[pc.thread]
        if rows > 1:  # one 2-level strided transfer (or copy) per thread
            if view is not None:
                _grid(out, pc.pos_start, pc.pos_stride, pc.count, rows, prow)[...] = _grid(
                    as_bytes(view), pc.local_start, pc.local_stride, pc.count, rows, lrow)
                continue
            sst, bst, elem, counts = _vis_shape(pc, rows, lrow, prow, E)
            _touch(a, pc.thread, None, 0, False)
            pending.append((ep.vis.get_strided_nb(pc.thread, out, pc.pos_start * E, bst,
                                                  base + pc.local_start * E, sst, elem,
                                                  counts), None, None))
            continue
        pos = _pos(pc)
        if view is not None:
            out[pos] = as_bytes(view)[_local_sel(pc)]
            continue
        lo = _contiguous(pc)
        direct = lo is not None and isinstance(pos, slice) and pos.step == 1
        tmp = out[pos] if direct else np.empty(pc.count, out.dtype)
        _touch(a, pc.thread, lo, pc.count, False)
        if direct and len(pieces) == 1:  # the only transfer: a blocking get is leaner
            ep.get(pc.thread, base + lo * E, pc.count * E, tmp)
            break
        if lo is not None:
            h = ep.get_nb(pc.thread, base + lo * E, pc.count * E, tmp)
        elif pc.local is None:
            h = ep.vis.get_strided_nb(pc.thread, tmp, None, None,
                                      base + pc.local_start * E, [pc.local_stride * E], E,
                                      [pc.count])
        else:
            h = ep.vis.get_indexed_nb(pc.thread, [tmp], pc.count * E,
                                      (base + pc.local * E).tolist(), E)
        pending.append((h, None if direct else pos, tmp))
    for h, pos, tmp in pending:
        h.wait()
        if pos is not None:
            out[pos] = tmp
    return result.reshape(shape)


@functools.cache
def _int_range(dt: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def fit(value: Any, dt: np.dtype, what: str) -> np.ndarray:
    """``value`` as an array of ``dt``, refusing what does not fit (an integer out of
    range, a fraction for an integer type). For a structured dtype a tuple is one record
    and a list a sequence of them, as numpy reads them."""
    if dt.names is not None:
        try:
            return np.asarray(value, dtype=dt)
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"{what}: {value!r} cannot be stored as {dt} ({e})") from None
    if dt.kind in "iu" and (type(value) is int or isinstance(value, np.integer)):
        lo, hi = _int_range(dt)  # one integer into an integer array: the common case
        v = int(value)
        if not lo <= v <= hi:
            raise ValueError(f"{what}: {v} does not fit {dt} (range {lo}..{hi})")
        return np.array(v, dt)
    try:
        arr = np.asarray(value)
        if dt.kind in "iu":
            if arr.dtype.kind == "f":
                if not np.all(np.mod(arr, 1) == 0):
                    raise ValueError(f"{what}: {value!r} is not an integer, the array holds "
                                     f"{dt}")
            elif arr.dtype.kind in "iu" and arr.size:
                info = np.iinfo(dt)
                lo, hi = int(arr.min()), int(arr.max())
                if lo < info.min or hi > info.max:
                    bad = lo if lo < info.min else hi
                    raise ValueError(f"{what}: {bad} does not fit {dt} (range {info.min}.."
                                     f"{info.max})")
            elif arr.dtype.kind == "O":
                raise ValueError(f"{what}: {value!r} does not fit {dt}")
        return arr.astype(dt, copy=False)
    except OverflowError as e:
        raise ValueError(f"{what}: {value!r} does not fit {dt} ({e})") from None
    except TypeError as e:
        raise ValueError(f"{what}: {value!r} cannot be stored as {dt} ({e})") from None


def as_bytes(x: np.ndarray) -> np.ndarray:
    """``x`` itself, or for a structured dtype ``x`` viewed as plain void items of the same
    size: numpy assigns structured values field by field (leaving padding as it found it),
    void items byte for byte, as UPC copies."""
    return x if x.dtype.names is None else x.view(np.dtype((np.void, x.dtype.itemsize)))


def bulk_put(a: Any, key: Any, value: Any) -> None:
    """``a[key] = value`` for a slice or index array (relaxed)."""
    pieces, shape, (rows, lrow, prow) = _plan(a, key)
    vals = fit(value, a.dtype, f"{a.name}[{key!r}] = ...")
    try:
        vals = np.ascontiguousarray(np.broadcast_to(vals, shape)).ravel()
    except ValueError:
        raise ValueError(f"{a.name}[{key!r}]: cannot assign a value of shape {vals.shape} to "
                         f"a selection of shape {shape}") from None
    rt = a._rt
    if rt.cache is not None:
        rt.cache.flush("bulk")
    ep, E, base = a._ep, a._E, a.base
    for pc in pieces:
        view = a._views[pc.thread]
        if rows > 1:  # one 2-level strided transfer (or copy) per thread
            if view is not None:
                _grid(view, pc.local_start, pc.local_stride, pc.count, rows, lrow)[...] = _grid(
                    vals, pc.pos_start, pc.pos_stride, pc.count, rows, prow)
                continue
            sst, bst, elem, counts = _vis_shape(pc, rows, lrow, prow, E)
            _touch(a, pc.thread, None, 0, True)
            ep.vis.put_strided_nbi(pc.thread, base + pc.local_start * E, sst, vals,
                                   pc.pos_start * E, bst, elem, counts)
            continue
        src = vals[_pos(pc)]
        if view is not None:
            view[_local_sel(pc)] = src
            continue
        lo = _contiguous(pc)
        _touch(a, pc.thread, lo, pc.count, True)
        if lo is not None:
            ep.put_nbi(pc.thread, base + lo * E, src)
        elif pc.local is None:
            ep.vis.put_strided_nbi(pc.thread, base + pc.local_start * E,
                                   [pc.local_stride * E], src, None, None, E, [pc.count])
        else:
            ep.vis.put_indexed_nbi(pc.thread, (base + pc.local * E).tolist(), E,
                                   [np.ascontiguousarray(src)], pc.count * E)
