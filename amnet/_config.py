"""The configuration object (docs/design.md §12).

A closed set of typed options. Each option has an ``AMNET_<NAME>`` environment variable;
``amnet-run`` flags override the environment, which overrides the default. An unknown
``AMNET_*`` variable or a bad value is a :class:`ConfigError` at start that names the option
and what it accepts. ``amnet-run`` resolves the configuration once and hands it to every rank.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ._errors import ConfigError

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: the largest segment: 256 TiB, more than a process maps with 48-bit virtual addresses
#: (x86-64, arm64); with 1024 rank-threads a process's shared object stays below 2**63
#: bytes, the C integers its size and offsets go through
MAX_SEGMENT = 1 << 48


def parse_size(text: str | int) -> int:
    """Parse ``"64M"``, ``"64MiB"``, ``"1g"`` or ``"4096"`` into bytes (binary units).

    Raises:
        ValueError: the text is not a size.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 4096, 64K, 64M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _parse_choice(*choices: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        v = str(v).strip().lower()
        if v not in choices:
            raise ValueError(v)
        return v
    return parse


def _parse_check(v: Any) -> str:
    """coll_check: "strict", or a number of seconds from 0.001 to 3600 (kept as text)."""
    t = str(v).strip().lower()
    if t == "strict":
        return t
    x = float(t)
    if not 0.001 <= x <= 3600:
        raise ValueError(t)
    return repr(x)


def _parse_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    t = str(v).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(v)


def _parse_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(v)
    return float(v)


def _known_conduit(name: str) -> bool:
    from .conduits import CONDUITS, load_plugins  # the registry lives with the interface

    if name not in CONDUITS:
        load_plugins()
    return name in CONDUITS


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    accepts: str
    doc: str
    check: Callable[[Any], bool] = lambda v: True

    @property
    def env(self) -> str:
        return "AMNET_" + self.name.upper()


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in [
        Option(
            "segment_size",
            parse_size,
            64 << 20,
            "a size in bytes from 4096 to 256T (2**48) (e.g. 4096, 64M, 1G)",
            "Bytes in each rank's segment (`--segment-size`).",
            lambda v: 4096 <= v <= MAX_SEGMENT,
        ),
        Option(
            "max_medium",
            parse_size,
            64 << 10,
            "a size in bytes from 512 to 16M (e.g. 65536, 64K)",
            "Largest Medium AM payload (`ep.max_medium`).",
            lambda v: 512 <= v <= 16 << 20,
        ),
        Option(
            "wait_mode",
            _parse_choice("spin", "block", "auto"),
            "auto",
            "spin, block or auto",
            "How a waiting rank waits: spin polling (yielding the core after each empty "
            "poll), or block on the conduit socket; auto blocks when the ranks on a host "
            "outnumber its cores, else spins up to 100 us before blocking (bound with "
            "bind_to=core: spins).",
        ),
        Option(
            "bind_to",
            _parse_choice("none", "core"),
            "none",
            "none or core",
            "Where a rank process runs (`--bind-to`): anywhere (none), or bound to cores of "
            "its host, one per rank-thread, round-robin over the processes of the host in "
            "rank order (core), as `mpirun --bind-to core` does; its threads (the conduit's "
            "I/O thread too) stay with it.",
        ),
        Option(
            "progress_thread",
            _parse_bool,
            False,
            "0 or 1",
            "Run a progress thread per process so handlers run while ranks compute.",
        ),
        Option(
            "net_latency_us",
            _parse_float,
            0.0,
            "a number of microseconds from 0 to 1000000",
            "Delay every inter-node message by this much at the receiver (network emulation).",
            lambda v: 0.0 <= v <= 1e6,
        ),
        Option(
            "pshm",
            _parse_bool,
            True,
            "0 or 1",
            "Carry AMs, puts and gets between the processes of a node over shared memory "
            "(`--no-pshm` or 0: through the conduit's loopback).",
        ),
        Option(
            "pshm_network_depth",
            int,
            8,
            "an int from 2 to 1024",
            "Entries per shared-memory AM queue (one request and one reply queue per pair of "
            "processes of a node); each entry has a payload slot of max_medium bytes.",
            lambda v: 2 <= v <= 1024,
        ),
        Option(
            "pshm_backing",
            _parse_choice("posix", "sysv", "file"),
            "posix",
            "posix, sysv or file",
            "What backs the shared objects: POSIX shm (/dev/shm), SysV shm, or a file in the "
            "temporary directory.",
        ),
        Option(
            "thread_safe",
            _parse_choice("auto", "1", "0"),
            "auto",
            "auto, 1 or 0",
            "Locks around shared AM state: auto takes them only when a process runs more "
            "than one rank-thread; 1 always (the paper's 'thread-safety' rows).",
        ),
        Option(
            "vis_pipeline",
            int,
            4,
            "an int from 1 to 64",
            "Chunks of one VIS transfer in flight at once between nodes (each at most "
            "max_medium bytes).",
            lambda v: 1 <= v <= 64,
        ),
        Option(
            "auto_nb",
            _parse_bool,
            False,
            "0 or 1",
            "upc_rt: route relaxed memget/memput through the automatic nonblocking scheduler "
            "(amnet.nbcomm) in `upc.init()`.",
        ),
        Option(
            "upc_cache",
            _parse_bool,
            False,
            "0 or 1",
            "upc_rt: turn on the remote-reference cache in `upc.init()` (MuPC's cache: "
            "direct-mapped, write-back, a segment of sets per remote thread).",
        ),
        Option(
            "upc_cache_blocks",
            int,
            256,
            "an int from 1 to 65536",
            "upc_rt: sets (cache lines) in the cache's segment for each remote thread.",
            lambda v: 1 <= v <= 65536,
        ),
        Option(
            "upc_cache_block_size",
            parse_size,
            1024,
            "a power of two from 8 to 1M bytes",
            "upc_rt: bytes in one cache line (what one miss fetches).",
            lambda v: 8 <= v <= 1 << 20 and v & (v - 1) == 0,
        ),
        Option(
            "upc_poll_every",
            int,
            64,
            "an int from 0 to 1000000",
            "upc_rt: in a job that spans nodes, poll once every this many shared element "
            "accesses, so a thread computing on shared data still serves the gets, puts and "
            "cache misses of threads on other nodes (0: poll only while waiting).",
            lambda v: 0 <= v <= 1_000_000,
        ),
        Option(
            "upc_runtime",
            _parse_choice("amnet", "shmem"),
            "amnet",
            "amnet or shmem",
            "upc_rt: what `upc.init()` runs on: amnet directly (`amnet`), or OpenSHMEM, every "
            "remote operation a public call of shmem_rt (`shmem`; docs/upc.md).",
        ),
        Option(
            "coll_algorithm",
            str,
            "",
            "a comma list of COLLECTIVE=ALGORITHM pairs and algorithm names, e.g. "
            "broadcast=tree,ring (empty: each collective's default)",
            "amnet.coll: the algorithm each collective uses when a call names none "
            "(docs/collectives.md); a bare name applies to every collective that has it.",
            lambda v: re.fullmatch(r"\s*([a-z_]+(\s*=\s*[a-z_]+)?\s*(,\s*|$))*", v) is not None,
        ),
        Option(
            "coll_check",
            _parse_check,
            "0.25",
            "strict, or seconds from 0.001 to 3600",
            "amnet.coll: when the members compare their calls (docs/collectives.md): strict "
            "at every call; else only on doubt, e.g. a call with no progress for this long.",
        ),
        Option(
            "conduit",
            str,
            "zmq",
            "the name of a registered conduit: zmq, tcp, mpi, or one an installed package "
            "registers",
            "The conduit that carries AMs between processes.",
            _known_conduit,
        ),
    ]
}

