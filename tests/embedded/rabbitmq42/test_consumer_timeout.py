"""A queue's own consumer timeout, from 3.12: the x-consumer-timeout argument and the
consumer-timeout policy key (v4.2.9 rabbit_channel.erl:2854-2893
get_queue_consumer_timeout: the smaller of the two, else the node's consumer_timeout;
rabbit_policies.erl validate_policy0(<<"consumer-timeout">>): a non-negative integer)."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest

from tests.embedded.rabbitmq42.support import MODES, api, broker, channel


def _closed_after(b: Any, ch: Any, queue: str, seconds: float) -> BaseException | None:
    """Consume one message without acking it, let ``seconds`` pass on the broker's clock:
    why the channel was closed, or None."""
    closes: list[BaseException] = []
    ch._impl.add_on_close_callback(lambda _c, reason: closes.append(reason))
    ch.basic_publish("", queue, b"job")
    ch.basic_consume(queue, lambda *a: None)
    ch.connection.process_data_events(time_limit=0.2)
    b.advance(seconds)
    for _ in range(20):
        if closes:
            break
        ch.connection.process_data_events(time_limit=0.1)
    return closes[0] if closes else None


@pytest.mark.parametrize("mode", MODES)
def test_a_queues_consumer_timeout_wins_from_3_12(mode: str) -> None:
    with broker(mode, clock="manual", consumer_timeout="infinity") as b, channel(b) as ch:
        ch.queue_declare("work", arguments={"x-consumer-timeout": 5000})
        reason = _closed_after(b, ch, "work", 6)
        if mode == "3.10.8":
            assert reason is None  # the argument means nothing to 3.10.8
            return
        assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        assert (reason.reply_code, reason.reply_text) == (
            406,
            "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
            "value used: 5000 ms. This timeout value can be configured, see consumers doc "
            "guide to learn more",
        )


def test_the_consumer_timeout_policy_key_of_4_2() -> None:
    policy = {"pattern": "^work$", "definition": {"consumer-timeout": 2000}}
    with broker("3.10.8", management=True) as b:
        status, body = api(b, "PUT", "/api/policies/%2F/ct", policy)
        assert status == 400
        assert "are not recognised policy settings" in body["reason"]
    with broker("4.2", management=True, clock="manual") as b, channel(b) as ch:
        bad = {"pattern": "^work$", "definition": {"consumer-timeout": -1}}
        assert api(b, "PUT", "/api/policies/%2F/ct", bad) == (
            400,
            {
                "error": "bad_request",
                "reason": "Validation failed\n\n-1 is not a valid consumer timeout\n",
            },
        )
        assert api(b, "PUT", "/api/policies/%2F/ct", policy)[0] == 201
        ch.queue_declare("work", arguments={"x-consumer-timeout": 60000})
        reason = _closed_after(b, ch, "work", 3)  # the smaller of policy and argument
        assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        assert "Timeout value used: 2000 ms." in reason.reply_text
