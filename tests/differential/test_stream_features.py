"""What RabbitMQ 3.11-3.13 added to the stream protocol, asked of the default mode: Leveret
answers as RabbitMQ 3.10.8 does, which has none of it. A command it does not know
(ExchangeCommandVersions, StreamStats, CreateSuperStream, DeleteSuperStream) and a Publish
of version 2 close the connection with "unknown frame"; a ConsumerUpdate response ends it
without a word (3.10.8's reader cannot parse it); the single-active-consumer and filter
properties of a subscription are ignored (it is sent everything, and never a
ConsumerUpdate). The same scenario runs on both brokers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from leveret.protocol.stream import chunk
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.encode import decode_reply
from leveret.protocol.stream.spec import Code, Key, OffsetType
from tests.support.brokers import BrokerUnderTest
from tests.support.streamclient import RawStreamClient


@pytest.fixture
def client(sbroker: BrokerUnderTest) -> Iterator[RawStreamClient]:
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
    assert c.handshake() == Code.OK
    yield c
    c.close()


def new_stream(c: RawStreamClient) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    assert c.request(ev.Create(c.next_id(), name, {}), Key.CREATE)[0] == Code.OK
    return name


def delete(c: RawStreamClient, name: str) -> None:
    assert c.request(ev.Delete(c.next_id(), name), Key.DELETE)[0] == Code.OK


def what_follows(c: RawStreamClient) -> list[object]:
    """The frames that follow, decoded, until the broker ends the connection ("EOF") or
    is quiet for two seconds ("quiet")."""
    out: list[object] = []
    try:
        while (body := c.whole_frame(2)) is not None:
            out.append(decode_reply(body))
    except (EOFError, ConnectionResetError):
        out.append("EOF")
        return out
    out.append("quiet")
    return out


NEWER = [
    ev.ExchangeCommandVersions(5, [(Key.PUBLISH, 1, 2)]),
    ev.StreamStats(5, "some-stream"),
    ev.CreateSuperStream(5, "ss", ("ss-0",), ("0",), {}),
    ev.DeleteSuperStream(5, "ss"),
    ev.Publish(1, [(1, b"m")], [], [b"apple"]),
]


@pytest.mark.parametrize("command", NEWER, ids=lambda e: type(e).__name__)
def test_a_newer_command_closes_the_connection_as_unknown(
    client: RawStreamClient, command: ev.Event
) -> None:
    client.send(command)
    assert what_follows(client)[0] == ev.Close(1, Code.UNKNOWN_FRAME, "unknown frame")


def test_a_consumer_update_response_ends_the_connection_without_a_word(
    client: RawStreamClient,
) -> None:
    client.send(ev.ConsumerUpdateResponse(1, Code.OK, OffsetType.NEXT))
    assert what_follows(client) == ["EOF"]


def test_single_active_consumer_and_filter_properties_are_ignored(
    sbroker: BrokerUnderTest,
) -> None:
    """Two subscriptions with the same name both read everything at once; a filter skips
    nothing."""
    a = RawStreamClient("127.0.0.1", sbroker.stream_port)
    b = RawStreamClient("127.0.0.1", sbroker.stream_port)
    try:
        assert a.handshake() == b.handshake() == Code.OK
        stream = new_stream(a)
        assert a.request(ev.DeclarePublisher(a.next_id(), 1, "", stream), 1)[0] == Code.OK
        a.send(ev.Publish(1, [(1, b"m1")], []))
        a.reply(ev.PublishConfirm)
        props = {"single-active-consumer": "true", "name": "app", "filter.0": "apple"}
        for c in (a, b):
            sub = ev.Subscribe(c.next_id(), 3, stream, OffsetType.FIRST, 0, 5, props)
            assert c.request(sub, Key.SUBSCRIBE)[0] == Code.OK
            got = what_follows(c)
            assert got[-1] == "quiet"
            assert [type(f) for f in got[:-1]] == [ev.Deliver]
            deliver = got[0]
            assert isinstance(deliver, ev.Deliver)
            assert chunk.records(deliver.chunk) == [b"m1"]
        delete(a, stream)
    finally:
        a.close()
        b.close()


def test_route_and_partitions_are_answered_without_the_response_bit(
    client: RawStreamClient,
) -> None:
    client.send(ev.Partitions(client.next_id(), f"no-{uuid.uuid4().hex[:6]}"))
    raw = client.whole_frame(5)
    assert raw is not None and raw[:2] == b"\x00\x19"
    assert decode_reply(raw) == ev.PartitionsResponse(
        client.correlation, Code.STREAM_DOES_NOT_EXIST, ()
    )
