"""RabbitMQ's stream protocol in raw frames, the same on Leveret and RabbitMQ 3.10.8:
handshake failures, credit (a subscriber is sent only what its credit allows, whatever
the stream holds), error codes and frames, and what a deleted stream's users are told."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator

import pytest

from leveret.protocol.stream import events as ev
from tests.support.brokers import BrokerUnderTest
from tests.support.streamclient import RawStreamClient

DELIVER = 0x0008
PUBLISH_CONFIRM = 0x0003


@pytest.fixture
def client(sbroker: BrokerUnderTest) -> Iterator[RawStreamClient]:
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
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
            confirmed += len(c.reply(ev.PublishConfirm).publishing_ids)
    assert c.request(ev.DeletePublisher(c.next_id(), 9), 0x06)[0] == 1


def test_bad_password_and_unknown_vhost(sbroker: BrokerUnderTest) -> None:
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
    try:
        assert c.handshake(password="wrong") == 8  # authentication failure
    finally:
        c.close()
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
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
    code, rest = client.request(ev.QueryPublisherSequence(client.next_id(), "w", "missing-s"), 0x05)
    assert (code, rest) == (2, bytes(8))
    client.send(ev.Metadata(client.next_id(), ("missing-s",)))
    got = client.frame(timeout=5)
    assert got is not None and got[0] == 0x800F
    # no broker listed; the stream: code 2, leader 0xFFFF, no replicas
    assert (
        got[1][4:]
        == b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\tmissing-s\x00\x02\xff\xff\x00\x00\x00\x00"
    )


def test_unknown_command_closes_the_connection(client: RawStreamClient) -> None:
    client.send_raw(0x007F, b"")
    got = client.frame(timeout=5)
    assert got is not None and got[0] == 0x0016  # close, from the server
    assert got[1] == b"\x00\x00\x00\x01\x00\x0d\x00\x0dunknown frame"


def test_deleting_a_stream_tells_its_users_once(sbroker: BrokerUnderTest) -> None:
    """Subscribers and publishers on other connections hear of a deleted stream once, by a
    metadata update (stream not available), however many they had on it."""
    clients = [RawStreamClient("127.0.0.1", sbroker.stream_port) for _ in range(3)]
    try:
        for c in clients:
            assert c.handshake() == 1
        reader, writer, admin = clients
        stream = new_stream(admin)
        for sub_id in (1, 2):
            sub = ev.Subscribe(reader.next_id(), sub_id, stream, 3, 0, 5, {})
            assert reader.request(sub, 0x07)[0] == 1
        declare = ev.DeclarePublisher(writer.next_id(), 4, "", stream)
        assert writer.request(declare, 0x01)[0] == 1
        assert admin.request(ev.Delete(admin.next_id(), stream), 0x0E)[0] == 1
        update = (0x0010, b"\x00\x06" + len(stream).to_bytes(2, "big") + stream.encode())
        for c in (reader, writer):
            assert c.frame(timeout=5) == update
            assert c.frame(timeout=0.5) is None
        # the subscriptions are gone with it
        assert reader.request(ev.Unsubscribe(reader.next_id(), 1), 0x0C)[0] == 4
    finally:
        for c in clients:
            c.close()


def _streams(client: RawStreamClient, request: ev.Route | ev.Partitions) -> tuple[int, list[str]]:
    """The code and the streams of the answer to a Route or Partitions, decoded."""
    client.send(request)
    kind = ev.RouteResponse if isinstance(request, ev.Route) else ev.PartitionsResponse
    got = client.reply(kind)
    assert got.correlation_id == request.correlation_id
    return got.code, list(got.streams)


def test_super_stream_partitions_and_routes(
    sbroker: BrokerUnderTest, client: RawStreamClient
) -> None:
    """A super stream declared over AMQP 0-9-1 (a direct exchange bound to its streams,
    each binding with its x-stream-partition-order): the stream protocol's Partitions
    lists the streams in that order, Route follows the exchange's bindings."""
    import pika

    base = f"ss-{uuid.uuid4().hex[:8]}"
    parts = [f"{base}-{i}" for i in range(3)]
    conn = pika.BlockingConnection(pika.ConnectionParameters(sbroker.host, sbroker.port))
    try:
        ch = conn.channel()
        ch.exchange_declare(base, "direct", durable=True, arguments={"x-super-stream": True})
        for order, name in reversed(list(enumerate(parts))):  # bound last to first
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
            ch.queue_bind(name, base, str(order), arguments={"x-stream-partition-order": order})
        assert _streams(client, ev.Partitions(client.next_id(), base)) == (1, parts)
        assert _streams(client, ev.Route(client.next_id(), "1", base)) == (1, [parts[1]])
        assert _streams(client, ev.Route(client.next_id(), "none", base)) == (1, [])
        missing = base + "-missing"
        assert _streams(client, ev.Partitions(client.next_id(), missing)) == (2, [])
        assert _streams(client, ev.Route(client.next_id(), "1", missing)) == (2, [])
    finally:
        ch = conn.channel()
        for name in parts:
            ch.queue_delete(name)
        ch.exchange_delete(base)
        conn.close()


