"""The launcher: hosts the bootstrap service, starts agents through a spawner, runs the job's
lifecycle (output, exits, diagnosis, teardown, timeout, signals) on an asyncio/uvloop loop.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from .. import _protocol as proto
from .._guard import Guard
from .._topology import Topology
from ._output import DRAIN_S, Pump, ThreadWriter, stdout_writer
from ._zsock import LoopSocket
from .agent import remove_shared_objects
from .spawners import Launched, Spawner

__all__ = ["Job", "Outcome", "run_job", "stdout_writer"]

PING_S = 2.0
TEARDOWN_S = 4.0  # after a failure: how long agents get to stop their processes
WHERE_S = 1.0  # on a timeout or signal: how long the rank processes get to say where they are
REGISTER_S = 60.0  # how long a started agent may take to say hello
SETTLE_S = 2.0  # after an agent exits: how long its last messages may take to be read
STOP_S = 1.5  # at the end: how long agents get to stop after SIGTERM, before SIGKILL
REFUSALS_SHOWN = 3  # refused connections reported one by one; the rest are counted


@dataclass
class Outcome:
    """How a job ended. ``code`` is the job's exit status (0: every rank exited 0)."""

    code: int
    diagnosis: str | None
    results: dict[int, bytes] = field(default_factory=dict)
    failed_rank: int | None = None
    failed_where: str | None = None  # "rank 2 (node 1, proc 2, host h)"
    error: dict[str, Any] | None = None


