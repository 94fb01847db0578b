"""The ranks' side of ``amnet-bench apps``: the fine-grained kernels of "Hybrid PGAS Runtime
Support for Multicore Nodes" (§5, Fig. 6) written on upc_rt, each timed per rank-thread with
what the thread did with its time.

- ``gups``: read-modify-write of random elements of a cyclic shared table (``T[i] ^= r``,
  one element read and one relaxed element write per update), HPCC-style: the updates are
  applied again at the end, untimed, and at most 1% of the table may then differ from its
  start (races between threads are allowed, as in HPCC).
- ``sobel``: the 3 x 3 Sobel filter of an image in row blocks, one per thread; the two
  bordering rows of the neighbours are read element by element (fine-grained), the filter
  is numpy. Checked against the filter of the whole image.
- ``mcop``: matrix chain ordering, the dynamic program ``m[i, j] = min_k m[i, k] +
  m[k+1, j] + d[i] d[k+1] d[j+1]`` over a shared ``n x n`` table whose columns are cyclic
  over the threads; diagonal by diagonal (a barrier each), a thread computes the entries of
  its columns, reading row ``i`` from the other threads. Checked against a serial solution.
- ``lock``: every thread increments one shared counter under one lock, ``per`` times a
  round (``with L: C[0] = C[0] + 1``). Checked: the counter counts every increment.
- ``compute`` (amnet's, not the paper's): pure-Python work between communication phases,
  the case where the interpreter lock decides between threads and processes. A round reads
  the neighbour's first element (one fine-grained get from the buffer of the round; the
  buffers alternate, so nobody writes what is read), then runs ``work`` steps of a 31-bit
  linear congruential generator in Python on each of the thread's ``elems`` elements and
  stores them in the other buffer. Checked: the neighbour's element as it stored it, and the
  last round recomputed from the thread's previous block.

A round: a barrier, the kernel, the clock stopped, a barrier. For every kept round each
rank-thread returns its wall seconds, its seconds on a CPU and waiting for one (the
kernel's schedstat for this thread: ``/proc/self/task/TID/schedstat``; None where there is
none) and the seconds its process's rank-threads waited for amnet's drain lock
(``ep.statistics().drain_wait_s``). Off a CPU and not waiting for one, a rank-thread in spin
wait mode is waiting for the interpreter lock or the drain lock: the suite tells them apart.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

SEED = 2010  # the hybrid paper's year


def _sched() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of the calling thread."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            on, wait = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on) * 1e-9, int(wait) * 1e-9


def _sobel(p: np.ndarray) -> np.ndarray:
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    out = np.zeros((p.shape[0] - 2, p.shape[1]))
    out[:, 1:-1] = np.sqrt(gx * gx + gy * gy)
    return out


def _image(rows: np.ndarray, cols: int) -> np.ndarray:
    y = rows[:, None].astype(np.float64)
    x = np.arange(cols, dtype=np.float64)[None, :]
    return np.sin(y * 0.3) * np.cos(x * 0.2) + ((y - 20) ** 2 + (x - 30) ** 2 < 150) * 2.0


class _Gups:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        self.n = p["table"] * self.T
        self.per = p["updates"]
        self.tab = upc.shared_array(self.n, "u8", 1)
        self.tab.local[:] = np.arange(self.me, self.n, self.T, dtype=np.uint64)
        self.rounds = 0

    def _stream(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng((SEED, self.me, k)).integers(0, 1 << 63, self.per,
                                                               dtype=np.uint64)
        return (r % np.uint64(self.n)).astype(np.int64), r

    def _apply(self, k: int) -> None:
        tab = self.tab
        idx, r = self._stream(k)
        for i, v in zip(idx.tolist(), r.tolist(), strict=True):
            tab[i] = int(tab[i]) ^ v

    def run(self) -> int:
        self._apply(self.rounds)
        self.rounds += 1
        return self.per

    def check(self) -> str | None:
        upc = self.upc
        upc.barrier()
        for k in range(self.rounds):  # XOR again: back to the start, but for races
            self._apply(k)
        upc.barrier()
        self.bad = int(np.count_nonzero(
            self.tab.local != np.arange(self.me, self.n, self.T, dtype=np.uint64)))
        return None  # the suite adds up every thread's ``bad`` and holds it to 1% of n


class _Sobel:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        self.rows, self.cols = p["rows"] * self.T, p["cols"]
        self.R = p["rows"]
        self.img = upc.shared_array((self.rows, self.cols), "f8", self.cols * self.R)
        self.edge = upc.shared_array((self.rows, self.cols), "f8", self.cols * self.R)
        self.first, self.last = self.me * self.R, (self.me + 1) * self.R
        self.img.local[:] = _image(np.arange(self.first, self.last), self.cols).ravel()
        self.pad = np.zeros((self.R + 2, self.cols))

    def run(self) -> int:
        img, pad, c = self.img, self.pad, self.cols
        pad[1:-1] = img.local.reshape(self.R, c)
        if self.first > 0:  # the row above, element by element
            r = self.first - 1
            for j in range(c):
                pad[0, j] = img[r, j]
        if self.last < self.rows:
            r = self.last
            for j in range(c):
                pad[-1, j] = img[r, j]
        out = _sobel(pad)
        if self.first == 0:
            out[0] = 0.0
        if self.last == self.rows:
            out[-1] = 0.0
        self.edge.local[:] = out.ravel()
        return self.R * c

    def check(self) -> str | None:
        self.upc.barrier()
        if self.me != 0:
            return None
        full = np.zeros((self.rows + 2, self.cols))
        full[1:-1] = _image(np.arange(self.rows), self.cols)
        want = _sobel(full)
        want[0] = want[-1] = 0.0
        got = self.edge[:, :]
        return None if np.allclose(got, want) else "sobel: the edges differ from the serial filter"


class _Mcop:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        self.n = p["n"] * self.T  # columns cyclic: column j on thread j % T
        self.d = np.random.default_rng(SEED).integers(1, 20, self.n + 1).astype(np.float64)
        self.m = upc.shared_array((self.n, self.n), "f8", 1)

    def run(self) -> int:
        upc, m, d, n, me, T = self.upc, self.m, self.d, self.n, self.me, self.T
        done = 0
        for diag in range(1, n):
            for i in range(n - diag):
                j = i + diag
                if j % T != me:
                    continue
                row = np.asarray(m[i, i:j])  # m[i, k], k in i..j-1: every thread's columns
                col = np.asarray(m[i + 1:j + 1, j])  # m[k+1, j]: my column
                m[i, j] = float(np.min(row + col + d[i] * d[i + 1:j + 1] * d[j + 1]))
                done += 1
            upc.barrier()
        return done

    def check(self) -> str | None:
        self.upc.barrier()
        if self.me != 0:
            return None
        n, d = self.n, self.d
        want = np.zeros((n, n))
        for diag in range(1, n):
            for i in range(n - diag):
                j = i + diag
                want[i, j] = np.min(want[i, i:j] + want[i + 1:j + 1, j]
                                    + d[i] * d[i + 1:j + 1] * d[j + 1])
        got = np.asarray(self.m[:, :])
        return None if np.array_equal(np.triu(got, 1), np.triu(want, 1)) else \
            "mcop: the table differs from the serial solution"


class _Lock:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.T = upc, upc.THREADS
        self.per = p["per"]
        self.lock = upc.all_lock_alloc()
        self.count = upc.shared_array(self.T, "i8", 1)
        self.rounds = 0

    def run(self) -> int:
        c, lk = self.count, self.lock
        for _ in range(self.per):
            with lk:
                c[0] = int(c[0]) + 1
        self.rounds += 1
        return self.per

    def check(self) -> str | None:
        self.upc.barrier()
        got, want = int(self.count[0]), self.rounds * self.per * self.T
        return None if got == want else f"lock: the counter is {got}, not {want}"


def _lcg(block: list[int], nb: int, work: int) -> list[int]:
    """The compute kernel's work: ``work`` generator steps per element, in Python.

    Its numbers are made by the calling thread, not taken from the code's constants: on
    free-threaded CPython 3.13 the reference count of an object shared by threads (a
    function's constants among them) is updated atomically by every thread but the one
    that made it, and two threads using the same constants at every step contend for them
    (measured: two rank-threads of one process 1.5-2x slower each than one alone). A
    thread's working set of its own is how pure-Python code scales there."""
    m, a, c = int("2147483647"), int("1103515245"), int("12345")
    out = []
    for v in block:
        x = (v ^ nb) & m
        for _ in range(work):
            x = (x * a + c) & m
        out.append(x)
    return out


class _Compute:
    def __init__(self, upc: Any, p: dict[str, int]) -> None:
        self.upc, self.me, self.T = upc, upc.MYTHREAD, upc.THREADS
        self.E, self.work = p["elems"], p["work"]
        n = self.E * self.T
        self.bufs = [upc.shared_array(n, "i8", self.E) for _ in range(2)]
        self.bufs[0].local[:] = np.arange(self.me * self.E, (self.me + 1) * self.E)
        self.heads = upc.shared_array((self.T, 2), "i8", 2)  # my first element, per buffer
        self.rounds = 0
        self.last: tuple[list[int], int] | None = None

    def run(self) -> int:
        src, dst = self.bufs[self.rounds % 2], self.bufs[(self.rounds + 1) % 2]
        nb = int(src[((self.me + 1) % self.T) * self.E])  # the neighbour's first element
        block = src.local.tolist()
        self.last = (block, nb)
        out = _lcg(block, nb, self.work)
        dst.local[:] = out
        self.heads.local[(self.rounds + 1) % 2] = out[0]
        self.rounds += 1
        return self.E

    def check(self) -> str | None:
        self.upc.barrier()
        if self.last is None:
            return None
        block, nb = self.last
        k = self.rounds - 1  # the last round read buffer k % 2, which round k - 1 wrote
        want_nb = (int(self.heads[(self.me + 1) % self.T, k % 2]) if k else
                   ((self.me + 1) % self.T) * self.E)
        if nb != want_nb:
            return f"compute: read {nb} as the neighbour's element, it stored {want_nb}"
        if _lcg(block, nb, self.work) != self.bufs[self.rounds % 2].local.tolist():
            return "compute: the last round's block differs from its recomputation"
        return None


KERNELS = {"gups": _Gups, "sobel": _Sobel, "mcop": _Mcop, "lock": _Lock, "compute": _Compute}


def apps_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any]:
    import upc_rt as upc

    upc.init()
    pc = time.perf_counter
    out: dict[str, Any] = {}
    for name in plan["kernels"]:
        k = KERNELS[name](upc, plan["params"][name])
        upc.barrier()
        rec: dict[str, Any] = {"wall": [], "cpu": [], "delay": [], "drain": [], "ops": 0,
                               "pid": os.getpid()}
        for rnd in range(plan["samples"] + 1):
            upc.barrier()
            s0, d0 = _sched(), ep.statistics().drain_wait_s
            t0 = pc()
            ops = k.run()
            t = pc() - t0
            s1, d1 = _sched(), ep.statistics().drain_wait_s
            upc.barrier()
            if rnd:
                rec["wall"].append(t)
                rec["drain"].append(d1 - d0)
                rec["cpu"].append(None if s0 is None or s1 is None else s1[0] - s0[0])
                rec["delay"].append(None if s0 is None or s1 is None else s1[1] - s0[1])
                rec["ops"] = ops
        rec["error"] = k.check()
        rec["bad"] = getattr(k, "bad", None)
        rec["size"] = getattr(k, "n", None)
        out[name] = rec
    return out
