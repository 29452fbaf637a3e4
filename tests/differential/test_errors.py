"""Every misuse gets the reply, code and text RabbitMQ 3.10.8 gives. Each test runs on
Leveret and on RabbitMQ with the same expectations."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.differential.helpers import channel_error, connect, connection_error
from tests.support.brokers import BrokerUnderTest
from tests.support.identity import inequivalent


def test_publish_to_missing_exchange(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.basic_publish(name, "rk", b"x")) == (
        404,
        f"NOT_FOUND - no exchange '{name}' in vhost '/'",
    )


def test_passive_declare_of_missing_exchange(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.exchange_declare(name, passive=True)) == (
        404,
        f"NOT_FOUND - no exchange '{name}' in vhost '/'",
    )


def test_passive_declare_of_missing_queue(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.queue_declare(name, passive=True)) == (
        404,
        f"NOT_FOUND - no queue '{name}' in vhost '/'",
    )


def test_bind_to_missing_exchange(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, f"{name}-x")

    assert channel_error(broker, action) == (
        404,
        f"NOT_FOUND - no exchange '{name}-x' in vhost '/'",
    )


def test_bind_missing_queue(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.queue_bind(name, "amq.fanout")) == (
        404,
        f"NOT_FOUND - no queue '{name}' in vhost '/'",
    )


@pytest.mark.parametrize(
    ("arg", "redeclared", "received", "current"),
    [
        ("type", {"exchange_type": "direct"}, "'direct'", "'fanout'"),
        ("durable", {"durable": True}, "'true'", "'false'"),
    ],
)
def test_exchange_inequivalent(
    broker: BrokerUnderTest,
    name: str,
    arg: str,
    redeclared: dict[str, Any],
    received: str,
    current: str,
) -> None:
    """A fanout exchange declared again with another type, or durable."""

    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.exchange_declare(name, "fanout", auto_delete=True)
        ch.exchange_declare(name, **{"exchange_type": "fanout", "auto_delete": True, **redeclared})

    code, text = channel_error(broker, action)
    with connect(broker) as conn:
        conn.channel().exchange_delete(name)
    assert (code, text) == (406, inequivalent(arg, "exchange", name, received, current))


def test_queue_durable_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, auto_delete=True, arguments={"x-expires": 60000})
        ch.queue_declare(name, durable=True, auto_delete=True, arguments={"x-expires": 60000})

    assert channel_error(broker, action) == (
        406,
        inequivalent("durable", "queue", name, "'true'", "'false'"),
    )


def test_queue_argument_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True, arguments={"x-message-ttl": 1000})
        ch.queue_declare(name, exclusive=True)

    assert channel_error(broker, action) == (
        406,
        inequivalent(
            "x-message-ttl", "queue", name, "none", "the value '1000' of type 'signedint'"
        ),
    )


def test_reserved_exchange_name(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.exchange_declare(f"amq.{name}", "direct")) == (
        403,
        f"ACCESS_REFUSED - exchange name 'amq.{name}' contains reserved prefix 'amq.*'",
    )


def test_reserved_queue_name(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(broker, lambda ch: ch.queue_declare(f"amq.{name}")) == (
        403,
        f"ACCESS_REFUSED - queue name 'amq.{name}' contains reserved prefix 'amq.*'",
    )


def test_delete_builtin_exchange(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.exchange_delete("amq.direct")) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )


def test_declare_default_exchange(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.exchange_declare("", "direct", passive=True)) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_bind_to_default_exchange(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, "", routing_key="x")

    assert channel_error(broker, action) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )


def test_publish_to_internal_exchange(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.exchange_declare(name, "fanout", internal=True, auto_delete=True)
        ch.basic_publish(name, "", b"x")

    assert channel_error(broker, action) == (
        403,
        f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'",
    )


def test_exclusive_queue_of_another_connection(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as owner:
        owner.channel().queue_declare(name, exclusive=True)
        text = (
            f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' "
            "in vhost '/'. It could be originally declared on another connection or the "
            "exclusive property value does not match that of the original declaration."
        )
        assert channel_error(broker, lambda ch: ch.queue_declare(name, exclusive=True)) == (
            405,
            text,
        )
        assert channel_error(broker, lambda ch: ch.basic_get(name)) == (405, text)
        assert channel_error(broker, lambda ch: ch.queue_purge(name)) == (405, text)
        assert channel_error(broker, lambda ch: ch.queue_delete(name)) == (405, text)


@pytest.mark.parametrize(("settle", "tag"), [("basic_ack", 42), ("basic_reject", 7)])
def test_unknown_delivery_tag(broker: BrokerUnderTest, settle: str, tag: int) -> None:
    assert channel_error(broker, lambda ch: getattr(ch, settle)(tag)) == (
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {tag}",
    )


def test_double_ack(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, b"x")
        method, _, _ = ch.basic_get(name)
        ch.basic_ack(method.delivery_tag)
        ch.basic_ack(method.delivery_tag)

    assert channel_error(broker, action) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_reused_consumer_tag(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None, consumer_tag="ctag")
        ch.basic_consume(name, lambda *a: None, consumer_tag="ctag")

    with pytest.raises(pika.exceptions.DuplicateConsumerTag):
        # pika refuses this itself; go around it below
        channel_error(broker, action)

    def raw(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None, consumer_tag="ctag")
        ch._impl._consumers.pop("ctag")  # make pika forget, so it sends the reuse
        ch._impl._send_method(pika.spec.Basic.Consume(queue=name, consumer_tag="ctag"))

    assert connection_error(broker, raw) == (
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'ctag'",
    )


def test_exclusive_consumer_conflict(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None, exclusive=True)
        ch.basic_consume(name, lambda *a: None)

    assert channel_error(broker, action) == (
        403,
        f"ACCESS_REFUSED - queue '{name}' in vhost '/' in exclusive use",
    )


def test_immediate_is_not_implemented(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch._impl._send_method(
            pika.spec.Basic.Publish(exchange="", routing_key=name, immediate=True),
            (pika.spec.BasicProperties(), b"x"),
        )

    assert connection_error(broker, action) == (540, "NOT_IMPLEMENTED - immediate=true")


def test_queue_delete_if_unused_and_if_empty(broker: BrokerUnderTest, name: str) -> None:
    def in_use(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, lambda *a: None)
        ch.queue_delete(name, if_unused=True)

    assert channel_error(broker, in_use) == (
        406,
        f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use",
    )

    def not_empty(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, b"x")
        ch.queue_delete(name, if_empty=True)

    assert channel_error(broker, not_empty) == (
        406,
        f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty",
    )


def test_exchange_delete_if_unused(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.exchange_declare(name, "fanout", auto_delete=True)
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, name)
        ch.exchange_delete(name, if_unused=True)

    assert channel_error(broker, action) == (
        406,
        f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use",
    )


@pytest.mark.parametrize(("first", "then"), [("confirm", "tx"), ("tx", "confirm")])
def test_confirm_and_tx_exclude_each_other(broker: BrokerUnderTest, first: str, then: str) -> None:
    def select(ch: pika.adapters.blocking_connection.BlockingChannel, mode: str) -> None:
        ch.confirm_delivery() if mode == "confirm" else ch.tx_select()

    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        select(ch, first)
        select(ch, then)

    switch = f"cannot switch from {first} to {then} mode"
    assert channel_error(broker, action) == (406, f"PRECONDITION_FAILED - {switch}")


def test_commit_without_select(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.tx_commit()) == (
        406,
        "PRECONDITION_FAILED - channel is not transactional",
    )


def test_prefetch_size_not_implemented(broker: BrokerUnderTest) -> None:
    assert connection_error(broker, lambda ch: ch.basic_qos(prefetch_size=10)) == (
        540,
        "NOT_IMPLEMENTED - prefetch_size!=0 (10)",
    )


def test_unknown_exchange_type(broker: BrokerUnderTest, name: str) -> None:
    code, text = connection_error(broker, lambda ch: ch.exchange_declare(name, "nonsense"))
    assert (code, text) == (503, "COMMAND_INVALID - unknown exchange type 'nonsense'")


def test_missing_delete_is_ok(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        assert ch.queue_delete(name).method.message_count == 0
        ch.exchange_delete(name)
        ch.queue_declare(name, exclusive=True)
        ch.queue_unbind(name, "amq.direct", routing_key="never-bound")


def test_invalid_x_match(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.queue_bind(name, "amq.headers", arguments={"x-match": "some"})

    code, text = channel_error(broker, action)
    assert code == 406
    assert text.startswith("PRECONDITION_FAILED - Invalid x-match field value")


def test_invalid_queue_argument(broker: BrokerUnderTest, name: str) -> None:
    assert channel_error(
        broker, lambda ch: ch.queue_declare(name, exclusive=True, arguments={"x-message-ttl": -1})
    ) == (
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{name}' in "
        "vhost '/': {value_negative,-1}",
    )


def _raw_declare(
    broker: BrokerUnderTest, name: str, first: dict[str, object], second: dict[str, object] | None
) -> tuple[str, int, str, int, int] | None:
    """Declare with pamqp's own encoding (it sends the smallest integer type), so the
    wire types RabbitMQ names in its texts are under the test's control."""
    from pamqp import commands

    from tests.support.rawclient import RawClient

    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel()
        c.send_method(1, commands.Queue.Declare(queue=name, exclusive=True, arguments=first))
        if second is None:
            return c.next_close()
        c.expect(commands.Queue.DeclareOk)
        c.send_method(1, commands.Queue.Declare(queue=name, exclusive=True, arguments=second))
        return c.next_close()


