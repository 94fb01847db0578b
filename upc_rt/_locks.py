"""UPC locks (UPC 1.2 §7.2.4): ``all_lock_alloc``, ``global_lock_alloc``, ``lock``,
``unlock``, ``attempt``, ``lock_free``, ``with L:``.

A lock lives at its host thread as a holder and a FIFO queue of waiters (MuPC §4.4.7): a
request that finds the lock taken waits in the queue, and each unlock hands the lock to the
oldest waiter -- fair, first come first served. The host learns of requests by AM, so a
handoff happens when the host's process next polls.

The release hazard of MuPC's Table 4.1 (a write made inside the critical section reaching its
target after the next holder read the old value) is closed by completing, not just
issuing, every write before the unlock is sent: ``unlock`` runs a full ``upc.fence()``,
which waits for the targets' acknowledgements (and writes back the cache). ``lock`` fences
after it is granted, so nothing of the critical section is read early.

Over shmem (``upc.init(runtime="shmem")``) a lock is a SHMEM lock (``shmem.set_lock``,
``test_lock``, ``clear_lock``: a fair ticket lock on thread 0's copy of a symmetric word),
its word allocated in the symmetric heap (``upc_global_lock_alloc`` need not be collective,
as the paper says): ``host`` is 0 and ``lid`` the word's offset. ``lock_free`` leaves the
word marked freed (not reused), so a later use is refused.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ._errors import LockError
from ._net import FREED_LOCK
from ._rt import PENDING, Runtime, current, remote_call, send_late


class LockState:
    """A lock at its host."""

    __slots__ = ("holder", "queue")

    def __init__(self) -> None:
        self.holder: int | None = None
        self.queue: deque[tuple[int, int]] = deque()  # (thread, opid) in arrival order

    def take(self, src: int) -> bool:
        """The lock to thread ``src`` if nobody holds it (under the runtime's lock): whether
        it took it, what ``lock`` and ``attempt`` both begin with."""
        if self.holder is None:
            self.holder = src
            return True
        return False


def _state(rt: Runtime, lid: int, what: str) -> LockState:
    if lid in rt.freed_locks:
        raise LockError(f"{what}: the lock was freed by upc.lock_free()")
    st = rt.locks.get(lid)
    if st is None:
        if lid & 1:  # global_lock_alloc ids are made here, so an unknown one is bad
            raise LockError(f"{what}: thread {rt.MYTHREAD} hosts no lock {lid}")
        st = rt.locks[lid] = LockState()  # all_lock_alloc: made on first use
    return st


@remote_call("lock")
def _lock(rt: Runtime, src: int, opid: int, lid: int) -> Any:
    with rt.lock:
        st = _state(rt, lid, "upc.lock()")
        if st.take(src):
            return True
        if st.holder == src:
            raise LockError(f"upc.lock(): thread {src} already holds this lock (UPC locks "
                            "are not recursive: this would wait forever)")
        st.queue.append((src, opid))
        return PENDING


@remote_call("attempt")
def _attempt(rt: Runtime, src: int, opid: int, lid: int) -> bool:
    with rt.lock:
        return _state(rt, lid, "upc.lock_attempt()").take(src)


@remote_call("unlock")
def _unlock(rt: Runtime, src: int, opid: int, lid: int) -> None:
    with rt.lock:
        st = _state(rt, lid, "upc.unlock()")
        if st.holder != src:
            who = "nobody" if st.holder is None else f"thread {st.holder}"
            raise LockError(f"upc.unlock(): thread {src} does not hold the lock ({who} does)")
        if st.queue:
            nxt, nopid = st.queue.popleft()
            st.holder = nxt
            send_late(rt, nxt, nopid, True)
        else:
            st.holder = None


@remote_call("lock_free")
def _lock_free(rt: Runtime, src: int, opid: int, lid: int) -> None:
    with rt.lock:
        st = _state(rt, lid, "upc.lock_free()")
        if st.holder is not None and st.holder != src:
            raise LockError(f"upc.lock_free(): thread {st.holder} holds the lock")
        if st.queue:
            raise LockError(f"upc.lock_free(): {len(st.queue)} threads wait for the lock")
        del rt.locks[lid]
        rt.freed_locks.add(lid)


class _LockWait:
    """``upc.lock()`` of a lock, as a timeout's diagnosis says it (``str`` is taken only
    then, on another thread): its holder when this thread hosts the lock, else only its
    host, which is the one that knows."""

    __slots__ = ("lock", "rt")

    def __init__(self, rt: Runtime, lock: Lock) -> None:
        self.rt = rt
        self.lock = lock

    def __str__(self) -> str:
        lk = self.lock
        st = self.rt.locks.get(lk.lid) if lk.host == self.rt.MYTHREAD else None
        holder = getattr(st, "holder", None)
        who = "another thread" if holder is None else f"thread {holder}"
        return f"upc.lock() of lock {lk.lid} at thread {lk.host} (held by {who})"


class Lock:
    """A UPC lock (``upc_lock_t *``): ``lock()``, ``unlock()``, ``attempt()``, ``with L:``.

    Raises (each method): upc_rt.LockError for misuse (unlock of a lock not held, a lock
    taken twice by one thread, any use after ``lock_free``).
    """

    __slots__ = ("host", "lid")

    def __init__(self, host: int, lid: int) -> None:
        self.host = host
        self.lid = lid

    def __repr__(self) -> str:
        return f"<upc lock {self.lid} at thread {self.host}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lock) and (self.host, self.lid) == (other.host, other.lid)

    def __hash__(self) -> int:
        return hash((self.host, self.lid))

    def lock(self) -> None:
        """``upc_lock``: wait until this thread holds the lock (FIFO among waiters)."""
        from ._sync import fence

        rt = current("upc.lock()")
        if rt.shm is not None:
            if (self.host, self.lid) in rt.held:
                raise LockError(f"upc.lock(): thread {rt.MYTHREAD} already holds this lock "
                                "(UPC locks are not recursive: this would wait forever)")
            rt.shm.shmem.set_lock(_word(rt, self, "upc.lock()"))
            rt.held.add((self.host, self.lid))
            fence()
            return
        with rt.port.waiting(_LockWait(rt, self)):  # what a timeout's diagnosis says
            rt.call(self.host, "lock", self.lid)
        rt.held.add((self.host, self.lid))
        fence()  # nothing of the critical section happens before the grant

    def attempt(self) -> bool:
        """``upc_lock_attempt``: take the lock if it is free; True if taken."""
        from ._sync import fence

        rt = current("upc.lock_attempt()")
        if rt.shm is not None:  # shmem.test_lock returns False when it took the lock
            got = (self.host, self.lid) not in rt.held and \
                not rt.shm.shmem.test_lock(_word(rt, self, "upc.lock_attempt()"))
        else:
            got = rt.call(self.host, "attempt", self.lid)
        if got:
            rt.held.add((self.host, self.lid))
            fence()
        return bool(got)

    def unlock(self) -> None:
        """``upc_unlock``: complete every write of the critical section at its target, then
        release the lock to the oldest waiter.

        Raises:
            upc_rt.LockError: this thread does not hold the lock (nothing is sent).
        """
        from ._sync import fence

        rt = current("upc.unlock()")
        key = (self.host, self.lid)
        if key not in rt.held:
            raise LockError(f"upc.unlock(): thread {rt.MYTHREAD} does not hold {self!r}")
        fence()  # the release hazard (MuPC Table 4.1): writes complete before the release
        rt.held.discard(key)
        if rt.shm is not None:
            rt.shm.shmem.clear_lock(_word(rt, self, "upc.unlock()", check=False))
        else:
            rt.call(self.host, "unlock", self.lid)

    def __enter__(self) -> Lock:
        self.lock()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unlock()


def all_lock_alloc() -> Lock:
    """``upc_all_lock_alloc``: one lock, the same on every thread (collective). Hosts are
    spread over the threads in turn."""
    rt = current("upc.all_lock_alloc()")
    if rt.shm is not None:
        return Lock(0, rt.collective("upc_all_lock_alloc", [], lambda: _new_word(rt)))

    def decide() -> list[int]:  # on thread 0
        n = rt.lock_count
        rt.lock_count += 1
        return [n % rt.THREADS, n << 1]

    host, lid = rt.collective("upc_all_lock_alloc", [], decide)
    return Lock(host, lid)


def global_lock_alloc() -> Lock:
    """``upc_global_lock_alloc``: a lock made by one thread (hosted by it)."""
    rt = current("upc.global_lock_alloc()")
    if rt.shm is not None:
        return Lock(0, _new_word(rt))
    with rt.lock:
        rt.glock_count += 1
        lid = (rt.glock_count << 1) | 1
        rt.locks[lid] = LockState()
    return Lock(rt.MYTHREAD, lid)


def lock_free(lk: Lock) -> None:
    """``upc_lock_free``: free ``lk`` (not held by another thread, nobody waiting).

    Raises:
        upc_rt.LockError: it is held by another thread, waited for, or freed already.
        TypeError: ``lk`` is not a lock.
    """
    if not isinstance(lk, Lock):
        raise TypeError(f"upc.lock_free() takes a lock, got {type(lk).__name__}")
    rt = current("upc.lock_free()")
    if rt.shm is not None:
        _free_word(rt, lk)
    else:
        rt.call(lk.host, "lock_free", lk.lid)
    rt.held.discard((lk.host, lk.lid))


# -- over shmem: SHMEM locks on words of the symmetric heap -----------------------------------
def _new_word(rt: Runtime) -> int:
    """A lock word (its offset), unlocked: 8 bytes of the symmetric heap, zeroed at thread 0
    (the copy a SHMEM lock uses) before anyone can have the lock."""
    from ._alloc import sym_alloc

    off = sym_alloc(rt, 8, "upc_lock_alloc")
    rt.shm.put(0, off, np.zeros(1, np.int64))
    return off


def _word(rt: Runtime, lk: Lock, what: str, check: bool = True) -> np.ndarray:
    """The lock's word (a symmetric int64 view); refused when the lock was freed."""
    w = rt.shm.region[lk.lid:lk.lid + 8].view(np.int64)
    if check and rt.shm.atomic(0, lk.lid, "get", dtype="u8") == FREED_LOCK:
        raise LockError(f"{what}: the lock was freed by upc.lock_free()")
    return w


def _free_word(rt: Runtime, lk: Lock) -> None:
    """``upc_lock_free``: mark the word freed, unless another thread holds the lock or
    waits for it (the ticket lock: high half the next ticket, low half the one served)."""
    mine = (lk.host, lk.lid) in rt.held
    old = rt.shm.atomic(0, lk.lid, "get", dtype="u8")
    while True:
        if old == FREED_LOCK:
            raise LockError("upc.lock_free(): the lock was freed by upc.lock_free()")
        queued = ((old >> 32) - (old & 0xFFFFFFFF)) & 0xFFFFFFFF  # holder and waiters
        if queued > int(mine):
            raise LockError("upc.lock_free(): another thread holds the lock or waits for it"
                            if not mine else f"upc.lock_free(): {queued - 1} threads wait "
                            "for the lock")
        seen = rt.shm.atomic(0, lk.lid, "cas", old, FREED_LOCK, dtype="u8")
        if seen == old:
            return
        old = seen
