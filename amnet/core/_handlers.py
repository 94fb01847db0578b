"""Handler tables: what a rank registered, by index; the ``@amnet.handler`` declaration.

A handler is named ``module.qualname``; the wire carries its index in the table. Every rank
registers the same names in the same order (verified at registration). A handler may declare
its category (``"short"``, ``"medium"``, ``"long"`` or ``"rpc"``) and its argument count with
:func:`handler`; undeclared handlers accept any.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._errors import HandlerMismatch, HandlerNotRegistered
from ._wire import MAX_ARGS

CATEGORIES = ("short", "medium", "long", "rpc")


def handler(category: str | None = None,
            nargs: int | None = None) -> Callable[[Callable], Callable]:
    """Declare what a handler accepts; AMs that do not fit are refused before sending.

    ``@amnet.handler("medium")`` makes ``request_medium``/``reply_medium`` the only way to
    call it; ``nargs=2`` requires exactly two int arguments. Returns the function unchanged
    apart from the declaration.

    Raises:
        ValueError: unknown category, or ``nargs`` outside 0..16.
        TypeError: (when applied) a short/medium/long handler that cannot be called as
            ``fn(token, [payload,] *args)`` with ``nargs`` arguments.
    """
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"handler category must be one of {', '.join(CATEGORIES)}, "
                         f"got {category!r}")
    if nargs is not None and (isinstance(nargs, bool) or not isinstance(nargs, int)
                              or not 0 <= nargs <= MAX_ARGS):
        raise ValueError(f"handler nargs must be an int in 0..{MAX_ARGS}, got {nargs!r}")

    def deco(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"@amnet.handler decorates a function, got {type(fn).__name__}")
        # a method in a class body is still a function here: its self comes first
        qual = getattr(fn, "__qualname__", "")
        method = "." in qual and qual.rsplit(".", 2)[-2] != "<locals>"
        check_signature(fn, category, nargs, method)
        fn.__amnet_handler__ = (category, nargs)  # type: ignore[attr-defined]
        return fn

    return deco


def check_signature(fn: Callable, category: str | None, nargs: int | None,
                    method: bool = False) -> None:
    """A handler declared ``short``, ``medium`` or ``long`` must take what it will be called
    with: ``fn(token, *args)``, ``fn(token, payload, *args)``, with ``nargs`` arguments when
    declared (else with some number of them, 0..16). Undeclared handlers and rpc
    functions take what their callers send: nothing to check. ``method``: ``fn`` is a
    method seen in its class body, called with its ``self`` first.

    Raises:
        TypeError: naming the handler, its parameters and the call it must accept.
    """
    if category not in ("short", "medium", "long"):
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature
        return
    fixed = ["token"] if category == "short" else ["token", "payload"]

    def call(n: int) -> list[str]:
        return [*fixed, *(f"a{i}" for i in range(1, n + 1))]

    def takes(n: int) -> bool:
        try:
            sig.bind(*(["self"] if method else []), *call(n))
        except TypeError:
            return False
        return True

    # declared count: that call exactly; undeclared: some count of arguments (0..16)
    if takes(nargs) if nargs is not None else any(takes(n) for n in range(MAX_ARGS + 1)):
        return
    shown = ", ".join([*(["self"] if method else []), *call(0 if nargs is None else nargs)])
    if nargs is None:
        shown += ", *args"
    counted = "" if nargs is None else f" with nargs={nargs}"
    raise TypeError(f"handler {handler_name(fn)}{sig} is declared {category}{counted}: it is "
                    f"called as fn({shown}) and cannot take that (a handler's first "
                    "parameter is the token)")


def handler_name(fn: Any) -> str:
    """``module.qualname`` of a handler function (what the tables compare)."""
    if not callable(fn):
        raise TypeError(f"a handler must be a callable, got {type(fn).__name__}")
    mod = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{qual}"


#: A rank's handler table holds at most this many handlers: the wire's handler index is 16
#: bits (amnet/core/_wire.py).
MAX_HANDLERS = 1 << 16


def _too_many(have: int, more: int) -> ValueError:
    return ValueError(f"{have + more} handlers in one rank's table ({have} registered, {more} "
                      f"more given); a rank can register at most {MAX_HANDLERS} (the wire's "
                      "handler index is 16 bits)")


class HandlerTable:
    """One rank's handlers: index -> function, plus the lookups senders need."""

    __slots__ = ("by_fn", "by_name", "cats", "fns", "names", "nargs")

    def __init__(self) -> None:
        self.fns: list[Callable] = []
        self.names: list[str] = []
        self.cats: list[int | None] = []  # 0 short, 1 medium, 2 long, 3 rpc, None any
        self.nargs: list[int | None] = []
        self.by_fn: dict[Any, int] = {}
        self.by_name: dict[str, int] = {}

    @staticmethod
    def names_of(fns: Iterable[Callable]) -> list[str]:
        """The names of ``fns``, checking they can be registered together.

        Raises:
            TypeError: an entry is not callable.
            ValueError: two entries have the same name, or there are more than
                :data:`MAX_HANDLERS`.
        """
        fns = list(fns)
        names = [handler_name(f) for f in fns]
        for f in fns:  # a declaration set by hand, not by @amnet.handler, is checked here
            check_signature(f, *getattr(f, "__amnet_handler__", (None, None)))
        if len(names) > MAX_HANDLERS:
            raise _too_many(0, len(names))
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise ValueError(f"two handlers are named {n!r}; handler names "
                                 "(module.qualname) must be unique in a table")
            seen.add(n)
        return names

    def add(self, fns: Sequence[Callable], names: Sequence[str]) -> None:
        """Append ``fns`` (named ``names``); nothing is added if any cannot be.

        Raises:
            ValueError: a name is registered already, or the table would pass
                :data:`MAX_HANDLERS`.
        """
        if len(self.fns) + len(fns) > MAX_HANDLERS:
            raise _too_many(len(self.fns), len(fns))
        for name in names:
            if name in self.by_name:
                raise ValueError(f"handler {name!r} is already registered")
        for fn, name in zip(fns, names, strict=True):
            cat, nargs = getattr(fn, "__amnet_handler__", (None, None))
            idx = len(self.fns)
            self.fns.append(fn)
            self.names.append(name)
            self.cats.append(None if cat is None else CATEGORIES.index(cat))
            self.nargs.append(nargs)
            try:
                self.by_fn[fn] = idx
            except TypeError:  # an unhashable callable: found by name
                pass
            self.by_name[name] = idx

    def truncate(self, n: int) -> None:
        """Forget every handler from index ``n`` on (a failed registration)."""
        for name in self.names[n:]:
            del self.by_name[name]
        for f in [f for f, i in self.by_fn.items() if i >= n]:
            del self.by_fn[f]  # in place: the C hot path holds this dict
        del self.fns[n:], self.names[n:], self.cats[n:], self.nargs[n:]

    def index(self, fn: Any) -> int:
        """The index of ``fn`` (a registered function or its name).

        Raises:
            HandlerNotRegistered: it is not in the table.
        """
        try:
            return self.by_fn[fn]
        except (KeyError, TypeError):
            pass
        name = fn if isinstance(fn, str) else handler_name(fn)
        try:
            return self.by_name[name]
        except KeyError:
            raise HandlerNotRegistered(
                f"{name!r} is not a registered handler; register it with "
                "amnet.init(handlers=[...]) or ep.register_handlers([...])") from None


def verify_tables(tables: Sequence[Sequence[str]], what: str) -> None:
    """Check every rank registered the same names; raise the same error on every rank.

    Raises:
        HandlerMismatch: naming the first rank whose list differs from rank 0's and where.
    """
    ref = list(tables[0])
    for rank, names in enumerate(tables):
        names = list(names)
        if names == ref:
            continue
        for i in range(max(len(ref), len(names))):
            a = ref[i] if i < len(ref) else None
            b = names[i] if i < len(names) else None
            if a != b:
                raise HandlerMismatch(
                    f"{what}: rank {rank} registered a different handler table than rank 0: "
                    f"at position {i} rank 0 has {a or '(nothing)'!r} and rank {rank} has "
                    f"{b or '(nothing)'!r}; every rank must register the same handlers in "
                    "the same order")
