"""Quorum queues, the same on both brokers: what a declaration may be, delivery counts
and limits, where returned messages go, length limits, dead-lettering and consumers."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.differential.helpers import (
    channel_error,
    connect,
    connection_error,
    death_times_checked,
    settle,
)
from tests.support.brokers import BrokerUnderTest

QUORUM = {"x-queue-type": "quorum"}


def declare(ch: Any, name: str, **args: Any) -> None:
    ch.queue_declare(name, durable=True, arguments={**QUORUM, **args})


def to_queue(dead: str) -> dict[str, str]:
    """The arguments that dead-letter into queue ``dead`` (through the default exchange)."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}


def declared_with(conn: pika.BlockingConnection, q: str, bodies: list[bytes], **args: Any) -> Any:
    """A channel in confirm mode on which quorum queue ``q`` is declared (with ``args``)
    and ``bodies`` are published to it, each confirmed."""
    ch = conn.channel()
    ch.confirm_delivery()
    declare(ch, q, **args)
    for body in bodies:
        ch.basic_publish("", q, body)
    return ch


@pytest.fixture
def qname(broker: BrokerUnderTest, name: str) -> Any:
    """A quorum queue name, deleted after the test (quorum queues are durable)."""
    made: list[str] = []

    def make(suffix: str = "") -> str:
        made.append(f"{name}{suffix}")
        return made[-1]

    yield make
    with connect(broker) as conn:
        ch = conn.channel()
        for q in made:
            ch.queue_delete(q)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"exclusive": True}, "invalid property 'exclusive-owner' for queue '{q}' in vhost '/'"),
        ({"durable": False}, "invalid property 'non-durable' for queue '{q}' in vhost '/'"),
        ({"auto_delete": True}, "invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
        # every property wrong: auto-delete is checked first
        (
            {"durable": False, "auto_delete": True, "exclusive": True},
            "invalid property 'auto-delete' for queue '{q}' in vhost '/'",
        ),
        # arguments are checked before properties
        (
            {"durable": False, "arguments": {"x-max-priority": 5}},
            "invalid arg 'x-max-priority' for queue '{q}' in vhost '/' of queue type "
            "rabbit_quorum_queue",
        ),
        (
            {"durable": False, "arguments": {"x-max-length": -1}},
            "invalid arg 'x-max-length' for queue '{q}' in vhost '/': {{value_negative,-1}}",
        ),
    ],
)
def test_refused_declarations(
    broker: BrokerUnderTest, name: str, kwargs: dict[str, Any], text: str
) -> None:
    kwargs = dict(kwargs)  # the parameters are shared by both brokers' runs
    args = {**QUORUM, **kwargs.pop("arguments", {})}
    kwargs.setdefault("durable", True)
    got = channel_error(broker, lambda ch: ch.queue_declare(name, arguments=args, **kwargs))
    assert got == (406, "PRECONDITION_FAILED - " + text.format(q=name))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("x-max-priority", 5, None),
        ("x-queue-mode", "lazy", None),
        ("x-queue-version", 2, None),
        ("x-max-age", "1D", None),
        ("x-stream-max-segment-size-bytes", 100, None),
        ("x-initial-cluster-size", 1, None),
        ("x-queue-master-locator", "min-masters", None),
        ("x-quorum-initial-group-size", 0, "{value_zero,0}"),
        ("x-quorum-initial-group-size", "x", '"expected integer, got longstr"'),
        ("x-dead-letter-strategy", "bogus", "invalid_dlx_strategy"),
        ("x-dead-letter-strategy", 5, "{unacceptable_type,signedint}"),
        ("x-queue-leader-locator", "nope", "invalid_queue_locator_arg"),
        ("x-single-active-consumer", 1, "{unacceptable_type,signedint}"),
        ("x-expires", 0, "{value_zero,0}"),
        ("x-message-ttl", -1, "{value_negative,-1}"),
        ("x-overflow", "sideways", "invalid_overflow"),
        ("x-max-in-memory-length", -2, "{value_negative,-2}"),
    ],
)
def test_refused_arguments(
    broker: BrokerUnderTest, name: str, key: str, value: Any, reason: str | None
) -> None:
    got = channel_error(broker, lambda ch: declare(ch, name, **{key: value}))
    where = f"queue '{name}' in vhost '/'"
    expected = (
        f"invalid arg '{key}' for {where} of queue type rabbit_quorum_queue"
        if reason is None
        else f"invalid arg '{key}' for {where}: {reason}"
    )
    assert got == (406, "PRECONDITION_FAILED - " + expected)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("x-quorum-initial-group-size", 3),  # one node: taken, as RabbitMQ on one node
        ("x-delivery-limit", "abc"),  # RabbitMQ does not check it
        ("x-overflow", "reject-publish-dlx"),  # taken, behaves as drop-head
        ("x-max-in-memory-length", 5),  # RabbitMQ 3.10 takes it and ignores it
        ("x-max-in-memory-bytes", 5),
        ("x-queue-leader-locator", "balanced"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-something-else", 1),  # unknown arguments are no type's: taken
    ],
)
def test_accepted_arguments(broker: BrokerUnderTest, qname: Any, key: str, value: Any) -> None:
    q = qname()
    with connect(broker) as conn:
        ch = conn.channel()
        declare(ch, q, **{key: value})
        ok = ch.queue_declare(q, passive=True).method
        assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)


