"""``amnet-run``: the job launcher's command line (typer)."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

from .._errors import ConfigError
from .._meta import package_version


class SpawnerName(StrEnum):
    local = "local"
    ssh = "ssh"
    srun = "srun"
    mpirun = "mpirun"
    custom = "custom"


app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})

_EPILOG = """Examples:

\b
  amnet-run -n 4 app.py
      4 ranks: 4 processes on 1 node
  amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 app.py
      4 ranks: 2 processes of 2 rank-threads on 1 node
  amnet-run -n 8 --nodes 2 --label app.py
      8 ranks on 2 simulated nodes of this host, output lines prefixed [rank]

Ranks are numbered node-major, then process, then thread. The exit status is 0
when every rank exited 0; otherwise that of the first failure, explained in one
line on stderr (124 after --timeout, 130 after Ctrl-C)."""


def _fail(msg: str, code: int = 2) -> None:
    print(f"amnet-run: error: {msg}", file=sys.stderr)
    raise typer.Exit(code)


#: the amnet-run options a script's arguments are not taken for (see _after_script)
_SCRIPT_WORDS = frozenset({"-h", "--help", "--version"})
_AFTER_KEY = "amnet_run.after_script"


def _option_names(cmd) -> dict[str, bool]:
    """amnet-run's option names -> whether the option takes a value."""
    names: dict[str, bool] = {"-h": False, "--help": False}
    for p in cmd.params:
        if getattr(p, "param_type_name", None) != "option":
            continue
        takes = not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for name in (*p.opts, *p.secondary_opts):
            names[name] = takes
    return names


def _mpi_habits(cmd, args: list[str]) -> tuple[list[str], list[str]]:
    """Read the command line as mpiexec users write it, before click parses it.

    Returns the arguments with mpiexec's ``-np N`` (or ``-np=N``) before the script made
    ``--np N`` (click would read ``-np`` as ``-n p``), and the arguments after the script
    that look like amnet-run options (they stay the script's: see :func:`amnet_run`); none
    when ``--`` ended amnet-run's options.
    """
    names = _option_names(cmd)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-np" or a.startswith("-np="):
            a = args[i] = "--np" + a[3:]
        if a == "--":
            return args, []
        if not a.startswith("-") or a == "-":
            break  # the script
        if not a.startswith("--") and "--" + a[1:].split("=", 1)[0] in names:
            # click would read -nodes 2 as -n odes: say what was meant
            _fail(f"unknown option {a!r}; did you mean -{a.split('=', 1)[0]}? "
                  "(see amnet-run --help)")
        i += 2 if names.get(a) else 1  # --opt VALUE; a flag, --opt=VALUE, -n4, unknown
    after = [a for a in args[i + 1:]
             if a.split("=", 1)[0] in (*names, "-np") and a.split("=", 1)[0]
             not in _SCRIPT_WORDS]
    return args, after


