"""Put-with-signal and the signal word (OpenSHMEM 1.5 §9.8; shmem4py's names and argument
order). A signal word is a symmetric uint64 (:func:`new_signal`); ``put_signal`` puts the
data and then sets or adds to the target's signal word, so a PE that sees the signal sees
the data: within the node the data is stored and then the word updated with a hardware
atomic; to another node both travel in one PUT_SIGNAL message, whose reply
:func:`shmem_rt.quiet` counts. ``signal_wait_until`` is with the waits
(:mod:`shmem_rt._sync`).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ._init import current
from ._memory import check_pe, free, new_word, signal_offset, signal_word, sym_offset
from ._rma import buffer_of, count_of
from ._state import PUT_SIGNAL, SIG_ADD, SIG_SET
from ._team import ctx_pe


class SIGNAL(enum.IntEnum):
    SET = SIG_SET
    ADD = SIG_ADD


SIGNAL_SET = SIGNAL.SET
SIGNAL_ADD = SIGNAL.ADD


def new_signal() -> np.ndarray:
    """A symmetric signal word (uint64, zero; collective), for :func:`put_signal`."""
    return new_word(np.uint64, "shmem.new_signal()")


def del_signal(signal: np.ndarray) -> None:
    """Free a signal word (collective)."""
    free(signal_word(signal, "shmem.del_signal()"))


def signal_fetch(signal: np.ndarray) -> int:
    """This PE's signal word, read atomically."""
    st = current()
    off = signal_offset(st, signal, "shmem.signal_fetch()")
    return st.ep.atomic(st.me, off, "get", dtype="u8")


def _put_signal(what: str, target: np.ndarray, source: np.ndarray, pe: int,
                signal: np.ndarray, value: int, sigop: int, size: int | None,
                ctx: Any) -> None:
    st = current()
    pe = ctx_pe(ctx, pe, what)
    t = buffer_of(target, what, "target", True)
    s = buffer_of(source, what, "source", False)
    n = count_of(t, s, size, what)
    off = sym_offset(st, t, what, "target")
    soff = signal_offset(st, signal, what)
    pe = check_pe(st, pe, what)
    if sigop not in (SIG_SET, SIG_ADD):
        raise ValueError(f"{what}: sigop must be SIGNAL_SET or SIGNAL_ADD, got {sigop!r}")
    if isinstance(value, bool) or not isinstance(value, int | np.integer) \
            or not -(1 << 63) <= value < (1 << 64):
        raise ValueError(f"{what}: value must be an int that fits uint64, got {value!r}")
    value = int(value) & 0xFFFFFFFFFFFFFFFF
    data = s[:n]
    if st.local[pe]:  # the data, then the signal: x86 stores become visible in order
        st.ep.put(pe, off, data)
        st.ep.atomic(pe, soff, "set" if sigop == SIG_SET else "fadd", value, dtype="u8")
        if st.nudging:
            st.touched(pe)
        return
    port = st.port
    if data.nbytes > port.max_payload:
        st.ep.put(pe, off, data)  # complete before the signal goes
        data = None
    opid, op = port.op(pe, nbi=True)
    signed = value - (1 << 64) if value >= (1 << 63) else value
    try:
        port.send(pe, PUT_SIGNAL, (opid, off, soff, int(sigop), signed), data)
    except BaseException as e:
        port.finish(opid, op, error=e)
        raise
    st.pending = True


def put_signal(target: np.ndarray, source: np.ndarray, pe: int, signal: np.ndarray,
               value: int, sigop: int, size: int | None = None, ctx: Any = None) -> None:
    """Put ``source`` into ``target`` on ``pe``, then update ``signal`` there (set to, or
    add, ``value``): a PE that sees the signal sees the data.

    Raises: as :func:`put`; TypeError for a signal that is no uint64 symmetric word;
        ValueError for a bad ``sigop`` or ``value``.
    """
    _put_signal("shmem.put_signal()", target, source, pe, signal, value, sigop, size, ctx)


def put_signal_nbi(target: np.ndarray, source: np.ndarray, pe: int, signal: np.ndarray,
                   value: int, sigop: int, size: int | None = None, ctx: Any = None) -> None:
    """:func:`put_signal`, complete after :func:`quiet`."""
    _put_signal("shmem.put_signal_nbi()", target, source, pe, signal, value, sigop, size,
                ctx)