def test_create_over_an_existing_queue(sbroker: BrokerUnderTest, client: RawStreamClient) -> None:
    """Create over an equivalent stream: stream already exists; over a classic queue, or
    a stream with other arguments: precondition failed."""
    import pika

    stream = new_stream(client)
    classic = f"q-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.ConnectionParameters(sbroker.host, sbroker.port))
    try:
        conn.channel().queue_declare(classic, durable=True)
        codes = [
            client.request(ev.Create(client.next_id(), stream, {}), 0x0D)[0],
            client.request(ev.Create(client.next_id(), classic, {}), 0x0D)[0],
            client.request(ev.Create(client.next_id(), stream, {"max-length-bytes": "1000"}), 0x0D)[
                0
            ],
        ]
        assert codes == [5, 17, 17]
    finally:
        ch = conn.channel()
        ch.queue_delete(classic)
        ch.queue_delete(stream)
        conn.close()


def test_handshake(sbroker: BrokerUnderTest) -> None:
    """The mechanisms offered, the tune proposed, and what open answers: the host and
    port a client should connect to for this broker's streams."""
    import socket

    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
    try:
        assert c.handshake() == 1
        assert c.mechanisms == ["AMQPLAIN", "PLAIN"]
        assert c.tune == (1_048_576, 60)
        assert c.open_properties == {
            "advertised_host": socket.gethostname(),
            "advertised_port": str(sbroker.stream_port),
        }
    finally:
        c.close()


@pytest.fixture
def site(sbroker: BrokerUnderTest) -> Iterator[object]:
    from tests.support.brokers import ensure_rabbitmq_management
    from tests.support.mgmt import make_site

    if sbroker.name == "rabbitmq" and not ensure_rabbitmq_management():
        pytest.skip("RabbitMQ's management plugin is not available")
    yield from make_site(sbroker, "t")


def test_permissions(sbroker: BrokerUnderTest, site: object) -> None:
    """The AMQP users and permissions: a user who may configure ``^t-``, write anything
    and read nothing in its vhost, and nothing in ``/``."""
    from tests.support.mgmt import Site

    assert isinstance(site, Site)
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
    try:
        assert c.handshake(site.user, site.password, "/") == 12
    finally:
        c.close()
    c = RawStreamClient("127.0.0.1", sbroker.stream_port)
    try:
        assert c.handshake(site.user, site.password, site.vhost) == 1
        mine, other = f"t-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
        codes = [
            c.request(ev.Create(c.next_id(), mine, {}), 0x0D)[0],
            c.request(ev.Create(c.next_id(), other, {}), 0x0D)[0],
            c.request(ev.DeclarePublisher(c.next_id(), 1, "w", mine), 0x01)[0],
            c.request(ev.Subscribe(c.next_id(), 1, mine, 1, 0, 1, {}), 0x07)[0],
            c.request(ev.QueryOffset(c.next_id(), "r", mine), 0x0B)[0],
            c.request(ev.QueryPublisherSequence(c.next_id(), "w", mine), 0x05)[0],
            c.request(ev.Delete(c.next_id(), other), 0x0E)[0],
            c.request(ev.Delete(c.next_id(), mine), 0x0E)[0],
        ]
        assert codes == [1, 16, 1, 16, 16, 16, 16, 1]
    finally:
        c.close()


def test_sub_batches_are_stored_and_delivered_as_sent(client: RawStreamClient) -> None:
    """A sub-entry batch is kept as the publisher sent it, whatever its compression (here
    zstd, type 4, which the broker never opens): confirmed, then delivered in a chunk as a
    sub-batch entry with the same bytes, its records counted in the chunk header."""
    stream = new_stream(client)
    assert client.request(ev.DeclarePublisher(client.next_id(), 3, "", stream), 0x01)[0] == 1
    payload = b"\x28\xb5\x2f\xfd opaque zstd bytes"
    client.send(ev.Publish(3, [], [ev.SubBatch(1, 4, 5, 100, payload)]))
    got = client.frame(timeout=10)
    assert got is not None and got[0] == PUBLISH_CONFIRM
    assert got[1] == b"\x03\x00\x00\x00\x01" + (1).to_bytes(8, "big")
    assert client.request(ev.Subscribe(client.next_id(), 1, stream, 1, 0, 5, {}), 0x07)[0] == 1
    got = client.frame(timeout=10)
    assert got is not None and got[0] == DELIVER
    chunk = got[1][1:]  # after the subscription id
    entries, records = struct.unpack_from(">HI", chunk, 2)
    assert (entries, records) == (1, 5)
    entry = chunk[48:]
    assert entry == struct.pack(">BHII", 0x80 | 4 << 4, 5, 100, len(payload)) + payload