#: Variables amnet sets for its own processes; they are not user options.
INTERNAL_ENV = frozenset({"AMNET_JOB_SPEC"})


class Config(Mapping[str, Any]):
    """A resolved, read-only configuration: option name -> typed value."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = MappingProxyType(dict(values))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({dict(self._values)!r})"

    @classmethod
    def resolve(
        cls, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None,
        *, from_flags: bool = False,
    ) -> Config:
        """Resolve options: ``overrides`` (flags) > ``env`` > defaults.

        ``from_flags`` says the overrides came from ``amnet-run`` flags (named so in errors);
        otherwise they are keyword arguments (``amnet.run(segment_size=...)``).

        Raises:
            ConfigError: an unknown ``AMNET_*`` variable, an unknown override, or a bad value.
        """
        env = os.environ if env is None else env
        known = {o.env: o for o in OPTIONS.values()}
        for var in env:
            if var.startswith("AMNET_") and var not in known and var not in INTERNAL_ENV:
                raise ConfigError(
                    f"unknown environment variable {var}; amnet options are: "
                    + ", ".join(sorted(known))
                )
        values: dict[str, Any] = {}
        for opt in OPTIONS.values():
            source, raw = "default", opt.default
            if opt.env in env:
                source, raw = opt.env, env[opt.env]
            if overrides and overrides.get(opt.name) is not None:
                source = "--" + opt.name.replace("_", "-") if from_flags else opt.name + "="
                raw = overrides[opt.name]
            values[opt.name] = _convert(opt, raw, source)
        for name in overrides or ():
            if name not in OPTIONS:
                raise ConfigError(
                    f"unknown amnet option {name!r}; options are: {', '.join(OPTIONS)}")
        return cls(values)

    def to_wire(self) -> dict[str, Any]:
        return dict(self._values)


def _convert(opt: Option, raw: Any, source: str) -> Any:
    try:
        value = opt.parse(raw)
        ok = opt.check(value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(
            f"bad value {raw!r} for {opt.name} (from {source}): expected {opt.accepts}")
    return value


def check_for_topology(config: Config, threads_per_proc: int) -> None:
    """Refuse option values that cannot work with the job's shape.

    Raises:
        ConfigError: ``thread_safe`` is 0 while processes run several rank-threads (their
            sends would share queues without locks).
    """
    if config.thread_safe == "0" and threads_per_proc > 1:
        raise ConfigError(
            f"thread_safe=0 (AMNET_THREAD_SAFE) with {threads_per_proc} rank-threads per "
            "process: threads would share AM queues without locks; use auto or 1, or one "
            "rank-thread per process")
