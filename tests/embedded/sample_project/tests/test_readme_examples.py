"""The two examples of Leveret's README ("Testing your application with Leveret"), as they
are printed there."""

import aio_pika
import pika
import pytest


def test_an_order_is_queued(amqp_url):
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        channel.queue_declare("orders")
        channel.basic_publish("", "orders", b'{"id": 1}')
        _, _, body = channel.basic_get("orders", auto_ack=True)
    assert body == b'{"id": 1}'


@pytest.mark.asyncio
async def test_an_order_is_queued_async(amqp_url):
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("orders")
        await channel.default_exchange.publish(aio_pika.Message(b'{"id": 1}'), "orders")
        message = await queue.get(timeout=5)
    assert message.body == b'{"id": 1}'
