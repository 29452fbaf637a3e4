"""Direct reply-to (``amq.rabbitmq.reply-to``), the same on both brokers: the pseudo-queue,
the rewritten reply_to, replies routed to the consuming channel, and every misuse."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.differential.helpers import channel_error, connect, connection_error, settle
from tests.support.brokers import BrokerUnderTest

REPLY_TO = "amq.rabbitmq.reply-to"


def request(ch: Any, server_queue: str) -> str:
    """Publish a request with reply_to set to the pseudo-queue; the address the server
    side sees."""
    ch.basic_publish(
        "", server_queue, b"request", pika.BasicProperties(reply_to=REPLY_TO, correlation_id="c1")
    )
    for _ in range(50):
        m, p, _b = ch.basic_get(server_queue, auto_ack=True)
        if m is not None:
            assert p.correlation_id == "c1"
            return str(p.reply_to)
    raise AssertionError("the request did not arrive")


def awaiting_replies(client: Any, name: str) -> tuple[Any, list[bytes], str]:
    """On a channel of ``client``: a consumer of the pseudo-queue that keeps the replies'
    bodies, and a request sent to queue ``name`` (declared here): the channel, the bodies
    and the address the server side sees."""
    ch = client.channel()
    got: list[bytes] = []
    ch.basic_consume(REPLY_TO, lambda c, m, p, b: got.append(b), auto_ack=True)
    ch.queue_declare(name, exclusive=True)
    return ch, got, request(ch, name)


def test_replies_reach_the_consuming_channel(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as client, connect(broker) as server:
        ch = client.channel()
        got: list[tuple[Any, ...]] = []
        tag = ch.basic_consume(
            REPLY_TO,
            lambda c, m, p, b: got.append(
                (
                    m.consumer_tag,
                    m.delivery_tag,
                    m.redelivered,
                    m.exchange,
                    m.routing_key,
                    b,
                    p.headers,
                )
            ),
            auto_ack=True,
            consumer_tag=f"{name}-replies",
        )
        assert tag == f"{name}-replies"
        ch.queue_declare(name, exclusive=True)
        address = request(ch, name)  # took delivery tag 1 (basic.get)
        assert address.startswith(REPLY_TO + ".") and len(address) > len(REPLY_TO) + 2
        # the pseudo-queue and a live address both "exist", with one consumer, for anyone
        sch = server.channel()
        for q in (REPLY_TO, address):
            ok = sch.queue_declare(q, passive=True).method
            assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 1)
        ok = sch.queue_declare(address, durable=True).method  # every declare is passive
        assert (ok.queue, ok.consumer_count) == (address, 1)
        sch.confirm_delivery()
        sch.basic_publish("", address, b"reply 1", pika.BasicProperties(headers={"h": 1}))
        sch.basic_publish("", address, b"reply 2")
        settle(client, 0.3)
        # replies take the channel's next delivery tag without using it up, as RabbitMQ
        assert got == [
            (tag, 2, False, "", address, b"reply 1", {"h": 1}),
            (tag, 2, False, "", address, b"reply 2", None),
        ]
        ch.basic_publish("", name, b"work")
        m, _p, _b = ch.basic_get(name)
        assert m.delivery_tag == 2
        sch.basic_publish("", address, b"reply 3")
        settle(client, 0.3)
        assert got[-1][1:2] == (3,)
        ch.basic_ack(2)


def test_a_reply_is_unroutable_for_its_publisher(broker: BrokerUnderTest, name: str) -> None:
    """RabbitMQ hands replies to the channel while routing: no queue took them, so a
    mandatory reply comes back as NO_ROUTE even though it was delivered; and a reply to a
    channel that is gone is dropped, returned in the same way."""
    with connect(broker) as client, connect(broker) as server:
        ch, got, address = awaiting_replies(client, name)
        sch = server.channel()
        returned: list[tuple[int, str, str, bytes]] = []
        sch.add_on_return_callback(
            lambda c, m, p, b: returned.append((m.reply_code, m.reply_text, m.routing_key, b))
        )
        sch.basic_publish("", address, b"delivered", mandatory=True)
        settle(server, 0.2)
        settle(client, 0.2)
        assert got == [b"delivered"]
        assert returned == [(312, "NO_ROUTE", address, b"delivered")]
        ch.close()
        sch.basic_publish("", address, b"too late", mandatory=True)
        settle(server, 0.3)
        assert returned[-1] == (312, "NO_ROUTE", address, b"too late")
        # the address no longer exists
        code, text = channel_error(broker, lambda c: c.queue_declare(address, passive=True))
        assert (code, text) == (404, f"NOT_FOUND - no queue '{address}' in vhost '/'")


def test_cancelled_reply_consumer(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as client:
        ch = client.channel()
        tag = ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
        ch.queue_declare(name, exclusive=True)
        request(ch, name)
        ch.basic_cancel(tag)
        ch.basic_publish("", name, b"x", pika.BasicProperties(reply_to=REPLY_TO))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare(name, passive=True)
        assert (info.value.reply_code, info.value.reply_text) == (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist",
        )


@pytest.mark.parametrize("case", ["acks", "twice", "no consumer", "other reply_to untouched"])
def test_misuse(broker: BrokerUnderTest, case: str) -> None:
    if case == "acks":
        got = channel_error(
            broker, lambda ch: ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
        )
        assert got == (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge")
    elif case == "twice":

        def twice(ch: Any) -> None:
            ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
            ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)

        assert channel_error(broker, twice) == (
            406,
            "PRECONDITION_FAILED - reply consumer already set",
        )
    elif case == "no consumer":
        got = channel_error(
            broker,
            lambda ch: ch.basic_publish(
                "", "anywhere", b"x", pika.BasicProperties(reply_to=REPLY_TO)
            ),
        )
        assert got == (406, "PRECONDITION_FAILED - fast reply consumer does not exist")
    else:
        # only exactly the pseudo-queue's name is rewritten
        with connect(broker) as conn:
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            for reply_to in (REPLY_TO + "x", "amq.rabbitmq.reply-", "someone"):
                ch.basic_publish("", q, b"x", pika.BasicProperties(reply_to=reply_to))
                _m, p, _b = ch.basic_get(q, auto_ack=True)
                assert p.reply_to == reply_to


@pytest.mark.parametrize(
    ("queue", "found"),
    [
        ("amq.rabbitmq.reply-to.abc", False),  # one part: not an address
        ("amq.rabbitmq.reply-to.a.b.c", False),
        ("amq.rabbitmq.reply-to..abc", False),
        ("amq.rabbitmq.reply-toX", False),
    ],
)
def test_declaring_names_that_are_no_address(
    broker: BrokerUnderTest, queue: str, found: bool
) -> None:
    code, text = channel_error(broker, lambda ch: ch.queue_declare(queue, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
    with connect(broker) as conn:  # publishing there drops the message
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", queue, b"x")


def test_an_address_the_broker_did_not_make_crashes_the_channel(broker: BrokerUnderTest) -> None:
    """Two parts whose first is not a channel the broker encoded: RabbitMQ's channel
    process fails to decode it, and the connection closes with 541."""
    address = "amq.rabbitmq.reply-to.abc.def"
    assert connection_error(broker, lambda ch: ch.basic_publish("", address, b"x")) == (
        541,
        "INTERNAL_ERROR",
    )
    assert connection_error(broker, lambda ch: ch.queue_declare(address, passive=True)) == (
        541,
        "INTERNAL_ERROR",
    )


def test_declaring_ones_own_address_crashes_the_channel(broker: BrokerUnderTest) -> None:
    """RabbitMQ's channel asks the channel the address names whether it consumes: asking
    itself, it crashes (541)."""

    def own(ch: Any) -> None:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.basic_publish("", q, b"x", pika.BasicProperties(reply_to=REPLY_TO))
        _m, p, _b = ch.basic_get(q, auto_ack=True)
        ch.queue_declare(p.reply_to, passive=True)

    assert connection_error(broker, own) == (541, "INTERNAL_ERROR")


def test_the_pseudo_queue_is_no_queue(broker: BrokerUnderTest) -> None:
    assert channel_error(broker, lambda ch: ch.basic_get(REPLY_TO)) == (
        404,
        f"NOT_FOUND - no queue '{REPLY_TO}' in vhost '/'",
    )
    assert channel_error(broker, lambda ch: ch.queue_bind(REPLY_TO, "amq.direct", "k")) == (
        404,
        f"NOT_FOUND - no queue '{REPLY_TO}' in vhost '/'",
    )


def test_rpc_with_aio_pika(broker: BrokerUnderTest, name: str) -> None:
    """A whole RPC round trip, as aio-pika's users write it."""
    import asyncio

    import aio_pika

    async def run() -> list[bytes]:
        conn = await aio_pika.connect(broker.url)
        async with conn:
            server = await conn.channel()
            queue = await server.declare_queue(name, exclusive=True)

            async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    await server.default_exchange.publish(
                        aio_pika.Message(
                            b"re: " + message.body, correlation_id=message.correlation_id
                        ),
                        routing_key=str(message.reply_to),
                    )

            await queue.consume(serve)
            client = await conn.channel()
            replies: asyncio.Queue[bytes] = asyncio.Queue()
            reply_queue = await client.get_queue(REPLY_TO, ensure=False)

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                await replies.put(message.body)

            await reply_queue.consume(on_reply, no_ack=True)
            for i in range(3):
                await client.default_exchange.publish(
                    aio_pika.Message(f"q{i}".encode(), reply_to=REPLY_TO, correlation_id=str(i)),
                    routing_key=name,
                )
            return [await asyncio.wait_for(replies.get(), 5) for _ in range(3)]

    assert asyncio.run(run()) == [b"re: q0", b"re: q1", b"re: q2"]


def test_a_transactional_reply_goes_out_when_published(broker: BrokerUnderTest, name: str) -> None:
    """RabbitMQ's default exchange hands a reply to its channel while routing, and a
    transaction routes when it publishes: the reply is delivered at once, and a rollback
    cannot take it back."""
    with connect(broker) as client, connect(broker) as server:
        _, got, address = awaiting_replies(client, name)
        sch = server.channel()
        sch.tx_select()
        sch.basic_publish("", address, b"rolled back")
        settle(client, 0.3)
        assert got == [b"rolled back"]
        sch.tx_rollback()
        sch.basic_publish("", address, b"committed")
        settle(client, 0.3)
        assert got == [b"rolled back", b"committed"]
        sch.tx_commit()
        settle(client, 0.2)
        assert got == [b"rolled back", b"committed"]
