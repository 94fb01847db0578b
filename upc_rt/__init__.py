"""upc_rt: a UPC runtime on amnet (docs/upc.md).

``import upc_rt as upc; upc.init()`` then ``upc.MYTHREAD``, ``upc.THREADS``, shared arrays
(``upc.shared_array``), pointers-to-shared, the shared heap (``all_alloc``, ``global_alloc``,
``alloc``, ``free``), bulk copies (``memget``/``memput``/``memcpy``/``memset`` and their
UPC 1.3 ``_nb`` forms), barriers and fences, locks, UPC 1.3 atomics, ``forall`` and the
optional remote-reference cache.

upc_rt reaches amnet only through its public extension interface (``amnet.Extension``,
``amnet.Port``): it is built the way a runtime outside the amnet repository would be.
``upc.init(runtime="shmem")`` (``AMNET_UPC_RUNTIME=shmem``) runs it over OpenSHMEM instead,
every remote operation a public call of shmem_rt (``upc_rt/_net.py``, docs/upc.md).
``MYTHREAD`` and ``THREADS`` are resolved per rank-thread: rank-threads of one process share
this module.
"""

from __future__ import annotations

from typing import Any

from amnet.coll import ADD as ADD
from amnet.coll import AND as AND
from amnet.coll import FUNC as FUNC
from amnet.coll import LOGAND as LOGAND
from amnet.coll import LOGOR as LOGOR
from amnet.coll import MAX as MAX
from amnet.coll import MIN as MIN
from amnet.coll import MULT as MULT
from amnet.coll import NONCOMM_FUNC as NONCOMM_FUNC
from amnet.coll import OR as OR
from amnet.coll import XOR as XOR

from ._alloc import all_alloc as all_alloc
from ._alloc import alloc as alloc
from ._alloc import free as free
from ._alloc import global_alloc as global_alloc
from ._array import SharedArray as SharedArray
from ._array import shared_array as shared_array
from ._atomic import AtomicDomain as AtomicDomain
from ._atomic import atomic_domain as atomic_domain
from ._atomic import forall as forall
from ._cache import CacheStats as CacheStats
from ._coll import IN_ALLSYNC as IN_ALLSYNC
from ._coll import IN_MYSYNC as IN_MYSYNC
from ._coll import IN_NOSYNC as IN_NOSYNC
from ._coll import OUT_ALLSYNC as OUT_ALLSYNC
from ._coll import OUT_MYSYNC as OUT_MYSYNC
from ._coll import OUT_NOSYNC as OUT_NOSYNC
from ._coll import all_broadcast as all_broadcast
from ._coll import all_exchange as all_exchange
from ._coll import all_gather as all_gather
from ._coll import all_gather_all as all_gather_all
from ._coll import all_permute as all_permute
from ._coll import all_prefix_reduce as all_prefix_reduce
from ._coll import all_reduce as all_reduce
from ._coll import all_scatter as all_scatter
from ._copy import CopyHandle as CopyHandle
from ._copy import memcpy as memcpy
from ._copy import memcpy_nb as memcpy_nb
from ._copy import memget as memget
from ._copy import memget_nb as memget_nb
from ._copy import memput as memput
from ._copy import memput_nb as memput_nb
from ._copy import memset as memset
from ._errors import BoundsError as BoundsError
from ._errors import LockError as LockError
from ._errors import NotInitialized as NotInitialized
from ._errors import UPCError as UPCError
from ._init import init as init
from ._layout import SharedPtr as SharedPtr
from ._layout import addrfield as addrfield
from ._layout import affinitysize as _affinitysize
from ._layout import phaseof as phaseof
from ._layout import resetphase as resetphase
from ._layout import threadof as threadof
from ._locks import Lock as Lock
from ._locks import all_lock_alloc as all_lock_alloc
from ._locks import global_lock_alloc as global_lock_alloc
from ._locks import lock_free as lock_free
from ._rt import EXTENSION as EXTENSION
from ._rt import current as _current
from ._sync import barrier as barrier
from ._sync import fence as fence
from ._sync import notify as notify
from ._sync import poll as poll
from ._sync import wait as wait

