"""A RabbitMQ node of a test's own: its own node name, ports, data and log directories,
so its watermarks can be changed and it can be killed without touching the shared
reference broker on 5672. Used by tests and benchmarks that need RabbitMQ configured as
Leveret is (memory watermark, disk limit, data on a small file system, kill -9)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def installed() -> bool:
    return (RABBITMQ_BIN / "rabbitmq-server").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RabbitNode:
    """``rabbitmq-server`` started with environment variables of its own.

    ``base``: where its data (``mnesia``) lives, e.g. on a small tmpfs; its home (Erlang
    cookie), config and logs are in a temporary directory."""

    def __init__(
        self,
        base: Path | None = None,
        config: dict[str, str] | None = None,
        management: bool = False,
    ) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="rabbitnode-"))
        self.base = Path(base) if base is not None else self.home / "mnesia"
        self.name = f"lev{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.http_port = free_port() if management else 0
        self.host = "127.0.0.1"
        lines = [f"listeners.tcp.default = 127.0.0.1:{self.port}", "loopback_users = none"]
        if management:
            lines += [f"management.tcp.port = {self.http_port}", "management.tcp.ip = 127.0.0.1"]
        lines += [f"{k} = {v}" for k, v in (config or {}).items()]
        (self.home / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        plugins = "[rabbitmq_management]." if management else "[]."
        (self.home / "enabled_plugins").write_text(plugins + "\n")
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base),
            "RABBITMQ_LOG_BASE": str(self.home / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.home / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.home / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.home / "pid"),
            "RABBITMQ_USE_LONGNAME": "false",
        }
        self.wrapper: subprocess.Popen[bytes] | None = None
        self.pid = 0  # the Erlang VM (beam.smp)

    # ------------------------------------------------------------------ life
    def start(self, timeout: float = 90) -> RabbitNode:
        with contextlib.suppress(FileNotFoundError):
            (self.home / "pid").unlink()
        log = open(self.home / "server.out", "ab")  # noqa: SIM115 - the child keeps it
        self.wrapper = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.wrapper.poll() is not None:
                raise RuntimeError("rabbitmq-server exited: " + self.output())
            ok = self.ctl("await_startup", "--timeout", "5", check=False)
            if ok.returncode == 0 and (self.home / "pid").exists():
                self.pid = int((self.home / "pid").read_text().split()[0])
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("rabbitmq-server did not start: " + self.output())

    def output(self) -> str:
        try:
            return (self.home / "server.out").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def ctl(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.name, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {result.stderr or result.stdout}")
        return result

    def kill9(self) -> None:
        """As a crash: SIGKILL to the Erlang VM, then wait for the wrapper to go."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._reap()
        self.pid = 0

    def stop(self) -> None:
        if self.pid and self.wrapper is not None and self.wrapper.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.ctl("stop", check=False, timeout=60)
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._reap()
        self.pid = 0

    def _reap(self) -> None:
        if self.wrapper is None:
            return
        try:
            self.wrapper.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.wrapper.pid, signal.SIGKILL)
            self.wrapper.wait(10)
        # epmd forgets the node by itself; the VM's children (erl_child_setup) go with it

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    # ------------------------------------------------------------------ figures
    def rss(self) -> int:
        """The Erlang VM's resident memory in bytes."""
        return rss_of(self.pid)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