@pytest.mark.parametrize(
    ("first", "second", "text"),
    [
        ({"x-message-ttl": 1000}, {"x-message-ttl": 2000}, "received '2000' but current is '1000'"),
        (
            {},
            {"x-message-ttl": 2000},
            "received the value '2000' of type 'short' but current is none",
        ),
        (
            {"x-message-ttl": 1000},
            {},
            "received none but current is the value '1000' of type 'short'",
        ),
        ({}, {"x-max-length": 10}, "received the value '10' of type 'byte' but current is none"),
        (
            {},
            {"x-dead-letter-exchange": "dlx"},
            "received the value 'dlx' of type 'longstr' but current is none",
        ),
    ],
)
def test_argument_inequivalence_texts(
    broker: BrokerUnderTest,
    name: str,
    first: dict[str, object],
    second: dict[str, object],
    text: str,
) -> None:
    key = next(iter(second or first))
    assert _raw_declare(broker, name, first, second) == (
        "channel",
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue '{name}' in vhost '/': {text}",
        50,
        10,
    )


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"x-message-ttl": "1000"}, '"expected integer, got longstr"'),
        ({"x-expires": 0}, "{value_zero,0}"),
        ({"x-max-length": -5}, "{value_negative,-5}"),
        ({"x-max-priority": 256}, "{max_value_exceeded,256}"),
        ({"x-overflow": "sometimes"}, "invalid_overflow"),
        ({"x-queue-mode": "fast"}, "\"unsupported queue mode 'fast'\""),
        ({"x-dead-letter-routing-key": "rk"}, "routing_key_but_no_dlx_defined"),
        ({"x-single-active-consumer": 1}, "{unacceptable_type,byte}"),
    ],
)
def test_argument_validation_texts(
    broker: BrokerUnderTest, name: str, args: dict[str, object], reason: str
) -> None:
    key = next(iter(args))
    assert _raw_declare(broker, name, args, None) == (
        "channel",
        406,
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/': {reason}",
        50,
        10,
    )


def test_argument_of_another_queue_type(broker: BrokerUnderTest, name: str) -> None:
    assert _raw_declare(broker, name, {"x-max-age": "1h"}, None) == (
        "channel",
        406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '{name}' in "
        "vhost '/' of queue type rabbit_classic_queue",
        50,
        10,
    )
