"""The suites' command lines: every option two suites share is defined here, once.

A suite makes its :class:`Parser`, adds each shared option with the function of that name
here, giving its own default and, where the option means something of the suite's own, a
few words of help (the flag, type, metavar, the rest of the help and the check are this
module's), adds any option of its own with argparse, and parses with :func:`parse`. That
adds ``--quick``, amnet-bench's own ``--out`` and ``--no-plots``, and every option of
:data:`COMMON` the suite does not define (accepted at the value its experiment fixes, refused
otherwise, with the reason), parses, and then runs the checks the options declared: a bad
value ends the run with the parser's error (exit status 2), naming the option and its limit.

The value parsers (``type=`` of argparse, and for defaults) are here too: comma lists of
names, counts, sizes in amnet's syntax (``64K``), conduits, wait modes, splits.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._splits import Split, choose

#: The options every suite takes (docs/benchmarks.md; ``--out`` is amnet-bench's own): a
#: suite defines those its experiment varies, :func:`parse` adds the others as fixed.
COMMON = {"--ranks": "N", "--splits": "T,T", "--nodes": "K", "--sizes": "S,S", "--reps": "R"}
#: The topologies of the suites that name them, and ``--nodes``'s numbers for them.
TOPOLOGIES = {"node": "1", "2nodes": "2"}
#: Where the two sides' threads run (see :func:`amnet_bench._rawzmq.pin_process`).
PINS = ("none", "same", "split")
WAIT_MODES = ("auto", "spin", "block")
#: MPICH's paths between the two processes of the mpi conduit's tables (amnet_bench._mpinet)
MPI_PATHS = ("nolocal", "tcp")

Check = Callable[[argparse.ArgumentParser, argparse.Namespace], None]


class Parser(argparse.ArgumentParser):
    """A suite's command line (``amnet-bench SUITE``): argparse, and the checks its options
    declared (:meth:`check`), which :func:`parse` runs after parsing."""

    def __init__(self, suite: str, description: str) -> None:
        super().__init__(prog=f"amnet-bench {suite}", description=description)
        self.checks: list[Check] = []

    def check(self, fn: Check) -> None:
        """Run ``fn(parser, opts)`` on the parsed options (it calls ``parser.error``)."""
        self.checks.append(fn)


# -- values -------------------------------------------------------------------------------


def comma_items(text: Any) -> list[Any]:
    """The items of a command-line list: ``"1,4,8"`` -> ``["1", "4", "8"]``; an int or an
    iterable of items is taken as it is."""
    if isinstance(text, int):
        return [text]
    if isinstance(text, str):
        return [t for t in text.replace(" ", "").split(",") if t]
    return list(text)


def _none(text: Any) -> bool:
    return isinstance(text, str) and text.strip().lower() in ("", "none")


def choice_list(text: Any, allowed: Iterable[str], what: str, none: bool = False,
                fold: bool = False) -> list[str]:
    """A comma list of names from ``allowed`` (``--topology node,2nodes``), duplicates
    dropped; with ``none``, ``none`` is the empty list; with ``fold``, names are taken in
    upper case. Raises argparse.ArgumentTypeError naming what is allowed."""
    allowed = list(allowed)
    if none and _none(text):
        return []
    items = [str(t).strip() for t in comma_items(text) if str(t).strip()]
    items = [t.upper() for t in items] if fold else items
    if not items or any(i not in allowed for i in items):
        raise argparse.ArgumentTypeError(f"{what} are {', '.join(allowed)}"
                                         + (", or none to skip them" if none else "")
                                         + f"; got {text!r}")
    return list(dict.fromkeys(items))


def int_list(text: Any, what: str, least: int = 1, most: int = 1 << 30,
             none: bool = False) -> list[int]:
    """A comma list of ints in ``least..most`` (``--ranks 2,4,8``), duplicates dropped; with
    ``none``, ``none`` is the empty list. Raises argparse.ArgumentTypeError."""
    return [] if none and _none(text) else _numbers(text, int, what, least, most, "2,4,8")


def float_list(text: Any, what: str, least: float, most: float, unit: str = "") -> list[float]:
    """A comma list of numbers in ``least..most`` (``--latency 0,10``), duplicates dropped.
    Raises argparse.ArgumentTypeError."""
    return _numbers(text, float, what, least, most, "0,10", unit)


def _numbers(text: Any, kind: Callable[[Any], Any], what: str, least: float, most: float,
             example: str, unit: str = "") -> list[Any]:
    try:
        vals = [kind(t) for t in comma_items(text)]
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a comma list of {what} such as {example}, "
                                         f"got {text!r}") from None
    if not vals or any(not least <= v <= most for v in vals):
        raise argparse.ArgumentTypeError(f"{what} are {_num(least)}..{_num(most)}{unit}, "
                                         f"got {text!r}")
    return list(dict.fromkeys(vals))


def one_size(text: Any) -> int:
    """A positive byte count in amnet's syntax (``128M``). Raises argparse.ArgumentTypeError."""
    from ._amnet import parse_size

    try:
        size = parse_size(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected a size such as 128M, got {text!r}")
    if size < 1:
        raise argparse.ArgumentTypeError(f"the size must be positive, got {text!r}")
    return size


def parse_sizes(text: Any) -> list[int]:
    """``"8,1K,64K"`` (or ints) as a list of positive byte counts. Raises
    argparse.ArgumentTypeError."""
    from ._amnet import parse_size

    try:
        sizes = [parse_size(t) for t in comma_items(text)]
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected a comma list of sizes such as 8,1K,64K, "
                                         f"got {text!r}")
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def size_label(n: int) -> str:
    """``8 B``, ``4 KiB``, ``1 MiB``, ``1 GiB``: a whole number of the largest unit, else
    bytes."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def parse_conduits(text: Any) -> list[str]:
    """A comma list of registered conduit names (``--conduit``), duplicates dropped."""
    from ._amnet import registered_conduits

    names = list(dict.fromkeys(t.strip() for t in str(text).split(",") if t.strip()))
    known = registered_conduits(*names)
    if not names or any(n not in known for n in names):
        raise argparse.ArgumentTypeError(f"expected a comma list of registered conduits "
                                         f"({', '.join(sorted(known))}), got {text!r}")
    return names


def parse_modes(text: Any) -> list[str]:
    """``"auto,block"``: amnet wait modes to run (each is its own amnet row)."""
    try:
        return choice_list(text, WAIT_MODES, "wait modes")
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"wait modes are {', '.join(WAIT_MODES)}; "
                                         f"got {text!r}") from None


def parse_threads(text: Any) -> list[int] | None:
    """``--splits``: a comma list of rank-threads per process (``1,2,4``), or ``all``
    (None: every divisor of the ranks per node). Raises argparse.ArgumentTypeError."""
    if isinstance(text, str) and text.strip().lower() in ("", "all"):
        return None
    try:
        vals = [int(t) for t in comma_items(text)]
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected all or a comma list of rank-threads per "
                                         f"process such as 1,2,4, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"rank-threads per process are at least 1, got "
                                         f"{text!r}")
    return sorted(set(vals))


def nodes_topologies(text: Any) -> list[str]:
    """``--nodes 1,2`` as the topologies of the suites that name them: 1 is ``node``, 2
    ``2nodes``. Raises argparse.ArgumentTypeError for anything else."""
    names = {n: t for t, n in TOPOLOGIES.items()}
    items = comma_items(text)
    if not items or any(t not in names for t in items):
        raise argparse.ArgumentTypeError(f"--nodes takes 1, 2 or 1,2 here (one node, or two), "
                                         f"got {text!r}")
    return list(dict.fromkeys(names[t] for t in items))


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


def _shown(default: Any) -> str:
    """A default as ``--help`` shows it: ``8,1K,64K`` as given, a list joined by commas."""
    if isinstance(default, str | int | float):
        return str(default)
    return ",".join(map(str, default))


def _dest(flag: str, dest: str | None) -> str:
    return dest or flag[2:].replace("-", "_")


# -- options ------------------------------------------------------------------------------


def count(p: Parser, flag: str, default: int, help: str, *, least: int = 1,
          most: int | None = None, metavar: str = "N", dest: str | None = None,
          aliases: Sequence[str] = ()) -> None:
    """An integer option, at least ``least`` (and with ``most``, at most that)."""
    dest = _dest(flag, dest)
    p.add_argument(flag, *aliases, type=int, default=default, metavar=metavar, dest=dest,
                   help=f"{help} (default: %(default)s)")

    def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
        v = getattr(o, dest)
        if most is not None and not least <= v <= most:
            p.error(f"{flag} must be in {least}..{most}, got {v}")
        if v < least:
            p.error(f"{flag} must be {'0 or more' if least == 0 else f'at least {least}'}, "
                    f"got {v}")

    p.check(check)


def number(p: Parser, flag: str, default: float, help: str, least: float, most: float, *,
           open_low: bool = False, unit: str = "", metavar: str = "X",
           dest: str | None = None) -> None:
    """A number in ``least..most`` (with ``open_low``, above ``least``); ``unit`` follows
    the range in the error (`` µs``)."""
    dest = _dest(flag, dest)
    p.add_argument(flag, type=float, default=default, metavar=metavar, dest=dest,
                   help=f"{help} (default: %(default)s)")
    span = f"({_num(least)}, {_num(most)}]" if open_low else f"{_num(least)}..{_num(most)}"

    def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
        v = getattr(o, dest)
        if not (least < v if open_low else least <= v) or v > most:
            p.error(f"{flag} must be in {span}{unit}, got {v}")

    p.check(check)


def toggle(p: Parser, flag: str, default: bool, help: str) -> None:
    """``--x`` / ``--no-x``."""
    p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                   help=f"{help} (default: {'on' if default else 'off'})")


def choices(p: Parser, flag: str, default: Any, allowed: Iterable[str], what: str,
            help: str = "", *, dest: str | None = None, metavar: str = "X,X",
            none: bool = False, fold: bool = False) -> None:
    """A comma list of names from ``allowed`` (``what`` names them in errors); with
    ``none``, ``none`` runs none of them."""
    parse = functools.partial(choice_list, allowed=tuple(allowed), what=what, none=none,
                              fold=fold)
    p.add_argument(flag, type=parse, default=parse(default), metavar=metavar,
                   dest=_dest(flag, dest), help=f"{help} (default: {_shown(default)})".strip())


def counts(p: Parser, flag: str, default: Any, what: str, help: str, least: int, most: int,
           *, aliases: Sequence[str] = (), dest: str | None = None, metavar: str = "N,N",
           none: bool = False) -> None:
    """A comma list of counts in ``least..most`` (``what`` names them in errors)."""
    parse = functools.partial(int_list, what=what, least=least, most=most, none=none)
    p.add_argument(flag, *aliases, type=parse, default=parse(default), metavar=metavar,
                   dest=_dest(flag, dest), help=f"{help} (default: {_shown(default)})")


def reps(p: Parser, default: int, what: str = "fresh jobs each") -> None:
    """``--reps``: the repetitions, each measuring everything again in fresh processes."""
    count(p, "--reps", default, f"repetitions ({what})", metavar="R")


def warmup(p: Parser, default: int, help: str, *, least: int = 0,
           flag: str = "--warmup") -> None:
    """``--warmup``: untimed runs first."""
    count(p, flag, default, help, least=least, metavar="W")


def sizes(p: Parser, default: Any, what: str, *, flag: str = "--sizes",
          most: int | None = None, unit: str = "", dest: str | None = None) -> None:
    """``--sizes``: a comma list of byte counts (``8,1K,64K``); with ``most``, each at most
    that many bytes (``unit`` says of what: ``a put``)."""
    dest = _dest(flag, dest)
    p.add_argument(flag, type=parse_sizes, default=parse_sizes(default), metavar="S,S",
                   dest=dest, help=f"{what} (default: {_shown(default)})")
    if most is not None:
        def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
            if max(getattr(o, dest)) > most:
                p.error(f"{flag}: at most {size_label(most)} {unit}, got "
                        f"{max(getattr(o, dest))}")

        p.check(check)


def size(p: Parser, flag: str, default: Any, what: str, *, dest: str | None = None) -> None:
    """One byte count (``--bytes 128M``)."""
    p.add_argument(flag, type=one_size, default=one_size(default), metavar="B",
                   dest=_dest(flag, dest), help=f"{what} (default: {_shown(default)})")


def ranks(p: Parser, default: Any, help: str, least: int = 2, most: int = 64, *,
          many: bool = False, threads: bool = False) -> None:
    """``--ranks``: the job's ranks, one count or (``many``) a comma list, each in
    ``least..most``; ``threads``: named ``--threads`` first (UPC threads, a process each)."""
    flags = ("--threads", "--ranks") if threads else ("--ranks",)
    if many:
        what = "thread counts" if threads else "rank counts"
        counts(p, flags[0], default, what, help, least, most, aliases=flags[1:])
    else:
        count(p, flags[0], default, help, least=least, most=most, aliases=flags[1:],
              metavar="T" if threads else "N")


def nodes(p: Parser, default: int, help: str, least: int = 1) -> None:
    """``--nodes``: simulated nodes, at least ``least``, dividing ``--ranks`` (every one of
    them, where ``--ranks`` is a list)."""
    p.add_argument("--nodes", type=int, default=default, metavar="K",
                   help=f"{help}, at least {least}, dividing --ranks (default: %(default)s)")

    def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
        rs = o.ranks if isinstance(o.ranks, list) else [o.ranks]
        if not least <= o.nodes <= min(rs) or any(r % o.nodes for r in rs):
            p.error(f"--nodes must be at least {least} and divide --ranks "
                    f"({','.join(map(str, rs))}), got {o.nodes}")

    p.check(check)


def splits(p: Parser, default: Any, help: str = "rank-threads per process to run, each "
           "dividing the ranks per node, or all") -> None:
    """``--splits``: rank-threads per process (the procs x threads splits), or ``all``."""
    p.add_argument("--splits", type=parse_threads, default=parse_threads(default),
                   metavar="T,T", help=f"{help} (default: {_shown(default)})")


def split_sweep(p: Parser, ranks_: int, nodes_: int, splits_: Any, min_nodes: int) -> None:
    """``--ranks``, ``--nodes`` and ``--splits`` of a suite that sweeps the procs x threads
    splits of its ranks (apps, inject, hybrid): :func:`chosen_splits` after parsing."""
    ranks(p, ranks_, "ranks in all")
    nodes(p, nodes_, "simulated nodes", least=min_nodes)
    splits(p, splits_)


def chosen_splits(p: argparse.ArgumentParser, opts: argparse.Namespace) -> list[Split]:
    """The splits the parsed ``--ranks``, ``--nodes`` and ``--splits`` ask for; a split that
    does not divide the ranks per node ends the run with the parser's error."""
    try:
        return choose(opts.ranks // opts.nodes, opts.splits)
    except ValueError as e:
        p.error(str(e))
        raise  # p.error exits; this only tells type checkers so


def topologies(p: Parser, default: Any, help: str = "node and/or 2nodes", *,
               topology: bool = True) -> None:
    """Where the jobs run, node and/or 2nodes (``opts.topologies``): ``--topology`` by name
    and ``--nodes`` by count (1, 2 or 1,2), or (not ``topology``) ``--nodes`` alone."""
    if topology:
        choices(p, "--topology", default, TOPOLOGIES, "topologies", help, dest="topologies")
        p.add_argument("--nodes", type=nodes_topologies, dest="topologies", metavar="K,K",
                       default=argparse.SUPPRESS,
                       help="1, 2 or 1,2: the topologies node and 2nodes (as --topology)")
    else:
        names = choice_list(default, TOPOLOGIES, "topologies")
        p.add_argument("--nodes", type=nodes_topologies, dest="topologies", default=names,
                       metavar="K,K", help=f"{help} (default: "
                       f"{','.join(TOPOLOGIES[t] for t in names)})")


def sections(p: Parser, node: bool, network: bool, aio: bool, aio_help: str) -> None:
    """``--node``, ``--network``, ``--aio`` (the sections of ``am`` and ``rma``) and
    ``--nodes`` (1: the node section, 2: the network section); one must be left to run."""
    toggle(p, "--node", node, "run the node section")
    toggle(p, "--network", network, "run the network section")
    toggle(p, "--aio", aio, f"run the aio section: {aio_help}")
    p.add_argument("--nodes", type=nodes_topologies, default=None, metavar="K,K",
                   help="1: the node section only, 2: the network section only, 1,2: both "
                        "(as --node/--network; the aio section runs unless --no-aio)")

    def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
        if o.nodes is not None:
            o.node, o.network = "node" in o.nodes, "2nodes" in o.nodes
        if not (o.node or o.network or o.aio):
            p.error("--no-node, --no-network and --no-aio leave nothing to run")

    p.check(check)


def conduits(p: Parser, default: Any, help: str, *, one: bool = False,
             dest: str = "conduit") -> None:
    """``--conduit``: the conduits between the nodes (with ``one``, exactly one)."""
    p.add_argument("--conduit", type=parse_conduits, default=parse_conduits(default),
                   metavar="C" if one else "C,C", dest=dest,
                   help=f"{help} (default: {_shown(default)})")
    if one:
        def check(p: argparse.ArgumentParser, o: argparse.Namespace) -> None:
            if len(getattr(o, dest)) != 1:
                p.error(f"--conduit takes one conduit, got {','.join(getattr(o, dest))}")

        p.check(check)


def latency(p: Parser, default: Any, help: str = "AMNET_NET_LATENCY_US between the nodes",
            *, flag: str = "--latency", many: bool = False, dest: str | None = None) -> None:
    """The emulated network latency in µs (``AMNET_NET_LATENCY_US``), 0..1000000: one value,
    or (``many``) a comma list, a job each."""
    if many:
        parse = functools.partial(float_list, what="latencies", least=0, most=1e6,
                                  unit=" µs")
        p.add_argument(flag, type=parse, default=parse(default), metavar="US,US",
                       dest=_dest(flag, dest), help=f"{help} (default: {_shown(default)})")
    else:
        number(p, flag, default, help, 0, 1e6, unit=" µs", metavar="US", dest=dest)


def min_time(p: Parser, default: float, help: str) -> None:
    """``--min-time``: seconds a measurement lasts at least, in (0, 10]."""
    number(p, "--min-time", default, help, 0, 10, open_low=True, unit=" seconds",
           metavar="S")


def pin(p: Parser, default: str) -> None:
    """``--pin``: where the two sides' threads run."""
    p.add_argument("--pin", choices=PINS, default=default,
                   help="none: where the scheduler puts them; same: every thread of both "
                        "sides (Python and libzmq) on one core; split: side 0 (amnet rank 0, "
                        "the raw client) on one core, side 1 on another (default: "
                        "%(default)s)")


def wait_modes(p: Parser, default: Any) -> None:
    """``--wait-mode``: amnet's wait modes, each its own row."""
    p.add_argument("--wait-mode", type=parse_modes, default=parse_modes(default),
                   metavar="M,M", dest="wait_modes",
                   help="amnet wait modes to run, each its own row (both sections): auto, "
                        f"spin, block (default: {_shown(default)})")


def mpi_paths(p: Parser) -> None:
    """``--mpi-paths``: MPICH's paths under ``--conduit mpi``, each its own table."""
    choices(p, "--mpi-paths", MPI_PATHS, MPI_PATHS, "MPI paths", "with --conduit mpi: "
            "MPICH's paths, each its own table: nolocal (MPIR_CVAR_NOLOCAL=1, the default "
            "network module), tcp (forced onto TCP by libfabric)", metavar="P,P")


# -- parsing ------------------------------------------------------------------------------


def _items(v: Any) -> tuple[str, ...]:
    return tuple(sorted(str(t).lower() for t in comma_items(v)))


def parse(p: Parser, args: Any, quick: dict[str, Any], what: str,
          fixed: dict[str, tuple[str | None, str]] | None = None,
          plots: Sequence[str] = ()) -> argparse.Namespace:
    """Add ``--quick`` to the suite's parser ``p``, parse ``args`` and run the options'
    checks: with ``--quick``, the options whose destinations ``quick`` names take its
    (already converted) values unless they are given explicitly. ``what`` says in
    ``--help`` what the quick run does.

    Every :data:`COMMON` option the suite does not define is added as one its experiment
    fixes: ``fixed[flag] = (value, why)`` (value None: the suite has no such dimension). The
    option is accepted at that value and refused otherwise, with ``why``, so one command
    line can go to every suite and learn which do not vary what.

    ``--help`` also lists amnet-bench's own ``--out`` (and, where the suite draws ``plots``,
    the PNG files, ``--no-plots``): the command line takes them before the suite runs; a
    suite called from Python with them refuses them (it returns its result, writing
    nothing)."""
    p.add_argument("--quick", action="store_true",
                   help=f"a short run (under 2 minutes on 2 cores): {what}; options given "
                        "explicitly still apply")
    own = p.add_argument_group("amnet-bench's options (given after SUITE, or before it)")
    own.add_argument("--out", metavar="DIR", dest="_out", default=None,
                     help="write DIR/results.json (the machine, the config, every sample) "
                          "and DIR/results.md" +
                          (f", and PNG plots ({', '.join(plots)}; they need matplotlib, "
                           "which is checked before anything is measured)" if plots else
                           "; this suite draws no plots"))
    if plots:
        own.add_argument("--no-plots", dest="_no_plots", action="store_true",
                         help="with --out: write no PNG plots (matplotlib not needed)")
    added = {}
    for flag, metavar in COMMON.items():
        if flag in p._option_string_actions:
            continue
        value, why = (fixed or {}).get(flag, (None, "this suite does not vary it"))
        dest = "_fixed_" + flag[2:]
        p.add_argument(flag, dest=dest, default=None, metavar=metavar,
                       help=f"fixed{f' at {value}' if value else ''}: {why}")
        added[flag] = (dest, value, why)
    argv = list(args or [])
    if "--quick" in argv:
        p.set_defaults(**quick)
    opts = p.parse_args(argv)
    if opts._out is not None or getattr(opts, "_no_plots", False):
        p.error("--out and --no-plots are the amnet-bench command line's: a suite called "
                "from Python returns its result and writes no files")
    del opts._out
    if plots:
        del opts._no_plots
    for flag, (dest, value, why) in added.items():
        got = getattr(opts, dest)
        delattr(opts, dest)
        if got is not None and (value is None or _items(got) != _items(value)):
            p.error(f"{flag} {got}: {why}" + (f"; this suite runs {flag} {value} only"
                                              if value else ""))
    for check in p.checks:
        check(p, opts)
    return opts
