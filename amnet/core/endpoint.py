"""The Endpoint: one rank's handle on the job (docs/design.md §3-5).

It carries the topology and the bootstrap collectives (here), the core AM API
(:mod:`amnet.core._amapi`) and the extended API (:mod:`amnet.core._extapi`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

from .._errors import InitError
from ._amapi import AMMixin
from ._extapi import ExtendedMixin
from ._extension import port_of
from ._hot import EndpointBase

if TYPE_CHECKING:  # the runtime (above) makes endpoints; only the type is named here
    from ._runtime import RankContext


def _check_name(name: Any) -> Any:
    if name is None or (isinstance(name, int | str) and not isinstance(name, bool)):
        return name
    raise TypeError(f"a barrier name must be None, an int or a str, got {type(name).__name__}")


class Bootstrap:
    """Collectives carried by the launcher's bootstrap service (slow path, any time).

    Usable from ``amnet.init()`` to ``amnet.finalize()``. Every rank must call the same
    collectives in the same order; each call blocks until all ranks entered it.
    """

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RankContext) -> None:
        self._ctx = ctx

    def _live(self) -> RankContext:
        if self._ctx.finalized:
            raise InitError(f"rank {self._ctx.rank} already called amnet.finalize()")
        return self._ctx

    @property
    def table(self) -> list[dict[str, Any]]:
        """The job's address table: what every rank published in ``amnet.init()``, by rank.

        Each entry has at least ``host`` and ``pid`` (the rank's process id on its host).
        """
        return [dict(e) for e in self._ctx.table]

    @property
    def address(self) -> str | None:
        """The launcher's bootstrap address (None in a one-rank ``python app.py`` job)."""
        p = self._ctx.process
        return None if p is None else p.spec["bootstrap"]

    def barrier(self, name: int | str | None = None) -> None:
        """Wait until every rank entered this barrier.

        Raises:
            BarrierMismatch: two ranks passed different names (``None`` matches any name).
            JobAborted: the job is being torn down.
        """
        self._live().collective("barrier", _check_name(name))

    def allgather(self, value: Any) -> list[Any]:
        """Return the list of every rank's ``value``, indexed by rank.

        Raises:
            TypeError: ``value`` cannot be encoded with msgpack (checked before sending).
            JobAborted: the job is being torn down.
        """
        try:
            msgpack.packb(value, use_bin_type=True)
        except Exception as e:
            raise TypeError(f"allgather values must be msgpack-serialisable: {e}") from None
        return self._live().collective("allgather", value=value)


class Endpoint(EndpointBase, AMMixin, ExtendedMixin):
    """This rank's view of the job. Returned by :func:`amnet.init`; one per rank.

    Attributes are read-only, except ``on_handler_error``. The methods a round trip goes
    through (``request_*``, ``poll``, ``wait_until``, ``put``, ``get``) are C methods of
    :class:`amnet.core._hot.EndpointBase`.
    """

    __slots__ = ("_ctx", "_eng", "_exts", "_rs", "_topo", "_vis", "bootstrap", "host",
                 "local_ranks",
                 "max_medium", "node", "nodes", "proc", "procs", "procs_per_node", "rank",
                 "size", "thread", "threads_per_proc")
    _SETTABLE = frozenset({"on_handler_error"})

    def __init__(self, ctx: RankContext, eng: Any, rs: Any) -> None:
        topo = ctx.topology
        node = topo.node_of(ctx.rank)
        for name, value in (
            ("_ctx", ctx), ("_topo", topo), ("_eng", eng), ("_rs", rs), ("rank", ctx.rank),
            ("size", topo.size), ("proc", topo.proc_of(ctx.rank)), ("procs", topo.procs),
            ("thread", topo.thread_of(ctx.rank)), ("threads_per_proc", topo.threads_per_proc),
            ("procs_per_node", topo.procs_per_node), ("node", node), ("nodes", topo.nodes),
            ("local_ranks", topo.ranks_of_node(node)), ("host", ctx.host),
            ("bootstrap", Bootstrap(ctx)), ("max_medium", eng.max_medium), ("_vis", None),
            ("_exts", {}),
        ):
            object.__setattr__(self, name, value)
        self._bind(eng.hot, ctx.rank - eng.first)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._SETTABLE:
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"amnet.Endpoint attributes are read-only (tried to set {name!r})")

    @property
    def config(self):
        """The job's resolved configuration (read-only)."""
        return self._ctx.config

    @property
    def vis(self) -> Any:
        """Vector, indexed and strided put/get to and from other ranks' segments
        (:class:`amnet.vis.VIS`, docs/design.md §9); ``ep.extension("vis")``."""
        v = self._vis
        if v is None:
            v = self.extension("vis")
            object.__setattr__(self, "_vis", v)
        return v

    @property
    def coll(self) -> Any:
        """Teams and collectives (:class:`amnet.coll.Coll`, docs/collectives.md);
        ``ep.extension("coll")``."""
        return self.extension("coll")

    def team_split(self, color: int | None, key: int = 0) -> Any:
        """``ep.coll.world.split(color, key)``: a new team of the ranks passing ``color``
        (collective on every rank)."""
        return self.extension("coll").team_split(color, key)

    def port(self, name: str) -> Any:
        """My :class:`amnet.Port` for extension ``name`` (docs/am-guide.md, "Extensions").

        Raises:
            AMNetError: no extension of that name is installed or registered.
        """
        return self._rs.ports.get(name) or port_of(self._live(), name)

    def extension(self, name: str) -> Any:
        """The object extension ``name`` attached to this endpoint (``ep.vis`` is
        ``ep.extension("vis")``).

        Raises:
            AMNetError: no extension of that name is installed or registered.
        """
        x = self._exts.get(name)
        if x is None:
            x = self.port(name).state
            self._exts[name] = x
        return x

    def is_local(self, rank: int) -> bool:
        """True when ``rank`` is on my node (shares memory with me).

        Raises:
            RankError: ``rank`` is not a rank of this job.
        """
        return self._topo.node_of(self._topo.check_rank(rank)) == self.node

    def same_process(self, rank: int) -> bool:
        """True when ``rank`` is a thread of my process.

        Raises:
            RankError: ``rank`` is not a rank of this job.
        """
        return self._topo.proc_of(self._topo.check_rank(rank)) == self.proc

    def _live(self) -> Any:
        if self._ctx.finalized:
            raise InitError(f"rank {self.rank} already called amnet.finalize(); the endpoint "
                            "may not be used after it")
        return self._rs

    def __repr__(self) -> str:
        return (f"<amnet.Endpoint rank {self.rank}/{self.size} node {self.node}/{self.nodes} "
                f"proc {self.proc} thread {self.thread} on {self.host}>")
