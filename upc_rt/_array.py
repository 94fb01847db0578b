"""Shared arrays (``upc.shared_array``): typed, blocked-cyclic, on the symmetric heap.

Element access is the hot path: an int index goes straight to a numpy view of the owner's
piece when the owner is on my node (no AM), else to one ``ep.get``/``ep.put_nbi`` (or the
remote-reference cache). Slices and index arrays move as bulk transfers: at most one
contiguous, strided or indexed transfer per owning thread (VIS across nodes, numpy copies
within a node), all in flight together; the index arithmetic is :mod:`upc_rt._layout`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from amnet import AMContextError

from ._alloc import Allocation, sym_alloc
from ._bulk import as_bytes, bulk_get, bulk_put, fit
from ._layout import Layout, SharedPtr
from ._rt import Runtime, current


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"upc.shared_array(): {dtype!r} is not a numpy dtype ({e})") from None
    if dt.hasobject or dt.itemsize == 0:
        raise TypeError(f"upc.shared_array(): dtype {dt} is not a fixed-size type")
    if dt.subdtype is not None:  # numpy spreads it into a trailing dimension: no element
        raise TypeError(f"upc.shared_array(): dtype {dt} is a sub-array type; name the "
                        f"field to make it one element, e.g. [('v', {dt.subdtype[0].str!r}, "
                        f"{dt.subdtype[1]})], or add the dimension to the shape")
    return dt


def _snapshot(v: np.ndarray, li: int) -> Any:
    """Element ``li`` of ``v`` as a value of its own. numpy hands out an element of a
    structured (or other void) dtype as a view of the array's memory; a shared array's read
    is a copy, as ``s = X[i]`` copies the struct in UPC (plain dtypes give numpy scalars,
    copies already). The bytes are copied, padding included, then viewed as the dtype: UPC
    copies bytes, and numpy's copy of a structured value copies field by field, leaving the
    padding of its new buffer as it found it."""
    return _own_bytes(v[li:li + 1])[0]


def _own_bytes(a: np.ndarray) -> np.ndarray:
    """A writable copy of ``a``, byte for byte (padding included: :func:`as_bytes`)."""
    return as_bytes(a).copy().view(a.dtype)


def shared_array(shape: int | tuple[int, ...], dtype: Any = "f8",
                 blocksize: int | None = 1) -> SharedArray:
    """A shared array (collective): ``shape`` elements of ``dtype``, distributed in blocks
    of ``blocksize`` elements (1: cyclic; k: blocked-cyclic; 0: indefinite, all on thread
    0; None: UPC's ``[*]``, one block of ceil(n/THREADS) per thread). A tuple shape is
    distributed on the row-major flattened index, as in UPC. Every element starts at zero
    (the call ends with a barrier).

    Raises:
        amnet.CollectiveMismatch: threads passed different arguments (on every thread).
        MemoryError: the shared heap cannot hold it. TypeError / ValueError: bad arguments.
    """
    rt = current("upc.shared_array()")
    try:
        dt = _dtype(dtype)
        dkey = dt.str if dt.names is None else str(dt.descr)
    except TypeError:
        dt, dkey = None, repr(dtype)
    shp = (shape,) if isinstance(shape, int | np.integer) and not isinstance(shape, bool) \
        else tuple(shape) if isinstance(shape, tuple | list) else shape
    args = [repr(shp), dkey, repr(blocksize)]

    def decide() -> list[int]:
        if dt is None:
            _dtype(dtype)
        if not isinstance(shp, tuple) or not all(
                isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0
                for d in shp) or not shp:
            raise ValueError(f"upc.shared_array(): shape must be a non-negative int or a "
                             f"tuple of them, got {shape!r}")
        n = math.prod(int(d) for d in shp)
        b = blocksize
        if b is None:
            b = max(1, -(-n // rt.THREADS))
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise ValueError(f"upc.shared_array(): blocksize must be an int >= 0 or None, "
                             f"got {blocksize!r}")
        lay = Layout(n, dt.itemsize, b, rt.THREADS)
        return [sym_alloc(rt, lay.max_local() * dt.itemsize, "upc.shared_array"), b]

    off, b = rt.collective("upc.shared_array", args, decide)
    arr = SharedArray(rt, tuple(int(d) for d in shp), dt, b, off)
    arr.local.view(np.uint8)[:] = 0  # zero-initialised, as a declared UPC shared array is
    rt.net.barrier()  # before anyone writes into my part
    return arr


class SharedArray:
    """A shared array; made by :func:`shared_array`, one object per thread.

    ``X[i]`` / ``X[i] = v`` (relaxed), ``X[a:b:s]`` and index arrays (bulk), ``X.strict[i]``
    (the access between fences), ``X.local`` (my elements, a numpy view), ``X.ptr(i)``.
    Every read gives values of its own, whatever the route: an element of a structured
    dtype is a copy (a writable ``np.void``), never a view of shared memory or of a buffer
    the next read reuses; only ``X.local`` is a view.

    Raises (every access): IndexError naming the array and its length; ValueError for a
    value that does not fit the dtype (nothing is written).
    """

    __slots__ = ("_B", "_E", "_T", "_alloc", "_ep", "_every", "_fast", "_float", "_lay", "_n",
                 "_plain", "_rt", "_scratch", "_tick", "_views", "base", "blocksize", "dtype",
                 "name", "shape", "strict")

    def __init__(self, rt: Runtime, shape: tuple[int, ...], dt: np.dtype, blocksize: int,
                 base: int) -> None:
        n = math.prod(shape)
        self._rt = rt
        self._ep = rt.net  # the endpoint, or over shmem its ShmemNet
        self.shape = shape
        self.dtype = dt
        self.blocksize = blocksize
        self.base = base
        self._n = n
        self._fast = n if len(shape) == 1 else 0  # an int index is one element only in 1-D
        self._B = blocksize
        self._T = rt.THREADS
        self._E = dt.itemsize
        self._plain = dt.kind != "V"  # numpy's own assignment checks the value ...
        self._float = dt.kind in "fc"  # ... and a Python float fits as is
        self._lay = lay = Layout(n, dt.itemsize, blocksize, rt.THREADS, base)
        self.name = f"shared array {shape if len(shape) > 1 else n} of {dt} " \
                    f"(block size {blocksize}) at offset {base}"
        self._alloc = Allocation(self.name, lay, dtype=dt)
        views: list[Any] = []
        for t in range(rt.THREADS):
            seg = rt.seg(t)
            if seg is None:
                views.append(None)
            else:
                k = lay.local_count(t)
                views.append(seg[base:base + k * dt.itemsize].view(dt))
        self._views = views
        self._scratch = np.empty(1, dt)
        self.strict = _Strict(self)
        self._every = self._tick = rt.poll_every

    def _attend(self) -> None:
        """Every ``poll_every``-th element access in a job that spans nodes: one poll, so
        requests from other nodes do not wait until this thread next waits."""
        self._tick = self._every
        try:
            self._ep.poll()
        except AMContextError:  # an access inside a handler: the drain running serves them
            pass

    def __repr__(self) -> str:
        return f"<upc {self.name}>"

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return self._n

    @property
    def layout(self) -> Layout:
        """The index arithmetic of this array (:class:`upc_rt._layout.Layout`)."""
        return self._lay

    @property
    def local(self) -> np.ndarray:
        """My elements as a writable 1-D numpy view (no copy), in local order: rising
        global (row-major flattened) index, block after block; :meth:`local_indices` gives
        their global indices."""
        return self._views[self._rt.MYTHREAD]

    def local_indices(self) -> Any:
        """The global indices of my elements (those with affinity to MYTHREAD), in the order
        :attr:`local` holds them: ``X.local[k]`` is the element at ``X.local_indices()[k]``.

        That order is rising global order: my blocks one after another (blocks MYTHREAD,
        MYTHREAD + THREADS, ... of the row-major flattened array), each block's elements in
        order. A 1-D array gives an int64 array; an n-D array a tuple of int64 arrays, one
        per dimension (as ``np.unravel_index`` gives), so ``ref[X.local_indices()]`` lines
        up with ``X.local`` for a numpy array ``ref`` of the same shape, and
        ``zip(*X.local_indices())`` gives index tuples. A new array on every call.
        """
        flat = self._lay.thread_indices(self._rt.MYTHREAD)
        if len(self.shape) == 1:
            return flat
        return tuple(a.astype(np.int64, copy=False) for a in np.unravel_index(flat, self.shape))

    def _upc_storage(self) -> SharedPtr:
        return SharedPtr(0, 0, self.base, self._E, self._B, self._T, alloc=self._alloc)

    # -- elements -------------------------------------------------------------------------
    def _index(self, i: Any) -> int:
        n = self._n
        if isinstance(i, tuple):
            if len(i) != len(self.shape) or not all(type(k) is int or isinstance(k, np.integer)
                                                    for k in i):
                raise IndexError(f"{self.name}: index {i!r} does not name one element of "
                                 f"shape {self.shape}")
            flat = 0
            for k, d in zip(i, self.shape, strict=True):
                k = int(k)
                if k < 0:
                    k += d
                if not 0 <= k < d:
                    raise IndexError(f"{self.name}: index {i!r} is out of range for shape "
                                     f"{self.shape}")
                flat = flat * d + k
            return flat
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self.name}: index {i - n if i < 0 else i} is out of range: "
                             f"the array has {n} elements")
        return i

    def _element(self, key: Any) -> bool:
        """Whether ``key`` names one element (else it is a slice or an index array)."""
        if isinstance(key, bool):
            return False
        if isinstance(key, int | np.integer):
            return len(self.shape) == 1
        return isinstance(key, tuple) and len(key) == len(self.shape) and all(
            isinstance(k, int | np.integer) and not isinstance(k, bool) for k in key)

    def _where(self, i: int) -> tuple[int, int]:
        B = self._B
        if B == 1:
            T = self._T
            return i % T, i // T
        if B == 0:
            return 0, i
        q = i // B
        T = self._T
        return q % T, (q // T) * B + i - q * B

    def __getitem__(self, key: Any) -> Any:
        if self._every:
            self._tick -= 1
            if not self._tick:
                self._attend()
        if type(key) is int and 0 <= key < self._fast:  # the hot path, _where inlined
            B = self._B
            if B == 1:
                t = key % self._T
                li = key // self._T
            elif B:
                q = key // B
                t = q % self._T
                li = (q // self._T) * B + key - q * B
            else:
                t, li = 0, key
            v = self._views[t]
            if v is not None:
                return v[li] if self._plain else _snapshot(v, li)
            return self._get_remote(t, li)
        if self._element(key):
            t, li = self._where(self._index(key))
            v = self._views[t]
            if v is not None:
                return v[li] if self._plain else _snapshot(v, li)
            return self._get_remote(t, li)
        return bulk_get(self, key)

    def _get_remote(self, t: int, li: int, cached: bool = True) -> Any:
        """Element ``li`` of thread ``t`` (another node), read now: a value of its own (a
        structured element gets a buffer of its own, not the shared scratch one)."""
        addr = self.base + li * self._E
        cache = self._rt.cache
        if cache is not None and cached:
            got = np.frombuffer(cache.read(t, addr, self._E), self.dtype)
            return got[0] if self._plain else _own_bytes(got)[0]  # writable, as every read
        s = self._scratch if self._plain else np.empty(1, self.dtype)
        if self._rt.nb is not None:
            self._rt.nb.touch(t, addr, self._E, False)
        self._ep.get(t, addr, self._E, s)
        return s[0]

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._every:
            self._tick -= 1
            if not self._tick:
                self._attend()
        if type(key) is int and 0 <= key < self._fast:  # the hot path, _where inlined
            B = self._B
            if B == 1:
                t = key % self._T
                li = key // self._T
            elif B:
                q = key // B
                t = q % self._T
                li = (q // self._T) * B + key - q * B
            else:
                t, li = 0, key
        elif self._element(key):
            t, li = self._where(self._index(key))
        else:
            bulk_put(self, key, value)
            return
        v = self._views[t]
        if v is not None and (self._float or not isinstance(value, float | np.floating)) \
                and self._plain:
            try:
                v[li] = value
                return
            except (OverflowError, TypeError, ValueError):
                pass  # fit() below says what is wrong
        data = fit(value, self.dtype, f"{self.name}[{key!r}]")
        if data.ndim:
            raise ValueError(f"{self.name}[{key!r}]: one element takes a scalar, got shape "
                             f"{data.shape}")
        if v is not None:
            v[li] = data
            return
        self._put_remote(t, li, data, strict=False)

    def _put_remote(self, t: int, li: int, data: np.ndarray, strict: bool) -> None:
        addr = self.base + li * self._E
        cache = self._rt.cache
        if self._rt.nb is not None:
            self._rt.nb.touch(t, addr, self._E, True)
        if cache is not None and not strict:
            cache.write(t, addr, data.tobytes())
        elif strict:
            self._ep.put(t, addr, data.tobytes())
        else:
            self._ep.put_nbi(t, addr, data.tobytes())

    def ptr(self, i: Any = 0) -> SharedPtr:
        """The pointer-to-shared of element ``i`` (``X.ptr(len)`` is the one-past-end
        pointer). Raises IndexError when ``i`` is out of range."""
        if i == self._n:
            return self.ptr(self._n - 1) + 1 if self._n else self._upc_storage()
        t, li = self._where(self._index(i))
        phase = 0 if self._B == 0 else li % self._B
        return SharedPtr(t, phase, self.base + li * self._E, self._E, self._B, self._T,
                         alloc=self._alloc)


class _Strict:
    """``X.strict[i]``: a strict access (fence, the access, fence: UPC 1.2 §5.1.2.3)."""

    __slots__ = ("_a",)

    def __init__(self, a: SharedArray) -> None:
        self._a = a

    def __getitem__(self, key: Any) -> Any:
        from ._sync import fence

        a = self._a
        fence()
        if a._rt.cache is None or not a._element(key):
            out = a[key]
        else:  # a strict read is never served from the cache
            t, li = a._where(a._index(key))
            v = a._views[t]
            if v is None:
                out = a._get_remote(t, li, cached=False)
            else:
                out = v[li] if a._plain else _snapshot(v, li)
        fence()
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        from ._sync import fence

        a = self._a
        fence()
        if a._element(key):
            t, li = a._where(a._index(key))
            data = fit(value, a.dtype, f"{a.name}.strict[{key!r}]")
            v = a._views[t]
            if v is not None:
                v[li] = data
            else:
                a._put_remote(t, li, data, strict=True)
        else:
            a[key] = value
        fence()
