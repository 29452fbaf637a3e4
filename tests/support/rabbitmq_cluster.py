"""Three RabbitMQ 3.10.8 nodes of the tests' own on this machine, joined into one cluster.

Each node has its own name (``lvt<id><n>@<host>``), AMQP and distribution ports (free ones),
data and log directories and an empty plugin list, so nothing is shared with the reference
broker on 5672 (whose node, cookie and plugins stay untouched). The three share one Erlang
cookie, in a HOME of their own. They are started with RabbitMQ's own scripts
(``/usr/lib/rabbitmq/bin``, run as root, as CI does) and joined with ``rabbitmqctl
join_cluster``. ``kill`` is ``kill -9`` of a node's Erlang VM; ``stop`` ends every node this
cluster started, by the pid each wrote.

Clusters take a minute to form, so these tests run under CI (``CI=true``) and locally only
with ``LEVERET_CLUSTER_TESTS=1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BIN = Path("/usr/lib/rabbitmq/bin")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
WANTED = IN_CI or os.environ.get("LEVERET_CLUSTER_TESTS", "") not in ("", "0")


def require_cluster_tests() -> None:
    """Skip unless cluster tests are wanted here; under CI, fail when RabbitMQ is missing."""
    if not WANTED:
        pytest.skip("cluster tests run under CI, or with LEVERET_CLUSTER_TESTS=1")
    if not (BIN / "rabbitmq-server").exists():
        if IN_CI:
            pytest.fail("RabbitMQ (Debian's rabbitmq-server) is required under CI")
        pytest.skip("RabbitMQ is not installed here")
    if os.geteuid() != 0:
        pytest.skip("RabbitMQ's scripts are run as root here")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    port: int
    dist_port: int
    base: Path
    env: dict[str, str]
    pid: int | None = None
    alive: bool = False

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


@dataclass
class RabbitCluster:
    root: Path
    size: int = 3
    plugins: tuple[str, ...] = ()
    conf: tuple[str, ...] = ()  # more rabbitmq.conf lines
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        host = socket.gethostname().split(".")[0]
        tag = uuid.uuid4().hex[:6]
        home = self.root / "home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(f"LEVERETTEST{tag.upper()}")
        cookie.chmod(0o400)
        for i in range(1, self.size + 1):
            base = self.root / f"node{i}"
            base.mkdir()
            (base / "enabled_plugins").write_text(f"[{','.join(self.plugins)}].\n")
            (base / "rabbitmq.conf").write_text("\n".join(["loopback_users = none", *self.conf]))
            (base / "rabbitmq-env.conf").write_text("")
            name = f"lvt{tag}{i}@{host}"
            port, dist = free_port(), free_port()
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")},
                "HOME": str(home),
                "RABBITMQ_NODENAME": name,
                "RABBITMQ_NODE_PORT": str(port),
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_DIST_PORT": str(dist),
                "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
                "RABBITMQ_LOG_BASE": str(base / "log"),
                "RABBITMQ_PID_FILE": str(base / "pid"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
                "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
                "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            }
            self.nodes.append(Node(name, port, dist, base, env))

    # ------------------------------------------------------------------ commands
    def ctl(self, node: Node, *args: str, timeout: float = 120) -> str:
        """``rabbitmqctl -n NODE ARGS`` as the node's own environment runs it."""
        done = subprocess.run(
            [str(BIN / "rabbitmqctl"), "-n", node.name, *args],
            env=node.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {node.name}: "
                               f"{done.stdout}{done.stderr}")  # fmt: skip
        return done.stdout

    def start_node(self, node: Node) -> None:
        subprocess.run([str(BIN / "rabbitmq-server"), "-detached"], env=node.env,
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        deadline = time.monotonic() + 120
        while True:  # await_startup needs the node to be reachable first
            try:
                node.pid = int(self.ctl(node, "eval", "os:getpid().").strip().strip('"'))
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.ctl(node, "await_startup", timeout=180)
        node.alive = True

    def start(self) -> None:
        """Start every node and join the others to the first."""
        try:
            with ThreadPoolExecutor(self.size) as pool:
                list(pool.map(self.start_node, self.nodes))
            first = self.nodes[0]
            for node in self.nodes[1:]:
                self.ctl(node, "stop_app")
                self.ctl(node, "join_cluster", first.name)
                self.ctl(node, "start_app")
                self.ctl(node, "await_startup")
            status = self.ctl(first, "cluster_status", "--formatter", "json")
            for node in self.nodes:
                assert node.name in status, status
        except BaseException:
            self.stop()
            raise

    def kill(self, node: Node) -> None:
        """``kill -9`` the node's Erlang VM: as when its machine dies."""
        assert node.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)
        _wait_gone(node.pid)
        node.alive = False

    def restart(self, node: Node) -> None:
        """Start a killed node again: it rejoins the cluster it knows."""
        (node.base / "pid").unlink(missing_ok=True)
        node.pid = None
        self.start_node(node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.pid is None:
                with contextlib.suppress(OSError, ValueError):
                    node.pid = int((node.base / "pid").read_text().strip())
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    text = self.ctl(node, "eval", "os:getpid().", timeout=20)
                    node.pid = int(text.strip().strip('"'))
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGKILL)
                _wait_gone(node.pid)
            node.alive = False
        shutil.rmtree(self.root, ignore_errors=True)

    def urls(self, first: int = 0) -> list[str]:
        """Every node's URL, starting with node ``first``."""
        order = self.nodes[first:] + self.nodes[:first]
        return [n.url for n in order]


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # a zombie of ours would linger; RabbitMQ's VM is not our child (it daemonizes)
        time.sleep(0.1)