class Job:
    """One run of an amnet program. Use :meth:`run` (a coroutine) once."""

    def __init__(self, spec: dict[str, Any], spawner: Spawner, *, timeout: float | None,
                 write_out: Callable[[bytes], None], write_err: Callable[[bytes], None],
                 handle_signals: bool = False, bootstrap_addr: str | None = None) -> None:
        from .._jobstate import JobState

        self.spec = spec
        self.topo = Topology.from_wire(spec["topology"])
        self.spawner = spawner
        self.timeout = timeout
        self.out = ThreadWriter(write_out, "stdout")
        self.err = ThreadWriter(write_err, "stderr")
        self.write_err = self.err.write_nowait
        self.handle_signals = handle_signals
        self.bootstrap_addr = bootstrap_addr
        self.state = JobState(self.topo)
        self.idents: dict[bytes, tuple[str, int]] = {}
        self.proc_ident: dict[int, bytes] = {}
        self.agent_ident: dict[int, bytes] = {}
        self.agent_host: dict[int, str] = {}
        self.refused: set[bytes | int] = set()
        self.rank_pids: dict[int, int] = {}
        self.malformed = 0
        self.launched: list[Launched] = []
        self.tearing_down = False
        self.diagnosing: asyncio.Future | None = None  # asking where the ranks are (_stop)
        self.where_id = 0
        self.where_want: set[int] = set()  # processes asked that have not answered yet
        self.where_agents: set[int] = set()  # nodes whose agent was asked, not answered yet
        self.where_got: dict[int, list] = {}  # rank -> where its process says it is
        self.where_done: asyncio.Event | None = None
        self.unresponsive: set[int] = set()  # nodes whose agent did not answer (killed soon)

    # -- entry ------------------------------------------------------------------------------
    async def run(self) -> Outcome:
        loop = asyncio.get_running_loop()
        self.loop = loop
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, proto.MAX_MESSAGE)  # a stranger cannot exhaust memory
        try:
            # a peer that does not prove the job's secret (PLAIN, or CURVE across hosts) fails
            # zmq's handshake and never reaches _on_frames (the token check below still
            # stands behind it)
            guard = Guard(ctx, sock, self.spec["token"], self.spec.get("curve"),
                          on_refused=lambda: loop.call_soon_threadsafe(self._refuse, None),
                          count_silent=False)
            self.spec["bootstrap"] = self.spawner.bind(sock, self.bootstrap_addr,
                                                       self.spec["token"])
        except BaseException:
            sock.close(linger=0)
            ctx.term()
            raise
        self.sock = LoopSocket(loop, sock, self._on_frames)
        tasks: list[asyncio.Future] = []
        signals = []
        try:
            if self.handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    signals.append(sig)
            try:
                self.launched = await self.spawner.spawn(self.spec)
            except OSError as e:
                self.state.fail(127, f"could not start agents with the {self.spawner.name} "
                                     f"spawner: {e}")
                self.launched = []
            for ln in self.launched:
                ln.pumps = [Pump(ln.process.stdout, self.out),
                            Pump(ln.process.stderr, self.err)]
                pumps = [asyncio.ensure_future(p.run()) for p in ln.pumps]
                tasks += [*pumps, asyncio.ensure_future(self._watch_launched(ln, pumps))]
            pinger = asyncio.ensure_future(self._pinger())
            timer = loop.call_later(self.timeout, self._on_timeout) if self.timeout else None
            regtimer = loop.call_later(REGISTER_S, self._check_registered)
            if tasks:  # a pump cancelled for a held pipe is not an error of the job
                for res in await asyncio.gather(*tasks, return_exceptions=True):
                    if isinstance(res, Exception):
                        raise res
            await self._end_diagnosis()  # everything ended while we asked where ranks were
            if self.state.failure is None:
                self._final_checks()
            pinger.cancel()
            regtimer.cancel()
            if timer:
                timer.cancel()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await self._end_diagnosis()
            await self._stop_launched()
            self.sock.close(linger_ms=0)
            ctx.term()  # ends the guard's thread too
            guard.join()
            if len(self.refused) > REFUSALS_SHOWN:
                self.write_err(f"amnet-run: refused {len(self.refused)} bootstrap connections "
                               f"in all\n".encode())
            if self.malformed:
                self.write_err(f"amnet-run: ignored {self.malformed} malformed bootstrap "
                               f"message(s) from the job's own processes\n".encode())
            closing = [w.close() for w in (self.out, self.err)]
        for fut in closing:  # everything forwarded is out before the diagnosis
            await fut
        st = self.state
        f = st.failure
        return Outcome(
            code=st.outcome_code(), diagnosis=f.diagnosis if f else None, results=st.results,
            failed_rank=f.rank if f else None, error=f.error if f else None,
            failed_where=st.where([f.rank]) if f and f.rank is not None else None)

    # -- the bootstrap service ------------------------------------------------------------------
    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._refuse(frames[0])
            return
        ident, data = frames
        try:
            self._handle(ident, proto.unpack(data))
        except Exception:  # whatever a frame holds, the service goes on
            if ident not in self.idents:
                self._refuse(ident)
            else:
                self.malformed += 1

    def _send(self, ident: bytes, msg: dict[str, Any]) -> None:
        self.sock.send([ident, proto.pack(msg)])

    def _refuse(self, ident: bytes | None) -> None:
        """Count a refused connection (``ident``: its routing id; None: one that zmq's
        handshake refused) and say so, up to REFUSALS_SHOWN times."""
        if ident is None:
            ident = len(self.refused)  # a key no routing id (bytes) equals
        if ident not in self.refused:
            self.refused.add(ident)
            if len(self.refused) <= REFUSALS_SHOWN:
                self.write_err(b"amnet-run: refused a bootstrap connection that did not "
                               b"prove it holds this job's secret; the job goes on\n")

    def _handle(self, ident: bytes, msg: dict[str, Any]) -> None:
        t = msg["t"]
        who = self.idents.get(ident)
        if who is None:
            if t != "hello" or not secrets.compare_digest(str(msg.get("token")),
                                                          self.spec["token"]):
                self._refuse(ident)
                return
            self._hello(ident, msg)
            return
        kind, idx = who
        st = self.state
        if kind == "proc":
            if t in ("coll", "done", "abort") and st.topo.proc_of(int(msg["rank"])) != idx:
                return
            if t == "coll":
                reply = st.enter(int(msg["rank"]), int(msg["seq"]), str(msg["op"]),
                                 msg.get("name"), msg.get("value"))
                if reply is not None:
                    for p in range(st.topo.procs):
                        if p in self.proc_ident:
                            self._send(self.proc_ident[p], reply)
                else:  # a rank that already ended may be missing from it
                    st.check_stranded()
            elif t == "done":
                rank = int(msg["rank"])
                st.rank_done(rank, int(msg["code"]), msg.get("result"), msg.get("error"))
                self._send(ident, {"t": "ack", "rank": rank, "of": "done"})
            elif t == "here":
                self._here(idx, msg)
            elif t == "abort":
                rank = int(msg["rank"])
                code = int(msg["code"])
                text = f": {msg['msg']}" if msg.get("msg") else ""
                if st.fail(code, f"{st.where([rank])} called amnet.abort({code}){text}", rank):
                    st.failure.code = code
                self._send(ident, {"t": "ack", "rank": rank, "of": "abort"})
        elif kind == "agent" and t == "exit":
            proc = int(msg["proc"])
            if st.topo.node_of_proc(proc) == idx:
                st.proc_exited(proc, int(msg["code"]))
                self._here(proc, None)  # it will not answer a where any more
        elif kind == "agent" and t == "here":
            self._agent_here(idx, msg)
        elif kind == "agent" and t == "teardown":  # the agent stopped its node on its own
            st.fail(1, f"the agent of node {idx} (host {self.agent_host.get(idx, '?')}) "
                       f"stopped its node: {msg.get('why', '?')}")
        if st.failure is not None:
            self.teardown()

    def _hello(self, ident: bytes, msg: dict[str, Any]) -> None:
        st = self.state
        if msg.get("kind") == "agent":
            node = int(msg["node"])
            if not self._admit(ident, "agent", node, st.topo.nodes, self.agent_ident):
                return
            self.agent_host[node] = str(msg.get("host", "?"))
            for p, pid in (msg.get("procs") or {}).items():
                if st.topo.node_of_proc(int(p)) == node:
                    self.rank_pids[int(p)] = int(pid)
            for p in st.topo.procs_of_node(node):
                st.proc_host.setdefault(p, self.agent_host[node])
            if self.tearing_down:
                self._send(ident, self._abort_msg())
        elif msg.get("kind") == "proc":
            proc = int(msg["proc"])
            if not self._admit(ident, "proc", proc, st.topo.procs, self.proc_ident):
                return
            st.proc_host[proc] = str(msg.get("host", "?"))
            for rank, code in msg.get("done") or ():
                if st.topo.proc_of(int(rank)) == proc:
                    st.rank_done(int(rank), int(code), None, None)
            if self.tearing_down:
                self._send(ident, self._abort_msg())
            elif st.failure is not None:
                self.teardown()
        else:
            self._refuse(ident)

    def _admit(self, ident: bytes, kind: str, i: int, count: int,
               idents: dict[int, bytes]) -> bool:
        """Admit the hello of ``kind`` ("agent" or "proc") number ``i``, of ``count``: known
        by ``ident`` from now on (in ``idents`` too, that kind's by number), or refused
        (False) when ``i`` is out of range or was admitted already."""
        if not 0 <= i < count or i in idents:
            self._refuse(ident)
            return False
        self.idents[ident] = (kind, i)
        idents[i] = ident
        return True

    # -- lifecycle --------------------------------------------------------------------------
    def _abort_msg(self) -> dict[str, Any]:
        f = self.state.failure
        return {"t": "abort", "reason": f.diagnosis if f else "job stopped",
                "code": f.code if f else 1}

    def teardown(self) -> None:
        """Stop every process of the job: abort message now, kill after TEARDOWN_S.

        While the launcher asks where the ranks are (``_stop``), teardown waits for the
        answers: ``_diagnose`` calls it once they are in.
        """
        if self.tearing_down or self.diagnosing is not None:
            return
        self.tearing_down = True
        msg = self._abort_msg()
        for ident in (*self.proc_ident.values(), *self.agent_ident.values()):
            self._send(ident, msg)
        self.loop.call_later(TEARDOWN_S, self._kill_all)
        if self.unresponsive:  # an agent that did not answer will not stop its node either
            self._kill_unresponsive()

    def _kill_all(self) -> None:
        for ln in self.launched:
            ln.kill()

    def _kill_unresponsive(self) -> None:
        """Kill what carries an agent that did not answer where its ranks were (stopped, or
        stuck): it would neither stop its node's processes nor report their ends, nor relay
        their output. Its rank processes die with it (their parent-death signal);
        ``_stop_launched`` kills what is left and removes its node's shared objects. A launch
        that carries the agents of several nodes (srun, mpirun) is killed at once only when
        none of them answered: the others still tear their nodes down in order, and the
        launch is killed after ``TEARDOWN_S`` as usual."""
        for ln in self.launched:
            if ln.process.returncode is None and all(n in self.unresponsive for n in ln.nodes):
                ln.killed_unresponsive = True
                ln.kill()

    async def _stop_launched(self) -> None:
        """Make sure nothing of the job is left: agents, their ranks, the ranks' children."""
        live = [ln for ln in self.launched if ln.process.returncode is None]
        for ln in live:  # an agent stops its ranks' process groups on SIGTERM
            ln.signal(signal.SIGTERM)
        if live:
            try:
                await asyncio.wait_for(asyncio.gather(*(ln.process.wait() for ln in live)),
                                       STOP_S)
            except (TimeoutError, asyncio.CancelledError):
                pass
        for ln in self.launched:
            ln.kill()
            if not self.spawner.remote:  # what a wrapper left in its session
                ln.kill_group()
        if not self.spawner.remote:  # ranks whose agent died before reporting their end
            for proc, pid in self.rank_pids.items():
                if proc not in self.state.proc_exit:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if any(ln.killed_unresponsive for ln in self.launched):
                self._remove_shared_objects()  # what the agent we killed would have done

    def _remove_shared_objects(self) -> None:
        """What the agent we killed would have removed (amnet.launch.agent)."""
        why = remove_shared_objects(self.spec)
        if why is not None:
            self.write_err(f"amnet-run: could not remove shared objects: {why}\n".encode())

    def _on_signal(self, sig: int) -> None:
        self._stop(128 + sig, f"interrupted by {signal.Signals(sig).name}; ")

    def _on_timeout(self) -> None:
        self._stop(124, f"timed out after {self.timeout:g} s: ")

    def _stop(self, code: int, head: str) -> None:
        """A timeout or a signal: fail the job with ``head`` and where the ranks are, then
        tear it down.

        The launcher itself knows who waits in a bootstrap collective; for AM barriers it
        asks the rank processes (``where``, answered by their bootstrap I/O thread, whatever
        the ranks are doing) and waits at most WHERE_S for the answers. The failure is
        recorded at once with what the launcher knows, so nothing that happens meanwhile
        counts as the first failure; the diagnosis is refined when the answers are in. A
        second signal while asking stops the job at once.
        """
        st = self.state
        if self.diagnosing is not None:
            self.diagnosing.cancel()
        elif st.fail(code, head + st.describe_waits()):
            self.diagnosing = asyncio.ensure_future(self._diagnose(head))
        else:
            self.teardown()

    async def _diagnose(self, head: str) -> None:
        failure = self.state.failure
        try:
            procs = [p for p in self.proc_ident if p not in self.state.proc_exit]
            agents = [n for n in self.agent_ident if self._agent_running(n)]
            self.where_id += 1
            self.where_want, self.where_got = set(procs), {}
            self.where_agents = set(agents)
            self.where_done = asyncio.Event()
            for p in procs:
                self._send(self.proc_ident[p], {"t": "where", "id": self.where_id})
            for n in agents:  # an agent answers from its event loop: is it alive?
                self._send(self.agent_ident[n], {"t": "where", "id": self.where_id})
            if procs or agents:
                try:
                    await asyncio.wait_for(self.where_done.wait(), WHERE_S)
                except TimeoutError:
                    pass
            # an agent that ended meanwhile did not hang
            self.unresponsive = {n for n in self.where_agents if self._agent_running(n)}
            failure.diagnosis = head + self.state.describe_waits(
                self.where_got, self.where_want,
                {n: self.agent_host.get(n, "?") for n in self.unresponsive}, WHERE_S)
        finally:
            self.where_want = set()
            self.where_agents = set()
            self.diagnosing = None
            self.teardown()

    def _agent_running(self, node: int) -> bool:
        """Whether the process carrying node ``node``'s agent has not ended."""
        return any(node in ln.nodes and ln.process.returncode is None for ln in self.launched)

    def _agent_here(self, node: int, msg: dict[str, Any]) -> None:
        """Node ``node``'s agent answered a where (it is alive and its loop runs)."""
        if msg.get("id") != self.where_id or node not in self.where_agents:
            return
        self.where_agents.discard(node)
        self._maybe_where_done()

    def _maybe_where_done(self) -> None:
        if not self.where_want and not self.where_agents and self.where_done is not None:
            self.where_done.set()

    def _here(self, proc: int, msg: dict[str, Any] | None) -> None:
        """Process ``proc`` said where its ranks are (None: it ended, it will not say)."""
        if proc not in self.where_want or (msg is not None and msg.get("id") != self.where_id):
            return
        topo = self.topo
        for rank, entry in (msg or {}).get("ranks") or ():
            if (isinstance(rank, int) and 0 <= rank < topo.size and topo.proc_of(rank) == proc
                    and _where_entry_ok(entry)):
                self.where_got[rank] = entry
        self.where_want.discard(proc)
        self._maybe_where_done()

    async def _end_diagnosis(self) -> None:
        """The job is ending: stop asking where the ranks are (the diagnosis stays what the
        launcher knew)."""
        if self.diagnosing is not None:
            self.diagnosing.cancel()
            await asyncio.gather(self.diagnosing, return_exceptions=True)

    def _check_registered(self) -> None:
        missing = [n for n in range(self.topo.nodes) if n not in self.agent_ident]
        if missing and self.state.failure is None:
            self.state.fail(1, f"the agent of node {missing[0]} did not connect back within "
                               f"{REGISTER_S:g} s (bootstrap address {self.spec['bootstrap']})")
            self.teardown()

    async def _pinger(self) -> None:
        while True:
            await asyncio.sleep(PING_S)
            for ident in self.agent_ident.values():
                self._send(ident, {"t": "ping"})

    async def _watch_launched(self, ln: Launched, pumps: list[asyncio.Future]) -> None:
        code = await ln.process.wait()
        # Its last words first: they explain its end. A process it left behind may hold
        # its pipes open: once they are quiet, stop waiting for their end.
        while not all(p.done() for p in pumps):
            await asyncio.wait(pumps, timeout=DRAIN_S / 4)
            if all(pump.idle() for pump, task in zip(ln.pumps, pumps, strict=True)
                   if not task.done()):
                for task in pumps:
                    task.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        st = self.state
        # What it sent before exiting (hello, exit reports) may still sit unread in the
        # bootstrap socket: let the service catch up before judging (not when we killed it
        # for not answering: it sent nothing since).
        deadline = self.loop.time() + (0.0 if ln.killed_unresponsive else SETTLE_S)
        while self.loop.time() < deadline and not self._reported(ln):
            await asyncio.sleep(0.005)
        # never heard of, neither the agent nor any of its ranks: it did not start
        unregistered = [n for n in ln.nodes if n not in self.agent_ident and
                        not any(p in self.proc_ident for p in st.topo.procs_of_node(n))]
        if unregistered and not self.tearing_down:
            tail = " | ".join(ln.pumps[1].tail) if ln.pumps else ""
            st.fail(code if code > 0 else 1,
                    f"could not start the agent of node {unregistered[0]} {ln.where}: "
                    f"{ln.what} exited with code {code}" + (f": {tail}" if tail else ""))
            self.teardown()
            return
        lost = [p for n in ln.nodes for p in st.topo.procs_of_node(n) if p not in st.proc_exit]
        if lost and not self.tearing_down:
            st.fail(code if code > 0 else 1,
                    f"the agent of node {st.topo.node_of_proc(lost[0])} {ln.where} ended "
                    f"(code {code}) before its rank processes did")
            self.teardown()

    def _reported(self, ln: Launched) -> bool:
        procs = (p for n in ln.nodes for p in self.state.topo.procs_of_node(n))
        return ln.registered(self.agent_ident) and all(p in self.state.proc_exit for p in procs)

    def _final_checks(self) -> None:
        st = self.state
        missing = [p for p in range(st.topo.procs) if p not in st.proc_exit]
        if missing:
            ranks = st.topo.ranks_of_proc(missing[0])
            st.fail(1, f"no exit status was reported for {st.where(ranks)}")


