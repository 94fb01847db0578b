"""The UPC collectives (UPC Collective Operations Specification 1.0; DESIGN §11):
``all_broadcast``, ``all_scatter``, ``all_gather``, ``all_gather_all``, ``all_exchange``,
``all_permute``, ``all_reduce`` and ``all_prefix_reduce``, on amnet's collectives
(``ep.coll``, the world team: team index = MYTHREAD).

Source and destination are pointers-to-shared (or shared arrays, meaning their first
element) interpreted as the specification says, e.g. for ``all_broadcast`` the source as
``shared [] char[nbytes]`` and the destination as ``shared [nbytes] char[nbytes*THREADS]``:
block i on thread ``(threadof(dst) + i) % THREADS``. A shared array whose declared layout
does not fit is refused (ValueError naming the expected and actual block sizes); every
block's bounds are checked on every thread before anything moves, so a bad call fails
everywhere (and a member whose arguments amnet.coll refuses still takes part, so the others
raise CollectiveMismatch rather than wait).

Synchronisation (``flags``: one ``IN_*`` and one ``OUT_*``; a missing one means ALLSYNC).
amnet's collectives move data by messages, and each thread reads and writes only its own
memory while it is inside the call, so MYSYNC holds by construction: IN_MYSYNC and
IN_NOSYNC start at once, OUT_MYSYNC and OUT_NOSYNC return as soon as my part is done.
IN_ALLSYNC adds a barrier before (nobody's data is touched before every thread has
entered), OUT_ALLSYNC one after. Every call first completes my own relaxed writes (a fence).

Over shmem (``upc.init(runtime="shmem")``) the world team is shmem_rt's
(:class:`upc_rt._net._World`): broadcast is ``shmem.broadcast``, gather and gather_all
``shmem.fcollect``, exchange and permute ``shmem.alltoall``, scatter a broadcast of the
root's blocks; ``all_reduce`` of an op OpenSHMEM has (ADD, MULT, MIN, MAX, AND, OR, XOR)
is the paper's: each thread reduces its own elements, then one ``shmem.reduce`` combines
them. ``algorithm`` is amnet.coll's and is not used then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from amnet import CollectiveMismatch
from amnet.coll import ADD, AND, MAX, MIN, MULT, OP_NAMES, OR, XOR, check_op, combine, fold, scan

from ._alloc import check_span
from ._layout import Layout, SharedPtr
from ._rt import Runtime, current, user_site
from ._sync import barrier, fence

IN_NOSYNC, IN_MYSYNC, IN_ALLSYNC = 1, 2, 4
OUT_NOSYNC, OUT_MYSYNC, OUT_ALLSYNC = 8, 16, 32
_IN, _OUT = IN_NOSYNC | IN_MYSYNC | IN_ALLSYNC, OUT_NOSYNC | OUT_MYSYNC | OUT_ALLSYNC


def _flags(flags: Any, what: str) -> tuple[int, int]:
    if isinstance(flags, bool) or not isinstance(flags, int | np.integer) or \
            flags & ~(_IN | _OUT):
        raise ValueError(f"{what}: flags must combine one IN_* and one OUT_* flag, got "
                         f"{flags!r}")
    i, o = int(flags) & _IN or IN_ALLSYNC, int(flags) & _OUT or OUT_ALLSYNC
    if i & (i - 1) or o & (o - 1):
        raise ValueError(f"{what}: flags {flags} name two IN_* or two OUT_* modes")
    return i, o


class _Call:
    """One collective call: its checks, its synchronisation, its world team."""

    def __init__(self, what: str, flags: Any) -> None:
        self.what = f"upc.{what}()"
        self.rt: Runtime = current(self.what)
        self.rt.port.forbid_in_handler(self.what)
        self.inmode, self.outmode = _flags(flags, self.what)
        self.T, self.me = self.rt.THREADS, self.rt.MYTHREAD
        self.team = self.rt.net.coll.world

    def ptr(self, x: Any, name: str, block: int | None, at_least: bool = False) -> SharedPtr:
        """``x`` as a pointer; a shared array's declared block (bytes) must be ``block``
        (0: indefinite), or at least it when ``at_least``."""
        from ._array import SharedArray

        if isinstance(x, SharedArray):
            have = x.blocksize * x.dtype.itemsize
            ok = block is None or have == block or (at_least and (have == 0 or have >= block))
            if not ok:
                want = ("indefinite (0) or at least " if at_least else "") + f"{block} bytes"
                raise ValueError(f"{self.what}: {name} is {x.name}, whose blocks are {have} "
                                 f"bytes; this collective needs blocks of {want}")
            return x._upc_storage()
        if not isinstance(x, SharedPtr):
            raise TypeError(f"{self.what}: {name} must be a pointer-to-shared or a shared "
                            f"array, got {type(x).__name__}")
        if x.is_null:
            raise ValueError(f"{self.what}: {name} is a null pointer")
        return x

    def block(self, p: SharedPtr, size: int, i: int) -> tuple[int, int]:
        """(thread, address) of block ``i`` of ``p`` read as ``shared [size] char[]``."""
        g = p.thread + i
        return g % self.T, p.addr + (g // self.T) * size

    def check(self, p: SharedPtr, thread: int, addr: int, n: int, name: str) -> None:
        check_span(p, thread, addr, n, self.rt.segment_size, f"{self.what} ({name})")

    def blocks(self, p: SharedPtr, size: int, n: int, name: str) -> np.ndarray:
        """Check every thread's block of ``p`` (blocks of ``size`` bytes, ``n`` used), then
        return my own as a uint8 view."""
        mine = None
        for i in range(self.T):
            t, addr = self.block(p, size, i)
            self.check(p, t, addr, n, name)
            if t == self.me:
                mine = addr
        assert mine is not None
        return self.rt.seg(self.me)[mine:mine + n]

    def one(self, p: SharedPtr, n: int, name: str) -> tuple[int, np.ndarray | None]:
        """(its thread, my view of it or None) of ``n`` bytes on one thread at ``p``."""
        self.check(p, p.thread, p.addr, n, name)
        if p.thread != self.me:
            return p.thread, None
        return p.thread, self.rt.seg(self.me)[p.addr:p.addr + n]

    def enter(self) -> None:
        if self.inmode == IN_ALLSYNC:
            barrier()
        else:
            fence()

    def run(self, op: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """The team's collective ``op(*args, **kw)`` between the call's synchronisation
        (``enter``, ``leave``)."""
        self.enter()
        op(*args, **kw)
        self.leave()

    def leave(self) -> None:
        if self.outmode == OUT_ALLSYNC:
            barrier()
        elif self.rt.nb is not None:  # auto_nb: a phase ends with the collective
            self.rt.nb.sync(user_site())


def _nbytes(n: Any, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n <= 0:
        raise ValueError(f"upc.{what}(): nbytes must be an int >= 1, got {n!r}")
    return int(n)


def _rooted(what: str, dst: Any, src: Any, nbytes: Any, flags: Any, *, at_src: bool,
            each: bool) -> tuple[_Call, np.ndarray, int, np.ndarray | None]:
    """The checks of a rooted call (broadcast, scatter, gather), one owner for the three:
    one side (src when ``at_src``, else dst) is the root's ``shared [] char[m]``, m =
    nbytes, times THREADS when ``each`` (a block for each thread); the other side one block
    of nbytes on every thread. Returns the call, my block, the root thread and my view of
    the root's bytes (None elsewhere)."""
    n = _nbytes(nbytes, what)
    c = _Call(what, flags)
    m = n * c.T if each else n
    s = c.ptr(src, "src", m if at_src else n, at_least=at_src)
    d = c.ptr(dst, "dst", n if at_src else m, at_least=not at_src)
    if at_src:
        mine = c.blocks(d, n, n, "dst")
        root, view = c.one(s, m, "src")
    else:
        mine = c.blocks(s, n, n, "src")
        root, view = c.one(d, m, "dst")
    return c, mine, root, view


