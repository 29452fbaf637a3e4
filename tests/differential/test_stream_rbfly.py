"""RabbitMQ's stream protocol driven by the unmodified rbfly client (GPL-3: a test
dependency only), the same scenarios as rstream's on Leveret and on RabbitMQ 3.10.8:
publish with confirms, consume from every offset specification, store and query an
offset, de-duplication of a named publisher, the error for a missing stream."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from tests.support.brokers import BrokerUnderTest

rbfly_streams = pytest.importorskip("rbfly.streams")
from rbfly.streams import Offset, get_message_ctx  # noqa: E402

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    async def main() -> T:
        return await asyncio.wait_for(make(), timeout)

    return asyncio.run(main())


@contextlib.asynccontextmanager
async def connected(b: BrokerUnderTest) -> AsyncIterator[Any]:
    """An rbfly streams client of the broker, disconnected at the end."""
    c = rbfly_streams.streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{b.stream_port}/")
    try:
        yield c
    finally:
        await c.disconnect()


@pytest.fixture
def stream(sbroker: BrokerUnderTest) -> Iterator[str]:
    name = f"rb-{uuid.uuid4().hex[:10]}"

    async def create() -> None:
        async with connected(sbroker) as c:
            await c.create_stream(name)

    async def delete() -> None:
        async with connected(sbroker) as c:
            await c.delete_stream(name)

    run(create)
    yield name
    run(delete)


async def publish(b: BrokerUnderTest, stream: str, bodies: list[bytes], name: str) -> None:
    """Each body sent and confirmed (rbfly's Publisher.send waits for the confirm)."""
    async with connected(b) as c, c.publisher(stream, name=name) as p:
        for body in bodies:
            await p.send(body)


async def consume(
    b: BrokerUnderTest, stream: str, offset: Offset, want: int, wait: float = 0.5
) -> list[tuple[int, bytes]]:
    """(offset, body) of what a subscription from ``offset`` gets: ``want`` messages, then
    whatever more comes within ``wait`` seconds."""
    got: list[tuple[int, bytes]] = []
    async with connected(b) as c:

        async def reader() -> None:
            async for body in c.subscribe(stream, offset=offset):
                got.append((get_message_ctx().stream_offset, bytes(body)))

        task = asyncio.create_task(reader())
        try:
            deadline = time.monotonic() + 10
            while len(got) < want and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.02)
            await asyncio.sleep(wait)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return got


def test_publish_with_confirms_then_read_everything_once(
    sbroker: BrokerUnderTest, stream: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(50)]
    run(lambda: publish(sbroker, stream, bodies, "w1"))
    got = run(lambda: consume(sbroker, stream, Offset.FIRST, 50))
    assert got == list(enumerate(bodies))


def test_every_offset_spec(sbroker: BrokerUnderTest, stream: str) -> None:
    run(lambda: publish(sbroker, stream, [b"a", b"b", b"c"], "w1"))
    time.sleep(0.05)
    middle = datetime.datetime.now(datetime.UTC).timestamp()
    time.sleep(0.05)
    run(lambda: publish(sbroker, stream, [b"d", b"e"], "w2"))
    first = run(lambda: consume(sbroker, stream, Offset.FIRST, 5))
    assert first == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert run(lambda: consume(sbroker, stream, Offset.offset(3), 2)) == first[3:]
    assert run(lambda: consume(sbroker, stream, Offset.offset(1), 4)) == first[1:]
    # the last chunk holds the last message (rbfly sent it on its own)
    assert run(lambda: consume(sbroker, stream, Offset.LAST, 1)) == first[4:]
    assert run(lambda: consume(sbroker, stream, Offset.timestamp(middle), 2)) == first[3:]

    async def next_only() -> list[tuple[int, bytes]]:
        reading = asyncio.create_task(consume(sbroker, stream, Offset.NEXT, 1, wait=0.3))
        await asyncio.sleep(1)
        await publish(sbroker, stream, [b"f"], "w3")
        return await reading

    assert run(next_only) == [(5, b"f")]


def test_store_and_query_offset(sbroker: BrokerUnderTest, stream: str) -> None:
    """An offset written under a reference is where ``Offset.reference`` resumes: the
    next message after it."""
    run(lambda: publish(sbroker, stream, [f"m{i}".encode() for i in range(6)], "w1"))

    async def store() -> None:
        # as rbfly applications do: while reading, the offset of the message in hand
        async with connected(sbroker) as c:
            async for body in c.subscribe(stream, offset=Offset.FIRST):
                if body == b"m1":
                    await c.write_offset(stream, "reader-1", 2)
                if body == b"m3":
                    await c.write_offset(stream, "reader-1")
                    break
            await asyncio.sleep(0.3)  # store offset has no answer

    run(store)
    got = run(lambda: consume(sbroker, stream, Offset.reference("reader-1"), 2))
    assert got == [(4, b"m4"), (5, b"m5")]
    # no offset stored under a reference: from the start
    assert len(run(lambda: consume(sbroker, stream, Offset.reference("none"), 6))) == 6


def test_named_publisher_deduplication(sbroker: BrokerUnderTest, stream: str) -> None:
    """A named publisher resumes after its last stored publishing id, and ids at or below
    it are confirmed and not stored again."""

    async def scenario() -> list[int]:
        ids = []
        async with connected(sbroker) as c:
            async with c.publisher(stream, name="dedup") as p:
                ids.append(p.message_id)
                for i in range(3):
                    await p.send(f"p{i}".encode())
            async with c.publisher(stream, name="dedup") as p:
                ids.append(p.message_id)  # where the broker says it left off
                p.message_id = 2  # resend ids 2 and 3: dropped; 4 is new
                for body in (b"dup2", b"dup3", b"p3"):
                    await p.send(body)
        return ids

    assert run(scenario) == [1, 4]
    got = run(lambda: consume(sbroker, stream, Offset.FIRST, 4))
    assert got == [(0, b"p0"), (1, b"p1"), (2, b"p2"), (3, b"p3")]


def test_missing_stream(sbroker: BrokerUnderTest) -> None:
    """rbfly's error for a missing stream: deleting one fails with code 0x02 (stream does
    not exist). (Its publishers and subscribers on a missing stream retry, on both.)"""
    from rbfly.streams.error import ProtocolError

    name = f"rb-missing-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, str]:
        async with connected(sbroker) as c:
            try:
                await c.delete_stream(name)
            except ProtocolError as exc:
                return exc.code, str(exc)
        return 0, "no error"

    assert run(scenario) == (
        2,
        "RabbitMQ Streams protocol error: code=0x02, message=Stream does not exist",
    )
