"""``/api/nodes`` reports the descriptors and sockets Leveret can measure as RabbitMQ does
(fd_used, fd_total, sockets_used, sockets_total), and the Prometheus metrics carry them under
RabbitMQ's names; with the same open files limit, the totals are RabbitMQ 3.10.8's."""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path

import pika
import pytest

from tests.support.brokers import ensure_rabbitmq_management, start_leveret
from tests.support.mgmt import Api
from tests.support.waiting import wait_for

LIMIT = 1024  # the open files limit both brokers run with here


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("rabbitmq_process_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux's prlimit")
def test_nodes_report_descriptors_and_sockets(tmp_path: Path) -> None:
    broker = start_leveret(tmp_path / "data", prefix=["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"])
    conns: list[pika.BlockingConnection] = []
    try:
        api = Api(broker.http_url)
        node = api.get("/api/nodes")[0]
        assert node["fd_total"] == LIMIT
        assert node["sockets_total"] == 832  # RabbitMQ 3.10.8's share at 1024 (measured)
        assert node["sockets_used"] == 0
        assert broker.process is not None
        assert 0 < node["fd_used"] <= len(os.listdir(f"/proc/{broker.process.pid}/fd")) + 2
        before = node["fd_used"]
        conns = [pika.BlockingConnection(broker.pika_params()) for _ in range(3)]
        after = wait_for(
            lambda: (lambda n: n if n["sockets_used"] == 3 else None)(api.get("/api/nodes")[0])
        )
        assert after, api.get("/api/nodes")
        assert after["fd_used"] >= before + 3
        assert "proc_used" not in after and "proc_total" not in after  # no such figure
        metrics = _metrics(broker.metrics_url)
        assert metrics["rabbitmq_process_max_fds"] == LIMIT
        assert metrics["rabbitmq_process_max_tcp_sockets"] == 832
        assert metrics["rabbitmq_process_open_tcp_sockets"] == 3
        assert metrics["rabbitmq_process_open_fds"] >= 3
    finally:
        for c in conns:
            c.close()
        broker.stop()


def test_the_totals_are_rabbitmqs_for_the_same_limit() -> None:
    if not ensure_rabbitmq_management():
        pytest.skip("needs RabbitMQ's management API on 127.0.0.1:15672")
    rabbit = Api("http://127.0.0.1:15672").get("/api/nodes")[0]
    from leveret.server.resources import sockets_limit

    for key in ("fd_used", "fd_total", "sockets_used", "sockets_total"):
        assert key in rabbit
    assert sockets_limit(rabbit["fd_total"]) == rabbit["sockets_total"]
