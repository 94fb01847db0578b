"""What an event loop needs to drive one process's progress (:mod:`amnet.aio`).

A rank waiting in amnet's own calls blocks in the engine (``Engine.wait_until``: the
shared-memory doorbell, the conduit, the wake eventfd of rank-threads). A rank that runs an
asyncio loop instead hands those descriptors to its loop (:attr:`LoopProgress.fds`) and runs
:meth:`LoopProgress.poll` when one is readable (``Engine.loop_poll``: the engine's ``poll``
with the conduit looked at now).

The shared-memory network lets a sender skip the doorbell while the receiver is awake; a
loop never says when it sleeps, so while a loop is attached (``Engine.loop_attach``) every
message rings, except while the loop is known to run: in a process of one rank-thread
(:attr:`LoopProgress.can_wake`) the driver lowers the sleeping flag at the end of a drain
(:meth:`LoopProgress.awake`: the tasks the drain woke run next, unrung) and raises it again
from a callback the loop runs before it can block, then looks once more
(:meth:`LoopProgress.pending`), as a blocking sleep does. The mpi conduit has no descriptor:
:attr:`LoopProgress.needs_tick` says the loop must look on a timer; so must a process whose
shared-memory network has no doorbell (an MPI launcher started it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._engine import Engine, RankState
    from .endpoint import Endpoint


class LoopProgress:
    """One rank's view of its process's progress, for an event loop (see the module)."""

    def __init__(self, eng: Engine, rs: RankState) -> None:
        self.eng = eng
        self.rs = rs  # the rank's state: its operations in flight
        self.rank = rs.rank
        self.bells: list[int] = []  # eventfds to read (reset) when they fire
        pshm = eng.pshm
        if pshm is not None and pshm.my_bell is not None:
            self.bells.append(pshm.my_bell)
        if eng.wake_fd is not None:
            self.bells.append(eng.wake_fd)
        fds = list(self.bells)
        conduit = eng.conduit
        if conduit.pollable and conduit.fileno() >= 0:
            fds.append(conduit.fileno())
        self.fds = fds
        self.needs_tick = not conduit.pollable or (pshm is not None and pshm.my_bell is None)
        #: the loop may lower the sleeping flag while it runs (see the module): one
        #: rank-thread in the process, no progress thread, a doorbell to ring
        self.can_wake = (pshm is not None and pshm.my_bell is not None and eng.T == 1
                         and eng.wake_fd is None)
        #: how long a rank whose process has cores to spare may look before it yields (the
        #: blocking form's spin before it blocks); 0 where ranks outnumber cores
        self.spin_s = eng.spin_s
        self.attach = eng.loop_attach
        self.detach = eng.loop_detach
        #: run what has arrived, the conduit looked at now; how many ran (raises JobAborted
        #: once the job is being torn down)
        self.poll = eng.loop_poll

    @classmethod
    def of(cls, ep: Endpoint) -> LoopProgress:
        """The progress of ``ep``'s rank.

        Raises:
            InitError: the rank already called amnet.finalize().
        """
        rs = ep._live()
        return cls(rs.eng, rs)

    def awake(self, on: bool) -> None:
        """Lower (``on``) or raise the process's sleeping flag (only where :attr:`can_wake`)."""
        self.eng.pshm.set_awake(on)

    def pending(self) -> bool:
        """Whether a shared-memory queue of this process holds an entry (no dispatch)."""
        return self.eng.pshm.pending()

    def reset(self, fd: int) -> None:
        """Read an eventfd that fired (a doorbell, the wake fd), so it can fire again."""
        if fd in self.bells:
            try:
                os.eventfd_read(fd)
            except (BlockingIOError, OSError):
                pass

    def inflight(self) -> int:
        """This rank's operations not yet complete (awaited or not: NBI puts, rpc_ff...)."""
        return self.rs.inflight

    def in_handler(self) -> bool:
        return self.eng.in_handler() is not None

    @property
    def closed(self) -> bool:
        return self.eng.closed
