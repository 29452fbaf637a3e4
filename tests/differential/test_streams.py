"""Stream queues over AMQP 0-9-1, the same on Leveret and RabbitMQ 3.10.8."""

from __future__ import annotations

import datetime
import decimal
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.differential.helpers import channel_error, connect, connection_error
from tests.support.brokers import BrokerUnderTest

STREAM = {"x-queue-type": "stream"}


@pytest.fixture
def stream(broker: BrokerUnderTest, name: str) -> Iterator[str]:
    with connect(broker) as conn:
        conn.channel().queue_declare(name, durable=True, arguments=STREAM)
    yield name
    with connect(broker) as conn:
        conn.channel().queue_delete(name)


def publish(broker: BrokerUnderTest, queue: str, bodies: list[bytes]) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(headers={"k": "v"}))


def consume(
    broker: BrokerUnderTest, queue: str, offset: Any, want: int, wait: float = 3.0
) -> list[tuple[int, bytes, dict[str, Any]]]:
    got: list[tuple[int, bytes, dict[str, Any]]] = []
    with connect(broker) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)

        def on(c: BlockingChannel, m: Any, p: Any, body: bytes) -> None:
            got.append((p.headers["x-stream-offset"], body, dict(p.headers)))
            c.basic_ack(m.delivery_tag)

        args = {} if offset is None else {"x-stream-offset": offset}
        ch.basic_consume(queue, on, arguments=args)
        deadline = time.monotonic() + wait
        while len(got) < want and time.monotonic() < deadline:
            conn.process_data_events(0.05)
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            conn.process_data_events(0.05)
    return got


def test_replay_from_first_and_offset(broker: BrokerUnderTest, stream: str) -> None:
    bodies = [f"m{i}".encode() for i in range(30)]
    publish(broker, stream, bodies)
    got = consume(broker, stream, "first", 30)
    assert [(o, b) for o, b, _ in got] == list(enumerate(bodies))
    assert all(h["k"] == "v" for _, _, h in got)
    got = consume(broker, stream, 25, 5)
    assert [(o, b) for o, b, _ in got] == list(enumerate(bodies))[25:]
    got = consume(broker, stream, -5, 30)
    assert len(got) == 30  # below the first offset starts at the first


def test_next_sees_only_new_messages(broker: BrokerUnderTest, stream: str) -> None:
    publish(broker, stream, [b"old"])
    got: list[bytes] = []
    with connect(broker) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(
            stream, lambda c, m, p, b: got.append(b), arguments={"x-stream-offset": "next"}
        )
        conn.process_data_events(0.3)
        publish(broker, stream, [b"new"])
        deadline = time.monotonic() + 3
        while not got and time.monotonic() < deadline:
            conn.process_data_events(0.05)
    assert got == [b"new"]


def test_last_starts_at_the_last_chunk(broker: BrokerUnderTest, stream: str) -> None:
    publish(broker, stream, [b"a", b"b", b"c"])
    got = consume(broker, stream, "last", 1, wait=1.0)
    assert got and got[-1][1] == b"c"


def test_timestamp_and_interval_offsets(broker: BrokerUnderTest, stream: str) -> None:
    publish(broker, stream, [b"x", b"y"])
    hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    assert [b for _, b, _ in consume(broker, stream, hour_ago, 2)] == [b"x", b"y"]
    assert [b for _, b, _ in consume(broker, stream, "10m", 2)] == [b"x", b"y"]


def test_stream_declaration_rules(broker: BrokerUnderTest, name: str) -> None:
    where = f"queue '{name}' in vhost '/'"
    assert channel_error(broker, lambda ch: ch.queue_declare(name, arguments=STREAM)) == (
        406,
        f"PRECONDITION_FAILED - invalid property 'non-durable' for {where}",
    )
    assert channel_error(
        broker, lambda ch: ch.queue_declare(name, durable=True, exclusive=True, arguments=STREAM)
    ) == (406, f"PRECONDITION_FAILED - invalid property 'exclusive-owner' for {where}")
    assert channel_error(
        broker, lambda ch: ch.queue_declare(name, durable=True, auto_delete=True, arguments=STREAM)
    ) == (406, f"PRECONDITION_FAILED - invalid property 'auto-delete' for {where}")
    assert channel_error(
        broker, lambda ch: ch.queue_declare("", durable=True, arguments=STREAM)
    ) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue",
    )
    assert channel_error(
        broker,
        lambda ch: ch.queue_declare(name, durable=True, arguments={**STREAM, "x-message-ttl": 10}),
    ) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for {where} of queue type "
        "rabbit_stream_queue",
    )
    assert channel_error(
        broker,
        lambda ch: ch.queue_declare(name, durable=True, arguments={**STREAM, "x-max-age": "1x"}),
    ) == (406, f"PRECONDITION_FAILED - invalid arg 'x-max-age' for {where}: invalid_max_age")


