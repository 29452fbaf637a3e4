"""Starting and reaching the brokers the tests talk to: Leveret on a free port, and the
reference RabbitMQ on 5672."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import port_open
from tests.support.rabbitmq import debian_script
from tests.support.waiting import wait_for

RABBITMQ_PORT = int(os.environ.get("RABBITMQ_PORT", "5672"))
# The reference broker's stream protocol listener (its rabbitmq_stream plugin).
RABBITMQ_STREAM_PORT = int(os.environ.get("RABBITMQ_STREAM_PORT", "5552"))


@dataclass
class BrokerUnderTest:
    name: str
    host: str
    port: int
    process: subprocess.Popen[str] | None = None
    data_dir: Path | None = None
    log: list[str] = field(default_factory=list)
    http_port: int = 15672
    prometheus_port: int = 15692
    tls_port: int = 0  # amqps, when the broker has a TLS listener
    stream_port: int = 0  # RabbitMQ's stream protocol, when the broker listens for it
    stream_tls_port: int = 0  # the stream protocol over TLS
    syslog_port: int = 0  # syslog (UDP and TCP), when the broker listens for it
    https: bool = False  # the management API over HTTPS

    @property
    def http_url(self) -> str:
        """The management API (and dashboard) root."""
        return f"{'https' if self.https else 'http'}://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"{'https' if self.https else 'http'}://{self.host}:{self.prometheus_port}/metrics"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"

    def pika_params(self, **kwargs: object) -> object:
        import pika

        return pika.ConnectionParameters(self.host, self.port, **kwargs)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def start_leveret(
    data_dir: Path | None = None,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    prefix: list[str] | None = None,
) -> BrokerUnderTest:
    """Run ``leveret server`` on a free port and wait for its ready line. ``prefix`` runs
    it through a command that execs it (``nsenter …`` for a network namespace).

    ``timeout`` only guards against a server that never starts: it starts in about a
    second on an idle machine, but the suite's workers load two cores far past that."""
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="leveret-test-"))
    cmd = [
        *(prefix or []),
        sys.executable,
        "-m",
        "leveret.cli.main",
        "server",
        "--amqp-port",
        "0",
        "--http-port",
        "0",
        "--prometheus-port",
        "0",
        "--stream-port",
        "0",
        "--stream-tls-port",
        "0",
        "--bind",
        "127.0.0.1",
        "--data-dir",
        str(data_dir),
        *(extra or []),
    ]
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=proc_env
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    ports: dict[str, int] = {}
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError("leveret server exited: " + "".join(lines))
            continue
        lines.append(line)
        if line.startswith("Management API listening on "):
            ports["http"] = int(line.strip().rsplit(":", 1)[1])
            ports["https"] = int("https://" in line)
        elif line.startswith("AMQP over TLS listening on "):
            ports["tls"] = int(line.strip().rsplit(":", 1)[1])
        elif line.startswith("Stream protocol listening on "):
            ports["stream"] = int(line.strip().rsplit(":", 1)[1])
        elif line.startswith("Stream protocol over TLS listening on "):
            ports["stream_tls"] = int(line.strip().rsplit(":", 1)[1])
        elif line.startswith("Syslog (UDP and TCP) listening on "):
            ports["syslog"] = int(line.strip().rsplit(":", 1)[1])
        elif line.startswith("Prometheus metrics listening on "):
            ports["prometheus"] = int(line.strip().rsplit(":", 1)[1].split("/")[0])
        if "Server startup complete" in line:
            port = int(line.strip().rsplit(":", 1)[1])
            broker = BrokerUnderTest(
                "leveret",
                "127.0.0.1",
                port,
                proc,
                data_dir,
                lines,
                http_port=ports.get("http", 0),
                prometheus_port=ports.get("prometheus", 0),
                tls_port=ports.get("tls", 0),
                stream_port=ports.get("stream", 0),
                stream_tls_port=ports.get("stream_tls", 0),
                syslog_port=ports.get("syslog", 0),
                https=bool(ports.get("https", 0)),
            )
            _drain(proc, broker.log)
            return broker
    proc.kill()
    raise RuntimeError("leveret server did not start: " + "".join(lines))


def _drain(proc: subprocess.Popen[str], sink: list[str]) -> None:
    import threading

    def run() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.append(line)

    threading.Thread(target=run, daemon=True).start()


def ensure_rabbitmq(timeout: float = 90) -> BrokerUnderTest | None:
    """The reference broker on 127.0.0.1:5672, started if installed and not running.
    None when it cannot be had (then the caller decides: skip, or fail under CI)."""
    if port_open("127.0.0.1", RABBITMQ_PORT):
        return BrokerUnderTest("rabbitmq", "127.0.0.1", RABBITMQ_PORT)
    server = debian_script("rabbitmq-server")
    if server is None:
        return None
    subprocess.run([server, "-detached"], check=False, capture_output=True)
    if not wait_for(lambda: port_open("127.0.0.1", RABBITMQ_PORT), timeout, 0.5):
        return None
    ctl = debian_script("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    subprocess.run([ctl, "await_startup"], check=False, capture_output=True, timeout=60)
    return BrokerUnderTest("rabbitmq", "127.0.0.1", RABBITMQ_PORT)


RABBITMQ_HTTP_PORT = int(os.environ.get("RABBITMQ_HTTP_PORT", "15672"))


def ensure_rabbitmq_management(timeout: float = 60) -> bool:
    """The reference broker's management API on 15672, its plugin enabled if need be."""
    return ensure_rabbitmq_plugin("rabbitmq_management", RABBITMQ_HTTP_PORT, timeout)


def ensure_rabbitmq_stream(timeout: float = 60) -> bool:
    """The reference broker's stream protocol on 5552, its plugin enabled if need be."""
    return ensure_rabbitmq_plugin("rabbitmq_stream", RABBITMQ_STREAM_PORT, timeout)


def ensure_rabbitmq_plugin(plugin: str, port: int, timeout: float = 60) -> bool:
    """A RabbitMQ plugin that listens on ``port``, enabled if need be."""
    if port_open("127.0.0.1", port):
        return True
    plugins = debian_script("rabbitmq-plugins")
    if plugins is None:
        return False
    subprocess.run([plugins, "enable", plugin], check=False, capture_output=True, timeout=120)
    return wait_for(lambda: port_open("127.0.0.1", port), timeout, 0.5)
