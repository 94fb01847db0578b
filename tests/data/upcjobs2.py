"""More jobs for tests/test_upc.py (upcjobs.py holds the first ones): the shared heap giving
space back, element reads as snapshots, forall on n-D arrays, atomic domains against the
types they are used on, local_indices. Each runs in every rank (``amnet.run(fn)``), checks
what it can with assert (naming the thread) and returns facts for the test to check."""

from __future__ import annotations

import upc_rt as upc


def _err(fn) -> str:
    """``fn()``'s exception as ``"Type: message"``, or ``"no error"``."""
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def heap_phases(ep, rounds: int = 2) -> list[str]:
    """Phases that each need most of the segment, one after another: symmetric (all_alloc
    of 5/8 of the segment per thread), then local (alloc of as much on every thread), then
    symmetric again, ``rounds`` times; the same with a shared array in place of all_alloc
    and a global_alloc by thread 1. Each phase frees what it took before the next starts.
    Returns what each step raised ("no error" when it fit)."""
    upc.init()
    me, T = upc.MYTHREAD, upc.THREADS
    big = ep.config.segment_size * 5 // 8
    out = []
    for r in range(rounds):
        p = upc.all_alloc(T, big)
        out.append(f"all_alloc {r}: no error")
        upc.barrier()
        if me == 0:
            upc.free(p)
        upc.barrier()
        out.append(f"alloc {r}: " + _err(lambda: upc.free(upc.alloc(big))))
        upc.barrier()
    X = upc.shared_array(big // 8 * T, "i8", big // 8)
    X.local[:] = me
    upc.barrier()
    if me == 0:
        upc.free(X)
    upc.barrier()
    out.append("alloc after array: " + _err(lambda: upc.free(upc.alloc(big))))
    upc.barrier()
    g = upc.global_alloc(T, big) if me == 1 % T else None
    upc.barrier()
    out.append("alloc beside global_alloc: " + _err(lambda: upc.alloc(big)))  # no room
    upc.barrier()
    if g is not None:
        upc.free(g)
    upc.barrier()
    out.append("alloc after global_alloc: " + _err(lambda: upc.free(upc.alloc(big))))
    upc.barrier()
    # local -> global: a local block in the way refuses the growth, its free lets it
    q = upc.alloc(big) if me == T - 1 else None
    upc.barrier()
    out.append("all_alloc beside alloc: " + _err(lambda: upc.all_alloc(T, big)))
    upc.barrier()
    if q is not None:
        upc.free(q)
    upc.barrier()
    p = upc.all_alloc(T, big)
    upc.barrier()
    if me == 0:
        upc.free(p)
    upc.barrier()
    return out
