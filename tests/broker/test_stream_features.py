"""What RabbitMQ 3.11-3.13 added to the stream protocol, as Leveret serves it in its
RabbitMQ 4.2 mode, over a real socket with the raw stream client: the command versions it
advertises, StreamStats, super streams over the protocol, filtering (Publish version 2,
chunks' Bloom filters, subscriptions' filter.N) and single active consumers
(ConsumerUpdate). The frames are RabbitMQ 4.2.9's (rabbit_stream_reader, rabbit_stream_core,
rabbit_stream_sac_coordinator at v4.2.9)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import leveret
from leveret.broker import stream_features
from leveret.broker.stream_features import COMMAND_VERSIONS
from leveret.protocol.stream import chunk
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.bloom import build
from leveret.protocol.stream.encode import decode_reply
from leveret.protocol.stream.spec import Code, Key, OffsetType
from tests.support.rabbitmq42 import broker_42
from tests.support.streamclient import RawStreamClient


@pytest.fixture(scope="module")
def b42(tmp_path_factory: pytest.TempPathFactory) -> Iterator[leveret.Broker]:
    b = broker_42(tmp_path_factory.mktemp("streams42"))
    yield b
    b.stop()


@pytest.fixture
def client(b42: leveret.Broker) -> Iterator[RawStreamClient]:
    c = connect(b42)
    yield c
    c.close()


def connect(b: leveret.Broker) -> RawStreamClient:
    c = RawStreamClient("127.0.0.1", b.stream_port)
    assert c.handshake() == Code.OK
    return c


def new_stream(c: RawStreamClient, arguments: dict[str, str] | None = None) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    assert c.request(ev.Create(c.next_id(), name, arguments or {}), Key.CREATE)[0] == Code.OK
    return name


def publish(c: RawStreamClient, stream: str, messages: list[tuple[bytes, bytes | None]]) -> None:
    """One Publish of version 2 (one chunk once confirmed)."""
    pid = 7
    assert c.request(ev.DeclarePublisher(c.next_id(), pid, "", stream), 1)[0] == Code.OK
    ids = list(range(len(messages)))
    c.send(ev.Publish(pid, [(i, m) for i, (m, _) in enumerate(messages)], [],
                      [f for _, f in messages]))  # fmt: skip
    confirmed: list[int] = []
    while len(confirmed) < len(ids):
        confirmed += c.reply(ev.PublishConfirm).publishing_ids
    assert c.request(ev.DeletePublisher(c.next_id(), pid), Key.DELETE_PUBLISHER)[0] == Code.OK


def delivered(c: RawStreamClient, timeout: float = 1.0) -> list[ev.Deliver | ev.DeliverV2]:
    """The Deliver frames that come within ``timeout``."""
    out: list[ev.Deliver | ev.DeliverV2] = []
    while (body := c.whole_frame(timeout)) is not None:
        got = decode_reply(body)
        if isinstance(got, (ev.Deliver, ev.DeliverV2)):
            out.append(got)
    return out


def bodies(frames: list[ev.Deliver | ev.DeliverV2]) -> list[bytes]:
    return [r for f in frames for r in chunk.records(f.chunk)]


# ------------------------------------------------------------------ versions, stats
def test_command_versions_as_rabbitmq_3_13_advertises_them(client: RawStreamClient) -> None:
    client.send(ev.ExchangeCommandVersions(client.next_id(), [(Key.PUBLISH, 1, 2)]))
    got = client.reply(ev.ExchangeCommandVersionsResponse)
    assert got.code == Code.OK
    assert got.versions == COMMAND_VERSIONS
    # rstream reads the entry at index 1 as Publish's: version 2 is there
    assert got.versions[1] == (Key.PUBLISH, 1, 2)


def test_a_client_that_asks_for_deliver_v2_gets_the_committed_chunk_id(
    client: RawStreamClient,
) -> None:
    stream = new_stream(client)
    publish(client, stream, [(b"a", None)])
    publish(client, stream, [(b"b", None)])
    client.send(ev.ExchangeCommandVersions(client.next_id(), [(Key.DELIVER, 1, 2)]))
    client.reply(ev.ExchangeCommandVersionsResponse)
    sub = ev.Subscribe(client.next_id(), 1, stream, OffsetType.FIRST, 0, 10, {})
    assert client.request(sub, Key.SUBSCRIBE)[0] == Code.OK
    frames = delivered(client)
    assert [type(f) for f in frames] == [ev.DeliverV2, ev.DeliverV2]
    assert all(isinstance(f, ev.DeliverV2) and f.committed_chunk_id == 1 for f in frames)
    assert bodies(frames) == [b"a", b"b"]


def test_stream_stats(client: RawStreamClient) -> None:
    stream = new_stream(client)
    client.send(ev.StreamStats(client.next_id(), stream))
    got = client.reply(ev.StreamStatsResponse)
    assert (got.code, got.stats) == (
        Code.OK,
        {"committed_chunk_id": -1, "first_chunk_id": -1, "last_chunk_id": -1},
    )
    publish(client, stream, [(b"a", None), (b"b", None)])
    publish(client, stream, [(b"c", None)])
    client.send(ev.StreamStats(client.next_id(), stream))
    got = client.reply(ev.StreamStatsResponse)
    assert list(got.stats.items()) == [
        ("committed_chunk_id", 2),
        ("first_chunk_id", 0),
        ("last_chunk_id", 2),
    ]
    client.send(ev.StreamStats(client.next_id(), "no-such-stream"))
    assert client.reply(ev.StreamStatsResponse) == ev.StreamStatsResponse(
        client.correlation, Code.STREAM_DOES_NOT_EXIST, {}
    )


# ------------------------------------------------------------------- super streams
def test_super_stream_created_routed_partitioned_and_deleted(
    b42: leveret.Broker, client: RawStreamClient
) -> None:
    name = f"ss-{uuid.uuid4().hex[:8]}"
    parts = (f"{name}-amer", f"{name}-emea", f"{name}-apac")
    create = ev.CreateSuperStream(client.next_id(), name, parts, ("amer", "emea", "apac"), {})
    assert client.request(create, Key.CREATE_SUPER_STREAM)[0] == Code.OK
    again = ev.CreateSuperStream(client.next_id(), name, parts, ("amer", "emea", "apac"), {})
    assert client.request(again, Key.CREATE_SUPER_STREAM)[0] == Code.STREAM_ALREADY_EXISTS

    x = b42._call(lambda core: core.vhosts["/"].exchanges[name])
    assert (x.type_name, x.durable, x.arguments) == ("direct", True, {"x-super-stream": True})
    orders = sorted((b.destination.name, b.routing_key, b.arguments) for b in x.bindings.values())
    assert orders == sorted(
        (p, k, {"x-stream-partition-order": i})
        for i, (p, k) in enumerate(zip(parts, ("amer", "emea", "apac"), strict=True))
    )

    client.send(ev.Partitions(client.next_id(), name))
    assert client.reply(ev.PartitionsResponse).streams == parts
    client.send(ev.Route(client.next_id(), "emea", name))
    assert client.reply(ev.RouteResponse) == ev.RouteResponse(
        client.correlation, Code.OK, (parts[1],)
    )
    # 4.2 answers with the response bit
    client.send(ev.Route(client.next_id(), "nowhere", name))
    raw = client.whole_frame(5)
    assert raw is not None and raw[:2] == b"\x80\x18"
    assert decode_reply(raw) == ev.RouteResponse(client.correlation, Code.OK, ())

    delete = ev.DeleteSuperStream(client.next_id(), name)
    assert client.request(delete, Key.DELETE_SUPER_STREAM)[0] == Code.OK
    assert b42._call(lambda core: [n for n in core.vhosts["/"].queues if n.startswith(name)]) == []
    client.send(ev.Partitions(client.next_id(), name))
    assert client.reply(ev.PartitionsResponse).code == Code.STREAM_DOES_NOT_EXIST
    delete = ev.DeleteSuperStream(client.next_id(), name)
    assert client.request(delete, Key.DELETE_SUPER_STREAM)[0] == Code.STREAM_DOES_NOT_EXIST


@pytest.mark.parametrize(
    ("partitions", "keys", "code"),
    [
        (("p-0", "p-1"), ("0",), Code.PRECONDITION_FAILED),  # not as many keys
        (("p-0", "p-0"), ("0", "1"), Code.PRECONDITION_FAILED),  # twice the same
        (("amq.p",), ("0",), Code.PRECONDITION_FAILED),  # a reserved name
    ],
)
def test_super_stream_refusals(
    client: RawStreamClient, partitions: tuple[str, ...], keys: tuple[str, ...], code: int
) -> None:
    name = f"ss-{uuid.uuid4().hex[:8]}"
    parts = tuple(p.replace("p-", f"{name}-") for p in partitions)
    create = ev.CreateSuperStream(client.next_id(), name, parts, keys, {})
    assert client.request(create, Key.CREATE_SUPER_STREAM)[0] == code


def test_a_partition_that_exists_already_refuses_the_super_stream(
    b42: leveret.Broker, client: RawStreamClient
) -> None:
    taken = new_stream(client)
    name = f"ss-{uuid.uuid4().hex[:8]}"
    create = ev.CreateSuperStream(client.next_id(), name, (f"{name}-0", taken), ("0", "1"), {})
    assert client.request(create, Key.CREATE_SUPER_STREAM)[0] == Code.STREAM_ALREADY_EXISTS
    assert b42._call(lambda core: name in core.vhosts["/"].exchanges) is False


def test_a_bad_partition_argument_is_an_internal_error_and_nothing_is_left(
    b42: leveret.Broker, client: RawStreamClient
) -> None:
    """The manager's create answers a stream it refuses with an error the reader answers
    as internal (rabbit_stream_reader's create_super_stream clause), and rolls back."""
    name = f"ss-{uuid.uuid4().hex[:8]}"
    parts = (f"{name}-0", f"{name}-1")
    args = {"max-length-bytes": "lots"}
    create = ev.CreateSuperStream(client.next_id(), name, parts, ("0", "1"), args)
    assert client.request(create, Key.CREATE_SUPER_STREAM)[0] == Code.INTERNAL_ERROR
    left = b42._call(
        lambda core: [n for n in (*core.vhosts["/"].queues, *core.vhosts["/"].exchanges)
                      if n.startswith(name)]
    )  # fmt: skip
    assert left == []


# ----------------------------------------------------------------------- filtering
def _segment_bytes(b: leveret.Broker, stream: str) -> bytes:
    q = b._call(lambda core: core.vhosts["/"].queues[stream])
    return q.log.segments[0].path.read_bytes()  # type: ignore[no-any-return]


def test_a_chunk_stores_its_bloom_filter_as_osiris_does(
    b42: leveret.Broker, client: RawStreamClient
) -> None:
    stream = new_stream(client)
    publish(client, stream, [(b"m1", b"apple"), (b"m2", None), (b"m3", b"banana")])
    raw = _segment_bytes(b42, stream)[8:]
    head = chunk.parse_header(raw)
    bits = build([b"apple", None, b"banana"], 16)  # osiris's default size
    assert head.filter_size == 16 == len(bits)
    assert raw[chunk.HEADER_SIZE : chunk.HEADER_SIZE + 16] == bits
    assert chunk.records(raw, stored=True) == [b"m1", b"m2", b"m3"]
    # delivered: the header as stored, then the data (the filter is not sent)
    sub = ev.Subscribe(client.next_id(), 1, stream, OffsetType.FIRST, 0, 10, {})
    assert client.request(sub, Key.SUBSCRIBE)[0] == Code.OK
    (frame,) = delivered(client)
    assert frame.chunk[: chunk.HEADER_SIZE] == raw[: chunk.HEADER_SIZE]
    assert frame.chunk[chunk.HEADER_SIZE :] == raw[chunk.HEADER_SIZE + 16 :][: head.data_length]


def test_chunks_without_filter_values_have_no_filter(
    b42: leveret.Broker, client: RawStreamClient
) -> None:
    stream = new_stream(client)
    publish(client, stream, [(b"m1", None)])
    assert chunk.parse_header(_segment_bytes(b42, stream)[8:]).filter_size == 0


@pytest.mark.parametrize(
    ("properties", "wanted"),
    [
        ({"filter.0": "apple"}, [b"a1", b"a2", b"x1", b"x2"]),
        ({"filter.0": "banana"}, [b"b1", b"x1", b"x2"]),
        ({"filter.0": "cherry"}, []),
        ({"filter.0": "cherry", "match-unfiltered": "true"}, [b"u1"]),
        ({"filter.0": "apple", "match-unfiltered": "true"}, [b"a1", b"a2", b"u1", b"x1", b"x2"]),
        ({"filter.0": "apple", "filter.1": "banana"}, [b"a1", b"a2", b"b1", b"x1", b"x2"]),
        ({}, [b"a1", b"a2", b"b1", b"u1", b"x1", b"x2"]),
    ],
)
def test_a_subscription_with_a_filter_skips_the_chunks_that_cannot_match(
    client: RawStreamClient, properties: dict[str, str], wanted: list[bytes]
) -> None:
    """Whole chunks are skipped by their filter, without spending credit; the client
    filters the messages of the chunks it gets itself (here chunk 4 has both fruits)."""
    stream = new_stream(client)
    publish(client, stream, [(b"a1", b"apple"), (b"a2", b"apple")])
    publish(client, stream, [(b"b1", b"banana")])
    publish(client, stream, [(b"u1", None)])
    publish(client, stream, [(b"x1", b"apple"), (b"x2", b"banana")])
    sub = ev.Subscribe(client.next_id(), 1, stream, OffsetType.FIRST, 0, 1, properties)
    assert client.request(sub, Key.SUBSCRIBE)[0] == Code.OK
    got: list[bytes] = []
    for _ in range(5):
        frames = delivered(client, 0.5)
        got += bodies(frames)
        if not frames:
            break
        client.send(ev.Credit(1, 1))
    assert got == wanted


# ----------------------------------------------------------- single active consumer
def _sac(c: RawStreamClient, sub_id: int, stream: str, name: str, **more: str) -> int:
    props = {"single-active-consumer": "true", "name": name, **more}
    sub = ev.Subscribe(c.next_id(), sub_id, stream, OffsetType.FIRST, 0, 10, props)
    return c.request(sub, Key.SUBSCRIBE)[0]


def _answer(c: RawStreamClient, offset_type: int = OffsetType.NONE, offset: int = 0) -> int:
    """Answer the next ConsumerUpdate; its active flag."""
    update = c.reply(ev.ConsumerUpdate, timeout=5)
    c.send(ev.ConsumerUpdateResponse(update.correlation_id, Code.OK, offset_type, offset))
    return update.active


def test_one_active_consumer_per_name_and_the_next_takes_over(b42: leveret.Broker) -> None:
    a, b = connect(b42), connect(b42)
    try:
        stream = new_stream(a)
        publish(a, stream, [(b"m0", None)])
        publish(a, stream, [(b"m1", None)])
        assert _sac(a, 1, stream, "app") == Code.OK
        assert _answer(a) == 1
        assert bodies(delivered(a)) == [b"m0", b"m1"]
        assert _sac(b, 3, stream, "app") == Code.OK
        assert b.whole_frame(0.5) is None  # waiting: told nothing, sent nothing
        # credit to an inactive consumer: taken, and refused
        b.send(ev.Credit(3, 5))
        assert b.reply(ev.CreditResponse) == ev.CreditResponse(Code.PRECONDITION_FAILED, 3)
        # the active one goes: the waiting one is asked where to read from
        assert a.request(ev.Unsubscribe(a.next_id(), 1), Key.UNSUBSCRIBE)[0] == Code.OK
        assert _answer(b, OffsetType.OFFSET, 1) == 1
        assert bodies(delivered(b)) == [b"m1"]
    finally:
        a.close()
        b.close()


def test_a_closed_connection_hands_over_its_active_consumer(b42: leveret.Broker) -> None:
    a, b = connect(b42), connect(b42)
    try:
        stream = new_stream(a)
        publish(a, stream, [(b"m0", None)])
        assert _sac(a, 1, stream, "app") == Code.OK
        assert _answer(a) == 1
        assert _sac(b, 1, stream, "app") == Code.OK
        a.close()
        assert _answer(b) == 1  # NONE: from its own offset specification, first
        assert bodies(delivered(b)) == [b"m0"]
    finally:
        b.close()


def test_a_consumer_update_left_unanswered_ends_its_connection(
    b42: leveret.Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rabbit_stream_reader v4.2.9 (check_outstanding_requests): a ConsumerUpdate without
    an answer past request_timeout (60 s; shortened here) ends the connection without a
    Close frame, and the group's next consumer takes over."""
    monkeypatch.setattr(stream_features, "REQUEST_TIMEOUT", 0.3)
    a, b = connect(b42), connect(b42)
    try:
        stream = new_stream(a)
        publish(a, stream, [(b"m0", None)])
        assert _sac(a, 1, stream, "app") == Code.OK
        a.reply(ev.ConsumerUpdate, timeout=5)  # never answered
        assert _sac(b, 1, stream, "app") == Code.OK
        assert b.whole_frame(0.1) is None  # waiting
        with pytest.raises(EOFError):  # closed, no Close frame first
            while True:
                got = a.frame(5)
                assert got is not None, "not closed"
                assert got[0] != Key.CLOSE
        assert _answer(b) == 1
        assert bodies(delivered(b)) == [b"m0"]
    finally:
        a.close()
        b.close()


def test_single_active_consumer_needs_a_name(client: RawStreamClient) -> None:
    stream = new_stream(client)
    props = {"single-active-consumer": "true"}
    sub = ev.Subscribe(client.next_id(), 1, stream, OffsetType.FIRST, 0, 10, props)
    assert client.request(sub, Key.SUBSCRIBE)[0] == Code.PRECONDITION_FAILED
    long_name = {"name": "n" * 256}
    sub = ev.Subscribe(client.next_id(), 1, stream, OffsetType.FIRST, 0, 10, long_name)
    assert client.request(sub, Key.SUBSCRIBE)[0] == Code.PRECONDITION_FAILED


def test_a_super_streams_partition_rebalances_over_its_consumers(b42: leveret.Broker) -> None:
    """Partition 1's group: with two consumers the second (1 % 2) is the choice; the first
    is told to step down, and once it answers, the second is activated."""
    a, b = connect(b42), connect(b42)
    try:
        name = f"ss-{uuid.uuid4().hex[:8]}"
        parts = (f"{name}-0", f"{name}-1")
        create = ev.CreateSuperStream(a.next_id(), name, parts, ("0", "1"), {})
        assert a.request(create, Key.CREATE_SUPER_STREAM)[0] == Code.OK
        assert _sac(a, 1, parts[1], "app", **{"super-stream": name}) == Code.OK
        assert _answer(a) == 1
        assert _sac(b, 1, parts[1], "app", **{"super-stream": name}) == Code.OK
        assert _answer(a) == 0  # steps down
        assert _answer(b) == 1
        # a group's consumers have one partition index: a plain one is refused
        assert _sac(b, 2, parts[1], "app") == Code.PRECONDITION_FAILED
    finally:
        a.close()
        b.close()
