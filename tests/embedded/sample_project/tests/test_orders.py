"""The sample project's tests: each gets a vhost of its own from the amqp_url fixture, so
all of them use the queue name "orders" and none sees another's messages, also when they
run at the same time (pytest -n 2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from orders import QUEUE, send_order, take_orders

SEEN: list[str] = []  # the vhosts of the tests this process ran


@pytest.mark.parametrize("n", range(6))
def test_each_test_sees_only_its_own_orders(amqp_url: str, amqp_vhost: str, n: int) -> None:
    SEEN.append(amqp_vhost)
    for i in range(3):
        send_order(amqp_url, {"test": n, "i": i})
    time.sleep(0.3)  # long enough for a parallel worker's test to overlap this one
    assert take_orders(amqp_url) == [{"test": n, "i": i} for i in range(3)]


def test_the_url_is_a_vhost_of_the_tests_own(
    amqp_url: str, amqp_vhost: str, leveret_broker: Any
) -> None:
    SEEN.append(amqp_vhost)
    assert amqp_url.endswith("/" + amqp_vhost)
    assert amqp_vhost in leveret_broker.vhosts()
    # a fresh vhost: nothing declared yet
    with (
        pika.BlockingConnection(pika.URLParameters(amqp_url)) as conn,
        pytest.raises(pika.exceptions.ChannelClosedByBroker),
    ):
        conn.channel().queue_declare(QUEUE, passive=True)


def test_with_aio_pika(amqp_url: str, amqp_vhost: str) -> None:
    SEEN.append(amqp_vhost)

    async def roundtrip() -> bytes:
        async with await aio_pika.connect(amqp_url) as conn:
            channel = await conn.channel()
            queue = await channel.declare_queue(QUEUE, durable=True)
            await channel.default_exchange.publish(aio_pika.Message(b"async order"), QUEUE)
            message = await queue.get(timeout=5)
            await message.ack()
            return message.body

    assert asyncio.run(roundtrip()) == b"async order"


def test_zz_the_vhosts_of_earlier_tests_are_deleted(leveret_broker: Any) -> None:
    if not SEEN:
        pytest.skip("no earlier test of this module ran in this process")
    left = set(SEEN) & set(leveret_broker.vhosts())
    assert not left
