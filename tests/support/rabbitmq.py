"""RabbitMQ nodes of one's own, never the shared reference broker on 5672: one core,
``RabbitMQServer``, that every launcher of the tests and benchmarks parameterises.

The core writes a node's files (``rabbitmq.conf``, ``enabled_plugins``, an empty
``rabbitmq-env.conf`` so that nothing of /etc/rabbitmq's applies), gives it an environment
of its own (``RABBITMQ_NODENAME``, ``RABBITMQ_NODE_PORT``, ``RABBITMQ_DIST_PORT``,
``RABBITMQ_MNESIA_BASE``, ``RABBITMQ_LOG_BASE``, ``RABBITMQ_PID_FILE``, …), starts
``rabbitmq-server`` (in the foreground, a child of ours in a session of its own, or
``-detached``), waits until the caller's probe says it is up, and stops it with
``rabbitmqctl stop`` and then ``SIGKILL`` to the pid the node wrote: never by name.

The variants:

- ``RabbitNode`` (here): a single node, configured as Leveret is (memory watermark, disk
  limit, data on a small file system, kill -9), used by tests and benchmarks.
- ``tests.support.tlsnode.TlsRabbitMQ``: amqps, SASL EXTERNAL and the management API over
  HTTPS.
- ``tests.support.rabbitmq_cluster.RabbitCluster``: three nodes joined into a cluster.
- ``tests.support.netns.RabbitMQNode``: a node inside a network namespace of one's own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.support.ports import free_port
from tests.support.waiting import wait_for

# RabbitMQ's own scripts: run as root, the node runs as root.
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


def installed() -> bool:
    return (RABBITMQ_BIN / "rabbitmq-server").exists()


def debian_script(name: str) -> str | None:
    """Debian's wrapper of one of RabbitMQ's commands (run as root, it drops to the
    rabbitmq user), on PATH or in /usr/sbin; None when it is not installed."""
    found = shutil.which(name)
    if found is not None:
        return found
    path = Path("/usr/sbin") / name
    return str(path) if path.exists() else None


def debian_installed() -> bool:
    return debian_script("rabbitmq-server") is not None


class RabbitMQServer:
    """One ``rabbitmq-server`` of our own: its files in ``directory``, its environment,
    its process.

    ``conf``: the lines of its rabbitmq.conf (None: no file, RabbitMQ's defaults).
    ``mnesia``: where its data lives (default ``directory/mnesia``, e.g. a small tmpfs).
    ``home``: its HOME (the Erlang cookie); ``extra_env``: more variables.
    ``as_rabbitmq_user``: started through Debian's wrappers, which drop to the rabbitmq
    user (its files are then owned by it); else RabbitMQ's own scripts, as root.
    ``prefix``: a command that execs the server and rabbitmqctl (``nsenter …``)."""

    def __init__(
        self,
        directory: Path,
        nodename: str,
        port: int,
        *,
        dist_port: int | None = None,
        conf: Sequence[str] | None = None,
        plugins: Sequence[str] = (),
        mnesia: Path | None = None,
        home: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        as_rabbitmq_user: bool = False,
        prefix: Sequence[str] = (),
    ) -> None:
        self.dir = Path(directory)
        self.nodename = nodename
        self.port = port
        self.dist_port = dist_port
        self.mnesia = Path(mnesia) if mnesia is not None else self.dir / "mnesia"
        self.as_rabbitmq_user = as_rabbitmq_user
        self.prefix = list(prefix)
        self.pid_file = self.dir / "pid"
        for path in (self.dir, self.mnesia, self.dir / "log"):
            path.mkdir(parents=True, exist_ok=True)
        (self.dir / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
        (self.dir / "rabbitmq-env.conf").write_text("")
        if conf is not None:
            (self.dir / "rabbitmq.conf").write_text("\n".join([*conf, ""]))
        if as_rabbitmq_user:
            self.dir.chmod(0o755)
            for path in [self.dir, *self.dir.rglob("*")]:
                shutil.chown(path, "rabbitmq", "rabbitmq")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        if home is not None:
            self.env["HOME"] = str(home)
        self.env.update(
            RABBITMQ_NODENAME=nodename,
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_MNESIA_BASE=str(self.mnesia),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq"),  # rabbitmq.conf, if written
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.dir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(self.dir / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(self.pid_file),
            RABBITMQ_USE_LONGNAME="false",
        )
        if dist_port is not None:
            self.env["RABBITMQ_DIST_PORT"] = str(dist_port)
        self.env.update(extra_env or {})
        self.process: subprocess.Popen[bytes] | None = None  # the foreground server
        self.pid = 0  # the Erlang VM (beam.smp), once known

    # ------------------------------------------------------------------ commands
    def script(self, name: str) -> str:
        if self.as_rabbitmq_user:
            return debian_script(name) or f"/usr/sbin/{name}"
        return str(RABBITMQ_BIN / name)

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS`` with the node's environment."""
        return subprocess.run(
            [*self.prefix, self.script("rabbitmqctl"), "-n", self.nodename, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    # ------------------------------------------------------------------ life
    def launch(self) -> None:
        """Start ``rabbitmq-server`` in the foreground: a child of ours, in a session of
        its own, its output in ``server.out``."""
        self.pid_file.unlink(missing_ok=True)
        self.pid = 0
        with open(self.dir / "server.out", "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, self.script("rabbitmq-server")],
                env=self.env,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def launch_detached(self) -> None:
        """``rabbitmq-server -detached``: the node is not our child; its pid is in its pid
        file or asked of it."""
        self.pid_file.unlink(missing_ok=True)
        self.pid = 0
        subprocess.run([*self.prefix, self.script("rabbitmq-server"), "-detached"],
                       env=self.env, check=True, capture_output=True, timeout=60)  # fmt: skip

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def await_ready(self, ready: Callable[[], bool], timeout: float, interval: float) -> None:
        """Wait until ``ready()``. When the server exits first or ``timeout`` seconds pass,
        stop it and raise RuntimeError with the end of its output."""

        def state() -> str:
            if self.exited():
                return "exited"
            return "ready" if ready() else ""

        reached = wait_for(state, timeout, interval)
        if reached == "ready":
            return
        tail = self.output()
        self.stop()
        said = "exited" if reached else "did not start"
        raise RuntimeError(f"rabbitmq-server ({self.nodename}) {said}: {tail}")

    def output(self, size: int = 3000) -> str:
        try:
            return (self.dir / "server.out").read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def read_pid(self) -> int:
        """The pid the node wrote (0 before it has)."""
        try:
            return int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        pid = self.pid or self.read_pid()
        return bool(pid) and _exists(pid)

    def kill(self) -> None:
        """As a crash: SIGKILL to the Erlang VM, by its pid, then wait until it is gone
        (the foreground server reaped; its session killed if it lingers)."""
        pid = self.pid or self.read_pid()
        if pid and self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process is not None:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        elif pid:
            wait_for(lambda: not _exists(pid), 30, 0.1)
        # epmd forgets the node by itself; the VM's children (erl_child_setup) go with it
        self.pid = 0

    def stop(self, ctl_timeout: float = 60, wait: float = 60) -> None:
        """``rabbitmqctl stop``, then whatever is left is killed by its pid."""
        if self.running():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.ctl("stop", timeout=ctl_timeout)
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(wait)
        self.kill()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RabbitNode:
    """A single node: ``rabbitmq-server`` started with environment variables of its own.

    ``base``: where its data (``mnesia``) lives, e.g. on a small tmpfs; its home (Erlang
    cookie), config and logs are in a temporary directory."""

    def __init__(
        self,
        base: Path | None = None,
        config: dict[str, str] | None = None,
        management: bool = False,
        plugins: Sequence[str] = (),
        advanced: str | None = None,
    ) -> None:
        """``plugins``: more plugins to enable; ``advanced``: an advanced.config (Erlang
        terms) for settings rabbitmq.conf does not have."""
        self.home = Path(tempfile.mkdtemp(prefix="rabbitnode-"))
        self.name = f"lev{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.http_port = free_port() if management else 0
        self.host = "127.0.0.1"
        lines = [f"listeners.tcp.default = 127.0.0.1:{self.port}", "loopback_users = none"]
        if management:
            lines += [f"management.tcp.port = {self.http_port}", "management.tcp.ip = 127.0.0.1"]
        lines += [f"{k} = {v}" for k, v in (config or {}).items()]
        self.server = RabbitMQServer(
            self.home,
            self.name,
            self.port,
            dist_port=self.dist_port,
            conf=lines,
            plugins=[*(["rabbitmq_management"] if management else []), *plugins],
            mnesia=Path(base) if base is not None else None,
            home=self.home,
        )
        self.base = self.server.mnesia
        self.env = self.server.env
        if advanced is not None:
            (self.home / "advanced.config").write_text(advanced)

    @property
    def pid(self) -> int:
        """The Erlang VM (beam.smp); 0 when it is not running."""
        return self.server.pid

    # ------------------------------------------------------------------ life
    def start(self, timeout: float = 90) -> RabbitNode:
        self.server.launch()

        def up() -> bool:
            ok = self.server.ctl("await_startup", "--timeout", "5")
            return ok.returncode == 0 and self.server.pid_file.exists()

        self.server.await_ready(up, timeout, 0.5)
        self.server.pid = self.server.read_pid()
        return self

    def output(self) -> str:
        return self.server.output()

    def ctl(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = self.server.ctl(*args, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {result.stderr or result.stdout}")
        return result

    def kill9(self) -> None:
        """As a crash: SIGKILL to the Erlang VM, then wait for the wrapper to go."""
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()

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
