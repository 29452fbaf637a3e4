"""rabbitmq_event_exchange: the same scenario on Leveret (with the plugin enabled) and on a
RabbitMQ node of the test's own with the plugin; the events on amq.rabbitmq.event, their
routing keys, headers and properties, compared once what differs by nature (pids, ports,
times, the node's name) is set aside."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from tests.support import rabbitmq

VOLATILE = {"timestamp_in_ms", "connected_at", "peer_port", "port", "pid", "channel",
            "connection", "owner_pid", "node", "consumer_tag"}  # fmt: skip
PORTS = re.compile(r":\d+")


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(plugins=["rabbitmq_event_exchange"]).start()
    try:
        with leveret.Broker(plugins=["rabbitmq_event_exchange"]) as b:
            yield {"leveret": b.url, "rabbitmq": node.url}
    finally:
        node.close()


def normal(headers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in headers.items():
        if isinstance(v, bytes):
            v = v.decode()
        if k in VOLATILE:
            v = type(v).__name__
        elif k in ("name", "connection_name") and isinstance(v, str):
            v = PORTS.sub(":P", v)
        elif k == "client_properties":
            v = len(v)
        out[k] = v
    return out


def scenario(url: str) -> list[tuple[str, dict[str, Any], Any]]:
    ev = pika.BlockingConnection(pika.URLParameters(url))
    ech = ev.channel()
    q = ech.queue_declare("", exclusive=True).method.queue
    ech.queue_bind(q, "amq.rabbitmq.event", "#")
    time.sleep(0.3)
    while ech.basic_get(q, auto_ack=True)[0] is not None:
        pass
    c = pika.BlockingConnection(pika.URLParameters(url))
    ch = c.channel()
    ch.exchange_declare("evx-x", "direct", arguments={"alternate-exchange": "ae"})
    ch.queue_declare("evx-q", arguments={"x-max-length": 5})
    ch.queue_declare("evx-excl", exclusive=True)
    ch.queue_bind("evx-q", "evx-x", "rk")
    tag = ch.basic_consume("evx-q", lambda *a: None)
    ch.basic_cancel(tag)
    ch.queue_unbind("evx-q", "evx-x", "rk")
    ch.queue_bind("evx-excl", "evx-x", "gone-with-it")
    ch.queue_delete("evx-excl")  # its binding goes with it, removed by rmq-internal
    ch.queue_delete("evx-q")
    ch.exchange_delete("evx-x")
    ch.close()
    c.close()
    with pytest.raises(pika.exceptions.AMQPError):
        pika.BlockingConnection(pika.URLParameters(url.replace("guest:guest", "guest:wrong")))
    time.sleep(1)
    out = []
    while True:
        m, p, body = ech.basic_get(q, auto_ack=True)
        if m is None:
            break
        assert body == b"" and p.delivery_mode == 2 and p.content_type is None
        assert abs(p.timestamp * 1000 - p.headers["timestamp_in_ms"]) < 1000
        out.append((m.routing_key, normal(p.headers), list(p.headers)))
    ev.close()
    return out


KEYS = [
    "user.authentication.success",
    "connection.created",
    "channel.created",
    "exchange.created",
    "queue.created",
    "queue.created",
    "binding.created",
    "consumer.created",
    "consumer.deleted",
    "binding.deleted",
    "binding.created",
    "binding.deleted",
    "queue.deleted",
    "queue.deleted",
    "parameter.set",
    "exchange.deleted",
    "parameter.cleared",
    "channel.closed",
    "connection.closed",
    "user.authentication.failure",
    "connection.closed",
]


def test_events_as_rabbitmq_publishes_them(urls: dict[str, str]) -> None:
    got = {name: scenario(url) for name, url in urls.items()}
    assert [k for k, _, _ in got["rabbitmq"]] == KEYS
    assert [k for k, _, _ in got["leveret"]] == KEYS
    for (key, theirs, their_order), (_, ours, our_order) in zip(
        got["rabbitmq"], got["leveret"], strict=True
    ):
        assert (key, ours) == (key, theirs)
        assert (key, our_order) == (key, their_order)
