"""``amnet.run``: start a job from Python and collect each rank's return value."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from typing import Any

from .._config import Config, check_for_topology
from .._errors import ConfigError, InitError, JobFailed, RemoteTraceback
from .._topology import Topology


def _pickle_fn(fn: Callable) -> tuple[bytes, str | None]:
    if not callable(fn):
        raise TypeError(f"amnet.run needs a callable fn(ep), got {type(fn).__name__}")
    try:
        payload = pickle.dumps(fn, protocol=5)
    except Exception as e:
        raise TypeError(
            "amnet.run needs a function the ranks can import by name (a module-level def, or "
            f"functools.partial of one with picklable arguments): {e}") from None
    main_path = None
    if b"__main__" in payload:  # fn (or a partial's function, or an argument) lives there
        main_path = getattr(sys.modules["__main__"], "__file__", None)
        if main_path is None:
            raise TypeError(
                "amnet.run cannot send a function defined interactively to other processes: "
                "define fn in a module (or a script file) and import it")
    return payload, main_path


def run(
    fn: Callable[..., Any],
    n: int = 1,
    procs_per_node: int | None = None,
    threads_per_proc: int = 1,
    nodes: int | None = None,
    *,
    timeout: float | None = None,
    label: bool = False,
    spawner: str = "local",
    hosts: str | None = None,
    hostfile: str | None = None,
    spawn_cmd: str | None = None,
    bootstrap_addr: str | None = None,
    insecure: bool = False,
    mpiexec: str | None = None,
    **options: Any,
) -> list[Any]:
    """Run ``fn(ep)`` on every rank of a new job and return the results, indexed by rank.

    The job has the shape of ``amnet-run -n N ...`` (see docs/design.md §2). Each rank calls
    ``amnet.init()``, then ``fn(ep)``, then ``amnet.finalize()``. ``fn`` travels by reference,
    so it must be importable (a module-level function, or one in the running script guarded
    by ``if __name__ == "__main__":``); return values travel by pickle. Output of the ranks goes
    to this process's ``sys.stdout``/``sys.stderr``. ``options`` are configuration options
    (``segment_size=...``), overriding ``AMNET_*`` variables. A job with agents on other hosts
    (``spawner``/``hosts``) uses CurveZMQ with fresh keys on every socket; ``insecure=True``
    turns that off, with a warning on ``sys.stderr``, like ``amnet-run --insecure``.
    With ``conduit="mpi"`` the MPI's launcher starts the processes (``mpiexec``: the one
    beside this Python or on PATH, or the command line ``mpiexec`` gives, like
    ``amnet-run --mpiexec``; ``hosts``/``hostfile`` go to it) and ``spawner`` must be local.

    Raises:
        TopologyError / ConfigError / SpawnerError: bad shape or options, before anything runs
            (a job that needs CurveZMQ where libzmq lacks it included).
        TypeError: ``fn`` cannot be sent to the ranks.
        Exception: the first exception raised by ``fn`` on any rank, re-raised here with the
            rank named in a note and the remote traceback chained as its cause.
        JobFailed: the job failed otherwise (a rank killed or exiting non-zero, an abort, a
            timeout); carries the exit code and the diagnosis.
        InitError: called from inside a rank of a job.
    """
    from ..core import _runtime
    from ._spec import build_spec, curve_for
    from .job import run_job
    from .spawners import make_spawner

    if _runtime._process is not None:
        raise InitError("amnet.run() was called inside a rank of a running job; if this is "
                        "a script that amnet.run() loaded, guard the call with "
                        "if __name__ == '__main__':")
    topo = Topology.make(n, procs_per_node, threads_per_proc, nodes)
    config = Config.resolve(overrides=options)
    check_for_topology(config, topo.threads_per_proc)
    payload, main_path = _pickle_fn(fn)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if config.conduit == "mpi":
        from .mpilaunch import check_mpi_options, run_mpi_job

        check_mpi_options(spawner, spawn_cmd, bootstrap_addr, insecure)
        spec = build_spec(topo, config, label=label, fn=payload, main_path=main_path)
        out = run_mpi_job(spec, launcher=mpiexec, timeout=timeout, hosts=hosts,
                          hostfile=hostfile)
    else:
        if mpiexec is not None:
            raise ConfigError("mpiexec= starts the processes of a job on the mpi conduit; "
                              f"this job's conduit is {config.conduit}")
        sp = make_spawner(spawner, topo, hosts=hosts, hostfile=hostfile, spawn_cmd=spawn_cmd)
        curve = curve_for(sp, bootstrap_addr, insecure=insecure, conduit=config.conduit,
                          warn=lambda msg: print(f"amnet.run: {msg}", file=sys.stderr,
                                                 flush=True))
        spec = build_spec(topo, config, label=label, fn=payload, main_path=main_path,
                          curve=curve)
        out = run_job(spec, sp, timeout=timeout, bootstrap_addr=bootstrap_addr)
    if main_path is not None:  # the ranks ran this script as __mp_main__: same objects here
        sys.modules.setdefault("__mp_main__", sys.modules["__main__"])
    if out.code == 0 and out.failed_rank is None:
        return [pickle.loads(out.results[r]) if r in out.results else None
                for r in range(topo.size)]
    err = out.error
    if err is not None and err.get("exc") is not None:
        try:
            exc = pickle.loads(err["exc"])
        except Exception:
            exc = None
        if isinstance(exc, BaseException):
            exc.add_note(f"raised on {out.failed_where} of an amnet.run job")
            raise exc from RemoteTraceback(err["tb"])
    raise JobFailed(out.diagnosis or f"the job exited with code {out.code}", out.code)
