"""The ranks' side of ``amnet-bench hybrid``: in one job of one procs x threads split, the AM
round trips, the injection microbenchmark (:mod:`amnet_bench._injectjob`), the
application kernels (:mod:`amnet_bench._appsjob`) and the collectives
(:mod:`amnet_bench._hcolljob`), each part skipped when its plan is None (or absent).

The round trips: every rank pings a partner with Short AMs and serves its partner's pings,
all pairs at once (every rank active, as in the hybrid paper's microbenchmarks): ``node``,
the rank next to it on its node (index ^ 1; none when a node has one rank), and ``net``, the
rank with its index on the next node. A round is ``trips`` round trips after a barrier; the
rank returns its seconds per round trip for every kept round.
"""

from __future__ import annotations

import time
from typing import Any

from ._appsjob import apps_job
from ._hcolljob import coll_part
from ._injectjob import inject_job
from ._jobs import HANDLERS, _state, bench_ping


def _rtt(ep: Any, plan: dict[str, Any]) -> dict[str, list[float] | None]:
    ep.register_handlers(HANDLERS)
    st = _state(ep.rank)
    mine = [r for r in range(ep.size) if ep.is_local(r)]
    others = [r for r in range(ep.size) if not ep.is_local(r)]
    me = mine.index(ep.rank)
    partner = {"node": mine[me ^ 1] if (me ^ 1) < len(mine) else None,
               "net": others[me % len(others)] if others else None}
    pc = time.perf_counter
    out: dict[str, list[float] | None] = {}
    for kind in ("node", "net"):
        dest = partner[kind]
        secs: list[float] = []
        for rnd in range(plan["samples"] + 1):
            ep.barrier()
            t0 = pc()
            if dest is not None:
                for i in range(plan["trips"]):
                    want = st.got + 1
                    ep.request_short(dest, bench_ping, i)
                    ep.wait_until(lambda w=want: st.got >= w)
            t = pc() - t0
            ep.barrier()
            if rnd and dest is not None:
                secs.append(t / plan["trips"])
        out[kind] = secs if dest is not None else None
    return out


def hybrid_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if plan["am"] is not None:
        out["am"] = _rtt(ep, plan["am"])
    if plan["inject"] is not None:
        out["inject"] = inject_job(ep, plan["inject"])
    if plan["apps"] is not None:
        out["apps"] = apps_job(ep, plan["apps"])
    if plan.get("coll") is not None:
        out["coll"] = coll_part(ep, plan["coll"])
    return out
