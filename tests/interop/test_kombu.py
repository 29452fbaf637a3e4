"""kombu on its py-amqp transport against both brokers, over real sockets.

Every test runs once on Leveret and once on the reference RabbitMQ 3.10.8 (the ``broker``
fixture) and asserts the same concrete outcome on both. Where kombu has no API for a method
(internal exchanges, basic.nack) the test drops to the py-amqp channel kombu hands out, which
is still the unmodified client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import amqp
import kombu
import pytest
from amqp import spec
from amqp.exceptions import (
    AccessRefused,
    ChannelError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
)
from kombu.transport.pyamqp import Channel

from tests.support.brokers import BrokerUnderTest
from tests.support.identity import LOCKED, RABBITMQ_CAPABILITIES, SERVER_PROPERTIES, inequivalent
from tests.support.interop import ROUTING

# how long "nothing more arrives" is watched for; short, the brokers answer in milliseconds
QUIET = 0.3


# ---------------------------------------------------------------------------------------------
# helpers


@contextmanager
def connect(broker: BrokerUnderTest, confirm_publish: bool = True) -> Iterator[kombu.Connection]:
    """A kombu connection. By default every publish waits for the broker's confirm, so a
    message is in its queues before the test looks (RabbitMQ routes to queues asynchronously:
    without confirms a queue.declare or basic.get can overtake a publish)."""
    conn = kombu.Connection(
        broker.url,
        transport="pyamqp",
        connect_timeout=5,
        transport_options={"confirm_publish": confirm_publish},
    )
    try:
        conn.connect()
        yield conn
    finally:
        conn.release()


class Tidy:
    """Exchanges and durable/non-exclusive queues a test leaves behind, removed afterwards
    (RabbitMQ is shared across runs)."""

    def __init__(self) -> None:
        self.exchanges: list[str] = []
        self.queues: list[str] = []


@pytest.fixture
def tidy(broker: BrokerUnderTest) -> Iterator[Tidy]:
    t = Tidy()
    yield t
    with connect(broker) as conn:
        for ex in t.exchanges:
            with suppress(ChannelError):
                conn.channel().exchange_delete(ex)
        for q in t.queues:
            with suppress(ChannelError):
                conn.channel().queue_delete(q)


def channel_error(conn: kombu.Connection, action: Callable[[Channel], Any]) -> ChannelError:
    """Run ``action`` on a fresh channel and return the channel.close the broker answered."""
    ch = conn.channel()
    try:
        action(ch)
        # asynchronous methods (publish, ack) fail later: make a round trip
        ch.basic_qos(0, 0, False)
    except ChannelError as exc:
        return exc
    raise AssertionError("the broker did not close the channel")


def drain_until(conn: kombu.Connection, done: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("the expected deliveries did not arrive")
        with suppress(TimeoutError):
            conn.drain_events(timeout=remaining)


def drain_quiet(conn: kombu.Connection, quiet: float = QUIET) -> None:
    """Process whatever arrives until the connection has been silent for ``quiet`` s."""
    while True:
        try:
            conn.drain_events(timeout=quiet)
        except TimeoutError:
            return


def publish(
    ch: Channel, body: bytes, exchange: str = "", routing_key: str = "", **kwargs: Any
) -> None:
    kombu.Producer(ch).publish(body, exchange=exchange, routing_key=routing_key, **kwargs)


def exclusive_queue(conn: kombu.Connection, name: str) -> tuple[Channel, kombu.Queue]:
    """A new channel on ``conn`` and exclusive queue ``name`` declared on it."""
    ch = conn.channel()
    q = kombu.Queue(name, exclusive=True, channel=ch)
    q.declare()
    return ch, q


def get_bodies(ch: Channel, queue: str) -> list[bytes]:
    """Everything ready in ``queue``, taken with basic.get and acknowledged."""
    out = []
    while (msg := ch.basic_get(queue, no_ack=True)) is not None:
        out.append(msg.body)
    return out


# ---------------------------------------------------------------------------------------------
# connection


def test_server_properties_and_tuning(broker: BrokerUnderTest) -> None:
    with connect(broker) as conn:
        client = conn.connection
        props = client.server_properties
        assert props["capabilities"] == RABBITMQ_CAPABILITIES
        # the table arrives in RabbitMQ's wire order
        assert list(props["capabilities"]) == list(RABBITMQ_CAPABILITIES)
        assert props["version"] == "3.10.8"
        assert set(props) == set(SERVER_PROPERTIES)
        assert client.server_capabilities == RABBITMQ_CAPABILITIES
        assert client.frame_max == 131072
        assert client.channel_max == 2047
        assert client.heartbeat == 0  # kombu asks for none; the broker's 60 is a proposal
        assert conn.connected


# ---------------------------------------------------------------------------------------------
# exchanges


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_exchange_declare_each_type_and_passive(
    broker: BrokerUnderTest, name: str, kind: str, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        ex = kombu.Exchange(name, type=kind, durable=False, auto_delete=False, channel=ch)
        ex.declare()
        ex.declare()  # an equivalent redeclare is fine
        ex.declare(passive=True)
        # passive ignores type and flags
        kombu.Exchange(name, type="direct", durable=True, channel=ch).declare(passive=True)
        ex.delete()
        exc = channel_error(conn, lambda c: c.exchange_declare(name, kind, passive=True))
        assert isinstance(exc, NotFound)
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no exchange '{name}' in vhost '/'",
        )


def test_exchange_type_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        conn.channel().exchange_declare(name, "fanout", auto_delete=False)
        exc = channel_error(conn, lambda c: c.exchange_declare(name, "direct", auto_delete=False))
        assert isinstance(exc, PreconditionFailed)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("type", "exchange", name, "'direct'", "'fanout'"),
        )


def test_durable_exchange_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        kombu.Exchange(name, "topic", durable=True, channel=conn.channel()).declare()
        exc = channel_error(
            conn, lambda c: kombu.Exchange(name, "topic", durable=False, channel=c).declare()
        )
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("durable", "exchange", name, "'false'", "'true'"),
        )
        exc = channel_error(
            conn,
            lambda c: kombu.Exchange(
                name, "topic", durable=True, auto_delete=True, channel=c
            ).declare(),
        )
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("auto_delete", "exchange", name, "'true'", "'false'"),
        )


def test_exchange_arguments_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        conn.channel().exchange_declare(
            name, "fanout", auto_delete=False, arguments={"alternate-exchange": "ae"}
        )
        # present on both sides: RabbitMQ quotes the bare values
        exc = channel_error(
            conn,
            lambda c: c.exchange_declare(
                name, "fanout", auto_delete=False, arguments={"alternate-exchange": "ae2"}
            ),
        )
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("alternate-exchange", "exchange", name, "'ae2'", "'ae'"),
        )
        # missing on one side: the other is given with its type
        exc = channel_error(conn, lambda c: c.exchange_declare(name, "fanout", auto_delete=False))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent(
                "alternate-exchange", "exchange", name, "none", "the value 'ae' of type 'longstr'"
            ),
        )


def test_auto_delete_exchange_goes_with_its_last_binding(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        ex = kombu.Exchange(name, "direct", auto_delete=True, channel=ch)
        ex.declare()
        q = kombu.Queue("", exclusive=True, channel=ch)
        q.declare()
        # never bound: still there
        ex.declare(passive=True)
        q.bind_to(ex, routing_key="a")
        q.bind_to(ex, routing_key="b")
        q.unbind_from(ex, routing_key="a")
        ex.declare(passive=True)
        q.unbind_from(ex, routing_key="b")
        exc = channel_error(conn, lambda c: c.exchange_declare(name, "direct", passive=True))
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no exchange '{name}' in vhost '/'",
        )


def _declare_internal(ch: Channel, exchange: str, kind: str) -> None:
    # py-amqp's exchange_declare always sends internal=False; send the method ourselves
    ch.send_method(
        spec.Exchange.Declare,
        "BssbbbbbF",
        (0, exchange, kind, False, False, True, True, False, None),
        wait=spec.Exchange.DeclareOk,
    )


def test_internal_exchange(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    inner, outer = f"{name}-inner", f"{name}-outer"
    tidy.exchanges += [inner, outer]
    with connect(broker) as conn:
        ch = conn.channel()
        _declare_internal(ch, inner, "fanout")
        ch.exchange_declare(outer, "fanout", auto_delete=True)
        ch.exchange_bind(inner, outer)
        q = ch.queue_declare("", exclusive=True).queue
        ch.queue_bind(q, inner)
        # routed through the internal exchange
        publish(ch, b"via-e2e", exchange=outer)
        assert get_bodies(ch, q) == [b"via-e2e"]
        exc = channel_error(conn, lambda c: publish(c, b"direct", exchange=inner))
        assert isinstance(exc, AccessRefused)
        assert (exc.reply_code, exc.reply_text) == (
            403,
            f"ACCESS_REFUSED - cannot publish to internal exchange '{inner}' in vhost '/'",
        )
        # an internal exchange redeclared as a public one is inequivalent
        exc = channel_error(conn, lambda c: c.exchange_declare(inner, "fanout"))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("internal", "exchange", inner, "'false'", "'true'"),
        )
        ch = conn.channel()
        ch.exchange_unbind(inner, outer)
        # outer (auto-delete) lost its last binding as a source and is gone; inner (also
        # auto-delete) still routes to the queue and stays
        exc = channel_error(conn, lambda c: c.exchange_declare(outer, "fanout", passive=True))
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no exchange '{outer}' in vhost '/'",
        )
        ch.exchange_declare(inner, "fanout", passive=True)


def test_exchange_to_exchange_bind_and_unbind(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    src, dst = f"{name}-src", f"{name}-dst"
    tidy.exchanges += [src, dst]
    with connect(broker) as conn:
        ch = conn.channel()
        source = kombu.Exchange(src, "topic", auto_delete=False, channel=ch)
        dest = kombu.Exchange(dst, "direct", auto_delete=False, channel=ch)
        source.declare()
        dest.declare()
        dest.bind_to(source, routing_key="logs.#")
        q = kombu.Queue("", exclusive=True, channel=ch)
        q.declare()
        q.bind_to(dest, routing_key="logs.error")
        for rk in ("logs.error", "logs.info", "other.error"):
            publish(ch, rk.encode(), exchange=src, routing_key=rk)
        assert get_bodies(ch, q.name) == [b"logs.error"]
        dest.unbind_from(source, routing_key="logs.#")
        publish(ch, b"after-unbind", exchange=src, routing_key="logs.error")
        assert get_bodies(ch, q.name) == []
        exc = channel_error(conn, lambda c: c.exchange_bind(dst, f"{name}-missing", "k"))
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no exchange '{name}-missing' in vhost '/'",
        )


def test_exchange_delete_if_unused(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        ex = kombu.Exchange(name, "fanout", auto_delete=False, channel=ch)
        ex.declare()
        q = kombu.Queue("", exclusive=True, channel=ch)
        q.declare()
        q.bind_to(ex)
        exc = channel_error(conn, lambda c: c.exchange_delete(name, if_unused=True))
        assert isinstance(exc, PreconditionFailed)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use",
        )
        q.unbind_from(ex)
        ch.exchange_delete(name, if_unused=True)
        exc = channel_error(conn, lambda c: c.exchange_declare(name, "fanout", passive=True))
        assert exc.reply_code == 404
        # deleting what is not there is not an error
        conn.channel().exchange_delete(name)


# ---------------------------------------------------------------------------------------------
# queues


def test_server_named_exclusive_queue(broker: BrokerUnderTest) -> None:
    with connect(broker) as conn:
        ok = conn.channel().queue_declare("", exclusive=True)
        assert ok.queue.startswith("amq.gen-")
        assert len(ok.queue) == len("amq.gen-") + 22
        assert (ok.message_count, ok.consumer_count) == (0, 0)
        queue_name = ok.queue
        with connect(broker) as other:
            exc = channel_error(other, lambda c: c.queue_declare(queue_name, passive=True))
            assert isinstance(exc, ResourceLocked)
            assert (exc.reply_code, exc.reply_text) == (405, LOCKED.format(queue_name))
    with connect(broker) as conn:
        exc = channel_error(conn, lambda c: c.queue_declare(queue_name, passive=True))
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no queue '{queue_name}' in vhost '/'",
        )


def test_passive_declare_of_missing_queue(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        exc = channel_error(
            conn, lambda c: kombu.Queue(name, channel=c).queue_declare(passive=True)
        )
        assert isinstance(exc, NotFound)
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no queue '{name}' in vhost '/'",
        )


def test_exclusive_queue_of_another_connection(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as owner, connect(broker) as other:
        kombu.Queue(name, exclusive=True, channel=owner.channel()).declare()
        for action in (
            lambda c: c.queue_declare(name, exclusive=True),
            lambda c: c.queue_declare(name),
            lambda c: c.queue_bind(name, "amq.direct", "k"),
            lambda c: c.queue_purge(name),
            lambda c: c.queue_delete(name),
            lambda c: c.basic_consume(name, callback=lambda m: None),
            lambda c: c.basic_get(name),
        ):
            exc = channel_error(other, action)
            assert isinstance(exc, ResourceLocked)
            assert (exc.reply_code, exc.reply_text) == (405, LOCKED.format(name))
        # publishing to it from elsewhere is allowed
        publish(other.channel(), b"x", routing_key=name)
        ch = owner.channel()
        drain_until(owner, lambda: ch.queue_declare(name, passive=True).message_count == 1)


def test_declare_ok_counts(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        q = kombu.Queue(name, exclusive=True, channel=ch)
        assert tuple(q.queue_declare()) == (name, 0, 0)
        for i in range(3):
            publish(ch, f"m{i}".encode(), routing_key=name)
        assert tuple(q.queue_declare(passive=True)) == (name, 3, 0)
        got: list[amqp.Message] = []
        ch.basic_qos(0, 1, False)
        ch.basic_consume(name, callback=got.append)
        drain_until(conn, lambda: len(got) == 1)
        # one unacknowledged is counted neither as ready nor lost
        assert tuple(q.queue_declare(passive=True)) == (name, 2, 1)
        # a non-passive equivalent redeclare reports the same
        assert tuple(q.queue_declare()) == (name, 2, 1)


def test_queue_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.queues.append(name)
    with connect(broker) as conn:
        conn.channel().queue_declare(
            name, durable=False, auto_delete=False, arguments={"x-max-length": 10}
        )
        exc = channel_error(
            conn,
            lambda c: c.queue_declare(
                name, durable=True, auto_delete=False, arguments={"x-max-length": 10}
            ),
        )
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("durable", "queue", name, "'true'", "'false'"),
        )
        exc = channel_error(
            conn, lambda c: c.queue_declare(name, auto_delete=False, arguments={"x-max-length": 20})
        )
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent("x-max-length", "queue", name, "'20'", "'10'"),
        )
        exc = channel_error(conn, lambda c: c.queue_declare(name, auto_delete=False))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            inequivalent(
                "x-max-length", "queue", name, "none", "the value '10' of type 'signedint'"
            ),
        )


def test_queue_bind_and_unbind(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        ex = kombu.Exchange(name, "direct", auto_delete=False, channel=ch)
        ex.declare()
        q = kombu.Queue(f"{name}-q", exclusive=True, channel=ch)
        q.declare()
        q.bind_to(ex, routing_key="red")
        q.bind_to(ex, routing_key="red")  # binding twice is one binding
        publish(ch, b"red-1", exchange=name, routing_key="red")
        publish(ch, b"blue-1", exchange=name, routing_key="blue")
        assert get_bodies(ch, q.name) == [b"red-1"]
        q.unbind_from(ex, routing_key="red")
        q.unbind_from(ex, routing_key="never-bound")  # not an error
        publish(ch, b"red-2", exchange=name, routing_key="red")
        assert get_bodies(ch, q.name) == []
        # the default exchange still reaches it by name
        publish(ch, b"by-name", routing_key=q.name)
        assert get_bodies(ch, q.name) == [b"by-name"]
        exc = channel_error(conn, lambda c: c.queue_bind(q.name, "", q.name))
        assert (exc.reply_code, exc.reply_text) == (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        )


def test_purge_returns_count(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)
        for i in range(4):
            publish(ch, f"m{i}".encode(), routing_key=name)
        assert q.purge() == 4
        assert q.purge() == 0
        assert ch.basic_get(name) is None


def test_queue_delete_if_unused_if_empty(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.queues.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        q = kombu.Queue(name, durable=False, auto_delete=False, channel=ch)
        q.declare()
        publish(ch, b"one", routing_key=name)
        publish(ch, b"two", routing_key=name)
        exc = channel_error(conn, lambda c: c.queue_delete(name, if_empty=True))
        assert isinstance(exc, PreconditionFailed)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty",
        )
        consumer_ch = conn.channel()
        got: list[amqp.Message] = []
        consumer_ch.basic_qos(0, 1, False)
        tag = consumer_ch.basic_consume(name, callback=got.append)
        drain_until(conn, lambda: len(got) == 1)
        exc = channel_error(conn, lambda c: c.queue_delete(name, if_unused=True))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use",
        )
        consumer_ch.basic_cancel(tag)
        # delete-ok counts the ready message, not the one still unacknowledged
        assert conn.channel().queue_delete(name, if_unused=True) == 1
        exc = channel_error(conn, lambda c: c.queue_declare(name, passive=True))
        assert exc.reply_code == 404
        # deleting a missing queue is fine and reports nothing deleted
        assert conn.channel().queue_delete(name) == 0


# ---------------------------------------------------------------------------------------------
# routing


def route(ch: Channel, name: str, kind: str) -> dict[str, list[bytes]]:
    """Exchange ``name`` of type ``kind`` with ROUTING[kind]'s queues bound to it and its
    messages published; what each queue then holds."""
    bindings, messages, _ = ROUTING[kind]
    kombu.Exchange(name, kind, auto_delete=False, channel=ch).declare()
    queues = {}
    for label, bind in bindings.items():
        q = kombu.Queue(f"{name}-{label}", exclusive=True, channel=ch)
        q.declare()
        q.bind_to(name, **bind)
        queues[label] = q.name
    for body, key, props in messages:
        publish(ch, body, exchange=name, routing_key=key, **props)
    return {label: get_bodies(ch, q) for label, q in queues.items()}


@pytest.mark.parametrize("kind", ["topic", "headers"])
def test_routing(broker: BrokerUnderTest, name: str, tidy: Tidy, kind: str) -> None:
    tidy.exchanges.append(name)
    with connect(broker) as conn:
        assert route(conn.channel(), name, kind) == ROUTING[kind][2]


# ---------------------------------------------------------------------------------------------
# consuming and acknowledging


def test_prefetch_limits_unacked(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)
        for i in range(5):
            publish(ch, f"m{i}".encode(), routing_key=name)
        got: list[kombu.Message] = []
        consumer = kombu.Consumer(
            ch, queues=[q], callbacks=[lambda body, m: got.append(m)], prefetch_count=2
        )
        consumer.consume()
        drain_until(conn, lambda: len(got) == 2)
        drain_quiet(conn)
        assert [m.body for m in got] == [b"m0", b"m1"]
        got[0].ack()
        drain_until(conn, lambda: len(got) == 3)
        drain_quiet(conn)
        assert len(got) == 3
        for m in got[1:]:
            m.ack()
        drain_until(conn, lambda: len(got) == 5)
        assert [m.body for m in got] == [f"m{i}".encode() for i in range(5)]
        assert [m.delivery_tag for m in got] == [1, 2, 3, 4, 5]
        consumer.cancel()


def test_consume_and_cancel(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.queues.append(name)
    with connect(broker) as conn:
        ch = conn.channel()
        # not exclusive: kombu makes exclusive queues auto-delete, and cancel would delete it
        q = kombu.Queue(name, durable=False, auto_delete=False, channel=ch)
        q.declare()
        got: list[amqp.Message] = []
        tag = ch.basic_consume(name, consumer_tag="my-tag", no_ack=True, callback=got.append)
        assert tag == "my-tag"
        publish(ch, b"before", routing_key=name)
        drain_until(conn, lambda: len(got) == 1)
        m = got[0]
        assert m.body == b"before"
        assert m.delivery_info["consumer_tag"] == "my-tag"
        assert m.delivery_info["routing_key"] == name
        assert m.delivery_info["exchange"] == ""
        assert m.delivery_info["redelivered"] is False
        ch.basic_cancel("my-tag")
        publish(ch, b"after", routing_key=name)
        drain_quiet(conn)
        assert len(got) == 1
        assert tuple(q.queue_declare(passive=True)) == (name, 1, 0)
        # server-generated tags
        tag2 = conn.channel().basic_consume(name, callback=got.append)
        assert tag2.startswith("amq.ctag-")
        assert len(tag2) == len("amq.ctag-") + 22


def test_auto_delete_queue_goes_with_its_last_consumer(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)  # kombu: exclusive implies auto_delete
        assert q.auto_delete
        # never consumed from: stays
        ch.queue_declare(name, passive=True)
        first = ch.basic_consume(name, callback=lambda m: None)
        second = ch.basic_consume(name, callback=lambda m: None)
        ch.basic_cancel(first)
        assert tuple(ch.queue_declare(name, passive=True)) == (name, 0, 1)
        ch.basic_cancel(second)
        exc = channel_error(conn, lambda c: c.queue_declare(name, passive=True))
        assert (exc.reply_code, exc.reply_text) == (
            404,
            f"NOT_FOUND - no queue '{name}' in vhost '/'",
        )


def test_reused_consumer_tag_closes_the_connection(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        ch.basic_consume(name, consumer_tag="dup", callback=lambda m: None)
        with pytest.raises(NotAllowed) as info:
            ch.basic_consume(name, consumer_tag="dup", callback=lambda m: None)
        assert (info.value.reply_code, info.value.reply_text) == (
            530,
            "NOT_ALLOWED - attempt to reuse consumer tag 'dup'",
        )


def test_get_and_get_empty(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)
        assert q.get() is None
        publish(
            ch,
            b"first",
            routing_key=name,
            headers={"h": "v"},
            priority=3,
            correlation_id="c1",
            message_id="id-1",
        )
        publish(ch, b"second", routing_key=name)
        raw = ch.basic_get(name)
        assert raw is not None
        assert raw.body == b"first"
        assert raw.delivery_info["message_count"] == 1
        assert raw.delivery_info["redelivered"] is False
        assert raw.delivery_info["routing_key"] == name
        assert raw.delivery_tag == 1
        assert raw.properties["application_headers"] == {"h": "v"}
        assert raw.properties["priority"] == 3
        assert raw.properties["correlation_id"] == "c1"
        assert raw.properties["message_id"] == "id-1"
        assert raw.properties["content_type"] == "application/data"
        ch.basic_ack(raw.delivery_tag)
        msg = q.get(no_ack=True)
        assert msg is not None
        assert msg.body == b"second"
        assert msg.delivery_info["message_count"] == 0
        assert q.get() is None


def test_ack_nack_reject(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)
        for body in (b"acked", b"requeued", b"nacked", b"dropped"):
            publish(ch, body, routing_key=name)
        first = q.get()
        assert first is not None and first.body == b"acked"
        first.ack()
        second = q.get()
        assert second is not None and second.body == b"requeued"
        second.requeue()  # basic.reject requeue=True
        again = q.get()
        assert again is not None
        assert again.body == b"requeued"
        assert again.delivery_info["redelivered"] is True
        again.ack()
        third = q.get()
        assert third is not None and third.body == b"nacked"
        # py-amqp has no basic_nack; send it ourselves (multiple=False, requeue=True)
        ch.send_method(spec.Basic.Nack, "Lbb", (third.delivery_tag, False, True))
        again = q.get()
        assert again is not None
        assert (again.body, again.delivery_info["redelivered"]) == (b"nacked", True)
        again.ack()
        fourth = q.get()
        assert fourth is not None and fourth.body == b"dropped"
        fourth.reject(requeue=False)
        assert q.get() is None
        assert tuple(q.queue_declare(passive=True)) == (name, 0, 0)


def test_recover_redelivers_unacked(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch, q = exclusive_queue(conn, name)
        publish(ch, b"a", routing_key=name)
        publish(ch, b"b", routing_key=name)
        got: list[amqp.Message] = []
        ch.basic_consume(name, callback=got.append)
        drain_until(conn, lambda: len(got) == 2)
        assert [m.delivery_info["redelivered"] for m in got] == [False, False]
        ch.basic_recover(requeue=True)
        drain_until(conn, lambda: len(got) == 4)
        assert [m.body for m in got[2:]] == [b"a", b"b"]
        assert [m.delivery_info["redelivered"] for m in got[2:]] == [True, True]
        # the old tags are gone, the new ones count on
        assert [m.delivery_tag for m in got] == [1, 2, 3, 4]
        ch.basic_ack(4, multiple=True)
        drain_quiet(conn)
        assert tuple(q.queue_declare(passive=True)) == (name, 0, 1)


def test_unknown_delivery_tag(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        exc = channel_error(conn, lambda c: c.basic_ack(42))
        assert isinstance(exc, PreconditionFailed)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 42",
        )
        exc = channel_error(conn, lambda c: c.basic_reject(7, requeue=True))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 7",
        )

        def double_ack(c: Channel) -> None:
            c.queue_declare(name, exclusive=True)
            publish(c, b"x", routing_key=name)
            m = c.basic_get(name)
            assert m is not None
            c.basic_ack(m.delivery_tag)
            c.basic_ack(m.delivery_tag)

        exc = channel_error(conn, double_ack)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 1",
        )


def test_consumer_cancel_notification(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        cancelled: list[str] = []
        tag = ch.basic_consume(name, callback=lambda m: None, on_cancel=cancelled.append)
        conn.channel().queue_delete(name)
        drain_until(conn, lambda: cancelled == [tag])
        # the channel stays usable
        assert ch.queue_declare("", exclusive=True).queue.startswith("amq.gen-")


# ---------------------------------------------------------------------------------------------
# publisher confirms, mandatory, transactions


def test_publisher_confirms_and_mandatory_return(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, exclusive=True)
        returned: list[tuple[int, str, str, str, bytes]] = []
        acks: list[tuple[int, bool]] = []
        ch.events["basic_return"].add(
            lambda exc, exchange, routing_key, message: returned.append(
                (exc.reply_code, exc.reply_text, exchange, routing_key, message.body)
            )
        )
        ch.events["basic_ack"].add(lambda tag, multiple: acks.append((tag, multiple)))
        ch.confirm_select()
        ch.basic_publish_confirm(amqp.Message(b"routed"), "", name)
        ch.basic_publish_confirm(amqp.Message(b"lost"), "", f"{name}-nowhere", mandatory=True)
        ch.basic_publish_confirm(amqp.Message(b"dropped"), "", f"{name}-nowhere")
        drain_quiet(conn)
        assert returned == [(312, "NO_ROUTE", "", f"{name}-nowhere", b"lost")]
        assert [tag for tag, _ in acks] == [1, 2, 3]
        assert get_bodies(ch, name) == [b"routed"]
        # a confirm channel cannot become transactional
        exc = channel_error(conn, lambda c: (c.confirm_select(), c.tx_select()))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
        )


def test_transactions(broker: BrokerUnderTest, name: str) -> None:
    with connect(broker, confirm_publish=False) as conn:
        ch, q = exclusive_queue(conn, name)
        ch.tx_select()
        publish(ch, b"rolled-back", routing_key=name)
        assert tuple(q.queue_declare(passive=True)) == (name, 0, 0)
        ch.tx_rollback()
        assert tuple(q.queue_declare(passive=True)) == (name, 0, 0)
        publish(ch, b"committed-1", routing_key=name)
        publish(ch, b"committed-2", routing_key=name)
        ch.tx_commit()
        assert tuple(q.queue_declare(passive=True)) == (name, 2, 0)
        # acks are transactional too
        m = ch.basic_get(name)
        assert m is not None and m.body == b"committed-1"
        ch.basic_ack(m.delivery_tag)
        ch.tx_rollback()
        # the rolled-back ack leaves the message unacked, not requeued
        assert tuple(q.queue_declare(passive=True)) == (name, 1, 0)
        ch.basic_ack(m.delivery_tag)
        ch.tx_commit()
        assert get_bodies(conn.channel(), name) == [b"committed-2"]

        exc = channel_error(conn, lambda c: c.tx_commit())
        assert isinstance(exc, PreconditionFailed)
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - channel is not transactional",
        )
        exc = channel_error(conn, lambda c: c.tx_rollback())
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - channel is not transactional",
        )
        exc = channel_error(conn, lambda c: (c.tx_select(), c.confirm_select()))
        assert (exc.reply_code, exc.reply_text) == (
            406,
            "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
        )
