"""The seeds' publish/subscribe code, unchanged, against both brokers."""

from __future__ import annotations

import threading

import pika

from tests.support.brokers import BrokerUnderTest


def _receiver(
    broker: BrokerUnderTest,
    exchange: str,
    want: int,
    got: list[bytes],
    ready: threading.Event,
    names: list[str],
) -> None:
    connection = pika.BlockingConnection(broker.pika_params())
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    result = channel.queue_declare(queue="", exclusive=True)
    queue_name = result.method.queue
    names.append(queue_name)
    channel.queue_bind(exchange=exchange, queue=queue_name)

    def callback(ch: object, method: object, properties: object, body: bytes) -> None:
        got.append(body)
        if len(got) == want:
            channel.stop_consuming()

    channel.basic_consume(queue=queue_name, on_message_callback=callback, auto_ack=True)
    ready.set()
    connection.call_later(20, channel.stop_consuming)
    channel.start_consuming()
    connection.close()


def test_every_receiver_gets_every_message(broker: BrokerUnderTest, name: str) -> None:
    exchange = f"logs-{name}"
    results: list[list[bytes]] = [[], []]
    queue_names: list[str] = []
    threads = []
    for got in results:
        ready = threading.Event()
        t = threading.Thread(target=_receiver, args=(broker, exchange, 10, got, ready, queue_names))
        t.start()
        assert ready.wait(10)
        threads.append(t)
    connection = pika.BlockingConnection(broker.pika_params())
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    sent = [f"info: Hello World! {i}".encode() for i in range(10)]
    for message in sent:
        channel.basic_publish(exchange=exchange, routing_key="", body=message)
    connection.close()
    for t in threads:
        t.join(25)
    assert results == [sent, sent]
    for q in queue_names:
        assert q.startswith("amq.gen-") and len(q) == len("amq.gen-") + 22


def test_exclusive_queue_goes_with_its_connection(broker: BrokerUnderTest) -> None:
    connection = pika.BlockingConnection(broker.pika_params())
    channel = connection.channel()
    queue_name = channel.queue_declare(queue="", exclusive=True).method.queue
    connection.close()
    other = pika.BlockingConnection(broker.pika_params())
    ch = other.channel()
    try:
        ch.queue_declare(queue=queue_name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        assert exc.reply_text == f"NOT_FOUND - no queue '{queue_name}' in vhost '/'"
    else:
        raise AssertionError("the exclusive queue outlived its connection")
    finally:
        other.close()


def test_message_to_unbound_fanout_is_dropped(broker: BrokerUnderTest, name: str) -> None:
    connection = pika.BlockingConnection(broker.pika_params())
    channel = connection.channel()
    channel.exchange_declare(exchange=name, exchange_type="fanout")
    channel.basic_publish(exchange=name, routing_key="", body=b"lost")
    queue_name = channel.queue_declare(queue="", exclusive=True).method.queue
    channel.queue_bind(exchange=name, queue=queue_name)
    method, _, _ = channel.basic_get(queue_name, auto_ack=True)
    assert method is None
    channel.exchange_delete(name)
    connection.close()
