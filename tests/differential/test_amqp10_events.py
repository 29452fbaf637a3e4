"""AMQP 1.0 connections in rabbitmq_event_exchange's events, the overview's totals and
Prometheus' connection and channel gauges: the same proton scenario on Leveret and on a
RabbitMQ 3.10.8 node of the test's own (the event exchange, rabbitmq_amqp1_0 and
rabbitmq_prometheus enabled: the shared reference's totals move with the other tests).
RabbitMQ's plugin stands each session on a direct connection of its own, with its
channel; the connection itself is told of (and counted in the churn) only as its reader
closes."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlparse

import pika
import pytest

import leveret
from tests.support import rabbitmq
from tests.support.amqp10 import CLOSED, Amqp10Client
from tests.support.mgmt import Api
from tests.support.ports import free_port
from tests.support.waiting import settled, wait_for

VOLATILE = {"timestamp_in_ms", "connected_at", "peer_port", "port", "pid", "channel",
            "connection", "node"}  # fmt: skip
PORTS = re.compile(r":\d+")
KINDS = ("connection.", "channel.", "user.authentication.", "consumer.")


class Node:
    """One broker under test: its AMQP port, management API and Prometheus metrics."""

    def __init__(self, host: str, port: int, http: str, metrics: str) -> None:
        self.host, self.port, self.api, self.metrics = host, port, Api(http), metrics

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Node]]:
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    prometheus = free_port()
    node = rabbitmq.RabbitNode(
        management=True,
        plugins=["rabbitmq_event_exchange", "rabbitmq_amqp1_0", "rabbitmq_prometheus"],
        config={
            "prometheus.tcp.port": str(prometheus),
            "collect_statistics_interval": "1000",
        },
    ).start()
    try:
        with leveret.Broker(
            plugins="rabbitmq_event_exchange rabbitmq_amqp1_0", management=True
        ) as b:
            http = urlparse(b.management_url)
            yield {
                "leveret": Node(b.host, b.port, f"http://{http.netloc}", b.metrics_url),
                "rabbitmq": Node(
                    "127.0.0.1",
                    node.port,
                    node.http_url,
                    f"http://127.0.0.1:{prometheus}/metrics",
                ),
            }
    finally:
        node.close()


def normal(headers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in headers.items():
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        if k in VOLATILE:
            v = type(v).__name__
        elif k in ("name", "connection_name") and isinstance(v, str):
            v = PORTS.sub(":P", v)
        out[k] = v
    return out


def gauge(node: Node, name: str) -> float | None:
    with urllib.request.urlopen(node.metrics, timeout=30) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def scenario(node: Node) -> dict[str, Any]:
    """The events of each step, and the totals with two sessions open."""
    ev = pika.BlockingConnection(pika.URLParameters(node.url))
    ech = ev.channel()
    q = ech.queue_declare("", exclusive=True).method.queue
    ech.queue_declare("a10ev-q")
    ech.queue_bind(q, "amq.rabbitmq.event", "#")

    def events(quiet: float = 1.5) -> list[tuple[str, dict[str, Any], list[str]]]:
        time.sleep(quiet)
        out = []
        while True:
            m, p, _ = ech.basic_get(q, auto_ack=True)
            if m is None:
                return sorted(out, key=repr)  # RabbitMQ's processes tell in their own order
            if m.routing_key.startswith(KINDS):
                out.append((m.routing_key, normal(p.headers), list(p.headers)))

    events()

    def churn() -> dict[str, int]:
        rates = node.api.get("/api/overview")["churn_rates"]
        return {k: v for k, v in rates.items() if not k.endswith("_details")}

    before = settled(churn)
    steps: dict[str, Any] = {}
    with pytest.raises(Exception, match="unauthorized-access"):
        Amqp10Client(node.host, node.port, "/", "guest", "wrong")
    steps["refused login"] = events(4.5)  # RabbitMQ closes 3 s after a refused login
    c = Amqp10Client(node.host, node.port, "/")
    c.pump(0.5)
    steps["open"] = events()
    c.close()
    steps["closed without a session"] = events()
    c = Amqp10Client(node.host, node.port, "/")
    s1 = c.session()
    steps["a session"] = events()
    c.sender(s1, "/amq/queue/a10ev-q")
    c.receiver(s1, "/amq/queue/a10ev-q", credit=2)
    steps["a publisher and a consumer"] = events()
    s2 = c.session()
    steps["another session"] = events(0.5)
    api = node.api

    def totals() -> tuple[Any, ...]:
        overview = api.get("/api/overview")["object_totals"]
        return (
            overview["connections"],
            overview["channels"],
            gauge(node, "rabbitmq_connections"),
            gauge(node, "rabbitmq_channels"),
        )

    steps["totals"] = wait_for(lambda: totals() == (3, 3, 3.0, 3.0) and totals(), 30) or totals()
    s2.close()
    c.wait(lambda: bool(s2.state & CLOSED))
    steps["a session ends"] = events()
    (name,) = {c["name"] for c in api.get("/api/connections") if c.get("protocol") == "AMQP 1.0"}
    assert api.call("DELETE", f"/api/connections/{quote(name, safe='')}")[0] == 204
    c.wait(lambda: bool(s1.state & CLOSED))
    steps["the management API closes the other"] = events()
    c.close()
    steps["the connection closes"] = events()
    after = settled(churn)
    steps["churn"] = {k: after[k] - before[k] for k in after}
    ev.close()
    return steps


def test_events_and_totals_as_rabbitmq_shows_them(nodes: dict[str, Node]) -> None:
    got = {name: scenario(node) for name, node in nodes.items()}
    theirs, ours = got["rabbitmq"], got["leveret"]
    assert list(ours) == list(theirs)
    for step in theirs:
        assert (step, ours[step]) == (step, theirs[step])
    assert theirs["totals"] == (3, 3, 3.0, 3.0)
    # every reader's close counts, each session's direct connection and channels too
    assert theirs["churn"] == {
        "channel_closed": 4,
        "channel_created": 4,
        "connection_closed": 5,
        "connection_created": 2,
        "queue_created": 0,
        "queue_declared": 0,
        "queue_deleted": 0,
    }
