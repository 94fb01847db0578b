"""The amnet exception hierarchy.

Every error amnet raises on purpose derives from :class:`AMNetError`, so a caller can catch
the whole family at once. Each class says in its docstring when it is raised.
"""

from __future__ import annotations


class AMNetError(Exception):
    """Base class of every error raised by amnet."""


class ConfigError(AMNetError, ValueError):
    """Raised at start when an option, an ``AMNET_*`` variable or a job shape is invalid.

    The message names the option, the value given and what is accepted.
    """


class TopologyError(ConfigError):
    """Raised when ``n``, ``procs_per_node``, ``threads_per_proc`` or ``nodes`` do not fit.

    For example ``n`` is not a positive multiple of ``threads_per_proc``, or ``nodes`` cannot
    be reached by packing the same number of processes on every node.
    """


class InitError(AMNetError, RuntimeError):
    """Raised by :func:`amnet.init` and :func:`amnet.finalize` when they are misused.

    Calling ``init`` twice on one rank, calling it from a thread that is not a rank of the
    job, or using the endpoint after ``finalize``.
    """


class RankError(AMNetError, ValueError):
    """Raised when a rank argument is not an ``int`` in ``range(ep.size)``."""


class CollectiveMismatch(AMNetError):
    """Raised on every rank when ranks entered different collectives at the same step.

    For example one rank calls ``ep.barrier()`` while another calls ``amnet.finalize()``.
    """


class BarrierMismatch(CollectiveMismatch):
    """Raised on every rank of a barrier when ranks passed different barrier names.

    An anonymous barrier (``name=None``) matches any name.
    """


class JobAborted(AMNetError):
    """Raised in a rank that waits in amnet while the job is being torn down.

    The job ends because another rank failed, called :func:`amnet.abort`, or the launcher
    was interrupted or timed out. ``reason`` says which.
    """

    def __init__(self, reason: str, code: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code

    def __reduce__(self):
        return type(self), (self.reason, self.code)


class JobFailed(AMNetError):
    """Raised by :func:`amnet.run` when the job failed without a Python exception to re-raise.

    A rank was killed by a signal, exited with a non-zero status, called
    :func:`amnet.abort`, or the job timed out. ``code`` is the job's exit status and
    ``diagnosis`` the one-line explanation ``amnet-run`` would print.
    """

    def __init__(self, diagnosis: str, code: int) -> None:
        super().__init__(diagnosis)
        self.diagnosis = diagnosis
        self.code = code

    def __reduce__(self):
        return type(self), (self.diagnosis, self.code)


class RemoteTraceback(Exception):
    """Carries the formatted traceback of an exception raised on another rank.

    :func:`amnet.run` re-raises a rank's exception ``from`` one of these, so the remote
    frames show up in the caller's traceback.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return "\n" + self.tb
