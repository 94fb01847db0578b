"""Real hosts for the tests: network namespaces on this machine, each with its own address and
its own ``sshd``, reached with the real ``ssh`` client.

``SshHosts(n)`` brings up ``n`` hosts ``10.214.K.2`` (network namespace and host name
``amhost-TAG-K``, a UTS namespace of its own), each joined to this namespace by a veth pair
(``10.214.K.1`` on this side) and routed through it, so the hosts reach each other too (IPv4
forwarding on while they exist). Every run makes its own keys (a client key, a host key per
host) in a temporary directory, writes an ssh client configuration there that trusts exactly
those host keys, and puts a directory first on ``PATH`` (``env()``) whose ``ssh`` runs
``/usr/bin/ssh -F`` that configuration: amnet's ssh spawner, which runs ``ssh HOST ...``, then
logs into the namespaces' sshd as root with the run's key. Nothing is written outside the
temporary directory except what must live elsewhere: the namespaces (``/run/netns``), sshd's
privilege-separation directory (``/run/sshd``, removed again if this made it) and
``net.ipv4.ip_forward`` (restored).

Needs root, iproute2, OpenSSH's server and client (Debian: ``openssh-server``). As a script,
for trying amnet by hand: ``sudo python tests/cluster/sshhosts.py 2`` brings up two hosts,
prints how to reach them, and takes them down on Enter; ``sshhosts.py 2 -- CMD`` runs the
shell command CMD with them (``$HOSTS``: their addresses) and takes them down after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import clusterbase

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
NEEDS = ("ip", "unshare", "ssh-keygen", SSHD, SSH)


def missing() -> str | None:
    """Why hosts cannot be made here (None: they can)."""
    return clusterbase.missing(NEEDS, "network namespaces, sshd",
                               "iproute2 openssh-server openssh-client")


def _run(*cmd: str) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip() or p.returncode}")
    return p.stdout


def _other_sshd() -> bool:
    """Whether an sshd process still runs on this machine (in any namespace)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "sshd":
                        return True
            except OSError:
                pass
    return False