def _did_you_mean(word: str, cmd) -> str:
    """`` (did you mean --x?)`` for an unknown option close to one of amnet-run's."""
    import difflib

    longs = [n for n in _option_names(cmd) if n.startswith("--")]
    close = difflib.get_close_matches("--" + word.split("=", 1)[0].lstrip("-"), longs, n=1,
                                      cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


class _Command(TyperCommand):
    """amnet-run's command: reads mpiexec habits (:func:`_mpi_habits`) before click parses."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args, ctx.meta[_AFTER_KEY] = _mpi_habits(self, list(args))
        return super().parse_args(ctx, args)


def _print_version(value: bool) -> None:
    if value:
        print(f"amnet-run {package_version()}")
        raise typer.Exit(0)


def _check_compiles(script: str) -> None:
    """Compile the app script here, once, before anything starts.

    Every rank compiles the script again when it runs it (:mod:`amnet.core._procmain`, with
    the same ``compile`` call), so a script that does not compile would fail every rank with
    the same ``SyntaxError``, printed once per rank. Here it is printed once, as a rank would
    print it, followed by a one-line diagnosis; the exit status is 1, that of a rank's
    uncaught exception. Warnings that compiling raises (``SyntaxWarning``, ...) are left to
    the ranks, which show them as plain Python would.
    """
    import traceback
    import warnings

    path = os.path.abspath(script)  # the name the ranks compile it under (the job spec's)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        _fail(f"cannot read app script {script!r}: {e.strerror or e}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes (Python 3.11)
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        print(f"amnet-run: app script {script!r} does not compile: {type(e).__name__}: {e}; "
              f"no rank was started", file=sys.stderr)
        raise typer.Exit(1)


@app.command(cls=_Command,
             context_settings={"allow_interspersed_args": False,
                               "ignore_unknown_options": True,
                               "help_option_names": ["-h", "--help"]},
             epilog=_EPILOG)
def amnet_run(
    ctx: typer.Context,
    script: Annotated[str, typer.Argument(metavar="SCRIPT",
                                          help="Python script run once per rank.")],
    args: Annotated[list[str] | None, typer.Argument(
        metavar="[ARGS]...", help="Arguments passed to the script (sys.argv[1:]).")] = None,
    n: Annotated[int | None, typer.Option(
        "-n", "--np", metavar="N",
        help="Number of ranks (UPC threads); -np N works too. Required.")] = None,
    procs_per_node: Annotated[int | None, typer.Option(
        "--procs-per-node", metavar="P",
        help="Processes per node [default: all on one node].")] = None,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", metavar="K", help="Number of nodes, instead of --procs-per-node.")] = None,
    threads_per_proc: Annotated[int, typer.Option(
        "--threads-per-proc", metavar="T",
        help="Rank-threads per process; N must be a multiple.")] = 1,
    segment_size: Annotated[str | None, typer.Option(
        "--segment-size", metavar="SIZE",
        help="Bytes per rank segment, e.g. 64M [env AMNET_SEGMENT_SIZE; default 64M].")] = None,
    no_pshm: Annotated[bool, typer.Option(
        "--no-pshm",
        help="Carry node-local traffic through the conduit's loopback instead of shared "
             "memory [env AMNET_PSHM=0].")] = False,
    conduit: Annotated[str | None, typer.Option(
        "--conduit", metavar="NAME",
        help="The conduit between nodes: zmq (CurveZMQ across hosts), tcp (plain sockets, "
             "faster with few cores, unencrypted) or mpi (the site's MPI and its network, "
             "processes started by the MPI's launcher) [env AMNET_CONDUIT; default zmq].")] = None,
    bind_to: Annotated[str | None, typer.Option(
        "--bind-to", metavar="WHERE",
        help="core: bind each process to cores of its host, one per rank-thread, "
             "round-robin; none: let the scheduler place it [env AMNET_BIND_TO; default none]."
    )] = None,
    label: Annotated[bool, typer.Option(
        "--label", help="Prefix each output line with [rank].")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S", help="Stop the job after S seconds (exit status 124).")] = None,
    spawner: Annotated[SpawnerName, typer.Option(
        "--spawner", help="How agents are started, one per node.",
        case_sensitive=False)] = SpawnerName.local,
    hosts: Annotated[str | None, typer.Option(
        "--hosts", metavar="H1,H2",
        help="Hosts for ssh/custom/srun/mpirun; nodes dealt round-robin.")] = None,
    hostfile: Annotated[str | None, typer.Option(
        "--hostfile", metavar="FILE",
        help="File of 'HOST [slots=N]' lines, instead of --hosts.")] = None,
    spawn_cmd: Annotated[str | None, typer.Option(
        "--spawn-cmd", metavar="TEMPLATE",
        help="For --spawner custom: %H host, %N node, %C agent command; e.g. 'ssh %H %C'.")]
        = None,
    bootstrap_addr: Annotated[str | None, typer.Option(
        "--bootstrap-addr", metavar="IP[:PORT]",
        help="Address agents connect back to [default: the interface facing the hosts].")]
        = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure",
        help="No CurveZMQ for jobs across hosts: traffic and the job secret unencrypted "
             "(trusted networks only; warns).")] = False,
    mpiexec: Annotated[str | None, typer.Option(
        "--mpiexec", metavar="CMD",
        help="With --conduit mpi: the MPI's launcher that starts the processes, e.g. "
             "'srun --mpi=pmix' [default: the mpiexec beside this Python, else on PATH].")]
        = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print amnet-run's version and exit.")] = False,
) -> None:
    """Run SCRIPT as an SPMD job of N ranks: threads in processes in (simulated) nodes."""
    from .._config import Config, check_for_topology
    from .._topology import Topology

    if script.startswith("-"):
        _fail(f"unknown option {script!r}{_did_you_mean(script, ctx.command)} "
              "(see amnet-run --help)")
    after = ctx.meta.get(_AFTER_KEY) or []
    if n is None:
        _fail("give the number of ranks with -n N (see amnet-run --help)" + (
            f"; {', '.join(after)} came after the script {script!r}: what follows the "
            "script is its own arguments, so amnet-run's options go before it"
            if after else ""))
    if after:  # they stay the script's (sys.argv[1:]), as documented
        print(f"amnet-run: note: {', '.join(after)} after the script {script!r} "
              f"{'goes' if len(after) == 1 else 'go'} to the script, not to amnet-run "
              "(its options go before the script; '--' before the script ends them and "
              "silences this note)", file=sys.stderr)
    try:
        topo = Topology.make(n, procs_per_node, threads_per_proc, nodes)
        config = Config.resolve(
            overrides={"segment_size": segment_size, "pshm": False if no_pshm else None,
                       "conduit": conduit, "bind_to": bind_to},
            from_flags=True)
        check_for_topology(config, topo.threads_per_proc)
    except ConfigError as e:
        _fail(str(e))
    path = Path(script)
    if not path.is_file():
        _fail(f"app script {script!r} does not exist" if not path.exists()
              else f"app script {script!r} is not a file")
    if not os.access(path, os.R_OK):
        _fail(f"app script {script!r} is not readable")
    if timeout is not None and not timeout > 0:
        _fail(f"--timeout must be a positive number of seconds, got {timeout:g}")
    _check_compiles(script)
    if config.conduit == "mpi":
        _run_on_mpi(topo, config, script, args or [], label, timeout, spawner.value, hosts,
                    hostfile, spawn_cmd, bootstrap_addr, insecure, mpiexec)
    elif mpiexec is not None:
        _fail(f"--mpiexec starts the processes of a job on the mpi conduit; this job's conduit "
              f"is {config.conduit} (add --conduit mpi)")
    from ._spec import build_spec, curve_for
    from .agent import set_child_subreaper, stop_children
    from .spawners import LocalSpawner, make_spawner

    try:
        sp = make_spawner(spawner.value, topo, hosts=hosts, hostfile=hostfile,
                          spawn_cmd=spawn_cmd)
        curve = curve_for(sp, bootstrap_addr, insecure=insecure, conduit=config.conduit,
                          warn=lambda msg: print(f"amnet-run: {msg}", file=sys.stderr))
        spec = build_spec(topo, config, label=label, script=script, argv=args or [],
                          curve=curve)
        # Orphans of this job (a killed agent's ranks' children) come to us, not to init.
        set_child_subreaper()
        if isinstance(sp, LocalSpawner) and not bootstrap_addr:
            # No thread and no zmq context exist yet: fork the agents now, so they start
            # without an interpreter start-up while this process sets up its event loop.
            sp.fork = True
            sp.prefork(spec)
        from .job import run_job

        out = run_job(spec, sp, timeout=timeout, handle_signals=True,
                      bootstrap_addr=bootstrap_addr)
    except ConfigError as e:
        _fail(str(e))
    if out.diagnosis:
        print(f"amnet-run: {out.diagnosis}", file=sys.stderr)
    stop_children()  # what the job left behind and we adopted
    # The job is over and every socket closed: skip the interpreter's slow finalization.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(out.code)


def _run_on_mpi(topo, config, script: str, args: list[str], label: bool,
                timeout: float | None, spawner: str, hosts: str | None, hostfile: str | None,
                spawn_cmd: str | None, bootstrap_addr: str | None, insecure: bool,
                mpiexec: str | None) -> None:
    """``--conduit mpi``: the MPI's launcher starts the processes (never returns)."""
    from ._spec import build_spec
    from .mpilaunch import check_mpi_options, run_mpi_job

    try:
        check_mpi_options(spawner, spawn_cmd, bootstrap_addr, insecure)
        spec = build_spec(topo, config, label=label, script=script, argv=args)
        out = run_mpi_job(spec, launcher=mpiexec, timeout=timeout, hosts=hosts,
                          hostfile=hostfile, handle_signals=True)
    except ConfigError as e:
        _fail(str(e))
    if out.diagnosis:
        print(f"amnet-run: {out.diagnosis}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(out.code)


def main() -> None:
    """Console entry point of ``amnet-run``."""
    app(prog_name="amnet-run")


if __name__ == "__main__":
    main()
