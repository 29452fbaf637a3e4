"""The sans-IO connection on literal bytes: handshake, publish assembly, delivery
encoding, and fuzzed garbage that must only ever close the connection."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame, header

from leveret.protocol import spec
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.events import (
    ChannelOpened,
    ConnectionFailed,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
)


def frames(data: bytes) -> list[object]:
    out = []
    while data:
        used, _, value = frame.unmarshal(data)
        out.append(value)
        data = data[used:]
    return out


def opened() -> ServerConnection:
    conn = ServerConnection({"product": "test"})
    conn.receive_data(spec.PROTOCOL_HEADER)
    events = conn.receive_data(frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0))
    assert isinstance(events[0], StartOkReceived)
    assert events[0].response == b"\0guest\0guest"
    conn.send_tune()
    events = conn.receive_data(frame.marshal(commands.Connection.TuneOk(
        channel_max=10, frame_max=4096, heartbeat=0), 0))
    assert events == [TuneOkReceived(10, 4096, 0)]
    events = conn.receive_data(frame.marshal(commands.Connection.Open(virtual_host="/"), 0))
    assert events == [OpenReceived("/")]
    conn.send_open_ok()
    assert conn.receive_data(frame.marshal(commands.Channel.Open(), 1)) == [ChannelOpened(1)]
    conn.data_to_send()
    return conn


def test_start_is_sent_after_the_header() -> None:
    conn = ServerConnection({"product": "test"})
    assert conn.receive_data(spec.PROTOCOL_HEADER[:5]) == []
    assert conn.data_to_send() == b""
    conn.receive_data(spec.PROTOCOL_HEADER[5:])
    (start,) = frames(conn.data_to_send())
    assert isinstance(start, commands.Connection.Start)
    assert start.server_properties == {"product": "test"}
    assert start.mechanisms == "AMQPLAIN PLAIN"


def test_publish_is_assembled_across_split_reads() -> None:
    conn = opened()
    body = b"x" * 10000  # three body frames at frame_max 4096
    wire = frame.marshal(commands.Basic.Publish(exchange="logs", routing_key="a.b",
                                                mandatory=True), 1)
    wire += frame.marshal(header.ContentHeader(
        body_size=len(body), properties=commands.Basic.Properties(content_type="text/plain")), 1)
    for i in range(0, len(body), 4088):
        wire += frame.marshal(pbody.ContentBody(body[i:i + 4088]), 1)
    events = []
    for i in range(0, len(wire), 7):  # dribble it in
        events += conn.receive_data(wire[i:i + 7])
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, PublishReceived)
    assert (event.exchange, event.routing_key, event.mandatory, event.immediate) == (
        "logs", "a.b", True, False)
    assert event.exchange_and_key == b"\x04logs\x03a.b"
    assert event.body == body
    assert spec.decode_properties(event.properties).content_type == "text/plain"


def test_deliver_is_spliced_correctly() -> None:
    conn = opened()
    props = spec.encode_properties(commands.Basic.Properties(delivery_mode=2))
    conn.send_deliver(1, b"\x03tag", 7, True, b"\x04logs\x00", props, b"hello")
    method, header, body = frames(conn.data_to_send())
    assert isinstance(method, commands.Basic.Deliver)
    assert (method.consumer_tag, method.delivery_tag, method.redelivered, method.exchange,
            method.routing_key) == ("tag", 7, True, "logs", "")
    assert header.body_size == 5 and header.properties.delivery_mode == 2
    assert body.value == b"hello"


def test_basic_ack_encoding() -> None:
    conn = ServerConnection({})
    conn.send_basic_ack(3, 99, True)
    (ack,) = frames(conn.data_to_send())
    assert isinstance(ack, commands.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (99, True)


def test_heartbeat_frame_is_eight_bytes() -> None:
    conn = ServerConnection({})
    conn.send_heartbeat()
    assert conn.data_to_send() == b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_bad_frame_end_fails_with_501() -> None:
    conn = opened()
    bad = bytearray(frame.marshal(commands.Basic.Qos(prefetch_count=1), 1))
    bad[-1] = 0
    (event,) = conn.receive_data(bytes(bad))
    assert isinstance(event, ConnectionFailed) and event.error.code == 501
    (close,) = frames(conn.data_to_send())
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 501
    assert conn.receive_data(b"anything at all") == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_after_handshake_never_raises(garbage: bytes) -> None:
    conn = opened()
    events = conn.receive_data(garbage)
    for event in events:
        if isinstance(event, ConnectionFailed):
            assert event.error.code in (501, 502, 503, 504, 505, 530, 540)
    conn.data_to_send()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 8]), st.integers(0, 3),
                          st.binary(max_size=40)), max_size=8))
def test_wellformed_frames_with_random_payloads(items: list[tuple[int, int, bytes]]) -> None:
    conn = opened()
    wire = b"".join(struct.pack(">BHI", t, ch, len(p)) + p + b"\xce" for t, ch, p in items)
    conn.receive_data(wire)
    assert conn.state in (State.OPEN, State.CLOSING, State.CLOSED)
