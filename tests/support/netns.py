"""A network namespace of one's own (Linux, root): its own loopback, so a broker can listen
on localhost:5672 there while the shared RabbitMQ keeps 5672 outside. For test suites that
hard-code localhost:5672 (FastStream, Dramatiq) and for timing a RabbitMQ node's start.

Also a RabbitMQ node of one's own inside such a namespace (never the shared one): its own
node name, data and log directories, no plugins, stopped and its epmd ended on ``stop()``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.rabbitmq import RabbitMQServer, debian_installed
from tests.support.waiting import wait_for


def netns_available() -> bool:
    """True when ``unshare --net`` works here (root on Linux)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    proc = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return proc.returncode == 0


class NetNamespace:
    """A fresh network namespace, held open by a small process of ours. ``prefix`` runs a
    command inside it (``nsenter`` execs the command: the pid is the command's)."""

    def __init__(self) -> None:
        # The holder reads stdin until it closes: it goes when we do, even on a crash.
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", "exec cat >/dev/null"],
            stdin=subprocess.PIPE,
        )
        self.prefix = ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--"]
        self.inode = 0
        deadline = time.monotonic() + 10
        said = "the holder never left the namespace it was started in"
        while True:
            # The namespace is ours once the holder has got past unshare. Only then is its
            # loopback brought up: a 'set lo up' that ran a moment before went to the host's
            # namespace and succeeded there, and this one's loopback stayed down (an epmd then
            # bound, but nothing could reach it: CI, dramatiq).
            if self._own():
                self.inode = os.stat(f"/proc/{self.holder.pid}/ns/net").st_ino
                proc = self.run(["ip", "link", "set", "lo", "up"], capture_output=True)
                said = proc.stderr.strip()
                if proc.returncode == 0 and self._loopback_up():
                    break
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"cannot make a network namespace: {said}")
            time.sleep(0.05)

    def _own(self) -> bool:
        try:
            mine = Path(f"/proc/{self.holder.pid}/ns/net").readlink()
            return mine != Path("/proc/self/ns/net").readlink()
        except OSError:
            return False

    def _loopback_up(self) -> bool:
        """The namespace's own loopback is up (asked inside it)."""
        shown = self.run(["ip", "-o", "link", "show", "lo"], capture_output=True)
        flags = shown.stdout.partition("<")[2].partition(">")[0].split(",")
        return shown.returncode == 0 and "UP" in flags

    def run(self, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, *cmd], text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]

    def port_open(self, port: int, host: str = "127.0.0.1") -> bool:
        probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=1)"
        return self.run(["python3", "-c", probe], capture_output=True).returncode == 0

    def members(self) -> list[int]:
        """The processes in this namespace but its holder: all of them started by us."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            try:
                if self.inode and os.stat(entry / "ns" / "net").st_ino == self.inode:
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def _end_members(self) -> None:
        """End what is left inside (an epmd a RabbitMQ node or its CLI started), by pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.members()
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            if wait_for(functools.partial(_all_gone, pids), 5, 0.05):
                return

    def close(self) -> None:
        self._end_members()
        if self.holder.poll() is None:
            assert self.holder.stdin is not None
            self.holder.stdin.close()
            try:
                self.holder.wait(5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait(5)

    def __enter__(self) -> NetNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RabbitMQNode:
    """``rabbitmq-server`` in ``netns`` on ``port``, with its own node name and directories
    (owned by the rabbitmq user, as the Debian wrapper drops to it), no plugins: the
    launcher's core (tests/support/rabbitmq.py) with the namespace's ``nsenter`` prefix."""

    def __init__(
        self,
        netns: NetNamespace,
        port: int = 5672,
        nodename: str = "leveretown@localhost",
        tls: tuple[Path, Path, Path] | None = None,
        tls_port: int = 5671,
    ) -> None:
        """``tls``: (CA, certificate, key) for an amqps listener on ``tls_port``, with
        verify_peer and no fail_if_no_peer_cert (the client test suites' own setups)."""
        self.netns = netns
        self.port = port
        self.nodename = nodename
        self.base = Path(tempfile.mkdtemp(prefix="leveret-rabbitmq-"))
        conf = None  # no rabbitmq.conf without TLS: the defaults
        if tls is not None:
            certs = self.base / "certs"
            certs.mkdir()
            names = ("ca.pem", "server.pem", "server.key")
            for source, name in zip(tls, names, strict=True):
                shutil.copy(source, certs / name)
            conf = [
                f"listeners.ssl.default = {tls_port}",
                f"ssl_options.cacertfile = {certs / 'ca.pem'}",
                f"ssl_options.certfile = {certs / 'server.pem'}",
                f"ssl_options.keyfile = {certs / 'server.key'}",
                "ssl_options.verify = verify_peer",
                "ssl_options.fail_if_no_peer_cert = false",
            ]
        self.server = RabbitMQServer(
            self.base, nodename, port, conf=conf, as_rabbitmq_user=True, prefix=netns.prefix
        )
        self.env = self.server.env

    @staticmethod
    def available() -> bool:
        return debian_installed()

    def start(self) -> float:
        """Start it; returns the seconds until it answered an AMQP protocol header (epmd
        included)."""
        started = time.monotonic()
        # epmd first, and listening: a node that starts it itself in a fresh namespace can
        # race it and fail with 'nodistribution'
        said = []
        for _ in range(3):  # started again if it is not listening within 15 s
            ran = self.netns.run(
                ["epmd", "-daemon", "-relaxed_command_check"], capture_output=True, timeout=30
            )
            said.append(f"exit {ran.returncode}: {ran.stdout.strip()} {ran.stderr.strip()}")
            if wait_for(lambda: self.netns.port_open(4369), 15, 0.1):
                break
        else:
            raise RuntimeError(f"epmd did not start in the namespace ({'; '.join(said)})")
        self.server.launch()
        self.server.await_ready(self._accepts, started + 120 - time.monotonic(), 0.05)
        return time.monotonic() - started

    def _accepts(self) -> bool:
        probe = (
            "import socket,sys\n"
            f"s=socket.create_connection(('127.0.0.1',{self.port}),timeout=1)\n"
            "s.sendall(b'AMQP\\x00\\x00\\x09\\x01')\n"
            "sys.exit(0 if s.recv(1)==b'\\x01' else 1)\n"
        )
        return self.netns.run(["python3", "-c", probe], capture_output=True).returncode == 0

    def stop(self) -> None:
        self.server.stop(ctl_timeout=60, wait=30)

        # our epmd, inside the namespace (the shared node's is outside it); relaxed: it goes
        # even while a node is still registered
        def ended() -> bool:
            self.netns.run(["epmd", "-kill"], capture_output=True, timeout=30)
            return not self.netns.port_open(4369)

        wait_for(ended, 15, 0.2)
        shutil.rmtree(self.base, ignore_errors=True)


def _all_gone(pids: list[int]) -> bool:
    return not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie nobody reaps here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
