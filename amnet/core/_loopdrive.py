"""What an event loop needs to drive one process's progress (:mod:`amnet.aio`).

A rank waiting in amnet's own calls blocks in the engine (``Engine.wait_until``: the
shared-memory doorbell, the conduit, the wake eventfd of rank-threads). A rank that runs an
asyncio loop instead hands those descriptors to its loop (:meth:`LoopProgress.fds`) and runs
:meth:`LoopProgress.poll` when one is readable: the engine's ``poll`` with the conduit looked
at now (not throttled: a zmq descriptor is edge-triggered, and it says "maybe" only once).

The shared-memory network lets a sender skip the doorbell while the receiver is awake; a
loop never says when it sleeps, so while a loop is attached the process's sleeping flag stays
up (``PshmNetwork.set_ring_always``) and every message rings. The mpi conduit has no
descriptor: :attr:`LoopProgress.needs_tick` says the loop must look on a timer; so must a
process whose shared-memory network has no doorbell (an MPI launcher started it).
"""

from __future__ import annotations

import os
from typing import Any


class LoopProgress:
    """One rank's view of its process's progress, for an event loop (see the module)."""

    def __init__(self, ep: Any) -> None:
        eng = ep._eng
        self.eng = eng
        self.rank = ep.rank
        self.bells: list[int] = []  # eventfds to read (reset) when they fire
        fds: list[int] = []
        pshm = eng.pshm
        if pshm is not None and pshm.my_bell is not None:
            self.bells.append(pshm.my_bell)
        if eng.wake_fd is not None:
            self.bells.append(eng.wake_fd)
        fds.extend(self.bells)
        conduit = eng.conduit
        if conduit.pollable and conduit.fileno() >= 0:
            fds.append(conduit.fileno())
        self.fds = fds
        self.needs_tick = not conduit.pollable or (pshm is not None and pshm.my_bell is None)
        #: how long a rank whose process has cores to spare may look before it yields (the
        #: blocking form's spin before it blocks); 0 where ranks outnumber cores
        self.spin_s = eng.spin_s

    def attach(self) -> None:
        """The loop watches this process's descriptors now (counted per process)."""
        eng = self.eng
        eng.loops += 1
        if eng.loops == 1 and eng.pshm is not None:
            eng.pshm.set_ring_always(True)

    def detach(self) -> None:
        eng = self.eng
        eng.loops -= 1
        if eng.loops == 0 and eng.pshm is not None and not eng.closed:
            eng.pshm.set_ring_always(False)

    def reset(self, fd: int) -> None:
        """Read an eventfd that fired (a doorbell, the wake fd), so it can fire again."""
        if fd in self.bells:
            try:
                os.eventfd_read(fd)
            except (BlockingIOError, OSError):
                pass

    def poll(self) -> int:
        """Run what has arrived for this process (the conduit looked at now); how many ran.
        Raises JobAborted when the job is being torn down."""
        eng = self.eng
        eng.conduit_at = 0.0
        n = eng.poll()
        boot = eng.boot
        if boot is not None and boot.aborted is not None:
            raise boot.aborted
        return n

    def in_handler(self) -> bool:
        return self.eng.in_handler() is not None

    @property
    def closed(self) -> bool:
        return self.eng.closed
