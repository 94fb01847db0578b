"""``python -m amnet [options] app.py [args]``: one process of an amnet job that an MPI
launcher started (``mpiexec -n 8 python -m amnet app.py``, ``srun python -m amnet app.py``).

Every process of ``MPI_COMM_WORLD`` is one amnet process (world rank = process number) and
runs its rank-threads as an agent's rank process would (:func:`amnet.core._procmain.run_process`);
the job's bootstrap is MPI's (:mod:`amnet.core._mpiboot`), its conduit ``mpi``, node-local
traffic PSHM. The topology:

- ``amnet-run --conduit mpi`` and ``amnet.run(..., conduit="mpi")`` hand every process the job
  spec in ``AMNET_JOB_SPEC`` (the topology they were asked for; the world must have that many
  processes);
- otherwise it comes from MPI: nodes are the groups of ``MPI_Comm_split_type(SHARED)`` (each
  host's processes contiguous in rank order, the same number on every host), or ``--nodes K``
  / ``--procs-per-node P`` simulated on the hosts (each node's processes on one host).

A bad option or shape is one clear line on standard error (from world rank 0) and exit status
2 in every process, before any rank starts.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from typing import Any

from .. import _protocol as proto
from .._errors import ConfigError, TopologyError

PROG = "python -m amnet"


class _Usage(Exception):
    """A bad command line or job shape: one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Run SCRIPT as one process of an amnet job started by an MPI launcher "
                    "(mpiexec, srun): every MPI process is an amnet process; the conduit is "
                    "mpi, node-local traffic shared memory.",
        epilog="Example: mpiexec -n 8 python -m amnet --threads-per-proc 2 app.py")
    ap.add_argument("--threads-per-proc", "-T", type=int, default=1, metavar="T",
                    help="rank-threads per process (ranks = processes x T)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--nodes", type=int, metavar="K",
                   help="simulate K nodes (default: one per host, from MPI)")
    g.add_argument("--procs-per-node", type=int, metavar="P",
                   help="simulate nodes of P processes (default: one node per host)")
    ap.add_argument("--label", action="store_true", help="prefix output lines with [rank]")
    ap.add_argument("--segment-size", metavar="SIZE", help="bytes per rank segment (64M)")
    ap.add_argument("--no-pshm", action="store_true",
                    help="carry node-local traffic through the conduit")
    ap.add_argument("--bind-to", metavar="WHERE", help="core or none")
    ap.add_argument("script", metavar="SCRIPT")
    ap.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")
    return ap


def _spec_from_mpi(args: argparse.Namespace, MPI: Any, world: Any,
                   hosts: list[str]) -> dict[str, Any]:
    """The job spec of a job an MPI launcher started on its own (the same in every process:
    computed from the same inputs, the token broadcast)."""
    from .._config import Config, check_for_topology
    from .._topology import Topology
    from ._spec import build_spec

    size, t = world.Get_size(), args.threads_per_proc
    if t < 1:
        raise _Usage(f"--threads-per-proc must be at least 1, got {t}")
    if not os.path.isfile(args.script):
        raise _Usage(f"app script {args.script!r} does not exist")
    try:
        if args.nodes is None and args.procs_per_node is None:
            local = world.Split_type(MPI.COMM_TYPE_SHARED)
            leaders = world.allgather(world.Get_rank() - local.Get_rank())
            local.Free()
            per = [leaders.count(x) for x in sorted(set(leaders))]
            contiguous = all(leaders[i] == i - i % per[0] for i in range(size))
            if len(set(per)) != 1 or not contiguous:
                raise _Usage(
                    f"the MPI placed {'/'.join(map(str, per))} processes on its hosts "
                    "(by rank: " + ",".join(map(str, leaders)) + "); amnet needs every host's "
                    "processes contiguous in rank order and as many on every host "
                    "(mpiexec -ppn P, srun --distribution=block), or --nodes K")
            topo = Topology.make(size * t, per[0], t)
        else:
            topo = Topology.make(size * t, args.procs_per_node, t, args.nodes)
        config = Config.resolve(
            overrides={"segment_size": args.segment_size, "conduit": "mpi",
                       "pshm": False if args.no_pshm else None, "bind_to": args.bind_to},
            from_flags=True)
        check_for_topology(config, t)
    except (ConfigError, TopologyError) as e:
        raise _Usage(str(e)) from None
    spec = build_spec(topo, config, label=args.label, script=args.script, argv=args.args)
    spec["token"] = world.bcast(secrets.token_hex(16) if world.Get_rank() == 0 else None)
    return spec


