"""The four kernels of ``amnet-bench nbcomm``, each written once with blocking memput/memget.

After the application benchmarks of "Automatic Nonblocking Communication for Partitioned
Global Address Space Programs" (Chen, Iancu, Yelick; ICS 2007), §4.4, Table 2:

- :class:`Gups`: RandomAccess with bulk updates: each batch of random updates is bucketed
  by owner and each bucket goes as one memput (about 0.5 KiB) to its owner's inbox; the
  owners apply their inboxes after the barrier. Puts, monotone addresses.
- :class:`Stencil`: a 3-D 7-point Jacobi sweep on a grid split in z; the boundary planes are
  computed first and memput in row blocks into the neighbours' ghost planes, then the
  interior is computed (MG's halo exchange). Puts, monotone addresses.
- :class:`Transpose`: FT's transpose: every plane of this rank's slab is 2-D FFT'd and its
  column block for every rank goes as one large memput (128 KiB at 2 ranks); after the
  barrier each rank FFTs its columns along z. Puts, monotone addresses.
- :class:`Sweep`: BT's many small gets: two sweeps an iteration, each memgetting a
  neighbour's face cells (200 bytes, 850 bytes apart) one by one, solving a small system
  with each. Gets.

A kernel's :meth:`step` is the program: it calls ``c.memput``, ``c.memget`` and
``c.barrier`` of whatever ``c`` it is given -- plain blocking calls (:class:`Blocking`),
the automatic scheduler (:class:`amnet.nbcomm.Scheduler`) or no communication at all
(:class:`NoComm`, the computation alone). :meth:`manual` is the same iteration with the
communication made nonblocking by hand (``put_nbi``/``wait_nbi``, ``get_nb``), the way the
paper's *manual* versions are. Every remote range a kernel writes is double-buffered by the
iteration's parity, so one barrier an iteration (one per sweep for :class:`Sweep`) is all
the synchronization the program needs. :meth:`digest` hashes the result: the blocking,
manual and automatic forms must agree bit for bit.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
from typing import Any

import numpy as np

SEED = 20070617  # ICS 2007


class Blocking:
    """The program's communication as written: every call completes before it returns."""

    def __init__(self, ep: Any) -> None:
        self.ep = ep

    def memput(self, dest: int, offset: int, data: Any) -> None:
        self.ep.put(dest, offset, data)

    def memget(self, src: int, offset: int, nbytes: int, out: Any) -> Any:
        return self.ep.get(src, offset, nbytes, out)

    def barrier(self) -> None:
        self.ep.barrier()

    def aggregate(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class NoComm(Blocking):
    """The computation alone: memput and memget do nothing (barriers stay). Its time is the
    floor that overlapping communication can at best reach."""

    def memput(self, dest: int, offset: int, data: Any) -> None:
        pass

    def memget(self, src: int, offset: int, nbytes: int, out: Any) -> Any:
        return out


class Kernel(abc.ABC):
    """A kernel on one rank: ``reset`` to the initial state, ``step``/``manual`` one
    iteration, ``digest`` of the result. ``segment_bytes`` says what it needs."""

    name = ""

    def __init__(self, ep: Any, p: dict[str, Any]) -> None:
        self.ep, self.me, self.P, self.p = ep, ep.rank, ep.size, p
        self.seg = ep.segment
        self.right, self.left = (self.me + 1) % self.P, (self.me - 1) % self.P
        # this rank's peers in the order it sends to them: the next rank first, itself last
        self.order = [(self.me + k) % self.P for k in range(1, self.P + 1)]

    @abc.abstractmethod
    def reset(self) -> None:
        """Back to the initial state (the same for every form)."""

    @abc.abstractmethod
    def step(self, c: Any, it: int) -> None:
        """Iteration ``it`` as written, with ``c``'s memput, memget and barrier."""

    @abc.abstractmethod
    def manual(self, it: int) -> None:
        """Iteration ``it`` made nonblocking by hand."""

    @abc.abstractmethod
    def digest(self) -> str:
        """A hash of the result so far."""

    @staticmethod
    @abc.abstractmethod
    def segment_bytes(p: dict[str, Any], P: int) -> int:
        """The bytes of segment the kernel uses with parameters ``p`` on ``P`` ranks."""


def _hash(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class Gups(Kernel):
    """RandomAccess with bulk updates (``table_bits``, ``batches`` an iteration, ``updates``
    per rank a batch)."""

    name = "gups"

    def __init__(self, ep: Any, p: dict[str, Any]) -> None:
        super().__init__(ep, p)
        self.tsize = 1 << p["table_bits"]
        self.nb, self.per = p["batches"], p["updates"] * self.P
        self.slot = 8 * (1 + self.per)  # a count, then at most every update of a batch

    @staticmethod
    def segment_bytes(p: dict[str, Any], P: int) -> int:
        return 2 * P * p["batches"] * 8 * (1 + p["updates"] * P)

    def _box(self, parity: int, src: int, batch: int) -> int:
        return ((parity * self.P + src) * self.nb + batch) * self.slot

    def reset(self) -> None:
        self.table = np.arange(self.tsize, dtype=np.uint64) + np.uint64(self.me * self.tsize)

    def _buckets(self, it: int, batch: int) -> dict[int, np.ndarray]:
        """One batch of random updates, bucketed by owner: ``{rank: count + values}``."""
        rng = np.random.default_rng((SEED, self.me, it, batch))
        r = rng.integers(0, 1 << 62, self.per, dtype=np.uint64)
        for _ in range(self.p["work"]):  # the update stream's own arithmetic
            r = r * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
        owner = (r >> np.uint64(self.p["table_bits"])) % np.uint64(self.P)
        out = {}
        for d in self.order:
            vals = r[owner == d]
            out[d] = np.concatenate((np.array([vals.size], np.uint64), vals))
        return out

    def _apply(self, vals: np.ndarray) -> None:
        np.bitwise_xor.at(self.table, (vals & np.uint64(self.tsize - 1)).astype(np.intp), vals)

    def _apply_inbox(self, parity: int) -> None:
        for src in range(self.P):
            if src == self.me:
                continue
            for b in range(self.nb):
                o = self._box(parity, src, b)
                n = int(self.seg[o:o + 8].view(np.uint64)[0])
                self._apply(self.seg[o + 8:o + 8 + 8 * n].view(np.uint64))

    def step(self, c: Any, it: int) -> None:
        par = it & 1
        for b in range(self.nb):
            for d, bucket in self._buckets(it, b).items():
                if d == self.me:
                    self._apply(bucket[1:])
                else:
                    c.memput(d, self._box(par, self.me, b), bucket)
        c.barrier()
        self._apply_inbox(par)

    def manual(self, it: int) -> None:
        ep, par = self.ep, it & 1
        for b in range(self.nb):
            for d, bucket in self._buckets(it, b).items():
                if d == self.me:
                    self._apply(bucket[1:])
                else:
                    ep.put_nbi(d, self._box(par, self.me, b), bucket)
        ep.wait_nbi()
        ep.barrier()
        self._apply_inbox(par)

    def digest(self) -> str:
        return _hash(self.table)


class Stencil(Kernel):
    """3-D 7-point Jacobi on an ``(nz + 2, n, n)`` float64 slab a rank (ghost planes at
    z = 0 and nz + 1), periodic in z across the ranks; boundary planes go as ``pieces``
    row-block memputs each."""

    name = "stencil"

    def __init__(self, ep: Any, p: dict[str, Any]) -> None:
        super().__init__(ep, p)
        self.nz, self.n, self.pieces = p["nz"], p["n"], p["pieces"]
        self.plane = self.n * self.n * 8
        rows = -(-self.n // self.pieces)
        self.blocks = [(r, min(r + rows, self.n)) for r in range(0, self.n, rows)]

    @staticmethod
    def segment_bytes(p: dict[str, Any], P: int) -> int:
        return 4 * p["n"] * p["n"] * 8

    def _ghost(self, parity: int, side: int) -> int:
        """Offset of this kernel's ghost plane ``side`` (0: below, z = 0; 1: above)."""
        return (2 * parity + side) * self.plane

    def reset(self) -> None:
        rng = np.random.default_rng((SEED, self.me))
        self.u = rng.random((self.nz + 2, self.n, self.n))
        self.u[0] = self.u[-1] = 0.0  # the first ghosts
        self.v = self.u.copy()

    def _planes(self, u: np.ndarray, v: np.ndarray, z0: int, z1: int) -> None:
        """v[z0:z1] from u: the 7-point average inside each plane's edge ring (kept)."""
        c = v[z0:z1, 1:-1, 1:-1]
        np.add(u[z0 - 1:z1 - 1, 1:-1, 1:-1], u[z0 + 1:z1 + 1, 1:-1, 1:-1], out=c)
        c += u[z0:z1, :-2, 1:-1]
        c += u[z0:z1, 2:, 1:-1]
        c += u[z0:z1, 1:-1, :-2]
        c += u[z0:z1, 1:-1, 2:]
        c += u[z0:z1, 1:-1, 1:-1]
        c *= 1.0 / 7.0
        v[z0:z1, 0, :], v[z0:z1, -1, :] = u[z0:z1, 0, :], u[z0:z1, -1, :]
        v[z0:z1, :, 0], v[z0:z1, :, -1] = u[z0:z1, :, 0], u[z0:z1, :, -1]

    def _pieces(self, v: np.ndarray, par: int) -> list[tuple[int, int, np.ndarray]]:
        """(rank, offset, rows) of every boundary memput, in address order per rank: my
        plane z = nz is the below ghost of the rank above me (``right``), my plane z = 1
        the above ghost of the rank below me (``left``)."""
        out = []
        row = self.n * 8
        for r0, r1 in self.blocks:
            out.append((self.right, self._ghost(par, 0) + r0 * row, v[self.nz, r0:r1]))
        for r0, r1 in self.blocks:
            out.append((self.left, self._ghost(par, 1) + r0 * row, v[1, r0:r1]))
        return out

    def _take_ghosts(self, par: int) -> None:
        g = self.seg[:4 * self.plane].view(np.float64).reshape(4, self.n, self.n)
        self.v[0], self.v[-1] = g[2 * par], g[2 * par + 1]
        self.u, self.v = self.v, self.u

    def step(self, c: Any, it: int) -> None:
        par, u, v = it & 1, self.u, self.v
        self._planes(u, v, 1, 2)
        self._planes(u, v, self.nz, self.nz + 1)
        for rank, off, rows in self._pieces(v, par):
            c.memput(rank, off, rows)
        self._planes(u, v, 2, self.nz)
        c.barrier()
        self._take_ghosts(par)

    def manual(self, it: int) -> None:
        ep, par, u, v = self.ep, it & 1, self.u, self.v
        self._planes(u, v, 1, 2)
        self._planes(u, v, self.nz, self.nz + 1)
        for rank, off, rows in self._pieces(v, par):
            ep.put_nbi(rank, off, rows)
        self._planes(u, v, 2, self.nz)
        ep.wait_nbi()
        ep.barrier()
        self._take_ghosts(par)

    def digest(self) -> str:
        return _hash(self.u)


class Transpose(Kernel):
    """FT's transpose: ``planes`` planes of ``n`` x ``n`` complex128 a rank (``planes * P``
    in all); each plane is 2-D FFT'd and split in ``P`` column blocks, block ``d`` memput to
    rank ``d`` (``n * n / P * 16`` bytes: 128 KiB at 2 ranks); after the barrier each rank
    FFTs its ``n / P`` columns along z. The slab evolves by a phase factor every
    iteration. ``n`` must be a multiple of ``P``."""

    name = "transpose"

    def __init__(self, ep: Any, p: dict[str, Any]) -> None:
        super().__init__(ep, p)
        self.nzl, self.n = p["planes"], p["n"]
        self.nz, self.nxl = self.nzl * self.P, self.n // self.P
        self.block = self.n * self.nxl * 16

    @staticmethod
    def segment_bytes(p: dict[str, Any], P: int) -> int:
        return 2 * p["planes"] * P * p["n"] * (p["n"] // P) * 16

    def _at(self, parity: int, z: int) -> int:
        """Offset of global plane ``z``'s block in a rank's receive area."""
        return (parity * self.nz + z) * self.block

    def reset(self) -> None:
        rng = np.random.default_rng((SEED, self.me))
        self.x = rng.random((self.nzl, self.n, self.n)) + 1j * rng.random(
            (self.nzl, self.n, self.n))
        k = np.arange(self.n)
        self.twiddle = np.exp(-1e-3j * (k[:, None] ** 2 + k[None, :] ** 2))
        self.sums: list[complex] = []

    def _blocks(self, z: int) -> list[tuple[int, np.ndarray]]:
        """Plane ``z`` of the slab FFT'd, as (rank, its column block) in send order."""
        self.x[z] *= self.twiddle
        f = np.fft.fft2(self.x[z])
        return [(d, np.ascontiguousarray(f[:, d * self.nxl:(d + 1) * self.nxl]))
                for d in self.order]

    def _finish(self, par: int) -> None:
        a = self.seg[self._at(par, 0):self._at(par, self.nz)].view(np.complex128)
        y = np.fft.fft(a.reshape(self.nz, self.n, self.nxl), axis=0)
        self.sums.append(complex(y[::7, ::5, ::3].sum()))

    def step(self, c: Any, it: int) -> None:
        par = it & 1
        for z in range(self.nzl):
            for d, blk in self._blocks(z):
                c.memput(d, self._at(par, self.me * self.nzl + z), blk)
        c.barrier()
        self._finish(par)

    def manual(self, it: int) -> None:
        ep, par = self.ep, it & 1
        for z in range(self.nzl):
            for d, blk in self._blocks(z):
                ep.put_nbi(d, self._at(par, self.me * self.nzl + z), blk)
        ep.wait_nbi()
        ep.barrier()
        self._finish(par)

    def digest(self) -> str:
        return _hash(self.x, np.array(self.sums, np.complex128))


class Sweep(Kernel):
    """BT's many small gets: ``cells`` face cells of 5 x 5 float64 (200 bytes) ``stride``
    bytes apart a rank, on two sides. Each iteration sweeps right, then back, a barrier
    after each. The sweep right memgets a cell of the left neighbour and solves a 5 x 5
    system with it, cell after cell; the sweep back gathers the right neighbour's cells
    first, one memget each (a burst with no computation: what the paper's translator marks
    as an aggregation region), then solves. A rank rewrites a side in the sweep that does
    not read it, so a sweep's gets have the same addresses every iteration (as BT's do).
    """

    name = "sweep"
    CELL = 200

    def __init__(self, ep: Any, p: dict[str, Any]) -> None:
        super().__init__(ep, p)
        self.cells, self.stride = p["cells"], p["stride"]
        self.area = self.cells * self.stride
        self.bufs = [np.empty((5, 5)) for _ in range(self.cells)]

    @staticmethod
    def segment_bytes(p: dict[str, Any], P: int) -> int:
        return 2 * p["cells"] * p["stride"]

    def _face(self, side: int, k: int) -> int:
        return side * self.area + k * self.stride

    def reset(self) -> None:
        rng = np.random.default_rng((SEED, self.me))
        self.a = rng.random((self.cells, 5, 5)) + 5 * np.eye(5)  # well conditioned blocks
        self.x = rng.random((self.cells, 5, 5))
        self._write_faces(1)  # the first sweep reads side 1

    def _write_faces(self, side: int) -> None:
        for k in range(self.cells):
            o = self._face(side, k)
            self.seg[o:o + self.CELL].view(np.float64)[:] = self.x[k].ravel() + side

    def _solve(self, k: int, g: np.ndarray) -> None:
        self.x[k] = np.linalg.solve(self.a[k], g + 0.5 * self.x[k])

    def step(self, c: Any, it: int) -> None:
        self._write_faces(0)  # read by the left neighbour in the sweep back
        for k in range(self.cells):  # the sweep right: a get and a solve per cell
            c.memget(self.left, self._face(1, k), self.CELL, self.bufs[k])
            self._solve(k, self.bufs[k])
        c.barrier()
        self._write_faces(1)  # read by the right neighbour in the next sweep right
        with c.aggregate():  # the sweep back: its cells gathered first, a burst
            for k in range(self.cells):
                c.memget(self.right, self._face(0, k), self.CELL, self.bufs[k])
        for k in range(self.cells):
            self._solve(k, self.bufs[k])
        c.barrier()

    def manual(self, it: int) -> None:
        ep = self.ep
        for side, src in ((0, self.left), (1, self.right)):
            self._write_faces(side)
            hs = [ep.get_nb(src, self._face(1 - side, k), self.CELL, self.bufs[k])
                  for k in range(self.cells)]
            for k in range(self.cells):  # each solve as soon as its cell is in
                hs[k].wait()
                self._solve(k, self.bufs[k])
            ep.barrier()

    def digest(self) -> str:
        return _hash(self.x)


KERNELS: dict[str, type[Kernel]] = {k.name: k for k in (Gups, Stencil, Transpose, Sweep)}

#: Each kernel's sizes, after the paper's Table 2 where Python allows (messages of the same
#: order: GUPS ~0.5 KiB, halo row blocks of a few KiB, FT's 128 KiB blocks at 2 ranks, BT's
#: 200-byte gets), with enough computation that overlapping has something to hide behind.
DEFAULTS: dict[str, dict[str, int]] = {
    "gups": {"table_bits": 16, "batches": 8, "updates": 64, "work": 8},
    "stencil": {"nz": 24, "n": 48, "pieces": 4},
    "transpose": {"planes": 4, "n": 128},
    "sweep": {"cells": 48, "stride": 850},
}

#: The range each parameter may take (``--set`` is checked against it).
LIMITS: dict[str, dict[str, tuple[int, int]]] = {
    "gups": {"table_bits": (4, 24), "batches": (1, 1024), "updates": (1, 4096),
             "work": (0, 1000)},
    "stencil": {"nz": (3, 1024), "n": (3, 1024), "pieces": (1, 1024)},
    "transpose": {"planes": (1, 256), "n": (2, 1024)},
    "sweep": {"cells": (1, 4096), "stride": (200, 1 << 16)},
}


def check_params(name: str, p: dict[str, int], P: int) -> str | None:
    """What is wrong with kernel ``name``'s parameters ``p`` on ``P`` ranks, or None."""
    for key, (lo, hi) in LIMITS[name].items():
        if not lo <= p[key] <= hi:
            return f"{name}.{key} must be in {lo}..{hi}, got {p[key]}"
    if name == "stencil" and p["pieces"] > p["n"]:
        return f"stencil.pieces ({p['pieces']}) must be at most stencil.n ({p['n']})"
    if name == "transpose" and p["n"] % P:
        return f"transpose.n ({p['n']}) must be a multiple of the rank count ({P})"
    return None