def test_redeclare_and_server_named(broker: BrokerUnderTest, qname: Any) -> None:
    q = qname()
    with connect(broker) as conn:
        declare(conn.channel(), q)
    assert channel_error(broker, lambda ch: ch.queue_declare(q, durable=True)) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}' in vhost "
        "'/': received none but current is the value 'quorum' of type 'longstr'",
    )
    assert channel_error(broker, lambda ch: declare(ch, q, **{"x-max-length": 3})) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost "
        "'/': received the value '3' of type 'signedint' but current is none",
    )
    assert channel_error(broker, lambda ch: declare(ch, "")) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
    )


def test_consumer_arguments_and_global_qos(broker: BrokerUnderTest, qname: Any) -> None:
    q = qname()
    with connect(broker) as conn:
        declare(conn.channel(), q)
    where = f"queue '{q}' in vhost '/'"
    for args, text in [
        (
            {"x-stream-offset": "first"},
            f"invalid arg 'x-stream-offset' for {where} of queue type rabbit_quorum_queue",
        ),
        (
            {"x-cancel-on-ha-failover": True},
            f"invalid arg 'x-cancel-on-ha-failover' for {where} of queue type rabbit_quorum_queue",
        ),
        (
            {"x-priority": "high"},
            f"invalid arg 'x-priority' for {where}: \"expected integer, got longstr\"",
        ),
    ]:
        got = channel_error(
            broker, lambda ch, a=args: ch.basic_consume(q, lambda *x: None, arguments=a)
        )
        assert got == (406, "PRECONDITION_FAILED - " + text)

    def global_qos(ch: Any) -> None:
        ch.basic_qos(prefetch_count=5, global_qos=True)
        ch.basic_consume(q, lambda *x: None)

    assert connection_error(broker, global_qos) == (
        540,
        f"NOT_IMPLEMENTED - {where} does not support global qos",
    )


def items(props: Any) -> list[tuple[str, Any]]:
    return list((props.headers or {}).items())


def test_delivery_counts_and_limit(broker: BrokerUnderTest, qname: Any) -> None:
    """basic.get always carries x-delivery-count (0 the first time); a consumer's first
    delivery carries none; once returned the message is redelivered with its count, the
    headers table sorted; past the limit it is dead-lettered (delivery_limit)."""
    q, dead = qname(), qname("-dead")
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        declare(ch, q, **{"x-delivery-limit": 1, **to_queue(dead)})
        declare(ch, dead)
        headers = {"z": 1, "a": 2}
        ch.basic_publish("", q, b"got", pika.BasicProperties(headers=headers))
        m, p, _ = ch.basic_get(q)
        assert (m.redelivered, items(p)) == (False, [("a", 2), ("x-delivery-count", 0), ("z", 1)])
        ch.basic_nack(m.delivery_tag, requeue=True)
        m, p, _ = ch.basic_get(q)
        assert (m.redelivered, items(p)) == (True, [("a", 2), ("x-delivery-count", 1), ("z", 1)])
        ch.basic_nack(m.delivery_tag, requeue=True)
        settle(conn, 0.2)
        assert ch.basic_get(q)[0] is None  # returned twice: past the limit of 1
        ch.basic_publish("", q, b"consumed", pika.BasicProperties(headers=headers))
        got: list[tuple[bool, list[tuple[str, Any]], bytes]] = []

        def on(c: Any, m: Any, p: Any, body: bytes) -> None:
            got.append((m.redelivered, items(p), body))
            c.basic_nack(m.delivery_tag, requeue=True)

        tag = ch.basic_consume(q, on)
        settle(conn, 0.6)
        ch.basic_cancel(tag)
        assert got == [
            (False, [("z", 1), ("a", 2)], b"consumed"),
            (True, [("a", 2), ("x-delivery-count", 1), ("z", 1)], b"consumed"),
        ]
        for body in (b"got", b"consumed"):
            m, p, b = ch.basic_get(dead, auto_ack=True)
            assert (m.redelivered, b) == (False, body)
            assert list(death_times_checked(p.headers).items()) == [
                ("a", 2),
                (
                    "x-death",
                    [
                        {
                            "count": 1,
                            "reason": "delivery_limit",
                            "queue": q,
                            "time": "<now>",
                            "exchange": "",
                            "routing-keys": [q],
                        }
                    ],
                ),
                ("x-delivery-count", 0),  # dead is a quorum queue too: basic.get adds it
                ("x-first-death-exchange", ""),
                ("x-first-death-queue", q),
                ("x-first-death-reason", "delivery_limit"),
                ("z", 1),
            ]


