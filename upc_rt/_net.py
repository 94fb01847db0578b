"""upc_rt over OpenSHMEM: ``upc.init(runtime="shmem")`` (``AMNET_UPC_RUNTIME=shmem``).

The design of *An OpenSHMEM runtime for UPC* (chapter IV), on shmem_rt's public calls only.
upc_rt keeps all its logic; what changes is the handful of remote primitives it uses, which
:class:`ShmemNet` provides with the signatures of the amnet endpoint's (``rt.net``: the
endpoint itself in amnet mode, so that mode is unchanged):

- memory: at init every thread takes one symmetric region, ``shmem.zeros(S, "u1")``; upc_rt's
  heaps (the symmetric one and each thread's local one) run inside it, so upc_rt's addresses
  are offsets in the region, and bytes ``[a, a + n)`` of thread ``t`` are
  ``region[a:a + n]`` on PE ``t``: ``shmem.put``/``get`` of that view (``shmem.ptr`` gives
  the region of a thread on my node, read and written directly);
- the heap allocators' state: each thread's (and, on thread 0, the symmetric heap's) is a
  blob in that thread's region, read and written with ``shmem.get``/``put`` under a SHMEM
  lock (one symmetric lock word per thread): upc_rt's allocation calls run on it where
  amnet mode sends them as CALL messages;
- barriers: ``notify`` is an atomic add to every thread's barrier counter (one counter per
  phase parity), ``wait`` a ``shmem.wait_until`` on mine reaching THREADS; a name is put in
  my slot on every thread first (atomic set), so ``wait`` compares every thread's;
- locks: SHMEM locks (set/test/clear_lock) on lock words allocated in the symmetric heap;
- atomics: shmem atomics (fetch, set, swap, compare_swap, fetch_add/and/or/xor); min, max
  and float arithmetic as compare-and-swap loops on the word's bits;
- collectives: shmem broadcast, fcollect, alltoall and reduce on the world team.

The control words sit after the heaps' part of the region (``CTL`` on), at the same offset
on every thread.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np

from amnet import BarrierMismatch

from ._heap import Heap
from ._rt import _pack, _unpack

BLOB = 64 << 10  # bytes of a thread's allocator state (msgpack behind its length)
FREED_LOCK = 0xDEADBEEF0BADF00D  # a lock word after upc.lock_free(): never a ticket state
_MASK = {4: (1 << 32) - 1, 8: (1 << 64) - 1}


def region_size(segment_size: int) -> int:
    """Bytes of the symmetric region upc_rt takes: most of the segment, leaving shmem_rt
    room for its own words and a few small allocations."""
    return (segment_size - max(segment_size // 16, 64 << 10)) // 64 * 64


class _Done:
    """The handle of an operation that completed when it started."""

    done = True

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def wait(self) -> Any:
        return self.value

    def test(self) -> bool:
        return True


class _PutHandle(_Done):
    """A put started by ``shmem.put``: complete after ``shmem.quiet``."""

    def __init__(self, shmem: Any) -> None:
        super().__init__()
        self._shmem = shmem

    def wait(self) -> None:
        self._shmem.quiet()

    def test(self) -> bool:
        self._shmem.quiet()
        return True


class _State:
    """One thread's allocator state, as the allocation calls of _alloc.py see a Runtime."""

    def __init__(self, t: int, threads: int) -> None:
        self.MYTHREAD = t
        self.THREADS = threads
        self.lock = threading.Lock()
        self.local_heap: Heap
        self.sym_heap: Heap | None = None
        self.floor = self.floor_epoch = self.sym_limit = self.sym_epoch = 0


def _dump_heap(h: Heap) -> list:
    return [h.lo, h.hi, h.align, h.direction, h.name, h._fs, h._fe,
            [x for kv in h._live.items() for x in kv], list(h._freed)[-512:]]


