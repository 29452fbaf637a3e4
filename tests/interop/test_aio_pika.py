"""aio-pika (over aiormq) against both brokers, over real sockets.

Every test runs once on Leveret and once on the reference RabbitMQ 3.10.8 (the ``broker``
fixture) and asserts the same concrete outcome on both. The tests are coroutines run with
``asyncio.run`` by the ``sync`` decorator; no pytest plugin is involved. Channels publish
with confirms (aio-pika's default), so a message is in its queues before a test looks.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any, ParamSpec

import aio_pika
import kombu
import pytest
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    ExchangeType,
)
from aio_pika.exceptions import DeliveryError
from aiormq.abc import DeliveredMessage
from aiormq.channel import EXCEPTION_MAPPING
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelClosed,
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
)
from pamqp import commands as spec

from tests.support.brokers import BrokerUnderTest
from tests.support.identity import LOCKED, RABBITMQ_CAPABILITIES, SERVER_PROPERTIES, inequivalent
from tests.support.interop import ROUTING

P = ParamSpec("P")

CODES = {cls: code for code, cls in EXCEPTION_MAPPING.items()}

# how long "nothing more arrives" is watched for; short, the brokers answer in milliseconds
QUIET = 0.3
TEST_TIMEOUT = 30


# ---------------------------------------------------------------------------------------------
# helpers


def sync(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run a coroutine test function to completion on a fresh event loop."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT))

    return wrapper


@asynccontextmanager
async def connect(broker: BrokerUnderTest) -> AsyncIterator[AbstractConnection]:
    conn = await aio_pika.connect(broker.url, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()


def reply(exc: ChannelClosed) -> tuple[int, str]:
    """The channel.close code and text an aiormq exception carries."""
    if type(exc) in CODES:
        return CODES[type(exc)], str(exc.args[0])
    code, text = exc.args
    return int(code), str(text)


async def channel_error(
    conn: AbstractConnection, action: Callable[[AbstractChannel], Awaitable[Any]]
) -> ChannelClosed:
    """Run ``action`` on a fresh channel and return the channel.close the broker answered."""
    ch = await conn.channel()
    try:
        await action(ch)
        # asynchronous methods (ack, reject) fail later: make a round trip
        await ch.set_qos(prefetch_count=0)
    except ChannelClosed as exc:
        return exc
    raise AssertionError("the broker did not close the channel")


class Tidy:
    """Exchanges and non-exclusive queues a test leaves behind, removed afterwards (RabbitMQ
    is shared across runs)."""

    def __init__(self) -> None:
        self.exchanges: list[str] = []
        self.queues: list[str] = []

    async def clean(self, broker: BrokerUnderTest) -> None:
        async with connect(broker) as conn:
            for ex in self.exchanges:
                with suppress(ChannelClosed):
                    await (await conn.channel()).exchange_delete(ex)
            for q in self.queues:
                with suppress(ChannelClosed):
                    await (await conn.channel()).queue_delete(q)


@pytest.fixture
def tidy(broker: BrokerUnderTest) -> Iterator[Tidy]:
    t = Tidy()
    yield t
    asyncio.run(t.clean(broker))


async def publish(
    exchange: AbstractExchange, body: bytes, routing_key: str = "", **props: Any
) -> Any:
    return await exchange.publish(
        aio_pika.Message(body, **props), routing_key=routing_key, mandatory=False
    )


async def exclusive_queue(
    conn: AbstractConnection, name: str
) -> tuple[AbstractChannel, AbstractQueue]:
    """A new channel on ``conn`` and exclusive queue ``name`` declared on it."""
    ch = await conn.channel()
    return ch, await ch.declare_queue(name, exclusive=True)


async def get_bodies(queue: AbstractQueue) -> list[bytes]:
    """Everything ready in ``queue``, taken with basic.get (no-ack)."""
    out = []
    while (msg := await queue.get(no_ack=True, fail=False, timeout=5)) is not None:
        out.append(msg.body)
    return out


async def counts(ch: AbstractChannel, queue: str) -> tuple[int | None, int | None]:
    """(message_count, consumer_count) from a passive declare."""
    q = await ch.declare_queue(queue, passive=True)
    result = q.declaration_result
    return result.message_count, result.consumer_count


async def wait_for(done: Callable[[], bool], timeout: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the expected deliveries did not arrive")
        await asyncio.sleep(0.01)


class Inbox:
    """A consumer callback that keeps what it is given."""

    def __init__(self) -> None:
        self.messages: list[AbstractIncomingMessage] = []

    async def __call__(self, message: AbstractIncomingMessage) -> None:
        self.messages.append(message)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


# ---------------------------------------------------------------------------------------------
# connection


@sync
async def test_server_properties(broker: BrokerUnderTest) -> None:
    async with connect(broker) as conn:
        underlay = conn.transport.connection
        props = underlay.server_properties
        assert props["capabilities"] == RABBITMQ_CAPABILITIES
        # the table arrives in RabbitMQ's wire order
        assert list(props["capabilities"]) == list(RABBITMQ_CAPABILITIES)
        assert props["version"] == "3.10.8"
        assert set(props) == set(SERVER_PROPERTIES)
        assert underlay.server_capabilities == RABBITMQ_CAPABILITIES
        assert underlay.connection_tune.frame_max == 131072
        assert underlay.connection_tune.channel_max == 2047
        assert underlay.connection_tune.heartbeat == 60
        assert not conn.is_closed


# ---------------------------------------------------------------------------------------------
# exchanges


@pytest.mark.parametrize(
    "kind", [ExchangeType.DIRECT, ExchangeType.FANOUT, ExchangeType.TOPIC, ExchangeType.HEADERS]
)
@sync
async def test_exchange_declare_each_type_and_passive(
    broker: BrokerUnderTest, name: str, kind: ExchangeType, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange(name, kind, durable=False, auto_delete=False)
        await ch.declare_exchange(name, kind, durable=False, auto_delete=False)
        # passive ignores type and flags
        await ch.declare_exchange(name, ExchangeType.DIRECT, durable=True, passive=True)
        assert await ch.get_exchange(name, ensure=True)
        await ex.delete()
        exc = await channel_error(conn, lambda c: c.declare_exchange(name, kind, passive=True))
        assert isinstance(exc, ChannelNotFoundEntity)
        assert reply(exc) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


@sync
async def test_exchange_type_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        await (await conn.channel()).declare_exchange(name, ExchangeType.FANOUT)
        exc = await channel_error(conn, lambda c: c.declare_exchange(name, ExchangeType.DIRECT))
        assert isinstance(exc, ChannelPreconditionFailed)
        assert reply(exc) == (406, inequivalent("type", "exchange", name, "'direct'", "'fanout'"))


@sync
async def test_durable_exchange_inequivalent(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        await (await conn.channel()).declare_exchange(name, ExchangeType.TOPIC, durable=True)
        exc = await channel_error(conn, lambda c: c.declare_exchange(name, ExchangeType.TOPIC))
        assert reply(exc) == (406, inequivalent("durable", "exchange", name, "'false'", "'true'"))
        exc = await channel_error(
            conn,
            lambda c: c.declare_exchange(name, ExchangeType.TOPIC, durable=True, auto_delete=True),
        )
        assert reply(exc) == (
            406,
            inequivalent("auto_delete", "exchange", name, "'true'", "'false'"),
        )
        exc = await channel_error(
            conn,
            lambda c: c.declare_exchange(
                name, ExchangeType.TOPIC, durable=True, arguments={"alternate-exchange": "ae"}
            ),
        )
        assert reply(exc) == (
            406,
            inequivalent(
                "alternate-exchange", "exchange", name, "the value 'ae' of type 'longstr'", "none"
            ),
        )


@sync
async def test_exchange_arguments_inequivalent(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        args = {"alternate-exchange": "ae"}
        await (await conn.channel()).declare_exchange(name, ExchangeType.FANOUT, arguments=args)
        # present on both sides: RabbitMQ quotes the bare values
        exc = await channel_error(
            conn,
            lambda c: c.declare_exchange(
                name, ExchangeType.FANOUT, arguments={"alternate-exchange": "ae2"}
            ),
        )
        assert reply(exc) == (
            406,
            inequivalent("alternate-exchange", "exchange", name, "'ae2'", "'ae'"),
        )


@sync
async def test_integer_arguments_of_another_width_are_equivalent(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.queues.append(name)
    async with connect(broker) as conn:
        # pamqp sends a small int as a signed 8-bit 'byte'; py-amqp sends the same value as a
        # 32-bit 'signedint': same value, same type class, so equivalent
        q = await (await conn.channel()).declare_queue(name, arguments={"x-max-length": 10})

        def redeclare_with_py_amqp() -> tuple[str, int, int]:
            with kombu.Connection(broker.url, transport="pyamqp", connect_timeout=5) as other:
                ok = other.channel().queue_declare(
                    name, auto_delete=False, arguments={"x-max-length": 10}
                )
                return ok.queue, ok.message_count, ok.consumer_count

        assert await asyncio.to_thread(redeclare_with_py_amqp) == (name, 0, 0)
        await publish((await conn.channel()).default_exchange, b"x", name)
        assert await get_bodies(q) == [b"x"]


@sync
async def test_auto_delete_exchange_goes_with_its_last_binding(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange(name, ExchangeType.DIRECT, auto_delete=True)
        q = await ch.declare_queue(exclusive=True)
        await ch.declare_exchange(name, passive=True)  # never bound: still there
        await q.bind(ex, "a")
        await q.bind(ex, "b")
        await q.unbind(ex, "a")
        await ch.declare_exchange(name, passive=True)
        await q.unbind(ex, "b")
        exc = await channel_error(conn, lambda c: c.declare_exchange(name, passive=True))
        assert reply(exc) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


@sync
async def test_internal_exchange(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    inner, outer = f"{name}-inner", f"{name}-outer"
    tidy.exchanges += [inner, outer]
    async with connect(broker) as conn:
        ch = await conn.channel()
        inner_ex = await ch.declare_exchange(inner, ExchangeType.FANOUT, internal=True)
        outer_ex = await ch.declare_exchange(outer, ExchangeType.FANOUT)
        await inner_ex.bind(outer_ex)
        q = await ch.declare_queue(exclusive=True)
        await q.bind(inner_ex)
        await publish(outer_ex, b"via-e2e")
        assert await get_bodies(q) == [b"via-e2e"]
        # aio-pika refuses to publish to an internal exchange itself; go below it
        with pytest.raises(ValueError):
            await publish(inner_ex, b"refused")

        async def publish_internal(c: AbstractChannel) -> None:
            underlay = await c.get_underlay_channel()
            await underlay.basic_publish(b"x", exchange=inner, routing_key="")

        exc = await channel_error(conn, publish_internal)
        assert isinstance(exc, ChannelAccessRefused)
        assert reply(exc) == (
            403,
            f"ACCESS_REFUSED - cannot publish to internal exchange '{inner}' in vhost '/'",
        )
        exc = await channel_error(conn, lambda c: c.declare_exchange(inner, ExchangeType.FANOUT))
        assert reply(exc) == (406, inequivalent("internal", "exchange", inner, "'false'", "'true'"))


@sync
async def test_exchange_to_exchange_bind_and_unbind(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    src, dst = f"{name}-src", f"{name}-dst"
    tidy.exchanges += [src, dst]
    async with connect(broker) as conn:
        ch = await conn.channel()
        source = await ch.declare_exchange(src, ExchangeType.TOPIC)
        dest = await ch.declare_exchange(dst, ExchangeType.DIRECT)
        assert isinstance(await dest.bind(source, "logs.#"), spec.Exchange.BindOk)
        q = await ch.declare_queue(exclusive=True)
        await q.bind(dest, "logs.error")
        for rk in ("logs.error", "logs.info", "other.error"):
            await publish(source, rk.encode(), rk)
        assert await get_bodies(q) == [b"logs.error"]
        assert isinstance(await dest.unbind(source, "logs.#"), spec.Exchange.UnbindOk)
        await publish(source, b"after-unbind", "logs.error")
        assert await get_bodies(q) == []
        exc = await channel_error(
            conn,
            lambda c: _bind_missing(c, dst, f"{name}-missing"),
        )
        assert reply(exc) == (404, f"NOT_FOUND - no exchange '{name}-missing' in vhost '/'")


async def _bind_missing(ch: AbstractChannel, dest: str, source: str) -> None:
    ex = await ch.get_exchange(dest, ensure=False)
    await ex.bind(source, "k")


@sync
async def test_exchange_delete_if_unused(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange(name, ExchangeType.FANOUT)
        q = await ch.declare_queue(exclusive=True)
        await q.bind(ex)

        async def delete_if_unused(c: AbstractChannel) -> None:
            await (await c.get_exchange(name, ensure=False)).delete(if_unused=True)

        exc = await channel_error(conn, delete_if_unused)
        assert isinstance(exc, ChannelPreconditionFailed)
        assert reply(exc) == (406, f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use")
        await q.unbind(ex)
        assert isinstance(await ex.delete(if_unused=True), spec.Exchange.DeleteOk)
        exc = await channel_error(conn, lambda c: c.declare_exchange(name, passive=True))
        assert reply(exc)[0] == 404
        await (await conn.channel()).exchange_delete(name)  # missing: not an error


# ---------------------------------------------------------------------------------------------
# queues


@sync
async def test_server_named_exclusive_queue(broker: BrokerUnderTest) -> None:
    async with connect(broker) as conn:
        q = await (await conn.channel()).declare_queue(exclusive=True)
        assert q.name.startswith("amq.gen-")
        assert len(q.name) == len("amq.gen-") + 22
        result = q.declaration_result
        assert (result.queue, result.message_count, result.consumer_count) == (q.name, 0, 0)
        async with connect(broker) as other:
            exc = await channel_error(other, lambda c: c.declare_queue(q.name, passive=True))
            assert isinstance(exc, ChannelLockedResource)
            assert reply(exc) == (405, LOCKED.format(q.name))
    async with connect(broker) as conn:
        exc = await channel_error(conn, lambda c: c.declare_queue(q.name, passive=True))
        assert reply(exc) == (404, f"NOT_FOUND - no queue '{q.name}' in vhost '/'")


@sync
async def test_passive_declare_of_missing_queue(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        exc = await channel_error(conn, lambda c: c.declare_queue(name, passive=True))
        assert isinstance(exc, ChannelNotFoundEntity)
        assert reply(exc) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")
        exc = await channel_error(conn, lambda c: c.get_queue(name, ensure=True))
        assert reply(exc) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


@sync
async def test_exclusive_queue_of_another_connection(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as owner, connect(broker) as other:
        q = await (await owner.channel()).declare_queue(name, exclusive=True)

        async def consume(c: AbstractChannel) -> None:
            queue = await c.get_queue(name, ensure=False)
            await queue.consume(Inbox())

        async def get(c: AbstractChannel) -> None:
            queue = await c.get_queue(name, ensure=False)
            await queue.get(fail=False)

        async def purge(c: AbstractChannel) -> None:
            await (await c.get_queue(name, ensure=False)).purge()

        async def bind(c: AbstractChannel) -> None:
            await (await c.get_queue(name, ensure=False)).bind("amq.direct", "k")

        actions: list[Callable[[AbstractChannel], Awaitable[Any]]] = [
            lambda c: c.declare_queue(name, exclusive=True),
            lambda c: c.declare_queue(name),
            lambda c: c.queue_delete(name),
            consume,
            get,
            purge,
            bind,
        ]
        for action in actions:
            exc = await channel_error(other, action)
            assert isinstance(exc, ChannelLockedResource)
            assert reply(exc) == (405, LOCKED.format(name))
        # publishing to it from elsewhere is allowed
        await publish((await other.channel()).default_exchange, b"x", name)
        assert await get_bodies(q) == [b"x"]


@sync
async def test_declare_ok_counts(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        assert (q.declaration_result.message_count, q.declaration_result.consumer_count) == (0, 0)
        for i in range(3):
            await publish(ch.default_exchange, f"m{i}".encode(), name)
        assert await counts(ch, name) == (3, 0)
        await ch.set_qos(prefetch_count=1)
        inbox = Inbox()
        await q.consume(inbox)
        await wait_for(lambda: len(inbox) == 1)
        assert await counts(ch, name) == (2, 1)
        again = await ch.declare_queue(name, exclusive=True)
        assert (
            again.declaration_result.message_count,
            again.declaration_result.consumer_count,
        ) == (2, 1)


@sync
async def test_queue_inequivalent(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.queues.append(name)
    async with connect(broker) as conn:
        await (await conn.channel()).declare_queue(name, arguments={"x-max-length": 10})
        exc = await channel_error(
            conn, lambda c: c.declare_queue(name, durable=True, arguments={"x-max-length": 10})
        )
        assert reply(exc) == (406, inequivalent("durable", "queue", name, "'true'", "'false'"))
        exc = await channel_error(
            conn, lambda c: c.declare_queue(name, exclusive=True, arguments={"x-max-length": 10})
        )
        assert reply(exc) == (405, LOCKED.format(name))
        exc = await channel_error(
            conn, lambda c: c.declare_queue(name, arguments={"x-max-length": 20})
        )
        assert reply(exc) == (406, inequivalent("x-max-length", "queue", name, "'20'", "'10'"))
        exc = await channel_error(conn, lambda c: c.declare_queue(name))
        assert reply(exc) == (
            406,
            inequivalent("x-max-length", "queue", name, "none", "the value '10' of type 'byte'"),
        )


@sync
async def test_queue_bind_and_unbind(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange(name, ExchangeType.DIRECT)
        q = await ch.declare_queue(f"{name}-q", exclusive=True)
        assert isinstance(await q.bind(ex, "red"), spec.Queue.BindOk)
        await q.bind(ex, "red")  # binding twice is one binding
        await publish(ex, b"red-1", "red")
        await publish(ex, b"blue-1", "blue")
        assert await get_bodies(q) == [b"red-1"]
        assert isinstance(await q.unbind(ex, "red"), spec.Queue.UnbindOk)
        await q.unbind(ex, "never-bound")  # not an error
        await publish(ex, b"red-2", "red")
        assert await get_bodies(q) == []
        await publish(ch.default_exchange, b"by-name", q.name)
        assert await get_bodies(q) == [b"by-name"]

        async def bind_default(c: AbstractChannel) -> None:
            await (await c.get_queue(q.name, ensure=False)).bind("", q.name)

        exc = await channel_error(conn, bind_default)
        assert reply(exc) == (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange",
        )


@sync
async def test_purge_returns_count(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        for i in range(4):
            await publish(ch.default_exchange, f"m{i}".encode(), name)
        assert (await q.purge()).message_count == 4
        assert (await q.purge()).message_count == 0
        assert await q.get(fail=False) is None


@sync
async def test_queue_delete_if_unused_if_empty(
    broker: BrokerUnderTest, name: str, tidy: Tidy
) -> None:
    tidy.queues.append(name)
    async with connect(broker) as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(name)
        await publish(ch.default_exchange, b"one", name)
        await publish(ch.default_exchange, b"two", name)

        async def delete(c: AbstractChannel, if_unused: bool, if_empty: bool) -> None:
            queue = await c.get_queue(name, ensure=False)
            await queue.delete(if_unused=if_unused, if_empty=if_empty)

        exc = await channel_error(conn, lambda c: delete(c, False, True))
        assert isinstance(exc, ChannelPreconditionFailed)
        assert reply(exc) == (406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty")
        consumer_ch = await conn.channel()
        await consumer_ch.set_qos(prefetch_count=1)
        inbox = Inbox()
        tag = await (await consumer_ch.get_queue(name)).consume(inbox)
        await wait_for(lambda: len(inbox) == 1)
        exc = await channel_error(conn, lambda c: delete(c, True, False))
        assert reply(exc) == (406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use")
        await (await consumer_ch.get_queue(name)).cancel(tag)
        # delete-ok counts the ready message, not the one still unacknowledged
        ok = await q.delete(if_unused=True, if_empty=False)
        assert ok.message_count == 1
        exc = await channel_error(conn, lambda c: c.declare_queue(name, passive=True))
        assert reply(exc)[0] == 404
        ok = await (await conn.channel()).queue_delete(name)
        assert ok.message_count == 0


@sync
async def test_auto_delete_queue_goes_with_its_last_consumer(
    broker: BrokerUnderTest, name: str
) -> None:
    async with connect(broker) as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(name, auto_delete=True)
        await ch.declare_queue(name, passive=True)  # never consumed from: stays
        first = await q.consume(Inbox())
        second = await q.consume(Inbox())
        await q.cancel(first)
        assert await counts(ch, name) == (0, 1)
        await q.cancel(second)
        exc = await channel_error(conn, lambda c: c.declare_queue(name, passive=True))
        assert reply(exc) == (404, f"NOT_FOUND - no queue '{name}' in vhost '/'")


# ---------------------------------------------------------------------------------------------
# routing


async def route(
    ch: AbstractChannel, name: str, kind: str
) -> tuple[AbstractExchange, dict[str, AbstractQueue], dict[str, list[bytes]]]:
    """Exchange ``name`` of type ``kind`` with ROUTING[kind]'s queues bound to it and its
    messages published; the exchange, the queues and what each queue then holds."""
    bindings, messages, _ = ROUTING[kind]
    ex = await ch.declare_exchange(name, ExchangeType(kind))
    queues = {}
    for label, bind in bindings.items():
        q = await ch.declare_queue(f"{name}-{label}", exclusive=True)
        await q.bind(ex, **bind)
        queues[label] = q
    for body, key, props in messages:
        await publish(ex, body, key, **props)
    return ex, queues, {label: await get_bodies(q) for label, q in queues.items()}


@sync
async def test_topic_routing(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        _, _, got = await route(await conn.channel(), name, "topic")
    assert got == ROUTING["topic"][2]


@sync
async def test_headers_routing(broker: BrokerUnderTest, name: str, tidy: Tidy) -> None:
    tidy.exchanges.append(name)
    async with connect(broker) as conn:
        ex, queues, got = await route(await conn.channel(), name, "headers")
        # unbinding needs the same arguments
        await queues["all"].unbind(ex, arguments=ROUTING["headers"][0]["all"]["arguments"])
        await publish(ex, b"after", "ignored", headers={"format": "pdf", "type": "report"})
        assert await get_bodies(queues["all"]) == []
    assert got == ROUTING["headers"][2]


# ---------------------------------------------------------------------------------------------
# consuming and acknowledging


@sync
async def test_prefetch_limits_unacked(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=2)
        q = await ch.declare_queue(name, exclusive=True)
        for i in range(5):
            await publish(ch.default_exchange, f"m{i}".encode(), name)
        inbox = Inbox()
        await q.consume(inbox)
        await wait_for(lambda: len(inbox) == 2)
        await asyncio.sleep(QUIET)
        assert inbox.bodies == [b"m0", b"m1"]
        await inbox.messages[0].ack()
        await wait_for(lambda: len(inbox) == 3)
        await asyncio.sleep(QUIET)
        assert len(inbox) == 3
        for m in inbox.messages[1:]:
            await m.ack()
        await wait_for(lambda: len(inbox) == 5)
        assert inbox.bodies == [f"m{i}".encode() for i in range(5)]
        assert [m.delivery_tag for m in inbox.messages] == [1, 2, 3, 4, 5]


@sync
async def test_consume_and_cancel(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        inbox = Inbox()
        tag = await q.consume(inbox, no_ack=True, consumer_tag="my-tag")
        assert tag == "my-tag"
        await publish(ch.default_exchange, b"before", name, message_id="id-1")
        await wait_for(lambda: len(inbox) == 1)
        m = inbox.messages[0]
        assert (m.body, m.consumer_tag, m.routing_key, m.exchange, m.redelivered) == (
            b"before",
            "my-tag",
            name,
            "",
            False,
        )
        assert m.message_id == "id-1"
        assert isinstance(await q.cancel(tag), spec.Basic.CancelOk)
        await publish(ch.default_exchange, b"after", name)
        await asyncio.sleep(QUIET)
        assert len(inbox) == 1
        assert await counts(ch, name) == (1, 0)
        tag2 = await q.consume(inbox)
        # aiormq names its consumers itself ("ctag<channel>.<uuid hex>"); the broker keeps it
        assert tag2.startswith("ctag")
        await wait_for(lambda: len(inbox) == 2)
        assert inbox.messages[1].body == b"after"
        # the queue iterator API: consume, take one, cancel on exit
        await q.cancel(tag2)
        await publish(ch.default_exchange, b"iterated", name)
        async with q.iterator() as it:
            async for message in it:
                async with message.process():
                    assert message.body == b"iterated"
                break
        await asyncio.sleep(QUIET)
        assert await counts(ch, name) == (0, 0)


@sync
async def test_get_and_get_empty(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        assert await q.get(fail=False) is None
        with pytest.raises(aio_pika.exceptions.QueueEmpty):
            await q.get()
        await publish(
            ch.default_exchange,
            b"first",
            name,
            headers={"h": "v"},
            priority=3,
            correlation_id="c1",
            content_type="text/plain",
        )
        await publish(ch.default_exchange, b"second", name)
        msg = await q.get()
        assert msg is not None
        assert (msg.body, msg.message_count, msg.redelivered, msg.routing_key) == (
            b"first",
            1,
            False,
            name,
        )
        assert msg.delivery_tag == 1
        assert msg.headers == {"h": "v"}
        assert (msg.priority, msg.correlation_id, msg.content_type) == (3, "c1", "text/plain")
        await msg.ack()
        msg = await q.get(no_ack=True)
        assert msg is not None
        assert (msg.body, msg.message_count) == (b"second", 0)
        assert await q.get(fail=False) is None


@sync
async def test_ack_nack_reject(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        for body in (b"acked", b"nacked", b"rejected-requeue", b"dropped", b"nack-dropped"):
            await publish(ch.default_exchange, body, name)

        async def get() -> AbstractIncomingMessage:
            msg = await q.get()
            assert msg is not None
            return msg

        first = await get()
        assert first.body == b"acked"
        await first.ack()
        second = await get()
        assert second.body == b"nacked"
        await second.nack(requeue=True)
        again = await get()
        assert (again.body, again.redelivered) == (b"nacked", True)
        await again.ack()
        third = await get()
        await third.reject(requeue=True)
        again = await get()
        assert (again.body, again.redelivered) == (b"rejected-requeue", True)
        await again.ack()
        fourth = await get()
        assert fourth.body == b"dropped"
        await fourth.reject(requeue=False)
        fifth = await get()
        assert fifth.body == b"nack-dropped"
        await fifth.nack(requeue=False)
        assert await q.get(fail=False) is None
        assert await counts(ch, name) == (0, 0)


@sync
async def test_nack_multiple(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        for i in range(3):
            await publish(ch.default_exchange, f"m{i}".encode(), name)
        got = [await q.get() for _ in range(3)]
        last = got[-1]
        assert last is not None and last.delivery_tag == 3
        # aio-pika's message.nack has no multiple flag; aiormq's basic_nack has
        underlay = await ch.get_underlay_channel()
        await underlay.basic_nack(last.delivery_tag, multiple=True, requeue=True)
        again = [await q.get(no_ack=True) for _ in range(3)]
        assert [(m.body, m.redelivered) for m in again if m is not None] == [
            (b"m0", True),
            (b"m1", True),
            (b"m2", True),
        ]


@sync
async def test_recover_redelivers_unacked(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        await publish(ch.default_exchange, b"a", name)
        await publish(ch.default_exchange, b"b", name)
        inbox = Inbox()
        await q.consume(inbox)
        await wait_for(lambda: len(inbox) == 2)
        assert [m.redelivered for m in inbox.messages] == [False, False]
        underlay = await ch.get_underlay_channel()
        assert isinstance(await underlay.basic_recover(requeue=True), spec.Basic.RecoverOk)
        await wait_for(lambda: len(inbox) == 4)
        assert inbox.bodies[2:] == [b"a", b"b"]
        assert [m.redelivered for m in inbox.messages[2:]] == [True, True]
        assert [m.delivery_tag for m in inbox.messages] == [1, 2, 3, 4]
        await inbox.messages[3].ack(multiple=True)
        assert await counts(ch, name) == (0, 1)


@sync
async def test_unknown_delivery_tag(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:

        async def ack(c: AbstractChannel) -> None:
            await (await c.get_underlay_channel()).basic_ack(42)

        exc = await channel_error(conn, ack)
        assert isinstance(exc, ChannelPreconditionFailed)
        assert reply(exc) == (406, "PRECONDITION_FAILED - unknown delivery tag 42")

        async def nack(c: AbstractChannel) -> None:
            await (await c.get_underlay_channel()).basic_nack(7, requeue=True)

        exc = await channel_error(conn, nack)
        assert reply(exc) == (406, "PRECONDITION_FAILED - unknown delivery tag 7")

        async def double_ack(c: AbstractChannel) -> None:
            q = await c.declare_queue(name, exclusive=True)
            await publish(c.default_exchange, b"x", name)
            msg = await q.get()
            assert msg is not None
            await msg.ack()
            # aio-pika refuses a second ack of the same message; go below it
            await (await c.get_underlay_channel()).basic_ack(msg.delivery_tag or 0)

        exc = await channel_error(conn, double_ack)
        assert reply(exc) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


@sync
async def test_consumer_cancel_notification(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch, q = await exclusive_queue(conn, name)
        cancelled: list[str | None] = []

        async def on_cancel(frame: spec.Basic.Cancel) -> None:
            cancelled.append(frame.consumer_tag)

        underlay = await ch.get_underlay_channel()
        underlay.on_consumer_cancel_callbacks.add(on_cancel)
        tag = await q.consume(Inbox())
        await (await conn.channel()).queue_delete(name)
        await wait_for(lambda: cancelled == [tag])
        assert tag not in underlay.consumers
        # the channel stays usable
        again = await ch.declare_queue(exclusive=True)
        assert again.name.startswith("amq.gen-")


# ---------------------------------------------------------------------------------------------
# publisher confirms, mandatory, transactions


@sync
async def test_publisher_confirms_and_mandatory_return(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch = await conn.channel(publisher_confirms=True)
        q = await ch.declare_queue(name, exclusive=True)
        ok = await ch.default_exchange.publish(aio_pika.Message(b"routed"), name)
        assert isinstance(ok, spec.Basic.Ack)
        assert ok.delivery_tag == 1
        # unroutable and not mandatory: acked, dropped
        ok = await ch.default_exchange.publish(
            aio_pika.Message(b"dropped"), f"{name}-nowhere", mandatory=False
        )
        assert isinstance(ok, spec.Basic.Ack)
        assert ok.delivery_tag == 2
        # unroutable and mandatory (aio-pika's default): returned with 312 NO_ROUTE
        returned = await ch.default_exchange.publish(aio_pika.Message(b"lost"), f"{name}-nowhere")
        assert isinstance(returned, DeliveredMessage)
        assert isinstance(returned.delivery, spec.Basic.Return)
        assert (returned.delivery.reply_code, returned.delivery.reply_text) == (312, "NO_ROUTE")
        assert (returned.delivery.exchange, returned.delivery.routing_key) == (
            "",
            f"{name}-nowhere",
        )
        assert returned.body == b"lost"
        assert await get_bodies(q) == [b"routed"]

        raising = await conn.channel(publisher_confirms=True, on_return_raises=True)
        with pytest.raises(DeliveryError) as info:
            await raising.default_exchange.publish(aio_pika.Message(b"lost-2"), f"{name}-nowhere")
        frame = info.value.frame
        assert isinstance(frame, spec.Basic.Return)
        assert (frame.reply_code, frame.reply_text) == (312, "NO_ROUTE")
        assert info.value.message is not None and info.value.message.body == b"lost-2"

        # publishing to a missing exchange closes the channel
        async def publish_missing(c: AbstractChannel) -> None:
            ex = await c.get_exchange(f"{name}-missing", ensure=False)
            await ex.publish(aio_pika.Message(b"x"), "k")

        exc = await channel_error(conn, publish_missing)
        assert reply(exc) == (404, f"NOT_FOUND - no exchange '{name}-missing' in vhost '/'")


@sync
async def test_transactions(broker: BrokerUnderTest, name: str) -> None:
    async with connect(broker) as conn:
        ch = await conn.channel(publisher_confirms=False)
        q = await ch.declare_queue(name, exclusive=True)
        tx = ch.transaction()
        assert isinstance(await tx.select(), spec.Tx.SelectOk)
        await publish(ch.default_exchange, b"rolled-back", name)
        assert await counts(ch, name) == (0, 0)
        assert isinstance(await tx.rollback(), spec.Tx.RollbackOk)
        assert await counts(ch, name) == (0, 0)
        tx = ch.transaction()
        await tx.select()
        await publish(ch.default_exchange, b"committed-1", name)
        await publish(ch.default_exchange, b"committed-2", name)
        assert isinstance(await tx.commit(), spec.Tx.CommitOk)
        assert await counts(ch, name) == (2, 0)
        # acks are transactional too: a rolled-back ack leaves the message unacked
        async with ch.transaction():
            msg = await q.get()
            assert msg is not None and msg.body == b"committed-1"
            await msg.ack()
        # the context manager committed
        assert await counts(ch, name) == (1, 0)
        tx = ch.transaction()
        await tx.select()
        msg = await q.get()
        assert msg is not None and msg.body == b"committed-2"
        await (await ch.get_underlay_channel()).basic_ack(msg.delivery_tag or 0)
        await tx.rollback()
        assert await counts(ch, name) == (0, 0)
        await (await ch.get_underlay_channel()).basic_ack(msg.delivery_tag or 0)
        await tx.commit()

        async def commit(c: AbstractChannel) -> None:
            await (await c.get_underlay_channel()).tx_commit()

        async def rollback(c: AbstractChannel) -> None:
            await (await c.get_underlay_channel()).tx_rollback()

        async def confirm_then_tx(c: AbstractChannel) -> None:
            await (await c.get_underlay_channel()).tx_select()

        async def tx_then_confirm(c: AbstractChannel) -> None:
            underlay = await c.get_underlay_channel()
            await underlay.tx_select()
            await underlay.confirm_delivery()

        plain = await conn.channel(publisher_confirms=False)
        with pytest.raises(RuntimeError):
            (await conn.channel(publisher_confirms=True)).transaction()
        await plain.close()
        for action, text in (
            (commit, "channel is not transactional"),
            (rollback, "channel is not transactional"),
            (confirm_then_tx, "cannot switch from confirm to tx mode"),
        ):
            exc = await channel_error(conn, action)
            assert isinstance(exc, ChannelPreconditionFailed)
            assert reply(exc) == (406, f"PRECONDITION_FAILED - {text}")
        ch = await conn.channel(publisher_confirms=False)
        try:
            await tx_then_confirm(ch)
        except ChannelClosed as exc:
            assert reply(exc) == (
                406,
                "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
            )
        else:
            raise AssertionError("the broker did not close the channel")
