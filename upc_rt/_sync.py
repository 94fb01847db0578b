"""Synchronisation: ``barrier``, ``notify``/``wait`` (split phase, named, mismatch
detected), ``fence``, ``poll`` (UPC 1.2 §6.6 and §7.2.1).

Every one implies a fence: this thread's relaxed writes complete at their targets (and the
cache is written back and emptied) before the barrier is announced or the call returns.

Over shmem (``upc.init(runtime="shmem")``) ``notify``/``wait`` are the paper's split-phase
barrier on SHMEM atomics and ``shmem.wait_until`` (:mod:`upc_rt._net`), and the fence is
``shmem.quiet``. An unnamed ``barrier`` is notify and wait too, not the paper's
``shmem_barrier_all``: UPC lets it meet another thread's named barrier, which a
``shmem_barrier_all`` would never meet.
"""

from __future__ import annotations

from typing import Any

from amnet import BarrierStateError

from ._rt import current, user_site


def fence() -> None:
    """``upc_fence``: every shared access this thread made completes before any it makes
    afterwards (relaxed writes reach their targets; the cache is written back and
    invalidated). With auto_nb it is a synchronization event of the scheduler."""
    rt = current("upc.fence()")
    rt.net.fence()  # the cache's sync hook writes it back first
    if rt.nb is not None:  # after the fence: the next phase's prefetches are not waited for
        rt.nb.sync(user_site())


def notify(name: Any = None) -> None:
    """``upc_notify``: complete my accesses, then announce the barrier (``name``: None
    matches any; an int or str must match every other thread's).

    Raises:
        amnet.BarrierStateError: a notify is already pending on this thread.
    """
    rt = current("upc.notify()")
    if rt.shm is not None:
        if rt.notified:
            raise BarrierStateError("upc.notify() while this thread's notify is pending: "
                                    "call upc.wait() first")
        fence()
        rt.shm.notify(name)
        rt.notified = True
    elif rt.nb is not None:  # puts complete, notify, unused prefetches retired meanwhile
        rt.ep.fence()
        rt.nb.notify(name)
    else:
        fence()
        rt.ep.barrier_notify(name)
    rt.notify_name = name


def wait(name: Any = None) -> None:
    """``upc_wait``: wait for the barrier announced by :func:`notify`. ``name``, when given,
    must be the name notify had.

    Raises:
        amnet.BarrierMismatch: threads passed different names (on every thread).
        amnet.BarrierStateError: no notify is pending, or ``name`` differs from notify's.
    """
    rt = current("upc.wait()")
    if name is not None and rt.notify_name is not None and name != rt.notify_name:
        raise BarrierStateError(f"upc.wait({name!r}) after upc.notify({rt.notify_name!r}): "
                                "a wait's name must be its notify's")
    if rt.shm is not None:
        if not rt.notified:
            raise BarrierStateError("upc.wait() without a pending upc.notify(): call "
                                    "upc.notify() first")
        rt.notified = False
        mine, rt.notify_name = rt.notify_name, None
        rt.shm.wait(mine)
        rt.net.fence()
        return
    rt.ep.barrier_wait()
    rt.notify_name = None
    rt.ep.fence()
    if rt.nb is not None:  # the next phase starts: its prefetches go out
        rt.nb.sync(user_site())


def barrier(name: Any = None) -> None:
    """``upc_barrier``: :func:`notify` then :func:`wait`.

    Raises: as both.
    """
    notify(name)
    wait()


def poll() -> None:
    """``upc_poll``: run the AMs that arrived (lock grants, remote requests)."""
    current("upc.poll()").ep.poll()
