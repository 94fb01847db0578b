"""``ep.coll`` and teams: the collectives' public face, argument checks and the choice of
algorithm.

A :class:`Team` is an ordered set of ranks; ``ep.coll.world`` holds every rank,
``ep.coll.node`` the ranks of my node, and ``team.split(color, key)`` (GASNet-EX's
``gex_TM_Split``, MPI's ``Comm_split``) makes new ones. On a team every member calls the
same collectives in the same order. Buffers are numpy arrays (C-contiguous), writable
bytes-likes for destinations, or an int offset into my segment (then ``nbytes`` is
required). Each collective has a non-blocking form (``*_nb``) returning a
:class:`CollHandle`; a call in flight progresses whenever its rank waits in, tests or calls a
collective.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import CollectiveMismatch
from ..pshm import COLL_TEAMS
from ._algos import Args
from ._fast import Fast
from ._msg import Mailbox, Run, Sig, digest
from ._node import NodeArea, usable
from ._ops import check_op
from ._pick import DIRECT_P, default, parse_choice, signature
from ._shmfast import ShmFast
from ._table import ALGORITHMS


def _agreed(fn: Callable) -> Callable:
    """A collective whose arguments this member got wrong still takes part in the call: its
    description says so, the other members raise CollectiveMismatch instead of waiting for
    it, and it raises its own TypeError/ValueError once the verdict is in (before any data
    moves)."""

    @functools.wraps(fn)
    def call(self: Team, *args: Any, **kwargs: Any) -> Any:
        if self._dead:  # (nobody else is in this call: it must not take part)
            raise ValueError(f"amnet.coll {fn.__name__.lstrip('_')}: {self} was destroyed")
        try:
            return fn(self, *args, **kwargs)
        except (TypeError, ValueError) as e:
            what = fn.__name__.lstrip("_")
            try:
                self._coll._poison(self, f"{what}(invalid: {type(e).__name__}: {e})")
            except CollectiveMismatch:
                pass  # the others were told; this member's own error says more
            raise

    return call


class CollHandle:
    """A collective in flight (``team.*_nb``). ``wait()`` completes it (and returns what the
    blocking form returns); ``test()`` makes progress and says whether it is complete.
    Either raises amnet.CollectiveMismatch when the members disagreed about the call."""

    __slots__ = ("_coll", "_run")

    def __init__(self, coll: Coll, run: Run) -> None:
        self._coll = coll
        self._run = run

    def test(self) -> bool:
        return self._coll._test(self._run)

    def wait(self) -> Any:
        self._coll._wait(self._run)
        return self._run.result

    def __await__(self) -> Any:
        """``await handle`` in a coroutine that :func:`amnet.aio.run` runs: what
        :meth:`wait` returns, with the same errors. While it waits, a timeout's diagnosis
        says the rank awaits this call."""
        port = self._coll.port
        with port.awaiting(self._run):
            return (yield from port.awaitable(self).__await__())


class Team:
    """An ordered set of ranks (see the module). ``size``, ``index`` (my place),
    ``members`` (world ranks in order), ``nodes`` (each member's node)."""

    __slots__ = ("_coll", "_dead", "_fast", "_local", "_shm", "_slot", "_splits", "id", "index",
                 "members", "multi", "name", "nodes", "size")

    def __init__(self, coll: Coll, tid: int, members: list[int], name: str,
                 slot: int | None = None) -> None:
        self._coll = coll
        self.id = tid
        self.members = members
        self.size = len(members)
        self.index = members.index(coll.rank)
        self.name = name
        per_node = coll.threads_per_proc * coll.procs_per_node
        self.nodes = [m // per_node for m in members]
        n_nodes = len(set(self.nodes))
        self.multi = 1 < n_nodes < self.size  # several nodes, some with several members
        self._splits = 0
        # the node area's slot of the team (see _node) for the members on my node, when they
        # share memory: the whole team's on one node (algorithm shm), the node step of hier
        # where it spreads over nodes
        mates = [m for m, nd in zip(members, self.nodes, strict=True)
                 if nd == self.nodes[self.index]]
        self._local = (NodeArea(coll.port, mates, mates.index(coll.rank), slot)
                       if slot is not None and usable(coll.port, mates) else None)
        self._shm = self._local if n_nodes == 1 else None
        if self._local is None and slot is not None and slot > 1:
            coll.free_slots |= 1 << slot  # not used here (no shared memory): free it again
            slot = None
        self._slot = slot
        self._dead = False
        # small calls on the default algorithm skip the general machinery (see _fast)
        if coll.strict:
            self._fast: Fast | None = None
        elif self._shm is not None:
            self._fast = ShmFast(coll, self)
        else:
            self._fast = Fast(coll, self) if not self.multi and self.size <= DIRECT_P else None
        coll.box.add_team(self)

    def __repr__(self) -> str:
        return f"<amnet team {self.name}: {self.size} ranks, me at {self.index}>"

    def __str__(self) -> str:
        return f"team {self.name}"

    @property
    def shares_memory(self) -> bool:
        """Whether the team's members share memory (one node with PSHM on, or the
        rank-threads of one process) and it has a node-area slot: its collectives then go
        through shared memory (algorithm ``shm``) unless another algorithm is named. (A team
        over several nodes uses the node area for the node steps of ``hier``.)"""
        return self._shm is not None

    def default_algorithm(self, what: str, nbytes: int = 8, node_area: bool = True) -> str:
        """The algorithm a call of collective ``what`` with blocks of ``nbytes`` takes on
        this team when none is named (before AMNET_COLL_ALGORITHM); with ``node_area``
        False, the one it would take without the node area (AMs only). Raises ValueError
        for an unknown collective."""
        if what not in ALGORITHMS:
            raise ValueError(f"unknown collective {what!r}; the collectives are "
                             f"{', '.join(ALGORITHMS)}")
        return default(self, Args(what, _int(nbytes, "default_algorithm: nbytes")),
                       node_area)

    def rank_of(self, index: int) -> int:
        """The world rank of member ``index``."""
        return self.members[index]

    # -- teams ----------------------------------------------------------------------------
    @_agreed
    def split(self, color: int | None, key: int = 0) -> Team | None:
        """Collective on this team: members passing the same ``color`` form a new team,
        ordered by ``key`` then by their index here; ``color=None`` (or negative) joins
        none and returns None."""
        c = -1 if color is None else _int(color, "team.split(): color")
        k = _int(key, "team.split(): key")
        coll = self._coll
        # with color and key, the node-area slots free here: the new team takes the lowest
        # one free at all its members, when they share memory
        mine = np.array([c, k, coll.free_slots], np.int64)
        allv = np.empty(3 * self.size, np.int64)
        self.gather_all(allv, mine)
        self._splits += 1
        if c < 0:
            return None
        rows = allv.reshape(self.size, 3)
        chosen = sorted((int(rows[i, 1]), i) for i in range(self.size) if rows[i, 0] == c)
        members = [self.members[i] for _, i in chosen]
        h = hashlib.blake2b(f"{self.id}/{self._splits}/{c}".encode(), digest_size=8)
        tid = int.from_bytes(h.digest(), "little") >> 1
        free = -1
        for _, i in chosen:
            free &= int(rows[i, 2])
        slot = None
        if free > 0:  # (every member of a node takes the same; Team looks if they share memory)
            slot = (free & -free).bit_length() - 1
            coll.free_slots &= ~(1 << slot)
        return Team(coll, tid, members, f"{self.name}/{self._splits}:{c}", slot)

    def destroy(self) -> None:
        """Collective on the team (GASNet-EX's ``gex_TM_Destroy``): every member calls it once
        its calls on the team are complete; then the team takes no more calls (ValueError)
        and its node-area slot is free here for a team split later. The world and node
        teams last as long as the job (ValueError).

        Raises:
            ValueError: a predefined team, one destroyed already, or a call of the team
                still in flight on this member.
        """
        c = self._coll
        if self is c.world or self is c.node:
            raise ValueError(f"{self} lasts as long as the job: it cannot be destroyed")
        if self._dead:
            raise ValueError(f"{self} was destroyed already")
        if any(r.team is self for r in c._runs):
            raise ValueError(f"{self}.destroy(): a call of the team is still in flight here; "
                             "complete it first")
        # messages only: once past it, no member reads my slot any more
        self.barrier(algorithm="dissemination")
        self._dead = True
        self._fast = self._shm = None
        if self._local is not None:  # my slot, clean for its next team
            self._local.area.reset()
            self._local = None
        if self._slot is not None:
            c.free_slots |= 1 << self._slot

    # -- collectives ------------------------------------------------------------------------
    def barrier(self, algorithm: str | None = None) -> None:
        f = self._fast
        if f is None or algorithm is not None or not f.barrier():
            self._coll._finish(self._barrier(algorithm))

    def barrier_nb(self, algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._barrier(algorithm))

    @_agreed
    def _barrier(self, algorithm: str | None = None) -> Run:
        return self._coll._start(self, Args("barrier"), algorithm)

    def broadcast(self, dst: Any, src: Any = None, root: int = 0, nbytes: int | None = None,
                  algorithm: str | None = None) -> None:
        """Copy root's ``src`` (``nbytes``) into every member's ``dst``."""
        f = self._fast
        if f is None or algorithm is not None or nbytes is not None or not f.broadcast(
                dst, src, root):
            self._coll._finish(self._broadcast(dst, src, root, nbytes, algorithm))

    def broadcast_nb(self, dst: Any, src: Any = None, root: int = 0,
                     nbytes: int | None = None, algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._broadcast(dst, src, root, nbytes, algorithm))

    @_agreed
    def _broadcast(self, dst: Any, src: Any = None, root: int = 0,
                   nbytes: int | None = None, algorithm: str | None = None) -> Run:
        c, what = self._coll, "broadcast"
        root = self._root(root, what)
        n = c.size_of(nbytes, dst, 1, what, "dst")
        d = c.view(dst, n, True, what, "dst")
        s = c.view(src, n, False, what, "src") if self.index == root else None
        return c._start(self, Args(what, n, root, s, d, _elem(dst)), algorithm)

    def scatter(self, dst: Any, src: Any = None, root: int = 0, nbytes: int | None = None,
                algorithm: str | None = None) -> None:
        """Block i (``nbytes``) of root's ``src`` (size x nbytes) to member i's ``dst``."""
        self._coll._finish(self._scatter(dst, src, root, nbytes, algorithm))

    def scatter_nb(self, dst: Any, src: Any = None, root: int = 0, nbytes: int | None = None,
                   algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._scatter(dst, src, root, nbytes, algorithm))

    @_agreed
    def _scatter(self, dst: Any, src: Any = None, root: int = 0, nbytes: int | None = None,
                 algorithm: str | None = None) -> Run:
        c, what = self._coll, "scatter"
        root = self._root(root, what)
        n = c.size_of(nbytes, dst, 1, what, "dst")
        d = c.view(dst, n, True, what, "dst")
        s = c.view(src, n * self.size, False, what, "src") if self.index == root else None
        return c._start(self, Args(what, n, root, s, d, _elem(dst)), algorithm)

    def gather(self, dst: Any, src: Any, root: int = 0, nbytes: int | None = None,
               algorithm: str | None = None) -> None:
        """Every member's ``src`` (``nbytes``) to block i of root's ``dst``."""
        self._coll._finish(self._gather(dst, src, root, nbytes, algorithm))

    def gather_nb(self, dst: Any, src: Any, root: int = 0, nbytes: int | None = None,
                  algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._gather(dst, src, root, nbytes, algorithm))

    @_agreed
    def _gather(self, dst: Any, src: Any, root: int = 0, nbytes: int | None = None,
                algorithm: str | None = None) -> Run:
        c, what = self._coll, "gather"
        root = self._root(root, what)
        n = c.size_of(nbytes, src, 1, what, "src")
        s = c.view(src, n, False, what, "src")
        d = c.view(dst, n * self.size, True, what, "dst") if self.index == root else None
        return c._start(self, Args(what, n, root, s, d, _elem(src)), algorithm)

    def gather_all(self, dst: Any, src: Any, nbytes: int | None = None,
                   algorithm: str | None = None) -> None:
        """Every member's ``src`` (``nbytes``) to block i of every member's ``dst``."""
        f = self._fast
        if f is None or algorithm is not None or nbytes is not None or not f.gather_all(
                dst, src):
            self._coll._finish(self._gather_all(dst, src, nbytes, algorithm))

    def gather_all_nb(self, dst: Any, src: Any, nbytes: int | None = None,
                      algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._gather_all(dst, src, nbytes, algorithm))

    @_agreed
    def _gather_all(self, dst: Any, src: Any, nbytes: int | None = None,
                    algorithm: str | None = None) -> Run:
        c, what = self._coll, "gather_all"
        n = c.size_of(nbytes, src, 1, what, "src")
        s = c.view(src, n, False, what, "src")
        d = c.view(dst, n * self.size, True, what, "dst")
        return c._start(self, Args(what, n, 0, s, d, _elem(src)), algorithm)

    def exchange(self, dst: Any, src: Any, nbytes: int | None = None,
                 algorithm: str | None = None) -> None:
        """All-to-all: block j of member i's ``src`` to block i of member j's ``dst``
        (``nbytes`` a block, size blocks each)."""
        self._coll._finish(self._exchange(dst, src, nbytes, algorithm))

    def exchange_nb(self, dst: Any, src: Any, nbytes: int | None = None,
                    algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._exchange(dst, src, nbytes, algorithm))

    @_agreed
    def _exchange(self, dst: Any, src: Any, nbytes: int | None = None,
                  algorithm: str | None = None) -> Run:
        c, what = self._coll, "exchange"
        n = c.size_of(nbytes, src, self.size, what, "src")
        s = c.view(src, n * self.size, False, what, "src")
        d = c.view(dst, n * self.size, True, what, "dst")
        return c._start(self, Args(what, n, 0, s, d, _elem(src)), algorithm)

    def permute(self, dst: Any, src: Any, perm: Sequence[int], nbytes: int | None = None,
                algorithm: str | None = None) -> None:
        """Member i's ``src`` (``nbytes``) to member ``perm[i]``'s ``dst`` (``perm`` the same
        permutation of range(size) on every member)."""
        self._coll._finish(self._permute(dst, src, perm, nbytes, algorithm))

    def permute_nb(self, dst: Any, src: Any, perm: Sequence[int], nbytes: int | None = None,
                   algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._permute(dst, src, perm, nbytes, algorithm))

    @_agreed
    def _permute(self, dst: Any, src: Any, perm: Sequence[int], nbytes: int | None = None,
                 algorithm: str | None = None) -> Run:
        c, what = self._coll, "permute"
        try:
            p = [int(x) for x in perm]
        except (TypeError, ValueError):
            raise ValueError(f"{what}: perm must be a sequence of ints, got {perm!r}") from None
        if sorted(p) != list(range(self.size)):
            raise ValueError(f"{what}: perm {p} is not a permutation of 0..{self.size - 1}")
        n = c.size_of(nbytes, src, 1, what, "src")
        s = c.view(src, n, False, what, "src")
        d = c.view(dst, n, True, what, "dst")
        return c._start(self, Args(what, n, 0, s, d, _elem(src), perm=p), algorithm)

    def reduce(self, dst: Any, src: Any, op: Any, root: int = 0, func: Callable | None = None,
               algorithm: str | None = None) -> None:
        """Root's ``dst`` = ``src`` of every member combined element by element with ``op``
        (ADD ... MAX, FUNC, NONCOMM_FUNC; member order for NONCOMM_FUNC). ``src`` and
        ``dst`` are numpy arrays of one dtype and size."""
        self._coll._finish(self._reduce(dst, src, op, root, func, algorithm))

    def reduce_nb(self, dst: Any, src: Any, op: Any, root: int = 0,
                  func: Callable | None = None, algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._reduce(dst, src, op, root, func, algorithm))

    @_agreed
    def _reduce(self, dst: Any, src: Any, op: Any, root: int = 0,
                func: Callable | None = None, algorithm: str | None = None) -> Run:
        root = self._root(root, "reduce")
        return self._reduction("reduce", dst, src, op, func, root, algorithm,
                               self.index == root)

    def reduce_all(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                   algorithm: str | None = None) -> None:
        """As :meth:`reduce`, the result in every member's ``dst``."""
        f = self._fast
        if f is None or algorithm is not None or not f.reduce_all(dst, src, op, func):
            self._coll._finish(self._reduce_all(dst, src, op, func, algorithm))

    def reduce_all_nb(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                      algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._reduce_all(dst, src, op, func, algorithm))

    @_agreed
    def _reduce_all(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                    algorithm: str | None = None) -> Run:
        return self._reduction("reduce_all", dst, src, op, func, 0, algorithm, True)

    def prefix_reduce(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                      algorithm: str | None = None) -> None:
        """Member i's ``dst`` = the ``src`` of members 0..i combined with ``op`` (an
        inclusive scan, member order kept)."""
        self._coll._finish(self._prefix_reduce(dst, src, op, func, algorithm))

    def prefix_reduce_nb(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                         algorithm: str | None = None) -> CollHandle:
        return CollHandle(self._coll, self._prefix_reduce(dst, src, op, func, algorithm))

    @_agreed
    def _prefix_reduce(self, dst: Any, src: Any, op: Any, func: Callable | None = None,
                       algorithm: str | None = None) -> Run:
        return self._reduction("prefix_reduce", dst, src, op, func, 0, algorithm, True)

    # -- helpers ----------------------------------------------------------------------------
    def _root(self, root: Any, what: str) -> int:
        if type(root) is int and 0 <= root < self.size:  # the common case
            return root
        r = _int(root, f"{what}: root")
        if not 0 <= r < self.size:
            raise ValueError(f"{what}: root {r} is not a member index of {self} (0.."
                             f"{self.size - 1})")
        return r

    def _reduction(self, what: str, dst: Any, src: Any, op: Any, func: Any, root: int,
                   algorithm: str | None, needs_dst: bool) -> Run:
        if not isinstance(src, np.ndarray):
            raise TypeError(f"{what}: src must be a numpy array, got {type(src).__name__}")
        dt = src.dtype
        o = check_op(op, dt, func, what)
        if src.size == 0:
            raise ValueError(f"{what}: src is empty; reduce at least one element")
        c = self._coll
        s = c.view(src, src.nbytes, False, what, "src")
        d = None
        if needs_dst:
            if not isinstance(dst, np.ndarray) or dst.dtype != dt or dst.size != src.size:
                got = (f"{dst.dtype} x {dst.size}" if isinstance(dst, np.ndarray)
                       else type(dst).__name__)
                raise ValueError(f"{what}: dst must be a numpy array of {dt} x {src.size} "
                                 f"like src, got {got}")
            d = c.view(dst, src.nbytes, True, what, "dst")
        a = Args(what, src.nbytes, root, s, d, dt.itemsize, op=o, func=func, dtype=dt)
        return c._start(self, a, algorithm)


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer):
        raise TypeError(f"{what} must be an int, got {x!r}")
    return int(x)


def _elem(buf: Any) -> int:
    return buf.itemsize if isinstance(buf, np.ndarray) else 1


class Coll:
    """``ep.coll``: the world and node teams, team splitting (``ep.coll.team_split``), and
    the collectives of the world team as methods of its own (``ep.coll.broadcast(...)``
    is ``ep.coll.world.broadcast(...)``)."""

    def __init__(self, port: Any) -> None:
        ep = port.endpoint
        self.port = port
        self.rank = port.rank
        self.threads_per_proc = ep.threads_per_proc
        self.procs_per_node = ep.procs_per_node
        self.box = Mailbox(port)
        self._runs: list[Run] = []
        self._digests: dict[Sig, int] = {}

        self.choice = parse_choice(ep.config.coll_algorithm)
        check = ep.config.coll_check
        self.strict = check == "strict"  # every call checked before it completes
        self.check_after = 0.0 if self.strict else float(check)
        # node-area slots (see _node): 0 is the world's, 1 the node team's, the others go to
        # teams from split (a bit set: free here)
        self.free_slots = (1 << COLL_TEAMS) - 4
        world = list(range(port.size))
        self.world = Team(self, 0, world, "world", 0)
        per = self.threads_per_proc * self.procs_per_node
        node = self.rank // per
        mates = [r for r in range(port.size) if r // per == node]
        self.node = Team(self, (1 << 62) + node, mates, f"node{node}", 1)

    def __repr__(self) -> str:
        return f"<amnet.coll of rank {self.rank}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.world, name)  # ep.coll.broadcast(...) on the world team

    def team_split(self, color: int | None, key: int = 0, team: Team | None = None
                   ) -> Team | None:
        """``(team or the world).split(color, key)``."""
        return (team or self.world).split(color, key)

    # -- buffers ----------------------------------------------------------------------------
    def size_of(self, nbytes: Any, buf: Any, parts: int, what: str, name: str) -> int:
        """``nbytes`` checked, or taken from ``buf`` (divided into ``parts`` blocks)."""
        if nbytes is None and type(buf) is np.ndarray and buf.size:  # the common case
            total = buf.nbytes
            if not total % parts:
                return total // parts
        if nbytes is None:
            if isinstance(buf, int | np.integer) and not isinstance(buf, bool):
                raise ValueError(f"{what}: {name} is a segment offset, so nbytes is needed")
            try:
                total = memoryview(buf).nbytes
            except TypeError:
                raise TypeError(f"{what}: {name} must be a numpy array, a bytes-like or a "
                                f"segment offset, got {type(buf).__name__}") from None
            if total % parts:
                raise ValueError(f"{what}: {name} holds {total} bytes, not a multiple of the "
                                 f"team's {parts} members")
            nbytes = total // parts
        n = _int(nbytes, f"{what}: nbytes")
        if n <= 0:
            raise ValueError(f"{what}: nbytes must be at least 1, got {n}")
        return n

    def view(self, buf: Any, n: int, writable: bool, what: str, name: str) -> np.ndarray:
        """``buf`` (``n`` bytes) as a flat uint8 view. Raises ValueError/TypeError."""
        if type(buf) is np.ndarray and buf.nbytes == n:  # the common case
            f = buf.flags
            if f.c_contiguous and (f.writeable or not writable):
                return buf if buf.dtype == np.uint8 and buf.ndim == 1 else \
                    buf.reshape(-1).view(np.uint8)
        if isinstance(buf, int | np.integer) and not isinstance(buf, bool):
            off, seg = int(buf), self.port.segment
            if not 0 <= off <= len(seg) - n:
                raise ValueError(f"{what}: {name} at segment offset {off} for {n} bytes "
                                 f"leaves the segment (0..{len(seg)})")
            return seg[off:off + n]
        if buf is None:
            raise TypeError(f"{what}: {name} is needed on this member")
        if isinstance(buf, np.ndarray):
            if not buf.flags.c_contiguous:
                raise ValueError(f"{what}: {name} must be C-contiguous")
            if writable and not buf.flags.writeable:
                raise ValueError(f"{what}: {name} is read-only")
            v = buf.reshape(-1).view(np.uint8)
        else:
            try:
                mv = memoryview(buf)
            except TypeError:
                raise TypeError(f"{what}: {name} must be a numpy array, a bytes-like or a "
                                f"segment offset, got {type(buf).__name__}") from None
            if writable and mv.readonly:
                raise ValueError(f"{what}: {name} is read-only")
            v = np.frombuffer(mv.cast("B"), np.uint8) if mv.nbytes else np.empty(0, np.uint8)
        if v.size != n:
            raise ValueError(f"{what}: {name} holds {v.size} bytes, the call needs {n}")
        return v

    # -- running ----------------------------------------------------------------------------
    def pick(self, team: Team, a: Args, algorithm: str | None) -> str:
        """The algorithm: the caller's, else AMNET_COLL_ALGORITHM's, else the default."""
        algs = ALGORITHMS[a.what]
        if algorithm is not None:
            if algorithm not in algs:
                raise ValueError(f"{a.what}: no algorithm {algorithm!r}; it has "
                                 f"{', '.join(algs)}")
            if algorithm == "shm" and team._shm is None:
                return default(team, a)  # no shared memory: what the team takes by default
            return algorithm
        chosen = self.choice.get(a.what)
        if chosen is not None and (chosen != "shm" or team._shm is not None):
            return chosen
        return default(team, a)

    def _start(self, team: Team, a: Args, algorithm: str | None) -> Run:
        self.port.forbid_send_in_handler(f"amnet.coll {a.what}")
        alg = self.pick(team, a, algorithm)
        sig = signature(a, alg)
        d = self._digests.get(sig)
        if d is None:
            if len(self._digests) > 4096:
                self._digests.clear()
            d = self._digests[sig] = digest(sig)
        return self.resume(team, a, self.box.next_seq.get(team.id, 0), sig, d,
                           ALGORITHMS[a.what][alg])

    def resume(self, team: Team, a: Args, seq: int, sig: Any, d: int,
               gen: Callable[[Any, Args], Any]) -> Run:
        """Start call ``seq`` of ``team`` as a Run of generator ``gen`` -- the algorithm, or,
        for a call the fast path (see _fast) entered and sent for, the algorithm's
        receiving half, which finishes it as any other call."""
        box = self.box
        run = Run(box, team, seq, d, sig, a.what, self.strict)
        run.gen = gen(run, a)
        self._runs.append(run)
        try:
            run.start()
        except BaseException:
            self._runs.remove(run)
            raise
        return run

    def _poison(self, team: Team, sig: str) -> None:
        """Take part in a call with a description saying what was wrong (see _agreed):
        every member is asked for its description at once, and this one waits for the
        verdict."""
        seq = self.box.next_seq.get(team.id, 0)
        run = Run(self.box, team, seq, digest(sig), sig, "call", True)
        run.gen = _nothing()
        self._runs.append(run)
        run.start(check=True)
        self._wait(run)

    def _advance(self, run: Run) -> bool:
        if run.failed is not None:  # it failed while another call was waited for
            exc, run.failed = run.failed, None
            raise exc
        try:
            done = run.advance()
        except BaseException:
            if run in self._runs:
                self._runs.remove(run)
            raise
        if done:
            if run in self._runs:
                self._runs.remove(run)
            failed = self.box.failed
            late = None
            if failed:
                with self.box.lock:  # a handler's verdict adds to it under the lock
                    late = failed.pop(run.call[0], None)
            if late is not None:  # an earlier call of the team was found mismatched
                raise CollectiveMismatch("\n".join(late))
        return done

    def _test(self, run: Run) -> bool:
        self.port.forbid_in_handler(f"amnet.coll {run.what}")
        self.port.poll()
        self._others(run)
        if self._advance(run):
            return True
        if not run.checked and time.monotonic() - run.since > self.check_after:
            run.check()
        return False

    def _others(self, run: Run) -> None:
        """Advance the other calls in flight; what one raises waits for its own handle."""
        for other in list(self._runs):
            if other is not run and other.ready():
                try:
                    self._advance(other)
                except Exception as e:
                    other.failed = e

    def _wait(self, run: Run) -> None:
        self.port.forbid_in_handler(f"amnet.coll {run.what}")
        self._finish(run)

    def _finish(self, run: Run) -> None:
        """Complete ``run`` (a blocking call: its start checked the context)."""
        runs = self._runs
        if self._advance(run):
            return
        with self.port.waiting(run):  # it waits: a timeout's diagnosis names the call
            while True:
                if len(runs) > 1:
                    self._others(run)
                    pred = lambda: run.ready() or any(r.ready() for r in runs)
                else:
                    pred = run.ready
                if not self.port.wait_until(pred, None if run.checked else self.check_after):
                    run.check()  # no progress for check_after seconds: compare the calls
                if self._advance(run):
                    return


def _nothing() -> Any:
    return None
    yield  # a generator that finishes at once
