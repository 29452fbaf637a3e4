"""Where tracking lives in a stream's log, seen by the unmodified rstream client on Leveret
and on RabbitMQ 3.10.8: a stored offset written on its own is a tracking chunk that takes
an offset (messages published after it skip it), one written with messages rides in their
chunk's trailer and takes none; a named publisher's sequence rides in the trailer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.differential.test_stream_protocol import (
    CREDENTIALS,
    _create,
    _delete,
    _send,
    producer,
    read,
    run,
    spec,
)
from tests.support.brokers import BrokerUnderTest

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, Consumer, OffsetType, amqp_decoder  # noqa: E402


@pytest.fixture
def stream(sbroker: BrokerUnderTest) -> Iterator[str]:
    name = f"trk-{uuid.uuid4().hex[:10]}"
    run(lambda: _create(sbroker, name))
    yield name
    run(lambda: _delete(sbroker, name))


async def _stored(c: Any, stream: str, reference: str, want: int) -> int:
    """The offset stored for ``reference`` once it reads ``want`` (store offset has no
    answer: it is polled), or what it reads after 5 seconds."""
    got = -1
    for _ in range(100):
        try:
            got = await c.query_offset(stream, reference)
        except rstream.exceptions.OffsetNotFound:
            got = -1
        if got == want:
            break
        await asyncio.sleep(0.05)
    return got


def test_a_stored_offset_takes_an_offset_of_the_log(sbroker: BrokerUnderTest, stream: str) -> None:
    """Publish, store an offset (alone: a tracking chunk), publish more, read from
    ``first``: the messages' offsets skip the one the tracking chunk took."""

    async def scenario() -> tuple[list[bool], list[bool], int]:
        c = Consumer("127.0.0.1", sbroker.stream_port, **CREDENTIALS)
        await c.start()
        try:
            async with producer(sbroker) as p:
                first = await _send(p, stream, [b"a0", b"a1"])
                await c.store_offset(stream, "reader", 1)
                stored = await _stored(c, stream, "reader", 1)
                second = await _send(p, stream, [b"b0", b"b1"])
        finally:
            await c.close()
        return first, second, stored

    first, second, stored = run(scenario)
    assert (first, second, stored) == ([True] * 2, [True] * 2, 1)
    got = run(lambda: read(sbroker, stream, spec(OffsetType.FIRST), 4))
    assert got == [(0, b"a0"), (1, b"a1"), (3, b"b0"), (4, b"b1")]


def test_a_named_publisher_sequence_takes_no_offset(sbroker: BrokerUnderTest, stream: str) -> None:
    """A named publisher's last publishing id goes in the trailer of the chunk of its
    messages: confirmed batch after confirmed batch, the offsets stay contiguous; two
    offsets stored one after the other take an offset each."""

    def batch(ids: range) -> list[AMQPMessage | bytes]:
        out: list[AMQPMessage | bytes] = []
        for i in ids:
            m = AMQPMessage(body=f"p{i}".encode())
            m.publishing_id = i
            out.append(m)
        return out

    async def scenario() -> tuple[int, int, int]:
        c = Consumer("127.0.0.1", sbroker.stream_port, **CREDENTIALS)
        await c.start()
        try:
            async with producer(sbroker) as p:
                await _send(p, stream, batch(range(1, 4)), publisher_name="named")
                await _send(p, stream, batch(range(4, 6)), publisher_name="named")
                await c.store_offset(stream, "r1", 2)
                r1 = await _stored(c, stream, "r1", 2)
                await c.store_offset(stream, "r2", 4)
                r2 = await _stored(c, stream, "r2", 4)
                await _send(p, stream, batch(range(6, 7)), publisher_name="named")
                locator = await p.default_client
                seq = await locator.query_publisher_sequence(stream, "named")
        finally:
            await c.close()
        return r1, r2, seq

    assert run(scenario) == (2, 4, 6)
    got = [
        (o, bytes(m.body))
        for o, m in run(
            lambda: read(sbroker, stream, spec(OffsetType.FIRST), 6, decoder=amqp_decoder)
        )
    ]
    # the two stored offsets, each written on its own, took offsets 5 and 6
    assert got == [(0, b"p1"), (1, b"p2"), (2, b"p3"), (3, b"p4"), (4, b"p5"), (7, b"p6")]
