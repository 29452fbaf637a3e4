"""A clock tests move: ``Broker(clock="manual")`` and ``advance(seconds)``. Half an hour of
TTL, an hour of queue expiry and a consumer timeout pass in milliseconds, with no sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def count(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def test_thirty_minute_ttl_follows_the_manual_clock(leveret_clock: leveret.Broker) -> None:
    conn = connect(leveret_clock.url)
    ch = conn.channel()
    # confirmed publishes: the broker has them before the clock moves
    ch.confirm_delivery()
    ch.queue_declare("ttl", arguments={"x-message-ttl": 1_800_000})
    ch.basic_publish("", "ttl", b"half an hour")
    ch.basic_publish("", "ttl", b"a minute", pika.BasicProperties(expiration="60000"))
    leveret_clock.advance(59.999)
    assert count(ch, "ttl") == 2
    leveret_clock.advance(0.002)
    method, _, body = ch.basic_get("ttl", auto_ack=True)
    assert method is not None and body == b"half an hour"  # the minute went first
    ch.basic_publish("", "ttl", b"half an hour")
    leveret_clock.advance(1799)
    assert count(ch, "ttl") == 1
    leveret_clock.advance(1.001)
    assert count(ch, "ttl") == 0
    conn.close()


def test_queue_expiry_follows_the_manual_clock(leveret_clock: leveret.Broker) -> None:
    conn = connect(leveret_clock.url)
    ch = conn.channel()
    ch.queue_declare("idle", arguments={"x-expires": 3_600_000})
    leveret_clock.advance(3599)
    ch.queue_declare("idle", passive=True)  # still there; the declare counts as use
    leveret_clock.advance(3600)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("idle", passive=True)
    assert info.value.reply_code == 404
    conn.close()


def test_consumer_timeout_follows_the_manual_clock(leveret_clock: leveret.Broker) -> None:
    conn = connect(leveret_clock.url)
    ch = conn.channel()
    ch.queue_declare("work")
    ch.basic_publish("", "work", b"job")
    got: list[bytes] = []
    closes: list[BaseException] = []
    ch._impl.add_on_close_callback(lambda _c, reason: closes.append(reason))
    ch.basic_consume("work", lambda c, m, p, b: got.append(b))
    conn.process_data_events(time_limit=0.2)
    assert got == [b"job"]
    leveret_clock.advance(1799)  # RabbitMQ's default: 1,800,000 ms
    conn.process_data_events(time_limit=0.1)
    assert ch.is_open
    leveret_clock.advance(2)
    for _ in range(50):
        if closes:
            break
        conn.process_data_events(time_limit=0.1)
    (reason,) = closes
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
    assert reason.reply_code == 406
    assert reason.reply_text == (
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
        "value used: 1800000 ms. This timeout value can be configured, see consumers doc "
        "guide to learn more"
    )
    ch2 = conn.channel()
    assert count(ch2, "work") == 1  # back in its queue
    conn.close()


def test_advance_needs_a_manual_clock() -> None:
    with leveret.Broker() as b, pytest.raises(RuntimeError, match="manual clock"):
        b.advance(1)
    with pytest.raises(ValueError, match="manual"):
        leveret.Broker(clock="sundial")
    with pytest.raises(ValueError, match="forward"), leveret.Broker(clock="manual") as b:
        b.advance(-1)


def test_a_manual_clock_is_its_own_broker_s_alone(leveret_clock: leveret.Broker) -> None:
    """Another broker in the same process keeps the system's time."""
    with leveret.Broker() as other:
        conn = connect(other.url)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", arguments={"x-message-ttl": 3_600_000})
        ch.basic_publish("", "q", b"kept")
        leveret_clock.advance(7200)
        assert count(ch, "q") == 1
        conn.close()


def test_stream_retention_follows_the_manual_clock(tmp_path: Path) -> None:
    with leveret.Broker(data_dir=tmp_path, clock="manual") as b:
        conn = connect(b.url)
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(
            "events",
            durable=True,
            arguments={
                "x-queue-type": "stream",
                "x-max-age": "1h",
                "x-stream-max-segment-size-bytes": 500,
            },
        )
        for i in range(20):
            ch.basic_publish("", "events", f"old-{i}".encode() + b"x" * 200)
        b.advance(1800)
        assert read_stream(conn.channel(), "events", 20) == 20  # half an hour: all kept
        b.advance(1801)
        ch.basic_publish("", "events", b"new")
        got = read_stream(conn.channel(), "events", 1)
        assert 1 <= got <= 10  # the segments older than an hour went
        conn.close()


def read_stream(ch: Any, queue: str, at_least: int) -> int:
    """How many messages a consumer from the first offset gets."""
    ch.basic_qos(prefetch_count=1000)
    got: list[bytes] = []
    ch.basic_consume(
        queue,
        lambda c, m, p, body: (got.append(body), c.basic_ack(m.delivery_tag)),
        arguments={"x-stream-offset": "first"},
    )
    for _ in range(30):
        ch.connection.process_data_events(time_limit=0.1)
        if len(got) >= at_least:
            ch.connection.process_data_events(time_limit=0.3)
            break
    ch.close()
    return len(got)
