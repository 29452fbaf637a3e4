"""A RabbitMQ 3.10.8 node of the tests' own with TLS: amqps with the tests' private CA
(verify_peer, not fail_if_no_peer_cert), SASL EXTERNAL (rabbitmq_auth_mechanism_ssl,
ssl_cert_login_from = common_name) and the management API over HTTPS. The shared node on
5672 is never touched; this one has its own node name, ports and directories, and is
stopped by the test session that started it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.brokers import BrokerUnderTest
from tests.support.ports import free_port, port_open
from tests.support.rabbitmq import RabbitMQServer, debian_installed
from tests.support.tlscerts import Pki

# Limits the node is configured with, and a Leveret beside it the same way.
LIMITS = {
    "max_message_size": 65536,
    "handshake_timeout": 3000,
    "channel_max": 64,
}


def available() -> bool:
    return debian_installed() and os.geteuid() == 0


class TlsRabbitMQ:
    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.amqp_port = free_port()
        self.amqps_port = free_port()
        self.https_port = free_port()
        self.dist_port = free_port()
        self.nodename = f"leveret-tls-{os.getpid()}@localhost"
        self.base = Path(tempfile.mkdtemp(prefix="leveret-rabbitmq-tls-"))
        self.server = RabbitMQServer(
            self.base,
            self.nodename,
            self.amqp_port,
            dist_port=self.dist_port,
            conf=[
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
            ],
            plugins=["rabbitmq_management", "rabbitmq_auth_mechanism_ssl"],
            as_rabbitmq_user=True,
        )
        for path in [pki.root, *pki.root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.env = self.server.env

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
        return self.server.ctl(*args, timeout=120)

    def start(self, timeout: float = 180) -> None:
        self.server.launch()
        self.server.await_ready(
            lambda: (
                port_open("127.0.0.1", self.amqps_port) and port_open("127.0.0.1", self.https_port)
            ),
            timeout,
            0.2,
        )

    def stop(self) -> None:
        self.server.stop(ctl_timeout=120, wait=60)
        shutil.rmtree(self.base, ignore_errors=True)
