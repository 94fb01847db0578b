"""``amnet-bench coll``'s fixed-cost table: small collectives (broadcast, reduce_all,
gather_all, barrier at 8 B and 64 B) within one node, beside mpi4py in the same run, with the
two floors of a collective written in Python on amnet's AMs beside every figure.

Each case, on every rank, OSU-style (the OSU micro-benchmarks' collective latency tests):
``warmup`` untimed calls, then ``calls`` rounds of a barrier (untimed) and one timed call;
a rank's figure is its mean call time and the table shows the slowest rank's. In the amnet
job (:func:`small_job`) the same rounds time the two floors: the *AM floor* (the call's
messages as plain Medium AMs, a handler that counts them, no collective logic) and the *team
of one* (the same call on a team of one member: the collective layer's own Python, no
message). mpi4py runs the same rounds with Bcast, Allreduce, Allgather and Barrier
(:func:`mpi_small_job`, this file run by ``mpiexec``: no amnet import there).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PREFIX = "AMNET_COLLSMALL_RESULT "
TARGET_SMALL = 2.0  # small calls: at most 2x mpi4py, 2 and 4 ranks in a node (issue 31)
SMALL = ("broadcast", "reduce_all", "gather_all", "barrier")
MPI_SMALL = {"broadcast": "Bcast", "reduce_all": "Allreduce", "gather_all": "Allgather",
             "barrier": "Barrier"}


def _rounds(call: Callable[[], Any], sync: Callable[[], Any], plan: dict[str, Any]) -> float:
    """Mean seconds of ``call`` over the timed rounds (a ``sync`` before each, untimed)."""
    pc = time.perf_counter
    sync()
    for _ in range(plan["warmup"]):
        call()
    total = 0.0
    for _ in range(plan["calls"]):
        sync()
        t0 = pc()
        call()
        total += pc() - t0
    return total / plan["calls"]


def _cases(plan: dict[str, Any]) -> list[tuple[str, int]]:
    """(collective, block bytes): a barrier once, the others at every size."""
    return [(w, n) for w in plan["small"] for n in (plan["small_sizes"] if w != "barrier"
                                                     else plan["small_sizes"][:1])]


def small_job(ep: Any, plan: dict[str, Any]) -> dict[str, float]:
    """Every rank of an amnet job: ``{"what/kind/size": mean seconds}`` for kind ``amnet``
    (the world team, default algorithm), ``floor`` and ``solo`` (a team of one)."""
    from ._colljob import _GOT, _coll_call, _floor_call, _land

    team = ep.coll.world
    P = team.size
    _GOT[ep.rank] = [0, None]
    ep.register_handlers([_land])
    alone = team.split(ep.rank)
    out: dict[str, float] = {}
    for what, n in _cases(plan):
        nb = 8 * max(1, n // 8) if what == "reduce_all" else n  # as _coll_call's arrays
        src = np.full(nb, 3, np.uint8)
        dst = np.zeros(nb * P, np.uint8)
        out[f"{what}/floor/{n}"] = _rounds(_floor_call(ep, what, nb, src, dst), team.barrier,
                                           plan)
        out[f"{what}/solo/{n}"] = _rounds(_coll_call(alone, what, None, n), team.barrier, plan)
        out[f"{what}/amnet/{n}"] = _rounds(_coll_call(team, what, None, n), team.barrier,
                                           plan)
    return out


def mpi_small_job(plan: dict[str, Any]) -> dict[str, float] | None:
    """Inside ``mpiexec -n P``: the same rounds with mpi4py (buffer API on numpy arrays);
    rank 0 returns every case's slowest-rank mean."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, P = comm.Get_rank(), comm.Get_size()
    mine: dict[str, float] = {}
    for what, n in _cases(plan):
        src, dst = np.full(n, 3, np.uint8), np.zeros(n * P, np.uint8)
        s8, d8 = np.ones(max(1, n // 8)), np.zeros(max(1, n // 8))
        call = {"broadcast": lambda d=dst[:n]: comm.Bcast(d, root=0),
                "reduce_all": lambda s=s8, d=d8: comm.Allreduce(s, d, op=MPI.SUM),
                "gather_all": lambda s=src, d=dst: comm.Allgather(s, d),
                "barrier": comm.Barrier}[what]
        mine[f"{what}/mpi4py/{n}"] = _rounds(call, comm.Barrier, plan)
    every = comm.gather(mine, root=0)
    if rank:
        return None
    return {k: max(d[k] for d in every) for k in mine}



def _us(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e6:.2f}"


def small_table(per: dict, ranks: list[int], plan: dict[str, Any], reps: int,
                why: str | None) -> tuple[list, dict]:
    """The fixed-cost rows (results, table) from ``per[("small", P, key)]`` (one value per
    repetition) and ``per[("small-mpi", P, key)]``."""
    from ._report import median
    from ._twonode import cpu_count as _cores
    from ._twonode import size_label

    results, rows, notes = [], [], []
    missed = []
    for what, n in _cases(plan):
        for P in ranks:
            def get(kind: str, P: int = P, n: int = n, what: str = what) -> list[float]:
                src = "small-mpi" if kind == "mpi4py" else "small"
                return per.get((src, P, f"{what}/{kind}/{n}"), [])

            am, fl, so, mp = get("amnet"), get("floor"), get("solo"), get("mpi4py")
            if not am:
                continue
            # the ratio of each repetition (amnet and mpi4py in the same repetition), then
            # the median: the machine's speed drifts between repetitions
            ratios = [a / m for a, m in zip(am, mp, strict=False) if m]
            x = median(ratios) if ratios else None
            r = {"section": "small", "collective": what, "ranks": P, "size": n,
                 "amnet": median(am), "floor": median(fl) if fl else None,
                 "solo": median(so) if so else None, "mpi4py": median(mp) if mp else None,
                 "ratio": x, "ratios": ratios, "samples": {"amnet": am, "mpi4py": mp}}
            # where the same messages as plain AMs alone take more than the target allows,
            # the target sits below amnet's floor in this run
            fx = r["floor"] / r["mpi4py"] if r["floor"] and r["mpi4py"] else None
            r["floor_ratio"] = fx
            r["status"] = ("-" if x is None else "met" if x <= TARGET_SMALL else
                           "below the AM floor" if fx is not None and fx > TARGET_SMALL
                           else "missed")
            results.append(r)
            if r["status"] not in ("met", "-"):
                floor = "-" if fx is None else f"{fx:.2f}x"
                missed.append(f"{what} {P} ranks {size_label(n)} ({x:.2f}x; AM floor "
                              f"{floor}: {r['status']})")
            rows.append([what, str(P), "-" if what == "barrier" else size_label(n),
                         _us(r["amnet"]), _us(r["floor"]), _us(r["solo"]), _us(r["mpi4py"]),
                         "-" if x is None else f"{x:.2f}",
                         "-" if fx is None else f"{fx:.2f}", r["status"],
                         " ".join(f"{v:.2f}" for v in ratios) or "-"])
    if why is not None:
        notes.append(f"mpi4py peer missing: {why}.")
    elif results:
        notes.append(f"target: amnet <= {TARGET_SMALL:g}x mpi4py in every row: "
                     + ("met" if not missed else "missed for " + ", ".join(missed)) + ".")
    notes.append(f"OSU-style: {plan['warmup']} untimed calls, then {plan['calls']} rounds of "
                 "an untimed barrier and one timed call; the slowest rank's mean; ratio: "
                 f"the median of the {reps} repetitions' ratios (each repetition's amnet and "
                 "mpi4py jobs run back to back), every repetition's listed.")
    notes.append("AM floor: the call's messages as plain Medium AMs and a handler that "
                 "copies them (direct's: the root's to every rank; every rank's to every "
                 "other; an empty one for a barrier), with no collective logic; team of one: "
                 "the same call on a team of one member (no message). Both timed the same "
                 "way in the amnet job. 'below the AM floor': the plain AMs alone take more "
                 f"than {TARGET_SMALL:g}x mpi4py, so no collective on amnet's AMs meets it.")
    if ranks and max(ranks) > _cores():
        notes.append(f"{_cores()} usable cores: jobs of more ranks are oversubscribed; "
                     "amnet's ranks then wait blocking (a wake-up per message, the floor's "
                     "too), MPICH's spin and yield.")
    table = {"title": "Small collectives: the fixed cost of one call, beside mpi4py (one "
                      "node, µs)",
             "columns": ["collective", "ranks", "block", "amnet", "AM floor", "team of one",
                         "mpi4py", "amnet / mpi4py", "AM floor / mpi4py", "target",
                         "amnet / mpi4py by repetition"],
             "rows": rows, "notes": notes}
    return results, table


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "job":
        raise SystemExit("usage: mpiexec -n P python _collsmall.py job PLAN_JSON")
    res = mpi_small_job(json.loads(sys.argv[2]))
    if res is not None:
        print(PREFIX + json.dumps(res), flush=True)