for _cls in (BoundsError, LockError, NotInitialized, UPCError):
    _cls.__module__ = __name__
del _cls


def __getattr__(name: str) -> Any:
    # MYTHREAD / THREADS: the calling rank-thread's, looked up on every access (also by
    # ``from upc_rt import MYTHREAD``, which then holds the importing thread's value)
    if name in ("MYTHREAD", "THREADS"):
        rt = _current(f"upc_rt.{name}")
        return rt.MYTHREAD if name == "MYTHREAD" else rt.THREADS
    raise AttributeError(f"module 'upc_rt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "MYTHREAD", "THREADS"})


def affinitysize(totalsize: int, nbytes: int, threadid: int) -> int:
    """``upc_affinitysize``: bytes of a shared object of ``totalsize`` bytes in blocks of
    ``nbytes`` that live on thread ``threadid``.

    Raises: ValueError for negative sizes or a thread out of range.
    """
    return _affinitysize(totalsize, nbytes, threadid, _current("upc.affinitysize()").THREADS)


def localsizeof(x: SharedArray) -> int:
    """``upc_localsizeof``: bytes of the largest part of ``x`` on one thread."""
    return x.layout.max_local() * x.layout.elemsize


def blocksizeof(x: SharedArray | SharedPtr) -> int:
    """``upc_blocksizeof``: the block size (elements; 0 for indefinite)."""
    return x.blocksize


def elemsizeof(x: SharedArray | SharedPtr) -> int:
    """``upc_elemsizeof``: bytes of one element."""
    return x.elemsize if isinstance(x, SharedPtr) else x.dtype.itemsize


def cast(p: SharedPtr) -> Any:
    """UPC 1.3 ``upc_cast``: a numpy uint8 view of the memory at ``p`` onward (to the end of
    its part on that thread) when it is on my node, else None.

    Raises: TypeError when ``p`` is not a pointer-to-shared.
    """
    from ._alloc import Allocation

    if not isinstance(p, SharedPtr):
        raise TypeError(f"upc.cast() takes a pointer-to-shared, got {type(p).__name__}")
    seg = _current("upc.cast()").seg(p.thread)
    if seg is None or p.is_null:
        return None
    a = p.alloc
    hi = a.extent(p.thread)[1] if isinstance(a, Allocation) else len(seg)
    return seg[p.addr:hi]


def cache_stats() -> CacheStats:
    """The remote-reference cache's counters (all zero, ``enabled=False``, when it is off)."""
    c = _current("upc.cache_stats()").cache
    return CacheStats(0, 0, 0, 0, 0, False) if c is None else c.stats()


__all__ = [
    "ADD",
    "AND",
    "EXTENSION",
    "FUNC",
    "IN_ALLSYNC",
    "IN_MYSYNC",
    "IN_NOSYNC",
    "LOGAND",
    "LOGOR",
    "MAX",
    "MIN",
    "MULT",
    "NONCOMM_FUNC",
    "OR",
    "OUT_ALLSYNC",
    "OUT_MYSYNC",
    "OUT_NOSYNC",
    "XOR",
    "AtomicDomain",
    "BoundsError",
    "CacheStats",
    "CopyHandle",
    "Lock",
    "LockError",
    "NotInitialized",
    "SharedArray",
    "SharedPtr",
    "UPCError",
    "addrfield",
    "affinitysize",
    "all_alloc",
    "all_broadcast",
    "all_exchange",
    "all_gather",
    "all_gather_all",
    "all_lock_alloc",
    "all_permute",
    "all_prefix_reduce",
    "all_reduce",
    "all_scatter",
    "alloc",
    "atomic_domain",
    "barrier",
    "blocksizeof",
    "cache_stats",
    "cast",
    "elemsizeof",
    "fence",
    "forall",
    "free",
    "global_alloc",
    "global_lock_alloc",
    "init",
    "localsizeof",
    "lock_free",
    "memcpy",
    "memcpy_nb",
    "memget",
    "memget_nb",
    "memput",
    "memput_nb",
    "memset",
    "notify",
    "phaseof",
    "poll",
    "resetphase",
    "shared_array",
    "threadof",
    "wait",
]
