"""The ``mpi4py`` peer, intra-node: what a Python user would pick instead of amnet on one node.

Two ranks of one MPICH job on this machine (``mpiexec -n 2``, MPICH's shared-memory
transport), mpi4py's uppercase (buffer) API on preallocated numpy arrays:

- :func:`pingpong`: ``Send``/``Recv`` round trip of one ``int64`` (8 bytes);
- :func:`am_emulation`: the active-message emulation a Python user would write. Rank 0
  ``Send``\\ s a request (4 x ``int64``, tag = handler id ``PING``), then polls
  ``comm.Iprobe(ANY_SOURCE, ANY_TAG, status)``; on a hit it ``Recv``\\ s into a preallocated
  buffer and dispatches through a dict ``{tag: handler}``. Rank 1 runs the same poll loop;
  its ``ping`` handler answers with a ``Send`` (tag ``PONG``, the same 4 arguments); rank 0's
  ``pong`` handler sets a flag (the sequence number) that rank 0 waits for. A ``QUIT``
  message ends rank 1's loop;
- :func:`rma_put_latency` / :func:`rma_get_latency`: in a window of ``window_bytes``
  (``MPI.Win.Allocate``, 16 MiB by default), rank 0 does ``win.Lock(1); win.Put(buf, 1, 0);
  win.Unlock(1)`` (or ``Get``) per operation: passive-target lock/put/unlock latency, rank 1
  idle in a ``Barrier``;
- :func:`send_bw`: ``Isend``/``Irecv`` streaming bandwidth in windows with an ack per
  window (OSU's ``osu_bw``);
- :func:`rma_bw`: Put and Get bandwidth: ``Lock(1)``, a batch of ``batch`` Puts (Gets) of the
  whole size to displacement 0, ``Unlock(1)`` (which completes them); MB/s = bytes moved /
  time (10^6 bytes per MB), one sample per batch.

Timing: after ``warmup`` untimed operations, operations run in batches of ``batch`` and each
batch is timed as a whole (one ``perf_counter`` per operation would cost a few percent of a
round trip); a latency sample is the batch's time divided by ``batch`` (seconds). Every
figure is ``median``, ``p10``, ``p90`` (plus ``min``, ``max``, ``mean``, ``n``) over the
samples, with every sample (:func:`amnet_bench._stats.stats`).

The job's functions run inside the MPI job (this file run as a script by ``mpiexec``, no amnet
import there): ``mpiexec -n 2 python -m amnet_bench._mpipeer job PLAN_JSON`` (or the file
path). Rank 0 prints one line, :data:`PREFIX` then the result as JSON. :func:`run_mpi` (the
suites' side) starts such a job and returns that result; ``python -m amnet_bench._mpipeer``
alone does the same with :data:`DEFAULT_PLAN` and prints it.

The plan (JSON, every section optional, missing keys taken from :data:`DEFAULT_PLAN`'s)::

    {"pin": "none" | "split",          # split: rank r on the r-th usable core
     "thread_level": null | "single" | "funneled" | "serialized" | "multiple",
     "window_bytes": 16777216,
     "pingpong": {"warmup", "iters", "batch"},
     "am": {"warmup", "iters", "batch"},
     "rma_lat": {"sizes", "warmup", "iters", "batch"},
     "rma_bw": {"sizes", "warmup", "batches", "batch"},
     "send_bw": {"sizes", "window", "warmup", "windows"}}

``thread_level`` null keeps mpi4py's default (``MPI_THREAD_MULTIPLE``), what a user gets.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

try:
    from ._rawzmq import pin_process
    from ._stats import stats
except ImportError:  # run as a script: this directory is sys.path[0]
    from _rawzmq import pin_process  # type: ignore[no-redef]
    from _stats import stats  # type: ignore[no-redef]

PREFIX = "AMNET_MPIPEER_RESULT "
SHM_PREFIX = "AMNET_MPIPEER_SHM "  # each rank: the named /dev/shm files it maps after MPI init
TIMEOUT_S = 300.0
PING, PONG, QUIT = 1, 2, 3  # the AM emulation's handler ids (message tags)

DEFAULT_PLAN: dict[str, Any] = {
    "pin": "none",
    "thread_level": None,
    "window_bytes": 16 << 20,
    "pingpong": {"warmup": 1000, "iters": 20000, "batch": 1000},
    "am": {"warmup": 1000, "iters": 20000, "batch": 1000},
    "rma_lat": {"sizes": [8, 1 << 10, 64 << 10], "warmup": 200, "iters": 5000, "batch": 250},
    "rma_bw": {"sizes": [1 << 20, 4 << 20, 16 << 20], "warmup": 2, "batches": 10, "batch": 8},
    "send_bw": {"sizes": [1 << 20], "window": 8, "warmup": 2, "windows": 16},
}
SECTIONS = ("pingpong", "am", "rma_lat", "rma_bw", "send_bw")


def _batches(iters: int, batch: int) -> tuple[int, int]:
    """(batch, number of batches): ``iters`` rounded up to whole batches of at most
    ``batch``."""
    if iters < 1 or batch < 1:
        raise ValueError(f"need iters >= 1 and batch >= 1, got {iters}, {batch}")
    batch = min(batch, iters)
    return batch, -(-iters // batch)


def _latency(samples: list[float], warmup: int, batch: int) -> dict[str, Any]:
    return {"unit": "s", "warmup": warmup, "batch": batch, "batches": len(samples),
            **stats(samples)}


# -- inside the job -----------------------------------------------------------------------
def pingpong(comm: Any, warmup: int, iters: int, batch: int) -> dict[str, Any] | None:
    """Send/Recv round trip of an 8-byte message (rank 0 <-> 1). Rank 0 returns the figures
    (seconds per round trip), rank 1 None."""
    import numpy as np

    batch, nb = _batches(iters, batch)
    buf = np.zeros(1, dtype=np.int64)
    send, recv = comm.Send, comm.Recv
    comm.Barrier()
    if comm.Get_rank() != 0:
        for _ in range(warmup + nb * batch):
            recv(buf, 0, 0)
            send(buf, 0, 0)
        comm.Barrier()
        return None
    for _ in range(warmup):
        send(buf, 1, 0)
        recv(buf, 1, 0)
    pc = time.perf_counter
    samples = [0.0] * nb
    for b in range(nb):
        t0 = pc()
        for _ in range(batch):
            send(buf, 1, 0)
            recv(buf, 1, 0)
        samples[b] = (pc() - t0) / batch
    comm.Barrier()
    return {"what": "Send/Recv round trip, 8 B", **_latency(samples, warmup, batch)}


def am_emulation(comm: Any, warmup: int, iters: int, batch: int) -> dict[str, Any] | None:
    """AM round trip emulated with Send + Iprobe/Recv + dict dispatch (see the module's
    docstring). Rank 0 returns the figures (seconds per round trip), rank 1 None."""
    import numpy as np
    from mpi4py import MPI

    batch, nb = _batches(iters, batch)
    any_source, any_tag = MPI.ANY_SOURCE, MPI.ANY_TAG
    status = MPI.Status()
    inbox = np.zeros(4, dtype=np.int64)  # where every message is received
    request = np.zeros(4, dtype=np.int64)
    iprobe, recv, send = comm.Iprobe, comm.Recv, comm.Send
    flag = [0]  # the sequence number of the last pong
    running = [True]

    def ping(src: int, args: Any) -> None:  # at rank 1: answer with the same arguments
        send(args, src, PONG)

    def pong(src: int, args: Any) -> None:  # at rank 0: say the reply came
        flag[0] = int(args[0])

    def quit_(src: int, args: Any) -> None:
        running[0] = False

    handlers = {PING: ping, PONG: pong, QUIT: quit_}
    comm.Barrier()
    if comm.Get_rank() != 0:
        while running[0]:  # the poll loop
            if iprobe(any_source, any_tag, status):
                src, tag = status.Get_source(), status.Get_tag()
                recv(inbox, src, tag)
                handlers[tag](src, inbox)
        comm.Barrier()
        return None

    def round_trips(first: int, n: int) -> None:
        for i in range(first, first + n):
            request[0] = i
            send(request, 1, PING)
            while flag[0] != i:  # poll until the pong handler has run
                if iprobe(any_source, any_tag, status):
                    src, tag = status.Get_source(), status.Get_tag()
                    recv(inbox, src, tag)
                    handlers[tag](src, inbox)

    round_trips(1, warmup)
    pc = time.perf_counter
    samples = [0.0] * nb
    for b in range(nb):
        first = warmup + 1 + b * batch
        t0 = pc()
        round_trips(first, batch)
        samples[b] = (pc() - t0) / batch
    send(request, 1, QUIT)
    comm.Barrier()
    return {"what": "AM emulation round trip: Send 4 x int64 (tag = handler), "
                    "Iprobe(ANY_SOURCE, ANY_TAG) + Recv + dict dispatch, reply Send",
            **_latency(samples, warmup, batch)}


def _origin(size: int) -> Any:
    import numpy as np

    return np.full(size, 5, dtype=np.uint8)  # allocated and touched


def _rma_latency(comm: Any, win: Any, op: str, sizes: list[int], warmup: int, iters: int,
                 batch: int) -> dict[str, Any] | None:
    batch, nb = _batches(iters, batch)
    comm.Barrier()
    if comm.Get_rank() != 0:
        comm.Barrier()  # passive target: rank 1 only waits (MPICH progresses in Barrier)
        return None
    lock, unlock = win.Lock, win.Unlock
    call = win.Put if op == "put" else win.Get
    pc = time.perf_counter
    out: dict[str, Any] = {}
    for size in sizes:
        buf = _origin(size)
        for _ in range(warmup):
            lock(1)
            call(buf, 1, 0)
            unlock(1)
        samples = [0.0] * nb
        for b in range(nb):
            t0 = pc()
            for _ in range(batch):
                lock(1)
                call(buf, 1, 0)
                unlock(1)
            samples[b] = (pc() - t0) / batch
        out[str(size)] = {"bytes": size, **_latency(samples, warmup, batch)}
    comm.Barrier()
    return out


def rma_put_latency(comm: Any, win: Any, sizes: list[int], warmup: int, iters: int,
                    batch: int) -> dict[str, Any] | None:
    """``win.Lock(1); win.Put(buf, 1, 0); win.Unlock(1)`` per put, by size. Rank 0 returns
    ``{str(size): figures}`` (seconds per put), rank 1 None."""
    return _rma_latency(comm, win, "put", sizes, warmup, iters, batch)


def rma_get_latency(comm: Any, win: Any, sizes: list[int], warmup: int, iters: int,
                    batch: int) -> dict[str, Any] | None:
    """``win.Lock(1); win.Get(buf, 1, 0); win.Unlock(1)`` per get, by size. Rank 0 returns
    ``{str(size): figures}`` (seconds per get), rank 1 None."""
    return _rma_latency(comm, win, "get", sizes, warmup, iters, batch)


def rma_bw(comm: Any, win: Any, sizes: list[int], warmup: int, batches: int,
           batch: int) -> dict[str, Any] | None:
    """Put and Get bandwidth by size: ``Lock(1)``, ``batch`` operations of the whole size,
    ``Unlock(1)``; one sample (MB/s) per batch. Rank 0 returns ``{"put": {str(size):
    figures}, "get": {...}}``, rank 1 None."""
    if batches < 1 or batch < 1 or warmup < 0:
        raise ValueError(f"need batches >= 1, batch >= 1, warmup >= 0; got {batches}, {batch}, "
                         f"{warmup}")
    comm.Barrier()
    if comm.Get_rank() != 0:
        comm.Barrier()
        return None
    lock, unlock = win.Lock, win.Unlock
    pc = time.perf_counter
    out: dict[str, Any] = {"put": {}, "get": {}}
    for op, call in (("put", win.Put), ("get", win.Get)):
        for size in sizes:
            buf = _origin(size)
            samples = [0.0] * batches
            for b in range(-warmup, batches):
                t0 = pc()
                lock(1)
                for _ in range(batch):
                    call(buf, 1, 0)
                unlock(1)
                if b >= 0:
                    samples[b] = size * batch / (pc() - t0) / 1e6
            out[op][str(size)] = {"bytes": size, "unit": "MB/s", "warmup": warmup,
                                  "batch": batch, "batches": batches, **stats(samples)}
    comm.Barrier()
    return out


def send_bw(comm: Any, sizes: list[int], window: int, warmup: int,
            windows: int) -> dict[str, Any] | None:
    """Send/Recv streaming bandwidth by size (the OSU ``osu_bw`` pattern): rank 0 posts
    ``window`` ``Isend``\\ s of S bytes and waits for them, rank 1 posts as many ``Irecv``\\ s
    into consecutive S-byte slots of one preallocated buffer and waits for them, then sends
    an 8-byte ack that rank 0 receives before its next window. One sample (MB/s) per window
    after ``warmup`` untimed ones, and ``aggregate``: the timed windows' bytes over their
    time. Rank 0 returns ``{str(size): figures}``, rank 1 None."""
    import numpy as np
    from mpi4py import MPI

    rank = comm.Get_rank()
    ack = np.zeros(1, dtype=np.int64)
    out: dict[str, Any] = {}
    pc = time.perf_counter
    for size in sizes:
        buf = _origin(size) if rank == 0 else np.empty(size * window, dtype=np.uint8)
        comm.Barrier()
        samples = []
        timed = 0.0
        for w in range(-warmup, windows):
            t0 = pc()
            if rank == 0:
                reqs = [comm.Isend([buf, MPI.BYTE], 1, 7) for _ in range(window)]
                MPI.Request.Waitall(reqs)
                comm.Recv([ack, MPI.INT64_T], 1, 8)
            else:
                reqs = [comm.Irecv([buf[k * size:(k + 1) * size], MPI.BYTE], 0, 7)
                        for k in range(window)]
                MPI.Request.Waitall(reqs)
                comm.Send([ack, MPI.INT64_T], 0, 8)
            if w >= 0:
                dt = pc() - t0
                timed += dt
                samples.append(size * window / dt / 1e6)
        if rank == 0:
            # aggregate: all timed bytes over all timed windows' time (what osu_bw prints,
            # and how amnet's put_nbi streams are timed); the rest are per-window figures
            out[str(size)] = {"bytes": size, "unit": "MB/s", "window": window,
                              "warmup": warmup, "windows": windows,
                              "aggregate": size * window * windows / timed / 1e6,
                              **stats(samples)}
    comm.Barrier()
    return out if rank == 0 else None


def job(plan: dict[str, Any]) -> dict[str, Any] | None:
    """Run ``plan`` (missing keys from :data:`DEFAULT_PLAN`: see :func:`full_plan`) in this
    MPI job; rank 0 returns the result, the other rank None."""
    import mpi4py

    plan = full_plan(plan)
    if plan.get("thread_level"):
        mpi4py.rc.thread_level = plan["thread_level"]
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    shm = comm.gather(_named_shm(), root=0)  # rank 0 alone prints: mpiexec interleaves lines
    if rank == 0:
        print(SHM_PREFIX + json.dumps(sorted({p for paths in shm for p in paths})), flush=True)
    if size != 2:
        raise SystemExit(f"_mpipeer: needs exactly 2 ranks, got {size}")
    core = pin_process(plan["pin"], rank)
    names = comm.gather(MPI.Get_processor_name(), root=0)
    cores = comm.gather(core, root=0)
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    out: dict[str, Any] = {}
    if "pingpong" in plan:
        p = plan["pingpong"]
        out["pingpong"] = pingpong(comm, p["warmup"], p["iters"], p["batch"])
    if "am" in plan:
        p = plan["am"]
        out["am"] = am_emulation(comm, p["warmup"], p["iters"], p["batch"])
    if "send_bw" in plan:
        p = plan["send_bw"]
        out["send_bw"] = send_bw(comm, p["sizes"], p["window"], p["warmup"], p["windows"])
    if "rma_lat" in plan or "rma_bw" in plan:
        win = MPI.Win.Allocate(plan["window_bytes"], 1, MPI.INFO_NULL, comm)
        try:
            import numpy as np

            np.frombuffer(win.tomemory(), dtype=np.uint8)[:] = 0  # touch the window
            if "rma_lat" in plan:
                p = plan["rma_lat"]
                out["rma_put"] = rma_put_latency(comm, win, p["sizes"], p["warmup"],
                                                 p["iters"], p["batch"])
                out["rma_get"] = rma_get_latency(comm, win, p["sizes"], p["warmup"],
                                                 p["iters"], p["batch"])
            if "rma_bw" in plan:
                p = plan["rma_bw"]
                bw = rma_bw(comm, win, p["sizes"], p["warmup"], p["batches"], p["batch"])
                if bw is not None:
                    out["rma_put_bw"], out["rma_get_bw"] = bw["put"], bw["get"]
        finally:
            win.Free()
    if rank != 0:
        return None
    return {"peer": "mpi4py", "mpi_library": MPI.Get_library_version().strip().splitlines()[0],
            "mpi4py": mpi4py.__version__, "thread_level": levels.get(MPI.Query_thread()),
            "ranks": size, "processor_names": names, "same_node": len(set(names)) == 1,
            "pin": plan["pin"], "cores": None if cores[0] is None else cores, "plan": plan,
            **out}


def _named_shm() -> list[str]:
    """The /dev/shm files this process maps that still have a name (MPICH's intra-node
    segment, ``mpich_shm_*``, is unlinked only at finalize)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)  # address perms offset dev inode [path]
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                    found.add(path)
    except OSError:
        pass
    return sorted(found)


