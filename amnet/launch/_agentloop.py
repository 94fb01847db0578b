"""The agent's event loop (asyncio on uvloop): output relay, exit reports, teardown."""

from __future__ import annotations

import asyncio
import os
import signal

import uvloop
import zmq

from .. import _protocol as proto
from .._security import apply_client
from ._output import FdOut
from ._zsock import LoopSocket
from .agent import GRACE_S, KILL_S, LAUNCHER_SILENCE_S, remove_shared_objects, stop_children

DRAIN_S = 1.0  # after a rank process ends: how long its pipes may stay silent before we stop


class _Relay:
    """Copies whole lines from a rank process's pipe to one of the agent's outputs."""

    def __init__(self, loop, fd: int, out: FdOut, done) -> None:
        self.loop, self.fd, self.out, self.done = loop, fd, out, done
        self.buf = b""
        self.open = True
        self.paused = False
        self.last = loop.time()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self.on_readable)

    def on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.last = self.loop.time()
        data = self.buf + chunk
        cut = data.rfind(b"\n") + 1
        self.buf = data[cut:]
        if cut:
            self.out.write(data[:cut])
        if self.out.full:  # backpressure: stop reading until the launcher caught up
            self.paused = True
            self.loop.remove_reader(self.fd)
            self.out.when_drained(self.resume)

    def resume(self) -> None:
        if self.open and self.paused:
            self.paused = False
            self.last = self.loop.time()
            self.loop.add_reader(self.fd, self.on_readable)

    def idle(self) -> bool:
        return not self.paused and self.loop.time() - self.last > DRAIN_S

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        if not self.paused:
            self.loop.remove_reader(self.fd)
        os.close(self.fd)
        if self.buf:
            self.out.write(self.buf + b"\n")
            self.buf = b""
        self.done()


