"""``amnet-bench coll``'s node table: the collectives of one node -- broadcast, reduce_all,
gather_all and barrier at 8 B and 64 B, broadcast and reduce_all at 64 KiB -- on the node
area (the default: flags and copies in shared memory) beside the AM path (the algorithm the
team takes without the node area) and mpi4py, in the same run.

Each case, on every rank, OSU-style (the OSU micro-benchmarks' collective latency tests):
``warmup`` untimed calls, then ``calls`` rounds of a barrier (untimed) and one timed call;
a rank's figure is its mean call time and the table shows the slowest rank's. The amnet job
(:func:`small_job`) times, in the same rounds, the default (``amnet``), the AM path (``am``:
``team.default_algorithm(what, n, node_area=False)``) and the *team of one* (the same call
on a team of one member: the collective layer's own Python, nothing shared or sent: the
floor of any call from Python). mpi4py runs the same rounds with Bcast, Allreduce, Allgather
and Barrier (:func:`mpi_small_job`, this file run by ``mpiexec``: no amnet import there).

Three topologies: ``node`` (``--small-ranks`` processes of one node, beside mpi4py),
``threads`` (2 rank-threads of one process, beside the 2 processes of ``node`` in the same
repetition; its floor is the *handoff*: two rank-threads taking turns, the least a call that
both must run Python for costs, with the interpreter lock on one handoff each way) and
``2nodes`` (2 nodes of 2 processes: ``hier`` with its node steps on the node area beside
``hier_am``, the same with AMs; the two take turns round by round, ``plan["paired"]``, as
their peer is in the same job: this machine's speed drifts by more than the node step
weighs in a call over the conduit).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PREFIX = "AMNET_COLLSMALL_RESULT "
SMALL = ("broadcast", "reduce_all", "gather_all", "barrier")
BIG = ("broadcast", "reduce_all")  # also at BIG_SIZE (issue 44's 64 KiB targets)
BIG_SIZE = 1 << 16
TOPOLOGIES = ("node", "threads", "2nodes")
MPI_SMALL = {"broadcast": "Bcast", "reduce_all": "Allreduce", "gather_all": "Allgather",
             "barrier": "Barrier"}
_TURN: dict[int, list[int]] = {}  # the handoff floor's turn, by pair of rank-threads


def _rounds(calls: list[Callable[[], Any]], sync: Callable[[], Any],
            plan: dict[str, Any]) -> list[float]:
    """Mean seconds of each of ``calls`` over the timed rounds: a round is a ``sync``
    (untimed) and the call, for each call in turn, so that calls compared in one list see
    the same drift of the machine's speed (one call: OSU's loop)."""
    pc = time.perf_counter
    sync()
    for call in calls:
        for _ in range(plan["warmup"]):
            call()
    total = [0.0] * len(calls)
    for _ in range(plan["calls"]):
        for i, call in enumerate(calls):
            sync()
            t0 = pc()
            call()
            total[i] += pc() - t0
    return [t / plan["calls"] for t in total]


def _cases(plan: dict[str, Any]) -> list[tuple[str, int]]:
    """(collective, block bytes): a barrier once, the others at every small size, BIG at
    BIG_SIZE too."""
    out = [(w, n) for w in plan["small"] for n in (plan["small_sizes"] if w != "barrier"
                                                   else plan["small_sizes"][:1])]
    return out + [(w, BIG_SIZE) for w in BIG if plan.get("big") and w in plan["small"]]


def _handoff(ep: Any, plan: dict[str, Any]) -> float:
    """Rank-threads 2k and 2k+1 of a process take turns through a shared word, waiting in
    ``time.sleep(0)`` (which lets the interpreter lock go) where the lock is on, spinning
    on the word where it is off: seconds per round of both turns."""
    me = ep.rank
    pair = me - me % 2
    other = pair + 1 - me % 2
    turn = _TURN.setdefault(pair, [pair])
    nap = time.sleep if getattr(sys, "_is_gil_enabled", lambda: True)() else None
    ep.barrier()
    pc = time.perf_counter
    t0 = pc()
    for _ in range(plan["calls"]):
        while turn[0] != me:
            if nap is not None:
                nap(0)
        turn[0] = other
    dt = (pc() - t0) / plan["calls"]
    ep.barrier()
    _TURN.pop(pair, None)
    return dt


def small_job(ep: Any, plan: dict[str, Any]) -> dict[str, float]:
    """Every rank of an amnet job: ``{"what/kind/size": mean seconds}`` for kind ``amnet``
    (the world team's default), ``am`` (its AM path) and ``solo`` (a team of one); with
    rank-threads, ``handoff/floor/0`` too."""
    from ._colljob import _coll_call

    def call(team: Any, what: str, alg: str | None, n: int) -> Callable[[], Any]:
        if what == "broadcast":  # one buffer, as MPI's Bcast: the root copies nothing
            buf = np.full(n, 3, np.uint8)
            return lambda: team.broadcast(buf, buf, 0, algorithm=alg)
        return _coll_call(team, what, alg, n)

    team = ep.coll.world
    alone = team.split(ep.rank)
    out: dict[str, float] = {}
    for what, n in _cases(plan):
        am = team.default_algorithm(what, n, node_area=False)
        mine, theirs = call(team, what, None, n), call(team, what, am, n)
        out[f"{what}/solo/{n}"], = _rounds([call(alone, what, None, n)], team.barrier, plan)
        if plan.get("paired"):  # the AM path is the peer: round by round, the same drift
            out[f"{what}/amnet/{n}"], out[f"{what}/am/{n}"] = _rounds(
                [mine, theirs], team.barrier, plan)
        else:  # the peer is mpi4py's OSU loop: the same loop
            out[f"{what}/amnet/{n}"], = _rounds([mine], team.barrier, plan)
            out[f"{what}/am/{n}"], = _rounds([theirs], team.barrier, plan)
    if ep.threads_per_proc > 1:
        out["handoff/floor/0"] = _handoff(ep, plan)
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
        mine[f"{what}/mpi4py/{n}"], = _rounds([call], comm.Barrier, plan)
    every = comm.gather(mine, root=0)
    if rank:
        return None
    return {k: max(d[k] for d in every) for k in mine}


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e6:.2f}"


def small_table(per: dict, ranks: list[int], topologies: list[str], plan: dict[str, Any],
                reps: int, why: str | None, interp: str) -> tuple[list, dict]:
    """The node table's rows (results, table) from ``per[(src, P, key)]`` (one value per
    repetition): src ``small`` (node, P processes), ``small-mpi``, ``small-threads`` and
    ``small-2nodes``."""
    from ._options import size_label
    from ._stats import median
    from ._targets import COLL_NODE_MANY, COLL_NODE_NODES, COLL_NODE_PAIR, COLL_NODE_THREADS
    from ._twonode import cpu_count as _cores

    results, rows, notes, missed = [], [], [], []
    groups = [("node", P, "small") for P in ranks if "node" in topologies]
    if "threads" in topologies:
        groups.append(("threads", 2, "small-threads"))
    if "2nodes" in topologies:
        groups.append(("2nodes", 4, "small-2nodes"))
    for topo, P, src in groups:
        for what, n in _cases(plan):
            def get(kind: str, src: str = src, P: int = P, n: int = n, what: str = what
                    ) -> list[float]:
                return per.get((src, P, f"{what}/{kind}/{n}"), [])

            am, path, so = get("amnet"), get("am"), get("solo")
            if not am:
                continue
            if topo == "node":
                peer, pname = get("mpi4py", "small-mpi"), "mpi4py"
                target = COLL_NODE_PAIR if P == 2 else COLL_NODE_MANY
                floor = [s / m for s, m in zip(so, peer, strict=False) if m]
                fname = "team of one"
            elif topo == "threads":
                peer, pname, target = get("amnet", "small", 2), "2 processes", COLL_NODE_THREADS
                h = per.get((src, P, "handoff/floor/0"), [])
                # the higher of two floors: the handoff, and the layer's own Python in the
                # process of the rank-threads (its team of one)
                fh = [f / m for f, m in zip(h, peer, strict=False) if m]
                fs = [f / m for f, m in zip(so, peer, strict=False) if m]
                if fh and fs and median(fs) > median(fh):
                    floor, fname = fs, "team of one"
                else:
                    floor, fname = fh, "handoff"
            else:
                peer, pname, target = path, "hier_am", COLL_NODE_NODES
                floor, fname = [], ""
            # the ratio of each repetition (amnet and its peer in the same repetition),
            # then the median: the machine's speed drifts between repetitions
            ratios = [a / m for a, m in zip(am, peer, strict=False) if m]
            x = median(ratios) if ratios else None
            fx = median(floor) if floor else None
            status = ("-" if x is None else "met" if x <= target else
                      f"below the {fname} floor" if fx is not None and fx > target
                      else "missed")
            r = {"section": "small", "topology": topo, "collective": what, "ranks": P,
                 "size": n, "amnet": median(am), "am": median(path) if path else None,
                 "solo": median(so) if so else None, "peer": median(peer) if peer else None,
                 "peer_name": pname, "mpi4py": median(peer) if topo == "node" and peer
                 else None, "ratio": x, "ratios": ratios, "target": target,
                 "floor_name": fname or None, "floor_ratio": fx, "status": status,
                 "samples": {"amnet": am, "peer": peer}}
            results.append(r)
            if status not in ("met", "-"):
                missed.append(f"{topo} {what} {P} ranks {size_label(n)} ({x:.2f}x: "
                              f"{status})")
            rows.append([topo, str(P), what, "-" if what == "barrier" else size_label(n),
                         _us(r["amnet"]), _us(r["am"]), _us(r["solo"]),
                         f"{pname} {_us(r['peer'])}",
                         "-" if x is None else f"{x:.2f}", f"<= {target:g}",
                         "-" if fx is None else f"{fname} {fx:.2f}", status,
                         " ".join(f"{v:.2f}" for v in ratios) or "-"])
    if why is not None:
        notes.append(f"mpi4py peer missing: {why}.")
    if results:
        notes.append(f"targets: 2 processes of a node <= {COLL_NODE_PAIR:g}x mpi4py, more <= "
                     f"{COLL_NODE_MANY:g}x; 2 rank-threads <= {COLL_NODE_THREADS:g}x the 2 "
                     f"processes; 2 nodes of 2 <= {COLL_NODE_NODES:g}x hier_am: "
                     + ("met" if not missed else "missed for " + ", ".join(missed)) + ".")
    notes.append(f"{interp}. OSU-style: {plan['warmup']} untimed calls, then {plan['calls']} "
                 "rounds of an untimed barrier and one timed call; the slowest rank's mean; "
                 f"ratio: the median of the {reps} repetitions' ratios (each repetition's "
                 "jobs run back to back), every repetition's listed; over 2 nodes the node "
                 "area's and hier_am's rounds take turns.")
    notes.append("node area: the default, flags and copies in the team's node area; AM "
                 "path: the algorithm the team takes without it (direct up to 4 ranks, "
                 "hier_am over 2 nodes), in the same job; team of one: the same call on a "
                 "team of one member (the layer's own Python, nothing shared: the floor of "
                 "a call from Python, shown as a ratio to mpi4py); handoff: two rank-threads "
                 "taking turns through a shared word (time.sleep(0) between looks where the "
                 "interpreter lock is on, spinning where it is off), a round of both turns, "
                 "shown as a ratio to the 2 processes' call: with the lock on, every call of "
                 "two rank-threads pays it. A threads row's floor is the higher of its "
                 "handoff and its own team of one (the layer's Python in the rank-threads' "
                 "process) over the 2 processes' call.")
    if ranks and max(ranks) > _cores():
        notes.append(f"{_cores()} usable cores: jobs of more ranks are oversubscribed; a "
                     "waiting rank yields the core at every look at the flags that finds "
                     "nothing (for 50 µs), then blocks on its doorbell; MPICH's ranks spin "
                     "and yield.")
    table = {"title": "Node collectives: the node area beside the AM path and mpi4py (µs)",
             "columns": ["topology", "ranks", "collective", "block", "node area", "AM path",
                         "team of one", "peer", "ratio", "target", "floor / peer", "status",
                         "ratio by repetition"],
             "rows": rows, "notes": notes}
    return results, table


if __name__ == "__main__":
    from _mpipeer import script_main  # run as a script: this directory is sys.path[0]

    script_main(mpi_small_job, PREFIX, sys.argv[1:],
                "mpiexec -n P python _collsmall.py job PLAN_JSON")
