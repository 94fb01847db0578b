"""The rank side of ``amnet-bench vis``: the autoNB paper's Fig. 6 strided get, three ways.

Rank 1 fills its segment and serves; rank 0, for each total size, times (interleaved, each
sample at least ``min_s`` seconds of back-to-back calls):

- ``vis``: one ``ep.vis.get_strided`` of ``total / elem`` elements of ``elem`` bytes,
  ``stride`` bytes apart at the source and the destination;
- ``flood``: the same elements as that many ``ep.get_nbi`` calls, then ``ep.wait_nbi()``;
- ``contig``: one ``ep.get`` of ``total`` contiguous bytes.

Before timing a size it checks that the three land the right bytes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def _pattern(n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.int64) * 7 + 3).astype(np.uint8)


def vis_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    elem, stride = plan["elem"], plan["stride"]
    seg = ep.segment
    if ep.rank == 1:
        seg[:] = _pattern(len(seg))
        ep.barrier()
        ep.barrier()  # rank 0 is done
        return None
    ep.barrier()
    ref = _pattern(len(seg))
    biggest = max(plan["sizes"]) // elem
    dst = np.zeros(biggest * stride, dtype=np.uint8)
    flat = np.zeros(max(plan["sizes"]), dtype=np.uint8)
    out: dict[str, Any] = {}
    for total in plan["sizes"]:
        n = total // elem

        def vis(n=n):
            ep.vis.get_strided(1, dst, 0, [stride], 0, [stride], elem, [n])

        def flood(n=n):
            get_nbi = ep.get_nbi
            for i in range(n):
                o = i * stride
                get_nbi(1, o, elem, dst[o:o + elem])
            ep.wait_nbi()

        def contig(total=total):
            ep.get(1, 0, total, flat[:total])

        want = np.lib.stride_tricks.as_strided(ref, (n, elem), (stride, 1))
        got = np.lib.stride_tricks.as_strided(dst, (n, elem), (stride, 1))
        for name, fn in (("vis", vis), ("flood", flood)):
            dst[:] = 0
            fn()
            if not np.array_equal(got, want):
                raise AssertionError(f"{name} of {total} bytes landed wrong bytes")
        contig()
        if not np.array_equal(flat[:total], ref[:total]):
            raise AssertionError(f"the contiguous get of {total} bytes landed wrong bytes")
        samples: dict[str, list[float]] = {"vis": [], "flood": [], "contig": []}
        fns = (("vis", vis), ("flood", flood), ("contig", contig))
        for _ in range(plan["samples"]):
            for name, fn in fns:
                k, t0 = 0, time.perf_counter()
                while True:
                    fn()
                    k += 1
                    t = time.perf_counter() - t0
                    if t >= plan["min_s"]:
                        break
                samples[name].append(t / k)
        out[str(total)] = samples
    ep.barrier()
    return out