def _check_placement(topo: Any, hosts: list[str]) -> None:
    for node in range(topo.nodes):
        on = {hosts[p] for p in topo.procs_of_node(node)}
        if len(on) > 1:
            raise _Usage(f"node {node} has processes on hosts {', '.join(sorted(on))}: a node's "
                         "processes share memory, so they must run on one host (give the MPI "
                         f"launcher {topo.procs_per_node} processes per host, in rank order)")


_KEEP_SHM = ("amnet-", "vader_segment.")  # amnet's own; Open MPI's (see below)


def _unlink_mapped_shm() -> None:
    """Remove the names of the /dev/shm objects the MPI mapped in ``MPI_Init`` (MPICH's
    ``mpich_shm_*``): the processes of the host have mapped them, and a job killed before
    ``MPI_Finalize`` would leave them behind. The mappings stay; MPI never opens them again
    by name. Called once every process is past ``MPI_Init``, before amnet maps anything.

    Open MPI's ``vader_segment.*`` stay: its ``MPI_Finalize`` unlinks them itself (and
    prints a warning per segment when one is gone), and it registers them for removal with
    its launcher (``mpirun``, or the PMIx server of ``srun --mpi=pmix``), which removes them
    when a process dies."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split(None, 5)  # address perms offset dev inode [path]
        path = parts[5].strip() if len(parts) == 6 else ""
        if path.startswith("/dev/shm/") and "/" not in path[9:] and \
                not path.endswith("(deleted)") and not path[9:].startswith(_KEEP_SHM):
            try:
                os.unlink(path)
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    """The process main of ``python -m amnet``; returns the process's exit status."""
    from .._config import Config
    from .._topology import Topology
    from ..conduits import _mpi as _mpiconduit

    env_spec = os.environ.pop(proto.SPEC_ENV, None)
    args = None if env_spec is not None else _parser().parse_args(argv)
    try:
        MPI = _mpiconduit.mpi("serialized")
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    world = MPI.COMM_WORLD
    me, host = world.Get_rank(), socket.gethostname()
    hosts = world.allgather(host)  # after it, every process is past MPI_Init
    _unlink_mapped_shm()
    try:
        if env_spec is not None:
            spec = proto.spec_from_env(env_spec)
            topo = Topology.from_wire(spec["topology"])
            if topo.procs != world.Get_size():
                raise _Usage(f"the job has {topo.procs} processes and the MPI started "
                             f"{world.Get_size()}")
            Config(spec["config"])
        else:
            spec = _spec_from_mpi(args, MPI, world, hosts)
            topo = Topology.from_wire(spec["topology"])
        _check_placement(topo, hosts)
    except (_Usage, proto.ProtocolError) as e:
        if me == 0:
            print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if spec.get("env") is not None:
        os.environ.update(spec["env"])
    try:
        os.chdir(spec["cwd"])
    except OSError:
        pass
    from ..core._mpiboot import MPIBoot
    from ..core._procmain import run_process

    results = spec.get("mpi_results")
    from .mpilaunch import pid_name

    if results:  # for amnet-run's diagnosis should this process die without a word
        try:
            with open(os.path.join(results, pid_name(me)), "w") as f:
                f.write(f"{os.getpid()} {host}")
        except OSError:  # a result directory on another host: no diagnosis by pid
            pass
    with _mpiconduit.MPI_LOCK:
        boot_comm, conduit_comm = world.Dup(), world.Dup()
    _mpiconduit.set_job_comm(conduit_comm)
    boot = MPIBoot(MPI, boot_comm, topo, me, hosts, results)
    code = run_process(spec, me, host, boot)
    if results:  # ended with a word: not the process a kill took
        try:
            os.unlink(os.path.join(results, pid_name(me)))
        except OSError:
            pass
    return code


if __name__ == "__main__":
    sys.exit(main())