class SshHosts(clusterbase.Part):
    """``n`` hosts with sshd (see the module docstring); a context manager."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.tag = uuid.uuid4().hex[:6]
        base = int(self.tag[:2], 16) % 50 * 4 + 20  # 10.214.base+k: apart from other runs
        self.ips = [f"10.214.{base + k}.2" for k in range(n)]
        self.gateways = [f"10.214.{base + k}.1" for k in range(n)]
        self.namespaces = [f"amhost-{self.tag}-{k}" for k in range(n)]
        self.names = self.namespaces  # each host's host name (its own UTS namespace)
        self.links = [f"amh{self.tag}{k}" for k in range(n)]  # this side of each veth pair
        self.dir = Path(tempfile.mkdtemp(prefix="amnet-hosts-"))
        self.bindir = self.dir / "bin"
        self._made_run_sshd = False
        self._forward: str | None = None
        self._up: list[str] = []  # namespaces made so far (to take down)

    # -- up and down ------------------------------------------------------------------------
    def _start(self) -> None:
        self._network()
        self._keys()
        for k in range(self.n):
            self._sshd(k)
        self._wait_ssh()

    def _network(self) -> None:
        fwd = Path("/proc/sys/net/ipv4/ip_forward")
        self._forward = fwd.read_text().strip()
        fwd.write_text("1")
        for k in range(self.n):
            ns, link, peer = self.namespaces[k], self.links[k], self.links[k] + "p"
            _run("ip", "netns", "add", ns)
            self._up.append(ns)
            _run("ip", "link", "add", link, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", ns)
            _run("ip", "addr", "add", f"{self.gateways[k]}/24", "dev", link)
            _run("ip", "link", "set", link, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.ips[k]}/24", "dev", peer)
            _run("ip", "-n", ns, "link", "set", peer, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "route", "add", "default", "via", self.gateways[k])

    def _keys(self) -> None:
        d = self.dir
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "amnet-test-client",
             "-f", str(d / "client"))
        (d / "authorized_keys").write_text((d / "client.pub").read_text())
        known = []
        for k in range(self.n):
            key = d / f"host{k}"
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"host{k}", "-f", str(key))
            typ, blob = (d / f"host{k}.pub").read_text().split()[:2]
            known.append(f"{self.ips[k]} {typ} {blob}")
        (d / "known_hosts").write_text("\n".join(known) + "\n")
        (d / "ssh_config").write_text(
            "Host *\n  User root\n"
            f"  IdentityFile {d / 'client'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {d / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
        self.bindir.mkdir()
        wrapper = self.bindir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F {d / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)

    def _sshd(self, k: int) -> None:
        run_sshd = Path("/run/sshd")
        if not run_sshd.exists():
            run_sshd.mkdir(mode=0o755)
            self._made_run_sshd = True
        d = self.dir
        cfg = d / f"sshd{k}.conf"
        cfg.write_text(
            f"ListenAddress {self.ips[k]}\nPort 22\nHostKey {d / f'host{k}'}\n"
            f"PidFile {d / f'sshd{k}.pid'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n"
            "LogLevel ERROR\n")
        # its own host name too (a UTS namespace): what amnet reports a rank's host as
        _run("ip", "netns", "exec", self.namespaces[k], "unshare", "--uts", "sh", "-c",
             f'hostname "$1" && exec {SSHD} -f "$2" -E "$3"', "sh", self.names[k], str(cfg),
             str(d / f"sshd{k}.log"))

    def _wait_ssh(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        for ip in self.ips:
            while True:
                p = subprocess.run([str(self.bindir / "ssh"), "-o", "BatchMode=yes",
                                    "-o", "ConnectTimeout=2", ip, "true"],
                                   capture_output=True, text=True, stdin=subprocess.DEVNULL)
                if p.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {ip} did not answer: {p.stderr.strip()}")
                time.sleep(0.1)

    def close(self) -> None:
        """Stop the sshds, remove the namespaces and links, restore what was changed."""
        for k in range(self.n):
            pidfile = self.dir / f"sshd{k}.pid"
            try:
                os.kill(int(pidfile.read_text()), 15)
            except (OSError, ValueError):
                pass
        for ns in self._up:
            # what still runs in the namespace (a job's leftovers, sshd's sessions) goes too
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self._up = []
        if self._forward is not None:
            Path("/proc/sys/net/ipv4/ip_forward").write_text(self._forward)
            self._forward = None
        if self._made_run_sshd and not _other_sshd():
            # only once no sshd needs it: another run's hosts (or the system's sshd) may
            # have started since, and sshd refuses connections without it
            shutil.rmtree("/run/sshd", ignore_errors=True)
        self._made_run_sshd = False
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- using them -------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """An environment whose ``ssh`` reaches these hosts (the wrapper first on PATH)."""
        return {"PATH": f"{self.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def ns_inode(self, k: int) -> int:
        """The inode of host ``k``'s network namespace (``/proc/PID/ns/net`` of its sshd):
        a process is on host ``k`` when its own ``/proc/self/ns/net`` has it."""
        pid = int((self.dir / f"sshd{k}.pid").read_text())
        return os.stat(f"/proc/{pid}/ns/net").st_ino


if __name__ == "__main__":
    import sys

    why = missing()
    if why:
        sys.exit(f"sshhosts: {why}")
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 2
    with SshHosts(n) as h:
        print(f"hosts {','.join(h.ips)} ({', '.join(h.names)}), each with its own sshd",
              flush=True)
        if args and args[0] == "--":  # run a command with them (HOSTS: their addresses)
            env = {**os.environ, **h.env(), "HOSTS": ",".join(h.ips)}
            code = subprocess.run(["sh", "-c", " ".join(args[1:])], env=env).returncode
        else:
            print(f"reach them with: PATH={h.bindir}:$PATH amnet-run --spawner ssh "
                  f"--hosts {','.join(h.ips)} -n 4 --nodes {h.n} examples/hello.py")
            input("Enter takes them down. ")
            code = 0
    sys.exit(code)
