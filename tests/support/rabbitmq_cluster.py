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
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.rabbitmq import RabbitMQServer, installed

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
WANTED = IN_CI or os.environ.get("LEVERET_CLUSTER_TESTS", "") not in ("", "0")


def require_cluster_tests() -> None:
    """Skip unless cluster tests are wanted here; under CI, fail when RabbitMQ is missing."""
    if not WANTED:
        pytest.skip("cluster tests run under CI, or with LEVERET_CLUSTER_TESTS=1")
    if not installed():
        if IN_CI:
            pytest.fail("RabbitMQ (Debian's rabbitmq-server) is required under CI")
        pytest.skip("RabbitMQ is not installed here")
    if os.geteuid() != 0:
        pytest.skip("RabbitMQ's scripts are run as root here")


@dataclass
class Node:
    """One node of the cluster: the launcher's core (tests/support/rabbitmq.py), started
    ``-detached``."""

    server: RabbitMQServer
    alive: bool = False
    stream_port: int = 0  # RabbitMQ's stream protocol, with ``RabbitCluster(stream=True)``

    @property
    def name(self) -> str:
        return self.server.nodename

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def dist_port(self) -> int | None:
        return self.server.dist_port

    @property
    def base(self) -> Path:
        return self.server.dir

    @property
    def env(self) -> dict[str, str]:
        return self.server.env

    @property
    def pid(self) -> int | None:
        """The node's Erlang VM, once known."""
        return self.server.pid or None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"


@dataclass
class RabbitCluster:
    root: Path
    size: int = 3
    plugins: tuple[str, ...] = ()
    conf: tuple[str, ...] = ()  # more rabbitmq.conf lines
    stream: bool = False  # rabbitmq_stream on every node, each on a stream port of its own
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
            stream_port = free_port() if self.stream else 0
            stream_conf: list[str] = []
            if self.stream:
                stream_conf = [f"stream.listeners.tcp.1 = 127.0.0.1:{stream_port}"]
            server = RabbitMQServer(
                self.root / f"node{i}",
                f"lvt{tag}{i}@{host}",
                free_port(),
                dist_port=free_port(),
                conf=["loopback_users = none", *stream_conf, *self.conf],
                plugins=(*self.plugins, *(("rabbitmq_stream",) if self.stream else ())),
                home=home,
                extra_env={"RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1"},
            )
            self.nodes.append(Node(server, stream_port=stream_port))

    # ------------------------------------------------------------------ commands
    def ctl(self, node: Node, *args: str, timeout: float = 120) -> str:
        """``rabbitmqctl -n NODE ARGS`` as the node's own environment runs it."""
        done = node.server.ctl(*args, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {node.name}: "
                               f"{done.stdout}{done.stderr}")  # fmt: skip
        return done.stdout

    def _ask_pid(self, node: Node, timeout: float = 120) -> int:
        return int(self.ctl(node, "eval", "os:getpid().", timeout=timeout).strip().strip('"'))

    def start_node(self, node: Node) -> None:
        node.server.launch_detached()
        deadline = time.monotonic() + 120
        while True:  # await_startup needs the node to be reachable first
            try:
                node.server.pid = self._ask_pid(node)
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
        node.server.kill()
        node.alive = False

    def restart(self, node: Node) -> None:
        """Start a killed node again: it rejoins the cluster it knows."""
        self.start_node(node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.pid is None:
                node.server.pid = node.server.read_pid()
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    node.server.pid = self._ask_pid(node, timeout=20)
            node.server.kill()
            node.alive = False
        shutil.rmtree(self.root, ignore_errors=True)

    def urls(self, first: int = 0) -> list[str]:
        """Every node's URL, starting with node ``first``."""
        order = self.nodes[first:] + self.nodes[:first]
        return [n.url for n in order]