def all_broadcast(dst: Any, src: Any, nbytes: int, flags: int = 0,
                  algorithm: str | None = None) -> None:
    """``upc_all_broadcast``: src (``shared [] char[nbytes]``) into every block of dst
    (``shared [nbytes] char[nbytes*THREADS]``)."""
    c, mine, root, sv = _rooted("all_broadcast", dst, src, nbytes, flags, at_src=True, each=False)
    c.run(c.team.broadcast, mine, sv, root=root, algorithm=algorithm)


def all_scatter(dst: Any, src: Any, nbytes: int, flags: int = 0,
                algorithm: str | None = None) -> None:
    """``upc_all_scatter``: block i of src (``shared [] char[nbytes*THREADS]``) to the
    block of dst on thread i."""
    c, mine, root, sv = _rooted("all_scatter", dst, src, nbytes, flags, at_src=True, each=True)
    c.run(c.team.scatter, mine, sv, root=root, algorithm=algorithm)


def all_gather(dst: Any, src: Any, nbytes: int, flags: int = 0,
               algorithm: str | None = None) -> None:
    """``upc_all_gather``: thread i's block of src into block i of dst (``shared []
    char[nbytes*THREADS]``)."""
    c, mine, root, dv = _rooted("all_gather", dst, src, nbytes, flags, at_src=False, each=True)
    c.run(c.team.gather, dv, mine, root=root, algorithm=algorithm)


