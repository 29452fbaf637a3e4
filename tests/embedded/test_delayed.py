"""``x-delayed-message`` (rabbitmq-delayed-message-exchange) through pika: delays of an
hour on a manual clock, routing by ``x-delayed-type``, the plugin's refusals, the count
in the management API, and the schedule surviving a restart."""

from __future__ import annotations

import json
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def confirming(url: str) -> tuple[pika.BlockingConnection, Any]:
    """A connection and a channel in confirm mode on it."""
    conn = connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def bind(ch: Any, queue: str, exchange: str, key: str, durable: bool = False) -> None:
    ch.queue_declare(queue, durable=durable)
    ch.queue_bind(queue, exchange, key)


def count(ch: Any, queue: str) -> int:
    return int(ch.queue_declare(queue, passive=True).method.message_count)


def delayed_exchange(ch: Any, name: str, kind: str = "direct", durable: bool = False) -> None:
    ch.exchange_declare(
        name, "x-delayed-message", durable=durable, arguments={"x-delayed-type": kind}
    )


def publish(ch: Any, exchange: str, key: str, body: bytes, delay: Any = None, **kw: Any) -> None:
    headers = {"x-delay": delay} if delay is not None else None
    ch.basic_publish(exchange, key, body, pika.BasicProperties(headers=headers, **kw))


def test_an_hour_passes_on_the_manual_clock(leveret_clock: leveret.Broker) -> None:
    conn, ch = confirming(leveret_clock.url)
    delayed_exchange(ch, "later")
    bind(ch, "inbox", "later", "mail")
    publish(ch, "later", "mail", b"in an hour", 3_600_000)
    publish(ch, "later", "mail", b"in a minute", 60_000)
    publish(ch, "later", "mail", b"now")  # no x-delay: routed at once
    publish(ch, "later", "mail", b"now too", 0)
    publish(ch, "later", "mail", b"and now", -5)
    publish(ch, "later", "other", b"elsewhere", 1000)  # routed when due: to no queue
    assert count(ch, "inbox") == 3
    leveret_clock.advance(59.9)
    assert count(ch, "inbox") == 3
    leveret_clock.advance(0.2)
    assert count(ch, "inbox") == 4
    leveret_clock.advance(3539)
    assert count(ch, "inbox") == 4
    leveret_clock.advance(1)
    bodies, delays = [], []
    while True:
        method, props, body = ch.basic_get("inbox", auto_ack=True)
        if method is None:
            break
        bodies.append(body)
        delays.append((props.headers or {}).get("x-delay"))
    assert bodies == [b"now", b"now too", b"and now", b"in a minute", b"in an hour"]
    # as the plugin: the header is made negative when the message leaves the schedule
    assert delays == [None, 0, -5, -60_000, -3_600_000]
    conn.close()


def test_routing_follows_x_delayed_type(leveret_clock: leveret.Broker) -> None:
    conn, ch = confirming(leveret_clock.url)
    delayed_exchange(ch, "later-topic", "topic")
    bind(ch, "eu", "later-topic", "orders.eu.*")
    bind(ch, "all", "later-topic", "orders.#")
    publish(ch, "later-topic", "orders.eu.fr", b"1", 5000)
    publish(ch, "later-topic", "orders.us.ny", b"2", 1000)
    leveret_clock.advance(5)
    assert (count(ch, "eu"), count(ch, "all")) == (1, 2)
    _method, _, body = ch.basic_get("all", auto_ack=True)
    assert body == b"2"  # the shorter delay first
    conn.close()


def test_a_delayed_mandatory_message_comes_back(leveret_clock: leveret.Broker) -> None:
    """As the plugin's README says: a delayed message routes nowhere when published, so
    mandatory returns it (the plugin does not support mandatory)."""
    conn, ch = confirming(leveret_clock.url)
    delayed_exchange(ch, "later-m")
    bind(ch, "m", "later-m", "k")
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(
            "later-m", "k", b"x", pika.BasicProperties(headers={"x-delay": 1000}), mandatory=True
        )
    leveret_clock.advance(2)
    assert count(ch, "m") == 1  # returned, and still scheduled and delivered
    conn.close()


@pytest.mark.parametrize(
    ("arguments", "code", "text"),
    [
        (
            {},
            406,
            "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing "
            "exchange type",
        ),
        (
            {"x-delayed-type": "x-delayed-message"},
            406,
            "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for "
            "'x-delayed-type'",
        ),
        ({"x-delayed-type": "nope"}, 503, "COMMAND_INVALID - unknown exchange type 'nope'"),
    ],
)
def test_refusals(amqp_url: str, arguments: dict[str, Any], code: int, text: str) -> None:
    conn = connect(amqp_url)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.AMQPError) as info:
        ch.exchange_declare("bad", "x-delayed-message", arguments=arguments)
        conn.process_data_events(0.5)
    err: Any = info.value
    assert (err.reply_code, err.reply_text) == (code, text)
    if conn.is_open:
        conn.close()


def _get_json(url: str) -> Any:
    req = urllib.request.Request(url)
    req.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_count_waiting_is_in_the_api() -> None:
    with leveret.Broker(clock="manual", management=True) as b:
        conn, ch = confirming(b.url)
        delayed_exchange(ch, "counted")
        ch.exchange_declare("plain", "direct")
        for i in range(3):
            publish(ch, "counted", "k", b"x", 1000 * (i + 1))
        x = _get_json(f"{b.management_url}/api/exchanges/%2F/counted")
        assert (x["type"], x["messages_delayed"]) == ("x-delayed-message", 3)
        assert "messages_delayed" not in _get_json(f"{b.management_url}/api/exchanges/%2F/plain")
        b.advance(1.5)
        assert _get_json(f"{b.management_url}/api/exchanges/%2F/counted")["messages_delayed"] == 2
        overview = _get_json(f"{b.management_url}/api/overview")
        types = {t["name"]: t["description"] for t in overview["exchange_types"]}
        assert types["x-delayed-message"] == "Delayed Message Exchange."
        node = _get_json(f"{b.management_url}/api/nodes")[0]
        assert "rabbitmq_delayed_message_exchange" in node["enabled_plugins"]
        conn.close()


def test_the_schedule_survives_a_restart(tmp_path: Path) -> None:
    with leveret.Broker(data_dir=tmp_path, clock="manual") as b:
        conn, ch = confirming(b.url)
        delayed_exchange(ch, "durable-later", durable=True)
        bind(ch, "kept", "durable-later", "k", durable=True)
        for i in range(5):
            publish(ch, "durable-later", "k", f"m{i}".encode(), 600_000 + 10 * i, delivery_mode=2)
        b.advance(600.005)  # the first is delivered before the restart
        assert count(ch, "kept") == 1
        conn.close()
    with leveret.Broker(data_dir=tmp_path, clock="manual") as b:
        conn = connect(b.url)
        ch = conn.channel()
        assert count(ch, "kept") == 1
        b.advance(601)  # the new clock starts at the real time, a moment after the first
        bodies = []
        while True:
            method, _, body = ch.basic_get("kept", auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        assert bodies == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # each once
        conn.close()