def test_where_returned_messages_go(broker: BrokerUnderTest, qname: Any) -> None:
    """Without a delivery limit a nacked message goes to the back of the queue; with one
    it goes to the front; a closed channel's messages go to the front either way."""
    plain, limited = qname("-plain"), qname("-limited")
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        declare(ch, plain)
        declare(ch, limited, **{"x-delivery-limit": 10})
        for q in (plain, limited):
            for i in range(4):
                ch.basic_publish("", q, f"m{i}".encode())
        order = {}
        for q in (plain, limited):
            first = ch.basic_get(q)[0]
            second = ch.basic_get(q)[0]
            ch.basic_nack(second.delivery_tag, requeue=True)
            ch.basic_nack(first.delivery_tag, requeue=True)
            settle(conn, 0.2)
            order[q] = [ch.basic_get(q, auto_ack=True)[2] for _ in range(5)]
        assert order == {
            plain: [b"m2", b"m3", b"m1", b"m0", None],
            limited: [b"m1", b"m0", b"m2", b"m3", None],
        }
        for i in range(3):
            ch.basic_publish("", plain, f"n{i}".encode())
        other = conn.channel()
        first = other.basic_get(plain)[0]
        assert first is not None
        other.close()  # n0 returns to the front, counted
        settle(conn, 0.2)
        m, p, b = ch.basic_get(plain, auto_ack=True)
        assert (b, m.redelivered, p.headers["x-delivery-count"]) == (b"n0", True, 1)
        assert [ch.basic_get(plain, auto_ack=True)[2] for _ in range(3)] == [b"n1", b"n2", None]


def test_length_limits(broker: BrokerUnderTest, qname: Any) -> None:
    """drop-head drops (and dead-letters) the oldest; reject-publish takes the message
    that crosses the limit and refuses the next ones until the queue is under 80% of it;
    reject-publish-dlx is taken as drop-head."""
    drop, reject, rdlx, dead = qname("-drop"), qname("-reject"), qname("-rdlx"), qname("-dead")
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        declare(ch, dead)
        declare(ch, drop, **{"x-max-length": 2, **to_queue(dead)})
        declare(ch, reject, **{"x-max-length": 2, "x-overflow": "reject-publish"})
        declare(ch, rdlx, **{"x-max-length-bytes": 4, "x-overflow": "reject-publish-dlx"})
        answers = []
        for i in range(5):
            for q in (drop, reject):
                try:
                    ch.basic_publish("", q, f"m{i}".encode())
                    answers.append((q, "ack"))
                except pika.exceptions.NackError:
                    answers.append((q, "nack"))
            ch.basic_publish("", rdlx, f"m{i}".encode())
        assert [a for q, a in answers if q == drop] == ["ack"] * 5
        assert [a for q, a in answers if q == reject] == ["ack", "ack", "ack", "nack", "nack"]
        assert [ch.basic_get(drop, auto_ack=True)[2] for _ in range(3)] == [b"m3", b"m4", None]
        assert [ch.basic_get(rdlx, auto_ack=True)[2] for _ in range(3)] == [b"m3", b"m4", None]
        dropped = []
        while (got := ch.basic_get(dead, auto_ack=True))[0] is not None:
            dropped.append((got[2], got[1].headers["x-death"][0]["reason"]))
        assert dropped == [(b"m0", "maxlen"), (b"m1", "maxlen"), (b"m2", "maxlen")]
        assert ch.queue_declare(reject, passive=True).method.message_count == 3
        ch.basic_get(reject, auto_ack=True)  # 2 left: not yet under 80% of 2 (1)
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", reject, b"still refused")
        ch.basic_get(reject, auto_ack=True)  # 1 left: publishers may publish again
        ch.basic_publish("", reject, b"taken")
        assert [ch.basic_get(reject, auto_ack=True)[2] for _ in range(3)] == [b"m2", b"taken", None]


