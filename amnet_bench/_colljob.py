"""The ranks' side of ``amnet-bench coll``: the UPC collectives report's testbed ("High
Performance UPC Collectives for Linux/Myrinet Platforms", §4.5 and §7.1), for amnet's
collectives (:func:`coll_job`, every rank of an amnet job) and for mpi4py
(:func:`mpi_job`, this file run by ``mpiexec``: no amnet import there).

For each collective, algorithm and size: ``warmup`` untimed calls; then ``warmup`` calls
timed with no computation, whose mean is the *warm-up time*; then ``calls`` rounds of one
timed call followed by local computation (a busy loop) for ``compute`` x the warm-up time,
the ``skew`` rank computing ``skew_factor`` times longer. A rank's figure is its mean
collective time over the rounds; the suite reports the slowest rank's (the report's
"largest average"). A barrier starts every case.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

PREFIX = "AMNET_COLLPEER_RESULT "


def _spin(seconds: float) -> None:
    """Local computation: a busy loop for ``seconds`` (no communication)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _case(call: Any, barrier: Any, rank: int, plan: dict[str, Any]) -> float:
    """One case on this rank: its mean collective seconds over the timed rounds."""
    pc = time.perf_counter
    barrier()
    for _ in range(plan["warmup"]):
        call()
    t0 = pc()
    for _ in range(plan["warmup"]):
        call()
    warm = (pc() - t0) / max(1, plan["warmup"])
    comp = plan["compute"] * warm
    if plan["skew_factor"] > 1 and rank == plan["skew_rank"]:
        comp *= plan["skew_factor"]
    total = 0.0
    for _ in range(plan["calls"]):
        t0 = pc()
        call()
        total += pc() - t0
        _spin(comp)
    return total / plan["calls"]


def _buffers(what: str, n: int, P: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) for one rank: n bytes a block."""
    if what in ("broadcast", "reduce_all"):
        return np.full(n, 3, np.uint8), np.zeros(n, np.uint8)
    if what == "gather_all":
        return np.full(n, 3, np.uint8), np.zeros(n * P, np.uint8)
    return np.full(n * P, 3, np.uint8), np.zeros(n * P, np.uint8)  # exchange


_GOT: dict[int, list] = {}  # rank -> [messages arrived, landing buffer] (the floor's AMs)


def _land(token: Any, payload: Any, at: int) -> None:
    """The floor's handler: the payload into the landing buffer at byte ``at``."""
    got = _GOT[token.endpoint.rank]
    got[1][at:at + len(payload)] = np.frombuffer(payload, np.uint8)
    got[0] += 1