class AgentLoop:
    def __init__(self, spec: dict, node: int, host: str, children: dict, watch_stdin: bool):
        self.spec, self.node, self.host = spec, node, host
        self.children = children  # proc -> (pid, r_out, r_err)
        self.watch_stdin = watch_stdin
        self.live = {p: c[0] for p, c in children.items()}
        self.relays: dict[int, list[_Relay]] = {}
        self.tearing_down = False
        self.launcher_gone = False
        self.parent = os.getppid()
        self.finished = None
        self.last_heard = 0.0
        self.heard = False  # anything from amnet-run yet (else: its address is unreachable)

    def run(self) -> int:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self.main())

    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.finished = loop.create_future()
        self.last_heard = loop.time()
        self.outs = outs = FdOut(loop, 1), FdOut(loop, 2)
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, proto.client_id(self.spec["token"], "a", self.node))
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        apply_client(sock, self.spec.get("curve"), self.spec["token"])
        sock.connect(self.spec["bootstrap"])
        self.sock = LoopSocket(loop, sock, self._on_frames)
        self._send({
            "t": "hello", "kind": "agent", "token": self.spec["token"], "node": self.node,
            "host": self.host, "pid": os.getpid(),
            "procs": {p: c[0] for p, c in self.children.items()}})
        for p, (pid, r_out, r_err) in self.children.items():
            self.relays[p] = [_Relay(loop, r_out, outs[0], self._maybe_finish),
                              _Relay(loop, r_err, outs[1], self._maybe_finish)]
            pidfd = os.pidfd_open(pid)
            loop.add_reader(pidfd, self._reap, p, pid, pidfd)
        if self.watch_stdin:
            os.set_blocking(0, False)
            loop.add_reader(0, self._stdin_readable)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self._signalled, sig)
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        # Without a standard input from the launcher (srun, mpirun), its silence tells.
        watchdog = None if self.watch_stdin else asyncio.ensure_future(self._watchdog())
        self._maybe_finish()
        await self.finished
        if watchdog:
            watchdog.cancel()
        stop_children()  # what the ranks started and left: ours, as a subreaper
        self._remove_shared_objects()
        for out in outs:
            await out.drained()
        # what we reported still gets out; when our pipe from the launcher closed, it may
        # be gone, or alive with our hello and last words still queued (the connection's
        # handshake not done: a spawn command that ended at once), so they get a second
        self.sock.close(linger_ms=1000 if self.launcher_gone else 3000)
        ctx.term()
        return 0

    def _remove_shared_objects(self) -> None:
        """Names of the node's PSHM objects that a rank killed early left behind (the ranks
        remove them once mapped; this covers a kill -9 before that)."""
        why = remove_shared_objects(self.spec)
        if why is not None:
            self.outs[1].write(f"amnet agent: could not remove shared objects: {why}\n".encode())

    def _send(self, msg: dict) -> None:
        self.sock.send([proto.pack(msg)])

    # -- rank processes ---------------------------------------------------------------------
    def _reap(self, proc: int, pid: int, pidfd: int) -> None:
        self.loop.remove_reader(pidfd)
        os.close(pidfd)
        try:  # what the rank process left in its group goes with it (before the reap frees
            os.killpg(pid, signal.SIGKILL)  # the pid for reuse)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        self.live.pop(proc, None)
        self._send({"t": "exit", "proc": proc, "pid": pid, "code": code})
        self.loop.call_later(DRAIN_S, self._drop_held_pipes, proc)
        self._maybe_finish()

    def _drop_held_pipes(self, proc: int) -> None:
        """A process that left the rank's group (a daemon) may hold its pipes open: once they
        are quiet, stop waiting for their end."""
        pending = [r for r in self.relays[proc] if r.open]
        for r in pending:
            if r.idle():
                r.close()
        if any(r.open for r in pending):
            self.loop.call_later(DRAIN_S / 2, self._drop_held_pipes, proc)

    def _maybe_finish(self) -> None:
        open_pipes = any(r.open for rs in self.relays.values() for r in rs)
        if not self.live and not open_pipes and not self.finished.done():
            self.finished.set_result(None)

    def _signalled(self, sig: signal.Signals) -> None:
        if os.getppid() != self.parent:  # orphaned: our parent (the launcher) died
            self.launcher_gone = True
        self.teardown(f"the agent got {sig.name}", 0.0, True)

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.live.values()):
            try:
                os.killpg(pid, sig)
            except OSError:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def teardown(self, why: str, grace: float = GRACE_S, own: bool = False) -> None:
        """Stop this node's ranks: SIGTERM after ``grace`` s, SIGKILL ``KILL_S`` s later.

        ``own``: the agent decided it (not the launcher), so it says why.
        """
        if self.tearing_down:
            return
        self.tearing_down = True
        self.loop.call_later(grace, self._signal_all, signal.SIGTERM)
        self.loop.call_later(grace + KILL_S, self._signal_all, signal.SIGKILL)
        if own:  # through the non-blocking output: the launcher may be gone
            self.outs[1].write(f"amnet agent (node {self.node}, {self.host}): stopping this "
                               f"node: {why}\n".encode())
            self._send({"t": "teardown", "why": why})

    # -- launcher --------------------------------------------------------------------------
    def _stdin_readable(self) -> None:
        try:
            data = os.read(0, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the launcher (or the ssh carrying us) is gone
            self.loop.remove_reader(0)
            self.launcher_gone = True
            self.teardown("amnet-run went away (its pipe to this agent closed)", 0.0, True)

    def _on_frames(self, frames: list[bytes]) -> None:
        self.last_heard = self.loop.time()
        self.heard = True
        try:
            msg = proto.unpack(frames[-1])
        except proto.ProtocolError:
            return
        if msg["t"] == "abort":
            self.teardown(msg.get("reason", "abort"))
        elif msg["t"] == "where":  # the launcher diagnoses a timeout: we are alive
            self._send({"t": "here", "id": msg.get("id")})

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(2.0)
            if self.loop.time() - self.last_heard > LAUNCHER_SILENCE_S:
                self.launcher_gone = True
                why = f"no word from amnet-run for {LAUNCHER_SILENCE_S:.0f} s"
                if not self.heard:  # it never answered: this host cannot reach its address
                    why += (f" (never reached it at {self.spec['bootstrap']}: give amnet-run "
                            "--bootstrap-addr an address of its host that the nodes reach)")
                self.teardown(why, 0.0, True)
                return

