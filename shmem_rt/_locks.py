"""Distributed locks (OpenSHMEM 1.5 §9.12; shmem4py's functions and ``Lock`` class).

A lock is a symmetric 64-bit word; the copy on PE 0 is the lock. It is a ticket lock, so
it is fair (first come, first served): the high 32 bits hand out tickets, the low 32 bits
say which ticket is served. ``set_lock`` takes a ticket with one fetch-add and waits until
it is served; ``clear_lock`` serves the next. Every step is an amnet atomic on PE 0's word:
a hardware atomic within PE 0's node, an AM to PE 0 from another node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._init import current
from ._memory import free, new_word, sym_offset
from ._state import PE
from ._sync import quiet

HOME = 0
TICKET = 1 << 32
LOW = 0xFFFFFFFF


def new_lock() -> np.ndarray:
    """A new lock, unlocked (collective: every PE calls it, as shmem4py's allocation is)."""
    return new_word(np.int64, "shmem.new_lock()")


def _word(lock: Any, what: str) -> tuple[PE, int]:
    st = current()
    if not isinstance(lock, np.ndarray) or lock.dtype.itemsize != 8 or lock.size != 1 \
            or lock.dtype.kind not in "iu":
        raise TypeError(f"{what}: lock must be a symmetric 64-bit integer array of one "
                        "element (shmem.new_lock() makes one)")
    return st, sym_offset(st, lock, what, "lock")


def del_lock(lock: np.ndarray) -> None:
    """Free a lock (collective)."""
    _word(lock, "shmem.del_lock()")
    free(lock)


def set_lock(lock: np.ndarray) -> None:
    """Take the lock, waiting for it: locks are granted in the order they were asked for."""
    what = "shmem.set_lock()"
    st, off = _word(lock, what)
    ep = st.ep
    mine = (ep.atomic(HOME, off, "fadd", TICKET, dtype="u8") >> 32) & LOW
    if ep.atomic(HOME, off, "get", dtype="u8") & LOW == mine:  # uncontended: no closure
        return

    def served() -> bool:
        return ep.atomic(HOME, off, "get", dtype="u8") & LOW == mine

    if st.local[HOME]:  # the word is read where it is: a condition a wait may poll
        st.wait(served, f"{what} of the lock at offset {off}")
    else:  # a read of PE 0's word is a round trip: never inside a wait's condition
        st.wait_remote(served, f"{what} of the lock at offset {off}")


def test_lock(lock: np.ndarray) -> bool:
    """Take the lock if it is free and return False; return True (taking nothing) if it
    is held: OpenSHMEM's ``shmem_test_lock`` returns 0 on success."""
    st, off = _word(lock, "shmem.test_lock()")
    st.port.poll()  # a test_lock loop on the lock's home PE must serve the other nodes' AMs
    ep = st.ep
    old = ep.atomic(HOME, off, "get", dtype="u8")
    if (old >> 32) & LOW != old & LOW:
        return True
    new = ((old + TICKET) & 0xFFFFFFFFFFFFFFFF)
    return ep.atomic(HOME, off, "cas", old, new, dtype="u8") != old


def clear_lock(lock: np.ndarray) -> None:
    """Release the lock (quiet first: what this PE put while holding it is complete before
    the next holder gets it)."""
    st, off = _word(lock, "shmem.clear_lock()")
    quiet()
    ep = st.ep
    old = ep.atomic(HOME, off, "get", dtype="u8")
    while True:  # serve the next ticket, wrapping in the low half only
        new = (old & ~LOW & 0xFFFFFFFFFFFFFFFF) | ((old + 1) & LOW)
        seen = ep.atomic(HOME, off, "cas", old, new, dtype="u8")
        if seen == old:
            return
        old = seen


class Lock:
    """shmem4py's object form: ``with lock:`` takes and releases it."""

    def __init__(self) -> None:
        self._lock: np.ndarray | None = None
        self._lock = new_lock()

    def destroy(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            del_lock(lock)

    def _get(self) -> np.ndarray:
        if self._lock is None:
            raise ValueError("the shmem_rt.Lock was destroyed")
        return self._lock

    def acquire(self, blocking: bool = True) -> bool:
        lock = self._get()
        if blocking:
            set_lock(lock)
            return True
        return not test_lock(lock)

    def release(self) -> None:
        clear_lock(self._get())

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *args: Any) -> None:
        self.release()