def test_what_a_stream_refuses(broker: BrokerUnderTest, stream: str) -> None:
    where = f"queue '{stream}' in vhost '/'"
    assert connection_error(broker, lambda ch: ch.basic_get(stream)) == (
        540,
        f"NOT_IMPLEMENTED - basic.get not supported by stream queues {where}",
    )
    assert connection_error(broker, lambda ch: ch.queue_purge(stream)) == (
        540,
        f"NOT_IMPLEMENTED - queue.purge not supported by stream queues {where}",
    )
    assert channel_error(broker, lambda ch: ch.basic_consume(stream, lambda *a: None)) == (
        406,
        f"PRECONDITION_FAILED - consumer prefetch count is not set for '{where}'",
    )

    def no_ack(ch: BlockingChannel) -> None:
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(stream, lambda *a: None, auto_ack=True)

    assert connection_error(broker, no_ack) == (
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues {where}",
    )


def test_nack_is_refused(broker: BrokerUnderTest, stream: str) -> None:
    publish(broker, stream, [b"a"])

    def nack(ch: BlockingChannel) -> None:
        ch.basic_qos(prefetch_count=10)
        tags: list[int] = []
        ch.basic_consume(
            stream,
            lambda c, m, p, b: tags.append(m.delivery_tag),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 3
        while not tags and time.monotonic() < deadline:
            ch.connection.process_data_events(0.05)
        ch.basic_nack(tags[0], requeue=True)

    assert connection_error(broker, nack) == (
        540,
        f"NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues "
        f"queue '{stream}' in vhost '/'",
    )


def test_fanout_feeds_a_stream_and_temporary_queues(
    broker: BrokerUnderTest, stream: str, name: str
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-logs", "fanout", auto_delete=True)
        ch.queue_bind(stream, f"{name}-logs")
        tmp = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(tmp, f"{name}-logs")
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish(f"{name}-logs", "", f"r{i}".encode())
        assert ch.queue_declare(tmp, passive=True).method.message_count == 5
    got = consume(broker, stream, "first", 5)
    assert [b for _, b, _ in got] == [f"r{i}".encode() for i in range(5)]


def test_classic_queue_refuses_stream_offset(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": "first"})

    assert channel_error(broker, action) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{name}' in "
        "vhost '/' of queue type rabbit_classic_queue",
    )


def test_a_stream_keeps_the_properties_rabbitmq_keeps(broker: BrokerUnderTest, stream: str) -> None:
    """RabbitMQ 3.10 stores stream messages as AMQP 1.0: table and array headers and the
    cluster-id do not survive the trip; every other property and header does, typed."""
    sent = pika.BasicProperties(
        content_type="application/json", content_encoding="gzip", delivery_mode=2,
        priority=3, correlation_id="c-1", reply_to="r", expiration="60000",
        message_id="m-1", timestamp=1_600_000_000, type="t", user_id="guest", app_id="a",
        cluster_id="cl",
        headers={"n": 7, "s": "text", "b": True, "raw": b"\x00\x01",
                 "none": None, "table": {"x": 1}, "list": [1, "two"]},
    )  # fmt: skip
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", stream, b"body", sent)
        ch.basic_qos(prefetch_count=10)
        got: list[Any] = []
        ch.basic_consume(stream, lambda c, m, p, b: got.append(p),
                         arguments={"x-stream-offset": "first"})  # fmt: skip
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            conn.process_data_events(0.05)
    assert len(got) == 1
    props = got[0]
    assert props.headers == {"n": 7, "s": "text", "b": True, "raw": b"\x00\x01",
                             "none": None, "x-stream-offset": 0}  # fmt: skip
    assert props.cluster_id is None
    for key in ("content_type", "content_encoding", "delivery_mode", "priority",
                "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                "type", "user_id", "app_id"):  # fmt: skip
        assert getattr(props, key) == getattr(sent, key), key


def test_a_decimal_header_is_refused_by_a_stream_not_by_a_classic_queue(
        broker: BrokerUnderTest, stream: str, name: str) -> None:  # fmt: skip
    """RabbitMQ 3.10 cannot convert a decimal header for a stream: the publisher's
    connection is closed with 541; a classic queue beside it got it, the stream did not."""
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-x", "fanout", auto_delete=True)
        ch.queue_bind(stream, f"{name}-x")
        ch.queue_declare(f"{name}-q", auto_delete=False)
        ch.queue_bind(f"{name}-q", f"{name}-x")

    def action(ch: BlockingChannel) -> None:
        ch.confirm_delivery()
        ch.basic_publish(f"{name}-x", "", b"d", pika.BasicProperties(
            headers={"k": 1, "price": decimal.Decimal("1.50")}))  # fmt: skip

    assert connection_error(broker, action) == (541, "INTERNAL_ERROR")
    publish(broker, stream, [b"after"])  # the stream still takes messages
    assert [b for _, b, _ in consume(broker, stream, "first", 1)] == [b"after"]
    with connect(broker) as conn:
        ch = conn.channel()
        assert ch.queue_declare(f"{name}-q", passive=True).method.message_count == 1
        ch.queue_delete(f"{name}-q")
