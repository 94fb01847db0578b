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

    An anonymous barrier (``name=None``) matches any name. The message starts with the name
    the raising rank passed, then names, for each other name, the lowest rank that passed it
    (:func:`barrier_mismatch_message`).
    """


NAME_SHOWN = 80  # a barrier name is shown (repr) up to this many characters
OTHERS_SHOWN = 3  # a BarrierMismatch message shows at most this many other names


def barrier_name_text(name: object) -> str:
    """How a barrier name (an int or a str) is shown: its repr, cut to NAME_SHOWN."""
    return cut_name_text(repr(name))


def cut_name_text(text: str) -> str:
    """A barrier name's repr, cut to NAME_SHOWN characters."""
    return text if len(text) <= NAME_SHOWN else text[:NAME_SHOWN - 3] + "..."


def barrier_mismatch_message(barrier: str, rank: int, mine: str | None,
                             others: list[tuple[int, str]]) -> str:
    """The text of a :class:`BarrierMismatch` raised on ``rank``.

    ``barrier`` names the barrier (``"barrier #3"``), ``mine`` is the name this rank passed
    as shown (None: no name) and ``others`` the ``(rank, shown name)`` of the lowest rank that
    passed each name other than ``mine``.
    """
    me = "no name (which matches any)" if mine is None else mine
    parts = [f"rank {r} passed {t}" for r, t in sorted(others)[:OTHERS_SHOWN]]
    if len(others) > OTHERS_SHOWN:
        parts.append(f"{len(others) - OTHERS_SHOWN} more ranks passed other names")
    said = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"names differ in {barrier}: this rank ({rank}) passed {me}, but {said}"


class AMContextError(AMNetError, RuntimeError):
    """Raised when a call breaks the restricted handler context (docs/design.md §3).

    A request handler replied twice, replied after it returned, or sent anything but its
    reply; a reply handler sent anything; any handler polled, waited, entered a barrier or
    started a put, get, atomic or rpc.
    """


class PayloadTooLarge(AMNetError, ValueError):
    """Raised before sending when a payload is longer than the limit the message names.

    A Medium payload may be at most ``ep.max_medium`` bytes.
    """


class SegmentBoundsError(AMNetError, IndexError):
    """Raised before sending when an offset and length leave the target rank's segment.

    Raised for put, get, Long payloads and atomics; the message names the range and the
    segment size.
    """


class HandlerNotRegistered(AMNetError, LookupError):
    """Raised when an AM or rpc names a function that is not in the rank's handler table.

    Register it with ``amnet.init(handlers=[...])`` or ``ep.register_handlers([...])``.
    """


class HandlerMismatch(AMNetError):
    """Raised on every rank when ranks registered different handler tables.

    The message names the first rank whose table differs from rank 0's and the handler.
    """


class HandlerCategoryError(AMNetError, TypeError):
    """Raised before sending when a handler declared for one category is used for another.

    For example a handler declared ``@amnet.handler("short")`` sent with ``request_medium``.
    """


class AMArgumentError(AMNetError, TypeError):
    """Raised before sending when AM arguments are not ints that fit int64, or there are
    more than ``amnet.MAX_ARGS`` of them (or not the count the handler declared).
    """


class AtomicError(AMNetError, ValueError):
    """Raised before sending when an atomic names an unknown op or dtype, a bitwise op on a
    float dtype, a value that does not fit the dtype, or an offset not aligned to the dtype.
    """


class BarrierStateError(AMNetError, RuntimeError):
    """Raised when split-phase barrier calls are mis-nested.

    ``barrier_wait``/``barrier_try`` without a pending ``barrier_notify``, or a second
    ``barrier_notify`` before the first barrier was completed.
    """


class _JobEnd(AMNetError):
    """An error that tells how a job ended: its text and the job's exit status ``code``,
    which a pickle keeps too (both travel between processes)."""

    def __init__(self, text: str, code: int) -> None:
        super().__init__(text)
        self.code = code

    def __reduce__(self):
        return type(self), (self.args[0], self.code)


class JobAborted(_JobEnd):
    """Raised in a rank that waits in amnet while the job is being torn down.

    The job ends because another rank failed, called :func:`amnet.abort`, or the launcher
    was interrupted or timed out. ``reason`` says which.
    """

    def __init__(self, reason: str, code: int = 1) -> None:
        super().__init__(reason, code)
        self.reason = reason


class JobFailed(_JobEnd):
    """Raised by :func:`amnet.run` when the job failed without a Python exception to re-raise.

    A rank was killed by a signal, exited with a non-zero status, called
    :func:`amnet.abort`, or the job timed out. ``code`` is the job's exit status and
    ``diagnosis`` the one-line explanation ``amnet-run`` would print.
    """

    def __init__(self, diagnosis: str, code: int) -> None:
        super().__init__(diagnosis, code)
        self.diagnosis = diagnosis


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


class RPCError(AMNetError):
    """Raised by an rpc handle's ``wait()`` when the remote function raised an exception
    that is neither a builtin nor an amnet exception type (those come back as themselves).

    The message names the remote rank, the function and the original type and message; the
    remote traceback is chained as ``__cause__``.
    """


class PshmSpaceError(AMNetError):
    """Raised at start (``amnet.init``) when the shared-memory backing cannot hold a process's
    PSHM object: its queues, payload slots and the segments of its ranks.

    The message names the size asked (bytes and MiB), the space free or the limit that
    applies, the backing, and the knobs that make the object smaller or avoid it
    (``--segment-size``, ``AMNET_PSHM_NETWORK_DEPTH``, ``AMNET_MAX_MEDIUM``,
    ``AMNET_PSHM_BACKING``, ``--no-pshm``). Nothing is left behind.
    """


class PshmAttachError(AMNetError, FileNotFoundError):
    """Raised at start when a node-local process's PSHM object cannot be mapped: it is gone
    (its creator died) or smaller than the job's layout says."""
