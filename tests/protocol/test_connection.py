"""The sans-IO connection on literal bytes: handshake, publish assembly, delivery
encoding, one event at a time, and fuzzed garbage that must only ever end the connection."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame, header

from leveret.protocol import errors, spec
from leveret.protocol.connection import ServerConnection, State
from leveret.protocol.events import (
    NEED_DATA,
    AccessRequestReceived,
    ChannelCloseOkReceived,
    ChannelCloseReceived,
    ChannelOpenReceived,
    ConnectionCloseOkReceived,
    ConnectionCloseReceived,
    ConnectionFailed,
    HeaderReceived,
    MethodReceived,
    OpenReceived,
    PublishReceived,
    StartOkReceived,
    TuneOkReceived,
    UnsupportedProtocol,
    UpdateSecretReceived,
)
from leveret.protocol.states import LocalProtocolError
from tests.support.tiers import examples


def frames(data: bytes) -> list[Any]:
    out = []
    while data:
        used, _, value = frame.unmarshal(data)
        out.append(value)
        data = data[used:]
    return out


def answer(conn: ServerConnection, event: object) -> None:
    """What an owner answers, as the server does."""
    if isinstance(event, HeaderReceived):
        conn.send_start({"product": "test"})
    elif isinstance(event, UnsupportedProtocol):
        conn.send_protocol_header()
    elif isinstance(event, StartOkReceived):
        conn.send_tune()
    elif isinstance(event, OpenReceived):
        conn.send_open_ok()
    elif isinstance(event, ChannelOpenReceived):
        conn.send_channel_open_ok(event.channel)
    elif isinstance(event, ChannelCloseReceived):
        conn.send_channel_close_ok(event.channel)
    elif isinstance(event, AccessRequestReceived):
        conn.send_access_request_ok(event.channel)
    elif isinstance(event, UpdateSecretReceived):
        conn.send_update_secret_ok()
    elif isinstance(event, ConnectionCloseReceived):
        conn.send_close_ok()
    elif isinstance(event, ConnectionFailed):
        if event.reply:
            conn.send_close(event.error)
        else:
            conn.drop()


def feed(conn: ServerConnection, data: bytes) -> list[Any]:
    conn.receive_data(data)
    events = []
    while (event := conn.next_event()) is not NEED_DATA:
        answer(conn, event)
        events.append(event)
    return events


def method(m: Any, channel: int = 0) -> bytes:
    return bytes(frame.marshal(m, channel))


HANDSHAKE = (
    spec.PROTOCOL_HEADER
    + method(
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        )
    )
    + method(commands.Connection.TuneOk(channel_max=10, frame_max=4096, heartbeat=0))
    + method(commands.Connection.Open(virtual_host="/"))
)


def opened() -> ServerConnection:
    conn = ServerConnection()
    events = feed(conn, HANDSHAKE + method(commands.Channel.Open(), 1))
    assert [type(e) for e in events] == [
        HeaderReceived,
        StartOkReceived,
        TuneOkReceived,
        OpenReceived,
        ChannelOpenReceived,
    ]
    assert events[1].response == b"\0guest\0guest"
    assert events[2] == TuneOkReceived(10, 4096, 0)
    assert conn.state is State.OPEN
    conn.data_to_send()
    return conn


def test_nothing_is_sent_until_the_owner_sends_start() -> None:
    conn = ServerConnection()
    conn.receive_data(spec.PROTOCOL_HEADER[:5])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(spec.PROTOCOL_HEADER[5:])
    assert conn.data_to_send() == b""
    assert isinstance(conn.next_event(), HeaderReceived)
    assert conn.data_to_send() == b""  # receiving never writes
    conn.send_start({"product": "test"})
    (start,) = frames(conn.data_to_send())
    assert isinstance(start, commands.Connection.Start)
    assert start.server_properties == {"product": "test"}
    assert start.mechanisms == "AMQPLAIN PLAIN"


def test_another_protocol_gets_our_header_and_the_end() -> None:
    conn = ServerConnection()
    (event,) = feed(conn, b"AMQP\x00\x01\x00\x00")
    assert isinstance(event, UnsupportedProtocol)
    assert conn.data_to_send() == spec.PROTOCOL_HEADER
    assert conn.closed


def test_replies_keep_request_order_without_reading_ahead() -> None:
    """channel.close is answered by the owner after the methods before it: the
    connection hands out one event and parses the next only when asked."""
    conn = opened()
    wire = method(commands.Basic.Cancel(consumer_tag="c"), 1) + method(
        commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 1
    )
    conn.receive_data(wire)
    first = conn.next_event()
    assert isinstance(first, MethodReceived)
    assert conn.channel_state(1) is not None  # the close is not read yet
    conn.send_method(1, commands.Basic.CancelOk(consumer_tag="c"))
    second = conn.next_event()
    assert second == ChannelCloseReceived(1, 200, "bye")
    conn.send_channel_close_ok(1)
    assert [type(f) for f in frames(conn.data_to_send())] == [
        commands.Basic.CancelOk,
        commands.Channel.CloseOk,
    ]
    assert conn.next_event() is NEED_DATA


def test_the_owner_cannot_answer_what_was_not_asked() -> None:
    conn = opened()
    with pytest.raises(LocalProtocolError):
        conn.send_channel_close_ok(1)  # channel 1 is open, nobody closed it
    with pytest.raises(LocalProtocolError):
        conn.send_open_ok()  # the connection is open already
    with pytest.raises(LocalProtocolError):
        conn.send_channel_open_ok(5)


def test_access_request_and_update_secret_are_answered_by_the_owner() -> None:
    conn = opened()
    access = struct.pack(">BHI", 1, 1, 8) + b"\x00\x1e\x00\x0a\x00\x00\x00\x00" + b"\xce"
    (event,) = feed(conn, access)
    assert event == AccessRequestReceived(1)
    raw = conn.data_to_send()
    assert raw == struct.pack(">BHI", 1, 1, 6) + b"\x00\x1e\x00\x0b\x00\x01\xce"
    (event,) = feed(
        conn, method(commands.Connection.UpdateSecret(new_secret="s3cret", reason="refresh"))
    )
    assert event == UpdateSecretReceived(b"s3cret", "refresh")
    (ok,) = frames(conn.data_to_send())
    assert isinstance(ok, commands.Connection.UpdateSecretOk)


def test_publish_is_assembled_across_split_reads() -> None:
    conn = opened()
    body = b"x" * 10000  # three body frames at frame_max 4096
    wire = method(commands.Basic.Publish(exchange="logs", routing_key="a.b", mandatory=True), 1)
    wire += bytes(
        frame.marshal(
            header.ContentHeader(
                body_size=len(body), properties=commands.Basic.Properties(content_type="text/plain")
            ),
            1,
        )
    )
    for i in range(0, len(body), 4088):
        wire += bytes(frame.marshal(pbody.ContentBody(body[i : i + 4088]), 1))
    events = []
    for i in range(0, len(wire), 7):  # dribble it in
        events += feed(conn, wire[i : i + 7])
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, PublishReceived)
    assert (event.exchange, event.routing_key, event.mandatory, event.immediate) == (
        "logs",
        "a.b",
        True,
        False,
    )
    assert event.exchange_and_key == b"\x04logs\x03a.b"
    assert event.body == body
    assert spec.decode_properties(event.properties).content_type == "text/plain"


def test_deliver_is_spliced_correctly() -> None:
    conn = opened()
    props = spec.encode_properties(commands.Basic.Properties(delivery_mode=2))
    conn.send_deliver(1, b"\x03tag", 7, True, b"\x04logs\x00", props, b"hello")
    method_frame, content_header, body = frames(conn.data_to_send())
    assert isinstance(method_frame, commands.Basic.Deliver)
    assert (
        method_frame.consumer_tag,
        method_frame.delivery_tag,
        method_frame.redelivered,
        method_frame.exchange,
        method_frame.routing_key,
    ) == ("tag", 7, True, "logs", "")
    assert content_header.body_size == 5 and content_header.properties.delivery_mode == 2
    assert body.value == b"hello"


def test_large_delivery_is_split_at_frame_max() -> None:
    conn = opened()  # frame_max 4096
    conn.send_deliver(1, b"\x01t", 1, False, b"\x00\x00", b"\x00\x00", b"y" * 9000)
    out = frames(conn.data_to_send())
    assert [type(f).__name__ for f in out] == ["Deliver", "ContentHeader"] + ["ContentBody"] * 3
    assert b"".join(f.value for f in out[2:]) == b"y" * 9000


def test_basic_ack_encoding() -> None:
    conn = ServerConnection()
    conn.send_basic_ack(3, 99, True)
    (ack,) = frames(conn.data_to_send())
    assert isinstance(ack, commands.Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (99, True)


def test_heartbeat_frame_is_eight_bytes() -> None:
    conn = opened()
    conn.send_heartbeat()
    assert conn.data_to_send() == b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_bad_frame_end_fails_with_501_and_drops_the_rest() -> None:
    conn = opened()
    bad = bytearray(method(commands.Basic.Qos(prefetch_count=1), 1))
    bad[-1] = 0
    (event,) = feed(conn, bytes(bad))
    assert isinstance(event, ConnectionFailed) and event.error.code == 501 and event.reply
    (close,) = frames(conn.data_to_send())
    assert isinstance(close, commands.Connection.Close) and close.reply_code == 501
    assert conn.state is State.CLOSING
    assert feed(conn, method(commands.Connection.CloseOk())) == []  # nothing can be framed
    assert conn.state is State.CLOSING


def test_after_our_close_only_close_ok_counts() -> None:
    conn = opened()
    conn.send_close(errors.error(spec.CONNECTION_FORCED, "bye"))
    conn.data_to_send()
    wire = method(commands.Basic.Qos(prefetch_count=1), 1) + method(
        commands.Basic.Publish(exchange="", routing_key="q"), 1
    )
    assert feed(conn, wire) == []
    assert feed(conn, method(commands.Connection.CloseOk())) == [ConnectionCloseOkReceived()]
    assert conn.closed
    assert conn.data_to_send() == b""


def test_channel_frames_after_our_channel_close_are_dropped_until_close_ok() -> None:
    conn = opened()
    conn.send_channel_close(1, errors.precondition_failed("no"))
    conn.data_to_send()
    wire = method(commands.Basic.Qos(prefetch_count=1), 1) + method(
        commands.Basic.Publish(exchange="", routing_key="q"), 1
    )
    assert feed(conn, wire) == []
    assert feed(conn, method(commands.Channel.CloseOk(), 1)) == [ChannelCloseOkReceived(1)]
    assert feed(conn, method(commands.Channel.Open(), 1)) == [ChannelOpenReceived(1)]


def test_both_ends_closing_a_channel_at_once() -> None:
    conn = opened()
    conn.send_channel_close(1, errors.precondition_failed("no"))
    (event,) = feed(
        conn,
        method(commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1),
    )
    assert event == ChannelCloseReceived(1, 200, "")
    assert [type(f) for f in frames(conn.data_to_send())] == [
        commands.Channel.Close,
        commands.Channel.CloseOk,
    ]
    assert feed(conn, method(commands.Channel.CloseOk(), 1)) == [ChannelCloseOkReceived(1)]


def test_after_the_close_input_drains_and_each_close_gets_close_ok() -> None:
    """As RabbitMQ's reader in its closed state: the conversation is over, frames still
    arriving are read and dropped, and every further connection.close is answered."""
    conn = opened()
    close = method(
        commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    (event,) = feed(conn, close)
    assert isinstance(event, ConnectionCloseReceived)
    assert conn.closed and conn.state is State.DRAINING
    (ok,) = frames(conn.data_to_send())
    assert isinstance(ok, commands.Connection.CloseOk)
    qos = method(commands.Basic.Qos(prefetch_count=1), 1)
    events = feed(conn, qos + close + spec.HEARTBEAT_FRAME + close)
    assert [type(e) for e in events] == [ConnectionCloseReceived, ConnectionCloseReceived]
    assert [type(f) for f in frames(conn.data_to_send())] == [commands.Connection.CloseOk] * 2


# ------------------------------------------------------------------- fuzzing
@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=300))
def test_garbage_after_handshake_never_raises(garbage: bytes) -> None:
    conn = opened()
    for event in feed(conn, garbage):
        if isinstance(event, ConnectionFailed):
            assert event.error.code in (501, 502, 503, 504, 505, 530, 540)
    conn.data_to_send()


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2, 3, 8]), st.integers(0, 3), st.binary(max_size=40)),
        max_size=8,
    )
)
def test_wellformed_frames_with_random_payloads(items: list[tuple[int, int, bytes]]) -> None:
    conn = opened()
    wire = b"".join(struct.pack(">BHI", t, ch, len(p)) + p + b"\xce" for t, ch, p in items)
    events = feed(conn, wire)
    failed = [e for e in events if isinstance(e, ConnectionFailed)]
    # At most one failure, and after it the connection reads no further.
    assert len(failed) <= 1
    if failed:
        assert events[-1] is failed[0] or isinstance(events[-1], ConnectionCloseOkReceived)
        assert conn.state in (State.CLOSING, State.CLOSED)
    else:
        assert conn.state is State.OPEN


# A valid client session, as a list of wire pieces.
_props = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | st.sampled_from(["text/plain", "application/json"]),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    headers=st.none() | st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 9)),
    message_id=st.none() | st.text(max_size=8),
)


@st.composite
def operations(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["publish", "publish", "ack", "qos", "heartbeat", "reopen"]))
    channel = draw(st.integers(1, 2))
    if kind == "publish":
        body = draw(st.binary(max_size=9000))
        wire = method(
            commands.Basic.Publish(
                exchange=draw(st.sampled_from(["", "logs"])),
                routing_key=draw(st.text(max_size=5)),
                mandatory=draw(st.booleans()),
            ),
            channel,
        )
        wire += bytes(
            frame.marshal(
                header.ContentHeader(body_size=len(body), properties=draw(_props)), channel
            )
        )
        for i in range(0, len(body), 4088):
            wire += bytes(frame.marshal(pbody.ContentBody(body[i : i + 4088]), channel))
        return wire
    if kind == "ack":
        return method(
            commands.Basic.Ack(
                delivery_tag=draw(st.integers(1, 10**6)), multiple=draw(st.booleans())
            ),
            channel,
        )
    if kind == "qos":
        return method(commands.Basic.Qos(prefetch_count=draw(st.integers(0, 1000))), channel)
    if kind == "heartbeat":
        return spec.HEARTBEAT_FRAME
    return method(
        commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), channel
    ) + method(commands.Channel.Open(), channel)


def _summary(event: object) -> object:
    if isinstance(event, PublishReceived):
        return (
            "publish",
            event.channel,
            event.exchange,
            event.routing_key,
            event.mandatory,
            event.immediate,
            event.exchange_and_key,
            event.properties,
            event.body,
        )
    if isinstance(event, MethodReceived):
        return ("method", event.channel, type(event.method).__name__, vars(event.method))
    return event


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(operations(), max_size=12),
    st.lists(st.integers(1, 5000), min_size=1, max_size=30),
)
def test_any_chunking_gives_the_same_events(ops: list[bytes], cuts: list[int]) -> None:
    """The fast publish path (a whole publish in one read) and the general path (frames
    assembled across reads) give the same events and the same replies."""
    wire = HANDSHAKE + method(commands.Channel.Open(), 1) + method(commands.Channel.Open(), 2)
    wire += b"".join(ops)
    whole = ServerConnection()
    expected = [_summary(e) for e in feed(whole, wire)]
    expected_out = whole.data_to_send()
    chunked = ServerConnection()
    got: list[object] = []
    pos = 0
    i = 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        got += [_summary(e) for e in feed(chunked, wire[pos : pos + step])]
        pos += step
        i += 1
    assert got == expected
    assert chunked.data_to_send() == expected_out
    assert not any(isinstance(e, ConnectionFailed) for e in expected)


@pytest.mark.parametrize(
    ("frame_min", "padding", "taken"),
    [(4096, 4000, True), (4096, 4100, False), (8192, 4100, True), (8192, 8200, False)],
)
def test_until_tune_ok_a_frame_is_held_to_the_minimum_frame_size(
    frame_min: int, padding: int, taken: bool
) -> None:
    """rabbit_reader's initial_frame_max: ?FRAME_MIN_SIZE (4096 in 3.10.8, 8192 from 4.1)
    until tune-ok, whatever frame_max connection.tune offers; then tune-ok's."""
    conn = ServerConnection(frame_max=131072, frame_min=frame_min)
    start_ok = method(
        commands.Connection.StartOk(
            client_properties={"padding": "x" * padding}, mechanism="PLAIN", response="\0g\0g"
        )
    )
    events = feed(conn, spec.PROTOCOL_HEADER + start_ok)
    if taken:
        assert [type(e) for e in events] == [HeaderReceived, StartOkReceived]
        tune = frames(conn.data_to_send())[-1]
        assert tune.frame_max == 131072  # the offer is unchanged
        tune_ok = commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0)
        big = commands.Connection.UpdateSecret(new_secret="s" * 20000, reason="")
        opened = method(commands.Connection.Open(virtual_host="/"))
        events = feed(conn, method(tune_ok) + opened + method(big))
        assert [type(e) for e in events] == [TuneOkReceived, OpenReceived, UpdateSecretReceived]
    else:
        failed = events[-1]
        assert isinstance(failed, ConnectionFailed) and not failed.reply
        assert f"frame_too_large,{len(start_ok) - 8},{frame_min - 8}" in failed.error.reply_text