def _where_entry_ok(e: Any) -> bool:
    """A well-formed answer about one rank (``ProcessState.where``)."""
    if not isinstance(e, list) or not e:
        return False
    if e[0] == "running":
        return len(e) == 2 and isinstance(e[1], int)
    if e[0] == "in":
        return len(e) == 3 and isinstance(e[1], int) and isinstance(e[2], str)
    return (e[0] == "barrier" and len(e) == 5 and isinstance(e[1], int)
            and (e[2] is None or isinstance(e[2], str)) and isinstance(e[3], bool)
            and isinstance(e[4], bool))


def run_job(spec: dict[str, Any], spawner: Spawner, *, timeout: float | None = None,
            out=None, err=None, handle_signals: bool = False,
            bootstrap_addr: str | None = None) -> Outcome:
    """Run a job to its end on a fresh uvloop event loop and return its :class:`Outcome`."""
    import uvloop

    job = Job(spec, spawner, timeout=timeout,
              write_out=stdout_writer(out or sys.stdout),
              write_err=stdout_writer(err or sys.stderr),
              handle_signals=handle_signals, bootstrap_addr=bootstrap_addr)

    def in_loop() -> Outcome:
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(job.run())
        finally:  # also when the job could not start (a spawner's error): writers end first
            job.out.join()
            job.err.join()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return in_loop()
    # called from inside a running loop (a notebook): run the job on a thread of its own
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(in_loop).result()