def _load_heap(d: list) -> Heap:
    lo, hi, align, direction, name, fs, fe, live, freed = d
    h = Heap(lo, hi, align=align, direction=direction, name=name)
    h._fs, h._fe = list(fs), list(fe)
    h._live = dict(zip(live[::2], live[1::2], strict=True))
    h._ls = sorted(h._live)
    h._used = sum(h._live.values())
    h._freed.update((int(k), None) for k in freed)
    return h


def name_code(name: Any) -> int:
    """A barrier name as a nonzero 62-bit word (0: no name)."""
    if name is None:
        return 0
    return int.from_bytes(hashlib.blake2b(repr(name).encode(), digest_size=8).digest(),
                          "little") >> 2 | 1


class ShmemNet:
    """The remote primitives of upc_rt on shmem_rt (one per thread; see the module)."""

    def __init__(self, rt: Any) -> None:
        import shmem_rt as shmem

        self.shmem = shmem
        shmem.init()
        self.me, self.T = rt.MYTHREAD, rt.THREADS
        size = region_size(rt.port.segment_size)
        T = self.T
        ctl = BLOB + 8 * (2 + 2 * T + T) + 64
        if size - ctl < 4096:
            raise MemoryError(f"upc.init(runtime='shmem'): a segment of "
                              f"{rt.port.segment_size} bytes leaves no room for the heaps")
        self.region = region = shmem.zeros(size, dtype="u1")
        self.heap_size = H = (size - ctl) // 64 * 64  # upc_rt's "segment": its heaps
        self.blob_off = H
        w = H + BLOB
        self.counts = region[w:w + 16].view(np.int64)  # barrier counters, per phase parity
        self.names = region[w + 16:w + 16 + 16 * T].view(np.int64)  # 2 x T name slots
        self.state_locks = region[w + 16 + 16 * T:w + 16 + 24 * T].view(np.int64)
        self.phase = 0
        self.views: dict[int, Any] = {}
        self.vis = _Vis(self)
        self.coll = _Coll(self)

    # -- memory ---------------------------------------------------------------------------
    def seg(self, t: int) -> Any:
        """Thread ``t``'s region when it is on my node (``shmem.ptr``), else None."""
        try:
            return self.views[t]
        except KeyError:
            v = self.views[t] = self.shmem.ptr(self.region, t)
            return v

    def get(self, t: int, addr: int, n: int, out: Any) -> None:
        if type(out) is np.ndarray and out.dtype == _U8 and out.shape == (n,) \
                and out.strides == (1,):  # what memget passes: bytes, contiguous
            self.shmem.get(out, self.region[addr:addr + n], t)
            return
        o = _bytes(out, n)
        if o.base is None or o.flags.c_contiguous:
            self.shmem.get(o, self.region[addr:addr + n], t)
        else:
            tmp = np.empty(n, np.uint8)
            self.shmem.get(tmp, self.region[addr:addr + n], t)
            o[:] = tmp

    def put_nbi(self, t: int, addr: int, data: Any) -> None:
        if type(data) is np.ndarray and data.dtype == _U8 and data.ndim == 1 \
                and data.strides == (1,):  # what memput passes: bytes, contiguous
            d = data
        else:
            d = _src(data)
        self.shmem.put(self.region[addr:addr + d.size], d, t)

    def put(self, t: int, addr: int, data: Any) -> None:
        self.put_nbi(t, addr, data)
        self.shmem.quiet()

    def get_nb(self, t: int, addr: int, n: int, out: Any) -> _Done:
        self.get(t, addr, n, out)
        return _Done()

    def put_nb(self, t: int, addr: int, data: Any) -> _PutHandle:
        self.put_nbi(t, addr, data)
        return _PutHandle(self.shmem)

    def fence(self) -> None:
        self.shmem.quiet()

    def barrier(self) -> None:
        self.shmem.barrier_all()

    def poll(self) -> None:
        self.shmem.test(self.counts[:1], "!=", -1)  # one round of progress

    # -- atomics --------------------------------------------------------------------------
    def atomic(self, t: int, addr: int, op: str, v: Any = None, v2: Any = None,
               dtype: str = "i8") -> Any:
        sh = self.shmem
        dt = np.dtype(dtype)
        size = dt.itemsize
        raw = self.region[addr:addr + size]
        word = raw.view(dt)
        if op == "get":
            return sh.atomic_fetch(word, t)
        if op in ("swap", "set"):
            old = sh.atomic_swap(word, v, t)
            return old
        if dt.kind == "f" or op in ("fmin", "fmax"):
            return self._cas_loop(raw, t, op, dt, v, v2)
        if op == "cas":
            return sh.atomic_compare_swap(word, v, v2, t)
        if op == "fadd":
            return sh.atomic_fetch_add(word, _wrap(int(v), dt), t)
        if op == "fsub":
            return sh.atomic_fetch_add(word, _wrap(-int(v), dt), t)
        fn = {"fand": sh.atomic_fetch_and, "for": sh.atomic_fetch_or,
              "fxor": sh.atomic_fetch_xor}[op]
        return fn(word, _wrap(int(v), dt), t)

    def _cas_loop(self, raw: np.ndarray, t: int, op: str, dt: np.dtype, v: Any,
                  v2: Any) -> Any:
        """An operation OpenSHMEM has no atomic for (min, max, float arithmetic and
        compare-and-swap): compare-and-swap of the word's bits until no one came between."""
        sh = self.shmem
        bits = np.dtype(f"u{dt.itemsize}")
        word = raw.view(bits)
        cur = int(sh.atomic_fetch(word, t))
        while True:
            old = np.array([cur], bits).view(dt)[0]
            if op == "cas":
                if old != dt.type(v):
                    return old.item()
                new = dt.type(v2)
            else:
                f = {"fadd": np.add, "fsub": np.subtract, "fmin": np.minimum,
                     "fmax": np.maximum}[op]
                new = f(old, dt.type(v), dtype=dt)
            nb = int(np.array([new], dt).view(bits)[0])
            seen = int(sh.atomic_compare_swap(word, cur, nb, t))
            if seen == cur:
                return old.item()
            cur = seen

    # -- the allocator state (a CALL of _alloc.py, run on thread t's state) ---------------
    def start_call(self, t: int, fn: Any, args: tuple) -> _Done:
        """:meth:`run_at`, as the handle of a call that completed when it started (what
        the runtime's ``start_call`` returns over shmem)."""
        return _Done(self.run_at(t, fn, args))

    def run_at(self, t: int, fn: Any, args: tuple) -> Any:
        sh = self.shmem
        lock = self.state_locks[t:t + 1]
        sh.set_lock(lock)
        try:
            st = self._load(t)
            out = fn(st, self.me, 0, *args)
            self._store(t, st)
        finally:
            sh.clear_lock(lock)
        return out

    def _load(self, t: int) -> _State:
        sh, off = self.shmem, self.blob_off
        n = np.zeros(1, np.int64)
        sh.get(n, self.region[off:off + 8].view(np.int64), t)
        st = _State(t, self.T)
        if n[0] == 0:  # a fresh state
            st.local_heap = Heap(0, self.heap_size, direction="down",
                                 name=f"local heap of thread {t}")
            if t == 0:
                st.sym_heap = Heap(0, self.heap_size, direction="up", name="shared heap")
            return st
        buf = np.empty(int(n[0]), np.uint8)
        sh.get(buf, self.region[off + 8:off + 8 + buf.size], t)
        d = _unpack(buf.tobytes())
        st.local_heap = _load_heap(d["local"])
        st.sym_heap = None if d["sym"] is None else _load_heap(d["sym"])
        st.floor, st.floor_epoch = d["floor"], d["floor_epoch"]
        st.sym_limit, st.sym_epoch = d["sym_limit"], d["sym_epoch"]
        return st

    def _store(self, t: int, st: _State) -> None:
        b = _pack({"local": _dump_heap(st.local_heap),
                   "sym": None if st.sym_heap is None else _dump_heap(st.sym_heap),
                   "floor": st.floor, "floor_epoch": st.floor_epoch,
                   "sym_limit": st.sym_limit, "sym_epoch": st.sym_epoch})
        if len(b) + 8 > BLOB:
            raise MemoryError(f"upc_rt (runtime shmem): thread {t}'s allocator state needs "
                              f"{len(b)} bytes, more than its {BLOB - 8}; free some blocks")
        off = self.blob_off
        data = np.concatenate([np.array([len(b)], np.int64).view(np.uint8),
                               np.frombuffer(b, np.uint8)])
        self.shmem.put(self.region[off:off + data.size], data, t)
        self.shmem.quiet()

    # -- upc_rt's own collectives (rt.collective) -----------------------------------------
    def agree(self, mine: bytes, judge: Any) -> bytes:
        """Every thread's ``mine`` to every thread (fcollect); thread 0 runs ``judge`` on
        them ({thread: bytes}) and its verdict (bytes) comes back on every thread
        (broadcast)."""
        sh, T = self.shmem, self.T
        lens = np.zeros(T, np.int64)
        sh.fcollect(lens, np.array([len(mine)], np.int64))
        m = int(lens.max())
        buf = np.zeros(m, np.uint8)
        buf[:len(mine)] = np.frombuffer(mine, np.uint8)
        allb = np.zeros(m * T, np.uint8)
        sh.fcollect(allb, buf)
        packed = b""
        if self.me == 0:
            packed = judge({t: allb[t * m:t * m + int(lens[t])].tobytes() for t in range(T)})
        n = np.array([len(packed)], np.int64)
        sh.broadcast(n, n.copy(), 0)
        out = np.zeros(int(n[0]), np.uint8)
        src = np.frombuffer(packed, np.uint8).copy() if self.me == 0 else out.copy()
        sh.broadcast(out, src, 0)
        return out.tobytes()

    # -- barriers ---------------------------------------------------------------------------
    def notify(self, name: Any) -> None:
        """``upc_notify`` (the caller fenced): my name into my slot on every thread, then
        +1 on every thread's counter of this phase."""
        sh, T, me = self.shmem, self.T, self.me
        k = self.phase & 1
        code = name_code(name)
        if code:
            slot = self.names[k * T + me:k * T + me + 1]
            for t in range(T):
                sh.atomic_set(slot, code, t)
        cnt = self.counts[k:k + 1]
        for t in range(T):
            sh.atomic_add(cnt, 1, t)

    def wait(self, name: Any) -> None:
        """``upc_wait``: until my counter of this phase reaches THREADS; then every name
        given must be the same (else BarrierMismatch on every thread)."""
        sh, T, me = self.shmem, self.T, self.me
        k = self.phase & 1
        cnt = self.counts[k:k + 1]
        sh.wait_until(cnt, sh.CMP_GE, T)
        slots = self.names[k * T:(k + 1) * T].copy()
        self.names[k * T:(k + 1) * T] = 0  # before the next phase of this parity can begin
        sh.atomic_add(cnt, -T, me)
        self.phase += 1
        named = [(t, int(c)) for t, c in enumerate(slots) if c]
        if len({c for _, c in named}) > 1:
            mine = name_code(name)
            other = next(t for t, c in named if c != (mine or named[0][1]))
            said = f"{name!r}" if name is not None else "no name"
            raise BarrierMismatch(
                f"upc barrier (phase {self.phase - 1}): thread {me} passed {said}, thread "
                f"{other} a different name; every named upc.notify() of one barrier must "
                "pass the same name")


