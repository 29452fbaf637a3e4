"""Every misuse gets the reply, code and text RabbitMQ 3.10.8 gives. Each test runs on
Leveret and on RabbitMQ with the same expectations."""

from __future__ import annotations

import pika
import pytest

from tests.differential.helpers import channel_error, connect, connection_error
from tests.support.brokers import BrokerUnderTest


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


def test_exchange_type_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.exchange_declare(name, "fanout", auto_delete=True)
        try:
            ch.exchange_declare(name, "direct", auto_delete=True)
        finally:
            pass

    code, text = channel_error(broker, action)
    with connect(broker) as conn:
        conn.channel().exchange_delete(name)
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in "
        "vhost '/': received 'direct' but current is 'fanout'",
    )


def test_exchange_durable_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.exchange_declare(name, "fanout", auto_delete=True)
        ch.exchange_declare(name, "fanout", durable=True, auto_delete=True)

    code, text = channel_error(broker, action)
    with connect(broker) as conn:
        conn.channel().exchange_delete(name)
    assert (code, text) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{name}' in "
        "vhost '/': received 'true' but current is 'false'",
    )


def test_queue_durable_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, auto_delete=True, arguments={"x-expires": 60000})
        ch.queue_declare(name, durable=True, auto_delete=True, arguments={"x-expires": 60000})

    assert channel_error(broker, action) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{name}' in "
        "vhost '/': received 'true' but current is 'false'",
    )


def test_queue_argument_inequivalent(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True, arguments={"x-message-ttl": 1000})
        ch.queue_declare(name, exclusive=True)

    assert channel_error(broker, action) == (
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{name}' in "
        "vhost '/': received none but current is the value '1000' of type 'signedint'",
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


def test_unknown_delivery_tag(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.basic_ack(42)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 42",
    )


def test_double_ack(broker: BrokerUnderTest, name: str) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.queue_declare(name, exclusive=True)
        ch.basic_publish("", name, b"x")
        method, _, _ = ch.basic_get(name)
        ch.basic_ack(method.delivery_tag)
        ch.basic_ack(method.delivery_tag)

    assert channel_error(broker, action) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_reject_unknown_tag(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.basic_reject(7)) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 7",
    )


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


def test_confirm_then_tx(broker: BrokerUnderTest) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.confirm_delivery()
        ch.tx_select()

    assert channel_error(broker, action) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
    )


def test_tx_then_confirm(broker: BrokerUnderTest) -> None:
    def action(ch: pika.adapters.blocking_connection.BlockingChannel) -> None:
        ch.tx_select()
        ch.confirm_delivery()

    assert channel_error(broker, action) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    )


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
