"""Teams and contexts (OpenSHMEM 1.5 §9.2, §9.4; shmem4py's ``Team`` and ``Ctx`` classes, plus
the C API's function names). The team collectives are in :mod:`shmem_rt._coll`.

A team is a per-PE record over an ``amnet.coll`` team (``ep.coll.world`` for TEAM_WORLD,
``ep.coll.node`` for TEAM_SHARED, ``team.split`` for the teams made by splitting), so every
collective inherits amnet.coll's guarantees: mismatched calls raise
``amnet.CollectiveMismatch`` on every member instead of hanging. The module constants
(TEAM_WORLD, TEAM_SHARED, CTX_DEFAULT) are shared by the rank-threads of a process and
resolve to the calling PE's record; a team made by a split belongs to the PE that made it.

When every PE is on one node, the world barrier is a dissemination barrier on words in
shared memory (one store to a partner and one wait per round, no message); otherwise it is
amnet.coll's barrier (:class:`shmem_rt._state.Teams`, with the team records).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Self

import numpy as np

import amnet

from ._init import current
from ._state import INVALID, SHARED, WORLD, TeamRec


class _Handle:
    """What a :class:`Team` and a :class:`Ctx` handle share: two handles of one class are
    equal when their ``_key()`` names the same thing (a destroyed one is equal to the
    invalid one), and ``with handle:`` destroys it at the end."""

    __slots__ = ()

    def _key(self) -> tuple:
        raise NotImplementedError

    def destroy(self) -> None:
        raise NotImplementedError

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        a, b = self._key(), other._key()
        return a[0] == b[0] and a[1] is b[1]

    def __hash__(self) -> int:
        a = self._key()
        return hash((a[0], id(a[1])))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *args: Any) -> None:
        self.destroy()


def _config(config: Any, kwargs: Mapping[str, int], what: str) -> int:
    conf = dict(config or {})
    conf.update(kwargs)
    for k, v in conf.items():
        if k.lower() != "num_contexts":
            raise ValueError(f"{what}: unknown team configuration {k!r} (OpenSHMEM 1.5 has "
                             "num_contexts)")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{what}: num_contexts must be an int >= 0, got {v!r}")
    return int(next(iter(conf.values()), 0))


class Team(_Handle):
    """An OpenSHMEM team (shmem4py's class): ``TEAM_WORLD``, ``TEAM_SHARED``, or one made
    by :meth:`split_strided` / :meth:`split_2d`. ``Team()`` is TEAM_INVALID; a team is
    false when invalid."""

    __slots__ = ("_id", "_rec")

    def __init__(self, team: Team | None = None) -> None:
        if team is None:
            self._id, self._rec = INVALID, None
        elif isinstance(team, Team):
            self._id, self._rec = team._id, team._rec
        else:
            raise TypeError(f"unexpected type: {type(team).__name__}")

    @classmethod
    def _of(cls, rec: TeamRec) -> Team:
        t = cls()
        t._id, t._rec = None, rec
        return t

    def __repr__(self) -> str:
        name = {WORLD: "TEAM_WORLD", SHARED: "TEAM_SHARED", INVALID: "TEAM_INVALID"}.get(
            self._id)
        return f"<shmem_rt.Team {name or 'split'}>"

    def _key(self) -> tuple:
        """What equality compares: a destroyed team (and every alias of it, ``Team(team)``)
        is TEAM_INVALID, as shmem4py's destroy() leaves its handle SHMEM_TEAM_INVALID."""
        if self._rec is not None:
            return (None, self._rec) if self._rec.valid else (INVALID, None)
        return (self._id, None)

    def __bool__(self) -> bool:
        if self._rec is not None:
            return self._rec.valid
        return self._id is not None and self._id >= 0

    def rec(self, what: str) -> TeamRec:
        """This PE's record of the team.

        Raises:
            ValueError: TEAM_INVALID, or a destroyed team.
        """
        r = self._rec
        if r is not None:
            if not r.valid:
                raise ValueError(f"{what}: the team was destroyed")
            return r
        if self._id is None or self._id < 0:
            raise ValueError(f"{what}: TEAM_INVALID is not a team (a PE outside a split "
                             "gets it)")
        return current().teams.recs[self._id]

    def destroy(self) -> None:
        """Destroy a team made by a split (nothing for the predefined ones, and nothing
        again for a destroyed one). Collective over the team, as OpenSHMEM's
        shmem_team_destroy: its amnet.coll team is destroyed with it (a barrier of its
        members), which gives back what the team held, its slot of the node area among
        them."""
        rec = self._rec
        if rec is not None and rec.valid:
            rec.valid = False
            rec.coll.destroy()

    def split_strided(self, start: int = 0, stride: int = 1, size: int | None = None,
                      config: Mapping[str, int] | None = None, **kwargs: int) -> Team:
        """A new team of the members ``start, start + stride, ...`` (``size`` of them) of
        this one, in that order (collective over this team: every member passes the same
        arguments). As the reference implementation (Sandia OpenSHMEM 1.5) takes them: the
        stride may be negative (start 3, stride -1, size 4 on a team of 4: its members in
        reverse order), a stride of 0 (or any stride with size 1) counts as 1, and every
        member ``start + k * stride`` must be a member of this team. ``size`` None: as many
        as fit. Members left out get TEAM_INVALID.

        Raises:
            ValueError: a start, stride or size that does not fit the team (on every
                member), an unknown configuration.
        """
        what = "Team.split_strided()"
        rec = self.rec(what)
        ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stride))
        if ints and stride == 0:
            stride = 1  # as the reference implementation
        if size is None:
            size = len(range(start, rec.n if stride > 0 else -1, stride)) \
                if ints and 0 <= start < rec.n else 0
        nctx = _config(config, kwargs, what)
        bad = None
        if not ints or isinstance(size, bool) or not isinstance(size, int):
            bad = "start, stride and size must be ints"
        elif not (0 <= start < rec.n and 1 <= size <= rec.n
                  and 0 <= start + (size - 1) * stride < rec.n):
            bad = (f"start {start}, stride {stride} and size {size} do not fit a team of "
                   f"{rec.n} PEs (start in 0..{rec.n - 1}, size in 1..{rec.n}, and the last "
                   f"member start + (size - 1) * stride in 0..{rec.n - 1})")
        _agree_team(rec, what, bad, (start, stride, size) if bad is None else (-1, -1, -1))
        if size == 1:
            stride = 1  # one member: start, whatever the stride
        i = rec.index - start
        member = i % stride == 0 and 0 <= i // stride < size
        new = rec.coll.split(0 if member else None, i // stride if member else 0)
        if not member:
            return Team()
        members = [rec.members[start + k * stride] for k in range(size)]
        return Team._of(TeamRec(new, members, rec.members[rec.index], nctx))

    def split_2d(self, xrange: int, xaxis_config: Mapping[str, int] | None = None,
                 yaxis_config: Mapping[str, int] | None = None) -> tuple[Team, Team]:
        """Split this team into a 2-D grid with rows of ``xrange`` members: returns
        ``(xteam, yteam)``, my row and my column (collective over this team)."""
        what = "Team.split_2d()"
        rec = self.rec(what)
        bad = None
        if isinstance(xrange, bool) or not isinstance(xrange, int) or xrange < 1:
            bad = f"xrange must be an int >= 1, got {xrange!r}"
        xn = _config(xaxis_config, {}, what)
        yn = _config(yaxis_config, {}, what)
        _agree_team(rec, what, bad, (xrange,) if bad is None else (-1,))
        xr = min(xrange, rec.n)
        i = rec.index
        me = rec.members[i]
        xt = rec.coll.split(i // xr, i % xr)
        yt = rec.coll.split(i % xr, i // xr)
        xm = [rec.members[j] for j in range(rec.n) if j // xr == i // xr]
        ym = [rec.members[j] for j in range(rec.n) if j % xr == i % xr]
        return Team._of(TeamRec(xt, xm, me, xn)), Team._of(TeamRec(yt, ym, me, yn))

    def get_config(self) -> dict[str, int]:
        return {"num_contexts": self.rec("Team.get_config()").num_contexts}

    def my_pe(self) -> int:
        """My number in the team.

        Raises:
            RuntimeError: TEAM_INVALID or a destroyed team, as shmem4py raises where
                ``shmem_team_my_pe`` returns -1 (:func:`team_my_pe` returns that -1).
        """
        if not self:
            raise RuntimeError(_invalid(self, "Team.my_pe()"))
        return self.rec("Team.my_pe()").index

    def n_pes(self) -> int:
        """How many PEs the team has.

        Raises:
            RuntimeError: TEAM_INVALID or a destroyed team (see :meth:`my_pe`).
        """
        if not self:
            raise RuntimeError(_invalid(self, "Team.n_pes()"))
        return self.rec("Team.n_pes()").n

    def translate_pe(self, pe: int | None = None, team: Team | None = None) -> int:
        """Member ``pe`` of this team (default: me) as a member of ``team`` (default: the
        world); -1 when it is not one."""
        what = "Team.translate_pe()"
        rec = self.rec(what)
        if pe is None:
            pe = rec.index
        if isinstance(pe, bool) or not isinstance(pe, int | np.integer) \
                or not 0 <= pe < rec.n:
            return -1
        world = rec.members[int(pe)]
        dest = TEAM_WORLD if team is None else team
        if not dest:
            return -1
        dm = dest.rec(what).members
        return dm.index(world) if world in dm else -1

    def create_ctx(self, options: int = 0) -> Ctx:
        return Ctx.create(options, self)

    def sync(self) -> None:
        """Wait until every member entered."""
        rec = self.rec("Team.sync()")
        if self._id == WORLD:
            current().teams.world_barrier("Team.sync() of TEAM_WORLD")
        else:
            with current().port.waiting("Team.sync()"):
                rec.sync()


class SplitError(ValueError, RuntimeError):
    """A team split refused: a ``ValueError``, as shmem_rt's other bad arguments, and a
    ``RuntimeError``, as shmem4py raises where ``shmem_team_split_strided`` returns
    nonzero (``shmem_team_split_strided: error -1``)."""


def _agree_team(rec: TeamRec, what: str, bad: str | None, values: tuple) -> None:
    """Every member passed the same ``values`` (and none is bad), checked with a gather to
    all on the team, so a mistake raises on every member.

    Raises:
        SplitError: (a ValueError and a RuntimeError) on every member.
    """
    mine = np.array(values, dtype=np.int64)
    allv = np.empty((rec.n, len(values)), dtype=np.int64)
    rec.coll.gather_all(allv, mine)
    if bad is not None:
        raise SplitError(f"{what}: {bad}")
    for i in range(rec.n):
        if (allv[i] == -1).all() and len(values) and values[0] != -1:
            raise SplitError(f"{what}: member {i} of the team passed arguments that do not "
                             "fit the team")
        if not np.array_equal(allv[i], allv[0]):
            raise SplitError(f"{what}: member {i} passed {tuple(int(v) for v in allv[i])} "
                             f"but member 0 passed {tuple(int(v) for v in allv[0])}; every "
                             "member must pass the same arguments")


TEAM_WORLD = Team()
TEAM_WORLD._id = WORLD
TEAM_SHARED = Team()
TEAM_SHARED._id = SHARED
TEAM_INVALID = Team()


def team_rec(team: Any, what: str) -> TeamRec:
    if not isinstance(team, Team):
        raise TypeError(f"{what}: team must be a shmem_rt.Team, got {type(team).__name__}")
    return team.rec(what)


# -- the C API's team functions (additions to shmem4py's methods) -----------------------
def team_my_pe(team: Team) -> int:
    """``shmem_team_my_pe``: -1 for TEAM_INVALID or a destroyed team (the C API's answer;
    :meth:`Team.my_pe` raises there, as shmem4py's does)."""
    return team.my_pe() if team else -1


def team_n_pes(team: Team) -> int:
    """``shmem_team_n_pes``: -1 for TEAM_INVALID or a destroyed team."""
    return team.n_pes() if team else -1


def _invalid(team: Team, what: str) -> str:
    which = "a destroyed team" if team._rec is not None else "TEAM_INVALID"
    return (f"{what}: {which} is not a team (shmem_team_my_pe and shmem_team_n_pes return -1 "
            "for it: a PE outside a split gets TEAM_INVALID)")


def team_get_config(team: Team) -> dict[str, int]:
    return team.get_config()


def team_translate_pe(src_team: Team, src_pe: int, dest_team: Team) -> int:
    return src_team.translate_pe(src_pe, dest_team)


def team_split_strided(parent_team: Team, start: int, stride: int, size: int,
                       config: Mapping[str, int] | None = None) -> Team:
    return parent_team.split_strided(start, stride, size, config)


def team_split_2d(parent_team: Team, xrange: int,
                  xaxis_config: Mapping[str, int] | None = None,
                  yaxis_config: Mapping[str, int] | None = None) -> tuple[Team, Team]:
    return parent_team.split_2d(xrange, xaxis_config, yaxis_config)


def team_destroy(team: Team) -> None:
    team.destroy()


def team_sync(team: Team) -> None:
    team.sync()


# -- contexts -------------------------------------------------------------------------------
class CTX(enum.IntFlag):
    PRIVATE = 1
    SERIALIZED = 2
    NOSTORE = 4


CTX_PRIVATE, CTX_SERIALIZED, CTX_NOSTORE = CTX.PRIVATE, CTX.SERIALIZED, CTX.NOSTORE


class CtxRec:
    def __init__(self, team: Team, options: int) -> None:
        self.team = team
        self.options = options
        self.valid = True


class Ctx(_Handle):
    """A communication context (shmem4py's class). Operations on a context take PE numbers
    of its team. ``quiet``/``fence`` on a context complete every operation of the PE (more
    than the context's own, which OpenSHMEM allows): amnet tracks completion per rank."""

    __slots__ = ("_default", "_rec")

    def __init__(self, ctx: Ctx | None = None) -> None:
        if ctx is None:
            self._default, self._rec = False, None
        elif isinstance(ctx, Ctx):
            self._default, self._rec = ctx._default, ctx._rec
        else:
            raise TypeError(f"unexpected type: {type(ctx).__name__}")

    def __repr__(self) -> str:
        return "<shmem_rt.Ctx %s>" % ("CTX_DEFAULT" if self._default else
                                      "CTX_INVALID" if not self else "created")

    def _key(self) -> tuple:
        """What equality compares: a destroyed context (and every alias of it) is
        CTX_INVALID, as shmem4py's destroy() leaves its handle SHMEM_CTX_INVALID."""
        if self._default:
            return (True, None)
        return (False, self._rec if self._rec is not None and self._rec.valid else None)

    def __bool__(self) -> bool:
        return self._default or (self._rec is not None and self._rec.valid)

    @staticmethod
    def create(options: int = 0, team: Team | None = None) -> Ctx:
        """A new context on ``team`` (default: the world).

        Raises:
            ValueError: unknown options bits, an invalid team.
        """
        if isinstance(options, bool) or not isinstance(options, int) \
                or options & ~int(CTX.PRIVATE | CTX.SERIALIZED | CTX.NOSTORE) or options < 0:
            raise ValueError(f"Ctx.create(): options must combine CTX_PRIVATE, "
                             f"CTX_SERIALIZED and CTX_NOSTORE, got {options!r}")
        t = TEAM_WORLD if team is None else team
        team_rec(t, "Ctx.create()")
        c = Ctx()
        c._rec = CtxRec(Team(t), int(options))
        return c

    def destroy(self) -> None:
        """Quiet the context and destroy it (nothing for CTX_DEFAULT)."""
        if self._rec is not None and self._rec.valid:
            current().complete("shmem.quiet()")  # as shmem.quiet()
            self._rec.valid = False  # equal to CTX_INVALID now, as in shmem4py

    def get_team(self) -> Team:
        if self._default:
            return TEAM_WORLD
        return self._rec.team if self else TEAM_INVALID

    def fence(self) -> None:
        """:meth:`quiet` (as :func:`shmem_rt.fence`)."""
        self.quiet()

    def quiet(self) -> None:
        """Complete every operation of this PE (as :func:`shmem_rt.quiet`)."""
        st = current()
        check_ctx(self, "shmem.quiet()")
        st.complete("shmem.quiet()")


CTX_DEFAULT = Ctx()
CTX_DEFAULT._default = True
CTX_INVALID = Ctx()


def check_ctx(ctx: Any, what: str) -> Ctx:
    """Raises TypeError / ValueError for something that is no live context."""
    if not isinstance(ctx, Ctx):
        raise TypeError(f"{what}: ctx must be a shmem_rt.Ctx, got {type(ctx).__name__}")
    if not ctx:
        raise ValueError(f"{what}: the context is invalid (CTX_INVALID or destroyed)")
    return ctx


def ctx_pe(ctx: Any, pe: Any, what: str) -> Any:
    """``pe`` of ``ctx``'s team as a world PE (checked); ``pe`` itself without a context
    (None)."""
    if ctx is None:
        return pe
    c = check_ctx(ctx, what)
    if c._default or c._rec.team._id == WORLD:
        return pe
    rec = c._rec.team.rec(what)
    if isinstance(pe, bool) or not isinstance(pe, int | np.integer) or not 0 <= pe < rec.n:
        raise amnet.RankError(f"{what}: pe {pe!r} is not a member of the context's team "
                              f"(0..{rec.n - 1})")
    return rec.members[int(pe)]


def ctx_create(options: int = 0, team: Team | None = None) -> Ctx:
    return Ctx.create(options, team)


def ctx_destroy(ctx: Ctx) -> None:
    check_ctx(ctx, "shmem.ctx_destroy()").destroy()


def ctx_get_team(ctx: Ctx) -> Team:
    return check_ctx(ctx, "shmem.ctx_get_team()").get_team()