def _spread(what: str, dst: Any, src: Any, nbytes: Any, flags: Any, *, src_each: bool,
            dst_each: bool) -> tuple[_Call, np.ndarray, np.ndarray]:
    """The checks of a call between blocks on every thread (gather_all, exchange, permute),
    one owner for the three: src and dst each one block per thread of nbytes, times THREADS
    when ``src_each``, ``dst_each``. Returns the call and my blocks of src and dst."""
    n = _nbytes(nbytes, what)
    c = _Call(what, flags)
    sn, dn = n * c.T if src_each else n, n * c.T if dst_each else n
    s = c.ptr(src, "src", sn)
    d = c.ptr(dst, "dst", dn)
    return c, c.blocks(s, sn, sn, "src"), c.blocks(d, dn, dn, "dst")


def all_gather_all(dst: Any, src: Any, nbytes: int, flags: int = 0,
                   algorithm: str | None = None) -> None:
    """``upc_all_gather_all``: thread i's block of src into block i of every thread's part
    of dst (``shared [nbytes*THREADS] char[nbytes*THREADS*THREADS]``)."""
    c, sv, dv = _spread("all_gather_all", dst, src, nbytes, flags, src_each=False, dst_each=True)
    c.run(c.team.gather_all, dv, sv, algorithm=algorithm)


def all_exchange(dst: Any, src: Any, nbytes: int, flags: int = 0,
                 algorithm: str | None = None) -> None:
    """``upc_all_exchange``: block j of thread i's part of src into block i of thread j's
    part of dst (both ``shared [nbytes*THREADS] char[nbytes*THREADS*THREADS]``)."""
    c, sv, dv = _spread("all_exchange", dst, src, nbytes, flags, src_each=True, dst_each=True)
    c.run(c.team.exchange, dv, sv, algorithm=algorithm)


def all_permute(dst: Any, src: Any, perm: Any, nbytes: int, flags: int = 0,
                algorithm: str | None = None) -> None:
    """``upc_all_permute``: thread i's block of src into the block of dst on thread
    ``perm[i]`` (``perm``: a shared int array of THREADS elements, or a sequence)."""
    from ._array import SharedArray

    c, sv, dv = _spread("all_permute", dst, src, nbytes, flags, src_each=False,
                        dst_each=False)
    if isinstance(perm, SharedArray) and perm.size < c.T:
        raise ValueError(f"{c.what}: perm holds {perm.size} elements, fewer than THREADS "
                         f"({c.T})")
    c.enter()  # then perm is read: with IN_ALLSYNC every thread has written its entry
    p: Sequence[int] = perm[0:c.T].tolist() if isinstance(perm, SharedArray) else perm
    c.team.permute(dv, sv, p, algorithm=algorithm)
    c.leave()


