"""The ranks' side of ``amnet-bench inject``: the hybrid paper's communication-intensive
microbenchmark ("Hybrid PGAS Runtime Support for Multicore Nodes", §4.1), where every rank
puts to ranks outside its node, all ranks at once (bidirectional traffic).

For each pattern, size and mode, ``samples + 1`` rounds (the first a warm-up): a barrier,
then ``msgs`` puts of ``size`` bytes, then a barrier. The patterns:

``p2p``  every put to one partner: the rank with the same index on the next node;
``p2m``  each put to the next rank of the other nodes in turn (fine-grained, shared-memory
         style code).

The modes: ``B`` blocking (``ep.put``: one transfer at a time), ``NB<k>`` nonblocking
(``ep.put_nb``) with at most ``k`` puts in flight (the oldest waited for first; the paper's
throttling), ``NB`` with no cap (the paper's 1024 outstanding). A rank returns, per case, its
seconds per round and, for the nonblocking modes, the mean time inside ``put_nb`` per put
(the injection overhead).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np


def _dests(ep: Any, pattern: str, msgs: int) -> list[int]:
    others = [r for r in range(ep.size) if not ep.is_local(r)]
    mine = [r for r in range(ep.size) if ep.is_local(r)]
    me = mine.index(ep.rank)
    if pattern == "p2p":
        return [others[me % len(others)]] * msgs
    return [others[(me + i) % len(others)] for i in range(msgs)]


def inject_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    pc = time.perf_counter
    out: dict[str, Any] = {}
    for pattern in plan["patterns"]:
        for size in plan["sizes"]:
            msgs = plan["msgs"][str(size)]
            dests = _dests(ep, pattern, msgs)
            buf = np.full(size, ep.rank & 0xFF, np.uint8)
            off = ep.rank * size  # every rank its own slot at the destination
            for mode in plan["modes"]:
                cap = None if mode == "NB" else (int(mode[2:]) if mode != "B" else 1)
                secs: list[float] = []
                inj: list[float] = []
                for rnd in range(plan["samples"] + 1):
                    ep.barrier()
                    tin = 0.0
                    t0 = pc()
                    if mode == "B":
                        put = ep.put
                        for d in dests:
                            put(d, off, buf)
                    else:
                        put_nb = ep.put_nb
                        fly: deque = deque()
                        for d in dests:
                            if cap is not None and len(fly) >= cap:
                                fly.popleft().wait()
                            a = pc()
                            fly.append(put_nb(d, off, buf))
                            tin += pc() - a
                        for h in fly:
                            h.wait()
                    t = pc() - t0
                    ep.barrier()
                    if rnd:
                        secs.append(t)
                        inj.append(tin / msgs)
                out[f"{pattern}/{size}/{mode}"] = {"seconds": secs,
                                                   "inject": inj if mode != "B" else None}
    return out
