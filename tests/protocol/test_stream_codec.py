"""The stream protocol's sans-IO codec: literal byte vectors (from the protocol's
specification and RabbitMQ 3.10.8's encoder), round trips, and the connection's phases."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given
from hypothesis import strategies as st

from leveret.protocol.stream import amqp10, chunk, encode
from leveret.protocol.stream import events as ev
from leveret.protocol.stream.connection import Phase, ServerConnection
from leveret.protocol.stream.frames import decode, encode_client
from leveret.protocol.stream.spec import Code, Key, OffsetType


def body(frame: bytes) -> bytes:
    (size,) = struct.unpack_from(">I", frame)
    assert size == len(frame) - 4
    return frame[4:]


# ------------------------------------------------------------------ literal vectors
def test_peer_properties_request() -> None:
    raw = (
        b"\x00\x11\x00\x01"  # key 0x0011, version 1
        b"\x00\x00\x00\x07"  # correlation id 7
        b"\x00\x00\x00\x01"  # one property
        b"\x00\x07product\x00\x07rstream"
    )
    assert decode(raw) == ev.PeerProperties(7, {"product": "rstream"})


def test_subscribe_request_with_an_offset() -> None:
    raw = (
        b"\x00\x07\x00\x01\x00\x00\x00\x02"  # subscribe, correlation id 2
        b"\x05"  # subscription id
        b"\x00\x01s"  # stream "s"
        b"\x00\x04" + (42).to_bytes(8, "big")  # offset type 4 (offset), offset 42
        + b"\x00\x0a"  # credit 10
        b"\x00\x00\x00\x00"  # no properties
    )  # fmt: skip
    assert decode(raw) == ev.Subscribe(2, 5, "s", OffsetType.OFFSET, 42, 10, {})


def test_publish_request() -> None:
    raw = (
        b"\x00\x02\x00\x01\x01\x00\x00\x00\x02"  # publish, publisher 1, two messages
        + (1).to_bytes(8, "big") + b"\x00\x00\x00\x01a"
        + (2).to_bytes(8, "big") + b"\x00\x00\x00\x02bc"
    )  # fmt: skip
    assert decode(raw) == ev.Publish(1, [(1, b"a"), (2, b"bc")], [])


def test_server_frames() -> None:
    assert encode.tune(1048576, 60) == (
        b"\x00\x00\x00\x0c\x00\x14\x00\x01\x00\x10\x00\x00\x00\x00\x00\x3c"
    )
    assert encode.response(Key.CREATE, 9, Code.STREAM_ALREADY_EXISTS) == (
        b"\x00\x00\x00\x0a\x80\x0d\x00\x01\x00\x00\x00\x09\x00\x05"
    )
    # the credit response carries no correlation id
    assert encode.credit_response(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, 3) == (
        b"\x00\x00\x00\x07\x80\x09\x00\x01\x00\x04\x03"
    )
    assert encode.publish_confirm(1, [5, 6]) == (
        b"\x00\x00\x00\x19\x00\x03\x00\x01\x01\x00\x00\x00\x02"
        + (5).to_bytes(8, "big")
        + (6).to_bytes(8, "big")
    )
    assert encode.metadata_update(Code.STREAM_NOT_AVAILABLE, "s") == (
        b"\x00\x00\x00\x09\x00\x10\x00\x01\x00\x06\x00\x01s"
    )
    # a stream that is not there: code 2, leader 0xFFFF, no replicas; no broker listed
    assert encode.metadata(4, [], [("s", 2, 0xFFFF, [])]) == (
        b"\x00\x00\x00\x1b\x80\x0f\x00\x01\x00\x00\x00\x04\x00\x00\x00\x00"
        b"\x00\x00\x00\x01\x00\x01s\x00\x02\xff\xff\x00\x00\x00\x00"
    )
    # an open refused: no properties array at all
    assert encode.open_response(1, Code.VIRTUAL_HOST_ACCESS_FAILURE, {}) == (
        b"\x00\x00\x00\x0a\x80\x15\x00\x01\x00\x00\x00\x01\x00\x0c"
    )
    assert encode.deliver_header(2, 100) == b"\x00\x00\x00\x69\x00\x08\x00\x01\x02"
    # RabbitMQ 3.10.8 answers Partitions (and Route) under the request's key
    assert encode.streams_response(Key.PARTITIONS, 5, Code.STREAM_DOES_NOT_EXIST, []) == (
        b"\x00\x00\x00\x0e\x00\x19\x00\x01\x00\x00\x00\x05\x00\x02\x00\x00\x00\x00"
    )


def test_chunk_header() -> None:
    data = chunk.simple_entries([b"ab", b"c"])
    assert data == b"\x00\x00\x00\x02ab\x00\x00\x00\x01c"
    raw = chunk.build(first_offset=10, timestamp=1234, data=data, entries=2)
    assert len(raw) == 48 + len(data)
    assert raw[:48] == (
        b"\x50\x00\x00\x02\x00\x00\x00\x02"  # magic 5 version 0, user chunk, 2 entries, 2 records
        + (1234).to_bytes(8, "big")  # timestamp
        + (1).to_bytes(8, "big")  # epoch
        + (10).to_bytes(8, "big")  # first offset
        + zlib.crc32(data).to_bytes(4, "big")
        + len(data).to_bytes(4, "big")
        + b"\x00" * 8  # trailer length, reserved
    )
    assert chunk.records(raw) == [b"ab", b"c"]
    assert chunk.parse_header(raw).first_offset == 10


def test_amqp10_message_sections() -> None:
    # an AMQP 0-9-1 message as RabbitMQ 3.10.8 gives it to the stream protocol
    raw = (
        b"\x00Sr\xc1*\x04\xa3\rx-routing-key\xa1\nmap-ff043a\xa3\nx-exchange\xa1\x00"
        b"\x00Su\xa0\x05plain"
    )
    secs = amqp10.sections(raw)
    assert [code for code, _ in secs] == [amqp10.MESSAGE_ANNOTATIONS, amqp10.DATA]
    assert secs[1][1] == ("binary", b"plain")
    annotations = secs[0][1]
    assert (
        amqp10.section(amqp10.MESSAGE_ANNOTATIONS, annotations)
        + amqp10.section(amqp10.DATA, secs[1][1])
        == raw
    )


# -------------------------------------------------------------------- round trips
_str = st.text(max_size=20)
_u8 = st.integers(0, 255)
_u16 = st.integers(0, 0xFFFF)
_u32 = st.integers(0, 0xFFFFFFFF)
_u64 = st.integers(0, 2**64 - 1)
_map = st.dictionaries(_str, _str, max_size=4)

client_events = st.one_of(
    st.builds(ev.PeerProperties, _u32, _map),
    st.builds(ev.SaslHandshake, _u32),
    st.builds(ev.SaslAuthenticate, _u32, _str, st.binary(max_size=40)),
    st.builds(ev.Tune, _u32, _u32),
    st.builds(ev.Open, _u32, _str),
    st.builds(ev.Close, _u32, _u16, _str),
    st.builds(ev.Metadata, _u32, st.lists(_str, max_size=4).map(tuple)),
    st.builds(ev.Create, _u32, _str, _map),
    st.builds(ev.Delete, _u32, _str),
    st.builds(ev.DeclarePublisher, _u32, _u8, _str, _str),
    st.builds(
        ev.Publish,
        _u8,
        st.lists(st.tuples(_u64, st.binary(max_size=30)), max_size=5),
        st.lists(
            st.builds(ev.SubBatch, _u64, st.integers(0, 7), _u16, _u32, st.binary(max_size=30)),
            max_size=2,
        ),
    ),
    st.builds(ev.QueryPublisherSequence, _u32, _str, _str),
    st.builds(ev.DeletePublisher, _u32, _u8),
    st.builds(
        ev.Subscribe,
        _u32,
        _u8,
        _str,
        st.sampled_from([1, 2, 3]),
        st.just(0),
        _u16,
        _map,
    ),
    st.builds(ev.Subscribe, _u32, _u8, _str, st.just(4), _u64, _u16, _map),
    st.builds(
        ev.Subscribe, _u32, _u8, _str, st.just(5), st.integers(-(2**63), 2**63 - 1), _u16, _map
    ),
    st.builds(ev.Credit, _u8, _u16),
    st.builds(ev.Unsubscribe, _u32, _u8),
    st.builds(ev.StoreOffset, _str, _str, _u64),
    st.builds(ev.QueryOffset, _u32, _str, _str),
    # RabbitMQ 3.11-3.13's
    st.builds(
        ev.Publish,
        _u8,
        st.lists(st.tuples(_u64, st.binary(max_size=30)), min_size=2, max_size=2),
        st.just([]),
        st.lists(st.one_of(st.none(), st.binary(max_size=10)), min_size=2, max_size=2),
    ),
    st.builds(ev.ConsumerUpdateResponse, _u32, _u16, st.sampled_from([0, 1, 2, 3]), st.just(0)),
    st.builds(ev.ConsumerUpdateResponse, _u32, _u16, st.just(4), _u64),
    st.builds(ev.ConsumerUpdateResponse, _u32, _u16, st.just(5), st.integers(-(2**63), 2**63 - 1)),
    st.builds(ev.ExchangeCommandVersions, _u32, st.lists(st.tuples(_u16, _u16, _u16), max_size=4)),
    st.builds(ev.StreamStats, _u32, _str),
    st.builds(
        ev.CreateSuperStream,
        _u32,
        _str,
        st.lists(_str, max_size=3).map(tuple),
        st.lists(_str, max_size=3).map(tuple),
        _map,
    ),
    st.builds(ev.DeleteSuperStream, _u32, _str),
)


@given(client_events)
def test_client_frames_round_trip(event: ev.Event) -> None:
    assert decode(body(encode_client(event))) == event


_strs = st.lists(_str, max_size=4).map(tuple)
server_frames = st.one_of(
    st.builds(
        ev.Response,
        st.sampled_from(
            [
                Key.DECLARE_PUBLISHER,
                Key.DELETE_PUBLISHER,
                Key.SUBSCRIBE,
                Key.UNSUBSCRIBE,
                Key.CREATE,
                Key.DELETE,
                Key.CLOSE,
            ]
        ),
        _u32,
        _u16,
    ),
    st.builds(ev.PeerPropertiesResponse, _u32, _u16, _map),
    st.builds(ev.SaslHandshakeResponse, _u32, _u16, _strs),
    st.builds(ev.SaslAuthenticateResponse, _u32, _u16, st.binary(max_size=20)),
    st.builds(ev.Tune, _u32, _u32),
    st.builds(ev.OpenResponse, _u32, _u16, _map),
    st.builds(ev.Close, _u32, _u16, _str),
    st.builds(ev.Heartbeat),
    st.builds(
        ev.MetadataResponse,
        _u32,
        st.lists(st.tuples(_u16, _str, _u32), max_size=3),
        st.lists(st.tuples(_str, _u16, _u16, st.lists(_u16, max_size=3)), max_size=3),
    ),
    st.builds(ev.MetadataUpdate, _u16, _str),
    st.builds(ev.PublishConfirm, _u8, st.lists(_u64, max_size=5)),
    st.builds(ev.PublishError, _u8, st.lists(st.tuples(_u64, _u16), max_size=5)),
    st.builds(ev.QueryPublisherSequenceResponse, _u32, _u16, _u64),
    st.builds(ev.QueryOffsetResponse, _u32, _u16, _u64),
    st.builds(ev.CreditResponse, _u16, _u8),
    st.builds(ev.RouteResponse, _u32, _u16, _strs),
    st.builds(ev.PartitionsResponse, _u32, _u16, _strs),
    st.builds(ev.Deliver, _u8, st.binary(max_size=60)),
    st.builds(ev.DeliverV2, _u8, _u64, st.binary(max_size=60)),
    st.builds(ev.ConsumerUpdate, _u32, _u8, st.sampled_from([0, 1])),
    st.builds(
        ev.ExchangeCommandVersionsResponse,
        _u32,
        _u16,
        st.lists(st.tuples(_u16, _u16, _u16), max_size=4),
    ),
    st.builds(
        ev.StreamStatsResponse,
        _u32,
        _u16,
        st.dictionaries(_str, st.integers(-(2**63), 2**63 - 1), max_size=3),
    ),
)


@given(server_frames)
def test_server_frames_round_trip(event: ev.Reply) -> None:
    """What the server encodes, a client decodes to the same event, and back."""
    raw = encode.encode_reply(event)
    assert encode.decode_reply(body(raw)) == event
    assert encode.encode_reply(encode.decode_reply(body(raw))) == raw


@given(_u32, _u16, _map, _strs, st.binary(max_size=20), _u8, st.lists(_u64, max_size=4))
def test_the_servers_encoders_are_the_events_layouts(
    cid: int, code: int, props: dict[str, str], names: tuple[str, ...], challenge: bytes,
    small: int, ids: list[int],
) -> None:  # fmt: skip
    """Each encoder the server calls gives the frame of its event."""
    reply = encode.encode_reply
    assert encode.response(Key.CREATE, cid, code) == reply(ev.Response(Key.CREATE, cid, code))
    assert encode.peer_properties(cid, code, props) == reply(
        ev.PeerPropertiesResponse(cid, code, props)
    )
    assert encode.sasl_handshake(cid, code, names) == reply(
        ev.SaslHandshakeResponse(cid, code, names)
    )
    assert encode.sasl_authenticate(cid, code, challenge) == reply(
        ev.SaslAuthenticateResponse(cid, code, challenge)
    )
    assert encode.open_response(cid, code, props) == reply(ev.OpenResponse(cid, code, props))
    assert encode.publish_error(small, code, ids) == reply(
        ev.PublishError(small, [(i, code) for i in ids])
    )
    assert encode.streams_response(Key.ROUTE, cid, code, list(names)) == reply(
        ev.RouteResponse(cid, code, names)
    )
    assert encode.deliver_header(small, len(challenge)) + challenge == reply(
        ev.Deliver(small, challenge)
    )
    assert encode.deliver_header(small, len(challenge), 2**40 + cid) + challenge == reply(
        ev.DeliverV2(small, 2**40 + cid, challenge)
    )
    assert encode.consumer_update(cid, small, True) == reply(ev.ConsumerUpdate(cid, small, 1))
    assert encode.exchange_command_versions(cid, code, [(2, 1, 2)]) == reply(
        ev.ExchangeCommandVersionsResponse(cid, code, [(2, 1, 2)])
    )
    assert encode.stream_stats(cid, code, {"committed_chunk_id": -1}) == reply(
        ev.StreamStatsResponse(cid, code, {"committed_chunk_id": -1})
    )
    # RabbitMQ 3.13 answers Route and Partitions with the response bit, 3.10.8 without
    with_bit = encode.streams_response(Key.ROUTE, cid, code, list(names), response_bit=True)
    assert with_bit[4:6] == b"\x80\x18"
    assert encode.decode_reply(body(with_bit)) == ev.RouteResponse(cid, code, names)
    frame = body(reply(ev.Deliver(small, challenge)))
    assert encode.delivered_to(frame) == small
    assert frame[encode.CHUNK_AT :] == challenge
    assert encode.delivered_to(body(encode.heartbeat())) == -1


def test_a_client_reads_what_it_does_not_know_as_unknown_frames() -> None:
    assert encode.decode_reply(b"\x00\x1f\x00\x01\x00") == ev.UnknownFrame(0x1F, 1)
    assert encode.decode_reply(b"\x00\x03\x00\x02") == ev.UnknownFrame(3, 2)


def _open_connection() -> ServerConnection:
    conn = ServerConnection()
    conn.phase = Phase.OPEN
    return conn


@given(
    st.lists(
        client_events.filter(
            lambda e: (
                not isinstance(
                    e, (ev.PeerProperties, ev.SaslHandshake, ev.SaslAuthenticate, ev.Tune, ev.Open)
                )
            )
        ),
        max_size=6,
    ),
    st.data(),
)
def test_connection_splits_frames_anywhere(events: list[ev.Event], data: st.DataObject) -> None:
    """However the bytes arrive, the same events come out, in order."""
    wire = b"".join(encode_client(e) for e in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=5)))
    conn = _open_connection()
    out: list[object] = []
    start = 0
    for cut in [*cuts, len(wire)]:
        conn.receive_data(wire[start:cut])
        start = cut
        while (e := conn.next_event()) is not ev.NEED_DATA:
            out.append(e)
            if isinstance(e, ev.Close):
                conn.phase = Phase.OPEN  # keep taking frames for the test
    assert out == events


amqp_values = st.recursive(
    st.one_of(
        st.just(("null", None)),
        st.builds(lambda b: ("bool", b), st.booleans()),
        st.builds(lambda v: ("ubyte", v), _u8),
        st.builds(lambda v: ("uint", v), _u32),
        st.builds(lambda v: ("ulong", v), _u64),
        st.builds(lambda v: ("int", v), st.integers(-(2**31), 2**31 - 1)),
        st.builds(lambda v: ("long", v), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda v: ("timestamp", v), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda v: ("string", v), st.text(max_size=300)),
        st.builds(lambda v: ("symbol", v), st.text("abcxyz-", max_size=20)),
        st.builds(lambda v: ("binary", v), st.binary(max_size=300)),
    ),
    lambda inner: st.one_of(
        st.builds(lambda v: ("list", v), st.lists(inner, max_size=4)),
        st.builds(lambda v: ("map", v), st.lists(st.tuples(inner, inner), max_size=4)),
    ),
    max_leaves=10,
)


@given(amqp_values)
def test_amqp10_values_round_trip(value: amqp10.Value) -> None:
    raw = amqp10.encode(value)
    assert amqp10.decode(raw) == (value, len(raw))


# ----------------------------------------------------------------------- phases
def test_handshake_phases() -> None:
    conn = ServerConnection()
    conn.receive_data(encode_client(ev.PeerProperties(1, {})))
    assert isinstance(conn.next_event(), ev.PeerProperties)
    assert conn.phase is Phase.AUTHENTICATING
    conn.receive_data(encode_client(ev.SaslHandshake(2)))
    conn.receive_data(encode_client(ev.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")))
    assert conn.next_event() == ev.SaslHandshake(2)
    assert conn.next_event() == ev.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")
    conn.send_tune()
    assert conn.phase is Phase.TUNING
    conn.receive_data(encode_client(ev.Tune(65536, 30)))
    assert conn.next_event() == ev.Tune(65536, 30)
    assert (conn.frame_max, conn.heartbeat, conn.phase) == (65536, 30, Phase.OPENING)
    conn.receive_data(encode_client(ev.Open(4, "/")))
    assert conn.next_event() == ev.Open(4, "/")
    conn.send_open(4, Code.OK, {"advertised_host": "h"})
    assert conn.phase is Phase.OPEN
    # a frame above the agreed frame_max is reported and skipped, the next one is read
    big = encode_client(ev.Publish(1, [(1, b"x" * 70000)], []))
    conn.receive_data(big + encode_client(ev.Credit(1, 5)))
    assert conn.next_event() == ev.FrameTooLarge(len(big) - 4)
    assert conn.next_event() == ev.Credit(1, 5)
    # an unknown command, once open, is reported (the owner answers with a close)
    conn.receive_data(b"\x00\x00\x00\x04\x00\x7f\x00\x01")
    assert conn.next_event() == ev.UnknownFrame(0x7F, 1)


def test_a_command_out_of_turn_fails_the_connection() -> None:
    conn = ServerConnection()
    conn.receive_data(encode_client(ev.Open(1, "/")))
    event = conn.next_event()
    assert isinstance(event, ev.ConnectionFailed)
    assert conn.closed
    assert conn.next_event() is ev.NEED_DATA


# ------------------------------------------------------------------------ fuzzing
@given(st.sampled_from(list(Phase)), st.binary(max_size=200), st.data())
def test_any_bytes_give_events_or_need_data(
    phase: Phase, noise: bytes, data: st.DataObject
) -> None:
    """Whatever arrives, in any phase, the connection hands out events or NEED_DATA and
    never raises; valid frames with bytes flipped included."""
    conn = ServerConnection()
    conn.phase = phase
    valid = encode_client(data.draw(client_events))
    flips = data.draw(st.lists(st.integers(0, max(0, len(valid) - 1)), max_size=3))
    mutated = bytearray(valid)
    for i in flips:
        mutated[i] ^= 0xFF
    conn.receive_data(bytes(mutated) + noise)
    for _ in range(100):
        event = conn.next_event()
        if event is ev.NEED_DATA:
            break
        assert isinstance(event, ev.Event.__args__)  # type: ignore[attr-defined]


def test_a_consumer_update_response_with_a_value_after_a_type_without_one() -> None:
    """rstream always sends 8 bytes of offset; RabbitMQ ignores them for first, last, next
    and none (rabbit_stream_core:offset_spec)."""
    raw = struct.pack(">HHIHHQ", 0x801A, 1, 7, 1, OffsetType.NEXT, 0)
    assert decode(raw) == ev.ConsumerUpdateResponse(7, 1, OffsetType.NEXT, 0)
