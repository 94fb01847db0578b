"""Bulk access to shared arrays: slices and index arrays, read and written.

Each owning thread gets at most one transfer, all in flight together: a numpy copy when the
thread is on my node; otherwise one ``ep.get_nb``/``ep.put_nbi`` when its elements are
contiguous in its segment, one strided VIS call when they are evenly spaced, one indexed VIS
call otherwise. Reads complete before returning; writes are relaxed (complete at the next
fence, barrier or lock operation, or strict access).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._layout import Piece


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


def _plan(a: Any, key: Any) -> tuple[list[Piece], tuple[int, ...]]:
    """Per-thread pieces of the selection ``key`` and the shape of its result."""
    if isinstance(key, slice) and len(a.shape) == 1:
        start, stop, step = key.indices(a._n)
        m = len(range(start, stop, step))
        return a._lay.pieces(start, stop, step), (m,)
    try:
        idx = np.arange(a._n, dtype=np.int64).reshape(a.shape)[key]
    except IndexError as e:
        raise IndexError(f"{a.name}: {e}") from None
    except (TypeError, ValueError) as e:
        raise IndexError(f"{a.name}: {key!r} is not a valid index ({e})") from None
    idx = np.asarray(idx)
    flat = idx.ravel()
    if flat.size == 0:
        return [], idx.shape
    own = a._lay.owners(flat)
    loc = a._lay.local_indices(flat)
    order = np.argsort(own, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(own, minlength=a._T))))
    pieces = []
    for t in range(a._T):
        sel = order[bounds[t]:bounds[t + 1]]
        if len(sel):
            pieces.append(_piece(t, loc[sel], sel.astype(np.int64)))
    return pieces, idx.shape


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


def bulk_get(a: Any, key: Any) -> np.ndarray:
    """``a[key]`` for a slice or index array: a new numpy array."""
    pieces, shape = _plan(a, key)
    out = np.empty(int(np.prod(shape)), a.dtype)
    rt = a._rt
    if rt.cache is not None:
        rt.cache.flush("bulk")
    ep, E, base = a._ep, a._E, a.base
    pending = []
    for pc in pieces:
        view = a._views[pc.thread]
        pos = _pos(pc)
        if view is not None:
            out[pos] = view[_local_sel(pc)]
            continue
        lo = _contiguous(pc)
        direct = lo is not None and isinstance(pos, slice) and pos.step == 1
        tmp = out[pos] if direct else np.empty(pc.count, a.dtype)
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
    return out.reshape(shape)


def bulk_put(a: Any, key: Any, value: Any) -> None:
    """``a[key] = value`` for a slice or index array (relaxed)."""
    from ._array import fit

    pieces, shape = _plan(a, key)
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
        src = vals[_pos(pc)]
        if view is not None:
            view[_local_sel(pc)] = src
            continue
        lo = _contiguous(pc)
        if lo is not None:
            ep.put_nbi(pc.thread, base + lo * E, src)
        elif pc.local is None:
            ep.vis.put_strided_nbi(pc.thread, base + pc.local_start * E,
                                   [pc.local_stride * E], src, None, None, E, [pc.count])
        else:
            ep.vis.put_indexed_nbi(pc.thread, (base + pc.local * E).tolist(), E,
                                   [np.ascontiguousarray(src)], pc.count * E)