def _wrap(v: int, dt: np.dtype) -> int:
    """``v`` as a value of the integer type ``dt`` (two's complement wrap)."""
    m = _MASK[dt.itemsize]
    v &= m
    if dt.kind == "i" and v > m >> 1:
        v -= m + 1
    return v


_U8 = np.dtype(np.uint8)


def _bytes(out: Any, n: int) -> np.ndarray:
    """The first ``n`` bytes of the writable buffer ``out`` as a uint8 array."""
    if isinstance(out, np.ndarray):
        a = out.reshape(-1) if out.flags.c_contiguous else out
        if a.ndim == 1 and a.flags.c_contiguous:
            return a.view(np.uint8)[:n]
        return a  # a strided destination: the caller copies
    return np.frombuffer(memoryview(out).cast("B"), np.uint8)[:n]


def _src(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data).cast("B"), np.uint8)


def _chunks(base: int, strides: Any, counts: Any) -> np.ndarray:
    """Byte offsets of a strided transfer's pieces, level 0 (innermost) fastest."""
    o = np.array([base], np.int64)
    for s, c in reversed(list(zip(strides, counts, strict=True))):
        o = (o[:, None] + np.arange(c, dtype=np.int64)[None, :] * s).ravel()
    return o


DENSE = 64 << 10  # a gather of pieces spanning at most this (or 8x their bytes): one get


