"""basic.consume arguments on each queue type, the same on both brokers: each type takes
its own (classic: x-priority, x-cancel-on-ha-failover, x-credit; quorum: x-priority,
x-credit; stream: x-stream-offset, x-credit), checks their types, and refuses the other
types' arguments; unknown arguments are ignored; a non-table x-credit crashes RabbitMQ's
channel on classic and quorum queues."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential.helpers import connect, settle
from tests.support.brokers import BrokerUnderTest

TYPES = {
    "classic": {},
    "quorum": {"x-queue-type": "quorum"},
    "stream": {"x-queue-type": "stream"},
}


@pytest.fixture
def queues(broker: BrokerUnderTest, name: str) -> Iterator[dict[str, str]]:
    made = {kind: f"{name}-{kind}" for kind in TYPES}
    with connect(broker) as conn:
        ch = conn.channel()
        for kind, q in made.items():
            ch.queue_declare(q, durable=True, arguments=TYPES[kind])
    yield made
    with connect(broker) as conn:
        ch = conn.channel()
        for q in made.values():
            ch.queue_delete(q)


CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("classic", {"x-priority": "high"}, '{where}: "expected integer, got longstr"'),
    ("classic", {"x-priority": 5}, None),
    ("classic", {"x-cancel-on-ha-failover": "yes"}, "{where}: {{unacceptable_type,longstr}}"),
    ("classic", {"x-cancel-on-ha-failover": True}, None),
    ("classic", {"x-credit": {"credit": 2, "drain": False}}, None),
    ("classic", {"x-stream-offset": "first"}, "{where} of queue type rabbit_classic_queue"),
    ("classic", {"x-foo": 1}, None),
    ("quorum", {"x-priority": "high"}, '{where}: "expected integer, got longstr"'),
    ("quorum", {"x-priority": 5}, None),
    ("quorum", {"x-cancel-on-ha-failover": True}, "{where} of queue type rabbit_quorum_queue"),
    ("quorum", {"x-credit": {"credit": 2, "drain": False}}, None),
    ("quorum", {"x-stream-offset": "first"}, "{where} of queue type rabbit_quorum_queue"),
    ("quorum", {"x-foo": 1}, None),
    ("stream", {"x-priority": 5}, "{where} of queue type rabbit_stream_queue"),
    ("stream", {"x-cancel-on-ha-failover": True}, "{where} of queue type rabbit_stream_queue"),
    ("stream", {"x-credit": 5}, None),
    ("stream", {"x-stream-offset": "first"}, None),
    ("stream", {"x-foo": 1}, None),
]


@pytest.mark.parametrize(("kind", "args", "refusal"), CASES)
def test_consumer_arguments(
    broker: BrokerUnderTest,
    queues: dict[str, str],
    kind: str,
    args: dict[str, Any],
    refusal: str | None,
) -> None:
    import pika

    q = queues[kind]
    with connect(broker) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)  # streams need one
        if refusal is None:
            ch.basic_consume(q, lambda *a: None, arguments=args)
            ch.queue_declare(q, passive=True)
            return
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_consume(q, lambda *a: None, arguments=args)
        key = next(iter(args))
        where = f"invalid arg '{key}' for queue '{q}' in vhost '/'"
        assert (info.value.reply_code, info.value.reply_text) == (
            406,
            "PRECONDITION_FAILED - " + refusal.format(where=where),
        )


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_an_x_credit_that_is_no_table_crashes_the_channel(
    broker: BrokerUnderTest, queues: dict[str, str], kind: str
) -> None:
    import pika

    conn = pika.BlockingConnection(broker.pika_params())
    try:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.channel().basic_consume(queues[kind], lambda *a: None, arguments={"x-credit": 5})
            settle(conn, 0.2)
        assert (info.value.reply_code, info.value.reply_text) == (541, "INTERNAL_ERROR")
    finally:
        if conn.is_open:
            conn.close()
