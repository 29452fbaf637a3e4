"""Queue declaration arguments checked as rabbit_amqqueue:check_declare_arguments checks
them, the same on both brokers: x-queue-type first, then the validators of the type's own
arguments in RabbitMQ's fixed order (whatever order the client sent them in), then the
arguments of other types, then (streams, quorum queues) the properties."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.helpers import channel_error, connect, connection_error
from tests.support.brokers import BrokerUnderTest

W = "for queue '{q}' in vhost '/'"

CLASSIC: list[tuple[dict[str, Any], str | None]] = [
    ({"x-max-length": -1, "x-expires": 0}, f"invalid arg 'x-expires' {W}: {{{{value_zero,0}}}}"),
    (
        {"x-max-length": -1, "x-dead-letter-routing-key": "k"},
        f"invalid arg 'x-dead-letter-routing-key' {W}: routing_key_but_no_dlx_defined",
    ),
    (
        {"x-expires": 0, "x-queue-type": "foo"},
        f"invalid arg 'x-queue-type' {W}: \"unsupported queue type 'foo'\"",
    ),
    (
        {"x-delivery-limit": 5, "x-max-length": -1},
        f"invalid arg 'x-max-length' {W}: {{{{value_negative,-1}}}}",
    ),
    ({"x-max-age": "1D", "x-overflow": "x"}, f"invalid arg 'x-overflow' {W}: invalid_overflow"),
    (
        {"x-queue-mode": "fast", "x-max-priority": 300},
        f"invalid arg 'x-max-priority' {W}: {{{{max_value_exceeded,300}}}}",
    ),
    (
        {"x-dead-letter-exchange": 5, "x-expires": 0},
        "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' in vhost '/'",
    ),
    (
        {"x-max-in-memory-length": -1},
        f"invalid arg 'x-max-in-memory-length' {W} of queue type rabbit_classic_queue",
    ),
    ({"x-queue-master-locator": "bogus"}, None),  # RabbitMQ does not check it
    (
        {"x-single-active-consumer": "yes"},
        f"invalid arg 'x-single-active-consumer' {W}: {{{{unacceptable_type,longstr}}}}",
    ),
]


@pytest.mark.parametrize(("args", "text"), CLASSIC)
def test_classic(
    broker: BrokerUnderTest, name: str, args: dict[str, Any], text: str | None
) -> None:
    if text is None:
        with connect(broker) as conn:
            conn.channel().queue_declare(name, exclusive=True, arguments=args)
        return
    got = channel_error(broker, lambda ch: ch.queue_declare(name, exclusive=True, arguments=args))
    assert got == (406, "PRECONDITION_FAILED - " + text.format(q=name))


STREAM: list[tuple[dict[str, Any], dict[str, Any], str | None]] = [
    (
        {"durable": False},
        {"x-max-priority": 5},
        f"invalid arg 'x-max-priority' {W} of queue type rabbit_stream_queue",
    ),
    (
        {},
        {"x-expires": 5, "x-max-length-bytes": -1},
        f"invalid arg 'x-max-length-bytes' {W}: {{{{value_negative,-1}}}}",
    ),
    ({}, {"x-max-age": 5}, f"invalid arg 'x-max-age' {W}: {{{{unacceptable_type,signedint}}}}"),
    ({}, {"x-max-age": "0D"}, f"invalid arg 'x-max-age' {W}: invalid_max_age"),
    (
        {},
        {"x-initial-cluster-size": 0},
        f"invalid arg 'x-initial-cluster-size' {W}: {{{{value_zero,0}}}}",
    ),
    (
        {},
        {"x-queue-leader-locator": "x"},
        f"invalid arg 'x-queue-leader-locator' {W}: invalid_queue_locator_arg",
    ),
    (
        {"auto_delete": True},
        {"x-stream-max-segment-size-bytes": -5},
        f"invalid arg 'x-stream-max-segment-size-bytes' {W}: {{{{value_negative,-5}}}}",
    ),
    (
        {"auto_delete": True, "durable": False},
        {},
        "invalid property 'auto-delete' for queue '{q}' in vhost '/'",
    ),
]


@pytest.mark.parametrize(("kwargs", "args", "text"), STREAM)
def test_stream(
    broker: BrokerUnderTest, name: str, kwargs: dict[str, Any], args: dict[str, Any], text: str
) -> None:
    kw = {"durable": True, **kwargs}
    got = channel_error(
        broker,
        lambda ch: ch.queue_declare(name, arguments={"x-queue-type": "stream", **args}, **kw),
    )
    assert got == (406, "PRECONDITION_FAILED - " + text.format(q=name))


def test_a_max_age_without_digits_crashes_the_channel(broker: BrokerUnderTest, name: str) -> None:
    """rabbit_amqqueue:check_max_age calls list_to_integer on the digits it found."""
    assert connection_error(
        broker,
        lambda ch: ch.queue_declare(
            name, durable=True, arguments={"x-queue-type": "stream", "x-max-age": "bogus"}
        ),
    ) == (541, "INTERNAL_ERROR")
