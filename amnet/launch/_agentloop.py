"""The agent's event loop (asyncio on uvloop): output relay, exit reports, teardown."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import uvloop
import zmq

from .. import _protocol as proto
from ._zsock import LoopSocket
from .agent import GRACE_S, KILL_S, LAUNCHER_SILENCE_S


class _Relay:
    """Copies whole lines from a child's pipe to one of the agent's own output fds."""

    def __init__(self, loop, fd: int, out_fd: int, done) -> None:
        self.fd, self.out_fd, self.buf, self.done = fd, out_fd, b"", done
        os.set_blocking(fd, False)
        loop.add_reader(fd, self.on_readable, loop)

    def _write(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.out_fd, data):]
            except BlockingIOError:
                continue
            except OSError:  # our reader went away: drop output, keep managing the job
                return

    def on_readable(self, loop) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            data = self.buf + chunk
            cut = data.rfind(b"\n") + 1
            self.buf = data[cut:]
            if cut:
                self._write(data[:cut])
            return
        loop.remove_reader(self.fd)
        os.close(self.fd)
        if self.buf:
            self._write(self.buf + b"\n")
            self.buf = b""
        self.done()


class AgentLoop:
    def __init__(self, spec: dict, node: int, host: str, children: dict, watch_stdin: bool):
        self.spec, self.node, self.host = spec, node, host
        self.children = children  # proc -> (pid, r_out, r_err)
        self.watch_stdin = watch_stdin
        self.live = {p: c[0] for p, c in children.items()}
        self.open_pipes = 2 * len(children)
        self.tearing_down = False
        self.finished = None
        self.last_heard = 0.0

    def run(self) -> int:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self.main())

    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.finished = loop.create_future()
        self.last_heard = loop.time()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        sock.connect(self.spec["bootstrap"])
        self.sock = LoopSocket(loop, sock, self._on_frames)
        self._send({
            "t": "hello", "kind": "agent", "token": self.spec["token"], "node": self.node,
            "host": self.host, "pid": os.getpid(),
            "procs": {p: c[0] for p, c in self.children.items()}})
        for p, (pid, r_out, r_err) in self.children.items():
            _Relay(loop, r_out, 1, self._pipe_closed)
            _Relay(loop, r_err, 2, self._pipe_closed)
            pidfd = os.pidfd_open(pid)
            loop.add_reader(pidfd, self._reap, p, pid, pidfd)
        if self.watch_stdin:
            os.set_blocking(0, False)
            loop.add_reader(0, self._stdin_readable)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.teardown, "the agent was signalled")
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        watchdog = asyncio.ensure_future(self._watchdog())
        self._maybe_finish()
        await self.finished
        watchdog.cancel()
        self.sock.close(linger_ms=3000)  # what we reported still gets out
        ctx.term()
        return 0

    def _send(self, msg: dict) -> None:
        self.sock.send([proto.pack(msg)])

    # -- children --------------------------------------------------------------------------
    def _reap(self, proc: int, pid: int, pidfd: int) -> None:
        self.loop.remove_reader(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        self.live.pop(proc, None)
        try:  # whatever the rank process left in its process group goes with it
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        self._send({"t": "exit", "proc": proc, "pid": pid, "code": code})
        self._maybe_finish()

    def _pipe_closed(self) -> None:
        self.open_pipes -= 1
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if not self.live and self.open_pipes == 0 and not self.finished.done():
            self.finished.set_result(None)

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.live.values()):
            try:
                os.killpg(pid, sig)
            except OSError:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

    def teardown(self, why: str, grace: float = GRACE_S) -> None:
        if self.tearing_down:
            return
        self.tearing_down = True
        self.loop.call_later(grace, self._signal_all, signal.SIGTERM)
        self.loop.call_later(grace + KILL_S, self._signal_all, signal.SIGKILL)

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
            self.teardown("the launcher went away", grace=0.0)

    def _on_frames(self, frames: list[bytes]) -> None:
        self.last_heard = self.loop.time()
        try:
            msg = proto.unpack(frames[-1])
        except proto.ProtocolError:
            return
        if msg["t"] == "abort":
            self.teardown(msg.get("reason", "abort"))

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(2.0)
            if self.loop.time() - self.last_heard > LAUNCHER_SILENCE_S:
                print(f"amnet agent (node {self.node}, {self.host}): no word from amnet-run "
                      f"for {LAUNCHER_SILENCE_S:.0f} s; stopping this node", file=sys.stderr)
                self.teardown("launcher silent", grace=0.0)
                return
