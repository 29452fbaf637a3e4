"""The connection itself: what the server advertises, negotiation, authentication, and
malformed input. Raw sockets on both brokers."""

from __future__ import annotations

import struct

import pika
import pytest
from pamqp import commands

from tests.support.brokers import BrokerUnderTest
from tests.support.identity import RABBITMQ_CAPABILITIES, SERVER_PROPERTIES
from tests.support.rawclient import PROTOCOL_HEADER, RawClient

FRAME_END = b"\xce"


def frame_bytes(kind: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + end


def start_ok(
    c: RawClient, response: str = "\0guest\0guest", client_properties: dict | None = None
) -> None:
    """The protocol header and a PLAIN connection.start-ok with these credentials."""
    c.send(PROTOCOL_HEADER)
    c.expect(commands.Connection.Start)
    c.send_method(
        0,
        commands.Connection.StartOk(
            client_properties=client_properties or {},
            mechanism="PLAIN",
            response=response,
            locale="en_US",
        ),
    )


def tune_ok(c: RawClient, channel_max: int | None = None) -> None:
    """Answer connection.tune with its own figures, or with ``channel_max``; no heartbeat."""
    tune = c.expect(commands.Connection.Tune)
    channels = tune.channel_max if channel_max is None else channel_max
    c.send_method(
        0, commands.Connection.TuneOk(channel_max=channels, frame_max=tune.frame_max, heartbeat=0)
    )


def test_server_properties_and_tune(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        start, tune = c.handshake()
    assert (start.version_major, start.version_minor) == (0, 9)
    # RabbitMQ lists its mechanisms in registry order, which varies between starts
    assert sorted(start.mechanisms.split()) == ["AMQPLAIN", "PLAIN"]
    assert start.locales == "en_US"
    props = start.server_properties
    assert props["capabilities"] == RABBITMQ_CAPABILITIES
    assert set(props) >= set(SERVER_PROPERTIES)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


def test_wrong_protocol_header_gets_ours_back(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.send(b"AMQP\x00\x00\x08\x00")
        assert c.recv_bytes() == PROTOCOL_HEADER


def test_amqplain_login(broker: BrokerUnderTest) -> None:
    params = broker.pika_params()
    conn = pika.BlockingConnection(params)
    conn.close()
    # pika only speaks PLAIN; send AMQPLAIN by hand
    from pamqp import encode

    with RawClient(broker.host, broker.port) as c:
        c.send(PROTOCOL_HEADER)
        c.expect(commands.Connection.Start)
        table = encode.field_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
        c.send_method(
            0,
            commands.Connection.StartOk(
                client_properties={},
                mechanism="AMQPLAIN",
                response=table.decode("latin-1"),
                locale="en_US",
            ),
        )
        assert isinstance(c.expect(commands.Connection.Tune), commands.Connection.Tune)


def test_bad_password_with_failure_close(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        start_ok(c, "\0guest\0wrong", {"capabilities": {"authentication_failure_close": True}})
        refused = (
            "ACCESS_REFUSED - Login was refused using authentication "
            "mechanism PLAIN. For details see the broker logfile."
        )
        assert c.next_close() == ("connection", 403, refused, 0, 0)


def test_bad_password_without_failure_close(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        start_ok(c, "\0guest\0wrong")
        assert c.next_close() is None  # the socket just closes


def test_pika_sees_auth_failure(broker: BrokerUnderTest) -> None:
    creds = pika.PlainCredentials("guest", "nope")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(broker.pika_params(credentials=creds))
    assert "ACCESS_REFUSED" in str(info.value)


def test_unknown_vhost(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        start_ok(c)
        tune_ok(c)
        c.send_method(0, commands.Connection.Open(virtual_host="no-such-vhost"))
        assert c.next_close() == (
            "connection",
            530,
            "NOT_ALLOWED - vhost no-such-vhost not found",
            10,
            40,
        )


def publish(channel: int = 1) -> tuple[int, object]:
    return (channel, commands.Basic.Publish(exchange="", routing_key="x"))


def header(class_id: int, size: int, channel: int = 1) -> bytes:
    return frame_bytes(2, channel, struct.pack(">HHQH", class_id, 0, size, 0))


QOS = commands.Basic.Qos(prefetch_count=1)
UNEXPECTED_IN_RUNNING = "CHANNEL_ERROR - unexpected method in connection state running"
UNIMPLEMENTED = "COMMAND_INVALID - unimplemented method"


# What a broker does with a malformed frame or a method out of place, after the handshake and
# (where ``opened``) channel 1's opening: what it sends is a sequence of raw frames (bytes) and
# methods (channel, method); ``expected`` is the connection.close's reply code, text, class and
# method, or None where the broker drops the socket without a word.
# fmt: off
CLOSES = [
    pytest.param(True, [frame_bytes(1, 2, b"\x00\x14\x00\x0a\x00", end=b"\x00")], (501,
        "FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: {invalid_frame_end_marker,0}",
        0, 0), id="bad-frame-end"),
    pytest.param(False, [frame_bytes(9, 0, b"abc")], (501,
        'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame', 0, 0),
        id="unknown-frame-type"),
    pytest.param(True, [(1, commands.Channel.Open())],
        (504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10), id="second-channel-open"),
    pytest.param(True, [frame_bytes(3, 1, b"x" * 140000)], (501,
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,140000,131064}", 0, 0),
        id="frame-larger-than-frame-max"),
    pytest.param(True, [header(60, 1)], (505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead", 0, 0),
        id="content-header-without-method"),
    pytest.param(False, [(3, QOS)], (504, "CHANNEL_ERROR - expected 'channel.open'", 60, 10),
        id="method-on-unopened-channel"),
    pytest.param(True, [publish(), (1, QOS)], (505, "UNEXPECTED_FRAME - expected content "
        "header for class 60, got non content header frame instead", 60, 40),
        id="method-where-content-header-expected"),
    pytest.param(True, [frame_bytes(1, 1, struct.pack(">HH", 99, 10))], None,
        id="unknown-method-drops-the-socket"),
    pytest.param(True, [publish(), header(50, 1)], (505, "UNEXPECTED_FRAME - expected content "
        "header for class 60, got one for class 50 instead", 60, 40),
        id="content-header-of-another-class"),
    pytest.param(True, [publish(), header(60, 10), frame_bytes(3, 1, b"abc"), (1, QOS)],
        (505, "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
         60, 40), id="method-before-body-is-complete"),
    # methods out of place
    pytest.param(True, [(0, QOS)], (504, UNEXPECTED_IN_RUNNING, 60, 10), id="misplaced-qos"),
    pytest.param(True, [(0, commands.Connection.Open(virtual_host="/"))],
        (504, UNEXPECTED_IN_RUNNING, 10, 40), id="misplaced-connection-open"),
    pytest.param(True, [(1, commands.Connection.Open(virtual_host="/"))],
        (503, UNIMPLEMENTED, 10, 40), id="connection-open-on-a-channel"),
    pytest.param(True, [(1, commands.Queue.DeclareOk(queue="q", message_count=0,
        consumer_count=0))], (503, UNIMPLEMENTED, 50, 11), id="declare-ok-from-the-client"),
    pytest.param(True, [(1, commands.Channel.CloseOk())], (503, UNIMPLEMENTED, 20, 41),
        id="close-ok-unasked"),
    # malformed frames
    pytest.param(True, [header(60, 3, channel=0)], (505,
        "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,3,0,0>>", 0, 0),
        id="content-header-on-channel-0"),
    pytest.param(True, [frame_bytes(3, 0, b"abc")],
        (505, 'UNEXPECTED_FRAME - type 3, all octets = <<"abc">>', 0, 0),
        id="body-on-channel-0"),
    pytest.param(True, [frame_bytes(8, 1, b"")], (505,
        "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0), id="heartbeat-on-a-channel"),
    pytest.param(True, [frame_bytes(8, 0, b"\x00")],
        (501, "FRAME_ERROR - type 8, all octets = <<0>>: unknown_frame", 0, 0),
        id="heartbeat-with-a-payload"),
    pytest.param(True, [frame_bytes(1, 1, b"\x00")], (501,
        "FRAME_ERROR - type 1, all octets = <<0>>: unknown_frame", 0, 0),
        id="method-frame-too-short"),
    pytest.param(True, [frame_bytes(1, 1, struct.pack(">HH", 60, 10) + b"\x00\x00\x00")],
        (501, "FRAME_ERROR - cannot decode <<0,0,0>>", 60, 10),
        id="method-arguments-undecodable"),
]
# fmt: on


@pytest.mark.parametrize(("opened", "sent", "expected"), CLOSES)
def test_connection_is_closed_for(
    broker: BrokerUnderTest,
    opened: bool,
    sent: list[bytes | tuple[int, object]],
    expected: tuple[int, str, int, int] | None,
) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        if opened:
            c.open_channel()
        for item in sent:
            if isinstance(item, bytes):
                c.send(item)
            else:
                c.send_method(*item)  # type: ignore[arg-type]
        assert c.next_close() == (None if expected is None else ("connection", *expected))


def test_channel_max_bounds_the_count_not_the_number(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send_method(4000, commands.Channel.Open())
        assert isinstance(c.expect(commands.Channel.OpenOk), commands.Channel.OpenOk)


def test_broken_connection_leaves_others_alone(broker: BrokerUnderTest, name: str) -> None:
    conn = pika.BlockingConnection(broker.pika_params())
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True)
    ch.basic_publish("", name, b"kept")
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.send(b"\x01\x00\x01garbage-garbage-garbage")
        c.next_close()
    assert ch.queue_declare(name, passive=True).method.message_count == 1
    assert ch.basic_get(name, auto_ack=True)[2] == b"kept"
    conn.close()


def test_client_close_gets_close_ok(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel()
        c.send_method(
            1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        c.expect(commands.Channel.CloseOk)
        c.send_method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        c.expect(commands.Connection.CloseOk)


def test_channel_flow(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel()
        c.send_method(1, commands.Channel.Flow(active=True))
        assert c.expect(commands.Channel.FlowOk).active is True


def test_heartbeats_are_sent(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port, timeout=5) as c:
        c.handshake(heartbeat=1)
        got = c.recv_frame()
        assert got is not None and got[1].__class__.__name__ == "Heartbeat"


def test_channel_max_reached(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        start_ok(c)
        tune_ok(c, channel_max=2)
        c.send_method(0, commands.Connection.Open(virtual_host="/"))
        c.expect(commands.Connection.OpenOk)
        c.open_channel(1)
        c.open_channel(2)
        c.send_method(3, commands.Channel.Open())
        reached = "number of channels opened (2) has reached the negotiated channel_max (2)"
        assert c.next_close() == ("connection", 530, f"NOT_ALLOWED - {reached}", 0, 0)


def test_access_request_is_answered(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port) as c:
        c.handshake()
        c.open_channel()
        c.send(frame_bytes(1, 1, struct.pack(">HH", 30, 10) + b"\x01/\x00"))
        c.sock.settimeout(2)
        data = c.sock.recv(100)
        assert data == frame_bytes(1, 1, struct.pack(">HHH", 30, 11, 1))


def test_tune_ok_with_no_channel_limit_is_dropped(broker: BrokerUnderTest) -> None:
    with RawClient(broker.host, broker.port, timeout=10) as c:
        start_ok(c)
        tune_ok(c, channel_max=0)
        assert c.next_close() is None


@pytest.mark.parametrize("padding", [3900, 4200])
def test_frames_before_tune_ok_are_held_to_the_minimum_frame_size(
    broker: BrokerUnderTest, padding: int
) -> None:
    """Until tune-ok, a frame may be at most 4096 octets (rabbit_reader's initial_frame_max,
    ?FRAME_MIN_SIZE): a start-ok with larger client properties ends the connection without
    a word, though the frame_max about to be offered is larger."""
    with RawClient(broker.host, broker.port, timeout=10) as c:
        start_ok(c, client_properties={"padding": "x" * padding})
        if padding < 4000:
            assert isinstance(c.expect(commands.Connection.Tune), commands.Connection.Tune)
        else:
            assert c.recv_frame() is None  # no tune, no close: the socket just closes