def test_dead_lettering_strategies(broker: BrokerUnderTest, qname: Any) -> None:
    """at-most-once (the default) dead-letters expired and rejected messages as classic
    queues do; at-least-once keeps a dead letter nobody takes in the queue, where it
    counts against the length limit."""
    src, alo, dead = qname("-src"), qname("-alo"), qname("-dead")
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        declare(ch, dead)
        declare(ch, src, **{"x-message-ttl": 50, **to_queue(dead)})
        ch.basic_publish("", src, b"expiring", pika.BasicProperties(expiration="20000"))
        settle(conn, 0.4)
        assert ch.basic_get(src)[0] is None
        m, p, b = ch.basic_get(dead, auto_ack=True)
        assert b == b"expiring"
        assert death_times_checked(p.headers)["x-death"] == [
            {
                "count": 1,
                "reason": "expired",
                "queue": src,
                "time": "<now>",
                "exchange": "",
                "routing-keys": [src],
                "original-expiration": "20000",
            }
        ]
        ch.exchange_declare(f"{alo}-x", "fanout", auto_delete=True)
        ch.queue_bind(dead, f"{alo}-x")  # keeps the exchange
        ch.exchange_declare(f"{alo}-nowhere", "fanout", durable=True)
        declare(
            ch,
            alo,
            **{
                "x-dead-letter-exchange": f"{alo}-nowhere",
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
                "x-max-length": 3,
            },
        )
        for i in range(2):
            ch.basic_publish("", alo, f"r{i}".encode())
        for _ in range(2):
            m = ch.basic_get(alo)[0]
            ch.basic_reject(m.delivery_tag, requeue=False)
        settle(conn, 0.2)
        # no route: both dead letters stay, counted against the limit of 3
        assert ch.queue_declare(alo, passive=True).method.message_count == 0
        answers = []
        for i in range(3):
            try:
                ch.basic_publish("", alo, f"n{i}".encode())
                answers.append("ack")
            except pika.exceptions.NackError:
                answers.append("nack")
        assert answers == ["ack", "ack", "nack"]
        ch.exchange_delete(f"{alo}-nowhere")


def test_single_active_consumer_refuses_get(broker: BrokerUnderTest, qname: Any) -> None:
    q = qname()
    with connect(broker) as conn:
        declare(conn.channel(), q, **{"x-single-active-consumer": True})
    assert channel_error(broker, lambda ch: ch.basic_get(q)) == (
        405,
        f"RESOURCE_LOCKED - cannot obtain access to locked queue '{q}' in vhost '/'. "
        "basic.get operations are not supported by quorum queues with single active consumer",
    )


def test_purge_recover_and_persistence_of_a_plain_publish(
    broker: BrokerUnderTest, qname: Any
) -> None:
    q = qname()
    with connect(broker) as conn:
        ch = declared_with(conn, q, [b"m0", b"m1", b"m2"])
        got: list[tuple[bytes, bool]] = []
        ch.basic_qos(prefetch_count=1)
        tag = ch.basic_consume(q, lambda c, m, p, b: got.append((b, m.redelivered)))
        settle(conn, 0.3)
        ch.basic_recover(requeue=True)  # a client return: to the back
        settle(conn, 0.3)
        ch.basic_cancel(tag)
        assert got[:2] == [(b"m0", False), (b"m1", False)]
        settle(conn, 0.2)
        assert ch.queue_purge(q).method.message_count in (2, 3)


def test_an_unsettled_get_counts_as_a_consumer(broker: BrokerUnderTest, qname: Any) -> None:
    """rabbit_fifo serves basic.get through a consumer of its own, which lives until its
    message is settled: queue.declare-ok counts it."""
    q = qname()
    with connect(broker) as conn:
        ch = declared_with(conn, q, [b"m0", b"m1", b"m2"])
        m = ch.basic_get(q)[0]
        ch.basic_get(q, auto_ack=True)
        ok = ch.queue_declare(q, passive=True).method
        assert (ok.message_count, ok.consumer_count) == (1, 1)
        ch.basic_ack(m.delivery_tag)
        settle(conn, 0.2)
        ok = ch.queue_declare(q, passive=True).method
        assert (ok.message_count, ok.consumer_count) == (1, 0)


def test_a_poison_message_without_dead_letter_exchange_is_dropped(
    broker: BrokerUnderTest, qname: Any
) -> None:
    q = qname()
    with connect(broker) as conn:
        ch = declared_with(conn, q, [b"poison", b"fine"], **{"x-delivery-limit": 0})
        m = ch.basic_get(q)[0]
        ch.basic_nack(m.delivery_tag, requeue=True)  # returned once: past a limit of 0
        settle(conn, 0.2)
        ok = ch.queue_declare(q, passive=True).method
        assert ok.message_count == 1
        assert ch.basic_get(q, auto_ack=True)[2] == b"fine"
