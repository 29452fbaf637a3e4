"""The stream protocol listener, seen through raw frames: handshake failures, credit (a
subscriber is sent only what its credit allows, whatever the stream holds), errors, and
the tracking that survives a restart."""

from __future__ import annotations

import struct
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from leveret.protocol.stream import events as ev
from tests.brokers import BrokerUnderTest, start_leveret
from tests.streamclient import RawStreamClient

DELIVER = 0x0008
PUBLISH_CONFIRM = 0x0003


@pytest.fixture
def client(leveret: BrokerUnderTest) -> Iterator[RawStreamClient]:
    c = RawStreamClient("127.0.0.1", leveret.stream_port)
    assert c.handshake() == 1
    yield c
    c.close()


def new_stream(c: RawStreamClient) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    assert c.request(ev.Create(c.next_id(), name, {}), 0x0D)[0] == 1
    return name


def publish(c: RawStreamClient, stream: str, batches: int, per_batch: int = 1) -> None:
    """``batches`` publish frames, each confirmed before the next (one chunk each)."""
    assert c.request(ev.DeclarePublisher(c.next_id(), 9, "", stream), 0x01)[0] == 1
    pid = 0
    for _ in range(batches):
        msgs = [(pid + i, f"m{pid + i}".encode()) for i in range(per_batch)]
        pid += per_batch
        c.send(ev.Publish(9, msgs, []))
        confirmed = 0
        while confirmed < per_batch:
            got = c.frame(timeout=10)
            assert got is not None
            if got[0] == PUBLISH_CONFIRM:
                confirmed += struct.unpack_from(">I", got[1], 1)[0]
    assert c.request(ev.DeletePublisher(c.next_id(), 9), 0x06)[0] == 1


def test_bad_password_and_unknown_vhost(leveret: BrokerUnderTest) -> None:
    c = RawStreamClient("127.0.0.1", leveret.stream_port)
    try:
        assert c.handshake(password="wrong") == 8  # authentication failure
    finally:
        c.close()
    c = RawStreamClient("127.0.0.1", leveret.stream_port)
    try:
        assert c.handshake(vhost="no-such-vhost") == 12  # virtual host access failure
    finally:
        c.close()


def test_credit_paces_deliveries(client: RawStreamClient) -> None:
    """A subscriber with credit 2 gets two chunks however many the stream holds, and one
    more for each credit it gives back: nothing piles up for a subscriber that stalls."""
    stream = new_stream(client)
    publish(client, stream, batches=20, per_batch=3)
    sub = ev.Subscribe(client.next_id(), 1, stream, 1, 0, 2, {})
    assert client.request(sub, 0x07)[0] == 1
    chunks = []
    while (got := client.frame(timeout=0.5)) is not None:
        if got[0] == DELIVER:
            chunks.append(got[1])
    assert len(chunks) == 2
    client.send(ev.Credit(1, 1))
    got = client.frame(timeout=5)
    assert got is not None and got[0] == DELIVER
    assert client.frame(timeout=0.5) is None
    # crediting an unknown subscription: a credit response, no correlation id
    client.send(ev.Credit(7, 1))
    got = client.frame(timeout=5)
    assert got == (0x8009, b"\x00\x04\x07")


def test_publish_errors(client: RawStreamClient) -> None:
    client.send(ev.Publish(5, [(1, b"x"), (2, b"y")], []))
    got = client.frame(timeout=5)
    assert got is not None and got[0] == 0x0004  # publish error
    assert got[1] == (
        b"\x05\x00\x00\x00\x02"
        + (1).to_bytes(8, "big") + b"\x00\x12"
        + (2).to_bytes(8, "big") + b"\x00\x12"
    )  # fmt: skip
    code, _ = client.request(ev.DeclarePublisher(client.next_id(), 1, "", "missing-s"), 0x01)
    assert code == 2


def test_unknown_command_closes_the_connection(client: RawStreamClient) -> None:
    client.send_raw(0x007F, b"")
    got = client.frame(timeout=5)
    assert got is not None and got[0] == 0x0016  # close, from the server
    code = struct.unpack_from(">H", got[1], 4)[0]
    assert code == 13


def test_tracking_survives_a_restart() -> None:
    data = Path(tempfile.mkdtemp(prefix="leveret-stream-"))
    broker = start_leveret(data)
    try:
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        assert c.handshake() == 1
        stream = new_stream(c)
        assert c.request(ev.DeclarePublisher(c.next_id(), 1, "writer", stream), 0x01)[0] == 1
        c.send(ev.Publish(1, [(10, b"a"), (11, b"b")], []))
        got = c.frame(timeout=10)
        assert got is not None and got[0] == PUBLISH_CONFIRM
        c.send(ev.StoreOffset("reader", stream, 1))
        # answered after the store offset before it: the offset is taken by then
        c.request(ev.QueryOffset(c.next_id(), "reader", stream), 0x0B)
        c.close()
    finally:
        broker.stop()
    broker = start_leveret(data)
    try:
        c = RawStreamClient("127.0.0.1", broker.stream_port)
        assert c.handshake() == 1
        code, rest = c.request(ev.QueryOffset(c.next_id(), "reader", stream), 0x0B)
        assert (code, int.from_bytes(rest, "big")) == (1, 1)
        code, rest = c.request(ev.QueryPublisherSequence(c.next_id(), "writer", stream), 0x05)
        assert (code, int.from_bytes(rest, "big")) == (1, 11)
        code, rest = c.request(ev.QueryOffset(c.next_id(), "nobody", stream), 0x0B)
        assert code == 19  # no offset
        c.close()
    finally:
        broker.stop()
