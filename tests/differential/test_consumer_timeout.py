"""RabbitMQ's consumer timeout: a delivery left unacknowledged past ``consumer_timeout``
closes its channel with 406 PRECONDITION_FAILED, and the message goes back to its queue.
Run on Leveret and on a RabbitMQ node of the test's own started with a one-second timeout
(and a short channel tick: RabbitMQ looks at its channels every minute by default)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

import leveret
from tests.support import rabbitmq
from tests.support.waiting import wait_for

TIMEOUT_MS = 1000


@pytest.fixture(params=["leveret", "rabbitmq"])
def timeout_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "leveret":
        with leveret.Broker(consumer_timeout=TIMEOUT_MS) as b:
            yield b.url
        return
    if not rabbitmq.installed():
        pytest.skip("RabbitMQ is not installed here")
    node = rabbitmq.RabbitNode(
        config={"consumer_timeout": str(TIMEOUT_MS)},
        advanced="[{rabbit, [{channel_tick_interval, 200}]}].\n",
    ).start()
    try:
        yield node.url
    finally:
        node.close()


def test_an_unacknowledged_delivery_times_out(timeout_url: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(timeout_url))
    try:
        setup = conn.channel()
        setup.queue_declare("ct-work")
        setup.queue_declare("ct-acked")
        setup.basic_publish("", "ct-work", b"job")
        setup.basic_publish("", "ct-acked", b"job")
        # an acknowledging consumer on a channel of its own is left alone
        acker = conn.channel()
        acker.basic_consume("ct-acked", lambda c, m, p, b: c.basic_ack(m.delivery_tag))
        ch = conn.channel()
        closes: list[Any] = []
        ch._impl.add_on_close_callback(lambda _c, reason: closes.append(reason))
        got: list[bytes] = []
        ch.basic_consume("ct-work", lambda c, m, p, b: got.append(b))

        def closed() -> bool:
            conn.process_data_events(time_limit=0.1)
            return bool(closes)

        assert wait_for(closed, 30, 0)
        (reason,) = closes
        assert got == [b"job"]
        assert isinstance(reason, pika.exceptions.ChannelClosedByBroker)
        assert (reason.reply_code, reason.reply_text) == (
            406,
            f"PRECONDITION_FAILED - delivery acknowledgement on channel {ch.channel_number} "
            f"timed out. Timeout value used: {TIMEOUT_MS} ms. This timeout value can be "
            "configured, see consumers doc guide to learn more",
        )
        assert acker.is_open and setup.is_open
        check = conn.channel()
        assert check.queue_declare("ct-work", passive=True).method.message_count == 1
        assert check.queue_declare("ct-acked", passive=True).method.message_count == 0
        check.queue_delete("ct-work")
        check.queue_delete("ct-acked")
    finally:
        conn.close()