class _Vis:
    """The strided and indexed transfers upc_rt's bulk access uses, on shmem get/put
    (OpenSHMEM's iget/iput take one stride in elements; VIS takes several in bytes,
    negative ones too, and indexed lists): a put of each piece (nonblocking, completed by
    the next quiet); a gather as one get of the span of its pieces when they are dense in
    it, else a get of each piece."""

    def __init__(self, net: ShmemNet) -> None:
        self.net = net

    def _gather(self, t: int, so: np.ndarray, b: np.ndarray, bo: np.ndarray,
                elem: int) -> None:
        """The pieces of ``elem`` bytes at offsets ``so`` of thread ``t``'s region into
        ``b`` at ``bo``."""
        net = self.net
        if not so.size:
            return
        lo, hi = int(so.min()), int(so.max()) + elem
        if hi - lo <= max(8 * so.size * elem, DENSE):
            tmp = np.empty(hi - lo, np.uint8)
            net.shmem.get(tmp, net.region[lo:hi], t)
            e = np.arange(elem, dtype=np.int64)[None, :]
            b[(bo[:, None] + e).ravel()] = tmp[((so - lo)[:, None] + e).ravel()]
            return
        for s_, o in zip(so.tolist(), bo.tolist(), strict=True):
            net.shmem.get(b[o:o + elem], net.region[s_:s_ + elem], t)

    def _buf(self, buf: Any, offset: int | None, strides: Any, elem: int,
             counts: Any) -> tuple[np.ndarray, np.ndarray]:
        b = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
        if offset is None:
            return b, np.arange(int(np.prod(counts)), dtype=np.int64) * elem
        return b, _chunks(offset, strides, counts)

    def get_strided_nb(self, t: int, dst: Any, dst_off: int | None, dst_strides: Any,
                       src_off: int, src_strides: Any, elem: int, counts: Any) -> _Done:
        b, bo = self._buf(dst, dst_off, dst_strides, elem, counts)
        self._gather(t, _chunks(src_off, src_strides, counts), b, bo, elem)
        if not np.shares_memory(b, dst):
            np.copyto(dst, b.view(dst.dtype).reshape(dst.shape))
        return _Done()

    def get_strided(self, *args: Any) -> None:
        self.get_strided_nb(*args)

    def put_strided_nbi(self, t: int, dst_off: int, dst_strides: Any, src: Any,
                        src_off: int | None, src_strides: Any, elem: int,
                        counts: Any) -> None:
        net = self.net
        b, bo = self._buf(src, src_off, src_strides, elem, counts)
        for do, o in zip(_chunks(dst_off, dst_strides, counts).tolist(), bo.tolist(),
                         strict=True):
            net.shmem.put(net.region[do:do + elem], b[o:o + elem], t)

    def get_indexed_nb(self, t: int, dst_bufs: Any, dst_len: int, src_offsets: Any,
                       src_len: int) -> _Done:
        b = np.ascontiguousarray(dst_bufs[0]).reshape(-1).view(np.uint8)
        so = np.asarray(src_offsets, np.int64)
        self._gather(t, so, b, np.arange(so.size, dtype=np.int64) * src_len, src_len)
        if not np.shares_memory(b, dst_bufs[0]):
            np.copyto(dst_bufs[0], b.view(dst_bufs[0].dtype).reshape(dst_bufs[0].shape))
        return _Done()

    def put_indexed_nbi(self, t: int, dst_offsets: Any, dst_len: int, src_bufs: Any,
                        src_len: int) -> None:
        net = self.net
        b = _src(src_bufs[0])
        for i, do in enumerate(dst_offsets):
            net.shmem.put(net.region[do:do + dst_len], b[i * dst_len:(i + 1) * dst_len], t)