# -- the suites' side ---------------------------------------------------------------------
def full_plan(plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """``plan`` with every missing key of its sections taken from :data:`DEFAULT_PLAN`
    (None: the whole default plan). Raises ValueError for an unknown key or pin."""
    if plan is None:
        return copy.deepcopy(DEFAULT_PLAN)
    unknown = set(plan) - set(DEFAULT_PLAN)
    if unknown:
        raise ValueError(f"unknown plan keys: {', '.join(sorted(unknown))}")
    out = {k: copy.deepcopy(DEFAULT_PLAN[k]) for k in ("pin", "thread_level", "window_bytes")}
    for key, value in plan.items():
        if key in SECTIONS:
            extra = set(value) - set(DEFAULT_PLAN[key])
            if extra:
                raise ValueError(f"unknown keys in plan[{key!r}]: {', '.join(sorted(extra))}")
            out[key] = {**copy.deepcopy(DEFAULT_PLAN[key]), **value}
        else:
            out[key] = value
    if out["pin"] not in ("none", "split"):
        raise ValueError(f"pin must be none or split, got {out['pin']!r}")
    levels = (None, "single", "funneled", "serialized", "multiple")
    if out["thread_level"] not in levels:
        raise ValueError(f"thread_level must be one of {levels}, got {out['thread_level']!r}")
    for key in SECTIONS:
        for name, value in out.get(key, {}).items():
            least = 0 if name == "warmup" else 1
            values = value if name == "sizes" else [value]
            if name == "sizes" and not values:
                raise ValueError(f"plan[{key!r}]['sizes'] is empty")
            if not all(isinstance(v, int) and v >= least for v in values):
                raise ValueError(f"plan[{key!r}][{name!r}] must be integers >= {least}, "
                                 f"got {value!r}")
            if name == "sizes" and max(values) > out["window_bytes"]:
                raise ValueError(f"plan[{key!r}]['sizes'] exceed window_bytes "
                                 f"({out['window_bytes']})")
    return out


def run_mpi(plan: dict[str, Any] | None = None, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """Start ``mpiexec -n 2`` of this file's job on ``plan`` (see :func:`full_plan`) and
    return rank 0's result. Raises :class:`amnet_bench.BenchError` when mpi4py or mpiexec is
    missing or the job fails or runs past ``timeout`` seconds (then the whole job is killed)."""
    import importlib.util

    from amnet_bench._registry import BenchError

    full = full_plan(plan)
    if importlib.util.find_spec("mpi4py") is None:
        raise BenchError("the mpi4py peer needs mpi4py, which is not installed "
                         "(pip install -e '.[peers]')")
    return run_script(os.path.abspath(__file__), 2, full, timeout, PREFIX)


def run_script(path: str, n: int, plan: Any, timeout: float = TIMEOUT_S,
               prefix: str = PREFIX) -> dict[str, Any]:
    """``mpiexec -n N python PATH job PLAN_JSON``; return the JSON after ``prefix`` on the
    last line that starts with it (a rank prints it). The script's ranks may print
    :data:`SHM_PREFIX` lines naming /dev/shm files to remove if the job dies. Raises
    BenchError (mpiexec missing, the job failed or ran past ``timeout`` s: then killed)."""
    from amnet_bench._child import run_command
    from amnet_bench._registry import BenchError
    from amnet_bench._report import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise BenchError("the mpi4py peer needs mpiexec, found neither beside "
                         f"{sys.executable} nor on PATH (pip install -e '.[peers]')")
    cmd = [mpiexec, "-n", str(n), sys.executable, path, "job", json.dumps(plan)]
    return run_command(cmd, f"the mpi4py peer `{mpiexec} -n {n} {sys.executable} {path} job "
                       "...`", prefix, timeout, stop=_stop, printed=_unlink_left)


def _stop(p: subprocess.Popen) -> tuple[str, str]:
    """End a job: SIGTERM to mpiexec (Hydra then ends its ranks), SIGKILL to the whole
    session's process group after 5 s. Returns everything the job printed."""
    try:
        p.send_signal(signal.SIGTERM)
        return p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the ranks, whatever became of mpiexec
        except (ProcessLookupError, PermissionError):
            pass
    return p.communicate()


def _unlink_left(out: str) -> None:
    """Remove the named /dev/shm files the job's ranks reported that are still there: a
    job killed or failed before MPI_Finalize leaves MPICH's segment behind."""
    for line in out.splitlines():
        if not line.startswith(SHM_PREFIX):
            continue
        try:
            paths = json.loads(line[len(SHM_PREFIX):])
        except ValueError:
            continue
        for path in paths:
            if isinstance(path, str) and path.startswith("/dev/shm/") and "/" not in path[9:]:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def script_main(fn: Any, prefix: str, argv: list[str], usage: str) -> None:
    """The main of a script that :func:`run_script` starts under ``mpiexec``: ``job
    PLAN_JSON`` runs ``fn(plan)`` on every rank, and the rank that returns a result prints
    it after ``prefix``. Anything else exits with ``usage``."""
    if len(argv) != 2 or argv[0] != "job":
        raise SystemExit(f"usage: {usage}")
    res = fn(json.loads(argv[1]))
    if res is not None:
        print(prefix + json.dumps(res), flush=True)


def main(argv: list[str]) -> None:
    if not argv:
        print(json.dumps(run_mpi(), indent=1))
        return
    script_main(job, PREFIX, argv, "mpiexec -n 2 python -m amnet_bench._mpipeer job "
                "PLAN_JSON | python -m amnet_bench._mpipeer")


if __name__ == "__main__":
    main(sys.argv[1:])
