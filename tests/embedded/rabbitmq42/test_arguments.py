"""The queue and consumer arguments RabbitMQ 4.2 takes, refuses and ignores where 3.10.8
did otherwise (v4.2.9 rabbit_amqqueue.erl:902-973 check_declare_arguments, declare_args,
check_consume_arguments, consume_args, and each queue type's capabilities())."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest

from tests.embedded.rabbitmq42.support import api, broker, channel

QUORUM = {"x-queue-type": "quorum"}


def _refusal(b: Any, act: Any) -> tuple[int, str] | None:
    """The reply code and text a channel or connection is closed with, None when the act
    goes through."""
    with channel(b) as ch:
        try:
            act(ch)
        except (
            pika.exceptions.ChannelClosedByBroker,
            pika.exceptions.ConnectionClosedByBroker,
        ) as exc:
            return exc.reply_code, exc.reply_text
    return None


def test_classic_queues_take_a_leader_locator_from_4_0() -> None:
    """rabbit_classic_queue:capabilities() at v4.2.9 (rabbit_classic_queue.erl:671-679):
    x-queue-leader-locator is a classic queue's argument once rabbitmq_4.0.0 is on; and
    min-masters is one of the locators (rabbit_queue_location.erl:34-35)."""

    def classic(ch: Any) -> None:
        ch.queue_declare("q", arguments={"x-queue-leader-locator": "client-local"})

    def min_masters(ch: Any) -> None:
        ch.queue_declare(
            "qq", durable=True, arguments={**QUORUM, "x-queue-leader-locator": "min-masters"}
        )

    with broker("3.10.8") as b:
        assert _refusal(b, classic) == (
            406,
            "PRECONDITION_FAILED - invalid arg 'x-queue-leader-locator' for queue 'q' in "
            "vhost '/' of queue type rabbit_classic_queue",
        )
        assert _refusal(b, min_masters) == (
            406,
            "PRECONDITION_FAILED - invalid arg 'x-queue-leader-locator' for queue 'qq' in "
            "vhost '/': invalid_queue_locator_arg",
        )
    with broker("4.2") as b:
        assert _refusal(b, classic) is None
        assert _refusal(b, min_masters) is None


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_consumer_arguments_of_4_2(queue_type: str) -> None:
    """consume_args() at v4.2.9 has x-priority and x-stream-offset; the consumer arguments
    of every type are x-priority (classic, quorum) and x-stream-offset, x-stream-filter,
    x-stream-match-unfiltered (stream). So x-cancel-on-ha-failover and x-credit, known
    and checked in 3.10.8, are nobody's and ignored; the stream filters are refused on
    other types."""
    args = {"x-queue-type": queue_type}

    def consume(consumer_args: dict[str, Any]) -> Any:
        def act(ch: Any) -> None:
            ch.queue_declare("q", durable=True, arguments=args)
            ch.basic_consume("q", lambda *a: None, arguments=consumer_args)

        return act

    where = f"queue 'q' in vhost '/' of queue type rabbit_{queue_type}_queue"
    with broker("3.10.8") as b:
        failover = _refusal(b, consume({"x-cancel-on-ha-failover": True}))
        if queue_type == "quorum":
            assert failover == (
                406,
                f"PRECONDITION_FAILED - invalid arg 'x-cancel-on-ha-failover' for {where}",
            )
        else:
            assert failover is None
        # a credit that is no table crashes 3.10.8's channel (541, the connection)
        assert _refusal(b, consume({"x-credit": "lots"})) == (541, "INTERNAL_ERROR")
        assert _refusal(b, consume({"x-stream-filter": "eu"})) is None
    with broker("4.2") as b:
        assert _refusal(b, consume({"x-cancel-on-ha-failover": True})) is None
        assert _refusal(b, consume({"x-credit": "lots"})) is None
        assert _refusal(b, consume({"x-stream-filter": "eu"})) == (
            406,
            f"PRECONDITION_FAILED - invalid arg 'x-stream-filter' for {where}",
        )
        assert _refusal(b, consume({"x-priority": "high"})) == (
            406,
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "
            '"expected integer, got longstr"',
        )


def test_a_declaration_without_a_type_gets_x_queue_type_classic_from_4_0() -> None:
    """rabbit_amqqueue:augment_declare_args at v4.2.9 (rabbit_amqqueue.erl:761-810, called
    first by rabbit_channel's queue.declare, rabbit_channel.erl:2556-2561): without
    x-queue-type the default type, classic, is set as an argument (set_table_value sorts
    the table), and the queue shows it; 3.10.8 keeps the arguments as sent."""
    declared = {"x-max-length": 5, "x-dead-letter-exchange": "dlx"}
    with broker("3.10.8", management=True) as b, channel(b) as ch:
        ch.queue_declare("plain")
        ch.queue_declare("limited", arguments=declared)
        shown = {q["name"]: q["arguments"] for q in api(b, "GET", "/api/queues")[1]}
        assert shown == {"plain": {}, "limited": declared}
        assert list(shown["limited"]) == ["x-max-length", "x-dead-letter-exchange"]
    with broker("4.2", management=True) as b, channel(b) as ch:
        ch.queue_declare("plain")
        ch.queue_declare("plain")  # the same declaration: equivalent
        ch.queue_declare("limited", arguments=declared)
        ch.queue_declare("", exclusive=True)
        ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
        shown = {q["name"]: q["arguments"] for q in api(b, "GET", "/api/queues")[1]}
        server_named = next(n for n in shown if n.startswith("amq.gen-"))
        assert shown == {
            "plain": {"x-queue-type": "classic"},
            "limited": {**declared, "x-queue-type": "classic"},
            server_named: {"x-queue-type": "classic"},
            "qq": {"x-queue-type": "quorum"},
        }
        assert list(shown["limited"]) == [
            "x-dead-letter-exchange",
            "x-max-length",
            "x-queue-type",
        ]
        assert api(b, "PUT", "/api/queues/%2F/from-api", {"durable": True})[0] == 201
        _, queue = api(b, "GET", "/api/queues/%2F/from-api")
        assert queue["arguments"] == {"x-queue-type": "classic"}
