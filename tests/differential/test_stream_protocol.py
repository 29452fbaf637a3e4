"""RabbitMQ's stream protocol (port 5552) driven by the unmodified rstream client, the same
scenario on Leveret and on RabbitMQ 3.10.8 (its rabbitmq_stream plugin, enabled here if
it is not).

rstream connects to the host and port a stream's metadata advertises; RabbitMQ advertises
its host name. The clients run in load-balancer mode: they connect to the address given
and check the advertised one, so both brokers are reached on 127.0.0.1 whatever they
advertise."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pika
import pytest

from tests.support.brokers import BrokerUnderTest

rstream = pytest.importorskip("rstream")
from rstream import (  # noqa: E402
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
    exceptions,
)

T = TypeVar("T")
CREDENTIALS: dict[str, Any] = {
    "username": "guest",
    "password": "guest",
    "load_balancer_mode": True,
}


@pytest.fixture
def sname() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def stream(sbroker: BrokerUnderTest, sname: str) -> Iterator[str]:
    run(lambda: _create(sbroker, sname))
    yield sname
    run(lambda: _delete(sbroker, sname))


def run(make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    async def main() -> T:
        return await asyncio.wait_for(make(), timeout)

    return asyncio.run(main())


@asynccontextmanager
async def producer(b: BrokerUnderTest) -> AsyncIterator[Producer]:
    async with Producer("127.0.0.1", b.stream_port, **CREDENTIALS) as p:
        yield p


async def _create(b: BrokerUnderTest, name: str) -> None:
    async with producer(b) as p:
        await p.create_stream(name)


async def _delete(b: BrokerUnderTest, name: str) -> None:
    async with producer(b) as p:
        await p.delete_stream(name, missing_ok=True)


async def publish_confirmed(
    b: BrokerUnderTest,
    stream: str,
    messages: list[AMQPMessage | bytes],
    publisher_name: str | None = None,
) -> list[bool]:
    """One Publish frame of ``messages``; the confirmation of each, in order."""
    async with producer(b) as p:
        return await _send(p, stream, messages, publisher_name)


async def _send(
    p: Producer,
    stream: str,
    messages: list[AMQPMessage | bytes],
    publisher_name: str | None = None,
) -> list[bool]:
    done: asyncio.Queue[ConfirmationStatus] = asyncio.Queue()

    async def on_confirm(status: ConfirmationStatus) -> None:
        await done.put(status)

    ids = await p.send_batch(
        stream, messages, publisher_name=publisher_name, on_publish_confirm=on_confirm
    )
    statuses = {}
    while len(statuses) < len(ids):
        status = await done.get()
        statuses[status.message_id] = status.is_confirmed
    return [statuses[i] for i in ids]


async def read(
    b: BrokerUnderTest,
    stream: str,
    spec: ConsumerOffsetSpecification,
    want: int,
    wait: float = 0.5,
    decoder: Any = None,
    during: Callable[[], Awaitable[None]] | None = None,
) -> list[tuple[int, Any]]:
    """(offset, message) of what a subscription from ``spec`` gets: until ``want`` came,
    then ``wait`` seconds more for any extra. ``during`` runs once it is subscribed."""
    got: list[tuple[int, Any]] = []
    c = Consumer("127.0.0.1", b.stream_port, **CREDENTIALS)
    await c.start()
    try:

        async def on_message(msg: Any, ctx: MessageContext) -> None:
            got.append((ctx.offset, msg if decoder else bytes(msg)))

        await c.subscribe(stream, on_message, offset_specification=spec, decoder=decoder)
        if during is not None:
            await during()
        deadline = time.monotonic() + 10
        while len(got) < want and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(wait)
    finally:
        await c.close()
    return got


def spec(kind: OffsetType, offset: int | None = None) -> ConsumerOffsetSpecification:
    return ConsumerOffsetSpecification(kind, offset)


# ----------------------------------------------------------------------------- scenarios
def test_publish_with_confirms_then_read_everything_once(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    bodies = [f"m-{i}".encode() for i in range(200)]
    confirmed = run(lambda: publish_confirmed(sbroker, stream, list(bodies)))
    assert confirmed == [True] * 200
    got = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 200))
    assert [o for o, _ in got] == list(range(200))
    assert [m for _, m in got] == bodies


def test_every_offset_spec(sbroker: BrokerUnderTest, stream: str) -> None:
    """Two publishes, each confirmed before the next (two chunks on both brokers), then a
    subscription from each offset specification: every message once, offsets contiguous."""

    async def fill() -> tuple[int, int]:
        async with producer(sbroker) as p:
            await _send(p, stream, [f"a{i}".encode() for i in range(10)])
            await asyncio.sleep(0.05)
            between = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            await _send(p, stream, [f"b{i}".encode() for i in range(5)])
        return between, int(time.time() * 1000) + 60_000

    between, future = run(fill)
    offsets = {}
    for name, s, want in (
        ("first", spec(OffsetType.FIRST), 15),
        ("offset 12", spec(OffsetType.OFFSET, 12), 3),
        ("offset 0", spec(OffsetType.OFFSET, 0), 15),
        ("last", spec(OffsetType.LAST), 5),
        ("timestamp between", spec(OffsetType.TIMESTAMP, between), 5),
        ("timestamp future", spec(OffsetType.TIMESTAMP, future), 0),
    ):
        got = run(lambda s=s, want=want: read(sbroker, stream, s, want, wait=0.3))
        offsets[name] = [o for o, _ in got]

    async def one_more() -> None:
        assert await publish_confirmed(sbroker, stream, [b"c0"]) == [True]

    nxt = run(lambda: read(sbroker, stream, spec(OffsetType.NEXT), 1, during=one_more))
    if sbroker.name == "rabbitmq" and offsets["last"] in (
        [11, 12, 13, 14],
        [12, 13, 14],
        [13, 14],
        [14],
    ):
        # RabbitMQ hands a publish frame's messages to its stream writer one by one, and a
        # writer behind on a loaded machine can make two chunks of them: "last" is then
        # the second one. Leveret makes one chunk of a publish frame, always.
        offsets["last"] = [10, 11, 12, 13, 14]
    assert offsets == {
        "first": list(range(15)),
        "offset 12": [12, 13, 14],
        "offset 0": list(range(15)),
        "last": [10, 11, 12, 13, 14],
        "timestamp between": [10, 11, 12, 13, 14],
        "timestamp future": [],
    }
    assert nxt == [(15, b"c0")]


def test_store_and_query_offset(sbroker: BrokerUnderTest, stream: str) -> None:
    async def scenario() -> tuple[Any, ...]:
        c = Consumer("127.0.0.1", sbroker.stream_port, **CREDENTIALS)
        await c.start()
        try:
            try:
                await c.query_offset(stream, "reader-1")
                before: Any = "no error"
            except exceptions.OffsetNotFound as exc:
                before = type(exc).__name__
            await c.store_offset(stream, "reader-1", 7)
            await c.store_offset(stream, "reader-2", 3)
            await c.store_offset(stream, "reader-1", 42)
            await asyncio.sleep(0.3)  # store offset has no answer; the store is asynchronous
            return (
                before,
                await c.query_offset(stream, "reader-1"),
                await c.query_offset(stream, "reader-2"),
            )
        finally:
            await c.close()

    assert run(scenario) == ("OffsetNotFound", 42, 3)


def test_named_publisher_deduplication(sbroker: BrokerUnderTest, stream: str) -> None:
    """Publishing ids at or below the last one stored for a publisher's name are
    confirmed and not stored again."""

    def batch(ids: range) -> list[AMQPMessage | bytes]:
        out: list[AMQPMessage | bytes] = []
        for i in ids:
            m = AMQPMessage(body=f"p{i}".encode())
            m.publishing_id = i  # explicit ids, as a publisher that resends would use
            out.append(m)
        return out

    async def scenario() -> tuple[list[bool], list[bool]]:
        async with producer(sbroker) as p:
            first = await _send(p, stream, batch(range(1, 6)), publisher_name="dedup")
            again = await _send(p, stream, batch(range(3, 9)), publisher_name="dedup")
        return first, again

    first, again = run(scenario)
    assert first == [True] * 5
    assert again == [True] * 6
    got = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 8, decoder=amqp_decoder))
    assert [(o, bytes(m.body)) for o, m in got] == [(i, f"p{i + 1}".encode()) for i in range(8)]


def test_errors_for_missing_and_existing_streams(sbroker: BrokerUnderTest, sname: str) -> None:
    async def scenario() -> list[str]:
        out = []
        async with producer(sbroker) as p:
            out.append(str(await p.stream_exists(sname)))
            try:
                await p.delete_stream(sname)
            except exceptions.ServerError as exc:
                out.append(type(exc).__name__)
            await p.create_stream(sname)
            out.append(str(await p.stream_exists(sname)))
            try:
                await p.create_stream(sname)
            except exceptions.ServerError as exc:
                out.append(type(exc).__name__)
            await p.delete_stream(sname)
        c = Consumer("127.0.0.1", sbroker.stream_port, **CREDENTIALS)
        await c.start()
        try:
            try:
                await c.subscribe(sname, lambda m, ctx: None)
            except exceptions.ServerError as exc:
                out.append(type(exc).__name__)
            try:
                await c.query_offset(sname, "reader")
            except exceptions.ServerError as exc:
                out.append(type(exc).__name__)
        finally:
            await c.close()
        return out

    assert run(scenario) == [
        "False",
        "StreamDoesNotExist",
        "True",
        "StreamAlreadyExists",
        "StreamDoesNotExist",
        "StreamDoesNotExist",
    ]


# --------------------------------------------------------------- one stream, two protocols
AMQP091_PROPERTIES = pika.BasicProperties(
    content_type="text/plain",
    content_encoding="gzip",
    headers={"a": 1, "s": "x", "b": True, "by": b"raw"},
    delivery_mode=2,
    priority=3,
    correlation_id="c1",
    reply_to="r1",
    expiration="60000",
    message_id="m1",
    timestamp=1700000000,
    type="t1",
    user_id="guest",
    app_id="app1",
)


def test_amqp091_and_stream_protocol_read_each_others_messages(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    """A stream declared over the stream protocol takes AMQP 0-9-1 publishes, and the
    stream protocol's AMQP 1.0 messages are read over AMQP 0-9-1, both ways with
    properties mapped as RabbitMQ 3.10 maps them."""
    conn = pika.BlockingConnection(pika.ConnectionParameters(sbroker.host, sbroker.port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", stream, b"from091", AMQP091_PROPERTIES)
        message = AMQPMessage(
            body=b"from10",
            properties=rstream.Properties(
                message_id="pm1",
                content_type="text/x",
                correlation_id="pc1",
                reply_to="pr",
                subject="subj",
                user_id=b"guest",
                creation_time=1700000000000,
            ),
            application_properties={"k": "v"},
        )
        assert run(lambda: publish_confirmed(sbroker, stream, [message])) == [True]
        raw = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 2))
        ch.basic_qos(prefetch_count=10)
        seen: list[tuple[str, str, pika.BasicProperties, bytes]] = []
        ch.basic_consume(
            stream,
            lambda _c, m, p, body: seen.append((m.exchange, m.routing_key, p, body)),
            arguments={"x-stream-offset": "first"},
        )
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    finally:
        conn.close()
    assert [o for o, _ in raw] == [0, 1]
    annotations = (
        b"\n\xa3\rx-routing-key\xa1" + bytes((len(stream),)) + stream.encode()
        + b"\xa3\nx-exchange\xa1\x00\xa3\x10x-basic-priorityP\x03"
        b"\xa3\x15x-basic-delivery-modeP\x02\xa3\x12x-basic-expiration\xa1\x0560000"
    )  # fmt: skip
    assert raw[0][1] == (
        b"\x00Sr\xc1" + bytes((len(annotations),)) + annotations
        + b"\x00Ss\xc05\r\xa1\x02m1\xa0\x05guest@@\xa1\x02r1\xa1\x02c1\xa3\ntext/plain"
        b"\xa3\x04gzip@\x83\x00\x00\x01\x8b\xcf\xe5h\x00@@@"
        b"\x00St\xc1B\x0c\xa1\x0cx-basic-type\xa1\x02t1\xa1\x0ex-basic-app-id\xa1\x04app1"
        b"\xa1\x01aT\x01\xa1\x01s\xa1\x01x\xa1\x01bV\x01\xa1\x02by\xa0\x03raw"
        b"\x00Su\xa0\x07from091"
    )  # fmt: skip
    assert raw[1][1] == bytes(message)  # as it was published
    (ex0, key0, p0, body0), (ex1, key1, p1, body1) = seen
    assert (ex0, key0, body0) == ("", stream, b"from091")
    assert (ex1, key1, body1) == ("", stream, b"from10")
    for name in (
        "content_type",
        "content_encoding",
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
    ):
        assert getattr(p0, name) == getattr(AMQP091_PROPERTIES, name), name
    assert {k: v for k, v in p0.headers.items() if k != "x-stream-offset"} == {
        "a": 1,
        "s": "x",
        "b": True,
        "by": b"raw",
    }
    assert (
        p1.message_id,
        p1.content_type,
        p1.correlation_id,
        p1.reply_to,
        p1.user_id,
        p1.timestamp,
    ) == ("pm1", "text/x", "pc1", "pr", "guest", 1700000000)
    assert {k: v for k, v in p1.headers.items() if k != "x-stream-offset"} == {"k": "v"}


def test_sub_entry_batches(sbroker: BrokerUnderTest, stream: str) -> None:
    """Sub-entry batches, plain and gzip: one confirm each, every record read once."""
    from rstream import CompressionType

    async def scenario() -> list[bool]:
        done: asyncio.Queue[bool] = asyncio.Queue()

        async def on_confirm(status: ConfirmationStatus) -> None:
            await done.put(status.is_confirmed)

        async with producer(sbroker) as p:
            for kind, prefix in ((CompressionType.No, "n"), (CompressionType.Gzip, "g")):
                await p.send_sub_entry(
                    stream,
                    [f"{prefix}{i}".encode() for i in range(3)],
                    compression_type=kind,
                    on_publish_confirm=on_confirm,
                )
            return [await done.get(), await done.get()]

    assert run(scenario) == [True, True]
    got = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 6))
    assert got == [(i, b) for i, b in enumerate([b"n0", b"n1", b"n2", b"g0", b"g1", b"g2"])]


def test_amqp091_header_types_over_the_stream_protocol(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    """AMQP 0-9-1 header values as the stream protocol gives them: a 64-bit long, a
    timestamp (in ms), a void, a small int, a UTF-8 string."""
    import datetime

    conn = pika.BlockingConnection(pika.ConnectionParameters(sbroker.host, sbroker.port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        headers = {
            "big": 2**40,
            "t": datetime.datetime(2024, 1, 1),
            "n": None,
            "neg": -5,
            "u": "é",
        }
        ch.basic_publish("", stream, b"b", pika.BasicProperties(headers=headers))
    finally:
        conn.close()
    raw = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 1))
    annotations = (
        b"\x04\xa3\rx-routing-key\xa1" + bytes((len(stream),)) + stream.encode()
        + b"\xa3\nx-exchange\xa1\x00"
    )  # fmt: skip
    assert raw == [
        (
            0,
            b"\x00Sr\xc1" + bytes((len(annotations),)) + annotations
            + b"\x00St\xc1-\n\xa1\x03big\x81\x00\x00\x01\x00\x00\x00\x00\x00"
            b"\xa1\x01t\x83\x00\x00\x01\x8c\xc2Q\xf4\x00\xa1\x01n@\xa1\x03negT\xfb"
            b"\xa1\x01u\xa1\x02\xc3\xa9\x00Su\xa0\x01b",
        )
    ]  # fmt: skip


def test_create_arguments(sbroker: BrokerUnderTest) -> None:
    """Create's arguments: the stream ones are taken, others ignored, and a cluster size
    or leader locator RabbitMQ does not know is refused (precondition failed)."""

    async def scenario() -> list[str]:
        out = []
        async with producer(sbroker) as p:
            for arguments in (
                {"max-length-bytes": 10_000_000, "max-age": "1h", "foo": "bar"},
                {"stream-max-segment-size-bytes": 1_000_000, "initial-cluster-size": 1},
                {"queue-leader-locator": "client-local"},
                {"initial-cluster-size": 0},
                {"queue-leader-locator": "nowhere"},
            ):
                name = f"s-{uuid.uuid4().hex[:10]}"
                try:
                    await p.create_stream(name, arguments=arguments)
                    out.append("created")
                    await p.delete_stream(name)
                except exceptions.ServerError as exc:
                    out.append(type(exc).__name__)
        return out

    assert run(scenario) == [
        "created",
        "created",
        "created",
        "PreconditionFailed",
        "PreconditionFailed",
    ]


def test_stream_protocol_ids_and_typed_properties_over_amqp091(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    """A message published over the stream protocol with a numeric message id, a uuid
    correlation id and typed application properties, read over AMQP 0-9-1: the ids as
    text with headers naming their types (rabbit_msg_record:to_amqp091), the properties
    as headers, x-stream-offset beside them."""
    import uuid as uuid_

    message = AMQPMessage(
        body=b"typed",
        properties=rstream.Properties(message_id=42, correlation_id=uuid_.UUID(int=5)),
        # (no double: pika decodes an AMQP 0-9-1 'd' field wrongly, from either broker)
        application_properties={"i": 5, "neg": -3, "s": "x"},
    )
    assert run(lambda: publish_confirmed(sbroker, stream, [message])) == [True]
    conn = pika.BlockingConnection(pika.ConnectionParameters(sbroker.host, sbroker.port))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        seen: list[tuple[str, str, pika.BasicProperties, bytes]] = []
        ch.basic_consume(
            stream,
            lambda _c, m, p, body: seen.append((m.exchange, m.routing_key, p, body)),
            arguments={"x-stream-offset": 0},
        )
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    finally:
        conn.close()
    assert len(seen) == 1
    exchange, key, props, body = seen[0]
    assert (exchange, key, body) == ("", stream, b"typed")
    assert (props.message_id, props.correlation_id) == (
        "42",
        "00000000-0000-0000-0000-000000000005",
    )
    assert props.headers == {
        "x-correlation-id-type": "uuid",
        "x-message-id-type": "ulong",
        "i": 5,
        "neg": -3,
        "s": "x",
        "x-stream-offset": 0,
    }


def test_a_stored_offset_takes_an_offset_of_the_stream(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    """Osiris writes a stored offset, when no message goes with it, as a tracking chunk
    of its own, which takes an offset: readers see a gap there, and `last` is the last
    chunk of messages."""

    async def store(reference: str) -> None:
        c = Consumer("127.0.0.1", sbroker.stream_port, **CREDENTIALS)
        await c.start()
        try:
            await c.store_offset(stream, reference, 1)
            await asyncio.sleep(0.5)  # no answer; written with the writer's next batch
        finally:
            await c.close()

    assert run(lambda: publish_confirmed(sbroker, stream, [b"a", b"b"])) == [True, True]
    run(lambda: store("r1"))
    run(lambda: store("r2"))
    assert run(lambda: publish_confirmed(sbroker, stream, [b"c"])) == [True]
    assert run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 3)) == [
        (0, b"a"),
        (1, b"b"),
        (4, b"c"),
    ]
    assert run(lambda: read(sbroker, stream, spec(OffsetType.OFFSET, 2), 1)) == [(4, b"c")]
    assert run(lambda: read(sbroker, stream, spec(OffsetType.LAST), 1)) == [(4, b"c")]
