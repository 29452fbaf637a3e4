"""A RabbitMQ 3.10.8 node of the tests' own with TLS: amqps with the tests' private CA
(verify_peer, not fail_if_no_peer_cert), SASL EXTERNAL (rabbitmq_auth_mechanism_ssl,
ssl_cert_login_from = common_name) and the management API over HTTPS. The shared node on
5672 is never touched; this one has its own node name, ports and directories, and is
stopped by the test session that started it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.brokers import BrokerUnderTest, port_open
from tests.support.tlscerts import Pki

# Limits the node is configured with, and a Leveret beside it the same way.
LIMITS = {
    "max_message_size": 65536,
    "handshake_timeout": 3000,
    "channel_max": 64,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def available() -> bool:
    return (shutil.which("rabbitmq-server") or Path("/usr/sbin/rabbitmq-server").exists()) and (
        os.geteuid() == 0
    )


class TlsRabbitMQ:
    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.amqp_port = free_port()
        self.amqps_port = free_port()
        self.https_port = free_port()
        self.dist_port = free_port()
        self.nodename = f"leveret-tls-{os.getpid()}@localhost"
        self.base = Path(tempfile.mkdtemp(prefix="leveret-rabbitmq-tls-"))
        self.base.chmod(0o755)
        for sub in ("mnesia", "log"):
            (self.base / sub).mkdir()
        (self.base / "enabled_plugins").write_text(
            "[rabbitmq_management,rabbitmq_auth_mechanism_ssl].\n"
        )
        (self.base / "rabbitmq.conf").write_text(
            "\n".join(
                [
                    f"listeners.tcp.default = {self.amqp_port}",
                    f"listeners.ssl.default = {self.amqps_port}",
                    f"ssl_options.cacertfile = {pki.ca}",
                    f"ssl_options.certfile = {pki.server_cert}",
                    f"ssl_options.keyfile = {pki.server_key}",
                    "ssl_options.verify = verify_peer",
                    "ssl_options.fail_if_no_peer_cert = false",
                    "ssl_options.versions.1 = tlsv1.3",
                    "ssl_options.versions.2 = tlsv1.2",
                    "auth_mechanisms.1 = PLAIN",
                    "auth_mechanisms.2 = AMQPLAIN",
                    "auth_mechanisms.3 = EXTERNAL",
                    "ssl_cert_login_from = common_name",
                    *(f"{key} = {value}" for key, value in LIMITS.items()),
                    f"management.ssl.port = {self.https_port}",
                    f"management.ssl.cacertfile = {pki.ca}",
                    f"management.ssl.certfile = {pki.server_cert}",
                    f"management.ssl.keyfile = {pki.server_key}",
                    "",
                ]
            )
        )
        for path in [self.base, *self.base.rglob("*")]:
            shutil.chown(path, "rabbitmq", "rabbitmq")
        for path in [pki.root, *pki.root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq"),
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def broker(self) -> BrokerUnderTest:
        return BrokerUnderTest(
            "rabbitmq",
            "127.0.0.1",
            self.amqp_port,
            http_port=self.https_port,
            tls_port=self.amqps_port,
            https=True,
        )

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
        return subprocess.run(
            [ctl, "-n", self.nodename, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
        )

    def start(self, timeout: float = 180) -> None:
        server = shutil.which("rabbitmq-server") or "/usr/sbin/rabbitmq-server"
        log = (self.base / "stdout").open("wb")
        self.process = subprocess.Popen(
            [server], stdout=log, stderr=subprocess.STDOUT, env=self.env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if port_open("127.0.0.1", self.amqps_port) and port_open("127.0.0.1", self.https_port):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        tail = (self.base / "stdout").read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"the TLS RabbitMQ node did not start: {tail}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.ctl("stop")
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)
