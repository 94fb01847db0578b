"""The per-node agent: starts its node's rank processes, forwards their output, reports exits.

Started by a spawner as ``python -P -m amnet.launch.agent (--node N | --node-from-env)``. The job
spec arrives on standard input (length-prefixed msgpack; EOF later means the launcher is gone)
or, for ``srun``/``mpirun``, in ``AMNET_JOB_SPEC``. The agent forks its rank processes *before*
it opens any socket or starts any thread, so each fork is a clean copy with amnet already
imported (no interpreter start-up per process), then runs an asyncio (uvloop) loop that relays
output line by line, reports exits over the bootstrap connection and enforces teardown.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import traceback
import warnings

from .. import _protocol as proto
from .._topology import Topology

_NODE_ENV = ("SLURM_PROCID", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")
GRACE_S = 1.0  # after an abort: time for ranks to see JobAborted before SIGTERM
KILL_S = 1.0  # after SIGTERM: time before SIGKILL
LAUNCHER_SILENCE_S = 20.0


def _find_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: Linux's prctl, found at import: set_pdeathsig also runs in a child between fork and exec
#: (a preexec_fn), where nothing should be looked up or loaded
_PRCTL = _find_prctl()


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    if _PRCTL is not None:
        _PRCTL(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG


def set_child_subreaper() -> None:
    """Make orphaned descendants (a rank's daemons) children of this process, not of init."""
    if _PRCTL is not None:
        _PRCTL(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def stop_children() -> None:
    """Kill and reap every child of this process (a subreaper's adopted orphans included)."""
    for _ in range(3):
        kids: list[int] = []
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as f:
                    kids += [int(p) for p in f.read().split()]
        except OSError:
            return
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _node_from_env() -> int:
    for var in _NODE_ENV:
        if var in os.environ:
            return int(os.environ[var])
    raise SystemExit("amnet agent: --node-from-env but none of " + ", ".join(_NODE_ENV) + " is set")


def _fork_child(body, stdin_fd: int | None, new_session: bool,
                death_sig: int, keep: tuple[int, ...] = ()) -> tuple[int, int, int]:
    """Fork a child that runs ``body()`` and exits with its return value.

    The child's stdout and stderr are new pipes, whose read ends are returned with its pid;
    its stdin is ``stdin_fd`` (``None``: /dev/null). It leads a process group of its own (a
    session with ``new_session``), gets ``death_sig`` when this process dies, and keeps no
    other descriptor of ours except those in ``keep`` (the node's PSHM doorbells).
    """
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python 3.12+ warns at a fork while other Python threads exist. The agent forks
        # before it starts any thread of its own (above); once, on 3.13t under load, a
        # Python thread we could not name was still there at this fork of an agent started
        # by --spawn-cmd, and the warning went into the job's stderr (1 doc run in 3; not
        # reproduced in 25 runs under load). The child runs only amnet's code from here.
        warnings.filterwarnings("ignore", r"This process \(pid=\d+\) is multi-threaded",
                                DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid() if new_session else os.setpgid(0, 0)
            set_pdeathsig(death_sig)
            if os.getppid() != parent:  # the parent died before the line above
                os._exit(1)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            os.dup2(os.open(os.devnull, os.O_RDONLY) if stdin_fd is None else stdin_fd, 0)
            os.dup2(w_out, 1)
            os.dup2(w_err, 2)
            lo = 3
            for fd in sorted(keep):
                os.closerange(lo, fd)
                lo = fd + 1
            os.closerange(lo, 1 << 16)
            code = body()
        except BaseException:
            try:
                os.write(2, traceback.format_exc().encode())
            except OSError:
                pass
        finally:
            os._exit(code)
    os.close(w_out)
    os.close(w_err)
    return pid, r_out, r_err


def _fork_rank_process(spec: dict, proc: int, host: str) -> tuple[int, int, int]:
    def body() -> int:
        from ..core._procmain import run_process

        return run_process(spec, proc, host)

    keep = tuple((spec.get("doorbells") or {}).values())
    return _fork_child(body, None, False, signal.SIGKILL, keep)


def _pshm_space_problem(spec: dict, topo: Topology, nprocs: int) -> str | None:
    from ..pshm._backing import node_space_problem
    from ..pshm._layout import Layout

    cfg = spec["config"]
    lay = Layout(nprocs, cfg["pshm_network_depth"], cfg["max_medium"],
                 topo.threads_per_proc, cfg["segment_size"])
    return node_space_problem(cfg["pshm_backing"], nprocs, lay.size)


def _make_doorbells(spec: dict, procs: range) -> dict[int, int]:
    """One eventfd per rank process of the node when they share memory: each inherits them
    all, rings a peer's when it queued an AM for a sleeping peer, and sleeps on its own."""
    cfg = spec.get("config") or {}
    if not cfg.get("pshm", True) or len(procs) < 2 or not hasattr(os, "eventfd"):
        return {}
    return {p: os.eventfd(0, os.EFD_NONBLOCK) for p in procs}


def remove_shared_objects(spec: dict) -> str | None:
    """Remove the job's PSHM objects on this host that a rank killed early left behind (the
    ranks remove them once every process of the node mapped them; this covers a kill before
    that). Used by an agent when its ranks have ended and by ``amnet-run`` when it killed an
    agent that did not answer. Returns why it could not, or None: cleanup must never hide
    the job's outcome."""
    cfg = spec.get("config") or {}
    if not cfg.get("pshm", True):
        return None
    try:
        from ..pshm._backing import cleanup
        from ..pshm._layout import pshm_prefix

        cleanup(cfg.get("pshm_backing", "posix"), pshm_prefix(spec["token"]))
    except Exception as e:
        return str(e)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amnet.launch.agent",
                                 description="amnet node agent (started by amnet-run)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--node", type=int)
    g.add_argument("--node-from-env", action="store_true")
    args = ap.parse_args(argv)
    try:
        if proto.SPEC_ENV in os.environ:
            spec = proto.spec_from_env(os.environ.pop(proto.SPEC_ENV))
            watch_stdin = False
        else:
            spec = proto.read_framed_spec(sys.stdin.buffer)
            watch_stdin = True
    except proto.ProtocolError as e:
        print(f"amnet agent: {e}", file=sys.stderr)
        return 2
    node = _node_from_env() if args.node_from_env else args.node
    return run_agent(spec, node, watch_stdin)


def run_agent(spec: dict, node: int, watch_stdin: bool) -> int:
    """Start node ``node``'s rank processes and manage them until they have all ended."""
    topo = Topology.from_wire(spec["topology"])
    if not 0 <= node < topo.nodes:
        print(f"amnet agent: node {node} is not in 0..{topo.nodes - 1}", file=sys.stderr)
        return 2
    if spec.get("curve") is not None:  # before any rank starts: say it once, clearly
        from .._security import CurveUnavailable, require_curve

        try:
            require_curve(f"the job spec asks for CurveZMQ on {socket.gethostname()}")
        except CurveUnavailable as e:
            print(f"amnet agent: {e}", file=sys.stderr)
            return 2
    if spec.get("pdeathsig"):  # SIGTERM: the agent stops its ranks' process groups first
        set_pdeathsig(signal.SIGTERM)
        if spec.get("parent_pid") and os.getppid() != spec["parent_pid"]:
            return 1  # amnet-run died while we started
    if spec.get("env") is not None:  # the launcher's variables win; the host keeps HOME etc.
        os.environ.update(spec["env"])
    try:
        os.chdir(spec["cwd"])
    except OSError as e:
        print(f"amnet agent: cannot enter {spec['cwd']!r} on {socket.gethostname()}: {e}; "
              f"staying in {os.getcwd()}", file=sys.stderr)
    host = socket.gethostname()
    import amnet.core._procmain

    if _will_init(spec):  # the AM engine (numpy, the conduit) too, once per node, not per rank
        import amnet.core._engine  # noqa: F401

    set_child_subreaper()
    sys.stdout.flush()
    sys.stderr.flush()
    bells = _make_doorbells(spec, topo.procs_of_node(node))
    if bells:
        spec = dict(spec, doorbells=bells)
        problem = _pshm_space_problem(spec, topo, len(bells))
        if problem:  # every rank raises it at init (PshmSpaceError), before creating anything
            spec = dict(spec, pshm_error=problem)
    children = {p: _fork_rank_process(spec, p, host) for p in topo.procs_of_node(node)}
    for fd in bells.values():
        os.close(fd)

    from ._agentloop import AgentLoop

    return AgentLoop(spec, node, host, children, watch_stdin).run()


def _will_init(spec: dict) -> bool:
    """Whether the ranks will likely join (call ``amnet.init``): always for ``amnet.run``;
    for a script, when its text mentions amnet. Only decides what to import before forking."""
    if spec.get("mode") == "fn":
        return True
    try:
        with open(spec["script"], "rb") as f:
            return b"amnet" in f.read(1 << 20)
    except OSError:
        return False


def fork_agent(spec: dict, node: int) -> tuple[int, int, int, int]:
    """Fork an agent from amnet-run itself (no interpreter start-up, amnet already imported).

    Only safe in a process with no other threads and no zmq context yet: amnet-run calls it
    before its event loop starts. Returns ``(pid, stdin_w, stdout_r, stderr_r)``; closing
    ``stdin_w`` tells the agent that the launcher is gone. The agent gets SIGTERM when
    amnet-run dies, and then stops its ranks' process groups.
    """
    r_in, w_in = os.pipe()
    pid, r_out, r_err = _fork_child(
        lambda: run_agent(dict(spec, pdeathsig=False), node, True), r_in, True, signal.SIGTERM)
    os.close(r_in)
    return pid, w_in, r_out, r_err


if __name__ == "__main__":
    sys.exit(main())
