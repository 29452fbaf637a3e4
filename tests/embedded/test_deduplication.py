"""Deduplication with rabbitmq-message-deduplication's names, through pika: the
``x-message-deduplication`` exchange (cache size, TTL, persistence across a restart) and
queues (classic and quorum) that hold one message per ``x-deduplication-header``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def publish(ch: Any, exchange: str, key: str, dedup: Any = None, **headers: Any) -> None:
    if dedup is not None:
        headers["x-deduplication-header"] = dedup
    ch.basic_publish(exchange, key, b"m", pika.BasicProperties(headers=headers or None))


def count(ch: Any, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def dedup_exchange(ch: Any, name: str, **arguments: Any) -> str:
    ch.exchange_declare(name, "x-message-deduplication", arguments=arguments)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, name, "")
    return str(q)


def test_the_exchange_routes_an_identity_once(leveret_clock: leveret.Broker) -> None:
    conn = connect(leveret_clock.url)
    ch = conn.channel()
    ch.confirm_delivery()
    q = dedup_exchange(ch, "dd", **{"x-cache-size": 10, "x-cache-ttl": 60_000})
    for value in ("a", "a", "b", 1, 1, "1"):
        publish(ch, "dd", "any-key", value)  # confirmed, duplicates too
    publish(ch, "dd", "any-key")  # no header: never a duplicate
    publish(ch, "dd", "any-key")
    assert count(ch, q) == 6  # a, b, 1, "1", and the two without the header
    leveret_clock.advance(59)
    publish(ch, "dd", "k", "a")
    assert count(ch, q) == 6
    leveret_clock.advance(2)  # the exchange's TTL: a minute
    publish(ch, "dd", "k", "a")
    assert count(ch, q) == 7
    # the message's x-cache-ttl header wins over the exchange's
    publish(ch, "dd", "k", "short", **{"x-cache-ttl": 1000})
    publish(ch, "dd", "k", "short", **{"x-cache-ttl": 1000})
    leveret_clock.advance(1.5)
    publish(ch, "dd", "k", "short")
    assert count(ch, q) == 9
    conn.close()


def test_a_full_cache_pushes_out_its_oldest(leveret_clock: leveret.Broker) -> None:
    conn = connect(leveret_clock.url)
    ch = conn.channel()
    q = dedup_exchange(ch, "small", **{"x-cache-size": 2})
    for value in ("a", "b", "c", "a", "c"):
        publish(ch, "small", "", value)
    assert count(ch, q) == 4  # a, b, c, a again (pushed out by c); c still remembered
    conn.close()


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
        (
            {"x-cache-size": 0},
            "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0",
        ),
        (
            {"x-cache-size": 5, "x-cache-ttl": -1},
            "Invalid argument, 'x-cache-ttl' must be an integer greater than 0",
        ),
        (
            {"x-cache-size": 5, "x-cache-persistence": "tape"},
            "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'",
        ),
    ],
)
def test_bad_arguments_are_refused(
    leveret_broker: leveret.Broker, amqp_url: str, arguments: dict[str, Any], text: str
) -> None:
    conn = connect(amqp_url)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.exchange_declare("bad", "x-message-deduplication", arguments=arguments)
    assert (info.value.reply_code, info.value.reply_text) == (406, f"PRECONDITION_FAILED - {text}")
    conn.close()


@pytest.mark.parametrize(("persistence", "kept"), [("disk", True), ("memory", False)])
def test_a_disk_cache_survives_a_restart(tmp_path: Path, persistence: str, kept: bool) -> None:
    args = {"x-cache-size": 100, "x-cache-persistence": persistence}
    with leveret.Broker(data_dir=tmp_path) as b:
        conn = connect(b.url)
        ch = conn.channel()
        ch.exchange_declare("durable-dd", "x-message-deduplication", durable=True, arguments=args)
        ch.queue_declare("dd-q", durable=True)
        ch.queue_bind("dd-q", "durable-dd", "")
        publish(ch, "durable-dd", "", "order-1")
        conn.close()
    with leveret.Broker(data_dir=tmp_path) as b:
        conn = connect(b.url)
        ch = conn.channel()
        ch.confirm_delivery()
        publish(ch, "durable-dd", "", "order-1")
        publish(ch, "durable-dd", "", "order-2")
        # the first run's message was transient: gone with the restart
        assert count(ch, "dd-q") == (1 if kept else 2)
        ch.exchange_delete("durable-dd")
        conn.close()
    assert not list((tmp_path / "plugins").rglob("*.cache"))  # gone with its exchange


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_queue_holds_one_message_per_identity(amqp_url: str, queue_type: str) -> None:
    conn = connect(amqp_url)
    ch = conn.channel()
    ch.confirm_delivery()
    q = f"dedup-{queue_type}"
    ch.queue_declare(
        q,
        durable=True,
        arguments={"x-message-deduplication": True, "x-queue-type": queue_type},
    )
    for value in ("a", "a", "b", "a"):
        publish(ch, "", q, value)
    publish(ch, "", q)
    publish(ch, "", q)
    assert count(ch, q) == 4  # a, b and the two without the header
    method, props, _ = ch.basic_get(q)
    assert method is not None and props.headers["x-deduplication-header"] == "a"
    publish(ch, "", q, "a")  # still in the queue, unacknowledged
    assert count(ch, q) == 3
    ch.basic_ack(method.delivery_tag)
    publish(ch, "", q, "a")  # gone: welcome again
    assert count(ch, q) == 4
    ch.queue_purge(q)
    publish(ch, "", q, "b")
    assert count(ch, q) == 1
    ch.queue_delete(q)
    conn.close()


def test_other_queues_keep_duplicates(amqp_url: str) -> None:
    conn = connect(amqp_url)
    ch = conn.channel()
    ch.queue_declare("plain")
    publish(ch, "", "plain", "a")
    publish(ch, "", "plain", "a")
    assert count(ch, "plain") == 2
    conn.close()
