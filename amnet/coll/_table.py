"""The table of amnet.coll's algorithms: collective -> {name: generator function}
(:mod:`amnet.coll._algos` has the flat ones, :mod:`amnet.coll._hier` the node-aware
ones)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._algos import (
    Args,
    Gen,
    barrier_dissemination,
    bcast_tree,
    direct,
    exchange_ring,
    exchange_xor,
    gather_all_ring,
    gather_all_xor,
    gather_tree,
    prefix_doubling,
    prefix_linear,
    reduce_all_tree,
    reduce_all_xor,
    reduce_push,
    reduce_tree,
    relocalise,
    scatter_tree,
)
from ._hier import barrier_hier, bcast_hier, exchange_hier, gather_all_hier, reduce_all_hier
from ._node import shm


def _am(fn: Callable[..., Gen]) -> Callable[[Any, Args], Gen]:
    """``hier_am``: a hier algorithm with its node steps as AMs (not the node area)."""
    def run(ctx: Any, a: Args) -> Gen:
        return fn(ctx, a, shm=False)

    return run


def _reloc(pull: bool, naive: bool, blocking: bool = False) -> Callable[[Any, Args], Gen]:
    def run(ctx: Any, a: Args) -> Gen:
        return relocalise(ctx, a, pull, naive, blocking)

    return run


_RELOC = {"push": _reloc(False, False), "memcpy_push": _reloc(False, False, True),
          "pull": _reloc(True, False), "naive_push": _reloc(False, True),
          "naive_pull": _reloc(True, True)}

#: collective -> {algorithm name: generator function} (amnet-bench coll lists them in this order).
ALGORITHMS: dict[str, dict[str, Callable[[Any, Args], Gen]]] = {
    "broadcast": {"tree": bcast_tree, **_RELOC, "hier": bcast_hier, "direct": direct,
                  "shm": shm, "hier_am": _am(bcast_hier)},
    "scatter": {"push": _RELOC["push"], "tree": scatter_tree, **_RELOC, "shm": shm},
    "gather": {"push": _RELOC["push"], "tree": gather_tree, **_RELOC, "shm": shm},
    "gather_all": {"ring": gather_all_ring, "xor": gather_all_xor, **_RELOC,
                   "hier": gather_all_hier, "direct": direct, "shm": shm,
                   "hier_am": _am(gather_all_hier)},
    "exchange": {"xor": exchange_xor, "ring": exchange_ring, **_RELOC, "hier": exchange_hier,
                 "shm": shm, "hier_am": _am(exchange_hier)},
    "permute": dict(_RELOC),
    "reduce": {"tree": reduce_tree, "push": reduce_push, "shm": shm},
    "reduce_all": {"xor": reduce_all_xor, "tree": reduce_all_tree, "hier": reduce_all_hier,
                   "direct": direct, "shm": shm, "hier_am": _am(reduce_all_hier)},
    "prefix_reduce": {"doubling": prefix_doubling, "linear": prefix_linear},
    "barrier": {"dissemination": barrier_dissemination, "hier": barrier_hier, "direct": direct,
                "shm": shm, "hier_am": _am(barrier_hier)},
}