class _Coll:
    """``rt.net.coll``: its ``world`` team, whose collectives upc_rt's take."""

    def __init__(self, net: ShmemNet) -> None:
        self.world = _World(net)


def _u8(a: Any) -> np.ndarray:
    return a if a.dtype == np.uint8 else a.reshape(-1).view(np.uint8)


class _World:
    """amnet.coll's world-team collectives that upc_rt calls, on shmem_rt's team
    collectives (``algorithm`` is amnet.coll's and is not used)."""

    def __init__(self, net: ShmemNet) -> None:
        self.sh, self.T, self.me = net.shmem, net.T, net.me

    def broadcast(self, dst: Any, src: Any, root: int, algorithm: Any = None) -> None:
        d = _u8(dst)  # (a member other than the root passes no source: its own target,
        self.sh.broadcast(d, d if src is None else _u8(src)[:d.size], root)  # never read)

    def scatter(self, dst: Any, src: Any, root: int, algorithm: Any = None) -> None:
        d = _u8(dst)
        n = d.size
        full = np.zeros(n * self.T, np.uint8)  # the root's blocks broadcast, mine kept
        self.sh.broadcast(full, full if src is None else _u8(src)[:full.size], root)
        d[:] = full[self.me * n:(self.me + 1) * n]

    def gather(self, dst: Any, src: Any, root: int, algorithm: Any = None) -> None:
        s = _u8(src)
        full = np.zeros(s.size * self.T, np.uint8)
        self.sh.fcollect(full, s)
        if self.me == root:
            _u8(dst)[:full.size] = full

    def gather_all(self, dst: Any, src: Any, algorithm: Any = None) -> None:
        s = _u8(src)
        self.sh.fcollect(_u8(dst)[:s.size * self.T], s)

    def exchange(self, dst: Any, src: Any, algorithm: Any = None) -> None:
        self.sh.alltoall(_u8(dst), _u8(src))

    def permute(self, dst: Any, src: Any, perm: Any, algorithm: Any = None) -> None:
        try:
            p = [int(x) for x in perm]
        except (TypeError, ValueError):
            raise ValueError(f"permute: perm must be a sequence of ints, got {perm!r}") \
                from None
        if sorted(p) != list(range(self.T)):
            raise ValueError(f"permute: perm {p} is not a permutation of 0..{self.T - 1}")
        s, d = _u8(src), _u8(dst)
        n = s.size
        send = np.zeros(n * self.T, np.uint8)
        send[p[self.me] * n:(p[self.me] + 1) * n] = s
        recv = np.zeros(n * self.T, np.uint8)
        self.sh.alltoall(recv, send)
        i = p.index(self.me)
        d[:n] = recv[i * n:(i + 1) * n]