# -- reductions ------------------------------------------------------------------------------
class _Red:
    """The elements of a reduction's source: layout, my blocks, the op."""

    def __init__(self, c: _Call, src: Any, op: Any, nelems: Any, blk_size: Any,
                 func: Callable | None, dtype: Any) -> None:
        from ._array import SharedArray

        if isinstance(src, SharedArray):
            dt = src.dtype if dtype is None else np.dtype(dtype)
            if dt != src.dtype:
                raise ValueError(f"{c.what}: dtype {dt} differs from src's {src.dtype}")
            if blk_size is not None and blk_size != src.blocksize:
                raise ValueError(f"{c.what}: blk_size {blk_size} differs from src's block "
                                 f"size, {src.blocksize} elements")
            blk_size = src.blocksize
            p = src._upc_storage()
        elif isinstance(src, SharedPtr):
            if dtype is None:
                raise TypeError(f"{c.what}: a pointer src needs dtype")
            dt = np.dtype(dtype)
            if dt.itemsize != src.elemsize:
                raise ValueError(f"{c.what}: dtype {dt} is {dt.itemsize} bytes, src's "
                                 f"elements {src.elemsize}")
            p = src
        else:
            raise TypeError(f"{c.what}: src must be a shared array or a pointer-to-shared, "
                            f"got {type(src).__name__}")
        if p.thread != 0 or p.phase != 0:
            raise ValueError(f"{c.what}: src must point at the start of a block on thread 0")
        for name, v in (("nelems", nelems), ("blk_size", blk_size)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise ValueError(f"{c.what}: {name} must be an int >= 0, got {v!r}")
        if nelems == 0:
            raise ValueError(f"{c.what}: nelems must be at least 1")
        self.op = check_op(op, dt, func, c.what)
        self.func, self.dt, self.c = func, dt, c
        self.lay = Layout(int(nelems), dt.itemsize, int(blk_size), c.T, p.addr)
        for t in range(c.T):  # every thread's part, on every thread: all fail alike
            c.check(p, t, p.addr, self.lay.local_count(t) * dt.itemsize, "src")
        k = self.lay.local_count(c.me)
        self.p = p
        self.mine = c.rt.seg(c.me)[p.addr:p.addr + k * dt.itemsize].view(dt)
        b = self.lay.blocksize or int(nelems)
        self.B = b
        self.nblocks = -(-int(nelems) // b)
        self.per = -(-self.nblocks // c.T)  # local blocks a thread has at most

    def my_blocks(self) -> list[np.ndarray]:
        return [self.mine[k * self.B:(k + 1) * self.B] for k in range(-(-len(self.mine) //
                                                                        self.B))]

    def fold(self, x: np.ndarray) -> np.ndarray:
        """``x[0] op x[1] op ...`` in order, as a 1-element array."""
        return fold(self.op, x, self.func)

    def totals(self, algorithm: str | None) -> np.ndarray:
        """Every block's total in global block order (a gather-to-all of my blocks'),
        behind a header with what this thread called: every thread compares them all and
        raises the same amnet.CollectiveMismatch when threads passed different ops or
        layouts."""
        T = self.c.T
        row = np.zeros(self.per, [("has", "u1"), ("v", self.dt)])
        for k, blk in enumerate(self.my_blocks()):
            row[k] = (1, self.fold(blk)[0])
        head = self.head()
        mine = np.concatenate([head.view(np.uint8), row.view(np.uint8)])
        allb = np.zeros(mine.size * T, np.uint8)
        self.c.team.gather_all(allb, mine, algorithm=algorithm)
        allb = allb.reshape(T, mine.size)
        self.agree(allb[:, :head.nbytes].copy().view(np.int64))
        allr = allb[:, head.nbytes:].copy().reshape(-1).view(row.dtype)
        g = np.arange(self.nblocks)
        return allr[(g % T) * self.per + g // T]["v"]


    def head(self) -> np.ndarray:
        """What this thread called: op, nelems, blk_size, dtype."""
        return np.array([self.op, self.lay.n, self.lay.blocksize, self.dt.num], np.int64)

    def agree(self, heads: np.ndarray) -> None:
        """Raise the same amnet.CollectiveMismatch on every thread when the threads'
        ``heads`` (one row each) differ."""
        for t in range(1, self.c.T):
            if not np.array_equal(heads[t], heads[0]):
                raise CollectiveMismatch(f"{self.c.what}: the threads disagree: thread {t} "
                                         f"called it with {_said(heads[t])}, thread 0 with "
                                         f"{_said(heads[0])}")

    def shmem_total(self) -> np.ndarray | None:
        """Over shmem, for an op OpenSHMEM reduces: the paper's reduction, my elements
        reduced here, then one ``shmem.reduce`` of every thread's (after the threads' calls
        are compared). None for the other ops (their block totals travel by fcollect)."""
        shm = self.c.rt.shm
        name = _SHMEM_OPS.get(self.op)
        if shm is None or name is None or self.dt.kind not in "iuf" or (
                name in ("and", "or", "xor") and self.dt.kind == "f"):
            return None
        T = self.c.T
        heads = np.zeros((T, 4), np.int64)
        shm.shmem.fcollect(heads.reshape(-1), self.head())
        self.agree(heads)
        mine = self.fold(self.mine) if len(self.mine) else _identity(self.op, self.dt)
        out = np.zeros(1, self.dt)
        shm.shmem.reduce(out, np.ascontiguousarray(mine, self.dt), name)
        return out


_SHMEM_OPS = {ADD: "sum", MULT: "prod", MIN: "min", MAX: "max", AND: "and", OR: "or",
              XOR: "xor"}


def _identity(op: int, dt: np.dtype) -> np.ndarray:
    """The identity of ``op`` on ``dt`` (what a thread without elements contributes)."""
    if op in (MIN, MAX):
        if dt.kind == "f":
            v = np.inf if op == MIN else -np.inf
        else:
            info = np.iinfo(dt)
            v = info.max if op == MIN else info.min
    elif op == MULT:
        v = 1
    elif op == AND:
        v = -1 if dt.kind == "i" else np.iinfo(dt).max
    else:
        v = 0
    return np.array([v], dt)


def _said(head: np.ndarray) -> str:
    op, nelems, blk, num = (int(x) for x in head)
    dt = next((np.dtype(c) for c in np.typecodes["All"] if np.dtype(c).num == num), num)
    return f"op {OP_NAMES.get(op, op)}, nelems {nelems}, blk_size {blk}, dtype {dt}"


def all_reduce(dst: Any, src: Any, op: Any, nelems: int, blk_size: int | None = None,
               func: Callable | None = None, flags: int = 0, dtype: Any = None,
               algorithm: str | None = None) -> None:
    """``upc_all_reduceT``: ``*dst`` = src[0] op src[1] op ... op src[nelems-1] (src a
    shared array, or a pointer with ``dtype``, of block size ``blk_size`` elements; element
    order kept for NONCOMM_FUNC). The threads' block totals travel by an amnet.coll
    gather-to-all (``algorithm``: one of its algorithms)."""
    c = _Call("all_reduce", flags)
    r = _Red(c, src, op, nelems, blk_size, func, dtype)
    d = c.ptr(dst, "dst", None)
    root, dv = c.one(d, r.dt.itemsize, "dst")
    c.enter()
    total = r.shmem_total()
    if total is None:
        total = r.fold(r.totals(algorithm))
    if c.me == root:
        dv.view(r.dt)[0] = total[0]
    c.leave()


def all_prefix_reduce(dst: Any, src: Any, op: Any, nelems: int, blk_size: int | None = None,
                      func: Callable | None = None, flags: int = 0, dtype: Any = None,
                      algorithm: str | None = None) -> None:
    """``upc_all_prefix_reduceT``: dst[i] = src[0] op ... op src[i] for i < nelems (dst
    laid out as src; ``algorithm`` as for :func:`all_reduce`)."""
    from ._array import SharedArray

    c = _Call("all_prefix_reduce", flags)
    r = _Red(c, src, op, nelems, blk_size, func, dtype)
    if isinstance(dst, SharedArray) and (dst.dtype != r.dt or dst.blocksize != r.lay.blocksize):
        raise ValueError(f"{c.what}: dst is {dst.name}; it must be laid out as src "
                         f"({r.dt}, block size {r.lay.blocksize})")
    d = c.ptr(dst, "dst", None)
    if d.thread != 0 or d.phase != 0:
        raise ValueError(f"{c.what}: dst must point at the start of a block on thread 0")
    for t in range(c.T):
        c.check(d, t, d.addr, r.lay.local_count(t) * r.dt.itemsize, "dst")
    out = c.rt.seg(c.me)[d.addr:d.addr + len(r.mine) * r.dt.itemsize].view(r.dt)
    c.enter()
    tot = r.totals(algorithm)
    T, B = c.T, r.B
    pre: np.ndarray | None = None  # the prefix before global block g
    befores = {}
    for g in range(r.nblocks):
        if g % T == c.me:
            befores[g // T] = pre
        pre = tot[g:g + 1].copy() if pre is None else combine(r.op, pre, tot[g:g + 1],
                                                               r.func)
    for k, blk in enumerate(r.my_blocks()):
        res = scan(r.op, blk, r.func)
        if befores[k] is not None:
            res = combine(r.op, np.broadcast_to(befores[k], res.shape).copy(), res, r.func)
        out[k * B:k * B + len(blk)] = res
    c.leave()