def _floor_call(ep: Any, what: str, n: int, src: np.ndarray, dst: np.ndarray) -> Any:
    """The floor: the push's messages as plain Medium AMs (amnet's cheapest way to
    move them, with no collective logic): broadcast from rank 0; gather_all, exchange and
    reduce_all (a sum of float64s) to and from every rank; barrier: an empty one to and from
    every rank."""
    me, P, step = ep.rank, ep.size, ep.max_medium
    got = _GOT[me]
    got[1] = dst
    chunks = -(-n // step)
    want = [got[0]]

    def send(to: int, blk: np.ndarray, at: int) -> None:
        for c in range(chunks):
            ep.request_medium(to, _land, blk[c * step:(c + 1) * step], at + c * step)

    def call() -> None:
        if what == "barrier":  # an empty message to every other rank, one from each
            for t in range(P):
                if t != me:
                    ep.request_medium(t, _land, b"", 0)
            want[0] += P - 1
        elif what == "broadcast":
            if me == 0:
                for t in range(1, P):
                    send(t, src, 0)
                return
            want[0] += chunks
        else:  # gather_all, exchange, reduce_all
            for t in range(P):
                if t != me:
                    send(t, src[t * n:(t + 1) * n] if what == "exchange" else src, me * n)
            want[0] += chunks * (P - 1)
        ep.wait_until(lambda: got[0] >= want[0])
        if what == "reduce_all":
            dst.view(np.float64).reshape(P, -1).sum(axis=0)

    return call


def _coll_call(team: Any, what: str, alg: str | None, n: int) -> Any:
    """One call of collective ``what`` (``alg``; None: the default) on ``team``, n bytes a
    block (reduce_all: n bytes of float64, at least one, summed)."""
    from amnet.coll import ADD

    if what == "reduce_all":
        s8 = np.ones(max(1, n // 8))
        d8 = np.zeros_like(s8)
        return lambda: team.reduce_all(d8, s8, ADD, algorithm=alg)
    if what == "barrier":
        return lambda: team.barrier(algorithm=alg)
    src, dst = _buffers(what, n, team.size)
    if what == "broadcast":
        return lambda: team.broadcast(dst, src, 0, algorithm=alg)
    if what == "gather_all":
        return lambda: team.gather_all(dst, src, algorithm=alg)
    return lambda: team.exchange(dst, src, algorithm=alg)


def coll_job(ep: Any, plan: dict[str, Any]) -> dict[str, float]:
    """Every rank of an amnet job: ``{"what/algorithm/size": mean seconds}``, with the
    floor as algorithm ``floor`` and the default algorithm on a team of one member (every
    rank alone: the collective layer's own cost, no message) as ``solo``."""
    from amnet.coll import ALGORITHMS

    team = ep.coll.world
    P = team.size
    _GOT[ep.rank] = [0, None]
    ep.register_handlers([_land])
    out: dict[str, float] = {}
    alone = team.split(ep.rank)
    for what in plan["collectives"]:
        for n in plan["sizes"]:
            nb = 8 * max(1, n // 8) if what == "reduce_all" else n  # as the cases below
            src = np.full(nb * P if what == "exchange" else nb, 3, np.uint8)
            dst = np.zeros(nb * P, np.uint8)
            out[f"{what}/floor/{n}"] = _case(_floor_call(ep, what, nb, src, dst),
                                             team.barrier, ep.rank, plan)
            out[f"{what}/solo/{n}"] = _case(_coll_call(alone, what, None, n), team.barrier,
                                            ep.rank, plan)
    for what in plan["collectives"]:
        algs = [a for a in ALGORITHMS[what] if a in plan["algorithms"].get(what, ())]
        for alg in algs:
            for n in plan["sizes"]:
                if alg.startswith("naive") and n > plan["naive_max"]:
                    continue
                out[f"{what}/{alg}/{n}"] = _case(_coll_call(team, what, alg, n),
                                                 team.barrier, ep.rank, plan)
    return out


SYNC_MODES = ("ALL", "MY", "NO")  # IN_xSYNC | OUT_xSYNC: the report's test cases 1, 7 and 8


def upc_sync_job(ep: Any, plan: dict[str, Any]) -> dict[str, float]:
    """Every thread of a upc_rt job: ``upc.all_broadcast`` and ``upc.all_exchange`` under
    each ``plan["sync"]`` mode (IN and OUT alike), the same testbed; ``{"what/MODE/size":
    mean seconds}``."""
    import upc_rt as upc

    upc.init()
    T = upc.THREADS
    out: dict[str, float] = {}
    for what in [w for w in ("broadcast", "exchange") if w in plan["collectives"]]:
        for n in plan["sizes"]:
            if what == "broadcast":
                S = upc.all_alloc(1, n)  # shared [] char[n] on thread 0
                D = upc.all_alloc(T, n)  # shared [n] char[n*THREADS]
            else:
                S = upc.all_alloc(T, n * T)  # shared [n*T] char[n*T*T]
                D = upc.all_alloc(T, n * T)
            for mode in plan["sync"]:
                flags = getattr(upc, f"IN_{mode}SYNC") | getattr(upc, f"OUT_{mode}SYNC")
                if what == "broadcast":
                    def call(flags=flags, S=S, D=D, n=n) -> None:
                        upc.all_broadcast(D, S, n, flags)
                else:
                    def call(flags=flags, S=S, D=D, n=n) -> None:
                        upc.all_exchange(D, S, n, flags)
                out[f"{what}/{mode}/{n}"] = _case(call, upc.barrier, ep.rank, plan)
            upc.barrier()
            if upc.MYTHREAD == 0:
                upc.free(S)
                upc.free(D)
    return out


def mpi_job(plan: dict[str, Any]) -> dict[str, float] | None:
    """Inside ``mpiexec -n P``: the same cases with mpi4py's Bcast, Allgather, Alltoall,
    Allreduce (buffer API on numpy arrays); rank 0 returns every case's slowest-rank mean."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    mine: dict[str, float] = {}
    for what in plan["collectives"]:
        for n in plan["sizes"]:
            src, dst = _buffers(what, n, P)
            if what == "broadcast":
                def call(dst=dst) -> None:
                    comm.Bcast(dst, root=0)
            elif what == "gather_all":
                def call(src=src, dst=dst) -> None:
                    comm.Allgather(src, dst)
            elif what == "exchange":
                def call(src=src, dst=dst) -> None:
                    comm.Alltoall(src, dst)
            else:
                s8 = np.ones(max(1, n // 8))
                d8 = np.zeros_like(s8)

                def call(s8=s8, d8=d8) -> None:
                    comm.Allreduce(s8, d8, op=MPI.SUM)
            mine[f"{what}/mpi4py/{n}"] = _case(call, comm.Barrier, rank, plan)
    every = comm.gather(mine, root=0)
    if rank:
        return None
    return {k: max(d[k] for d in every) for k in mine}


if __name__ == "__main__":
    from _mpipeer import script_main  # run as a script: this directory is sys.path[0]

    script_main(mpi_job, PREFIX, sys.argv[1:], "mpiexec -n P python _colljob.py job PLAN_JSON")
