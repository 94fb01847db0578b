"""Jobs of tests/test_nbcomm.py: one program run twice on every rank, with plain blocking
put/get/barrier and with the automatic nonblocking scheduler, reporting what each run read
and what it left in memory.

A program is a list of phases, each a list of ops and a flag (run it in an aggregation
region). The ranks run it ``iterations`` times, each phase ending with a barrier, so every
phase after the first run is prefetched; every iteration drops some ops (``keep``), so the
prefetches are mispredicted too. Race-free by construction: in a *write* phase each rank
writes only its own window of a segment (window w of every segment belongs to rank w) and
reads only its own windows (what it just put); in a *read* phase nobody writes and anyone
reads anything.
"""

from __future__ import annotations

import hashlib

import numpy as np

from amnet.nbcomm import Scheduler

BASE, WIN = 4096, 256  # window w of every segment: bytes BASE + w * WIN .. + WIN


def _run(ep, program, iterations, keep, access) -> list[bytes]:
    """One run; ``access`` = (put, get, barrier, region): returns every value read."""
    put, get, barrier, region = access
    P, me = ep.size, ep.rank
    reads: list[bytes] = []
    for it in range(iterations):
        for ph, (write, aggregated, ops) in enumerate(program):
            outs = []
            with region(aggregated):
                for k, (kind, rel, off, n, value) in enumerate(ops):
                    if not keep[it % len(keep)][(ph * 31 + k) % len(keep[0])]:
                        continue
                    rank = (me + rel) % P
                    if write:  # my window only
                        at = BASE + me * WIN + off % WIN
                        n = min(n, BASE + (me + 1) * WIN - at)
                    else:  # anywhere in the windows
                        at = BASE + off % (P * WIN)
                        n = min(n, BASE + P * WIN - at)
                    if kind == "put" and write:
                        put(rank, at, bytes([(value + it + me) % 256]) * n)
                    elif kind == "get":
                        out = np.zeros(n, np.uint8)
                        get(rank, at, n, out)
                        outs.append(out)
            reads += [o.tobytes() for o in outs]  # after the region: aggregated gets are in
            barrier(ph)  # the event that opens the next phase (its key)
    return reads


def differential(ep, program, iterations, keep) -> dict:
    """The program blocking, then with the scheduler; each rank's reads and final memory
    (digests), and the scheduler's stats."""
    from contextlib import nullcontext

    seg = ep.segment
    seg[BASE:BASE + ep.size * WIN] = 0
    ep.barrier()
    plain = (lambda r, o, d: ep.put(r, o, d), lambda r, o, n, out: ep.get(r, o, n, out),
             lambda ph: ep.barrier(), lambda flag: nullcontext())
    ref = _run(ep, program, iterations, keep, plain)
    ref_mem = bytes(seg[BASE:BASE + ep.size * WIN])
    ep.barrier()
    seg[BASE:BASE + ep.size * WIN] = 0
    ep.barrier()
    s = Scheduler(ep, max_puts_per_dest=4, prefetch_chunk=2)
    auto = (s.memput, s.memget, lambda ph: s.barrier(event=("phase", ph)),
            lambda flag: s.aggregate() if flag else nullcontext())
    got = _run(ep, program, iterations, keep, auto)
    s.barrier()
    got_mem = bytes(seg[BASE:BASE + ep.size * WIN])

    def h(x):
        return hashlib.blake2b(repr(x).encode() if not isinstance(x, bytes) else x,
                               digest_size=8).hexdigest()

    return {"reads_same": ref == got, "n_reads": len(ref), "mem_same": ref_mem == got_mem,
            "ref": h(ref), "got": h(got), "stats": s.stats.__dict__}


def nb_job_with_a_wrong_manual(ep, plan) -> dict:
    """amnet-bench nbcomm's rank side with a stencil whose hand-made form computes something
    else from its second iteration on: the job must refuse to report its times."""
    from amnet_bench import _nbjob, _nbkernels

    class Wrong(_nbkernels.Stencil):
        def manual(self, it: int) -> None:
            super().manual(it)
            if it == 1:
                self.u[2, 2, 2] += 1.0

    _nbkernels.KERNELS["stencil"] = Wrong  # in this rank's process only
    return _nbjob.nb_job(ep, plan)
