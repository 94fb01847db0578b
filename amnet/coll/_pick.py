"""Which algorithm a collective call takes, and the call's description.

``default`` picks an algorithm from what every member knows alike (the collective, the
team's size and spread, the block size, the op), never from local state, so every member of
an agreeing call takes the same one; ``parse_choice`` reads ``AMNET_COLL_ALGORITHM``;
``signature`` is the description the members compare (see :mod:`amnet.coll._msg`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._algos import Args
from ._msg import Sig
from ._ops import NAMES, NONCOMM_FUNC
from ._table import ALGORITHMS

SMALL = 1 << 15  # gather-to-all below this many bytes in all: recursive doubling
HIER_EXCHANGE = 4096  # exchange across nodes: blocks up to this go through node leaders
#: ``direct`` (one round: every block straight to every member that needs it) is the
#: default for broadcast, gather_all, reduce_all and barrier on teams of up to DIRECT_P
#: members that are not spread over nodes with several members on one, for blocks of up to
#: DIRECT_MAX bytes; amnet.coll._fast drives those calls without a generator.
DIRECT_P = 4
DIRECT_MAX = 512
DIRECT = ("broadcast", "gather_all", "reduce_all", "barrier")


def parse_choice(text: str) -> dict[str, str]:
    """``AMNET_COLL_ALGORITHM``: a comma list of ``collective=algorithm`` and bare algorithm
    names (a bare name applies to every collective that has it). Raises ValueError naming
    what is unknown."""
    out: dict[str, str] = {}
    for item in (t.strip() for t in str(text or "").split(",")):
        if not item:
            continue
        if "=" in item:
            what, alg = (x.strip() for x in item.split("=", 1))
            if what not in ALGORITHMS:
                raise ValueError(f"unknown collective {what!r} in {text!r}; the collectives "
                                 f"are {', '.join(ALGORITHMS)}")
            if alg not in ALGORITHMS[what]:
                raise ValueError(f"{what} has no algorithm {alg!r}; it has "
                                 f"{', '.join(ALGORITHMS[what])}")
            out[what] = alg
        else:
            hits = [w for w, algs in ALGORITHMS.items() if item in algs]
            if not hits:
                raise ValueError(f"no collective has an algorithm {item!r}")
            for w in hits:
                out.setdefault(w, item)
    return out


_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dt: np.dtype) -> str:
    """``str(dt)``, cached (it costs microseconds)."""
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt)
    return name


def signature(a: Args, alg: str) -> Sig:
    """The call's description (see :func:`amnet.coll._msg.describe`)."""
    w = a.what
    return (w, alg, None if w == "barrier" else a.nbytes,
            a.root if w in ("broadcast", "scatter", "gather", "reduce") else None,
            tuple(a.perm) if w == "permute" else None,
            None if a.dtype is None else _dtype_name(a.dtype),
            None if a.dtype is None else NAMES[a.op],
            a.elemsize if alg.startswith("naive") else None)


def default(team: Any, a: Args, node_area: bool = True) -> str:
    """The algorithm used when none is named (see docs/collectives.md for the measurements
    behind it); with ``node_area`` False, the one taken without the node area (AMs only:
    what ``amnet-bench coll`` compares it with)."""
    P = team.size
    multi = team.multi
    w = a.what
    algs = ALGORITHMS[w]  # (the table says which collectives shm and hier_am carry)
    if node_area and team._shm is not None and "shm" in algs:  # members share memory
        return "shm"
    if not node_area and multi and "hier_am" in algs and (
            w != "exchange" or a.nbytes <= HIER_EXCHANGE) and (
            w != "reduce_all" or a.op != NONCOMM_FUNC):
        return "hier_am"
    if not multi and P <= DIRECT_P and w in DIRECT and (w == "barrier"
                                                         or a.nbytes <= DIRECT_MAX):
        return "direct"
    if w == "broadcast":
        return "hier" if multi else "tree"
    if w in ("scatter", "gather", "permute"):
        return "push"
    if w == "gather_all":
        return "hier" if multi else ("xor" if a.nbytes * P <= SMALL else "ring")
    if w == "exchange":
        if multi and a.nbytes <= HIER_EXCHANGE:
            return "hier"
        return "xor" if P <= 2 else "push"
    if w == "reduce":
        return "tree"
    if w == "reduce_all":
        return "hier" if multi and a.op != NONCOMM_FUNC else "xor"
    if w == "prefix_reduce":
        return "doubling"
    return "hier" if multi else "dissemination"
