"""``amnet-run``: the job launcher's command line (typer)."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path

import typer

from .._errors import ConfigError


class SpawnerName(str, Enum):
    local = "local"
    ssh = "ssh"
    srun = "srun"
    mpirun = "mpirun"
    custom = "custom"


app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})

_EPILOG = """Examples:

  amnet-run -n 4 app.py                      4 ranks, 4 processes, 1 node

  amnet-run -n 4 --procs-per-node 2 --threads-per-proc 2 app.py
                                             2 processes of 2 rank-threads on 1 node

  amnet-run -n 8 --nodes 2 --label app.py    2 simulated nodes on this host, output
                                             lines prefixed with [rank]

Ranks are numbered node-major, then process, then thread. The exit status is 0 when every
rank exited 0; otherwise that of the first failure, explained in one line."""


def _fail(msg: str, code: int = 2) -> None:
    print(f"amnet-run: error: {msg}", file=sys.stderr)
    raise typer.Exit(code)


@app.command(context_settings={"allow_interspersed_args": False,
                               "ignore_unknown_options": True},
             epilog=_EPILOG)
def amnet_run(
    script: str = typer.Argument(..., metavar="APP.py",
                                 help="Python script run once per rank."),
    args: list[str] = typer.Argument(None, metavar="[ARGS]...",
                                     help="Arguments passed to the script (sys.argv[1:])."),
    n: int = typer.Option(..., "-n", "--np", metavar="N", help="Number of ranks (UPC threads)."),
    procs_per_node: int = typer.Option(None, "--procs-per-node", metavar="P",
                                       help="Processes per node [default: all on one node]."),
    nodes: int = typer.Option(None, "--nodes", metavar="K",
                              help="Number of nodes, instead of --procs-per-node."),
    threads_per_proc: int = typer.Option(1, "--threads-per-proc", metavar="T",
                                         help="Rank-threads per process; N must be a multiple."),
    segment_size: str = typer.Option(None, "--segment-size", metavar="SIZE",
                                     help="Bytes per rank segment, e.g. 64M [env "
                                          "AMNET_SEGMENT_SIZE; default 64M]."),
    label: bool = typer.Option(False, "--label", help="Prefix each output line with [rank]."),
    timeout: float = typer.Option(None, "--timeout", metavar="S",
                                  help="Stop the job after S seconds (exit status 124)."),
    spawner: SpawnerName = typer.Option(SpawnerName.local, "--spawner",
                                        help="How agents are started, one per node.",
                                        case_sensitive=False),
    hosts: str = typer.Option(None, "--hosts", metavar="H1,H2",
                              help="Hosts for ssh/custom/srun/mpirun; nodes dealt round-robin."),
    hostfile: str = typer.Option(None, "--hostfile", metavar="FILE",
                                 help="File of 'HOST [slots=N]' lines, instead of --hosts."),
    spawn_cmd: str = typer.Option(None, "--spawn-cmd", metavar="TEMPLATE",
                                  help="For --spawner custom: %H host, %N node, %C agent "
                                       "command; e.g. 'ssh %H %C'."),
    bootstrap_addr: str = typer.Option(None, "--bootstrap-addr", metavar="IP[:PORT]",
                                       help="Address agents connect back to [default: the "
                                            "interface facing the hosts]."),
) -> None:
    """Run APP.py as an SPMD job of N ranks: threads in processes in (simulated) nodes."""
    from .._config import Config
    from .._topology import Topology

    if script.startswith("-"):
        _fail(f"unknown option {script!r} (see amnet-run --help)")
    try:
        topo = Topology.make(n, procs_per_node, threads_per_proc, nodes)
        config = Config.resolve(overrides={"segment_size": segment_size})
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
    from .job import build_spec, run_job
    from .spawners import make_spawner

    try:
        sp = make_spawner(spawner.value, topo, hosts=hosts, hostfile=hostfile,
                          spawn_cmd=spawn_cmd)
        spec = build_spec(topo, config, label=label, script=script, argv=args or [])
        out = run_job(spec, sp, timeout=timeout, handle_signals=True,
                      bootstrap_addr=bootstrap_addr)
    except ConfigError as e:
        _fail(str(e))
    if out.diagnosis:
        print(f"amnet-run: {out.diagnosis}", file=sys.stderr)
    raise typer.Exit(out.code)


def main() -> None:
    """Console entry point of ``amnet-run``."""
    app(prog_name="amnet-run")


if __name__ == "__main__":
    main()
