"""Behaviour the client libraries' own test suites rely on (scripts/conformance), pinned
on both brokers: priority queues, the order of replies when methods arrive together,
connection.update-secret, and management API paths that end with a slash."""

from __future__ import annotations

import pika
import pytest
from pamqp import commands, frame

from tests.differential.helpers import connect
from tests.support.brokers import BrokerUnderTest, ensure_rabbitmq_management
from tests.support.drain import drain
from tests.support.mgmt import Api
from tests.support.rawclient import RawClient


def names_of(client: RawClient, count: int) -> list[str]:
    """The next ``count`` frames, by method name (content frames skipped)."""
    got: list[str] = []
    while len(got) < count:
        item = client.recv_frame()
        assert item is not None, f"connection closed after {got}"
        name = getattr(item[1], "name", "")
        if name.startswith(("Basic.", "Queue.", "Channel.", "Connection.")):
            got.append(name)
    return got


def test_priority_queue_delivers_highest_first_and_requeues_in_place(
    broker: BrokerUnderTest, name: str
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True, arguments={"x-max-priority": 10})
        for body, priority in (
            (b"low1", 3),
            (b"high", 6),
            (b"low2", 3),
            (b"none", None),
            (b"over", 200),
        ):
            ch.basic_publish("", name, body, pika.BasicProperties(priority=priority))
        # above x-max-priority counts as the maximum; no priority counts as 0
        assert drain(ch, name, auto_ack=False) == [b"over", b"high", b"low1", b"low2", b"none"]
        ch.basic_recover(requeue=True)
        ch.basic_publish("", name, b"top", pika.BasicProperties(priority=9))
        assert drain(ch, name, auto_ack=False) == [
            b"over",
            b"top",
            b"high",
            b"low1",
            b"low2",
            b"none",
        ]


def consume_on_channel_1(c: RawClient, queue: str) -> None:
    """Log in, open channel 1, declare ``queue`` exclusive and consume from it (tag ct)."""
    c.handshake()
    c.open_channel(1)
    c.call(1, commands.Queue.Declare(queue=queue, exclusive=True), commands.Queue.DeclareOk)
    c.call(1, commands.Basic.Consume(queue=queue, consumer_tag="ct"), commands.Basic.ConsumeOk)


def test_queue_delete_ok_comes_before_the_consumers_cancel(
    broker: BrokerUnderTest, name: str
) -> None:
    with RawClient(broker.host, broker.port) as c:
        consume_on_channel_1(c, name)
        c.send_method(1, commands.Queue.Delete(queue=name))
        assert names_of(c, 2) == ["Queue.DeleteOk", "Basic.Cancel"]


def test_nothing_follows_channel_close_ok_when_methods_arrive_together(
    broker: BrokerUnderTest, name: str
) -> None:
    """basic.cancel and channel.close in one write: the cancel-ok comes before the
    close-ok or (RabbitMQ, when its queue answers after the channel closed) not at all,
    never after it, where a client (py-amqp) no longer knows the channel."""
    with RawClient(broker.host, broker.port) as c:
        consume_on_channel_1(c, name)
        c.send(
            frame.marshal(commands.Basic.Cancel(consumer_tag="ct"), 1)
            + frame.marshal(
                commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
            )
        )
        before: list[str] = []
        while (got := names_of(c, 1)[0]) != "Channel.CloseOk":
            before.append(got)
        assert before in ([], ["Basic.CancelOk"])
        c.send_method(2, commands.Channel.Open())
        assert names_of(c, 1) == ["Channel.OpenOk"]


def test_update_secret_is_accepted(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        # internal users have no state that expires: any new secret is taken as it is
        c.send_method(
            0, commands.Connection.UpdateSecret(new_secret="not-the-password", reason="rotation")
        )
        c.expect(commands.Connection.UpdateSecretOk)
        c.open_channel(1)


def test_unbinding_what_does_not_exist_succeeds(broker: BrokerUnderTest, name: str) -> None:
    """aio-pika's cleanups unbind exchanges that auto-delete already removed."""
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(f"{name}-x", "direct", auto_delete=True)
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_unbind(q, f"{name}-missing", "rk")
        ch.queue_unbind(f"{name}-missing-q", f"{name}-x", "rk")
        ch.exchange_unbind(f"{name}-x", f"{name}-missing", "rk")
        ch.exchange_unbind(f"{name}-missing", f"{name}-x", "rk")
        ch.exchange_delete(f"{name}-x")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            ch.queue_bind(q, f"{name}-missing", "rk")
        assert err.value.reply_code == 404


def test_management_paths_may_end_with_a_slash(broker: BrokerUnderTest, name: str) -> None:
    """rabbitmq-amqp-python-client's tests (tests/http_requests.py) delete their virtual
    host as DELETE /api/vhosts/NAME/: RabbitMQ's routes take a trailing slash."""
    if broker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.fail("RabbitMQ's management plugin could not be enabled")
    api = Api(broker.http_url)
    assert api.put(f"/api/vhosts/{name}") == 201
    try:
        assert api.delete(f"/api/vhosts/{name}/") == 204
        assert api.call("GET", f"/api/vhosts/{name}")[0] == 404
        status, vhosts = api.call("GET", "/api/vhosts/")
        assert status == 200
        assert "/" in [v["name"] for v in vhosts]
        assert api.call("GET", "/api/overview/")[0] == 200
        assert api.call("GET", "/api/exchanges/%2F/amq.direct/")[0] == 200
        assert api.call("GET", "/api/overview//")[0] == 404
    finally:
        api.delete(f"/api/vhosts/{name}")
