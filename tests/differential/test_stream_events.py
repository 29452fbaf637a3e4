"""rabbitmq_event_exchange and connections of RabbitMQ's stream protocol (port 5552): the
same stream clients, over real sockets, against Leveret and against a RabbitMQ 3.10.8 node
of the test's own with rabbitmq_stream and rabbitmq_event_exchange; the events each
broker publishes on amq.rabbitmq.event compared step by step: routing keys, headers with
their values, their order (duplicates too: rabbit_stream_reader names ``protocol`` twice
in connection.created) and the properties, once what differs by nature (pids, ports,
times, the node's name) is set aside."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.spec
import pytest

import leveret
from leveret.protocol import table
from leveret.protocol.stream import events as ev
from tests.support import rabbitmq
from tests.support.ports import free_port
from tests.support.streamclient import RawStreamClient

VOLATILE = {"timestamp_in_ms", "connected_at", "peer_port", "port", "pid", "node"}
PORTS = re.compile(r":\d+")
# peer properties in no particular order: RabbitMQ lists them in key order
PROPERTIES = {"product": "leveret-tests", "connection_name": "stream-events", "platform": "py"}

Event = tuple[str, list[tuple[str, Any]]]


@pytest.fixture(scope="module")
def brokers() -> Iterator[dict[str, tuple[str, int]]]:
    """Each broker's AMQP URL (to read the events) and stream protocol port."""
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    stream_port = free_port()
    node = rabbitmq.RabbitNode(
        plugins=["rabbitmq_stream", "rabbitmq_event_exchange"],
        config={"stream.listeners.tcp.1": f"127.0.0.1:{stream_port}"},
    ).start()
    try:
        with leveret.Broker(plugins=["rabbitmq_event_exchange"]) as b:
            yield {"leveret": (b.url, b.stream_port), "rabbitmq": (node.url, stream_port)}
    finally:
        node.close()


@pytest.fixture
def raw_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    """pika keeps the property bytes of each message it decodes (``_raw``): its headers
    dict would fold a repeated header into one."""
    decode = pika.spec.BasicProperties.decode

    def keeping(self: Any, encoded: bytes, offset: int = 0) -> Any:
        self._raw = bytes(encoded[offset:])
        return decode(self, encoded, offset)

    monkeypatch.setattr(pika.spec.BasicProperties, "decode", keeping)


def _value(key: str, raw: bytes) -> Any:
    value = table.decode(raw)
    if isinstance(value, bytes):
        value = value.decode()
    if key in VOLATILE:
        return type(value).__name__
    if key in ("name", "connection_name") and isinstance(value, str):
        return PORTS.sub(":P", value)
    if key == "error" and isinstance(value, list):
        return "".join(chr(c) for c in value)  # an Erlang string: character codes
    return value


def _collect(ch: Any, q: str) -> list[Event]:
    out = []
    while True:
        m, p, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        assert body == b"" and p.delivery_mode == 2 and p.content_type is None
        assert abs(p.timestamp * 1000 - p.headers["timestamp_in_ms"]) < 1000
        fields = table.headers(p._raw) or []
        out.append((m.routing_key, [(k, _value(k, v)) for k, v in fields]))


def _open_and_close(port: int) -> None:
    c = RawStreamClient("127.0.0.1", port)
    try:
        assert c.handshake(properties=PROPERTIES) == 1
        code, _ = c.request(ev.Close(c.next_id(), 1, "done"), 0x16)
        assert code == 1
    finally:
        c.close()


def _refused(expected: int, **handshake: Any) -> Callable[[int], None]:
    def step(port: int) -> None:
        c = RawStreamClient("127.0.0.1", port)
        try:
            assert c.handshake(properties=PROPERTIES, **handshake) == expected
        finally:
            c.close()

    return step


def _silent(port: int) -> None:
    """A TCP connection that sends nothing, closed once the broker has it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    time.sleep(0.5)
    sock.close()


STEPS: list[tuple[str, Callable[[int], None]]] = [
    ("opened and closed", _open_and_close),
    ("wrong password", _refused(8, password="wrong")),
    ("unknown user", _refused(8, user="nobody-here")),
    ("blank password", _refused(8, password="")),
    ("PLAIN bytes it cannot read", _refused(9, response=b"\0guest")),
    ("unknown mechanism", _refused(7, mechanism="NOPE")),
    ("no such vhost", _refused(12, vhost="no-such-vhost")),
    ("never spoke", _silent),
]


def scenario(url: str, stream_port: int) -> list[list[Event]]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.rabbitmq.event", "#")
    time.sleep(0.3)
    _collect(ch, q)
    per_step = []
    try:
        for _, step in STEPS:
            step(stream_port)
            time.sleep(0.5)  # the step's events, and no other's
            per_step.append(_collect(ch, q))
    finally:
        conn.close()
    return per_step


def _keys(step: list[Event]) -> list[str]:
    return [k for k, _ in step]


@pytest.mark.usefixtures("raw_properties")
def test_stream_connections_events_as_rabbitmq_publishes_them(
    brokers: dict[str, tuple[str, int]],
) -> None:
    """user.authentication.success / .failure, connection.created and connection.closed
    of stream connections, as rabbit_stream_reader tells of them: a refused password, an
    unknown user, a blank password and unreadable SASL bytes are told of, an unknown
    mechanism and a refused vhost are not (only the connection's end is); every connection
    ends with connection.closed, even one that never sent a frame."""
    got = {name: scenario(*where) for name, where in brokers.items()}
    theirs = got["rabbitmq"]
    assert _keys(theirs[0]) == [
        "user.authentication.success",
        "connection.created",
        "connection.closed",
    ]
    assert _keys(theirs[1]) == ["user.authentication.failure", "connection.closed"]
    created = dict(theirs[0][1][1])
    assert created["protocol"] == "stream" and "type" not in created
    assert [k for k, _ in theirs[0][1][1]].count("protocol") == 2
    for (name, _), their_step, our_step in zip(STEPS, theirs, got["leveret"], strict=True):
        assert our_step == their_step, name
